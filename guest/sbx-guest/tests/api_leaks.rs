//! One test alone in its process, so counts of descriptors, threads and
//! child processes mean something: after bad input, a vanished client and
//! 100 concurrent clients, the server holds exactly what it held before.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sbx_core::guestapi::{self as proto, Client, ExecReq, ExitMsg, Kind, Reply, Request, User};
use sbx_guest::api::{Config, Reaper, Server};

fn counts() -> (usize, usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    let me = std::process::id().to_string();
    let children = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(1).map(|p| p == me))
                    .unwrap_or(false)
            })
        })
        .count();
    (fds, threads, children)
}

fn connect(s: &Arc<Server>) -> Client<UnixStream> {
    let (a, b) = UnixStream::pair().unwrap();
    let s = Arc::clone(s);
    std::thread::spawn(move || s.handle(b));
    Client::handshake(a).unwrap()
}

fn req(argv: &[&str]) -> ExecReq {
    ExecReq {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        user: User::Root,
        cwd: Some("/".into()),
        ..Default::default()
    }
}

fn finish(c: &mut Client<UnixStream>) -> (Vec<u8>, ExitMsg) {
    let mut out = Vec::new();
    loop {
        match c.frame().unwrap() {
            (Kind::Stdout, d) => out.extend(d),
            (Kind::Stderr, _) => {}
            (Kind::Exit, p) => return (out, proto::parse("exit", &p).unwrap()),
            f => panic!("{f:?}"),
        }
    }
}

#[test]
fn nothing_leaks() {
    let t = tempfile::tempdir().unwrap();
    let env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    let s = Server::new(Config {
        roots: vec![t.path().to_owned()],
        agent: None,
        agent_home: t.path().to_owned(),
        agent_env: env.clone(),
        root_env: env,
        status: t.path().join("status.json"),
        reaper: Reaper::Own,
        audit_log: None,
    });
    // Warm up lazily made things (the first thread, std's statics).
    let mut c = connect(&s);
    c.send(&Request::Exec(req(&["true"]))).unwrap();
    c.reply().unwrap();
    finish(&mut c);
    drop(c);
    std::thread::sleep(Duration::from_millis(300));
    let before = counts();

    // Bad input of every sort.
    let frame = |k: u8, p: &[u8]| {
        let mut v = ((p.len() + 1) as u32).to_be_bytes().to_vec();
        v.push(k);
        v.extend_from_slice(p);
        v
    };
    for bytes in [
        frame(1, br#"{"proto":"sbx-guest","version":7}"#),
        u32::MAX.to_be_bytes().to_vec(),
        vec![0, 0, 0, 40, 2],
        frame(99, b""),
        vec![],
    ] {
        let (mut a, b) = UnixStream::pair().unwrap();
        let s2 = Arc::clone(&s);
        let h = std::thread::spawn(move || s2.handle(b));
        a.write_all(&bytes).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        h.join().unwrap();
    }
    // A client that vanishes mid-stream, then comes back and stops it.
    let mut c = connect(&s);
    c.send(&Request::Exec(req(&["yes"]))).unwrap();
    let Reply::Started { id, .. } = c.reply().unwrap() else {
        panic!()
    };
    let _ = c.frame().unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(100));
    let mut c = connect(&s);
    c.send(&Request::Attach { id }).unwrap();
    c.reply().unwrap();
    connect(&s)
        .call(&Request::Signal { id, signal: 15 })
        .unwrap();
    let (_, x) = finish(&mut c);
    assert_eq!(x.status, 143);
    drop(c);
    // A write whose client vanishes before the end leaves no temp file.
    let mut c = connect(&s);
    c.send(&Request::Write {
        path: t.path().join("half").display().to_string(),
        mode: None,
        user: User::Root,
    })
    .unwrap();
    proto::write_frame(&mut c.stream, Kind::Data, b"partial").unwrap();
    drop(c);
    // A reused connection: execs ended by Done, then one the client
    // leaves after its exit without Done.
    {
        let (a, b) = UnixStream::pair().unwrap();
        let s2 = Arc::clone(&s);
        std::thread::spawn(move || s2.handle(b));
        let mut c = Client::handshake_reusable(a).unwrap();
        assert!(c.reuse);
        for _ in 0..3 {
            c.send(&Request::Exec(req(&["true"]))).unwrap();
            c.reply().unwrap();
            proto::write_frame(&mut c.stream, Kind::Eof, &[]).unwrap();
            assert_eq!(finish(&mut c).1.status, 0);
            c.done_then(None).unwrap();
        }
        c.send(&Request::Exec(req(&["sh", "-c", "echo x; sleep 0.2"])))
            .unwrap();
        c.reply().unwrap();
        assert_eq!(finish(&mut c).0, b"x\n");
    }
    // 100 clients at once.
    let hs: Vec<_> = (0..100)
        .map(|i| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut c = connect(&s);
                c.send(&Request::Exec(req(&["echo", &i.to_string()])))
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
    // A session is forgotten just after its exit frame went out.
    let deadline = Instant::now() + Duration::from_secs(2);
    while s.session_count() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.session_count(), 0);
    // Threads end a moment after their last frame.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = counts();
    while after != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = counts();
    }
    assert_eq!(after, before, "(fds, threads, children) before vs after");
    assert_eq!(
        std::fs::read_dir(t.path()).unwrap().count(),
        0,
        "a temp file of the broken write is left"
    );
}
