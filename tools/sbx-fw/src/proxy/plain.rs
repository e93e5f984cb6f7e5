//! Plain HTTP (port 80): the client's bytes go through user space, each
//! request head judged before it is sent; the answers are spliced.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use super::http::Request;
use super::policy::Refusal;
use super::relay::{Activity, pump, reset};
use super::requests::Requests;
use super::shared::Shared;

/// Judge every request head in `data`, as the first one was: a later
/// request on a kept-alive connection may name another host, or a method
/// and path its host's `[network.rules]` do not allow. What may be sent on
/// is appended to `out`. Err(Some(answer)): a rule refused, `out` keeps
/// what came before the refused request and the client gets that 403
/// after the answers to it; Err(None): reset.
async fn follow(
    s: &Shared,
    dst: SocketAddr,
    reqs: &mut Requests,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Option<Vec<u8>>> {
    let mut heads: Vec<Request> = Vec::new();
    let fed = reqs.feed(data, out, &mut heads);
    for r in &heads {
        let v = if r.method == "CONNECT" {
            Err(Refusal::Malformed)
        } else {
            s.judge(r.host.as_deref(), dst.ip()).await
        };
        if let Err(e) = v {
            s.audit(r.host.as_deref(), dst, e);
            return Err(None);
        }
        let p = s.policy();
        if let Some(host) = r.host.as_deref()
            && let Some(rs) = p.rules_for(host)
            && let Err(why) = rs.check(r)
        {
            let what = format!("{}: {why}", rs.label());
            s.audit_rule(Some(host), dst, Refusal::Rule, Some(&what));
            out.truncate(r.at);
            return Err(Some(rs.forbidden(&why)));
        }
    }
    fed.map_err(|_| {
        s.audit(None, dst, Refusal::Malformed);
        None
    })
}

/// A rule's refusal: its answer, then the connection ends.
fn forbid(mut c: TcpStream, answer: &[u8]) {
    let _ = c.try_write(answer);
    let _ = nix::sys::socket::shutdown(c.as_raw_fd(), nix::sys::socket::Shutdown::Write);
    // Read what the client still sends for a while before closing, so
    // the close does not reset the answer away.
    tokio::spawn(async move {
        let drain = async {
            let mut sink = vec![0u8; 16 * 1024];
            loop {
                match tokio::io::AsyncReadExt::read(&mut c, &mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(super::HELLO_TIMEOUT, drain).await;
    });
}

/// Relay a plain HTTP connection whose first bytes are `first`. Nothing
/// moving either way for `idle` (a kept-alive connection between
/// requests, a stalled answer) ends it.
pub async fn relay(c: TcpStream, s: Arc<Shared>, dst: SocketAddr, first: &[u8], idle: Duration) {
    let mut reqs = Requests::default();
    let mut out = Vec::new();
    let denied = std::sync::Mutex::new(None);
    match follow(&s, dst, &mut reqs, first, &mut out).await {
        Ok(()) => {}
        Err(Some(answer)) if out.is_empty() => return forbid(c, &answer),
        Err(Some(answer)) => *denied.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer),
        Err(None) => return reset(c),
    }
    let Some(u) = super::conn::dial(dst).await else {
        return reset(c);
    };
    let act = Activity::new();
    let refused = || denied.lock().unwrap_or_else(|e| e.into_inner()).is_some();
    let up = async {
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let mut off = 0;
            while off < out.len() {
                u.writable().await?;
                match u.try_write(&out[off..]) {
                    Ok(k) => off += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            out.clear();
            if refused() {
                // Answers come in request order: the server finishes
                // what it was sent, and the 403 follows its last byte,
                // so the client's write side stays open for it.
                act.keep_open();
                let _ =
                    nix::sys::socket::shutdown(u.as_raw_fd(), nix::sys::socket::Shutdown::Write);
                return Ok(());
            }
            c.readable().await?;
            let n = match c.try_read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            act.touch();
            if n == 0 {
                let _ =
                    nix::sys::socket::shutdown(u.as_raw_fd(), nix::sys::socket::Shutdown::Write);
                return Ok(());
            }
            match follow(&s, dst, &mut reqs, &chunk[..n], &mut out).await {
                Ok(()) => {}
                Err(Some(answer)) => {
                    *denied.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
                }
                Err(None) => return Err(std::io::Error::other("refused")),
            }
        }
    };
    let ok = tokio::select! {
        r = async { tokio::try_join!(up, pump(&u, &c, &act)) } => r.is_ok(),
        () = act.idle(idle) => false,
    };
    let answer = denied.into_inner().unwrap_or_else(|e| e.into_inner());
    if !ok {
        let _ = u.set_zero_linger();
    }
    match answer {
        Some(answer) => forbid(c, &answer),
        None if !ok => reset(c),
        None => {}
    }
}
