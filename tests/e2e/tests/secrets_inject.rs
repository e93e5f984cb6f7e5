//! `[secrets]` end to end (issue 44): the real Claude Code CLI, started by
//! `sbx-run agent`, talks to a Messages API stand-in served over TLS under
//! an allowlisted test name from a container of its own on the sandbox's
//! network (its root trusted by the proxy alone, through the host-only
//! test path). The key bound to that host's `x-api-key` comes from the
//! host's environment; the stand-in must receive it while the sandbox
//! holds only the placeholder: not in any process's environment, not in
//! any file (the home volume included), not in the CLI's memory read while
//! it waits for an answer. Then, as the agent: the placeholder sent to
//! another allowlisted host stays a placeholder, and a client that does
//! not trust the sandbox CA is refused with a record naming the host.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, Standin, Started, base_image_with_clis, bin, prerequisite, sbx, sh, text};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-h44e-REAL-7c2f9d31e8a4b605";
const HOLDER: &str = "sbx-placeholder-model";
const API: &str = "api.sbx-e2e.test";
const OTHER: &str = "other.sbx-e2e.test";

/// Every record the stand-in logged (one JSON object a line).
fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A Messages API call (Claude Code adds `?beta=true`).
fn is_messages(r: &Value) -> bool {
    r["path"]
        .as_str()
        .is_some_and(|p| p.starts_with("/v1/messages"))
}

/// Which of `needles` are somewhere in `pid`'s resident memory (read from
/// the host, root with every capability: the strongest view there is),
/// searched by grep. Only writable regions with something resident are
/// read: a value the process came to hold is in a page it wrote (code and
/// read-only data come from files, which the file check covers; there is
/// no swap here to hide a page in).
fn in_memory(pid: u32, needles: &[&str]) -> Vec<bool> {
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return vec![false; needles.len()];
    };
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return vec![false; needles.len()];
    };
    let mut grep = Command::new("grep");
    grep.env("LC_ALL", "C").arg("-aoF");
    for n in needles {
        grep.arg("-e").arg(n);
    }
    let mut grep = grep
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = grep.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let mut input = grep.stdin.take().unwrap();
    let mut buf = vec![0u8; 4 << 20];
    let mut region: Option<(u64, u64)> = None;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or_default();
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            let readable = f.next().is_some_and(|p| p.starts_with("rw"))
                && !line.ends_with("[vvar]")
                && !line.ends_with("[vsyscall]");
            region = readable.then_some((a, b));
            continue;
        }
        if first != "Rss:" || f.next() == Some("0") {
            continue;
        }
        let Some((mut at, end)) = region.take() else {
            continue;
        };
        while at < end {
            let want = usize::try_from(end - at)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let Ok(n) = mem.read_at(&mut buf[..want], at) else {
                break;
            };
            if n == 0 {
                break;
            }
            std::io::Write::write_all(&mut input, &buf[..n]).unwrap();
            at += n as u64;
        }
        // Regions apart: no match spans two of them.
        std::io::Write::write_all(&mut input, b"\n").unwrap();
    }
    drop(input);
    let _ = grep.wait();
    let seen = reader.join().unwrap();
    needles
        .iter()
        .map(|n| seen.lines().any(|l| l == *n))
        .collect()
}

/// The host pids and command lines of the sandbox's processes.
fn processes(container: &str) -> Vec<(u32, String)> {
    sh(Command::new("docker").args(["top", container, "-eo", "pid,args"]))
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (pid, args) = l.trim().split_once(' ')?;
            Some((pid.parse().ok()?, args.trim().to_owned()))
        })
        .collect()
}

/// The stand-in, as a remote host: on a network of its own in a
/// public-looking range (every private one is closed to the sandbox,
/// the proxy included), joined to the sandbox's holder after init, both
/// names resolved by Docker's resolver. Port 443; `auth`: its key options.
fn run_standin(names: &sbx_run::names::Names, d: &Path, auth: &[&str]) -> Standin {
    let tag = std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into());
    let standin = Standin {
        container: format!("{}-standin", names.container),
        network: format!("{}-standin", names.container),
        holder: names.holder.clone(),
    };
    let made = (0..20).any(|i| {
        let subnet = format!("198.18.{}.0/24", (std::process::id() + i * 13) % 250);
        Command::new("docker")
            .args(["network", "create", "--subnet", &subnet, &standin.network])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(made, "no free subnet in 198.18.0.0/16 for the stand-in");
    sh(Command::new("docker").args(["network", "connect", &standin.network, &names.holder]));
    sh(Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &standin.container,
            "--network",
            &standin.network,
        ])
        .args(["--network-alias", API, "--network-alias", OTHER])
        .args(["-u", "0", "--entrypoint", "/x/sbx-msgapi"])
        .arg("-v")
        .arg(format!("{}:/x/sbx-msgapi:ro", bin("sbx-msgapi").display()))
        .arg("-v")
        .arg(format!("{}:/d", d.display()))
        .arg(format!("agent-sandbox-base:{tag}"))
        .args(["--script", "/d/script.json", "--log", "/d/log.jsonl"])
        .args([
            "--listen",
            "0.0.0.0:443",
            "--tls",
            &format!("{API},{OTHER}"),
        ])
        .arg("--tls-ca")
        .arg("/d")
        .args(auth));
    let t = Instant::now();
    while !sh(Command::new("docker").args(["logs", &standin.container])).contains("listening") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the stand-in did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    standin
}

#[test]
fn the_key_reaches_the_host_and_never_the_sandbox() {
    if !prerequisite(sbx_e2e::is_root(), "root (reading the CLI's memory)")
        || !base_image_with_clis()
    {
        return;
    }
    let repo = Repo::new("secretsinject");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    let cfg = repo.path.join(".agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
             allow-domains = [\"{API}\", \"{OTHER}\"]\n\
             [secrets]\nmodel = {{ from = \"env:ANTHROPIC_API_KEY\", host = \"{API}\", header = \"x-api-key\" }}\n"
        ),
    )
    .unwrap();
    repo.give_to_agent();
    // The stand-in's root, made before the start that hands it to the proxy.
    let d = repo.root().join("standin");
    sh(Command::new(bin("sbx-msgapi")).arg("--new-ca").arg(&d));
    let hold = d.join("release");
    std::fs::write(
        d.join("script.json"),
        json!({"turns": [{"text": "All done.", "hold_file": "/d/release"}]}).to_string(),
    )
    .unwrap();
    let host_env = |c: &mut Command| {
        c.env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", format!("https://{API}"))
            .env(sbx_core::secrets::TEST_ROOT_ENV, d.join("ca.pem"));
    };
    // Before the start: what changes in the sandbox after it is newer.
    let marker = repo.root().join("marker");
    std::fs::write(&marker, "").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut start = sbx();
    host_env(&mut start);
    let o = start
        .args(["-q", "start"])
        .arg(&repo.path)
        .output()
        .unwrap();
    let _started = Started(&repo);
    assert!(o.status.success(), "start: {}", text(&o));
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);

    let _standin = run_standin(&names, &d, &["--require-key", KEY]);
    let log = d.join("log.jsonl");

    // 1. The real CLI: its answer is held until its memory has been read.
    let mut agent = sbx();
    host_env(&mut agent);
    let mut cli = agent
        .args(["agent", "--json", "-C"])
        .arg(&repo.path)
        .arg("say hello")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !logged(&log)
        .iter()
        .any(|r| is_messages(r) && r["side"] == false)
    {
        if t.elapsed() > Duration::from_secs(60) || cli.try_wait().unwrap().is_some() {
            let _ = cli.kill();
            let o = cli.wait_with_output().unwrap();
            panic!(
                "the CLI's request never came: {:?}\n{}",
                logged(&log),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let procs = processes(&names.container);
    let mut holder_seen = false;
    for (pid, args) in &procs {
        // Every process's environment, and the CLI's memory.
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            memchr::memmem::find(&env, KEY.as_bytes()).is_none(),
            "the key is in the environment of {pid} ({args})"
        );
        if args.contains("claude") {
            let f = in_memory(*pid, &[KEY, HOLDER]);
            assert!(!f[0], "the key is in the memory of {pid} ({args})");
            holder_seen |= f[1];
        }
    }
    // The scan sees what the CLI holds: its placeholder.
    assert!(
        holder_seen,
        "no CLI process holds the placeholder: {procs:?}"
    );
    std::fs::write(&hold, "").unwrap();
    let o = cli.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "agent: {}", text(&o));
    assert!(text(&o).contains("All done."), "{}", text(&o));
    // The stand-in got the real key (it answers 401 otherwise), and only
    // on the bound host.
    let recs = logged(&log);
    assert!(
        recs.iter()
            .filter(|r| is_messages(r))
            .all(|r| r["headers"]["x-api-key"] == KEY),
        "{recs:?}"
    );

    // 2. As the agent: the placeholder to another allowlisted host, also
    //    under the bound host's Host, stays the placeholder.
    for (i, extra) in ["", &format!("-H 'Host: {API}'")].iter().enumerate() {
        let o = repo.exec(&format!(
            "curl -sk -m 20 -H 'x-api-key: {HOLDER}' {extra} https://{OTHER}/v1/models?probe={i}"
        ));
        assert!(o.status.success(), "probe {i}: {}", text(&o));
    }
    // A client that does not take the sandbox CA (one pinning its own root)
    // is refused: the handshake fails, the key never leaves.
    let o = repo.exec(&format!(
        "curl -s -m 20 --cacert /etc/ssl/certs/ca-certificates.crt.sbx-orig -H 'x-api-key: {HOLDER}' https://{API}/v1/models?probe=pinned"
    ));
    assert!(
        !o.status.success(),
        "the pinning client got through: {}",
        text(&o)
    );
    let recs = logged(&log);
    let probes: Vec<_> = recs
        .iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.contains("probe=")))
        .collect();
    assert_eq!(probes.len(), 2, "{recs:?}");
    for r in probes {
        assert_eq!(r["headers"]["x-api-key"], HOLDER, "{r}");
    }

    // 3. The key in no file: the sandbox's whole tree as its PID 1 sees
    //    it, read from the host with every capability (the home volume and
    //    the tmpfs mounts included), but /proc and /sys; the one hit is the
    //    secrets' tmpfs, the proxy's: root's alone, 0700.
    let pid1 =
        sh(Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", &names.container]));
    let root = format!("/proc/{}/root", pid1.trim());
    let pattern = repo.root().join("pattern");
    std::fs::write(&pattern, KEY).unwrap();
    // Only files whose status changed since just before the start can
    // hold a value that exists only at run time (the image's files were
    // unpacked before; a write, a copy-up or a new file sets the ctime):
    // grep reads those, not the image's gigabytes.
    let o = Command::new("sh")
        .env("LC_ALL", "C")
        .arg("-c")
        .arg(
            "find \"$1/\" \\( -path \"$1/proc\" -o -path \"$1/sys\" \\) -prune -o -type f -cnewer \"$2\" -print0 \
             | xargs -0r grep -laF -D skip -f \"$3\"",
        )
        .args(["sh", &root])
        .arg(&marker)
        .arg(&pattern)
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&o.stdout);
    let files: Vec<_> = found
        .lines()
        .map(|l| l.trim_start_matches(&root).trim_start_matches('/'))
        .collect();
    assert_eq!(files, ["run/sbx-secrets/secrets.json"], "{found}");
    let m = std::fs::metadata(format!("{root}/run/sbx-secrets")).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o700));
    let o = repo.exec("cat /run/sbx-secrets/secrets.json");
    assert!(!o.status.success(), "the agent read the secrets");

    // 4. The user on the host: the pinning client's refusal, naming the
    //    host and the rule.
    let mut records = String::new();
    for _ in 0..50 {
        let o = sbx()
            .args(["log", "--blocked-only", "--json"])
            .output()
            .unwrap();
        records = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(&names.container) && l.contains(API))
            .collect::<Vec<_>>()
            .join("\n");
        if records.contains("[secrets]") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        records.contains("[secrets] model") && records.contains("pin"),
        "no refusal naming the host and the rule:\n{records}"
    );

    // 5. A snapshot of the sandbox, exported whole (every layer under
    //    it), holds neither the key nor the sandbox CA's private key: both
    //    live on the secrets' tmpfs, which a commit does not take. (The
    //    home, which a snapshot's backup copies, was searched in 3.)
    let ca_key = std::fs::read_to_string(format!("{root}/run/sbx-secrets/ca.key")).unwrap();
    let ca_line = ca_key
        .lines()
        .find(|l| l.len() >= 40 && !l.starts_with("-----"))
        .expect("a PEM body line in the CA key")
        .to_owned();
    let o = sbx().arg("snapshot").arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "snapshot: {}", text(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert!(!id.is_empty(), "snapshot printed no id: {}", text(&o));
    let archive = repo.root().join("snapshot.tar");
    let o = sbx()
        .args(["-q", "snapshot", "export", "-o"])
        .arg(&archive)
        .arg(&id)
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "export {id}: {}", text(&o));
    std::fs::write(&pattern, format!("{KEY}\n{ca_line}\n")).unwrap();
    let o = Command::new("grep")
        .env("LC_ALL", "C")
        .args(["-caF", "-f"])
        .arg(&pattern)
        .arg(&archive)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "the key or the CA's key is in snapshot {id}"
    );
    let _ = std::fs::remove_file(&archive);
    let _ = sbx_run::snapshot::remove_image(&format!("{}-snap:{id}", names.image));
}

/// The files of the sandbox's tree (as its PID 1 sees it, read from the
/// host, `/proc` and `/sys` aside) changed since `marker` that hold
/// `needle`, relative to the root.
fn files_holding(container: &str, marker: &Path, needle: &str) -> Vec<String> {
    let pid1 = sh(Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", container]));
    let root = format!("/proc/{}/root", pid1.trim());
    let o = Command::new("sh")
        .env("LC_ALL", "C")
        .arg("-c")
        .arg(
            "find \"$1/\" \\( -path \"$1/proc\" -o -path \"$1/sys\" \\) -prune -o -type f -cnewer \"$2\" -print0 \
             | xargs -0r grep -laF -D skip -e \"$3\"",
        )
        .args(["sh", &root])
        .arg(marker)
        .arg(needle)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            l.trim_start_matches(&root)
                .trim_start_matches('/')
                .to_owned()
        })
        .collect()
}

const ACCESS: &str = "sk-ant-oat01-h44c-REAL-ACCESS-5e0b7a2c91d4";
const REFRESH: &str = "sk-ant-ort01-h44c-REAL-REFRESH-8f3a6d1b07c2";
const LOGIN_HOLDER: &str = "sbx-placeholder-claude";

/// Claude Code logged in by OAuth (`[secrets]` `claude-login:` naming the
/// host's `.credentials.json`): the real CLI's run succeeds with the
/// host's access token put into its `Authorization: Bearer`, while the
/// sandbox's CLI holds a login of placeholders: neither real token is in
/// any process's environment, the CLI's memory or any file (the home
/// volume's `.credentials.json` included; the access token only in the
/// proxy's root-only tmpfs), and a refresh with what the sandbox holds
/// is refused by the login host.
#[test]
fn an_oauth_login_stays_on_the_host() {
    if !prerequisite(sbx_e2e::is_root(), "root (reading the CLI's memory)")
        || !base_image_with_clis()
    {
        return;
    }
    let repo = Repo::new("secretsoauth");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    // The host's login, 0600, outside the workspace.
    let login_dir = repo.root().join("host-claude");
    std::fs::create_dir_all(&login_dir).unwrap();
    let login = login_dir.join(".credentials.json");
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 8 * 3600 * 1000;
    std::fs::write(
        &login,
        json!({"claudeAiOauth": {"accessToken": ACCESS, "refreshToken": REFRESH,
               "expiresAt": until, "scopes": ["user:inference", "user:profile"],
               "subscriptionType": "max"}})
        .to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&login, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cfg = repo.path.join(".agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
             allow-domains = [\"{API}\", \"{OTHER}\"]\n\
             [secrets]\nclaude = {{ from = \"claude-login:{}\", host = \"{API}\", header = \"authorization\" }}\n",
            login.display()
        ),
    )
    .unwrap();
    repo.give_to_agent();
    let d = repo.root().join("standin");
    sh(Command::new(bin("sbx-msgapi")).arg("--new-ca").arg(&d));
    let hold = d.join("release");
    std::fs::write(
        d.join("script.json"),
        json!({"turns": [{"text": "All done.", "hold_file": "/d/release"}]}).to_string(),
    )
    .unwrap();
    let host_env = |c: &mut Command| {
        c.env_remove("ANTHROPIC_API_KEY")
            .env("ANTHROPIC_BASE_URL", format!("https://{API}"))
            .env(sbx_core::secrets::TEST_ROOT_ENV, d.join("ca.pem"));
    };
    let marker = repo.root().join("marker");
    std::fs::write(&marker, "").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut start = sbx();
    host_env(&mut start);
    let o = start
        .args(["-q", "start"])
        .arg(&repo.path)
        .output()
        .unwrap();
    let _started = Started(&repo);
    assert!(o.status.success(), "start: {}", text(&o));
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);
    let _standin = run_standin(
        &names,
        &d,
        &["--require-key", ACCESS, "--refresh-token", REFRESH],
    );
    let log = d.join("log.jsonl");

    // 1. The real CLI, by its login: held until its memory is read.
    let mut agent = sbx();
    host_env(&mut agent);
    let mut cli = agent
        .args(["agent", "--json", "-C"])
        .arg(&repo.path)
        .arg("say hello")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !logged(&log)
        .iter()
        .any(|r| is_messages(r) && r["side"] == false)
    {
        if t.elapsed() > Duration::from_secs(90) || cli.try_wait().unwrap().is_some() {
            let _ = cli.kill();
            let o = cli.wait_with_output().unwrap();
            panic!(
                "the CLI's request never came: {:?}\n{}",
                logged(&log),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let procs = processes(&names.container);
    let mut holder_seen = false;
    for (pid, args) in &procs {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        for real in [ACCESS, REFRESH] {
            assert!(
                memchr::memmem::find(&env, real.as_bytes()).is_none(),
                "a real token is in the environment of {pid} ({args})"
            );
        }
        if args.contains("claude") {
            let f = in_memory(*pid, &[ACCESS, REFRESH, LOGIN_HOLDER]);
            assert!(
                !f[0] && !f[1],
                "a real token is in the memory of {pid} ({args})"
            );
            holder_seen |= f[2];
        }
    }
    assert!(
        holder_seen,
        "no CLI process holds the placeholder: {procs:?}"
    );
    std::fs::write(&hold, "").unwrap();
    let o = cli.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "agent: {}", text(&o));
    assert!(text(&o).contains("All done."), "{}", text(&o));
    let recs = logged(&log);
    let bearer = format!("Bearer {ACCESS}");
    assert!(
        recs.iter()
            .filter(|r| is_messages(r))
            .all(|r| r["headers"]["authorization"] == bearer.as_str()),
        "{recs:?}"
    );

    // 2. As the agent: its login is placeholders, and refreshing with
    //    them gets nothing (the real refresh token never came in).
    let o = repo.exec("cat ~/.claude/.credentials.json");
    let held = text(&o);
    assert!(
        held.contains(LOGIN_HOLDER) && !held.contains("REAL"),
        "{held}"
    );
    let o = repo.exec(&format!(
        "curl -s -m 20 -X POST -H 'content-type: application/json' \
         -d '{{\"grant_type\":\"refresh_token\",\"refresh_token\":\"{LOGIN_HOLDER}-refresh\"}}' \
         https://{API}/v1/oauth/token"
    ));
    assert!(text(&o).contains("invalid_grant"), "{}", text(&o));

    // 3. In no file but the proxy's tmpfs (the access token), none at all
    //    (the refresh token).
    assert_eq!(
        files_holding(&names.container, &marker, ACCESS),
        ["run/sbx-secrets/secrets.json"]
    );
    assert_eq!(
        files_holding(&names.container, &marker, REFRESH),
        Vec::<String>::new()
    );
}

const R_ACCESS: &str = "sk-ant-oat01-h44o-REAL-ACCESS-71c3e9a0b2d8";
const R_REFRESH: &str = "sk-ant-ort01-h44o-REAL-REFRESH-2d94f06a1e57";

/// The stand-in before the sandbox starts (the start itself may refresh
/// the login against it), at a fixed address the host reaches over the
/// bridge, its certificate naming that address too; the sandbox's holder
/// joins it later ([`join`]).
fn standin_first(names: &sbx_run::names::Names, d: &Path, auth: &[&str]) -> (Standin, String) {
    let tag = std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into());
    let standin = Standin {
        container: format!("{}-standin", names.container),
        network: format!("{}-standin", names.container),
        holder: names.holder.clone(),
    };
    let net = (0..20).find_map(|i| {
        let n = (std::process::id() + 7 + i * 13) % 250;
        Command::new("docker")
            .args(["network", "create", "--subnet", &format!("198.18.{n}.0/24")])
            .arg(&standin.network)
            .output()
            .is_ok_and(|o| o.status.success())
            .then_some(n)
    });
    let n = net.expect("no free subnet in 198.18.0.0/16 for the stand-in");
    let ip = format!("198.18.{n}.10");
    sh(Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &standin.container,
            "--network",
            &standin.network,
        ])
        .args([
            "--ip",
            &ip,
            "--network-alias",
            API,
            "--network-alias",
            OTHER,
        ])
        .args(["-u", "0", "--entrypoint", "/x/sbx-msgapi"])
        .arg("-v")
        .arg(format!("{}:/x/sbx-msgapi:ro", bin("sbx-msgapi").display()))
        .arg("-v")
        .arg(format!("{}:/d", d.display()))
        .arg(format!("agent-sandbox-base:{tag}"))
        .args(["--script", "/d/script.json", "--log", "/d/log.jsonl"])
        .args([
            "--listen",
            "0.0.0.0:443",
            "--tls",
            &format!("{API},{OTHER},{ip}"),
        ])
        .arg("--tls-ca")
        .arg("/d")
        .args(auth));
    let t = Instant::now();
    while !sh(Command::new("docker").args(["logs", &standin.container])).contains("listening") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the stand-in did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (standin, ip)
}

/// The token endpoint's requests, as the stand-in logged them.
fn token_requests(log: &Path) -> Vec<Value> {
    logged(log)
        .into_iter()
        .filter(|r| r["path"] == "/v1/oauth/token")
        .collect()
}

/// The host's login file's OAuth part.
fn host_login(p: &Path) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["claudeAiOauth"].clone()
}

/// A login with ten minutes left: the start refreshes it on the host
/// (the stand-in's tokens rotate: each refresh revokes the one before).
/// A run of the real CLI spans the next expiry: while the CLI waits for
/// an answer the login's file is moved a minute from its end, `sbx-run
/// agent` refreshes it on the host, and the CLI's next request carries
/// the new token (the old one is refused by then: without the refresh
/// the run fails). Every
/// refresh came from the host's address, none from the sandbox's; the
/// host's file holds the new login, 0600. Then a refresh that fails (a
/// revoked refresh token) is one line on stderr and an audit record,
/// and the proxy answers the login's requests 503 naming it, sending
/// nothing on.
#[test]
fn a_login_is_refreshed_on_the_host_during_a_run() {
    if !prerequisite(sbx_e2e::is_root(), "root (the stand-in's fixed address)")
        || !base_image_with_clis()
    {
        return;
    }
    let repo = Repo::new("secretsrefresh");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    let login_dir = repo.root().join("host-claude");
    std::fs::create_dir_all(&login_dir).unwrap();
    let login = login_dir.join(".credentials.json");
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let write_login = |access: &str, refresh: &str, until: u64| {
        std::fs::write(
            &login,
            json!({"claudeAiOauth": {"accessToken": access, "refreshToken": refresh,
                   "expiresAt": until, "scopes": ["user:inference", "user:profile"],
                   "subscriptionType": "max"}})
            .to_string(),
        )
        .unwrap();
        std::fs::set_permissions(&login, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    };
    // Ten minutes left: under the start's margin, so the start refreshes.
    write_login(R_ACCESS, R_REFRESH, now_ms() + 10 * 60 * 1000);
    let cfg = repo.path.join(".agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
             allow-domains = [\"{API}\", \"{OTHER}\"]\n\
             [secrets]\nclaude = {{ from = \"claude-login:{}\", host = \"{API}\", header = \"authorization\" }}\n",
            login.display()
        ),
    )
    .unwrap();
    repo.give_to_agent();
    let d = repo.root().join("standin");
    sh(Command::new(bin("sbx-msgapi")).arg("--new-ca").arg(&d));
    let hold = d.join("release");
    std::fs::write(
        d.join("script.json"),
        json!({"turns": [
            {"tool_use": {"name": "Bash", "input": {"command": "true", "description": "probe"}},
             "hold_file": "/d/release"},
            {"text": "All done."}
        ]})
        .to_string(),
    )
    .unwrap();
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);
    let (standin, ip) = standin_first(
        &names,
        &d,
        &[
            "--require-key",
            R_ACCESS,
            "--refresh-token",
            R_REFRESH,
            "--token-life",
            "3600",
        ],
    );
    let host_env = |c: &mut Command| {
        c.env_remove("ANTHROPIC_API_KEY")
            .env("ANTHROPIC_BASE_URL", format!("https://{API}"))
            .env(sbx_core::secrets::TEST_ROOT_ENV, d.join("ca.pem"))
            .env(
                "SBX_LOGIN_TOKEN_URL",
                format!("https://{ip}/v1/oauth/token"),
            );
    };
    let mut start = sbx();
    host_env(&mut start);
    let o = start
        .args(["-q", "start"])
        .arg(&repo.path)
        .output()
        .unwrap();
    let _started = Started(&repo);
    assert!(o.status.success(), "start: {}", text(&o));
    sh(Command::new("docker").args(["network", "connect", &standin.network, &names.holder]));
    let log = d.join("log.jsonl");
    let first = format!("{R_ACCESS}-r1");
    let second = format!("{R_ACCESS}-r2");
    // 1. The start refreshed the login on the host.
    assert_eq!(token_requests(&log).len(), 1, "{:?}", logged(&log));
    let l = host_login(&login);
    assert_eq!(l["accessToken"], first.as_str(), "{l}");
    assert_eq!(l["refreshToken"], format!("{R_REFRESH}-r1").as_str(), "{l}");
    assert_eq!(l["subscriptionType"], "max", "{l}");
    let m = std::fs::metadata(&login).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600);

    // 2. A run that spans the next refresh: its first request goes with
    //    the first token, its answer waits for the refresh, its second
    //    request must carry the second token (the first is revoked).
    let mut agent = sbx();
    host_env(&mut agent);
    let mut cli = agent
        .args(["agent", "--json", "-C"])
        .arg(&repo.path)
        .arg("run true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !logged(&log)
        .iter()
        .any(|r| is_messages(r) && r["side"] == false)
    {
        if t.elapsed() > Duration::from_secs(90) || cli.try_wait().unwrap().is_some() {
            let _ = cli.kill();
            let o = cli.wait_with_output().unwrap();
            panic!(
                "the CLI's request never came: {:?}\n{}",
                logged(&log),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The clock moved on: the login has a minute left (as its file says;
    // the refresher goes by expiresAt, as the CLI does).
    let mut l: Value = serde_json::from_str(&std::fs::read_to_string(&login).unwrap()).unwrap();
    l["claudeAiOauth"]["expiresAt"] = (now_ms() + 60 * 1000).into();
    std::fs::write(&login, l.to_string()).unwrap();
    let t = Instant::now();
    while token_requests(&log).len() < 2 {
        if t.elapsed() > Duration::from_secs(180) || cli.try_wait().unwrap().is_some() {
            let _ = cli.kill();
            let o = cli.wait_with_output().unwrap();
            panic!(
                "no refresh during the run: {:?}\n{}",
                logged(&log),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The proxy gets the token after the file is written: give it time.
    let t = Instant::now();
    while host_login(&login)["accessToken"] != second.as_str() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{}",
            host_login(&login)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&hold, "").unwrap();
    let o = cli.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "agent: {}", text(&o));
    assert!(text(&o).contains("All done."), "{}", text(&o));
    let recs = logged(&log);
    let bearers: Vec<&str> = recs
        .iter()
        .filter(|r| is_messages(r) && r["side"] == false)
        .filter_map(|r| r["headers"]["authorization"].as_str())
        .collect();
    assert_eq!(
        bearers.first().copied(),
        Some(format!("Bearer {first}").as_str()),
        "{bearers:?}"
    );
    assert_eq!(
        bearers.last().copied(),
        Some(format!("Bearer {second}").as_str()),
        "{bearers:?}"
    );
    // Every refresh from the host (the bridge's gateway), none from the
    // sandbox's address on that network.
    // Docker's default gateway, the host's address on that bridge: the
    // subnet's first.
    let gateway = format!("{}.1", ip.rsplit_once('.').unwrap().0);
    let holder_ip = sh(Command::new("docker").args([
        "inspect",
        "-f",
        &format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            standin.network
        ),
        &names.holder,
    ]));
    let peers: Vec<String> = token_requests(&log)
        .iter()
        .map(|r| r["peer"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!holder_ip.trim().is_empty());
    assert!(
        peers
            .iter()
            .all(|p| p == gateway.trim() && p != holder_ip.trim()),
        "{peers:?} (host {gateway}, sandbox {holder_ip})"
    );
    // The sandbox still holds placeholders only.
    let held = text(&repo.exec("cat ~/.claude/.credentials.json"));
    assert!(
        held.contains(LOGIN_HOLDER) && !held.contains("REAL"),
        "{held}"
    );

    // 3. A refresh that fails: the refresh token was revoked.
    write_login(&second, "revoked-refresh-token", now_ms() + 60 * 1000);
    let before = logged(&log).len();
    let mut agent = sbx();
    host_env(&mut agent);
    let mut cli = agent
        .args(["agent", "--json", "-C"])
        .arg(&repo.path)
        .arg("once more")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut records = String::new();
    while !records.contains("refreshing the login failed") {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = cli.kill();
            let o = cli.wait_with_output().unwrap();
            panic!("no failure recorded:\n{records}\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(300));
        let o = sbx()
            .args(["log", "--blocked-only", "--json"])
            .output()
            .unwrap();
        records = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(&names.container) && l.contains("login-refresh"))
            .collect::<Vec<_>>()
            .join("\n");
    }
    assert!(records.contains("invalid_grant"), "{records}");
    // The proxy knows before the record is written: ask it now.
    let o = repo.exec(&format!(
        "curl -s -m 20 -H 'authorization: Bearer {LOGIN_HOLDER}' https://{API}/v1/models?after=failure"
    ));
    let said = text(&o);
    assert!(
        said.contains("[secrets] claude") && said.contains("invalid_grant"),
        "{said}"
    );
    let _ = cli.kill();
    let o = cli.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("[secrets] claude: refreshing the login on the host failed"))
            .count(),
        1,
        "{err}"
    );
    assert!(
        !logged(&log)[before..].iter().any(|r| r["path"]
            .as_str()
            .is_some_and(|p| p.contains("after=failure"))),
        "a request went out after the failure"
    );
}
