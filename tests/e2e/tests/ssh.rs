//! `[ssh] enabled` (issue 43), with the host's real `ssh` client: the
//! project's key logs in as the agent through the Host block `sbx-run
//! ssh-config` prints, and the session is under the git guard and the masks;
//! another project's key and a stranger's key are refused (and audited);
//! without `[ssh]` there is no sshd and no published port.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, base_image, prerequisite, sbx, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

fn names(repo: &Repo) -> sbx_run::names::Names {
    sbx_run::workspace::Workspace::open(&Default::default(), Some(repo.path.clone()))
        .map(|w| w.names)
        .unwrap()
}

/// A repository with one commit and `config`, its sandbox started.
fn repo_with(name: &str, config: &str) -> Repo {
    let repo = Repo::new(name);
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    std::fs::write(repo.path.join(".env"), "TOKEN=host-secret\n").unwrap();
    repo.git(&["add", ".gitignore"]);
    repo.git(&["commit", "-qm", "base"]);
    let o = run(&repo, &["-q", "init"]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(repo.path.join(".agent-sandbox/config.toml"), config).unwrap();
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "start: {}", text(&o));
    repo
}

/// `sbx-run ssh-config`'s block in a file of its own, and its Host name.
fn ssh_config(repo: &Repo, dir: &Path) -> (PathBuf, String) {
    let o = run(repo, &["ssh-config"]);
    assert!(o.status.success(), "ssh-config: {}", text(&o));
    let block = String::from_utf8(o.stdout).unwrap();
    let host = block
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Host "))
        .expect("a Host line")
        .to_owned();
    for key in [
        "HostName 127.0.0.1",
        "User agent",
        "StrictHostKeyChecking yes",
        "IdentitiesOnly yes",
    ] {
        assert!(block.contains(key), "{key} missing:\n{block}");
    }
    let path = dir.join(format!("{host}.conf"));
    std::fs::write(&path, &block).unwrap();
    (path, host)
}

/// One value of a Host block.
fn value(block: &Path, key: &str) -> String {
    std::fs::read_to_string(block)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key} ")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{key} not in the block"))
}

/// The real ssh client, batch mode, a config file and nothing else.
fn ssh(config: &Path, args: &[&str]) -> Output {
    Command::new("ssh")
        .args(["-F"])
        .arg(config)
        .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=20"])
        .args(args)
        .output()
        .unwrap()
}

/// Poll the sandbox's audit log until `pred` holds for one of its JSON
/// lines (generous: the guest writes sshd's lines as they come).
fn audited(repo: &Repo, pred: impl Fn(&serde_json::Value) -> bool) -> bool {
    let by = Instant::now() + Duration::from_secs(30);
    loop {
        let file = sbx_run::spec::host_dir(&names(repo).container).join("audit.jsonl");
        let o = sbx()
            .args(["--json", "log", "--file"])
            .arg(&file)
            .output()
            .unwrap();
        let hit = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| pred(&v["data"]) || pred(&v));
        if hit || Instant::now() > by {
            return hit;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn ssh_ready() -> bool {
    base_image()
        && prerequisite(
            Command::new("ssh").arg("-V").output().is_ok()
                && Command::new("ssh-keygen").arg("-?").output().is_ok(),
            "OpenSSH's client (ssh, ssh-keygen) on the host",
        )
}

#[test]
fn the_projects_key_logs_in_as_the_agent_under_the_guards_and_no_other_key_does() {
    if !ssh_ready() {
        return;
    }
    let on = "[ssh]\nenabled = true\n";
    let a = repo_with("ssh-a", on);
    let b = repo_with("ssh-b", on);
    let tmp = tempfile::tempdir().unwrap();
    let (conf_a, host_a) = ssh_config(&a, tmp.path());
    let (conf_b, host_b) = ssh_config(&b, tmp.path());
    assert_ne!(value(&conf_a, "Port"), value(&conf_b, "Port"));

    // In as the agent, with the config an IDE would use.
    let o = ssh(&conf_a, &[&host_a, "id -un; id -u; echo $SBX_AGENT"]);
    assert!(
        o.status.success(),
        "login with the project's key: {}",
        text(&o)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "agent\n1000\nssh\n");
    // sbx-run ssh, the same way in, passes the command's status through.
    let o = sbx()
        .args(["ssh", "-C"])
        .arg(&a.path)
        .args(["--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));

    // The masks: the workspace's .env reads empty over ssh as well.
    let o = ssh(&conf_a, &[&host_a, "cat /workspace/ssh-a/.env; echo end"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "end\n", "{}", text(&o));

    // The git guard: --no-verify over ssh is refused, nothing is committed;
    // a commit the hooks see goes through.
    let head = a.git(&["rev-parse", "HEAD"]);
    let commit = |flags: &str| {
        ssh(
            &conf_a,
            &[
                &host_a,
                &format!(
                    "cd /workspace/ssh-a && git -c user.name=a -c user.email=a@b commit -q --allow-empty {flags} -m via-ssh"
                ),
            ],
        )
    };
    let o = commit("--no-verify");
    assert!(!o.status.success(), "--no-verify over ssh went through");
    assert!(
        text(&o).contains("no-verify"),
        "not the guard's refusal: {}",
        text(&o)
    );
    assert_eq!(a.git(&["rev-parse", "HEAD"]), head);
    let o = commit("");
    assert!(o.status.success(), "a hooked commit over ssh: {}", text(&o));
    assert_ne!(a.git(&["rev-parse", "HEAD"]), head);

    // Sessions are in the audit log, start and end.
    assert!(audited(&a, |v| v["operation"] == "ssh-session-start"
        && v["tool"] == "sshd"));
    assert!(audited(&a, |v| v["operation"] == "ssh-session-end"));

    // A's key at B's sshd (B's host key pinned): refused. B's block with
    // its IdentityFile swapped (ssh adds identities, it does not replace).
    let with_key = |key: &str| {
        let block: String = std::fs::read_to_string(&conf_b)
            .unwrap()
            .lines()
            .map(|l| match l.trim().starts_with("IdentityFile ") {
                true => format!("  IdentityFile {key}\n"),
                false => format!("{l}\n"),
            })
            .collect();
        let conf = tmp.path().join("swapped.conf");
        std::fs::write(&conf, block).unwrap();
        ssh(&conf, &[&host_b, "id -un"])
    };
    let o = with_key(&value(&conf_a, "IdentityFile"));
    assert_eq!(o.status.code(), Some(255), "A's key into B: {}", text(&o));
    assert!(text(&o).contains("Permission denied"), "{}", text(&o));
    // A key of no project at all: refused.
    let stranger = tmp.path().join("stranger");
    let k = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .output()
        .unwrap();
    assert!(k.status.success(), "{}", text(&k));
    let o = with_key(stranger.to_str().unwrap());
    assert_eq!(o.status.code(), Some(255), "a stranger's key: {}", text(&o));
    // B's own key still works (so the refusals above were the keys').
    let o = ssh(&conf_b, &[&host_b, "id -un"]);
    assert!(o.status.success(), "B's own key: {}", text(&o));
    assert!(audited(&b, |v| v["operation"] == "ssh-login"
        && v["result"] == "blocked"));

    // The private key is the host's file, shown on demand, 0600.
    let o = run(&a, &["ssh-key"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{}",
        text(&o)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(value(&conf_a, "IdentityFile"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

#[test]
fn without_ssh_there_is_no_sshd_and_no_published_port() {
    if !ssh_ready() {
        return;
    }
    let c = repo_with("ssh-off", "");
    let n = names(&c);
    let o = Command::new("docker")
        .args(["port", &n.holder])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("2222"),
        "a published ssh port: {}",
        text(&o)
    );
    let o = c.exec("ps -eo comm; ls /run/sbx-ssh 2>&1");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.lines().any(|l| l == "sshd"), "sshd runs:\n{out}");
    assert!(out.contains("No such file"), "{out}");
    let o = sbx()
        .args(["ssh", "-C"])
        .arg(&c.path)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("[ssh] is off"), "{}", text(&o));
}
