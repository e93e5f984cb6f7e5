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

mod audit;
mod filter;
mod handed;
mod serve;
mod upstream;
mod wire;

use std::time::Duration;

use hickory_proto::op::ResponseCode;

pub use filter::Filter;
pub use handed::read_handed;
pub use serve::serve;
pub use upstream::{Network, Upstream};
pub use wire::{Question, Refusal, parse_query};

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
    /// The reply could not be written (SERVFAIL).
    Unencodable,
    /// A query type not forwarded: answered here with no records.
    QueryType,
}

impl Reason {
    pub const ALL: [Reason; 15] = [
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
        Reason::Unencodable,
        Reason::QueryType,
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
            Reason::Unencodable => "unencodable",
            Reason::QueryType => "query-type",
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
            Reason::Upstream | Reason::AllowSet | Reason::Unencodable => ResponseCode::ServFail,
            _ => ResponseCode::Refused,
        }
    }
}
#[cfg(test)]
mod tests;
