//! The DNS filter: the sandbox's only resolver. It answers allowlisted
//! names (exact and `*.` wildcards) by forwarding to the upstream
//! resolvers, adds every address it hands out to the allow set (with a
//! timeout) before replying, and refuses every other name, which also ends
//! DNS tunnelling. Runs as root, the only uid the firewall lets reach the
//! upstream resolvers.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::RData;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::config::Domain;

use crate::allowlist::domain_matches;
use crate::plan::{SET_ALLOW4, SET_ALLOW6};
use crate::state::{self, State};

const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// Addresses handed out stay allowed at least this long, so a client that
/// caches past a short TTL is not cut off mid-use; at most a day.
const MIN_HOLD: u32 = 3600;
const MAX_HOLD: u32 = 86400;
/// One audit record per refused name per minute: a loop must not fill the disk.
const AUDIT_EVERY: Duration = Duration::from_secs(60);
/// Queries answered at once; more are dropped (the client retries), so a
/// flood cannot exhaust threads.
const IN_FLIGHT: usize = 256;

struct Loaded {
    mtime: Option<SystemTime>,
    allow: Vec<Domain>,
    upstreams: Vec<IpAddr>,
    state: State,
}

pub struct Filter {
    dir: PathBuf,
    loaded: Mutex<Loaded>,
    refused: Mutex<HashMap<String, Instant>>,
}

impl Filter {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            loaded: Mutex::new(Loaded {
                mtime: None,
                allow: Vec::new(),
                upstreams: Vec::new(),
                state: State::new(),
            }),
            refused: Mutex::new(HashMap::new()),
        }
    }

    /// Re-read the state file when it changed (init, allow, deny).
    fn refresh(&self) -> (Vec<Domain>, Vec<IpAddr>, State) {
        let mtime = std::fs::metadata(state::path(&self.dir))
            .and_then(|m| m.modified())
            .ok();
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if mtime != l.mtime {
            if let Ok(Some(s)) = State::load(&self.dir) {
                l.allow = s.allow.iter().filter_map(|d| d.parse().ok()).collect();
                l.upstreams = s.upstreams.clone();
                l.state = s;
            }
            l.mtime = mtime;
        }
        (l.allow.clone(), l.upstreams.clone(), l.state.clone())
    }

    /// Answer one query (wire format in, wire format out).
    pub fn handle(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let msg = match Message::from_vec(query) {
            Ok(m) => m,
            Err(_) if query.len() >= 2 => {
                let id = u16::from_be_bytes([query[0], query[1]]);
                return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                    .to_vec()
                    .ok();
            }
            Err(_) => return None,
        };
        let refuse = |code: ResponseCode| {
            let mut r = Message::error_msg(msg.metadata.id, msg.metadata.op_code, code);
            r.metadata.recursion_desired = msg.metadata.recursion_desired;
            r.metadata.recursion_available = true;
            r.add_queries(msg.queries.clone());
            r.to_vec().ok()
        };
        if msg.metadata.op_code != OpCode::Query || msg.queries.len() != 1 {
            return refuse(ResponseCode::Refused);
        }
        let name = msg.queries[0]
            .name
            .to_ascii()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let (allow, upstreams, st) = self.refresh();
        if !allow.iter().any(|d| domain_matches(d, &name)) {
            self.audit_refusal(&name);
            return refuse(ResponseCode::Refused);
        }
        let Some(resp) = upstreams.iter().find_map(|u| exchange(query, *u, tcp).ok()) else {
            return refuse(ResponseCode::ServFail);
        };
        if let Ok(m) = Message::from_vec(&resp) {
            let mut add = String::new();
            for rec in &m.answers {
                let (set, ip): (&str, IpAddr) = match &rec.data {
                    RData::A(a) => (SET_ALLOW4, a.0.into()),
                    RData::AAAA(a) => (SET_ALLOW6, a.0.into()),
                    _ => continue,
                };
                if st.is_permanent(ip) {
                    continue;
                }
                let hold = rec.ttl.clamp(MIN_HOLD, MAX_HOLD);
                add.push_str(&format!("add {set} {ip} timeout {hold}\n"));
            }
            // Before the reply: the client connects as soon as it has one.
            if !add.is_empty()
                && let Err(e) = crate::apply::ipset_restore(&add)
            {
                sbx_core::output::warn(&format!(
                    "DNS filter: cannot allow the addresses of {name}: {e}"
                ));
                return refuse(ResponseCode::ServFail);
            }
        }
        Some(resp)
    }

    fn audit_refusal(&self, name: &str) {
        let mut seen = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if seen
            .get(name)
            .is_some_and(|t| now.duration_since(*t) < AUDIT_EVERY)
        {
            return;
        }
        seen.insert(name.to_owned(), now);
        if seen.len() > 4096 {
            seen.retain(|_, t| now.duration_since(*t) < AUDIT_EVERY);
        }
        audit::append(
            &Record::new("sbx-fw", "dns", name, Outcome::Blocked, "dns-filter")
                .reason("name is not on the allowlist"),
        );
    }
}

/// Forward one query to one upstream, over the transport it came in on.
fn exchange(query: &[u8], upstream: IpAddr, tcp: bool) -> std::io::Result<Vec<u8>> {
    let to = SocketAddr::new(upstream, 53);
    if tcp {
        let mut s = TcpStream::connect_timeout(&to, UPSTREAM_TIMEOUT)?;
        s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
        s.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
        let len = u16::try_from(query.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        s.write_all(&framed)?;
        read_framed(&mut s)
    } else {
        let s = crate::probe::connected_udp(to, UPSTREAM_TIMEOUT)?;
        s.send(query)?;
        let mut buf = vec![0u8; 65535];
        loop {
            let n = s.recv(&mut buf)?;
            // Only the answer to this query (same id) is taken.
            if n >= 2 && buf[..2] == query[..2] {
                buf.truncate(n);
                return Ok(buf);
            }
        }
    }
}

fn read_framed(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

/// Bind both transports, call `ready`, and serve until killed.
pub fn serve(dir: &Path, listen: SocketAddr, ready: impl FnOnce()) -> std::io::Result<()> {
    let udp = UdpSocket::bind(listen)?;
    let tcp = TcpListener::bind(listen)?;
    let filter = Arc::new(Filter::new(dir));
    filter.refresh();
    ready();
    {
        let filter = filter.clone();
        std::thread::spawn(move || {
            for conn in tcp.incoming().flatten() {
                let filter = filter.clone();
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                    while let Ok(q) = read_framed(&mut conn) {
                        let Some(r) = filter.handle(&q, true) else {
                            break;
                        };
                        let mut framed = (r.len() as u16).to_be_bytes().to_vec();
                        framed.extend_from_slice(&r);
                        if conn.write_all(&framed).is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
    let udp = Arc::new(udp);
    let busy = Arc::new(AtomicUsize::new(0));
    let mut buf = vec![0u8; 65535];
    loop {
        let (n, from) = udp.recv_from(&mut buf)?;
        if busy.load(Ordering::Relaxed) >= IN_FLIGHT {
            continue;
        }
        busy.fetch_add(1, Ordering::Relaxed);
        let q = buf[..n].to_vec();
        let (filter, udp, busy) = (filter.clone(), udp.clone(), busy.clone());
        std::thread::spawn(move || {
            if let Some(r) = filter.handle(&q, false) {
                let _ = udp.send_to(&r, from);
            }
            busy.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
