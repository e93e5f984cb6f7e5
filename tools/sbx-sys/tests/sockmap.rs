//! The in-kernel relay (sbx_sys::bpf::SockRelay) on real loopback TCP:
//! bytes cross a spliced pair both ways without this process reading
//! them, and a half close after `drained` delivers every byte before the
//! EOF. Needs root (a sockhash and an SK_SKB program).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use sbx_sys::bpf::{SockRelay, Verdict, drained};

fn root() -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "missing prerequisite under CI: root"
        );
        eprintln!("skipping: the sockmap test needs root");
    }
    ok
}

/// A connected loopback pair: (the dialler's end, the accepted end).
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (a, _) = l.accept().expect("accept");
    (c, a)
}

#[test]
fn a_spliced_pair_carries_bytes_both_ways_and_a_half_close_after_them() {
    if !root() {
        return;
    }
    for v in [Verdict::Egress, Verdict::StreamEgress] {
        let relay = SockRelay::create(16, v).expect("sockhash + program");
        // agent <-> (relay's accepted end `mine`) ... (relay's `up`) <-> origin
        let (mut agent, mine) = pair();
        let (up, mut origin) = pair();
        relay.insert_pair(&mine, &up).expect("insert");
        for s in [&agent, &origin, &up] {
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
        }
        agent.write_all(b"hello origin").expect("write");
        let mut got = [0u8; 12];
        origin
            .read_exact(&mut got)
            .expect("the agent's bytes reach the origin");
        assert_eq!(&got, b"hello origin");

        // 16 MiB from the origin, then its FIN; the relay half-closes the
        // agent's side only once the kernel has moved every byte.
        let body: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
        let writer = {
            let body = body.clone();
            let mut origin = origin.try_clone().expect("clone");
            std::thread::spawn(move || {
                origin.write_all(&body).expect("origin write");
                origin.shutdown(Shutdown::Write).expect("origin shutdown");
            })
        };
        let closer = std::thread::spawn(move || {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            use std::os::fd::AsFd;
            // `up` reports the origin's FIN (POLLRDHUP; nix does not name
            // it), which the redirected bytes may still be ahead of.
            let t0 = Instant::now();
            let mut fd = [PollFd::new(up.as_fd(), PollFlags::from_bits_retain(0x2000))];
            assert_eq!(
                poll(&mut fd, PollTimeout::from(10_000u16)).expect("poll"),
                1,
                "no EOF on up"
            );
            while !drained(&up, &mine, 0, 0).expect("drained") {
                assert!(t0.elapsed() < Duration::from_secs(10), "never drained");
                std::thread::sleep(Duration::from_micros(200));
            }
            mine.shutdown(Shutdown::Write).expect("half close");
            (up, mine)
        });
        let mut all = Vec::new();
        agent.read_to_end(&mut all).expect("read to EOF");
        writer.join().expect("writer");
        let _keep = closer.join().expect("closer");
        assert_eq!(all.len(), body.len(), "{v:?}: every byte before the EOF");
        assert!(
            all == body,
            "{v:?}: the bytes arrive unchanged and in order"
        );
    }
}
