//! The host API server over socketpairs: real processes, real files, the
//! real framing; no container. Bad input gets an error frame, never a crash.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sbx_core::guestapi::{
    self as proto, Client, Control, ErrorMsg, ExecReq, ExitMsg, Kind, ProtoError, Reply, Request,
    User, Winsize,
};
use sbx_guest::api::{Config, Reaper, Server};

fn server(root: &Path) -> Arc<Server> {
    server_with(root, None)
}

fn server_with(root: &Path, audit_log: Option<std::path::PathBuf>) -> Arc<Server> {
    let env: Vec<_> = [("PATH", "/usr/local/bin:/usr/bin:/bin")]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    let status = root.join("status.json");
    std::fs::write(
        &status,
        r#"{"state":"unhealthy","reason":"sbx-fw init failed","since":"x"}"#,
    )
    .unwrap();
    Server::new(Config {
        roots: vec![root.join("ws"), root.join("home")],
        agent: Some(sbx_sys::Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
        }),
        agent_home: root.join("home"),
        agent_env: env.clone(),
        root_env: env,
        status,
        reaper: Reaper::Own,
        audit_log,
    })
}

fn setup() -> (tempfile::TempDir, Arc<Server>) {
    let t = tempfile::tempdir().unwrap();
    for d in ["ws", "home"] {
        std::fs::create_dir(t.path().join(d)).unwrap();
    }
    let s = server(t.path());
    (t, s)
}

fn raw(s: &Arc<Server>) -> UnixStream {
    let (a, b) = UnixStream::pair().unwrap();
    let s = Arc::clone(s);
    std::thread::spawn(move || s.handle(b));
    a
}

fn client(s: &Arc<Server>) -> Client<UnixStream> {
    Client::handshake(raw(s)).unwrap()
}

fn root_exec(argv: &[&str]) -> ExecReq {
    ExecReq {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        user: User::Root,
        cwd: Some("/".into()),
        ..Default::default()
    }
}

struct Ran {
    out: Vec<u8>,
    err: Vec<u8>,
    exit: Result<ExitMsg, ErrorMsg>,
}

fn run(s: &Arc<Server>, req: ExecReq, stdin: &[u8]) -> Ran {
    let mut c = client(s);
    c.send(&Request::Exec(req)).unwrap();
    let mut r = Ran {
        out: vec![],
        err: vec![],
        exit: Err(ErrorMsg::new("none", "")),
    };
    match c.frame() {
        Ok((Kind::Reply, _)) => {}
        Err(ProtoError::Remote(e)) => {
            r.exit = Err(e);
            return r;
        }
        other => panic!("{other:?}"),
    }
    // Input on its own thread, as sbx-run does: the process's output must
    // be read while its input is still being written.
    let mut w = c.stream.try_clone().unwrap();
    let input = stdin.to_vec();
    std::thread::spawn(move || {
        for chunk in input.chunks(100_000) {
            if proto::write_frame(&mut w, Kind::Stdin, chunk).is_err() {
                return;
            }
        }
        let _ = proto::write_frame(&mut w, Kind::Eof, &[]);
    });
    loop {
        match c.frame() {
            Ok((Kind::Stdout, d)) => r.out.extend(d),
            Ok((Kind::Stderr, d)) => r.err.extend(d),
            Ok((Kind::Exit, p)) => {
                r.exit = Ok(proto::parse("exit", &p).unwrap());
                return r;
            }
            Err(ProtoError::Remote(e)) => {
                r.exit = Err(e);
                return r;
            }
            other => panic!("{other:?}"),
        }
    }
}

fn status(r: &Ran) -> i32 {
    r.exit.as_ref().map(|x| x.status).unwrap_or_else(|e| {
        e.status
            .unwrap_or_else(|| panic!("not an exit: {}: {}", e.kind, e.message))
    })
}

#[test]
fn exec_streams_and_reports_codes_like_a_shell() {
    let (_t, s) = setup();
    let r = run(
        &s,
        root_exec(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
        b"",
    );
    assert_eq!(r.out, b"out\n");
    assert_eq!(r.err, b"err\n");
    assert_eq!(status(&r), 3);
    let r = run(&s, root_exec(&["sh", "-c", "kill -TERM $$"]), b"");
    let x = r.exit.unwrap();
    assert_eq!((x.status, x.signal), (143, Some(15)));
    let r = run(&s, root_exec(&["no-such-program-sbx"]), b"");
    assert_eq!(status(&r), 127, "{:?}", r.exit);
    assert!(r.exit.unwrap_err().message.contains("not found"));
    let t = tempfile::tempdir().unwrap();
    let plain = t.path().join("plain");
    std::fs::write(&plain, "x").unwrap();
    let r = run(&s, root_exec(&[plain.to_str().unwrap()]), b"");
    assert_eq!(status(&r), 126, "{:?}", r.exit);
    // stdin, binary-safe, larger than any pipe buffer
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let r = run(&s, root_exec(&["cat"]), &data);
    assert_eq!(status(&r), 0);
    assert!(r.out == data, "cat returned {} bytes", r.out.len());
}

#[test]
fn agent_exec_runs_as_the_agent_in_its_home() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to switch to the agent");
        return;
    }
    let (t, s) = setup();
    let mut req = root_exec(&["sh", "-c", "id -u; pwd; echo $X"]);
    req.user = User::Agent;
    req.cwd = None;
    req.env.insert("X".into(), "from-host".into());
    let r = run(&s, req, b"");
    let text = String::from_utf8_lossy(&r.out).into_owned();
    assert_eq!(
        text,
        format!("1000\n{}\nfrom-host\n", t.path().join("home").display())
    );
}

#[test]
fn timeout_kills_the_whole_group() {
    let (t, s) = setup();
    let marker = t.path().join("ws/pid");
    let mut req = root_exec(&[
        "sh",
        "-c",
        &format!("sleep 30 & echo $! > {}; wait", marker.display()),
    ]);
    req.timeout_ms = Some(300);
    let t0 = Instant::now();
    let r = run(&s, req, b"");
    let x = r.exit.unwrap();
    assert!(x.timed_out && x.status == 124, "{x:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains(") Z"),
        "background sleep survived: {state}"
    );
}

#[test]
fn pty_has_a_terminal_and_follows_resizes() {
    let (_t, s) = setup();
    let mut req = root_exec(&["sh", "-c", "tty >/dev/null && stty size; read x; stty size"]);
    req.tty = Some(Winsize { rows: 24, cols: 80 });
    let mut c = client(&s);
    c.send(&Request::Exec(req)).unwrap();
    assert!(matches!(c.reply().unwrap(), Reply::Started { .. }));
    let mut out = Vec::new();
    while !String::from_utf8_lossy(&out).contains("24 80") {
        match c.frame().unwrap() {
            (Kind::Stdout, d) => out.extend(d),
            f => panic!("{f:?}"),
        }
    }
    // While this terminal is open, another exec holds no end of it (a
    // master it inherited could type into this session).
    let r = run(&s, root_exec(&["sh", "-c", "ls -l /proc/$$/fd"]), b"");
    let fds = String::from_utf8_lossy(&r.out);
    assert!(!fds.contains("ptmx") && !fds.contains("/dev/pts/"), "{fds}");
    proto::write_json(
        &mut c.stream,
        Kind::Control,
        &Control::Resize(Winsize {
            rows: 40,
            cols: 100,
        }),
    )
    .unwrap();
    proto::write_frame(&mut c.stream, Kind::Stdin, b"\n").unwrap();
    loop {
        match c.frame().unwrap() {
            (Kind::Stdout, d) => out.extend(d),
            (Kind::Exit, p) => {
                let x: ExitMsg = proto::parse("exit", &p).unwrap();
                assert_eq!(x.status, 0);
                break;
            }
            f => panic!("{f:?}"),
        }
    }
    assert!(String::from_utf8_lossy(&out).contains("40 100"), "{out:?}");
}

#[test]
fn a_dropped_client_leaves_the_process_to_reattach() {
    let (_t, s) = setup();
    let mut c = client(&s);
    c.send(&Request::Exec(root_exec(&[
        "sh",
        "-c",
        "echo first; read x; echo got $x",
    ])))
    .unwrap();
    let Reply::Started { id, .. } = c.reply().unwrap() else {
        panic!()
    };
    drop(c);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(s.session_count(), 1, "the exec went with its client");
    let mut c = client(&s);
    c.send(&Request::Attach { id }).unwrap();
    assert!(matches!(c.reply().unwrap(), Reply::Started { .. }));
    proto::write_frame(&mut c.stream, Kind::Stdin, b"hi\n").unwrap();
    let mut out = Vec::new();
    loop {
        match c.frame().unwrap() {
            (Kind::Stdout, d) => out.extend(d),
            (Kind::Exit, _) => break,
            f => panic!("{f:?}"),
        }
    }
    // "first" was either delivered before the drop or kept for us.
    assert!(
        String::from_utf8_lossy(&out).ends_with("got hi\n"),
        "{out:?}"
    );
    // The session is forgotten just after its exit frame went out.
    let t0 = std::time::Instant::now();
    while s.session_count() != 0 && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.session_count(), 0);
    // Signal by id on another connection.
    let mut c = client(&s);
    c.send(&Request::Exec(root_exec(&["sleep", "30"]))).unwrap();
    let Reply::Started { id, .. } = c.reply().unwrap() else {
        panic!()
    };
    let mut k = client(&s);
    assert_eq!(
        k.call(&Request::Signal { id, signal: 9 }).unwrap(),
        Reply::Ok
    );
    loop {
        if let (Kind::Exit, p) = c.frame().unwrap() {
            let x: ExitMsg = proto::parse("exit", &p).unwrap();
            assert_eq!(x.status, 137);
            break;
        }
    }
    let e = client(&s)
        .call(&Request::Attach { id: 999_999 })
        .unwrap_err();
    assert!(e.to_string().contains("no exec with id"), "{e}");
}

fn remote(e: ProtoError) -> ErrorMsg {
    match e {
        ProtoError::Remote(m) => m,
        e => panic!("not an error frame: {e}"),
    }
}

#[test]
fn files_round_trip_and_stay_beneath_the_roots() {
    let (t, s) = setup();
    let ws = t.path().join("ws");
    let p = |rel: &str| format!("{}/{rel}", ws.display());
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i % 251) as u8).collect();
    let mut c = client(&s);
    assert_eq!(
        c.call(&Request::Mkdir {
            path: p("a/b/c"),
            mode: None,
            user: User::Root
        })
        .unwrap(),
        Reply::Ok
    );
    let n = client(&s)
        .write_from(&p("a/b/c/f.bin"), Some(0o640), User::Root, &mut &data[..])
        .unwrap();
    assert_eq!(n, data.len() as u64);
    let mut back = Vec::new();
    client(&s)
        .read_to(&p("a/b/c/f.bin"), User::Root, &mut back)
        .unwrap();
    assert!(back == data);
    let Reply::Stat(st) = client(&s)
        .call(&Request::Stat {
            path: p("a/b/c/f.bin"),
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (st.kind.as_str(), st.size, st.mode),
        ("file", data.len() as u64, 0o640)
    );
    let Reply::List { entries } = client(&s)
        .call(&Request::List {
            path: p("a"),
            depth: 5,
        })
        .unwrap()
    else {
        panic!()
    };
    let names: Vec<_> = entries.iter().map(|e| e.path.clone()).collect();
    assert!(names.contains(&p("a/b/c/f.bin")), "{names:?}");
    client(&s)
        .call(&Request::Rename {
            from: p("a/b/c/f.bin"),
            to: p("g.bin"),
            user: User::Root,
        })
        .unwrap();
    assert!(ws.join("g.bin").is_file());
    client(&s)
        .call(&Request::Remove {
            path: p("a"),
            recursive: true,
            user: User::Root,
        })
        .unwrap();
    assert!(!ws.join("a").exists());
    // Replacing keeps no temporary files behind.
    client(&s)
        .write_from(&p("g.bin"), None, User::Root, &mut &b"new"[..])
        .unwrap();
    assert_eq!(std::fs::read(ws.join("g.bin")).unwrap(), b"new");
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 1);
}

#[test]
fn path_escapes_are_refused() {
    let (t, s) = setup();
    let ws = t.path().join("ws");
    let secret = t.path().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    std::os::unix::fs::symlink(&secret, ws.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../secret", ws.join("rel-link")).unwrap();
    std::os::unix::fs::symlink(t.path(), ws.join("dir-link")).unwrap();
    std::fs::write(ws.join("inside"), "ok").unwrap();
    std::os::unix::fs::symlink("inside", ws.join("good-link")).unwrap();
    let w = ws.display();
    for path in [
        format!("{w}/abs-link"),
        format!("{w}/rel-link"),
        format!("{w}/dir-link/secret"),
        format!("{w}/../secret"),
        secret.display().to_string(),
        "/etc/passwd".into(),
        "relative".into(),
    ] {
        let mut out = Vec::new();
        let e = remote(client(&s).read_to(&path, User::Root, &mut out).unwrap_err());
        assert!(
            matches!(e.kind.as_str(), "escape" | "bad-request"),
            "{path}: {e:?}"
        );
        assert!(out.is_empty());
    }
    for path in [
        format!("{w}/dir-link/x"),
        format!("{w}/../x"),
        "/etc/sbx-api-test".into(),
        "relative".into(),
    ] {
        let e = remote(
            client(&s)
                .write_from(&path, None, User::Root, &mut &b"pwn"[..])
                .unwrap_err(),
        );
        assert!(
            matches!(e.kind.as_str(), "escape" | "bad-request"),
            "{path}: {e:?}"
        );
    }
    assert!(!t.path().join("x").exists() && !Path::new("/etc/sbx-api-test").exists());
    // Replacing a symlink replaces the link, never what it points to.
    client(&s)
        .write_from(&format!("{w}/abs-link"), None, User::Root, &mut &b"new"[..])
        .unwrap();
    assert!(ws.join("abs-link").is_file() && !ws.join("abs-link").is_symlink());
    // Writing through a symlinked directory out of the root is refused too.
    let e = remote(
        client(&s)
            .write_from(
                &format!("{w}/dir-link/new"),
                None,
                User::Root,
                &mut &b"x"[..],
            )
            .unwrap_err(),
    );
    assert_eq!(e.kind, "escape", "{e:?}");
    assert!(!t.path().join("new").exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "s3cret");
    // A symlink that stays inside is fine.
    let mut out = Vec::new();
    client(&s)
        .read_to(&format!("{w}/good-link"), User::Root, &mut out)
        .unwrap();
    assert_eq!(out, b"ok");
}

#[test]
fn health_reads_the_status_even_when_unhealthy() {
    let (_t, s) = setup();
    let Reply::Health { status } = client(&s).call(&Request::Health).unwrap() else {
        panic!()
    };
    assert_eq!(status["state"], "unhealthy");
    assert_eq!(status["reason"], "sbx-fw init failed");
}

/// Frames a client may get wrong, each answered by one error frame (or
/// just a close when nothing complete arrived).
pub fn bad_inputs() -> Vec<(&'static str, Vec<u8>, Option<&'static str>)> {
    let frame = |k: u8, p: &[u8]| {
        let mut v = ((p.len() + 1) as u32).to_be_bytes().to_vec();
        v.push(k);
        v.extend_from_slice(p);
        v
    };
    let hello = frame(1, br#"{"proto":"sbx-guest","version":1}"#);
    let after_hello = |more: Vec<u8>| {
        let mut v = hello.clone();
        v.extend(more);
        v
    };
    vec![
        (
            "wrong version",
            frame(1, br#"{"proto":"sbx-guest","version":99}"#),
            Some("version"),
        ),
        (
            "request before hello",
            frame(2, br#"{"op":"health"}"#),
            Some("bad-request"),
        ),
        ("malformed hello", frame(1, b"{nope"), Some("bad-request")),
        (
            "oversized",
            (u32::MAX).to_be_bytes().to_vec(),
            Some("bad-request"),
        ),
        ("empty frame", vec![0, 0, 0, 0], Some("bad-request")),
        ("unknown kind", frame(200, b""), Some("bad-request")),
        (
            "unknown op",
            after_hello(frame(2, br#"{"op":"format-disk"}"#)),
            Some("bad-request"),
        ),
        (
            "malformed request",
            after_hello(frame(2, b"\xff\xfe")),
            Some("bad-request"),
        ),
        (
            "data instead of a request",
            after_hello(frame(11, b"x")),
            Some("bad-request"),
        ),
        ("truncated", vec![0, 0, 0, 50, 1, b'{'], Some("bad-request")),
        ("truncated header", vec![0, 0], Some("bad-request")),
        ("nothing", vec![], None),
    ]
}

pub fn send_bad(s: &Arc<Server>, bytes: &[u8]) -> Option<ErrorMsg> {
    let mut a = raw(s);
    a.write_all(bytes).unwrap();
    a.shutdown(std::net::Shutdown::Write).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    loop {
        match proto::read_frame(&mut a) {
            Ok((Kind::Hello, _)) => continue,
            Ok((Kind::Error, p)) => return Some(proto::parse("error", &p).unwrap()),
            Ok(f) => panic!("unexpected {f:?}"),
            Err(e) if e.is_closed() => return None,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn bad_frames_get_an_error_frame() {
    let (_t, s) = setup();
    for (what, bytes, want) in bad_inputs() {
        let got = send_bad(&s, &bytes);
        assert_eq!(
            got.as_ref().map(|e| e.kind.as_str()),
            want,
            "{what}: {got:?}"
        );
        if what == "wrong version" {
            let m = got.unwrap().message;
            assert!(m.contains("version 1") && m.contains("99"), "{m}");
        }
    }
    // The server still serves.
    assert_eq!(status(&run(&s, root_exec(&["true"]), b"")), 0);
}

/// Frames to an exec's exit: (stdout, status).
fn to_exit(c: &mut Client<UnixStream>) -> (Vec<u8>, i32) {
    let mut out = Vec::new();
    loop {
        match c.frame().unwrap() {
            (Kind::Stdout, d) => out.extend(d),
            (Kind::Stderr, _) => {}
            (Kind::Exit, p) => return (out, proto::parse::<ExitMsg>("exit", &p).unwrap().status),
            f => panic!("{f:?}"),
        }
    }
}

#[test]
fn a_reused_connection_carries_many_requests_and_only_when_asked() {
    let (t, s) = setup();
    let ws = t.path().join("ws");
    let p = |n: &str| ws.join(n).display().to_string();
    let mut c = Client::handshake_reusable(raw(&s)).unwrap();
    assert!(c.reuse, "the guest grants reuse");
    // Files, an exec ended by Done, an error, another exec, a read.
    let n = c
        .write_from(&p("a"), None, User::Root, &mut &b"hello"[..])
        .unwrap();
    assert_eq!(n, 5);
    assert!(matches!(
        c.call(&Request::Stat { path: p("a") }).unwrap(),
        Reply::Stat(_)
    ));
    for i in 0..3 {
        c.send(&Request::Exec(root_exec(&[
            "sh",
            "-c",
            &format!("echo {i}; exit {i}"),
        ])))
        .unwrap();
        assert!(matches!(c.reply().unwrap(), Reply::Started { .. }));
        proto::write_frame(&mut c.stream, Kind::Eof, &[]).unwrap();
        assert_eq!(to_exit(&mut c), (format!("{i}\n").into_bytes(), i));
        c.done_then(None).unwrap();
    }
    match c.call(&Request::Stat { path: p("missing") }) {
        Err(ProtoError::Remote(e)) => assert_eq!(e.kind, "not-found"),
        other => panic!("{other:?}"),
    }
    // Done and the next request in one write, as a busy client sends them.
    c.send(&Request::Exec(root_exec(&["true"]))).unwrap();
    c.reply().unwrap();
    proto::write_frame(&mut c.stream, Kind::Eof, &[]).unwrap();
    assert_eq!(to_exit(&mut c).1, 0);
    c.done_then(Some(&Request::Read {
        path: p("a"),
        user: User::Root,
    }))
    .unwrap();
    let mut out = Vec::new();
    c.recv_file(&mut out).unwrap();
    assert_eq!(out, b"hello");
    // Something other than a request between requests: an error, then the end.
    proto::write_frame(&mut c.stream, Kind::Stdin, b"x").unwrap();
    match c.frame() {
        Err(ProtoError::Remote(e)) => assert_eq!(e.kind, "bad-request"),
        other => panic!("{other:?}"),
    }
    assert!(c.frame().unwrap_err().is_closed());

    // Without asking, one request per connection, as before.
    let mut c = client(&s);
    assert!(!c.reuse);
    assert!(matches!(
        c.call(&Request::Stat { path: p("a") }).unwrap(),
        Reply::Stat(_)
    ));
    assert!(c.frame().unwrap_err().is_closed());
    // And an exec's connection ends with its exit, Done or not.
    let mut c = client(&s);
    c.send(&Request::Exec(root_exec(&["true"]))).unwrap();
    c.reply().unwrap();
    assert_eq!(to_exit(&mut c).1, 0);
    assert!(c.frame().unwrap_err().is_closed());
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z")
    })
}

/// A `hangup` exec whose client goes away is ended with its whole tree:
/// here a shell that ignores SIGTERM, a background child and one in its
/// own session (out of the group a killpg reaches) all go within the grace.
#[test]
fn a_hangup_exec_ends_with_its_client_tree_and_all() {
    let (t, s) = setup();
    let pids = t.path().join("ws/pids");
    let mut req = root_exec(&[
        "sh",
        "-c",
        &format!(
            "trap '' TERM; sleep 300 & echo $! >> {p}; setsid sleep 301 & echo $! >> {p}; echo $$ >> {p}; wait",
            p = pids.display()
        ),
    ]);
    req.hangup = true;
    let mut c = client(&s);
    c.send(&Request::Exec(req)).unwrap();
    assert!(matches!(c.reply().unwrap(), Reply::Started { .. }));
    let read = || -> Vec<i32> {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let t0 = Instant::now();
    while read().len() < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the tree never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let all = read();
    assert!(all.iter().all(|p| alive(*p)), "{all:?}");
    drop(c);
    let t0 = Instant::now();
    while all.iter().any(|p| alive(*p)) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<_> = all.iter().filter(|p| alive(**p)).collect();
    assert!(
        left.is_empty(),
        "still running after the client left: {left:?}"
    );
}

/// `sbx-run exec --root`: the command is in the audit log before it runs,
/// and a root exec that cannot be recorded does not run at all.
#[test]
fn root_exec_is_recorded_first_or_refused() {
    let t = tempfile::tempdir().unwrap();
    for d in ["ws", "home"] {
        std::fs::create_dir(t.path().join(d)).unwrap();
    }
    let log = t.path().join("audit.jsonl");
    let s = server_with(t.path(), Some(log.clone()));
    let r = run(&s, root_exec(&["sh", "-c", "echo ran"]), b"");
    assert_eq!(status(&r), 0);
    let text = std::fs::read_to_string(&log).unwrap();
    let e: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(e["operation"], "exec-root");
    assert_eq!(e["target"], "sh -c echo ran");
    // The agent's exec is not the user's root: nothing recorded.
    let mut agent = root_exec(&["true"]);
    agent.user = User::Agent;
    let _ = run(&s, agent, b"");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text);

    let s = server_with(t.path(), Some(t.path().join("gone/audit.jsonl")));
    let marker = t.path().join("marker");
    let r = run(&s, root_exec(&["touch", marker.to_str().unwrap()]), b"");
    let e = r.exit.expect_err("an unrecorded root exec ran");
    assert!(e.message.contains("cannot record"), "{}", e.message);
    assert!(!marker.exists());
}

/// `sbx-guest exec`, the client a cluster's pod exec runs: through the
/// guest's socket the command runs as the agent (its uid, its home by
/// default or the directory asked), stdin reaches it, its streams and
/// exit status are the client's own.
#[test]
fn the_exec_client_runs_the_command_as_the_agent() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to switch to the agent");
        return;
    }
    let (t, s) = setup();
    let run_dir = t.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(proto::socket_in(&run_dir)).unwrap();
    std::thread::spawn(move || sbx_guest::api::serve(listener, s));
    let exec = |args: &[&str], stdin: &[u8]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sbx-guest"))
            .arg("exec")
            .args(args)
            .env("SBX_GUEST_RUN_DIR", &run_dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin).unwrap();
        c.wait_with_output().unwrap()
    };
    let ws = t.path().join("ws");
    let out = exec(
        &[
            "--agent",
            "sbx-server",
            "--cwd",
            ws.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "id -u; pwd; echo $SBX_AGENT; printf oops >&2; cat; exit 5",
        ],
        b"from stdin",
    );
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("1000\n{}\nsbx-server\nfrom stdin", ws.display())
    );
    assert_eq!(out.stderr, b"oops");
    // A command that is not there: the shell's 127, said on stderr.
    let out = exec(&["--", "no-such-command-h45e"], b"");
    assert_eq!(out.status.code(), Some(127));
    // --env sets the command's variables; --tty needs a tty on stdin (a
    // pipe here): refused in one line, 64, nothing run.
    let out = exec(&["--env", "FOO=b=ar", "--", "sh", "-c", "echo $FOO"], b"");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b=ar\n");
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let marker = open.join("tty-marker");
    exec(&["--", "touch", marker.to_str().unwrap()], b"");
    assert!(marker.exists(), "the agent cannot make the marker");
    std::fs::remove_file(&marker).unwrap();
    for args in [&["--tty"][..], &["--env", "NOEQUALS"]] {
        let mut a = args.to_vec();
        a.extend(["--", "touch", marker.to_str().unwrap()]);
        let out = exec(&a, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!marker.exists(), "{args:?} ran the command");
    }
    // No guest: one line, 69.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbx-guest"))
        .args(["exec", "--", "true"])
        .env("SBX_GUEST_RUN_DIR", t.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
