//! Answering one query: strict parse, allowlist, upstream, the answer's
//! addresses into the allow set, then the reply.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use ipnet::IpNet;
use sbx_core::config::Domain;

use super::audit::AuditBudget;
use super::handed::Handed;
use super::upstream::Upstream;
use super::wire::{Question, Refusal, mix_case, on_chain, parse_query, refusal_reply};
use super::{EDNS_PAYLOAD, MAX_HOLD, MIN_HOLD, Reason, STATS_FILE};
use crate::allowlist::domain_matches;
use crate::auditlog::AuditSink;
use crate::netfilter::Netfilter;
use crate::plan::{SET_ALLOW4, SET_ALLOW6};
use crate::state::{self, State};

/// What the filter answers from, as the state file last said.
#[derive(Default)]
pub(super) struct Policy {
    allow: Vec<Domain>,
    /// Allowlist entries GitHub's: answered only inside `github_nets`.
    github_only: Vec<Domain>,
    github_nets: Vec<IpNet>,
    upstreams: Vec<IpAddr>,
    /// `[network] dns-types`: forwarded besides [`FORWARDED`].
    dns_types: Vec<u16>,
    /// `sbx-fw grant`: names answered until their time.
    grants: Vec<state::Grant>,
    state: State,
}

/// Query types forwarded upstream: what names are looked up for (A, AAAA,
/// CNAME, SVCB, HTTPS). The type is 16 bits the agent chooses per query;
/// any other is answered here (NOERROR, no records) and never leaves.
const FORWARDED: [u16; 5] = [1, 28, 5, 64, 65];

impl Policy {
    fn from_state(s: State) -> Self {
        Self {
            allow: s.allow.clone(),
            github_only: s.github_only.clone(),
            github_nets: s.github_nets.clone(),
            upstreams: s.upstreams.clone(),
            dns_types: s.dns_types.clone(),
            grants: s.grants.clone(),
            state: s,
        }
    }

    /// Allowlisted, or granted and not yet expired.
    fn allows(&self, name: &str, now: u64) -> bool {
        self.allow.iter().any(|d| domain_matches(d, name))
            || self
                .grants
                .iter()
                .any(|g| g.live(now) && domain_matches(&g.entry, name))
    }

    /// Seconds left when only grants allow `name`: what is handed out for
    /// it must not outlive them.
    fn grant_left(&self, name: &str, now: u64) -> Option<u64> {
        if self.allow.iter().any(|d| domain_matches(d, name)) {
            return None;
        }
        self.grants
            .iter()
            .filter(|g| g.live(now) && domain_matches(&g.entry, name))
            .map(|g| g.until - now)
            .max()
    }

    /// The entries (allowlisted and live grants) covering `name`, as text.
    fn entries(&self, name: &str, now: u64) -> Vec<String> {
        let granted = self.grants.iter().filter(|g| g.live(now)).map(|g| &g.entry);
        self.allow
            .iter()
            .chain(granted)
            .filter(|d| domain_matches(d, name))
            .map(|d| d.to_string())
            .collect()
    }

    /// Only GitHub's entries name it: its addresses must lie in its ranges.
    fn github_only(&self, name: &str) -> bool {
        let matches = |d: &&Domain| domain_matches(d, name);
        self.github_only.iter().any(|d| matches(&d))
            && !self
                .allow
                .iter()
                .filter(|d| !self.github_only.contains(d))
                .any(|d| matches(&d))
    }
}

/// An upstream answer sorted out: the client's reply, and what goes into
/// the allow set before it is sent.
struct Sorted {
    reply: Message,
    /// `ipset restore` lines adding the addresses with their holds.
    add: String,
    added: Vec<(IpAddr, u32)>,
}

pub struct Filter {
    pub(super) dir: PathBuf,
    /// The policy and the generation it was read at.
    loaded: Mutex<(Option<String>, Arc<Policy>)>,
    pub(super) refused: Mutex<AuditBudget>,
    pub(super) handed: Mutex<Handed>,
    counts: [AtomicU64; Reason::ALL.len()],
    nf: Box<dyn Netfilter>,
    upstream: Box<dyn Upstream>,
    pub(super) audit: Box<dyn AuditSink>,
}

impl Filter {
    pub fn new(
        dir: &Path,
        nf: Box<dyn Netfilter>,
        upstream: Box<dyn Upstream>,
        audit: Box<dyn AuditSink>,
    ) -> Self {
        Self {
            dir: dir.to_owned(),
            loaded: Mutex::new((None, Arc::default())),
            refused: Mutex::new(AuditBudget::new()),
            handed: Mutex::new(Handed::default()),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            nf,
            upstream,
            audit,
        }
    }

    /// Re-read the state file when its generation moved (init, allow, deny).
    pub(super) fn refresh(&self) -> Arc<Policy> {
        let generation = state::generation(&self.dir);
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if generation != l.0 || generation.is_none() {
            if let Ok(Some(s)) = State::load(&self.dir) {
                l.1 = Arc::new(Policy::from_state(s));
            }
            l.0 = generation;
        }
        l.1.clone()
    }

    pub(super) fn count(&self, r: Reason) {
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
    /// no reply can be addressed (fewer than two bytes: no id); that is
    /// counted too.
    pub fn handle(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let q = match parse_query(query) {
            Ok(q) => q,
            Err(r) => return self.refuse(r, None),
        };
        match self.answer(&q, tcp) {
            Ok(out) => Some(out),
            Err(reason) => {
                let r = Refusal {
                    reason,
                    id: Some(q.id),
                    rd: q.rd,
                };
                self.refuse(r, Some(&q))
            }
        }
    }

    /// The reply to a well-formed query, or why it is refused.
    fn answer(&self, q: &Question, tcp: bool) -> Result<Vec<u8>, Reason> {
        let p = self.refresh();
        if !p.allows(&q.name, state::unix_now()) {
            self.audit_refusal(&q.name, "not on the allowlist");
            return Err(Reason::NotAllowed);
        }
        if !FORWARDED.contains(&q.qtype) && !p.dns_types.contains(&q.qtype) {
            self.count(Reason::QueryType);
            return encode(nodata(q)?, q, tcp);
        }
        let asked = ask_upstream_query(q)?;
        let m = self.ask(&p, &asked).ok_or(Reason::Upstream)?;
        let sorted = self.sort(&p, q, m)?;
        // The policy may have changed while upstream answered (a deny, an
        // init dropping a wildcard): look again under the lock they hold
        // across their write and cleanup, and add only what is still allowed.
        let _held = if sorted.add.is_empty() {
            None
        } else {
            Some(state::lock(&self.dir).map_err(|_| Reason::AllowSet)?)
        };
        let p = if _held.is_some() { self.refresh() } else { p };
        if !p.allows(&q.name, state::unix_now()) {
            self.audit_refusal(&q.name, "denied while the query was upstream");
            return Err(Reason::NotAllowed);
        }
        // Recorded before the set is touched: deny must find every address.
        if !sorted.added.is_empty() {
            let entries = p.entries(&q.name, state::unix_now());
            self.record_handed(&sorted.added, &entries);
        }
        // Before the reply: the client connects as soon as it has one.
        if !sorted.add.is_empty()
            && let Err(e) = self.nf.ipset_restore(&sorted.add)
        {
            sbx_core::output::warn(&format!(
                "DNS filter: cannot allow the addresses of {}: {e}",
                q.name
            ));
            return Err(Reason::AllowSet);
        }
        encode(sorted.reply, q, tcp)
    }

    /// The first upstream's answer to exactly this question (exact letter
    /// case: 0x20), over TCP when UDP came back truncated.
    fn ask(&self, p: &Policy, up: &Message) -> Option<Message> {
        let question = &up.queries[0];
        p.upstreams.iter().find_map(|ip| {
            let mut m = Message::from_vec(&self.upstream.udp(up, *ip).ok()?).ok()?;
            if m.metadata.truncation {
                m = Message::from_vec(&self.upstream.tcp(up, *ip).ok()?).ok()?;
            }
            let same = m.metadata.message_type == MessageType::Response
                && m.queries.len() == 1
                && m.queries[0].query_type() == question.query_type()
                && m.queries[0].name().to_ascii() == question.name().to_ascii();
            same.then_some(m)
        })
    }

    /// The reply from the upstream answer: only the name's CNAME chain,
    /// GitHub's names only inside GitHub's ranges, and the addresses to
    /// allow for their TTL.
    fn sort(&self, p: &Policy, q: &Question, m: Message) -> Result<Sorted, Reason> {
        let github_only = p.github_only(&q.name);
        // A name only a grant opens: its addresses leave the set when the
        // grant ends, and within MIN_HOLD of a revoke.
        let cap = p
            .grant_left(&q.name, state::unix_now())
            .map(|left| left.clamp(1, u64::from(MIN_HOLD)) as u32);
        let mut reply = Message::new(q.id, MessageType::Response, OpCode::Query);
        reply.metadata.recursion_desired = q.rd;
        reply.metadata.recursion_available = true;
        reply.metadata.response_code = m.metadata.response_code;
        // The client's own question back, in its letter case, not ours.
        reply.add_query(question(&q.name, q.qtype)?);
        let mut sorted = Sorted {
            reply,
            add: String::new(),
            added: Vec::new(),
        };
        let (mut kept, mut dropped) = (0, 0);
        for mut rec in on_chain(&q.name, m.answers) {
            // The client's cache must not outlive the set entry either.
            if let Some(cap) = cap {
                rec.ttl = rec.ttl.min(cap);
            }
            if let Some(ip) = address(&rec.data) {
                // GitHub's ranges are open on 22 and 443 already; an
                // address outside them is left out of the answer.
                if github_only && !p.github_nets.iter().any(|n| n.contains(&ip)) {
                    dropped += 1;
                    continue;
                }
                if !github_only && !p.state.is_permanent(ip) {
                    let set = if ip.is_ipv4() { SET_ALLOW4 } else { SET_ALLOW6 };
                    let mut hold = rec.ttl.clamp(MIN_HOLD, MAX_HOLD);
                    if let Some(cap) = cap {
                        hold = hold.min(cap);
                    }
                    sorted
                        .add
                        .push_str(&format!("add {set} {ip} timeout {hold}\n"));
                    sorted.added.push((ip, hold));
                }
                kept += 1;
            }
            sorted.reply.add_answer(rec);
        }
        if dropped > 0 {
            self.audit_refusal(&q.name, "answer outside GitHub's ranges");
            if kept == 0 {
                return Err(Reason::GithubOutside);
            }
            self.count(Reason::GithubOutside);
        }
        Ok(sorted)
    }

    /// Publish the counters when they changed, for `sbx-fw status`.
    pub(super) fn publish(&self, last: &mut String) {
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

fn address(d: &RData) -> Option<IpAddr> {
    match d {
        RData::A(a) => Some(a.0.into()),
        RData::AAAA(a) => Some(a.0.into()),
        _ => None,
    }
}

/// The local answer for a type not forwarded: no records, no error, as a
/// resolver answers a name that has none of that type.
fn nodata(q: &Question) -> Result<Message, Reason> {
    let mut reply = Message::new(q.id, MessageType::Response, OpCode::Query);
    reply.metadata.recursion_desired = q.rd;
    reply.metadata.recursion_available = true;
    reply.add_query(question(&q.name, q.qtype)?);
    Ok(reply)
}

/// `name` (no trailing dot) of type `qtype`, class IN.
fn question(name: &str, qtype: u16) -> Result<Query, Reason> {
    let n = Name::from_ascii(format!("{name}.")).map_err(|_| Reason::BadName)?;
    let mut q = Query::query(n, RecordType::from(qtype));
    q.set_query_class(DNSClass::IN);
    Ok(q)
}

/// The upstream query, built anew from the parsed question: the name in
/// 0x20 mixed case, recursion desired, our EDNS payload size.
fn ask_upstream_query(q: &Question) -> Result<Message, Reason> {
    let mut up = Message::new(0, MessageType::Query, OpCode::Query);
    up.metadata.recursion_desired = true;
    up.add_query(question(&mix_case(&q.name), q.qtype)?);
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    up.set_edns(edns);
    Ok(up)
}

/// The reply's bytes; truncated (no answers) when too big for the
/// client's UDP, so it asks again over TCP. A reply that cannot be
/// written is refused, never dropped.
fn encode(mut reply: Message, q: &Question, tcp: bool) -> Result<Vec<u8>, Reason> {
    let out = reply.to_vec().map_err(|_| Reason::Unencodable)?;
    if tcp || out.len() <= usize::from(q.udp_size) {
        return Ok(out);
    }
    reply.answers.clear();
    reply.metadata.truncation = true;
    reply.to_vec().map_err(|_| Reason::Unencodable)
}
