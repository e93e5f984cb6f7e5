//! Issue 37's last tests, on one sandbox: `sbx-run login` driven through a
//! pseudo-terminal against a stand-in CLI (the credential lands in the
//! machine's store only, never where a running sandbox's agent can read
//! it, and reaches the workspace at its next start), and the guest's hold
//! (a sandbox the engine started without sbx-run, which checks its mounts
//! first, runs nothing through the guest API until `sbx-run restart`).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{base_image, bin, plain_repo, sbx, text};

/// A volume removed when dropped.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.0])
            .output();
    }
}

/// An image tag removed when dropped.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["image", "rm", "--no-prune", &self.0])
            .output();
    }
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// `claude /login`'s stand-in: it wants a terminal on both ends (as the
/// real one does), asks for a code and writes the credential the way the
/// real CLI does (0600 under ~/.claude).
const STAND_IN: &str = r#"#!/bin/sh
[ "$1" = /login ] || exit 64
if [ ! -t 0 ] || [ ! -t 1 ]; then echo "stand-in: not a terminal" >&2; exit 9; fi
printf 'Paste code here if prompted > '
IFS= read -r code
umask 077
mkdir -p "$HOME/.claude"
printf '{"claudeAiOauth":{"accessToken":"%s"}}' "$code" > "$HOME/.claude/.credentials.json"
echo "Login successful."
"#;

/// The base image with the stand-in as `claude`, under its own tag.
fn stand_in_image(base_tag: &str) -> Image {
    let tag = format!("{base_tag}-a37f-login-{}", std::process::id());
    let ctx = tempfile::tempdir_in("/var/tmp").unwrap();
    let script = ctx.path().join("claude");
    std::fs::write(&script, STAND_IN).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM agent-sandbox-base:{base_tag}\nCOPY claude /usr/local/bin/claude\n"),
    )
    .unwrap();
    let image = Image(format!("agent-sandbox-base:{tag}"));
    let o = Command::new("docker")
        .args(["build", "-q", "-t", &image.0])
        .arg(ctx.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "stand-in image: {}", text(&o));
    image
}

/// The store's credential file, as root sees it: "MODE UID CONTENT".
fn in_store(store: &str) -> String {
    let o = Command::new("docker")
        .args(["run", "--rm", "--user", "0", "--network", "none", "--mount"])
        .arg(format!("type=volume,source={store},target=/v"))
        .args([
            "--entrypoint",
            "/bin/sh",
            &format!("agent-sandbox-base:{}", sbx_run::image::default_base_tag()),
            "-c",
            "stat -c '%a %u' /v/.credentials.json && cat /v/.credentials.json",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn login_through_a_pty_and_the_guest_hold() {
    if !base_image() {
        return;
    }
    let started = Instant::now();
    let id = std::process::id();
    let store = Volume(format!("sbx-test-a37f-claude-{id}"));
    let codex = Volume(format!("sbx-test-a37f-codex-{id}"));
    let r = plain_repo("a37f-login");
    r.give_to_agent();
    let run = |args: &[&str]| {
        sbx()
            .args(args)
            .arg(&r.path)
            .env("SBX_CLAUDE_VOLUME", &store.0)
            .env("SBX_CODEX_VOLUME", &codex.0)
            .output()
            .unwrap()
    };
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let base_tag = sbx_run::image::default_base_tag();
    let image = stand_in_image(&base_tag);

    // The user logs in, at a terminal: `script` gives sbx-run a pty, as a
    // shell would.
    let token = format!("tok-a37f-{id}");
    let cmd = format!("'{}' login --cli claude", bin("sbx-run").display());
    let mut login = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env("SBX_CLAUDE_VOLUME", &store.0)
        .env("SBX_CODEX_VOLUME", &codex.0)
        .env("SBX_BASE_TAG", image.0.split_once(':').unwrap().1)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = login.stdin.take().unwrap();
    input.write_all(format!("{token}\n").as_bytes()).unwrap();
    let o = login.wait_with_output().unwrap();
    drop(input);
    assert!(o.status.success(), "login: {}", text(&o));
    assert!(text(&o).contains("Login successful"), "{}", text(&o));
    // It landed in the store, the agent's (the uid the sync copies as),
    // 0600.
    let held = in_store(&store.0);
    assert!(
        held.starts_with("600 1000\n") && held.contains(&token),
        "the store: {held:?}"
    );
    // The running sandbox's agent cannot read it anywhere while the store
    // holds it: not in its ~/.claude, not in any mount.
    let o = r.exec(&format!(
        "grep -rl {token} ~ /run /tmp /mnt /media 2>/dev/null; \
         grep -c {store} /proc/self/mountinfo; true",
        store = store.0
    ));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "0\n",
        "the agent reads the login: {}",
        text(&o)
    );

    // The guest's hold: the engine starts the sandbox again without
    // sbx-run (`docker restart`, or a `docker start` after a reboot), so
    // nobody checked its mounts. Its guest holds the agent's processes and
    // the API refuses every exec and copy until `sbx-run restart`.
    let names = sbx_run::names::Names::new(&r.path.canonicalize().unwrap(), None);
    // `start` held it once already: wait for the next hold.
    let holds = || {
        text(&docker(&["logs", &names.container]))
            .matches(sbx_core::guestapi::HELD_LINE)
            .count()
    };
    let before = holds();
    let o = docker(&["restart", "--time", "1", &names.container]);
    assert!(o.status.success(), "docker restart: {}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if holds() > before {
            break;
        }
        let logs = docker(&["logs", &names.container]);
        assert!(Instant::now() < deadline, "never held: {}", text(&logs));
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = r.exec("echo ran-while-held; touch /home/agent/ran");
    assert!(!o.status.success(), "exec while held: {}", text(&o));
    assert!(!text(&o).contains("ran-while-held"), "{}", text(&o));
    assert!(
        text(&o).contains("waits for sbx-run's check of its mounts"),
        "{}",
        text(&o)
    );
    let out = tempfile::tempdir_in("/var/tmp").unwrap();
    let dest = out.path().join("got");
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&r.path)
        .arg(":/etc/hostname")
        .arg(&dest)
        .output()
        .unwrap();
    assert!(!o.status.success(), "cp while held: {}", text(&o));
    assert!(!dest.exists(), "cp wrote while held");
    // Through the API itself: only Identify, Health and Release answer.
    let sock = sbx_core::guestapi::socket_in(&sbx_run::spec::host_dir(&names.container));
    let mut c = sbx_core::guestapi::connect(&sock).unwrap();
    let e = c
        .read_to(
            "/etc/hostname",
            sbx_core::guestapi::User::Root,
            &mut Vec::new(),
        )
        .expect_err("a read while held");
    assert!(e.to_string().contains("check of its mounts"), "{e}");

    // `sbx-run restart`: checked, released, and the store's login is now
    // the workspace's, the agent's own file.
    let o = run(&["restart"]);
    assert!(o.status.success(), "restart: {}", text(&o));
    let o = r.exec("stat -c '%a %U' ~/.claude/.credentials.json; cat ~/.claude/.credentials.json; test ! -e ~/ran");
    assert!(o.status.success(), "{}", text(&o));
    let got = String::from_utf8_lossy(&o.stdout);
    assert!(
        got.starts_with("600 agent\n") && got.contains(&token),
        "{got}"
    );
    let _ = run(&["-q", "rm", "--volumes"]);
    eprintln!("took {:?}", started.elapsed());
}
