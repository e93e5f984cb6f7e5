//! The guest's host API in real sandboxes from the real base image: exec
//! through `sbx-run exec` without any docker command, codes and signals as
//! a shell reports them, a PTY that follows resizes, cp round trips
//! (binary, large, directories, tar streams), re-attach after a dropped
//! client, bad frames against the real guest with its process, zombie and
//! descriptor counts unchanged, the agent unable to open the socket, and a
//! failed firewall start readable through `health`.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sbx_core::guestapi::{
    self as proto, Client, Control, ExecReq, ExitMsg, Kind, Reply, Request, Winsize,
};
use sbx_e2e::{base_image, sbx, sh, text};

struct Repo {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Repo {
    fn new(name: &str) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
        std::fs::write(path.join("README"), "hi\n").unwrap();
        sh(Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(dir.path()));
        Self { _dir: dir, path }
    }

    fn sbx(&self, args: &[&str]) -> Output {
        let mut c = sbx();
        let (first, rest) = args.split_first().unwrap();
        c.arg(first).arg("-C").arg(&self.path).args(rest);
        c.output().unwrap()
    }

    fn names(&self) -> sbx_run::names::Names {
        sbx_run::names::Names::new(&self.path.canonicalize().unwrap(), None)
    }

    fn socket(&self) -> PathBuf {
        proto::socket_in(&sbx_run::spec::host_dir(&self.names().container))
    }

    fn client(&self) -> Client<UnixStream> {
        proto::connect(&self.socket()).unwrap()
    }

    fn docker_exec(&self, user: &str, script: &str) -> Output {
        Command::new("docker")
            .args([
                "exec",
                "-u",
                user,
                &self.names().container,
                "sh",
                "-c",
                script,
            ])
            .output()
            .unwrap()
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = sbx()
            .args(["-q", "rm", "--volumes", "-C"])
            .arg(&self.path)
            .output();
        // rm keeps the per-repo image; each run's temp path names a new one.
        let _ = Command::new("docker")
            .args(["image", "rm", "--no-prune", &self.names().image])
            .output();
    }
}

fn finish(c: &mut Client<UnixStream>) -> (Vec<u8>, ExitMsg) {
    let mut out = Vec::new();
    loop {
        match c.frame().unwrap() {
            (Kind::Stdout | Kind::Stderr, d) => out.extend(d),
            (Kind::Exit, p) => return (out, proto::parse("exit", &p).unwrap()),
            f => panic!("{f:?}"),
        }
    }
}

/// The guest's process, zombie and descriptor counts, seen as root.
fn guest_counts(repo: &Repo) -> (usize, usize, usize) {
    let o = repo.docker_exec(
        "0",
        "ls /proc/1/fd | wc -l; ls /proc/1/task | wc -l; grep -l '^PPid:\\s*1$' /proc/[0-9]*/status 2>/dev/null | wc -l; grep -l '^State:\\s*Z' /proc/[0-9]*/status 2>/dev/null | wc -l",
    );
    let n: Vec<usize> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    // Our own docker exec's shell is a child of the runtime, not of PID 1.
    assert_eq!(n[3], 0, "zombies: {}", text(&o));
    (n[0], n[1], n[2])
}

#[test]
fn guest_api_in_a_real_sandbox() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("api app");
    let o = repo.sbx(&["start"]);
    assert!(o.status.success(), "start: {}", text(&o));

    // The agent cannot open the socket, by any path; root (as a control,
    // so the probe itself is known to work) can.
    let probe = "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\\n\"; print \"connected\\n\"' /run/sbx/host/guest.sock";
    let o = repo.docker_exec("0", probe);
    assert!(text(&o).contains("connected"), "root probe: {}", text(&o));
    let o = repo.docker_exec("agent", probe);
    assert!(
        !text(&o).contains("connected"),
        "the agent connected: {}",
        text(&o)
    );
    assert!(text(&o).contains("Permission denied"), "{}", text(&o));
    // The socket: the invoking user's, 0600, inside root's 0700 /run/sbx.
    let sock = repo.socket();
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600, "{}", sock.display());
    let o = repo.sbx(&["show-run"]);
    assert!(
        text(&o).contains(&format!("# guest API: {}", sock.display())),
        "{}",
        text(&o)
    );

    // exec without docker: a docker that leaves a mark if it is called.
    let fake = tempfile::tempdir().unwrap();
    let mark = fake.path().join("called");
    let fake_docker = fake.path().join("docker");
    std::fs::write(
        &fake_docker,
        format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake_docker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = sbx()
        .env("SBX_DOCKER", &fake_docker)
        .args(["exec", "-C"])
        .arg(&repo.path)
        .args(["--", "sh", "-c", "id -u; pwd; echo err >&2; exit 7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1000\n/workspace/api app\n"
    );
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
    assert!(
        !mark.exists(),
        "the fast path ran docker: {:?}",
        std::fs::read_to_string(&mark)
    );

    // Nor through sbx-run exec (the agent's own view).
    let probe = "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\\n\"; print \"connected\\n\"' /run/sbx/host/guest.sock";
    let o = repo.sbx(&["exec", "--", "sh", "-c", probe]);
    assert!(
        !text(&o).contains("connected"),
        "the agent connected via exec: {}",
        text(&o)
    );

    // Codes as a shell reports them.
    for (script, code) in [
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
        ("exit 0", 0),
    ] {
        let o = repo.sbx(&["exec", "--", "sh", "-c", script]);
        assert_eq!(o.status.code(), Some(code), "{script}: {}", text(&o));
    }
    let o = repo.sbx(&["exec", "--", "no-such-cmd-sbx"]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    assert!(
        text(&o).contains("no-such-cmd-sbx: command not found"),
        "{}",
        text(&o)
    );
    let o = repo.sbx(&["exec", "--", "/etc/hostname"]);
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    // stdin through exec, binary-safe.
    let data: Vec<u8> = (0..4_000_000u32).map(|i| (i * 31 % 256) as u8).collect();
    let mut child = sbx()
        .args(["exec", "-C"])
        .arg(&repo.path)
        .args(["--", "sha256sum"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        i.write_all(&data).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let local = sh(Command::new("sh")
        .arg("-c")
        .arg(format!("head -c {} /dev/stdin | sha256sum", data.len()))
        .stdin(
            std::fs::File::open({
                let p = fake.path().join("data");
                std::fs::write(&p, &data).unwrap();
                p
            })
            .unwrap(),
        ));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).split_whitespace().next(),
        local.split_whitespace().next()
    );

    // cp: a large binary file both ways, a directory both ways, tar streams.
    let big = fake.path().join("big.bin");
    let blob: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&big, &blob).unwrap();
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&big)
        .arg(":/tmp/big.bin")
        .output()
        .unwrap();
    assert!(o.status.success(), "cp in: {}", text(&o));
    let owner = text(&repo.docker_exec("0", "stat -c %u /tmp/big.bin"));
    assert_eq!(owner.trim(), "1000", "cp writes as the agent");
    let back = fake.path().join("back.bin");
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(":/tmp/big.bin")
        .arg(&back)
        .output()
        .unwrap();
    assert!(o.status.success(), "cp out: {}", text(&o));
    assert!(
        std::fs::read(&back).unwrap() == blob,
        "cp round trip differs"
    );
    let tree = fake.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::write(tree.join("a/b/x"), b"\x00\x01bin").unwrap();
    std::fs::write(tree.join("top"), b"top").unwrap();
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&tree)
        .arg(":/home/agent/tree")
        .output()
        .unwrap();
    assert!(o.status.success(), "cp dir in: {}", text(&o));
    let out_dir = fake.path().join("out");
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(":/home/agent/tree")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "cp dir out: {}", text(&o));
    assert_eq!(
        std::fs::read(out_dir.join("a/b/x")).unwrap(),
        b"\x00\x01bin"
    );
    assert_eq!(std::fs::read(out_dir.join("top")).unwrap(), b"top");
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .args([":/home/agent/tree", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "cp to -: {}", text(&o));
    let listing = sh(Command::new("sh").arg("-c").arg("tar -t -f -").stdin({
        let p = fake.path().join("t.tar");
        std::fs::write(&p, &o.stdout).unwrap();
        std::fs::File::open(p).unwrap()
    }));
    assert!(listing.contains("tree/a/b/x"), "{listing}");
    // An escape through cp is refused, with nothing written.
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&big)
        .arg(":/etc/evil")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("outside the allowed roots"),
        "{}",
        text(&o)
    );

    // PTY with a resize, through the API.
    let mut c = repo.client();
    c.send(&Request::Exec(ExecReq {
        argv: ["sh", "-c", "stty size; read x; stty size"]
            .map(String::from)
            .to_vec(),
        tty: Some(Winsize { rows: 24, cols: 80 }),
        ..Default::default()
    }))
    .unwrap();
    c.reply().unwrap();
    let mut out = Vec::new();
    while !String::from_utf8_lossy(&out).contains("24 80") {
        if let (Kind::Stdout, d) = c.frame().unwrap() {
            out.extend(d)
        }
    }
    proto::write_json(
        &mut c.stream,
        Kind::Control,
        &Control::Resize(Winsize {
            rows: 50,
            cols: 132,
        }),
    )
    .unwrap();
    proto::write_frame(&mut c.stream, Kind::Stdin, b"\r").unwrap();
    let (rest, x) = finish(&mut c);
    assert_eq!(x.status, 0);
    assert!(
        String::from_utf8_lossy(&rest).contains("50 132"),
        "{rest:?}"
    );

    // Re-attach after a dropped client.
    let mut c = repo.client();
    c.send(&Request::Exec(ExecReq {
        argv: ["sh", "-c", "read x; echo got $x"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    }))
    .unwrap();
    let Reply::Started { id, .. } = c.reply().unwrap() else {
        panic!()
    };
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = repo.client();
    c.send(&Request::Attach { id }).unwrap();
    c.reply().unwrap();
    proto::write_frame(&mut c.stream, Kind::Stdin, b"again\n").unwrap();
    let (out, x) = finish(&mut c);
    assert_eq!(
        (String::from_utf8_lossy(&out).into_owned(), x.status),
        ("got again\n".into(), 0)
    );

    // Health through the API.
    let Reply::Health { status } = repo.client().call(&Request::Health).unwrap() else {
        panic!()
    };
    assert_eq!(status["state"], "ready", "{status}");

    // Bad input and 100 clients at once: the guest's counts do not move.
    std::thread::sleep(Duration::from_millis(300));
    let before = guest_counts(&repo);
    // One connection for many requests (the hello's `reuse`): agent execs
    // ended by Done, a write and a read, through the real PID 1.
    {
        let mut c = proto::connect_reusable(&repo.socket()).unwrap();
        assert!(c.reuse);
        for i in 0..3 {
            c.send(&Request::Exec(ExecReq {
                argv: vec!["sh".into(), "-c".into(), format!("id -u; exit {i}")],
                ..ExecReq::default()
            }))
            .unwrap();
            c.reply().unwrap();
            proto::write_frame(&mut c.stream, Kind::Eof, &[]).unwrap();
            let (out, x) = finish(&mut c);
            assert_eq!((out, x.status), (b"1000\n".to_vec(), i));
            c.done_then(None).unwrap();
        }
        c.write_from("/tmp/reuse", None, proto::User::Agent, &mut &b"r"[..])
            .unwrap();
        let mut out = Vec::new();
        c.read_to("/tmp/reuse", proto::User::Agent, &mut out)
            .unwrap();
        assert_eq!(out, b"r");
    }
    for bytes in [
        {
            let p = br#"{"proto":"sbx-guest","version":999}"#;
            let mut v = ((p.len() + 1) as u32).to_be_bytes().to_vec();
            v.push(1);
            v.extend_from_slice(p);
            v
        },
        u32::MAX.to_be_bytes().to_vec(),
        vec![0, 0, 0, 9, 1, b'{'],
        vec![0, 0, 0, 1, 77],
    ] {
        use std::io::Write;
        let mut s = UnixStream::connect(repo.socket()).unwrap();
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        use std::io::Read;
        let _ = s.read_to_end(&mut rest);
    }
    let e = Client::handshake({
        use std::io::Write;
        let mut s = UnixStream::connect(repo.socket()).unwrap();
        s.write_all(&[0, 0, 0, 36, 1]).unwrap();
        s.write_all(br#"{"proto":"sbx-guest","version":999}"#)
            .unwrap();
        s
    });
    assert!(e.is_err());
    // A client that vanishes mid-stream of a running command: killed by id.
    let mut c = repo.client();
    c.send(&Request::Exec(ExecReq {
        argv: vec!["yes".into()],
        ..Default::default()
    }))
    .unwrap();
    let Reply::Started { id, .. } = c.reply().unwrap() else {
        panic!()
    };
    let _ = c.frame().unwrap();
    drop(c);
    let mut c = repo.client();
    c.send(&Request::Attach { id }).unwrap();
    c.reply().unwrap();
    repo.client()
        .call(&Request::Signal { id, signal: 9 })
        .unwrap();
    let (_, x) = finish(&mut c);
    assert_eq!(x.status, 137);
    drop(c);
    let hs: Vec<_> = (0..100)
        .map(|i| {
            let sock = repo.socket();
            std::thread::spawn(move || {
                let mut c = proto::connect(&sock).unwrap();
                c.send(&Request::Exec(ExecReq {
                    argv: vec!["echo".into(), i.to_string()],
                    ..Default::default()
                }))
                .unwrap();
                c.reply().unwrap();
                let (out, x) = finish(&mut c);
                assert_eq!((out, x.status), (format!("{i}\n").into_bytes(), 0));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = guest_counts(&repo);
    while after != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = guest_counts(&repo);
    }
    assert_eq!(after, before, "(fds, threads, children) of the guest");

    // No socket (a sandbox from an image without the API): refused, never
    // `docker exec`, whose process would miss the guest's seccomp filter.
    std::fs::remove_file(&sock).unwrap();
    let mark = repo.path.join("ran-without-the-guest");
    let o = repo.sbx(&["exec", "--", "touch", "ran-without-the-guest"]);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no guest API socket"),
        "{}",
        text(&o)
    );
    assert!(!mark.exists(), "the command ran without the guest");
}

#[test]
fn a_failed_firewall_start_is_readable_through_the_api() {
    if !base_image() {
        return;
    }
    let img = format!(
        "agent-sandbox-base:{}",
        std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into())
    );
    let derived = format!("sbx-api-e2e-badfw:{}", std::process::id());
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {img}\nRUN printf '#!/bin/sh\\necho boom >&2\\nexit 3\\n' > /usr/local/bin/sbx-fw\n"),
    )
    .unwrap();
    sh(Command::new("docker")
        .args(["build", "-q", "-t", &derived])
        .arg(ctx.path()));
    let host = tempfile::tempdir().unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let name = format!("sbx-api-e2e-badfw-{}", std::process::id());
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    let mut c = Command::new("docker");
    c.args(["run", "-d", "--name", &name, "--cap-drop", "ALL"]);
    for cap in sbx_run::spec::INIT_CAPS {
        c.args(["--cap-add", cap]);
    }
    c.args([
        "--security-opt",
        "no-new-privileges",
        "--user",
        "0:0",
        "--mount",
    ])
    .arg(format!(
        "type=bind,source={},target=/run/sbx/host",
        host.path().display()
    ))
    .args([&derived, "sleep", "infinity"]);
    sh(&mut c);
    let sock = proto::socket_in(host.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Ok(mut c) = proto::connect(&sock) {
            if let Ok(Reply::Health { status }) = c.call(&Request::Health) {
                if status["state"] == "unhealthy" {
                    break status;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no unhealthy status through the API"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    let _ = Command::new("docker")
        .args(["image", "rm", "--no-prune", &derived])
        .output();
    assert!(
        status["reason"]
            .as_str()
            .unwrap_or("")
            .contains("sbx-fw init failed (exit 3): boom"),
        "{status}"
    );
}
