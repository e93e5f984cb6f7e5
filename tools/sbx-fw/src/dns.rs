//! The DNS filter: the sandbox's only resolver. It answers allowlisted
//! names (exact and `*.` wildcards) by asking the upstream resolvers,
//! adds every address it hands out to the allow set (with a timeout)
//! before replying, and refuses every other name, which also ends DNS
//! tunnelling. Runs as root, the only uid the firewall lets reach the
//! upstream resolvers.
//!
//! Nothing the client sent is forwarded: the query is parsed strictly
//! ([`parse_query`]) and the upstream query and the reply are built anew
//! from the parsed question. What cannot be parsed or is not allowed gets
//! a FORMERR or REFUSED, counted by reason (`sbx-fw status`), never silence.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use ipnet::IpNet;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::config::Domain;

use crate::allowlist::domain_matches;
use crate::plan::{SET_ALLOW4, SET_ALLOW6};
use crate::state::{self, State};

const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// A handed-out address stays allowed for its TTL, at least 5 minutes (a
/// client or runtime that caches a little past a short TTL still
/// connects) and at most an hour; the next init starts the sets afresh.
pub const MIN_HOLD: u32 = 300;
pub const MAX_HOLD: u32 = 3600;
/// One audit record per refused name per minute: a loop must not fill the disk.
const AUDIT_EVERY: Duration = Duration::from_secs(60);
/// Refusal records a second, all names together; the rest are counted
/// into one summary record a minute.
const AUDIT_RATE: u32 = 10;
/// Names remembered per period; beyond, the global budget still holds.
const AUDIT_NAMES: usize = 4096;
/// Threads answering UDP queries: a fixed pool, whatever the load.
const UDP_WORKERS: usize = 16;
/// TCP connections served at once; a new one beyond takes the oldest's
/// slot (counted).
pub const TCP_SLOTS: usize = 32;
/// An idle TCP connection is closed after this long.
const TCP_IDLE: Duration = Duration::from_secs(5);
/// A query's bytes, however dribbled, must all arrive within this.
const TCP_QUERY_DEADLINE: Duration = Duration::from_secs(15);
/// No TCP connection lives longer than this.
const TCP_CONN_DEADLINE: Duration = Duration::from_secs(60);
/// The UDP payload the filter asks upstream answers to fit in.
const EDNS_PAYLOAD: u16 = 1232;
/// Which allowlist entries each address the filter added was handed out
/// for, one "ADDRESS ENTRY..." line each, so `sbx-fw deny` can take out
/// what only the denied entries hold.
pub const HANDED_FILE: &str = "dns.handed";
/// Where the counters are published for `sbx-fw status`.
pub const STATS_FILE: &str = "dns.stats.json";

/// Why a query got no answer from upstream: each is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Shorter than a DNS header.
    Short,
    /// A response, or header counts other than one question.
    NotAQuery,
    /// An opcode other than QUERY.
    Opcode,
    /// A name with a compression pointer, an over-long label or name.
    BadName,
    /// A label with a byte outside letters, digits, `-` and `_` (`.`, `\`, NUL...).
    BadLabel,
    /// Answer, authority or additional records other than one EDNS OPT.
    ExtraRecords,
    /// Bytes after the question (and OPT record).
    TrailingData,
    /// A class other than IN.
    Class,
    /// The name is not on the allowlist.
    NotAllowed,
    /// A GitHub name whose answer lies outside GitHub's meta ranges.
    GithubOutside,
    /// No upstream answered (SERVFAIL).
    Upstream,
    /// The answer's addresses could not be added to the allow set (SERVFAIL).
    AllowSet,
    /// All TCP slots were busy: the connection was closed.
    TcpBusy,
}

impl Reason {
    pub const ALL: [Reason; 13] = [
        Reason::Short,
        Reason::NotAQuery,
        Reason::Opcode,
        Reason::BadName,
        Reason::BadLabel,
        Reason::ExtraRecords,
        Reason::TrailingData,
        Reason::Class,
        Reason::NotAllowed,
        Reason::GithubOutside,
        Reason::Upstream,
        Reason::AllowSet,
        Reason::TcpBusy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Short => "short",
            Reason::NotAQuery => "not-a-query",
            Reason::Opcode => "opcode",
            Reason::BadName => "bad-name",
            Reason::BadLabel => "bad-label",
            Reason::ExtraRecords => "extra-records",
            Reason::TrailingData => "trailing-data",
            Reason::Class => "class",
            Reason::NotAllowed => "not-allowed",
            Reason::GithubOutside => "github-outside-ranges",
            Reason::Upstream => "upstream-failed",
            Reason::AllowSet => "allow-set-failed",
            Reason::TcpBusy => "tcp-busy",
        }
    }

    fn rcode(self) -> ResponseCode {
        match self {
            Reason::Short
            | Reason::NotAQuery
            | Reason::BadName
            | Reason::ExtraRecords
            | Reason::TrailingData => ResponseCode::FormErr,
            Reason::Opcode => ResponseCode::NotImp,
            Reason::Upstream | Reason::AllowSet => ResponseCode::ServFail,
            _ => ResponseCode::Refused,
        }
    }
}

/// One question, as strictly parsed from a client's query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    pub rd: bool,
    /// Lowercase, dot-separated, no trailing dot ("" for the root).
    pub name: String,
    pub qtype: u16,
    /// The largest UDP reply the client takes (512 without EDNS).
    pub udp_size: u16,
}

/// A refusal: the reason and, when the header was readable, the id to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub id: Option<u16>,
    pub rd: bool,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Parse a query as a resolver should accept it: a header with one
/// question and nothing else but an optional EDNS OPT record, a name of
/// uncompressed host-name labels, class IN, no bytes left over.
pub fn parse_query(b: &[u8]) -> Result<Question, Refusal> {
    let id = be16(b, 0);
    let rd = b.get(2).is_some_and(|f| f & 0x01 != 0);
    let no = |reason| Refusal { reason, id, rd };
    if b.len() < 12 {
        return Err(no(Reason::Short));
    }
    let (flags, qd, an, ns, ar) = (b[2], be16(b, 4), be16(b, 6), be16(b, 8), be16(b, 10));
    if flags & 0x80 != 0 || qd != Some(1) {
        return Err(no(Reason::NotAQuery));
    }
    if (flags >> 3) & 0x0f != 0 {
        return Err(no(Reason::Opcode));
    }
    if an != Some(0) || ns != Some(0) || ar.is_some_and(|n| n > 1) {
        return Err(no(Reason::ExtraRecords));
    }
    let mut pos = 12;
    let mut labels: Vec<String> = Vec::new();
    let mut wire_len = 1;
    loop {
        let len = *b.get(pos).ok_or(no(Reason::TrailingData))? as usize;
        pos += 1;
        if len == 0 {
            break;
        }
        // 0xc0: a compression pointer, 0x40/0x80: reserved label types.
        if len > 63 {
            return Err(no(Reason::BadName));
        }
        let label = b.get(pos..pos + len).ok_or(no(Reason::BadName))?;
        if !label
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        {
            return Err(no(Reason::BadLabel));
        }
        wire_len += len + 1;
        if wire_len > 255 {
            return Err(no(Reason::BadName));
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
    let qtype = be16(b, pos).ok_or(no(Reason::BadName))?;
    let qclass = be16(b, pos + 2).ok_or(no(Reason::BadName))?;
    pos += 4;
    let mut udp_size = 512;
    if ar == Some(1) {
        // The OPT pseudo-record: root name, type 41, class = UDP size.
        if b.get(pos) != Some(&0) || be16(b, pos + 1) != Some(41) {
            return Err(no(Reason::ExtraRecords));
        }
        udp_size = be16(b, pos + 3).ok_or(no(Reason::ExtraRecords))?.max(512);
        let rdlen = be16(b, pos + 9).ok_or(no(Reason::ExtraRecords))? as usize;
        pos += 11 + rdlen;
        if pos > b.len() {
            return Err(no(Reason::ExtraRecords));
        }
    }
    if pos != b.len() {
        return Err(no(Reason::TrailingData));
    }
    if qclass != u16::from(DNSClass::IN) {
        return Err(no(Reason::Class));
    }
    Ok(Question {
        id: id.unwrap_or(0),
        rd,
        name: labels.join("."),
        qtype,
        udp_size,
    })
}

/// A header-only or question-carrying refusal, built by hand: the query
/// may be too broken for a DNS library to echo.
fn refusal_reply(r: &Refusal, q: Option<&Question>) -> Option<Vec<u8>> {
    let id = r.id?;
    let rcode = u16::from(r.reason.rcode()) as u8 & 0x0f;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&id.to_be_bytes());
    // QR, opcode QUERY, RD echoed; RA set.
    out.push(0x80 | u8::from(r.rd));
    out.push(0x80 | rcode);
    out.extend_from_slice(&[0, u8::from(q.is_some()), 0, 0, 0, 0, 0, 0]);
    if let Some(q) = q {
        for l in q.name.split('.').filter(|l| !l.is_empty()) {
            out.push(l.len() as u8);
            out.extend_from_slice(l.as_bytes());
        }
        out.push(0);
        out.extend_from_slice(&q.qtype.to_be_bytes());
        out.extend_from_slice(&u16::from(DNSClass::IN).to_be_bytes());
    }
    Some(out)
}

struct Loaded {
    mtime: Option<SystemTime>,
    allow: Vec<Domain>,
    /// Allowlist entries GitHub's: answered only inside `github_nets`.
    github_only: Vec<Domain>,
    github_nets: Vec<IpNet>,
    upstreams: Vec<IpAddr>,
    state: State,
}

#[derive(Clone)]
struct Policy {
    allow: Vec<Domain>,
    github_only: Vec<Domain>,
    github_nets: Vec<IpNet>,
    upstreams: Vec<IpAddr>,
    state: State,
}

/// One fresh UDP socket per upstream query: the kernel picks a random
/// ephemeral port, so an off-path forger must guess port and id (and the
/// 0x20 case pattern), not read a fixed port from /proc/net/udp. Root's
/// flows are connmarked (plan.rs), so the closed sockets' conntrack
/// entries open nothing for the agent. One socket per worker at a time.
fn exchange_udp(q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if ip.is_ipv6() {
        SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), 0)
    } else {
        SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0)
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(SocketAddr::new(ip, 53))?;
    let mut q = q.clone();
    let id = random_id();
    q.metadata.id = id;
    let body = q.to_vec().map_err(std::io::Error::other)?;
    sock.send(&body)?;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    let mut buf = vec![0u8; 65535];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        sock.set_read_timeout(Some(left))?;
        let n = sock.recv(&mut buf)?;
        // Another id is a stray or a forgery: keep waiting for ours.
        if be16(&buf[..n], 0) == Some(id) && same_question(&body, &buf[..n]) {
            return Ok(buf[..n].to_vec());
        }
    }
}

/// The reply repeats our question byte for byte (one question, same
/// name in the same 0x20 letter case, type and class).
fn same_question(sent: &[u8], got: &[u8]) -> bool {
    let Some(end) = question_end(sent) else {
        return false;
    };
    be16(got, 4) == Some(1) && got.len() >= end && got[12..end] == sent[12..end]
}

/// Where the (uncompressed) first question of a message we built ends.
fn question_end(b: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let len = usize::from(*b.get(at)?);
        if len == 0 {
            return Some(at + 1 + 4).filter(|e| *e <= b.len());
        }
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
    }
}

/// Only the question's name and its CNAME chain (in answer order) may own
/// records: anything else is an injection and is left out.
fn on_chain(
    qname: &str,
    answers: Vec<hickory_proto::rr::Record>,
) -> Vec<hickory_proto::rr::Record> {
    let canon = |n: &Name| n.to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let mut owners = vec![qname.trim_end_matches('.').to_ascii_lowercase()];
    let mut out = Vec::new();
    for rec in answers {
        if !owners.contains(&canon(&rec.name)) {
            continue;
        }
        if let RData::CNAME(c) = &rec.data {
            owners.push(canon(&c.0));
        }
        out.push(rec);
    }
    out
}

/// DNS 0x20: each letter of the name in a random case.
fn mix_case(name: &str) -> String {
    let mut bits = 0u64;
    let mut left = 0;
    name.chars()
        .map(|c| {
            if !c.is_ascii_alphabetic() {
                return c;
            }
            if left == 0 {
                bits = random_u64();
                left = 64;
            }
            left -= 1;
            let upper = bits & 1 == 1;
            bits >>= 1;
            if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// Query ids need not be secret from the agent (it cannot reach the
/// upstream), only hard to guess from outside: the std hasher's random keys.
fn random_id() -> u16 {
    random_u64() as u16
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A truncated UDP answer is asked again over TCP (a short-lived socket;
/// rare, and root's flows are marked in any case).
fn exchange_tcp(q: &Message, upstream: IpAddr) -> std::io::Result<Vec<u8>> {
    let to = SocketAddr::new(upstream, 53);
    let mut s = TcpStream::connect_timeout(&to, UPSTREAM_TIMEOUT)?;
    s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    s.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
    let body = q.to_vec().map_err(std::io::Error::other)?;
    let len = u16::try_from(body.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(&body);
    s.write_all(&framed)?;
    read_framed(&mut s)
}

/// What keeps refusal records few: per name and reason once a period,
/// and at most [`AUDIT_RATE`] a second in all.
struct AuditBudget {
    new: HashSet<String>,
    old: HashSet<String>,
    since: Instant,
    /// (generation, second within it) the count below is for.
    window: (Instant, u64),
    in_window: u32,
    suppressed: u64,
    summary_at: Option<Instant>,
}

/// The filter's record of what it added: address -> (entries, hold end).
#[derive(Default)]
struct Handed {
    by_ip: HashMap<IpAddr, (Vec<String>, Instant)>,
    /// Lines in the file; rewritten from `by_ip` when it doubles.
    lines: usize,
}

/// Parse [`HANDED_FILE`]: address -> entries (every line counts).
pub fn read_handed(dir: &Path) -> HashMap<IpAddr, Vec<String>> {
    let mut out: HashMap<IpAddr, Vec<String>> = HashMap::new();
    let Ok(t) = std::fs::read_to_string(dir.join(HANDED_FILE)) else {
        return out;
    };
    for l in t.lines() {
        let mut w = l.split_whitespace();
        let Some(Ok(ip)) = w.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        let e = out.entry(ip).or_default();
        for d in w {
            if !e.iter().any(|x| x == d) {
                e.push(d.to_owned());
            }
        }
    }
    out
}

pub struct Filter {
    dir: PathBuf,
    loaded: Mutex<Loaded>,
    refused: Mutex<AuditBudget>,
    handed: Mutex<Handed>,
    counts: [AtomicU64; Reason::ALL.len()],
}

impl Filter {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            loaded: Mutex::new(Loaded {
                mtime: None,
                allow: Vec::new(),
                github_only: Vec::new(),
                github_nets: Vec::new(),
                upstreams: Vec::new(),
                state: State::new(),
            }),
            refused: Mutex::new(AuditBudget {
                new: HashSet::new(),
                old: HashSet::new(),
                since: Instant::now(),
                window: (Instant::now(), 0),
                in_window: 0,
                suppressed: 0,
                summary_at: None,
            }),
            handed: Mutex::new(Handed::default()),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Re-read the state file when it changed (init, allow, deny).
    fn refresh(&self) -> Policy {
        let mtime = std::fs::metadata(state::path(&self.dir))
            .and_then(|m| m.modified())
            .ok();
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if mtime != l.mtime {
            if let Ok(Some(s)) = State::load(&self.dir) {
                let parse = |v: &[String]| -> Vec<Domain> {
                    v.iter().filter_map(|d| d.parse().ok()).collect()
                };
                l.allow = parse(&s.allow);
                l.github_only = parse(&s.github_only);
                l.github_nets = s.github_nets.clone();
                l.upstreams = s.upstreams.clone();
                l.state = s;
            }
            l.mtime = mtime;
        }
        Policy {
            allow: l.allow.clone(),
            github_only: l.github_only.clone(),
            github_nets: l.github_nets.clone(),
            upstreams: l.upstreams.clone(),
            state: l.state.clone(),
        }
    }

    fn count(&self, r: Reason) {
        if let Some(i) = Reason::ALL.iter().position(|x| *x == r) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters, by reason name.
    pub fn counts(&self) -> serde_json::Value {
        let m: serde_json::Map<String, serde_json::Value> = Reason::ALL
            .iter()
            .zip(&self.counts)
            .map(|(r, c)| (r.name().to_owned(), c.load(Ordering::Relaxed).into()))
            .collect();
        serde_json::Value::Object(m)
    }

    fn refuse(&self, r: Refusal, q: Option<&Question>) -> Option<Vec<u8>> {
        self.count(r.reason);
        if r.reason != Reason::NotAllowed {
            self.audit_refusal(
                q.map_or("(unparsed query)", |q| q.name.as_str()),
                r.reason.name(),
            );
        }
        refusal_reply(&r, q)
    }

    /// Answer one query (wire format in, wire format out). None only when
    /// no reply can be addressed (fewer than two bytes: no id).
    pub fn handle(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let q = match parse_query(query) {
            Ok(q) => q,
            Err(r) => return self.refuse(r, None),
        };
        let no = |reason| Refusal {
            reason,
            id: Some(q.id),
            rd: q.rd,
        };
        let p = self.refresh();
        let matches = |d: &Domain| domain_matches(d, &q.name);
        if !p.allow.iter().any(matches) {
            self.audit_refusal(&q.name, "not on the allowlist");
            return self.refuse(no(Reason::NotAllowed), Some(&q));
        }
        // Only GitHub's entries name it: its addresses must lie in its ranges.
        let github_only = p.github_only.iter().any(matches)
            && !p
                .allow
                .iter()
                .filter(|d| !p.github_only.contains(d))
                .any(matches);
        let Ok(name) = Name::from_ascii(format!("{}.", mix_case(&q.name))) else {
            return self.refuse(no(Reason::BadName), Some(&q));
        };
        let mut up = Message::new(0, MessageType::Query, OpCode::Query);
        up.metadata.recursion_desired = true;
        let mut question = Query::query(name, RecordType::from(q.qtype));
        question.set_query_class(DNSClass::IN);
        up.add_query(question.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        up.set_edns(edns);

        let answer = p.upstreams.iter().find_map(|ip| {
            let mut m = Message::from_vec(&exchange_udp(&up, *ip).ok()?).ok()?;
            if m.metadata.truncation {
                m = Message::from_vec(&exchange_tcp(&up, *ip).ok()?).ok()?;
            }
            // The answer to this question, not another (exact case: 0x20).
            let same = m.metadata.message_type == MessageType::Response
                && m.queries.len() == 1
                && m.queries[0].query_type() == question.query_type()
                && m.queries[0].name().to_ascii() == question.name().to_ascii();
            same.then_some(m)
        });
        let Some(m) = answer else {
            return self.refuse(no(Reason::Upstream), Some(&q));
        };

        let mut reply = Message::new(q.id, MessageType::Response, OpCode::Query);
        reply.metadata.recursion_desired = q.rd;
        reply.metadata.recursion_available = true;
        reply.metadata.response_code = m.metadata.response_code;
        // The client's own question back, in its letter case, not ours.
        let Ok(asked) = Name::from_ascii(format!("{}.", q.name)) else {
            return self.refuse(no(Reason::BadName), Some(&q));
        };
        let mut asked = Query::query(asked, RecordType::from(q.qtype));
        asked.set_query_class(DNSClass::IN);
        reply.add_query(asked);
        let mut add = String::new();
        let mut added: Vec<(IpAddr, u32)> = Vec::new();
        let (mut kept, mut dropped) = (0, 0);
        for rec in on_chain(&q.name, m.answers) {
            let ip: Option<IpAddr> = match &rec.data {
                RData::A(a) => Some(a.0.into()),
                RData::AAAA(a) => Some(a.0.into()),
                _ => None,
            };
            if let Some(ip) = ip {
                if github_only {
                    // GitHub's ranges are open on 22 and 443 already; an
                    // address outside them is left out of the answer.
                    if !p.github_nets.iter().any(|n| n.contains(&ip)) {
                        dropped += 1;
                        continue;
                    }
                } else if !p.state.is_permanent(ip) {
                    let set = if ip.is_ipv4() { SET_ALLOW4 } else { SET_ALLOW6 };
                    let hold = rec.ttl.clamp(MIN_HOLD, MAX_HOLD);
                    add.push_str(&format!("add {set} {ip} timeout {hold}\n"));
                    added.push((ip, hold));
                }
                kept += 1;
            }
            reply.add_answer(rec);
        }
        if dropped > 0 {
            self.audit_refusal(&q.name, "answer outside GitHub's ranges");
            if kept == 0 {
                return self.refuse(no(Reason::GithubOutside), Some(&q));
            }
            self.count(Reason::GithubOutside);
        }
        // Recorded before the set is touched: deny must find every address.
        if !added.is_empty() {
            let entries: Vec<String> = p
                .allow
                .iter()
                .filter(|d| matches(d))
                .map(|d| d.to_string())
                .collect();
            self.record_handed(&added, &entries);
        }
        // Before the reply: the client connects as soon as it has one.
        if !add.is_empty()
            && let Err(e) = crate::apply::ipset_restore(&add)
        {
            sbx_core::output::warn(&format!(
                "DNS filter: cannot allow the addresses of {}: {e}",
                q.name
            ));
            return self.refuse(no(Reason::AllowSet), Some(&q));
        }
        let mut out = reply.to_vec().ok()?;
        if !tcp && out.len() > usize::from(q.udp_size) {
            // Too big for the client's UDP: truncated, it asks over TCP.
            reply.answers.clear();
            reply.metadata.truncation = true;
            out = reply.to_vec().ok()?;
        }
        Some(out)
    }

    fn record_handed(&self, added: &[(IpAddr, u32)], entries: &[String]) {
        let mut h = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut new = String::new();
        for (ip, hold) in added {
            let until = now + Duration::from_secs(u64::from(*hold));
            let (have, end) = h.by_ip.entry(*ip).or_insert_with(|| (Vec::new(), until));
            *end = (*end).max(until);
            let fresh: Vec<&String> = entries.iter().filter(|e| !have.contains(e)).collect();
            if !fresh.is_empty() {
                new.push_str(&ip.to_string());
                for e in fresh {
                    new.push(' ');
                    new.push_str(e);
                    have.push(e.clone());
                }
                new.push('\n');
            }
        }
        if new.is_empty() {
            return;
        }
        let path = self.dir.join(HANDED_FILE);
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(new.as_bytes()));
        if let Err(e) = appended {
            sbx_core::output::warn(&format!(
                "DNS filter: cannot record handed-out addresses in {}: {e}",
                path.display()
            ));
        }
        h.lines += new.lines().count();
        if h.lines > 2 * h.by_ip.len() + 1024 {
            // Compact: expired holds go, the rest is written anew.
            h.by_ip.retain(|_, (_, end)| *end > now);
            let mut all = String::new();
            for (ip, (es, _)) in &h.by_ip {
                all.push_str(&format!("{ip} {}\n", es.join(" ")));
            }
            let tmp = self.dir.join(format!(".{HANDED_FILE}.tmp"));
            if std::fs::write(&tmp, &all).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
                h.lines = h.by_ip.len();
            }
        }
    }

    fn audit_refusal(&self, name: &str, why: &str) {
        let mut a = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        // Two generations, swapped each period: a lookup sees the last
        // minute or two, and nothing is ever scanned whole.
        if now.duration_since(a.since) >= AUDIT_EVERY {
            a.old = std::mem::take(&mut a.new);
            a.since = now;
        }
        let key = format!("{name} {why}");
        if a.new.contains(&key) || a.old.contains(&key) {
            return;
        }
        if a.new.len() < AUDIT_NAMES {
            a.new.insert(key);
        }
        // The global budget: AUDIT_RATE records a second, the rest counted.
        let secs = now.duration_since(a.since).as_secs();
        if a.window != (a.since, secs) {
            a.window = (a.since, secs);
            a.in_window = 0;
        }
        if a.in_window >= AUDIT_RATE {
            a.suppressed += 1;
            return;
        }
        a.in_window += 1;
        drop(a);
        audit::append(
            &Record::new("sbx-fw", "dns", name, Outcome::Blocked, "dns-filter").reason(
                if why == "not on the allowlist" {
                    "name is not on the allowlist"
                } else {
                    why
                },
            ),
        );
    }

    /// One record a minute for the refusals the budget left out.
    fn audit_summary(&self) {
        let mut a = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if a.suppressed == 0
            || a.summary_at
                .is_some_and(|t| now.duration_since(t) < AUDIT_EVERY)
        {
            return;
        }
        let n = std::mem::take(&mut a.suppressed);
        a.summary_at = Some(now);
        drop(a);
        audit::append(
            &Record::new(
                "sbx-fw",
                "dns",
                "(refusals over the audit budget)",
                Outcome::Blocked,
                "dns-filter",
            )
            .reason(&format!("{n} more refused queries not logged one by one")),
        );
    }

    /// Publish the counters when they changed, for `sbx-fw status`.
    fn publish(&self, last: &mut String) {
        let now =
            serde_json::json!({"pid": std::process::id(), "refused": self.counts()}).to_string();
        if now != *last {
            let tmp = self.dir.join(format!(".{STATS_FILE}.tmp"));
            if std::fs::write(&tmp, &now).is_ok()
                && std::fs::rename(&tmp, self.dir.join(STATS_FILE)).is_ok()
            {
                *last = now;
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
    let filter = Arc::new(Filter::new(dir));
    filter.refresh();
    ready();
    for _ in 0..UDP_WORKERS {
        let (filter, udp) = (filter.clone(), udp.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65535];
            loop {
                let Ok((n, from)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(r) = filter.handle(&buf[..n], false) {
                    let _ = udp.send_to(&r, from);
                }
            }
        });
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
        let Ok(handle) = conn.try_clone() else {
            continue;
        };
        let id = {
            let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
            if s.open.len() >= TCP_SLOTS {
                // All held: the oldest goes (its thread sees EOF and ends),
                // so slow clients cannot lock out a new one.
                filter.count(Reason::TcpBusy);
                if let Some((_, old)) = s.open.pop_front() {
                    let _ = old.shutdown(std::net::Shutdown::Both);
                }
            }
            s.next += 1;
            let id = s.next;
            s.open.push_back((id, handle));
            id
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

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &[&[u8]], extra: &[u8], ar: u8) -> Vec<u8> {
        let mut b = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, ar];
        for l in name {
            b.push(l.len() as u8);
            b.extend_from_slice(l);
        }
        b.extend_from_slice(&[0, 0, 1, 0, 1]);
        b.extend_from_slice(extra);
        b
    }

    #[test]
    fn strict_parse_table() {
        let ok = parse_query(&q(&[b"Allowed", b"test"], &[], 0)).unwrap();
        assert_eq!(
            (ok.id, ok.name.as_str(), ok.qtype),
            (0x1234, "allowed.test", 1)
        );
        let opt = [0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            parse_query(&q(&[b"a", b"test"], &opt, 1)).unwrap().udp_size,
            4096
        );
        let bad: &[(Vec<u8>, Reason)] = &[
            (vec![0x12], Reason::Short),
            (q(&[b"a", b"test"], b"x", 0), Reason::TrailingData),
            (q(&[b"a", b"test"], &opt, 0), Reason::TrailingData),
            (q(&[b"a.b", b"test"], &[], 0), Reason::BadLabel),
            (q(&[b"a\\b", b"test"], &[], 0), Reason::BadLabel),
            (q(&[b"a\0", b"test"], &[], 0), Reason::BadLabel),
            (q(&[b"a test"], &[], 0), Reason::BadLabel),
            // An extra A record in the additional section.
            (
                q(&[b"a"], &[0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4], 1),
                Reason::ExtraRecords,
            ),
            (q(&[b"a"], &opt, 2), Reason::ExtraRecords),
        ];
        for (b, want) in bad {
            assert_eq!(parse_query(b).unwrap_err().reason, *want, "{b:?}");
        }
        let mut answer = q(&[b"a"], &[], 0);
        answer[7] = 1;
        assert_eq!(
            parse_query(&answer).unwrap_err().reason,
            Reason::ExtraRecords
        );
        let mut response = q(&[b"a"], &[], 0);
        response[2] |= 0x80;
        assert_eq!(
            parse_query(&response).unwrap_err().reason,
            Reason::NotAQuery
        );
        let mut ptr = q(&[], &[], 0);
        ptr[12] = 0xc0;
        ptr.insert(13, 12);
        assert_eq!(parse_query(&ptr).unwrap_err().reason, Reason::BadName);
    }

    #[test]
    fn refusals_carry_the_id_and_question() {
        let r = Refusal {
            reason: Reason::TrailingData,
            id: Some(7),
            rd: true,
        };
        let m = Message::from_vec(&refusal_reply(&r, None).unwrap()).unwrap();
        assert_eq!(m.metadata.id, 7);
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
        let q = parse_query(&q(&[b"x", b"test"], &[], 0)).unwrap();
        let r = Refusal {
            reason: Reason::NotAllowed,
            ..r
        };
        let m = Message::from_vec(&refusal_reply(&r, Some(&q)).unwrap()).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert_eq!(m.queries[0].name().to_ascii(), "x.test.");
        assert!(
            refusal_reply(
                &Refusal {
                    id: None,
                    ..r.clone()
                },
                None
            )
            .is_none()
        );
    }

    #[test]
    fn replies_must_repeat_the_mixed_case_question() {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        let name = Name::from_ascii(format!("{}.", mix_case("allowed.test"))).unwrap();
        m.add_query(Query::query(name, RecordType::A));
        let sent = m.to_vec().unwrap();
        assert!(same_question(&sent, &sent));
        // The same name in another case (a forger who does not know ours).
        let mut forged = sent.clone();
        let end = question_end(&sent).unwrap();
        for b in &mut forged[12..end - 4] {
            if b.is_ascii_alphabetic() {
                *b ^= 0x20;
            }
        }
        assert!(!same_question(&sent, &forged));
        let cased: std::collections::HashSet<String> =
            (0..32).map(|_| mix_case("allowed.test")).collect();
        assert!(cased.len() > 1, "0x20 case is not random: {cased:?}");
    }

    #[test]
    fn only_the_name_and_its_cname_chain_own_answers() {
        use hickory_proto::rr::Record;
        use hickory_proto::rr::rdata::{A, CNAME};
        let n = |s: &str| Name::from_ascii(s).unwrap();
        let a = |owner: &str, ip: [u8; 4]| {
            Record::from_rdata(
                n(owner),
                60,
                RData::A(A::from(std::net::Ipv4Addr::from(ip))),
            )
        };
        let answers = vec![
            a("evil.example.", [198, 18, 2, 1]),
            Record::from_rdata(
                n("WWW.Allowed.test."),
                60,
                RData::CNAME(CNAME(n("cdn.example."))),
            ),
            a("CDN.example.", [198, 18, 1, 1]),
            a("other.example.", [198, 18, 2, 2]),
        ];
        let kept: Vec<String> = on_chain("www.allowed.test", answers)
            .iter()
            .map(|r| r.name.to_ascii().to_ascii_lowercase())
            .collect();
        assert_eq!(kept, ["www.allowed.test.", "cdn.example."]);
    }
}
