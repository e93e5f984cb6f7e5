//! Raw round trips of the guest API, as bench/guest-api.sh runs them:
//! - exec /bin/true as the agent to its exit, and a 4 KiB read, each on a
//!   new connection (connect + hello + request: what `sbx-run exec` pays);
//! - the same on one connection that carries every request (the hello's
//!   `reuse`: what a client making many calls, such as a hook, pays).
//!
//! - for reference, this process starting /bin/true itself and waiting for
//!   it (std's posix_spawn): the floor any exec round trip stands on.
//!
//! Prints the median and p90 of each in milliseconds.
//!
//! usage: guest_api_bench SOCKET [RUNS]

use std::os::unix::net::UnixStream;
use std::time::Instant;

use sbx_core::guestapi::{self as proto, Client, ExecReq, Kind, Request, User};

fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn true_req() -> Request {
    Request::Exec(ExecReq {
        argv: vec!["/bin/true".into()],
        cwd: Some("/".into()),
        ..Default::default()
    })
}

fn read_req() -> Request {
    Request::Read {
        path: "/tmp/sbx-bench-4k".into(),
        user: User::Agent,
    }
}

/// Started, our stdin's end, then frames to the exit.
fn finish_exec(c: &mut Client<UnixStream>) {
    c.reply().expect("started");
    // The exec may have ended and the guest closed already.
    let _ = proto::write_frame(&mut c.stream, Kind::Eof, &[]);
    loop {
        if let (Kind::Exit, _) = c.frame().expect("frame") {
            break;
        }
    }
}

fn time(runs: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..20 {
        f();
    }
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median_p90(v)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(sock) = args.get(1) else {
        eprintln!("usage: guest_api_bench SOCKET [RUNS]");
        std::process::exit(64);
    };
    let sock = std::path::Path::new(sock);
    let runs: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(500);
    let data = vec![b'x'; 4096];
    proto::connect(sock)
        .expect("connect")
        .write_from("/tmp/sbx-bench-4k", None, User::Agent, &mut &data[..])
        .expect("write");

    let (em, e9) = time(runs, || {
        let mut c = proto::connect_send(sock, &true_req()).expect("connect");
        finish_exec(&mut c);
    });
    let mut out = Vec::with_capacity(4096);
    let (rm, r9) = time(runs, || {
        out.clear();
        proto::connect_send(sock, &read_req())
            .expect("connect")
            .recv_file(&mut out)
            .expect("read");
        assert_eq!(out.len(), 4096);
    });
    let (fm, f9) = time(runs, || {
        let st = std::process::Command::new("/bin/true").status();
        assert!(st.expect("spawn /bin/true").success());
    });
    println!("local spawn of /bin/true: median {fm:.3} ms, p90 {f9:.3} ms ({runs} runs)");
    println!("exec /bin/true round trip: median {em:.3} ms, p90 {e9:.3} ms ({runs} runs)");
    println!("read 4 KiB: median {rm:.3} ms, p90 {r9:.3} ms ({runs} runs)");

    let mut c = proto::connect_reusable(sock).expect("connect");
    if !c.reuse {
        println!("(this guest keeps one request per connection: no reused-connection numbers)");
        return;
    }
    let mut first = true;
    let (xm, x9) = time(runs, || {
        if first {
            c.send(&true_req()).expect("send");
            first = false;
        } else {
            c.done_then(Some(&true_req())).expect("send");
        }
        finish_exec(&mut c);
    });
    c.done_then(None).expect("done");
    let (ym, y9) = time(runs, || {
        out.clear();
        c.send(&read_req()).expect("send");
        c.recv_file(&mut out).expect("read");
        assert_eq!(out.len(), 4096);
    });
    println!(
        "exec /bin/true on one reused connection: median {xm:.3} ms, p90 {x9:.3} ms ({runs} runs)"
    );
    println!(
        "read 4 KiB on one reused connection: median {ym:.3} ms, p90 {y9:.3} ms ({runs} runs)"
    );
}
