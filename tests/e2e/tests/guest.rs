//! sbx-guest as PID 1 of real containers from the real base image: it
//! reaps, forwards SIGTERM and stops in time; a missing or failing sbx-fw
//! leaves egress blocked, the agent never started and the reason readable
//! on the host; the agent cannot touch the audit log, its records still
//! arrive, and a flood of the sink is bounded. Then the same through
//! sbx-run: list's health column and `sbx-run log` merging a refusal made
//! inside the sandbox.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sbx_e2e::{bin, docker_ready, is_root, prerequisite, sh};

/// A base-image tag of this suite's own (and of this checkout's, after
/// `$SBX_BASE_TAG`), so parallel suites do not trade images under one tag.
fn tag() -> String {
    format!("guest-e2e-{}", sbx_run::image::default_base_tag())
}
const CAPS: &[&str] = sbx_run::spec::INIT_CAPS;

fn image() -> Option<String> {
    static BUILT: OnceLock<bool> = OnceLock::new();
    let ok = *BUILT.get_or_init(|| {
        if !prerequisite(
            docker_ready() && is_root(),
            "root and a running Docker engine",
        ) {
            return false;
        }
        let out = sbx()
            .args([
                "-q",
                "build-base",
                "--bootstrap",
                "--no-ai-clis",
                "--tag",
                &tag(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "build-base: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        true
    });
    ok.then(|| format!("agent-sandbox-base:{}", tag()))
}

fn sbx() -> Command {
    let mut c = Command::new(bin("sbx-run"));
    c.env("SBX_BIN_DIR", bin("sbx-run").parent().unwrap());
    c
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A container started the way sbx-run starts one, with a host directory
/// at /run/sbx/host; removed on drop.
struct Sandbox {
    name: String,
    host: tempfile::TempDir,
}

impl Sandbox {
    fn run(tag: &str, image: &str, cmd: &[&str]) -> Self {
        Self::run_with(tag, image, &[], cmd)
    }

    fn run_with(tag: &str, image: &str, extra: &[String], cmd: &[&str]) -> Self {
        let name = format!("sbx-guest-e2e-{tag}-{}", std::process::id());
        let host = tempfile::tempdir().unwrap();
        sh(Command::new("chmod").arg("0777").arg(host.path()));
        let _ = Command::new("docker").args(["rm", "-f", &name]).output();
        let mut c = Command::new("docker");
        c.args(["run", "-d", "--name", &name, "--cap-drop", "ALL"]);
        for cap in CAPS {
            c.args(["--cap-add", cap]);
        }
        c.args(["--security-opt", "no-new-privileges", "--user", "0:0"])
            .args(["--env", "SBX_GUEST_STOP_TIMEOUT=5", "--stop-timeout", "10"])
            .arg("--mount")
            .arg(format!(
                "type=bind,source={},target=/run/sbx/host",
                host.path().display()
            ))
            .args(extra)
            .arg(image)
            .args(cmd);
        sh(&mut c);
        Self { name, host }
    }

    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = Command::new("docker")
                .args(["logs", &self.name])
                .output()
                .unwrap();
            let t = text(&o);
            if t.contains(needle) {
                return t;
            }
            assert!(
                !t.contains("sbx-guest: unhealthy"),
                "waiting for {needle:?}:\n{t}"
            );
            assert!(Instant::now() < deadline, "no {needle:?} in the log:\n{t}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `docker exec` as `user` (uid or name).
    fn exec(&self, user: &str, script: &str) -> Output {
        Command::new("docker")
            .args(["exec", "-u", user, &self.name, "sh", "-c", script])
            .output()
            .unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let p = self.host.path().join("status.json");
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.host.path().join("audit.jsonl")).unwrap_or_default()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.name])
            .output();
    }
}

const GUEST_TOML: &str = "COPY guest.toml /etc/sbx/guest.toml";

/// An image derived from the base by one Dockerfile line (and a
/// guest.toml beside it), removed when dropped.
struct Derived(String);

impl Derived {
    fn build(img: &str, tag: &str, line: &str, guest_toml: Option<&str>) -> Self {
        let name = format!("sbx-guest-e2e-{tag}:{}", std::process::id());
        let ctx = tempfile::tempdir().unwrap();
        if let Some(t) = guest_toml {
            std::fs::write(ctx.path().join("guest.toml"), t).unwrap();
        }
        std::fs::write(
            ctx.path().join("Dockerfile"),
            format!("FROM {img}\n{line}\n"),
        )
        .unwrap();
        sh(Command::new("docker")
            .args(["build", "-q", "-t", &name])
            .arg(ctx.path()));
        Self(name)
    }
}

impl Drop for Derived {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", "--no-prune", &self.0])
            .output();
    }
}

#[test]
fn pid1_reaps_orphans_forwards_sigterm_and_stops_in_time() {
    let Some(img) = image() else { return };
    // The main command traps TERM; a subshell leaves an orphan that ends.
    let s = Sandbox::run(
        "pid1",
        &img,
        &[
            "sh",
            "-c",
            "trap 'echo termed > /tmp/termed; exit 3' TERM; (sleep 0.2 &); while :; do sleep 0.1; done",
        ],
    );
    s.wait_for("sbx-guest: ready");
    let ps = s.exec("0", "ps -eo pid,user,stat,comm");
    let ps = text(&ps);
    assert!(
        ps.lines()
            .any(|l| l.split_whitespace().next() == Some("1") && l.contains("sbx-guest")),
        "{ps}"
    );
    std::thread::sleep(Duration::from_millis(700));
    let ps = text(&s.exec("0", "ps -eo stat,comm"));
    assert!(
        !ps.lines().any(|l| l.starts_with('Z')),
        "a zombie was left: {ps}"
    );
    // The agent's command: agent uid, no capability in any set, no_new_privs.
    let st = text(&s.exec(
        "0",
        "grep -E '^(Uid|Cap...|NoNewPrivs)' /proc/$(pgrep -o -x sh)/status",
    ));
    assert!(st.contains("Uid:\t1000\t1000\t1000\t1000"), "{st}");
    for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(st.contains(&format!("{k}:\t0000000000000000")), "{k}: {st}");
    }
    assert!(st.contains("NoNewPrivs:\t1"), "{st}");
    let t0 = Instant::now();
    sh(Command::new("docker").args(["stop", "--time", "10", &s.name]));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(4), "docker stop took {took:?}");
    let code =
        sh(Command::new("docker").args(["inspect", "--format", "{{.State.ExitCode}}", &s.name]));
    assert_eq!(
        code.trim(),
        "3",
        "the guest exits with the main child's status"
    );
    let cp = Command::new("docker")
        .args(["cp", &format!("{}:/tmp/termed", s.name), "-"])
        .output()
        .unwrap();
    assert!(
        cp.status.success() && String::from_utf8_lossy(&cp.stdout).contains("termed"),
        "the child got no SIGTERM"
    );
}

#[test]
fn a_missing_or_failing_firewall_keeps_egress_blocked_and_reports_why() {
    let Some(img) = image() else { return };
    for (tag, step, want) in [
        (
            "nofw",
            "rm /usr/local/bin/sbx-fw",
            "sbx-fw is missing from the image",
        ),
        (
            "badfw",
            "printf '#!/bin/sh\\necho boom >&2\\nexit 3\\n' > /usr/local/bin/sbx-fw",
            "sbx-fw init failed (exit 3): boom",
        ),
    ] {
        let derived = Derived::build(&img, tag, &format!("RUN {step}"), None);
        let s = Sandbox::run(tag, &derived.0, &["sleep", "infinity"]);
        let log = s.wait_for("sbx-guest: unhealthy:");
        assert!(log.contains(want), "{log}");
        // The reason is on the host, and `health` (the HEALTHCHECK) says it.
        let st = s.status();
        assert_eq!(st["state"], "unhealthy");
        assert!(st["reason"].as_str().unwrap().contains(want), "{st}");
        let h = s.exec("0", "sbx-guest health");
        assert_eq!(h.status.code(), Some(1));
        assert!(text(&h).contains(want), "{}", text(&h));
        // The agent's command never started; the guest stays up, blocked.
        let ps = text(&s.exec("0", "ps -eo user,comm"));
        assert!(!ps.contains("sleep"), "the command ran: {ps}");
        let rules = text(&s.exec("0", "iptables-legacy -S OUTPUT 2>/dev/null || iptables -S OUTPUT; ip6tables-legacy -S OUTPUT 2>/dev/null || ip6tables -S OUTPUT"));
        assert_eq!(rules.matches("-P OUTPUT DROP").count(), 2, "{rules}");
        // As the agent: no connection gets out (the gateway is this host).
        let gw = text(&s.exec("0", "ip route | awk '/default/ {print $3}'"));
        let probe = s.exec(
            "1000",
            &format!(
                "timeout 3 bash -c 'exec 3<>/dev/tcp/{}/9' && echo OPEN || echo CLOSED",
                gw.trim()
            ),
        );
        assert!(text(&probe).contains("CLOSED"), "{}", text(&probe));
        // The blocked start is in the sandbox's audit log.
        assert!(
            s.log().contains("\"policy\":\"guest-start\""),
            "{}",
            s.log()
        );
    }
}

/// A branch-mode sandbox (SBX_BRANCH) on a host checkout of one commit
/// (detached when asked) and an empty shelf, both the agent's.
fn branch_sandbox(tag: &str, image: &str, detach: bool) -> (tempfile::TempDir, Sandbox) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let app = dir.path().join("app");
    let shelf = dir.path().join("shelf");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&shelf).unwrap();
    let git = |args: &[&str]| {
        sh(Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
            .arg(&app)
            .args(args))
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(app.join("README"), "hi\n").unwrap();
    git(&["add", "README"]);
    git(&["commit", "-qm", "one"]);
    if detach {
        git(&["checkout", "-q", "--detach"]);
    }
    sh(Command::new("chown")
        .arg("-R")
        .arg("1000:1000")
        .arg(dir.path()));
    let s = Sandbox::run_with(
        tag,
        image,
        &[
            "--env".into(),
            "SBX_BRANCH=feat".into(),
            "--env".into(),
            "SBX_WORKSPACE=/workspace/app".into(),
            "--mount".into(),
            format!("type=bind,source={},target=/workspace/app", app.display()),
            "--mount".into(),
            format!("type=bind,source={},target=/repo-shelf", shelf.display()),
        ],
        &["sleep", "infinity"],
    );
    (dir, s)
}

/// Branch mode provisions on a thread while the firewall comes up: either
/// failing fails the start, the command never runs and egress is blocked.
/// A detached host fails provisioning after the firewall opened (its sets
/// are there): the block-everything rules are back. A failing sbx-fw with
/// a provisioning that succeeds: blocked too, the worktree made.
#[test]
fn a_branch_start_fails_closed_when_either_half_fails() {
    let Some(img) = image() else { return };
    let badfw = Derived::build(
        &img,
        "brbadfw",
        "RUN printf '#!/bin/sh\\necho boom >&2\\nexit 3\\n' > /usr/local/bin/sbx-fw",
        None,
    );
    for (tag, image, detach, want) in [
        ("brdetached", img.as_str(), true, "HEAD is detached"),
        (
            "brfw",
            badfw.0.as_str(),
            false,
            "sbx-fw init failed (exit 3): boom",
        ),
    ] {
        let (dir, s) = branch_sandbox(tag, image, detach);
        let log = s.wait_for("sbx-guest: unhealthy:");
        assert!(log.contains(want), "{tag}: {log}");
        let st = s.status();
        assert_eq!(st["state"], "unhealthy", "{tag}: {st}");
        assert!(st["reason"].as_str().unwrap().contains(want), "{tag}: {st}");
        let ps = text(&s.exec("0", "ps -eo user,comm"));
        assert!(!ps.contains("sleep"), "{tag}: the command ran: {ps}");
        // The block-everything rules alone (sbx-fw's would be more).
        let rules = text(&s.exec(
            "0",
            "iptables-legacy -S OUTPUT 2>/dev/null || iptables -S OUTPUT",
        ));
        assert!(rules.contains("-P OUTPUT DROP"), "{tag}: {rules}");
        assert_eq!(
            rules.lines().filter(|l| l.starts_with("-A OUTPUT")).count(),
            6,
            "{tag}: {rules}"
        );
        let gw = text(&s.exec("0", "ip route | awk '/default/ {print $3}'"));
        let probe = s.exec(
            "1000",
            &format!(
                "timeout 3 bash -c 'exec 3<>/dev/tcp/{}/9' && echo OPEN || echo CLOSED",
                gw.trim()
            ),
        );
        assert!(text(&probe).contains("CLOSED"), "{tag}: {}", text(&probe));
        if detach {
            // The firewall had come up meanwhile: its sets are there.
            let sets = text(&s.exec("0", "ipset -n list"));
            assert!(
                !sets.trim().is_empty(),
                "{tag}: no sets: the firewall never ran"
            );
        } else {
            // Provisioning ran to its end meanwhile.
            assert!(
                dir.path().join("shelf/worktrees/feat/README").exists(),
                "{tag}"
            );
        }
    }
}

/// Branch mode sets the masker up while provisioning runs: a secret file
/// the host creates in the workspace after the start is unreadable to the
/// agent, and the agent starts in the worktree.
#[test]
fn a_branch_start_masks_secret_files_that_appear_later() {
    let Some(img) = image() else { return };
    let (dir, s) = branch_sandbox("brmask", &img, false);
    s.wait_for("sbx-guest: ready");
    std::fs::write(dir.path().join("app/.env"), "API_KEY=hunter2\n").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let out = text(&s.exec("1000", "cat /workspace/app/.env"));
    assert!(
        !out.contains("hunter2"),
        "a late secret was readable: {out}"
    );
    // PID 1 is not dumpable (nothing may trace it), so its cwd is not
    // readable: read the agent's oldest process's, started there.
    let cwd = text(&s.exec(
        "1000",
        "for p in $(pgrep -u 1000); do readlink /proc/$p/cwd && break; done",
    ));
    assert_eq!(cwd.trim(), "/repo-shelf/worktrees/feat");
}

#[test]
fn the_agent_cannot_touch_the_audit_log_and_records_still_arrive() {
    let Some(img) = image() else { return };
    let s = Sandbox::run("audit", &img, &["sleep", "infinity"]);
    s.wait_for("sbx-guest: ready");
    // Attacks as the agent: every one must fail.
    for attack in [
        ": > /run/sbx/host/audit.jsonl",
        "echo '{}' >> /run/sbx/host/audit.jsonl",
        "rm -f /run/sbx/host/audit.jsonl",
        "chmod 0666 /run/sbx/host/audit.jsonl",
        "mv /run/sbx/host/audit.jsonl /tmp/x",
        "ls /run/sbx",
        ": > /var/log/sbx/audit.jsonl",
    ] {
        let o = s.exec("1000", attack);
        assert!(!o.status.success(), "the agent could: {attack}");
    }
    // A refusal by the git guard, as the agent: the record arrives, stamped
    // with the agent's uid by the kernel, not by the sender.
    let o = s.exec(
        "1000",
        "cd /tmp && git init -q r && cd r && SBX_AGENT=claude git commit --no-verify -m x",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.log().contains("block-no-verify") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rec = s
        .log()
        .lines()
        .find(|l| l.contains("block-no-verify"))
        .map(str::to_owned);
    let rec: serde_json::Value =
        serde_json::from_str(&rec.expect("the refusal reached the log")).unwrap();
    assert_eq!(rec["peer"]["uid"], 1000);
    assert_eq!(rec["agent"], "claude");
    let meta = std::fs::metadata(s.host.path().join("audit.jsonl")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o644));
    // A flood from the agent: bounded, counted, and the guest stays responsive.
    let flood = r#"perl -MSocket -e 'socket(S, PF_UNIX, SOCK_DGRAM, 0) or die; my $a = pack_sockaddr_un("/run/sbx-audit/audit.sock"); my $r = q({"timestamp":"x","tool":"linter","agent":"a","operation":"o","target":"flood","result":"allowed","policy":"p"}); for (1..20000) { send(S, $r, 0, $a) } for my $t ("sbx-guest", "sbx-fw", "sbx-git-guard", "tools", "sbx\xe2\x80\x8b-guest") { send(S, qq({"timestamp":"x","tool":"$t","agent":"a","operation":"o","target":"forged","result":"allowed","policy":"p"}), 0, $a) }'"#;
    let t0 = Instant::now();
    let o = s.exec("1000", flood);
    assert!(o.status.success(), "{}", text(&o));
    assert!(t0.elapsed() < Duration::from_secs(20));
    let h = s.exec("0", "sbx-guest health");
    assert!(h.status.success(), "{}", text(&h));
    std::thread::sleep(Duration::from_millis(1500));
    let log = s.log();
    let flooded = log.matches("\"target\":\"flood\"").count();
    assert!(
        (400..5000).contains(&flooded),
        "{flooded} flood records kept"
    );
    assert!(log.contains("records dropped"), "drops are counted");
    assert!(
        !log.contains("\"target\":\"forged\""),
        "a forged record of a reserved tool was accepted"
    );
    // Three flooders as the agent while the git guard refuses three
    // commits: every refusal is in the log, from the verified guard.
    let o = s.exec(
        "1000",
        r#"for i in 1 2 3; do setsid perl -MSocket -e 'socket(S, PF_UNIX, SOCK_DGRAM, 0) or die; my $a = pack_sockaddr_un("/run/sbx-audit/audit.sock"); my $end = time + 8; while (time < $end) { send(S, q({"timestamp":"x","tool":"sbx-git-guard","agent":"a","operation":"commit","target":"git commit","result":"allowed","policy":"p"}), 0, $a) }' </dev/null >/dev/null 2>&1 & done
           sleep 1; cd /tmp/r; for i in 1 2 3; do git commit --no-verify -m y$i; echo rc=$?; done"#,
    );
    assert_eq!(text(&o).matches("rc=77").count(), 3, "{}", text(&o));
    std::thread::sleep(Duration::from_secs(9));
    let log = s.log();
    let refusals: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("block-no-verify"))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(refusals.len(), 4, "{log}");
    for r in &refusals {
        assert_eq!(r["peer"]["source"], "sbx-git-guard", "{r}");
    }
}

fn repo(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join(name);
    std::fs::create_dir_all(path.join(".agent-sandbox")).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(dir.path()));
    (dir, path)
}

/// The per-repo image a test built, removed at its end.
fn rm_image(path: &Path) {
    if let Ok(p) = path.canonicalize() {
        let n = sbx_run::names::Names::new(&p, None);
        let _ = Command::new("docker")
            .args(["rmi", "-f", "--no-prune", &n.image])
            .output();
    }
}

fn sbx_in(path: &Path, args: &[&str]) -> Output {
    sbx().args(args).arg(path).output().unwrap()
}

#[test]
fn sbx_run_shows_health_and_merges_the_sandbox_log() {
    let Some(img) = image() else { return };
    let state = tempfile::tempdir().unwrap();
    let sbx_state = |c: &mut Command| {
        c.env("XDG_STATE_HOME", state.path());
    };
    let (_d, good) = repo("guest-ok");
    std::fs::write(
        good.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\n"),
    )
    .unwrap();
    let (_d2, bad) = repo("guest-nofw");
    std::fs::write(
        bad.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\nRUN rm /usr/local/bin/sbx-fw\n"),
    )
    .unwrap();
    let run = |path: &Path, args: &[&str]| {
        let mut c = sbx();
        sbx_state(&mut c);
        c.args(args).arg(path).output().unwrap()
    };
    let o = run(&good, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&bad, &["start"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("sbx-fw is missing from the image"),
        "{}",
        text(&o)
    );
    // start removed the failed container; run it again by hand to list it.
    let mut c = sbx();
    sbx_state(&mut c);
    let list = c.arg("list").output().unwrap();
    let l = text(&list);
    let line = l
        .lines()
        .find(|l| l.contains("guest-ok"))
        .unwrap_or_else(|| panic!("{l}"));
    assert!(line.contains("\thealthy"), "{line}");
    // A refusal inside the sandbox shows in `sbx-run log` on the host.
    let mut c = sbx();
    sbx_state(&mut c);
    let o = c
        .args(["exec", "-C"])
        .arg(&good)
        .args(["--", "git", "commit", "--no-verify", "-m", "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(300));
    let mut c = sbx();
    sbx_state(&mut c);
    let o = c
        .args(["log", "--blocked-only", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let rec = out
        .lines()
        .find(|l| l.contains("block-no-verify"))
        .unwrap_or_else(|| panic!("{}", text(&o)));
    let v: serde_json::Value = serde_json::from_str(rec).unwrap();
    assert_eq!(v["data"]["agent"], "git", "{rec}");
    assert!(
        v["data"]["origin"]
            .as_str()
            .unwrap()
            .starts_with("agent-sandbox-guest-ok"),
        "{rec}"
    );
    for p in [&good, &bad] {
        let _ = sbx_in(p, &["-q", "rm", "--volumes"]);
        let mut c = sbx();
        sbx_state(&mut c);
        let _ = c.args(["-q", "rm", "--volumes"]).arg(p).output();
        rm_image(p);
    }
}

/// moto's S3 server on all of this host's addresses (the sandbox reaches it
/// through its bridge at the host's docker0 address); killed on drop.
struct Moto(std::process::Child, u16);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn moto() -> Option<Moto> {
    use std::io::{Read, Write};
    let bin =
        std::env::var("SBX_MOTO_SERVER").unwrap_or_else(|_| "/opt/sbx/moto/bin/moto_server".into());
    if !prerequisite(
        Path::new(&bin).exists(),
        "moto_server (scripts/prereqs installs it)",
    ) {
        return None;
    }
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .args(["-H", "0.0.0.0", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let m = Moto(child, port);
    // moto (Python) takes seconds to start on a loaded 2-core machine.
    for _ in 0..600 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            write!(s, "PUT /sbx HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            assert!(r.starts_with("HTTP/1.1 200"), "create bucket: {r}");
            return Some(m);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("moto_server did not start");
}

#[test]
fn the_home_comes_back_from_backup_after_the_volume_is_gone() {
    let Some(img) = image() else { return };
    let Some(m) = moto() else { return };
    let gw = sh(Command::new("sh").args([
        "-c",
        "ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1",
    ]));
    let gw = gw.trim();
    assert!(!gw.is_empty(), "no docker0 address");
    let state = tempfile::tempdir().unwrap();
    let (_d, path) = repo("guest-backup");
    std::fs::write(
        path.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\n"),
    )
    .unwrap();
    // The firewall is off here: this test is about the home, and the host's
    // S3 stand-in is not an allowlisted name.
    std::fs::write(
        path.join(".agent-sandbox/config.toml"),
        "[network]\nallow-external = true\n\
         [environment]\npass = [\"AWS_ACCESS_KEY_ID\", \"AWS_SECRET_ACCESS_KEY\", \"AWS_ENDPOINT\", \"AWS_ALLOW_HTTP\", \"AWS_REGION\"]\n\
         [backup]\nurl = \"s3://sbx/home\"\ninterval = \"1s\"\n",
    )
    .unwrap();
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&path));
    let run = |args: &[&str]| {
        let mut c = sbx();
        c.env("XDG_STATE_HOME", state.path())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ENDPOINT", format!("http://{gw}:{}", m.1));
        let o = c.args(args).output().unwrap();
        (
            o.status.success(),
            text(&o),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let p = path.to_str().unwrap();
    let (ok, t, _) = run(&["start", p]);
    assert!(ok, "{t}");
    let (ok, t, _) = run(&[
        "exec",
        "-C",
        p,
        "--",
        "sh",
        "-c",
        "cd && mkdir -p work/deep && echo hello > work/deep/a.txt && chmod 0640 work/deep/a.txt \
         && printf '#!/bin/sh\\n' > run.sh && chmod 0755 run.sh && ln -s work/deep/a.txt link \
         && echo edited >> .bashrc",
    ]);
    assert!(ok, "{t}");
    // The daemon syncs on its own; stop adds the final sync either way.
    let t0 = Instant::now();
    let (ok, mut stopped, _) = run(&["stop", p]);
    assert!(ok, "{stopped}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "stop took {:?}",
        t0.elapsed()
    );
    // A final backup cut on a loaded machine is said (issue 43), and the
    // home volume keeps it: what a user does then, start and stop again.
    for _ in 0..3 {
        if !stopped.contains("the final backup did not complete") {
            break;
        }
        eprintln!("retrying the final backup: {stopped}");
        let (ok, t, _) = run(&["start", p]);
        assert!(ok, "{t}");
        let (ok, t, _) = run(&["stop", p]);
        assert!(ok, "{t}");
        stopped = t;
    }
    let names = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None);
    let (ok, t, _) = run(&["rm", "--volumes", p]);
    assert!(ok, "{t}");
    let v = Command::new("docker")
        .args(["volume", "inspect", &names.home])
        .output()
        .unwrap();
    assert!(!v.status.success(), "the home volume is still there");
    // A new container on a new home volume: the files are back.
    let (ok, started, _) = run(&["start", p]);
    assert!(ok, "{started}");
    let (ok, t, out) = run(&[
        "exec",
        "-C",
        p,
        "--",
        "sh",
        "-c",
        "cd && cat work/deep/a.txt && stat -c '%a %U' work/deep/a.txt run.sh && readlink link && tail -1 .bashrc && test -f .local/state/sbx-backup/sbx-guest-started && echo marked",
    ]);
    // A restore that failed says so in the start's warnings.
    assert!(ok, "{t}\nstop said: {stopped}\nstart said: {started}");
    if out != "hello\n640 agent\n755 agent\nwork/deep/a.txt\nedited\nmarked\n" {
        // Once seen under load: what the stop and the start said, and the
        // sandbox's log, tell a cut final backup from a failed restore.
        let (_, _, log) = run(&["log"]);
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "{out:?} / {t}\nstop said: {stopped}\nstart said: {started}\nlog, newest first:\n{}",
            tail.join("\n")
        );
    }
    let _ = run(&["rm", "--volumes", p]);
    rm_image(&path);
}

/// Issue 43: a stop whose final backup did not complete says so (what is
/// in no backup since when, that the home volume still has it), and
/// `rm --volumes` then refuses to delete that home (64, naming --force).
/// The store is frozen (SIGSTOP) so the daemon's final sync hangs until
/// the guest's deadline cuts it, as a slow store on a loaded machine does.
/// Then a first start with the store gone says loudly that the home was
/// not restored, and its paused backups keep `rm --volumes` refusing.
#[test]
fn a_final_backup_that_did_not_finish_is_said_and_keeps_the_home() {
    let Some(img) = image() else { return };
    let Some(mut m) = moto() else { return };
    let gw = sh(Command::new("sh").args([
        "-c",
        "ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1",
    ]));
    let gw = gw.trim().to_owned();
    let state = tempfile::tempdir().unwrap();
    let (_d, path) = repo("guest-cutbackup");
    std::fs::write(
        path.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\n"),
    )
    .unwrap();
    std::fs::write(
        path.join(".agent-sandbox/config.toml"),
        "[network]\nallow-external = true\n\
         [environment]\npass = [\"AWS_ACCESS_KEY_ID\", \"AWS_SECRET_ACCESS_KEY\", \"AWS_ENDPOINT\", \"AWS_ALLOW_HTTP\", \"AWS_REGION\"]\n\
         [backup]\nurl = \"s3://sbx/home\"\ninterval = \"1s\"\n",
    )
    .unwrap();
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&path));
    let port = m.1;
    let run = |args: &[&str]| {
        let mut c = sbx();
        c.env("XDG_STATE_HOME", state.path())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ENDPOINT", format!("http://{gw}:{port}"));
        let o = c.args(args).output().unwrap();
        (o.status.code(), text(&o))
    };
    let p = path.to_str().unwrap();
    let names = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None);
    let volume_there = || {
        Command::new("docker")
            .args(["volume", "inspect", &names.home])
            .output()
            .unwrap()
            .status
            .success()
    };
    let moto_signal = |sig: &str| {
        sh(Command::new("kill").args([sig, &m.0.id().to_string()]));
    };
    let (code, t) = run(&["start", p]);
    assert_eq!(code, Some(0), "{t}");
    // A completed backup first, so the stop's line has a "since".
    let (code, t) = run(&["exec", "-C", p, "--", "sbx-backup", "-q", "sync"]);
    assert_eq!(code, Some(0), "{t}");
    let (code, t) = run(&["exec", "-C", p, "--", "sh", "-c", "echo precious > ~/p.txt"]);
    assert_eq!(code, Some(0), "{t}");

    moto_signal("-STOP");
    let (code, stopped) = run(&["stop", p]);
    moto_signal("-CONT");
    assert_eq!(code, Some(0), "{stopped}");
    assert!(
        stopped.contains("the final backup did not complete")
            && stopped.contains("is in no backup")
            && stopped.contains(" since ")
            && stopped.contains(&format!("the home volume {} still has it", names.home)),
        "stop did not say its final backup was cut: {stopped}"
    );
    let (code, t) = run(&["rm", "--volumes", p]);
    assert_eq!(
        code,
        Some(64),
        "rm --volumes took a home that is in no backup: {t}"
    );
    assert!(t.contains("--force") && t.contains(&names.home), "{t}");
    assert!(volume_there(), "the refused rm removed the home volume");
    // The refusal removed nothing: the sandbox starts on that home.
    let (code, t) = run(&["start", p]);
    assert_eq!(code, Some(0), "{t}");
    let (code, t) = run(&["exec", "-C", p, "--", "cat", "/home/agent/p.txt"]);
    assert_eq!((code, t.as_str()), (Some(0), "precious\n"));
    let (code, t) = run(&["rm", "--volumes", "--force", p]);
    assert_eq!(code, Some(0), "{t}");
    assert!(!volume_there(), "rm --volumes --force kept the home volume");

    // A new home's first start with the store gone: said by `start`
    // itself, and its backups paused, so the home is kept by rm too.
    let _ = m.0.kill();
    let _ = m.0.wait();
    let (code, started) = run(&["start", p]);
    assert_eq!(code, Some(0), "{started}");
    assert!(
        started.contains("warning: home not restored"),
        "start did not say the home was not restored: {started}"
    );
    let (code, t) = run(&["stop", p]);
    assert_eq!(code, Some(0), "{t}");
    assert!(t.contains("backups are paused"), "{t}");
    let (code, t) = run(&["rm", "--volumes", p]);
    assert_eq!(code, Some(64), "{t}");
    assert!(volume_there());
    let (code, t) = run(&["rm", "--volumes", "--force", p]);
    assert_eq!(code, Some(0), "{t}");
    rm_image(&path);
}

/// A branch sandbox's home is backed up under its own prefix
/// (`<url>/branch/<branch>`): it neither starts from the main sandbox's
/// home nor takes the main sandbox's prefix over, so the main sandbox's
/// backups go on after a branch sandbox started. Each sync is explicit (a
/// stop's final sync may not finish on a loaded machine), and a sync the
/// user runs in the branch sandbox goes to the branch's prefix too.
#[test]
fn a_branch_sandbox_backs_up_to_its_own_prefix() {
    let Some(img) = image() else { return };
    let Some(m) = moto() else { return };
    let gw = sh(Command::new("sh").args([
        "-c",
        "ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1",
    ]));
    let gw = gw.trim().to_owned();
    let state = tempfile::tempdir().unwrap();
    let (_d, path) = repo("guest-brbackup");
    std::fs::write(
        path.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\n"),
    )
    .unwrap();
    std::fs::write(
        path.join(".agent-sandbox/config.toml"),
        "[network]\nallow-external = true\n\
         [environment]\npass = [\"AWS_ACCESS_KEY_ID\", \"AWS_SECRET_ACCESS_KEY\", \"AWS_ENDPOINT\", \"AWS_ALLOW_HTTP\", \"AWS_REGION\"]\n\
         [backup]\nurl = \"s3://sbx/home\"\ninterval = \"1h\"\n",
    )
    .unwrap();
    sh(Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "one",
        ])
        .current_dir(&path));
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&path));
    let aws = |c: &mut Command| {
        c.env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ENDPOINT", format!("http://{gw}:{}", m.1));
    };
    let run = |args: &[&str]| {
        let mut c = sbx();
        c.env("XDG_STATE_HOME", state.path());
        aws(&mut c);
        let o = c.args(args).output().unwrap();
        (
            o.status.success(),
            text(&o),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let p = path.to_str().unwrap();
    let step = |args: &[&str]| {
        let (ok, t, out) = run(args);
        assert!(ok, "{args:?}: {t}");
        out
    };
    step(&["start", p]);
    step(&[
        "exec",
        "-C",
        p,
        "--",
        "sh",
        "-c",
        "echo m1 > ~/main1 && sbx-backup -q sync",
    ]);
    step(&["stop", p]);
    step(&["start", "--branch", "feat", p]);
    let out = step(&[
        "exec",
        "--branch",
        "feat",
        "-C",
        p,
        "--",
        "sh",
        "-c",
        "test -e ~/main1 && echo inherited; echo f > ~/feat1 && sbx-backup -q sync",
    ]);
    assert_eq!(out, "", "the branch home started from the main sandbox's");
    step(&["stop", "--branch", "feat", p]);
    step(&["start", p]);
    step(&[
        "exec",
        "-C",
        p,
        "--",
        "sh",
        "-c",
        "echo m2 > ~/main2 && sbx-backup -q sync",
    ]);
    step(&["stop", p]);
    // On the host: each prefix restores its own home.
    let bin = bin("sbx-backup");
    let restore = |url: &str| {
        let to = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut c = Command::new(&bin);
        aws(&mut c);
        c.env("AWS_ENDPOINT", format!("http://127.0.0.1:{}", m.1));
        let o = c
            .args(["-q", "--url", url, "restore", "--to"])
            .arg(to.path().join("h"))
            .output()
            .unwrap();
        assert!(o.status.success(), "restore {url}: {}", text(&o));
        let mut names: Vec<String> = std::fs::read_dir(to.path().join("h"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("main") || n.starts_with("feat"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(restore("s3://sbx/home"), ["main1", "main2"]);
    assert_eq!(restore("s3://sbx/home/branch/feat"), ["feat1"]);
    for b in [
        &["rm", "--volumes", "--branch", "feat", p][..],
        &["rm", "--volumes", p],
    ] {
        let _ = run(b);
    }
    rm_image(&path);
}

/// The guest's flags (--entrypoint, --user, --stop-timeout, the holder's
/// --no-healthcheck, the command after the image) make the same container
/// through the engine API as through the pasted `show-run`.
#[test]
fn show_run_with_the_guest_matches_the_api_start() {
    let Some(img) = image() else { return };
    let state = tempfile::tempdir().unwrap();
    let (_d, path) = repo("guest-pasted");
    std::fs::write(
        path.join(".agent-sandbox/Dockerfile"),
        format!("FROM {img}\n"),
    )
    .unwrap();
    let names = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None);
    let run = |args: &[&str]| {
        let mut c = sbx();
        c.env("XDG_STATE_HOME", state.path()).args(args).arg(&path);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let config = |name: &str| -> serde_json::Value {
        let o = Command::new("docker")
            .args(["inspect", name])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut config = v[0]["Config"].clone();
        if let Some(env) = config["Env"].as_array_mut() {
            env.sort_by_key(|e| e.to_string());
        }
        sbx_e2e::drop_hold_env(&mut config);
        // Sources differ by design: start binds by-fd copies staged under
        // /run/sbx, which show-run's docker line cannot have.
        let mut host = v[0]["HostConfig"].clone();
        if let Some(ms) = host["Mounts"].as_array_mut() {
            for m in ms {
                if let Some(m) = m.as_object_mut() {
                    m.remove("Source");
                }
            }
        }
        serde_json::json!({"config": config, "host": host})
    };
    // A first start lets docker create the mount points it needs in the
    // workspace (a missing .husky), so both runs below see the same tree.
    run(&["-q", "start"]);
    run(&["-q", "rm"]);
    run(&["-q", "start"]);
    let started = config(&names.container);
    let holder = config(&names.holder);
    assert_eq!(
        holder["config"]["Healthcheck"]["Test"][0], "NONE",
        "{holder}"
    );
    assert_eq!(started["config"]["StopTimeout"], 30);
    assert_eq!(started["config"]["User"], "0:0");
    sh(Command::new("docker").args(["rm", "--force", &names.container]));
    let script = run(&["show-run"]);
    let mut sh_cmd = Command::new("sh");
    sh_cmd
        .env("XDG_STATE_HOME", state.path())
        .arg("-c")
        .arg(&script);
    sh(&mut sh_cmd);
    assert_eq!(config(&names.container), started);
    let mut c = sbx();
    c.env("XDG_STATE_HOME", state.path())
        .args(["-q", "rm", "--volumes"])
        .arg(&path);
    let _ = c.output();
    rm_image(&path);
}

/// Services from the image's /etc/sbx/guest.toml: an agent service without
/// capabilities, a root broker, a crash loop that backs off without
/// flooding the log, and a SIGKILLed service that comes back.
#[test]
fn services_are_supervised_with_backoff() {
    let Some(img) = image() else { return };
    let derived = Derived::build(
        &img,
        "svc",
        GUEST_TOML,
        Some(
            "[services.crashy]\ncommand = [\"sh\", \"-c\", \"echo crashy-ran >&2; exit 1\"]\n\
         [services.steady]\ncommand = [\"sleep\", \"1000\"]\n\
         [services.broker]\ncommand = [\"sleep\", \"1001\"]\nuser = \"root\"\n",
        ),
    );
    let s = Sandbox::run("svc", &derived.0, &["sleep", "infinity"]);
    s.wait_for("sbx-guest: ready");
    let who = |pattern: &str| {
        text(&s.exec(
            "0",
            &format!("ps -eo pid,user,args | grep -v grep | grep '{pattern}' || true"),
        ))
    };
    assert!(who("sleep 1000").contains("agent"), "{}", who("sleep 1000"));
    assert!(who("sleep 1001").contains("root"), "{}", who("sleep 1001"));
    let caps = text(&s.exec("0", "grep CapEff /proc/$(pgrep -f '^sleep 1000$')/status"));
    assert!(caps.contains("0000000000000000"), "{caps}");
    // SIGKILL the steady service: it comes back within a second or two.
    let old = text(&s.exec("0", "pgrep -f '^sleep 1000$'"));
    s.exec("0", "pkill -KILL -f '^sleep 1000$'");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = text(&s.exec("0", "pgrep -f '^sleep 1000$' || true"));
        if !now.trim().is_empty() && now != old {
            break;
        }
        assert!(Instant::now() < deadline, "steady did not come back");
        std::thread::sleep(Duration::from_millis(200));
    }
    // 8 s of a service that exits at once: a handful of runs, few log lines.
    std::thread::sleep(Duration::from_secs(8));
    let log = text(
        &Command::new("docker")
            .args(["logs", &s.name])
            .output()
            .unwrap(),
    );
    let runs = log.matches("crashy-ran").count();
    let notes = log.matches("service crashy ended").count();
    assert!((3..=7).contains(&runs), "{runs} runs in ~8 s:\n{log}");
    assert!(notes <= 4, "{notes} log lines");
    let z = text(&s.exec("0", "ps -eo stat | grep -c '^Z' || true"));
    assert_eq!(z.trim(), "0", "zombies");
    drop(s);
}

/// The agent starts, and the status says ready, only once the git broker
/// listens: with a broker that takes 2 s to come up, the main command's
/// very first `git` works (the guard's own wait for a missing broker is
/// 0.5 s, so it cannot cover for a guest that starts the agent early).
#[test]
fn the_agent_starts_only_after_the_git_broker_listens() {
    let Some(img) = image() else { return };
    let derived = Derived::build(
        &img,
        "ready",
        GUEST_TOML,
        Some(
            "[services.git-broker]\n\
         command = [\"sh\", \"-c\", \"sleep 2; exec setpriv --inh-caps=-all \
         --bounding-set=-all,+setuid,+setgid -- sbx-git-guard serve \
         --socket /run/sbx-git/broker.sock --git /usr/libexec/sbx/git\"]\n\
         user = \"root\"\nready_socket = \"/run/sbx-git/broker.sock\"\n",
        ),
    );
    let s = Sandbox::run(
        "ready",
        &derived.0,
        &[
            "sh",
            "-c",
            "cd /tmp && git init -q r && git -C r rev-parse --git-dir >&2 \
             && echo first-git-ok >&2 || echo first-git-failed >&2; exec sleep infinity",
        ],
    );
    let log = s.wait_for("first-git-");
    assert!(log.contains("first-git-ok"), "{log}");
    // The status went ready after the broker's 2 s, not before.
    let log = s.wait_for("sbx-guest: ready (");
    let ms: u64 = log
        .split("sbx-guest: ready (")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(ms >= 1900, "ready after {ms} ms:\n{log}");
    assert_eq!(s.status()["state"], "ready", "{}", s.status());
    drop(s);
}

/// A host directory (with `dirs`, the agent's) bound at /workspace/w as
/// the sandbox's workspace, each of `pinned` bound onto itself (as sbx-run
/// pins the parents of masked paths), the guest ready.
fn workspace_sandbox(
    tag: &str,
    img: &str,
    dirs: &[&str],
    pinned: &[&str],
) -> (tempfile::TempDir, Sandbox) {
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    for d in dirs {
        std::fs::create_dir_all(ws.path().join(d)).unwrap();
    }
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(ws.path()));
    let mut extra = vec![
        "--mount".to_string(),
        format!(
            "type=bind,source={},target=/workspace/w",
            ws.path().display()
        ),
        "--env".into(),
        "SBX_WORKSPACE=/workspace/w".into(),
    ];
    for d in pinned {
        extra.push("--mount".into());
        extra.push(format!(
            "type=bind,source={},target=/workspace/w/{d}",
            ws.path().join(d).display()
        ));
    }
    let s = Sandbox::run_with(tag, img, &extra, &["sleep", "infinity"]);
    s.wait_for("sbx-guest: ready");
    (ws, s)
}

/// A secret file the host creates after the start is unreadable to the
/// agent within a second; an allowed one stays readable.
#[test]
fn secret_files_that_appear_later_are_masked() {
    let Some(img) = image() else { return };
    let (ws, s) = workspace_sandbox("masks", &img, &["src"], &[]);
    std::fs::write(ws.path().join(".env"), "API_KEY=hunter2\n").unwrap();
    std::fs::write(ws.path().join("src/.env.local"), "DB_PASSWORD=hunter2\n").unwrap();
    std::fs::write(ws.path().join(".env.example"), "API_KEY=\n").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let o = s.exec(
        "1000",
        "cat /workspace/w/.env /workspace/w/src/.env.local; cat /workspace/w/.env.example",
    );
    let out = text(&o);
    assert!(
        !out.contains("hunter2"),
        "a late secret was readable: {out}\n{}\n{}",
        s.wait_for("sbx-guest: ready"),
        sh(Command::new("docker").args(["inspect", "--format", "{{.HostConfig.CapAdd}}", &s.name]))
    );
    assert!(
        out.contains("API_KEY="),
        "the allowed file was masked: {out}\n{}",
        text(&s.exec(
            "0",
            "ls -la /workspace/w; grep workspace /proc/self/mountinfo | cut -c1-100"
        ))
    );
    // The agent cannot take the mask off.
    let o = s.exec("1000", "umount /workspace/w/.env");
    assert!(!o.status.success());
    assert!(!text(&s.exec("1000", "cat /workspace/w/.env")).contains("hunter2"));
}

/// The host replaces a masked secret atomically, with `sed -i` and with a
/// rename into place, 20 times each, while the agent reads it in two tight
/// loops (a shell redirection and `cat`): no byte of any version reaches
/// the agent, and the path is masked again after every replace.
#[test]
fn masks_stay_when_the_host_replaces_the_secret() {
    let Some(img) = image() else { return };
    let (ws, s) = workspace_sandbox("masks-stay", &img, &["sub"], &["sub"]);
    // `sub` is bound onto itself, as sbx-run pins a masked path's parent.
    let envs = [ws.path().join(".env"), ws.path().join("sub/.env")];
    for e in &envs {
        std::fs::write(e, "SECRET-first\n").unwrap();
    }
    let masked = || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = s.exec(
                "1000",
                "cat /workspace/w/.env /workspace/w/sub/.env && echo masked",
            );
            if o.status.success() && text(&o) == "masked\n" {
                return;
            }
            assert!(Instant::now() < deadline, "not masked again: {}", text(&o));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    masked();
    // The agent's readers, as uid 1000, until the file /tmp/stop appears.
    let reader = r#"
        while [ ! -e /tmp/stop ]; do
            for f in /workspace/w/.env /workspace/w/sub/.env; do
                while IFS= read -r l; do echo "$l"; done <$f; echo .
            done
        done >/tmp/reads.sh 2>/dev/null &
        while [ ! -e /tmp/stop ]; do
            cat /workspace/w/.env; echo .; cat /workspace/w/sub/.env; echo .
        done >/tmp/reads.cat 2>/dev/null &
        wait"#;
    sh(Command::new("docker").args(["exec", "-d", "-u", "1000", &s.name, "sh", "-c", reader]));
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..20 {
        for e in &envs {
            sh(Command::new("sed")
                .arg("-i")
                .arg(format!("s/^SECRET-.*/SECRET-sed-{i}/"))
                .arg(e));
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    for i in 0..20 {
        for e in &envs {
            let tmp = e.with_extension("swp");
            std::fs::write(&tmp, format!("SECRET-mv-{i}\n")).unwrap();
            std::fs::rename(&tmp, e).unwrap();
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    for e in &envs {
        let t = std::fs::read_to_string(e).unwrap();
        assert!(t.contains("SECRET-mv-19"), "{t}");
    }
    masked();
    s.exec("1000", "touch /tmp/stop; sleep 1");
    let reads = text(&s.exec("0", "cat /tmp/reads.sh /tmp/reads.cat"));
    let tries = reads.lines().filter(|l| *l == ".").count();
    eprintln!("{tries} reads by the agent");
    assert!(tries > 100, "the readers hardly ran ({tries} reads)");
    let leaked: Vec<_> = reads.lines().filter(|l| l.contains("SECRET")).collect();
    assert!(
        leaked.is_empty(),
        "the agent read {} line(s) of the secret in {tries} reads: {:?}",
        leaked.len(),
        &leaked[..leaked.len().min(5)]
    );
}

/// A 1 MiB home volume (tmpfs-backed, the way a full disk behaves): full
/// before the start, the guest still starts the agent behind the firewall
/// and says what it could not do; filled while backups run, the daemon's
/// failures back off, the guest stays healthy, and `docker stop` is on time.
#[test]
fn a_full_home_volume_never_breaks_the_guest() {
    let Some(img) = image() else { return };
    let vol = format!("sbx-guest-e2e-fullhome-{}", std::process::id());
    struct Vol(String);
    impl Drop for Vol {
        fn drop(&mut self) {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", &self.0])
                .output();
        }
    }
    let new_volume = || {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &vol])
            .output();
        sh(Command::new("docker").args([
            "volume",
            "create",
            "--driver",
            "local",
            "--opt",
            "type=tmpfs",
            "--opt",
            "device=tmpfs",
            "--opt",
            "o=size=1m,uid=1000,gid=1000",
            &vol,
        ]));
        Vol(vol.clone())
    };
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(
        cfg.path().join("config.toml"),
        "[backup]\nurl = \"file:///var/tmp/sbx-store\"\ninterval = \"1s\"\n",
    )
    .unwrap();
    let extra = vec![
        "--mount".to_string(),
        format!("type=volume,source={vol},target=/home/agent"),
        "--mount".into(),
        format!(
            "type=bind,source={},target=/.agent-sandbox,readonly",
            cfg.path().display()
        ),
    ];
    let zombies = |s: &Sandbox| text(&s.exec("0", "ps -eo stat | grep -c '^Z' || true"));
    let egress_dropped = |s: &Sandbox| {
        let rules = text(&s.exec("0", "iptables-legacy -S OUTPUT 2>/dev/null || iptables -S OUTPUT; ip6tables-legacy -S OUTPUT 2>/dev/null || ip6tables -S OUTPUT"));
        assert_eq!(rules.matches("-P OUTPUT DROP").count(), 2, "{rules}");
    };

    // 1. Full before the first start. A tmpfs volume lives while a
    // container has it mounted: a holder fills it and keeps it.
    let _v = new_volume();
    let holder = format!("{vol}-holder");
    struct Holder(String);
    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
        }
    }
    sh(Command::new("docker")
        .args(["run", "-d", "--name", &holder, "--entrypoint", "sh"])
        .args(["--user", "1000:1000", "--mount"])
        .arg(format!("type=volume,source={vol},target=/h"))
        .arg(&img)
        .args([
            "-c",
            "dd if=/dev/zero of=/h/fill bs=64k 2>/dev/null; sleep infinity",
        ]));
    let h = Holder(holder.clone());
    let full = sh(Command::new("docker").args([
        "exec",
        &holder,
        "sh",
        "-c",
        "sleep 1; echo x > /h/x 2>/dev/null && echo room || echo full",
    ]));
    assert_eq!(full.trim(), "full");
    let s = Sandbox::run_with(
        "fullhome1",
        &img,
        &extra,
        &["sh", "-c", "echo agent-ran; sleep infinity"],
    );
    let log = s.wait_for("sbx-guest: ready");
    let st = s.status();
    assert_eq!(st["state"], "ready", "{st}");
    let warnings = st["warnings"].to_string();
    assert!(
        warnings.contains("the home volume is full"),
        "the full home went unreported: {st}\n{log}"
    );
    s.wait_for("agent-ran");
    egress_dropped(&s);
    assert!(s.exec("0", "sbx-guest health").status.success());
    assert_eq!(zombies(&s).trim(), "0");
    let t0 = Instant::now();
    sh(Command::new("docker").args(["stop", "--time", "10", &s.name]));
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "stop took {:?}",
        t0.elapsed()
    );
    drop(s);
    drop(h);

    // 2. Filled while the backup daemon runs.
    let _v = new_volume();
    let s = Sandbox::run_with("fullhome2", &img, &extra, &["sleep", "infinity"]);
    s.wait_for("sbx-guest: ready");
    assert_eq!(s.status()["state"], "ready", "{}", s.status());
    let o = s.exec(
        "1000",
        "cd && dd if=/dev/zero of=fill bs=64k 2>/dev/null; ! echo x > more",
    );
    assert!(o.status.success(), "the home did not fill: {}", text(&o));
    std::thread::sleep(Duration::from_secs(6));
    assert!(s.exec("0", "sbx-guest health").status.success());
    assert_eq!(zombies(&s).trim(), "0");
    egress_dropped(&s);
    let lines = text(
        &Command::new("docker")
            .args(["logs", &s.name])
            .output()
            .unwrap(),
    )
    .lines()
    .count();
    assert!(lines < 60, "{lines} log lines in ~6 s of a full home");
    let t0 = Instant::now();
    sh(Command::new("docker").args(["stop", "--time", "10", &s.name]));
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "stop took {:?}",
        t0.elapsed()
    );
}

/// Fresh eyes on issue 47: a home's first restore fails part-way (here
/// the store's packs are unreadable for a while; in life a network that
/// drops, a lifecycle rule undone). The agent starts anyway and works in
/// that home. The next start of the same home, with the store whole again,
/// must not restore `--force` over that work: the home is marked
/// unrestored, like one whose store was unreachable.
#[test]
fn a_failed_first_restore_never_leads_to_a_restore_over_the_agents_work() {
    let Some(img) = image() else { return };
    first_start_without_the_store(
        &img,
        "failedrestore",
        "Permission denied",
        &|store, broken| {
            let mode = if broken { "000" } else { "644" };
            sh(Command::new("find")
                .arg(store.join("packs"))
                .args(["-type", "f", "-exec", "chmod", mode, "{}", "+"]));
        },
    );
}

/// Issue 47 route 9c: the store is unreachable at a home's first start
/// (here its directory is unreadable to the agent; in life a stopped
/// server, a network down). The agent starts and works; the store comes
/// back; the next start keeps the agent's work (never restores over it)
/// and says why, and once the user has merged and deleted the mark, a
/// pass backs that work up: the home is made the prefix's owner first,
/// where its passes used to be refused as a second home's.
#[test]
fn an_unreachable_store_at_first_start_never_costs_the_agents_work() {
    let Some(img) = image() else { return };
    first_start_without_the_store(&img, "unreachable", "unavailable", &|store, broken| {
        sh(Command::new("chmod")
            .arg(if broken { "000" } else { "755" })
            .arg(store));
    });
}

/// A home backed up, then a new home whose first start finds the store
/// broken by `break_store(store, true)` (the status names `why`); the
/// agent works; `break_store(store, false)` mends it. No later start
/// restores over the work, and once the mark is deleted the work is
/// backed up: the newest snapshot restores it on the host.
fn first_start_without_the_store(
    img: &str,
    name: &str,
    why: &str,
    break_store: &dyn Fn(&Path, bool),
) {
    let vol = format!("sbx-guest-e2e-{name}-{}", std::process::id());
    struct Vol(String);
    impl Drop for Vol {
        fn drop(&mut self) {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", &self.0])
                .output();
        }
    }
    let new_volume = || {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &vol])
            .output();
        sh(Command::new("docker").args(["volume", "create", &vol]));
        Vol(vol.clone())
    };
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(
        cfg.path().join("config.toml"),
        "[backup]\nurl = \"file:///var/tmp/sbx-store\"\ninterval = \"1s\"\n",
    )
    .unwrap();
    let store = tempfile::tempdir().unwrap();
    sh(Command::new("chown").args(["1000:1000"]).arg(store.path()));
    let extra = vec![
        "--mount".to_string(),
        format!("type=volume,source={vol},target=/home/agent"),
        "--mount".into(),
        format!(
            "type=bind,source={},target=/.agent-sandbox,readonly",
            cfg.path().display()
        ),
        "--mount".into(),
        format!(
            "type=bind,source={},target=/var/tmp/sbx-store",
            store.path().display()
        ),
    ];
    let stop = |s: &Sandbox| sh(Command::new("docker").args(["stop", "--time", "10", &s.name]));
    let run = |n: u32| {
        let s = Sandbox::run_with(&format!("{name}{n}"), img, &extra, &["sleep", "infinity"]);
        s.wait_for("sbx-guest: ready");
        s
    };

    // 1. A home with a file, backed up (stop adds the final sync).
    let _v = new_volume();
    let s = run(1);
    let o = s.exec("1000", "cd && mkdir -p work && echo v1 > work/a.txt");
    assert!(o.status.success(), "{}", text(&o));
    stop(&s);
    drop(s);
    let snapshots = || {
        std::fs::read_dir(store.path().join("snapshots"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let first = snapshots();
    assert!(first > 0, "no snapshot was committed");

    // 2. A new home volume; the store fails it. The agent works there.
    let _v = new_volume();
    break_store(store.path(), true);
    let s = run(2);
    // Reported either way; what the next start does is the point.
    let warnings = s.status()["warnings"].to_string();
    assert!(
        warnings.contains(why) && warnings.contains("home not restored"),
        "{warnings}"
    );
    let o = s.exec(
        "1000",
        "cd && mkdir -p work && echo agent-work > work/a.txt",
    );
    assert!(o.status.success(), "{}", text(&o));
    stop(&s);
    drop(s);

    // 3. The store is whole again; the same home starts again.
    break_store(store.path(), false);
    let s = run(3);
    let o = s.exec("1000", "cat ~/work/a.txt");
    assert_eq!(
        text(&o),
        "agent-work\n",
        "the agent's work was restored over: {}",
        s.status()
    );
    let warnings = s.status()["warnings"].to_string();
    assert!(
        warnings.contains("no later start restores over it"),
        "{warnings}"
    );

    // 4. The user merged what they wanted and deleted the mark, as the
    // status says to; the agent worked on. The next start resumes backups
    // and still restores nothing over that work.
    let o = s.exec(
        "1000",
        "cd && rm .local/state/sbx-backup/sbx-guest-unrestored && echo merged > work/a.txt",
    );
    assert!(o.status.success(), "{}", text(&o));
    stop(&s);
    drop(s);
    let s = run(4);
    let o = s.exec("1000", "cat ~/work/a.txt");
    assert_eq!(
        text(&o),
        "merged\n",
        "the merged home was restored over: {}",
        s.status()
    );
    let warnings = s.status()["warnings"].to_string();
    assert!(!warnings.contains("not restored"), "{warnings}");
    assert!(!warnings.contains("paused"), "{warnings}");
    // Backups run again: stop's final sync at the latest commits the
    // merged home, and its newest snapshot holds the merged work.
    stop(&s);
    let after = snapshots();
    assert!(after > first, "no snapshot of the merged home");
    let host = tempfile::tempdir().unwrap();
    let o = Command::new(bin("sbx-backup"))
        .env_clear()
        .arg("--url")
        .arg(format!("file://{}", store.path().display()))
        .arg("--home")
        .arg(host.path().join("home"))
        .arg("--state-dir")
        .arg(host.path().join("state"))
        .args(["restore", "--to"])
        .arg(host.path().join("to"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(host.path().join("to/work/a.txt")).unwrap(),
        "merged\n",
        "the newest snapshot is not the merged home"
    );
}

/// `[network] mode = "proxy"`: the guest supervises sbx-fw's proxy. Killed,
/// it comes back (with backoff when it keeps dying); while it is down the
/// redirected ports lead nowhere (the agent's 443 and the CONNECT port are
/// refused), the status says unhealthy, and each end and restart is in the
/// audit log.
#[test]
fn the_firewall_proxy_is_restarted_and_everything_stays_blocked_meanwhile() {
    let Some(img) = image() else { return };
    let cfg = tempfile::tempdir().unwrap();
    let file = cfg.path().join("config.toml");
    std::fs::write(
        &file,
        "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n",
    )
    .unwrap();
    sh(Command::new("chmod").arg("0755").arg(cfg.path()));
    sh(Command::new("chmod").arg("0644").arg(&file));
    let s = Sandbox::run_with(
        "proxy",
        &img,
        &[
            "--mount".into(),
            format!(
                "type=bind,source={},target=/.agent-sandbox/config.toml,readonly",
                file.display()
            ),
        ],
        &["sleep", "infinity"],
    );
    s.wait_for("sbx-guest: ready");
    let pid = || {
        text(&s.exec("0", "cat /run/sbx-fw/proxy.pid 2>/dev/null || true"))
            .trim()
            .to_owned()
    };
    let owner = |p: &str| text(&s.exec("0", &format!("ps -o user= -p {p} || true")));
    // The proxy as the agent sees it: a CONNECT for a name not on the
    // allowlist is answered 403 by the proxy when up, refused when down.
    let connect = "exec 3<>/dev/tcp/127.0.0.1/3128 || { echo REFUSED; exit 0; }; \
                   printf 'CONNECT nope.invalid:443 HTTP/1.1\\r\\n\\r\\n' >&3; head -c 12 <&3; echo";
    let connect = format!("bash -c \"{connect}\" 2>/dev/null");
    // The agent's TLS to an outside address: redirected to the proxy
    // (accepted there, then cut), or refused outright when it is down.
    let direct = "timeout 3 bash -c 'exec 3<>/dev/tcp/198.18.0.1/443' 2>/dev/null \
                  && echo ACCEPTED || echo REFUSED";
    let first = pid();
    assert!(!first.is_empty());
    assert!(owner(&first).trim() != "root", "{}", owner(&first));
    assert!(text(&s.exec("1000", &connect)).contains("HTTP/1.1 403"));
    assert!(text(&s.exec("1000", direct)).contains("ACCEPTED"));
    let wait_new = |old: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let p = pid();
            if !p.is_empty() && p != old && !owner(&p).trim().is_empty() {
                return p;
            }
            assert!(Instant::now() < deadline, "the proxy did not come back");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Killed: back at once the first time.
    s.exec("0", &format!("kill -9 {first}"));
    let second = wait_new(&first);
    assert!(text(&s.exec("1000", &connect)).contains("HTTP/1.1 403"));
    // Killed again soon: it waits its backoff (1 s, then 2 s). Within that
    // window everything redirected is refused and the status is unhealthy.
    s.exec("0", &format!("kill -9 {second}"));
    let third = wait_new(&second);
    s.exec("0", &format!("kill -9 {third}"));
    let o = s.exec("1000", &format!("{connect}; {direct}"));
    let st = s.status();
    let out = text(&o);
    assert_eq!(out.matches("REFUSED").count(), 2, "{out}");
    assert_eq!(st["state"], "unhealthy", "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap_or("")
            .contains("firewall proxy ended"),
        "{st}"
    );
    wait_new(&third);
    assert!(text(&s.exec("1000", &connect)).contains("HTTP/1.1 403"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.status()["state"] != "ready" {
        assert!(Instant::now() < deadline, "{}", s.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = s.log();
    let records = log.matches("\"policy\":\"fw-proxy\"").count();
    assert!(
        records >= 6,
        "three ends and three restarts audited:\n{log}"
    );
    assert!(log.contains("\"operation\":\"restart\""), "{log}");
}

/// A Docker network, removed when dropped (after the containers on it).
struct Network(String);

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["network", "rm", &self.0])
            .output();
    }
}

/// On a user-defined network (every sbx sandbox's) Docker's
/// embedded DNS is a DNAT in the container's own nat table. Proxy mode's
/// redirect is a chain of sbx-fw's own beside it, so the agent's names
/// still resolve through the DNS filter, whose upstream is 127.0.0.11.
/// With the nft-backed iptables for sbx-fw, where Docker's rules are (on
/// hosts without the legacy tables that is the only choice).
#[test]
fn proxy_mode_keeps_dockers_dns_on_a_user_defined_network() {
    let Some(img) = image() else { return };
    let net = Network(format!("sbx-guest-e2e-net-{}", std::process::id()));
    let _ = Command::new("docker")
        .args(["network", "rm", &net.0])
        .output();
    sh(Command::new("docker").args(["network", "create", &net.0]));
    // Docker's DNS answers for the container's own name: allowlisted.
    let name = format!("sbx-guest-e2e-proxydns-{}", std::process::id());
    let cfg = tempfile::tempdir().unwrap();
    let file = cfg.path().join("config.toml");
    std::fs::write(
        &file,
        format!(
            "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
             allow-domains = [\"{name}\"]\n"
        ),
    )
    .unwrap();
    sh(Command::new("chmod").arg("0755").arg(cfg.path()));
    sh(Command::new("chmod").arg("0644").arg(&file));
    let s = Sandbox::run_with(
        "proxydns",
        &img,
        &[
            "--network".into(),
            net.0.clone(),
            "--env".into(),
            "SBX_FW_BACKEND=system".into(),
            "--mount".into(),
            format!(
                "type=bind,source={},target=/.agent-sandbox/config.toml,readonly",
                file.display()
            ),
        ],
        &["sleep", "infinity"],
    );
    assert_eq!(s.name, name);
    s.wait_for("sbx-guest: ready");
    let proxy = text(&s.exec("0", "cat /run/sbx-fw/proxy.pid"));
    assert!(!proxy.trim().is_empty(), "not in proxy mode");
    // The agent's resolver is the filter; its answers come from Docker's.
    let resolv = text(&s.exec("1000", "cat /etc/resolv.conf"));
    assert!(resolv.contains("nameserver 127.0.0.53"), "{resolv}");
    let o = s.exec("1000", &format!("getent hosts {name}"));
    assert!(
        o.status.success() && text(&o).contains(&name),
        "the agent cannot resolve an allowlisted name: {}\n{}",
        text(&o),
        text(&s.exec("0", "iptables -t nat -S"))
    );
    // Docker's rules are there beside ours.
    let nat = text(&s.exec("0", "iptables -t nat -S"));
    assert!(
        nat.contains("-j DOCKER_OUTPUT") && nat.contains("-j DNAT") && nat.contains("SBX-NAT"),
        "{nat}"
    );
    // The filter still refuses what is not on the list.
    let o = s.exec("1000", "getent hosts nope.invalid");
    assert!(!o.status.success(), "{}", text(&o));
    drop(s);
}
