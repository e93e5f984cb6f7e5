//! Raw round trips of the guest API, as bench/guest-api.sh runs them:
//! connect + hello + exec /bin/true + exit, and connect + hello + read of a
//! 4 KiB file. Prints the median and p90 of each in milliseconds.
//!
//! usage: guest_api_bench SOCKET [RUNS]

use std::time::Instant;

use sbx_core::guestapi::{self as proto, ExecReq, Kind, Request, User};

fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(sock) = args.get(1) else {
        eprintln!("usage: guest_api_bench SOCKET [RUNS]");
        std::process::exit(64);
    };
    let sock = std::path::Path::new(sock);
    let runs: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(500);
    let exec = |argv: &[&str]| {
        let mut c = proto::connect_send(
            sock,
            &Request::Exec(ExecReq {
                argv: argv.iter().map(|a| a.to_string()).collect(),
                cwd: Some("/".into()),
                ..Default::default()
            }),
        )
        .expect("connect");
        c.reply().expect("started");
        // The exec may have ended and the guest closed already.
        let _ = proto::write_frame(&mut c.stream, Kind::Eof, &[]);
        loop {
            if let (Kind::Exit, _) = c.frame().expect("frame") {
                break;
            }
        }
    };
    let data = vec![b'x'; 4096];
    proto::connect(sock)
        .expect("connect")
        .write_from("/tmp/sbx-bench-4k", None, User::Agent, &mut &data[..])
        .expect("write");
    for _ in 0..20 {
        exec(&["/bin/true"]);
    }
    let mut e = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        exec(&["/bin/true"]);
        e.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut r = Vec::with_capacity(runs);
    let mut out = Vec::with_capacity(4096);
    for _ in 0..runs {
        out.clear();
        let t = Instant::now();
        proto::connect_send(
            sock,
            &Request::Read {
                path: "/tmp/sbx-bench-4k".into(),
                user: User::Agent,
            },
        )
        .expect("connect")
        .recv_file(&mut out)
        .expect("read");
        r.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(out.len(), 4096);
    }
    let (em, e9) = median_p90(e);
    let (rm, r9) = median_p90(r);
    println!("exec /bin/true round trip: median {em:.3} ms, p90 {e9:.3} ms ({runs} runs)");
    println!("read 4 KiB: median {rm:.3} ms, p90 {r9:.3} ms ({runs} runs)");
}
