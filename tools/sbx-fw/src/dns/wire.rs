//! The wire format the filter accepts and writes: a strict query parser,
//! hand-built refusals, and the checks an upstream reply must pass.

use std::sync::atomic::{AtomicU64, Ordering};

use hickory_proto::rr::{DNSClass, Name, RData};

use super::Reason;

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

pub(super) fn be16(b: &[u8], at: usize) -> Option<u16> {
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
    let (name, mut pos) = parse_name(b).map_err(no)?;
    let qtype = be16(b, pos).ok_or(no(Reason::BadName))?;
    let qclass = be16(b, pos + 2).ok_or(no(Reason::BadName))?;
    pos += 4;
    let mut udp_size = 512;
    if ar == Some(1) {
        (udp_size, pos) = parse_opt(b, pos).ok_or(no(Reason::ExtraRecords))?;
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
        name,
        qtype,
        udp_size,
    })
}

/// The question's name from offset 12: uncompressed host-name labels,
/// lowercased; and the offset after it.
fn parse_name(b: &[u8]) -> Result<(String, usize), Reason> {
    let mut pos = 12;
    let mut labels: Vec<String> = Vec::new();
    let mut wire_len = 1;
    loop {
        let len = *b.get(pos).ok_or(Reason::TrailingData)? as usize;
        pos += 1;
        if len == 0 {
            return Ok((labels.join("."), pos));
        }
        // 0xc0: a compression pointer, 0x40/0x80: reserved label types.
        if len > 63 {
            return Err(Reason::BadName);
        }
        let label = b.get(pos..pos + len).ok_or(Reason::BadName)?;
        if !label
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        {
            return Err(Reason::BadLabel);
        }
        wire_len += len + 1;
        if wire_len > 255 {
            return Err(Reason::BadName);
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
}

/// The OPT pseudo-record at `pos` (root name, type 41, class = UDP
/// size): the client's UDP size (at least 512) and the offset after it.
fn parse_opt(b: &[u8], pos: usize) -> Option<(u16, usize)> {
    if b.get(pos) != Some(&0) || be16(b, pos + 1) != Some(41) {
        return None;
    }
    let udp_size = be16(b, pos + 3)?.max(512);
    let end = pos + 11 + usize::from(be16(b, pos + 9)?);
    (end <= b.len()).then_some((udp_size, end))
}

/// A header-only or question-carrying refusal, built by hand: the query
/// may be too broken for a DNS library to echo.
pub(super) fn refusal_reply(r: &Refusal, q: Option<&Question>) -> Option<Vec<u8>> {
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

/// The reply repeats our question byte for byte (one question, same
/// name in the same 0x20 letter case, type and class).
pub(super) fn same_question(sent: &[u8], got: &[u8]) -> bool {
    let Some(end) = question_end(sent) else {
        return false;
    };
    be16(got, 4) == Some(1) && got.len() >= end && got[12..end] == sent[12..end]
}

/// Where the (uncompressed) first question of a message we built ends.
pub(super) fn question_end(b: &[u8]) -> Option<usize> {
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
pub(super) fn on_chain(
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
pub(super) fn mix_case(name: &str) -> String {
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
pub(super) fn random_id() -> u16 {
    random_u64() as u16
}

pub(super) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
    use hickory_proto::rr::RecordType;

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
