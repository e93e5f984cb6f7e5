//! The filter's sockets: a fixed pool of UDP workers and a bounded set of
//! TCP connections, each with deadlines.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::filter::Filter;
use super::upstream::Network;
use super::{Reason, TCP_CONN_DEADLINE, TCP_IDLE, TCP_QUERY_DEADLINE, TCP_SLOTS, UDP_WORKERS};
use crate::auditlog::Log;
use crate::netfilter::System;

/// Fill `buf` by `deadline`, however slowly the bytes come.
fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[at..])? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => at += n,
        }
    }
    Ok(())
}

fn serve_tcp(filter: &Filter, mut conn: TcpStream) {
    let end = Instant::now() + TCP_CONN_DEADLINE;
    loop {
        // The next query's first byte within the idle time, the whole of
        // it within the query deadline, all within the connection's.
        let mut len = [0u8; 2];
        if read_by(&mut conn, &mut len[..1], end.min(Instant::now() + TCP_IDLE)).is_err() {
            break;
        }
        let by = end.min(Instant::now() + TCP_QUERY_DEADLINE);
        if read_by(&mut conn, &mut len[1..], by).is_err() {
            break;
        }
        let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if read_by(&mut conn, &mut q, by).is_err() {
            break;
        }
        let Some(r) = filter.handle(&q, true) else {
            break;
        };
        let Ok(len) = u16::try_from(r.len()) else {
            break;
        };
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&r);
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero()
            || conn.set_write_timeout(Some(left)).is_err()
            || conn.write_all(&framed).is_err()
        {
            break;
        }
    }
}

/// The TCP connections being served, oldest first, so a new client can
/// take the slot of the oldest when all are held.
#[derive(Default)]
struct Slots {
    next: u64,
    open: std::collections::VecDeque<(u64, TcpStream)>,
}

/// Bind both transports, call `ready`, and serve until killed: a fixed
/// pool of UDP workers, at most [`TCP_SLOTS`] TCP connections.
pub fn serve(dir: &Path, listen: SocketAddr, ready: impl FnOnce()) -> std::io::Result<()> {
    let udp = Arc::new(UdpSocket::bind(listen)?);
    let tcp = TcpListener::bind(listen)?;
    let filter = Arc::new(Filter::new(
        dir,
        Box::new(System),
        Box::new(Network),
        Box::new(Log),
    ));
    filter.refresh();
    ready();
    for _ in 0..UDP_WORKERS {
        let (filter, udp) = (filter.clone(), udp.clone());
        std::thread::spawn(move || serve_udp(&filter, &udp));
    }
    {
        let filter = filter.clone();
        std::thread::spawn(move || {
            let mut last = String::new();
            loop {
                filter.publish(&mut last);
                filter.audit_summary();
                std::thread::sleep(Duration::from_millis(250));
            }
        });
    }
    let slots = Arc::new(Mutex::new(Slots::default()));
    for conn in tcp.incoming() {
        let Ok(conn) = conn else {
            // EMFILE and the like: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Some(id) = take_slot(&filter, &slots, &conn) else {
            continue;
        };
        let (filter, slots) = (filter.clone(), slots.clone());
        std::thread::spawn(move || {
            serve_tcp(&filter, conn);
            let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
            s.open.retain(|(i, _)| *i != id);
        });
    }
    Ok(())
}

/// One UDP worker: a query in, a reply out, forever.
fn serve_udp(filter: &Filter, udp: &UdpSocket) {
    let mut buf = vec![0u8; 65535];
    loop {
        let Ok((n, from)) = udp.recv_from(&mut buf) else {
            continue;
        };
        if let Some(r) = filter.handle(&buf[..n], false) {
            let _ = udp.send_to(&r, from);
        }
    }
}

/// A slot for a new TCP connection. All held: the oldest goes (its
/// thread sees EOF and ends), so slow clients cannot lock out a new one.
fn take_slot(filter: &Filter, slots: &Mutex<Slots>, conn: &TcpStream) -> Option<u64> {
    let handle = conn.try_clone().ok()?;
    let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
    if s.open.len() >= TCP_SLOTS {
        filter.count(Reason::TcpBusy);
        if let Some((_, old)) = s.open.pop_front() {
            let _ = old.shutdown(std::net::Shutdown::Both);
        }
    }
    s.next += 1;
    let id = s.next;
    s.open.push_back((id, handle));
    Some(id)
}
