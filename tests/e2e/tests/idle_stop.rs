//! `[lifecycle] idle-stop` (issue 43), on one sandbox: while a terminal
//! session is open it stays up however long nothing else happens; once
//! nothing runs it makes its final backup and stops by itself, and the
//! host sees `stopped (idle)` with the time.
#![forbid(unsafe_code)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, base_image, bin, sbx, text};

const IDLE: Duration = Duration::from_secs(3);

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

#[test]
fn an_idle_sandbox_backs_up_and_stops_and_an_open_terminal_keeps_it_up() {
    if !base_image() {
        return;
    }
    let repo = Repo::initialised("idle");
    // The store on its history volume; an hour's interval, so only the final
    // sync can hold what is written last.
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        format!(
            "[lifecycle]\nidle-stop = \"{}s\"\n[backup]\nurl = \"file:///commandhistory/idle-store\"\ninterval = \"1h\"\n",
            IDLE.as_secs()
        ),
    )
    .unwrap();
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let name = sbx_run::workspace::Workspace::open(&Default::default(), Some(repo.path.clone()))
        .map(|w| w.names.container)
        .unwrap();

    // A terminal (a pty from the guest) open over twice the idle time, with no
    // input and no CPU: the sandbox stays up all along.
    let script = format!(
        "{} exec -C {} -- sh -c 'tty; sleep {}'",
        bin("sbx-run").display(),
        repo.path.display(),
        IDLE.as_secs() * 2 + 1
    );
    let mut term = Command::new("script")
        .args(["-qec", &script, "/dev/null"])
        .env("SBX_BIN_DIR", bin("sbx-run").parent().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        assert!(
            sbx_e2e::container_running(&name),
            "stopped while a terminal was open"
        );
        if term.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let o = term.wait_with_output().unwrap();
    assert!(
        o.status.success() && text(&o).contains("/dev/pts/"),
        "{}",
        text(&o)
    );

    // Then the last words, and nothing: it stops by itself, not before
    // the idle time, after a final backup.
    let o = repo.exec("echo last-words > ~/note");
    assert!(o.status.success(), "{}", text(&o));
    let t0 = Instant::now();
    while sbx_e2e::container_running(&name) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "still running after {:?} idle",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = t0.elapsed();
    eprintln!("idle stop {took:?} after the last exec (idle-stop {IDLE:?})");
    assert!(
        took >= IDLE - Duration::from_millis(500),
        "stopped after {took:?}"
    );
    let host_dir = sbx_run::spec::host_dir(&name);
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(host_dir.join("status.json")).unwrap())
            .unwrap();
    assert_eq!(
        (&st["state"], &st["reason"]),
        (&"stopped".into(), &"idle".into()),
        "{st}"
    );
    let audit = std::fs::read_to_string(host_dir.join("audit.jsonl")).unwrap_or_default();
    assert!(audit.contains(r#""operation":"idle-stop""#), "{audit}");
    let o = sbx().args(["list"]).output().unwrap();
    let line = text(&o)
        .lines()
        .find(|l| l.starts_with(&name))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(line.contains("stopped (idle since 20"), "{}", text(&o));

    // The final backup holds the last words: restored on the host.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = sbx_e2e::restore_from_container(&name, "/commandhistory/idle-store", tmp.path());
    assert_eq!(
        std::fs::read_to_string(out.join("note")).unwrap(),
        "last-words\n"
    );

    // `start` brings it back, with its home, and it is ready again.
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = repo.exec("cat ~/note");
    assert_eq!(text(&o).trim(), "last-words", "{}", text(&o));
    let _ = run(&repo, &["rm"]);
}
