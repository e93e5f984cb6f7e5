//! An attacker's client for the git broker: sends requests the guard
//! itself never would (a pass-through kind for a commit, a planted
//! SBX_REAL_GIT, garbage frames), so the e2e suite can show the broker
//! refuses them on its own side.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

use sbx_git_guard::broker::proto::{self, Kind, Reply, Request, Transport};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut socket = OsString::from(sbx_git_guard::broker::DEFAULT_SOCKET);
    let mut kind = Kind::Git;
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut garbage = false;
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--socket") => socket = args.next().unwrap_or_default(),
            Some("--pass-through") => kind = Kind::PassThrough,
            Some("--garbage") => garbage = true,
            Some("--env") => {
                let kv = args
                    .next()
                    .unwrap_or_default()
                    .into_string()
                    .unwrap_or_default();
                let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
                env.push((k.into(), v.into()));
            }
            Some("--") => {
                rest.extend(args.by_ref());
            }
            _ => rest.push(a),
        }
    }
    let conn = match UnixStream::connect(&socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("forge: connect: {e}");
            return ExitCode::from(125);
        }
    };
    let cwd = std::fs::File::open(".").expect("cwd");
    let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let fds = [i.as_fd(), o.as_fd(), e.as_fd(), cwd.as_fd()];
    if garbage {
        // A frame claiming 4 GiB, then nothing: must be refused unread.
        let _ = conn.send(&u32::MAX.to_le_bytes(), &fds);
    } else {
        let req = Request {
            kind,
            umask: 0o022,
            args: rest,
            env,
        };
        if let Err(e) = proto::send_request(&conn, &req, fds) {
            eprintln!("forge: send: {e}");
            return ExitCode::from(125);
        }
    }
    match proto::read_reply(&conn) {
        Ok(Some(Reply::Exited(c))) => ExitCode::from(c as u8),
        Ok(Some(Reply::Signaled(s))) => ExitCode::from(128 + s as u8),
        Ok(Some(Reply::Error(m))) => {
            eprintln!("forge: broker refused: {m}");
            ExitCode::from(100)
        }
        Ok(None) => ExitCode::from(101),
        Err(e) => {
            eprintln!("forge: reply: {e}");
            ExitCode::from(102)
        }
    }
}
