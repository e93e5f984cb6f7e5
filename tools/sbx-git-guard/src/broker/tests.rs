//! The broker's protocol over a socketpair: round trips with real fds, and
//! every malformed or oversized frame refused before it is used.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;

use super::proto::{self, Kind, ProtoError, Reply, Request, Transport};
use super::*;

fn req() -> Request {
    Request {
        kind: Kind::Git,
        umask: 0o027,
        args: vec![
            "commit".into(),
            "-m".into(),
            OsString::from_vec(vec![0xff, b'x']),
        ],
        env: vec![
            ("HOME".into(), "/home/agent".into()),
            ("EMPTY".into(), "".into()),
        ],
    }
}

fn four(s: &UnixStream) -> Vec<OwnedFd> {
    (0..4)
        .map(|_| s.as_fd().try_clone_to_owned().unwrap())
        .collect()
}

/// Send raw bytes with `n` fds attached, then close the writing side.
fn raw(bytes: &[u8], n: usize) -> Result<(Request, Vec<OwnedFd>), ProtoError> {
    let (a, b) = UnixStream::pair().unwrap();
    let (spare, _keep) = UnixStream::pair().unwrap();
    let fds = four(&spare);
    let extra = spare.as_fd().try_clone_to_owned().unwrap();
    let mut all: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    all.push(extra.as_fd());
    all.push(extra.as_fd());
    all.truncate(n);
    a.send(bytes, &all).unwrap();
    drop(a);
    proto::read_request(&b)
}

#[test]
fn a_request_and_its_fds_arrive_intact() {
    let (a, b) = UnixStream::pair().unwrap();
    let (mut out_r, out_w) = UnixStream::pair().unwrap();
    let fds = [out_w.as_fd(), out_w.as_fd(), out_w.as_fd(), out_w.as_fd()];
    proto::send_request(&a, &req(), fds).unwrap();
    drop(out_w);
    let (got, fds) = proto::read_request(&b).unwrap();
    assert_eq!(got, req());
    assert_eq!(fds.len(), 4);
    // The passed stdout is the same socket: what is written there arrives.
    std::fs::File::from(fds.into_iter().nth(1).unwrap())
        .write_all(b"hi")
        .unwrap();
    let mut buf = [0u8; 2];
    out_r.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hi");
}

#[test]
fn a_large_request_spanning_many_reads_arrives() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut r = req();
    r.env = (0..20_000)
        .map(|i| (format!("V{i}").into(), "x".repeat(50).into()))
        .collect();
    let fds = four(&a);
    let sender = {
        let r = r.clone();
        std::thread::spawn(move || {
            let f: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            proto::send_request(&a, &r, [f[0], f[1], f[2], f[3]]).unwrap();
        })
    };
    let (got, fds) = proto::read_request(&b).unwrap();
    sender.join().unwrap();
    assert_eq!(got, r);
    assert_eq!(fds.len(), 4);
}

#[test]
fn an_oversized_frame_is_refused_unread() {
    let mut bytes = (proto::MAX_REQUEST as u32 + 1).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"SBXG");
    assert!(matches!(raw(&bytes, 4), Err(ProtoError::TooLarge(..))));
    let bytes = u32::MAX.to_le_bytes();
    assert!(matches!(raw(&bytes, 4), Err(ProtoError::TooLarge(..))));
}

#[test]
fn a_frame_cut_short_is_refused() {
    let full = req().encode();
    for cut in [1, 3, 4, 9, full.len() - 1] {
        let e = raw(&full[..cut], 4).unwrap_err();
        assert!(matches!(e, ProtoError::Truncated), "cut at {cut}: {e}");
    }
    assert!(matches!(raw(&[], 0), Err(ProtoError::Truncated)));
}

#[test]
fn the_fd_count_must_be_exactly_four() {
    let full = req().encode();
    for n in [0, 1, 3, 5] {
        assert!(
            matches!(raw(&full, n), Err(ProtoError::Fds(m)) if m == n),
            "{n} fds"
        );
    }
    let e = raw(&full, 6).unwrap_err();
    assert!(e.to_string().contains("too many file descriptors"), "{e}");
    assert!(raw(&full, 4).is_ok());
}

/// A hook request carries its hooks directory as a fifth fd: exactly five,
/// and a git request's frame is the same bytes as before (kind 0, 4 fds).
#[test]
fn a_hook_request_takes_exactly_five_fds() {
    let mut hook = req();
    hook.kind = Kind::Hook;
    let full = hook.encode();
    for n in [0, 3, 4] {
        assert!(
            matches!(raw(&full, n), Err(ProtoError::Fds(m)) if m == n),
            "{n} fds"
        );
    }
    let (got, fds) = raw(&full, 5).unwrap();
    assert_eq!((got, fds.len()), (hook, 5));
    let git = req().encode();
    assert_eq!(git[9], 0);
    assert_eq!(&full[..9], &git[..9]);
    assert_eq!(full[9], 2);
    assert_eq!(full[10..], git[10..]);
}

/// A valid frame with its body patched by `f`.
fn patched(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = req().encode().split_off(4);
    f(&mut b);
    let mut out = (b.len() as u32).to_le_bytes().to_vec();
    out.extend(b);
    out
}

#[test]
fn malformed_bodies_are_refused() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("magic", patched(|b| b[0] = b'X')),
        ("version", patched(|b| b[4] = 9)),
        ("kind", patched(|b| b[5] = 7)),
        (
            "umask",
            patched(|b| b[6..10].copy_from_slice(&0o1777u32.to_le_bytes())),
        ),
        (
            "argc lie",
            patched(|b| b[10..14].copy_from_slice(&1_000_000u32.to_le_bytes())),
        ),
        ("trailing", patched(|b| b.push(0))),
        ("short", patched(|b| b.truncate(b.len() - 1))),
        ("empty body", patched(|b| b.clear())),
        (
            "string past the end",
            patched(|b| b[14..18].copy_from_slice(&u32::MAX.to_le_bytes())),
        ),
    ];
    for (name, bytes) in cases {
        let e = raw(&bytes, 4).unwrap_err();
        assert!(matches!(e, ProtoError::Malformed(_)), "{name}: {e}");
    }
    let mut nul = req();
    nul.args.push("a\0b".into());
    assert!(matches!(
        raw(&nul.encode(), 4),
        Err(ProtoError::Malformed(_))
    ));
    let mut eq = req();
    eq.env.push(("A=B".into(), "c".into()));
    assert!(matches!(
        raw(&eq.encode(), 4),
        Err(ProtoError::Malformed(_))
    ));
    let mut empty = req();
    empty.env.push(("".into(), "c".into()));
    assert!(matches!(
        raw(&empty.encode(), 4),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn replies_and_signals_round_trip() {
    let (a, b) = UnixStream::pair().unwrap();
    for r in [
        Reply::Exited(0),
        Reply::Exited(77),
        Reply::Signaled(2),
        Reply::Error("cannot fork".into()),
    ] {
        proto::send_reply(&a, &r).unwrap();
        assert_eq!(proto::read_reply(&b).unwrap(), Some(r));
    }
    proto::send_signal(&b, 28).unwrap();
    assert_eq!(proto::read_signal(&a).unwrap(), Some(28));
    drop(a);
    assert_eq!(proto::read_reply(&b).unwrap(), None);
}

#[test]
fn replies_refuse_fds_size_and_unknown_tags() {
    let (a, b) = UnixStream::pair().unwrap();
    a.send(&Reply::Exited(0).encode(), &[a.as_fd()]).unwrap();
    assert!(proto::read_reply(&b).is_err(), "a reply carrying an fd");
    let (a, b) = UnixStream::pair().unwrap();
    a.send(&(proto::MAX_SMALL as u32 + 1).to_le_bytes(), &[])
        .unwrap();
    assert!(matches!(
        proto::read_reply(&b),
        Err(ProtoError::TooLarge(..))
    ));
    let (a, b) = UnixStream::pair().unwrap();
    a.send(&[1, 0, 0, 0, b'Q'], &[]).unwrap();
    assert!(matches!(
        proto::read_reply(&b),
        Err(ProtoError::Malformed(_))
    ));
    let (a, b) = UnixStream::pair().unwrap();
    a.send(&[2, 0, 0, 0, b'E', 1], &[]).unwrap();
    assert!(matches!(
        proto::read_reply(&b),
        Err(ProtoError::Malformed(_))
    ));
    let (a, b) = UnixStream::pair().unwrap();
    a.send(&[5, 0, 0, 0, b'E', 1, 0, 0, 0], &[]).unwrap();
    assert!(matches!(
        proto::read_signal(&b),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn the_peer_is_whom_the_kernel_says() {
    let (a, _b) = UnixStream::pair().unwrap();
    let p = a.peer().unwrap();
    assert_eq!(p.pid as u32, std::process::id());
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().nth(2).unwrap(),
        p.uid.to_string(),
        "effective uid"
    );
}

#[test]
fn the_socket_comes_from_the_variable_first() {
    let env = vec![(OsString::from(SOCKET_VAR), OsString::from("/tmp/x.sock"))];
    assert_eq!(socket_path(&env), Some(PathBuf::from("/tmp/x.sock")));
    let empty = vec![(OsString::from(SOCKET_VAR), OsString::new())];
    let default = Path::new(DEFAULT_SOCKET)
        .exists()
        .then(|| PathBuf::from(DEFAULT_SOCKET));
    assert_eq!(socket_path(&empty), default);
    // In the sandbox only the image's socket counts, made yet or not for
    // all but root (a call before the broker listens waits for it rather
    // than run directly).
    let sandboxed = if nix::unistd::geteuid().is_root() {
        default
    } else {
        Some(PathBuf::from(DEFAULT_SOCKET))
    };
    assert_eq!(socket_path_in(&env, true), sandboxed);
    assert_eq!(socket_path_in(&[], true), sandboxed);
}

#[test]
fn pass_through_is_only_for_the_helpers() {
    let (a, _b) = UnixStream::pair().unwrap();
    let mut r = req();
    r.kind = Kind::PassThrough;
    r.args = vec!["commit".into(), "--no-verify".into()];
    let b = decide(&r, a.as_fd(), None).unwrap_err();
    assert_eq!(b.rule, "parse-error");
    r.args = vec!["upload-pack".into(), ".".into()];
    assert!(decide(&r, a.as_fd(), None).is_ok());
}

#[test]
fn only_gits_own_exec_path_is_forgiven() {
    let ep = OsStr::new("/usr/lib/git-core");
    let env = vec![
        (
            OsString::from("GIT_EXEC_PATH"),
            OsString::from("/usr/lib/git-core"),
        ),
        (OsString::from("A"), OsString::from("b")),
    ];
    assert_eq!(crate::judged_env(&env, || Some(ep.to_owned())).len(), 1);
    let evil = vec![(OsString::from("GIT_EXEC_PATH"), OsString::from("/tmp/evil"))];
    assert_eq!(crate::judged_env(&evil, || Some(ep.to_owned())), evil);
    assert_eq!(crate::judged_env(&env, || None), env);
}

#[test]
fn no_loader_variable_reaches_git() {
    let env: Vec<(OsString, OsString)> = [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "GCONV_PATH",
        "LOCPATH",
        "HOME",
        "OLD_PRELOAD",
    ]
    .iter()
    .map(|k| (OsString::from(k), OsString::from("/tmp/evil")))
    .collect();
    let kept: Vec<_> = loader_free(env).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kept,
        vec![OsString::from("HOME"), OsString::from("OLD_PRELOAD")]
    );
}

#[test]
fn a_group_is_found_by_its_whole_name() {
    let f = "root:x:0:\nsbx-gitx:x:7:\nsbx-git:x:65533:a,b\nbad:x:nan:\n";
    assert_eq!(super::gid_in(f, "sbx-git"), Some(65533));
    assert_eq!(super::gid_in(f, "sbx-gi"), None);
    assert_eq!(super::gid_in(f, "bad"), None);
    assert_eq!(super::gid_in(f, "x"), None);
}

/// The agent's home comes from the password file by uid.
#[test]
fn passwd_home_finds_the_uid_line() {
    let f =
        b"root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/bash\nbad:x:1001\n";
    assert_eq!(
        super::passwd_home(f, 1000),
        Some(std::path::PathBuf::from("/home/agent"))
    );
    assert_eq!(super::passwd_home(f, 10), None);
    assert_eq!(super::passwd_home(f, 1001), None);
}

/// A pin asked in two halves reads the root process's answer as it came,
/// and one dropped unread still takes its answer off the session's
/// channel, so the next request reads its own (a stale yes would pass a
/// pin the root process refused).
#[test]
fn a_pin_asked_ahead_reads_its_own_answer() {
    let (worker, root) = UnixStream::pair().unwrap();
    let worker: &'static UnixStream = Box::leak(Box::new(worker));
    let mut root = root;
    let answers = |root: &mut UnixStream, ok: u8| {
        let mut what = [0u8; 4];
        root.read_exact(&mut what).unwrap();
        assert_eq!(u32::from_le_bytes(what), KEEP_PIN);
        for _ in 0..2 {
            let mut n = [0u8; 4];
            root.read_exact(&mut n).unwrap();
            let mut part = vec![0u8; u32::from_le_bytes(n) as usize];
            root.read_exact(&mut part).unwrap();
        }
        root.write_all(&[ok]).unwrap();
    };
    let ask = || {
        assert!(send_to_root(worker, KEEP_PIN, &[b"name", &[b'a'; 40]]).unwrap());
        PinAsked(Some(worker))
    };
    let asked = ask();
    answers(&mut root, 1);
    assert!(asked.answer().is_ok());
    let asked = ask();
    answers(&mut root, 0);
    assert!(asked.answer().is_err());
    // Dropped unread after a yes: the next ask hears its own no.
    drop({
        let a = ask();
        answers(&mut root, 1);
        a
    });
    let asked = ask();
    answers(&mut root, 0);
    assert!(asked.answer().is_err());
}
