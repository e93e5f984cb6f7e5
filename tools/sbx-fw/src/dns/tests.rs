//! The filter's fail-closed paths against fakes: what cannot be parsed,
//! answered or allowed gets a refusal and a count, never silence.

use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record};

use super::Filter;
use crate::fake::{Call, FakeAudit, FakeNetfilter, FakeUpstream};
use crate::netfilter::Netfilter;
use crate::state::State;

/// A query for `name`, type A, id 0x1234.
fn query(name: &str) -> Vec<u8> {
    let mut b = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.') {
        b.push(l.len() as u8);
        b.extend_from_slice(l.as_bytes());
    }
    b.extend_from_slice(&[0, 0, 1, 0, 1]);
    b
}

/// An upstream answer to `q`: its own question, one A record.
fn answer(q: &Message) -> std::io::Result<Vec<u8>> {
    let mut m = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
    m.add_query(q.queries[0].clone());
    let name = q.queries[0].name().clone();
    m.add_answer(Record::from_rdata(
        name,
        60,
        RData::A(A::from(Ipv4Addr::new(198, 18, 1, 9))),
    ));
    m.to_vec().map_err(std::io::Error::other)
}

fn filter<F>(nf: impl Netfilter + 'static, up: F) -> (Filter, tempfile::TempDir)
where
    F: Fn(&Message) -> std::io::Result<Vec<u8>> + Send + Sync + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let mut st = State::new();
    st.allow = vec!["allowed.test".parse().unwrap()];
    st.upstreams = vec!["198.18.0.53".parse().unwrap()];
    st.store(dir.path()).unwrap();
    let f = Filter::new(
        dir.path(),
        Box::new(nf),
        Box::new(FakeUpstream(up)),
        Box::new(FakeAudit::default()),
    );
    (f, dir)
}

fn count(f: &Filter, reason: &str) -> u64 {
    f.counts()[reason].as_u64().unwrap()
}

fn rcode(reply: &[u8]) -> ResponseCode {
    Message::from_vec(reply).unwrap().metadata.response_code
}

#[test]
fn an_unparsable_query_is_refused_and_counted() {
    let (f, _d) = filter(FakeNetfilter::default(), answer);
    // A header and then junk: FORMERR with the client's id.
    let mut junk = query("allowed.test");
    junk.extend_from_slice(b"junk");
    let r = f.handle(&junk, false).expect("a reply");
    assert_eq!(rcode(&r), ResponseCode::FormErr);
    assert_eq!(Message::from_vec(&r).unwrap().metadata.id, 0x1234);
    assert_eq!(count(&f, "trailing-data"), 1);
    // Too short for a header but with an id: still answered.
    let r = f.handle(&[0x12, 0x34, 0x01], false).expect("a reply");
    assert_eq!(rcode(&r), ResponseCode::FormErr);
    // No id to answer to: counted all the same.
    assert_eq!(f.handle(&[0x12], false), None);
    assert_eq!(count(&f, "short"), 2);
}

#[test]
fn an_allowed_name_is_answered_after_its_address_is_allowed() {
    let nf = FakeNetfilter::default();
    let (f, _d) = filter(nf, answer);
    let r = f.handle(&query("allowed.test"), false).unwrap();
    let m = Message::from_vec(&r).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(m.answers.len(), 1);
    assert!(f.handle(&query("blocked.test"), false).is_some());
    assert_eq!(count(&f, "not-allowed"), 1);
}

/// The allow set is full: the address cannot be let through, so the name
/// is not answered (SERVFAIL), and that is counted.
#[test]
fn a_full_set_gets_servfail_not_an_answer() {
    let nf = FakeNetfilter {
        set_room: Some(0),
        ..Default::default()
    };
    let (f, _d) = filter(nf, answer);
    let r = f.handle(&query("allowed.test"), false).unwrap();
    let m = Message::from_vec(&r).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(m.answers.is_empty());
    assert_eq!(count(&f, "allow-set-failed"), 1);
}

/// An upstream that times out or sends garbage: SERVFAIL, counted.
#[test]
fn a_silent_or_garbled_upstream_gets_servfail() {
    let (f, _d) = filter(FakeNetfilter::default(), |_| {
        Err(std::io::ErrorKind::TimedOut.into())
    });
    let r = f.handle(&query("allowed.test"), false).unwrap();
    assert_eq!(rcode(&r), ResponseCode::ServFail);
    let (g, _e) = filter(
        FakeNetfilter::default(),
        |_| Ok(b"\x00\x01garbage".to_vec()),
    );
    let r = g.handle(&query("allowed.test"), false).unwrap();
    assert_eq!(rcode(&r), ResponseCode::ServFail);
    assert_eq!(
        count(&f, "upstream-failed") + count(&g, "upstream-failed"),
        2
    );
}

/// The address goes into the allow set, with its hold, before the
/// reply is sent.
#[test]
fn the_set_is_filled_before_the_reply() {
    let nf = std::sync::Arc::new(FakeNetfilter::default());
    let (f, _d) = filter(nf.clone(), answer);
    f.handle(&query("allowed.test"), false).unwrap();
    assert_eq!(
        nf.calls(),
        [Call::Ipset(
            "add sbx-allow4 198.18.1.9 timeout 300\n".into()
        )]
    );
}

/// A granted name is answered until its time, with what is handed out
/// for it (set entry and the reply's TTL) ending no later than the grant;
/// an expired one is refused like any name off the list.
#[test]
fn a_grant_answers_until_its_time_and_no_longer() {
    let nf = std::sync::Arc::new(FakeNetfilter::default());
    let (f, d) = filter(nf.clone(), answer);
    let mut st = State::load(d.path()).unwrap().unwrap();
    let now = crate::state::unix_now();
    st.grants = vec![
        crate::state::Grant {
            entry: "granted.test".parse().unwrap(),
            until: now + 20,
            by: "test".into(),
        },
        crate::state::Grant {
            entry: "gone.test".parse().unwrap(),
            until: now - 1,
            by: "test".into(),
        },
    ];
    st.store(d.path()).unwrap();
    let r = f.handle(&query("granted.test"), false).unwrap();
    let m = Message::from_vec(&r).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers[0].ttl <= 20, "{:?}", m.answers[0]);
    let calls = nf.calls();
    let [Call::Ipset(add)] = calls.as_slice() else {
        panic!("{calls:?}")
    };
    let hold: u32 = add.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        add.starts_with("add sbx-allow4 198.18.1.9 timeout ") && (1..=20).contains(&hold),
        "{add}"
    );
    let _ = f.handle(&query("gone.test"), false).unwrap();
    assert_eq!(count(&f, "not-allowed"), 1);
    // Allowlisted as well: the allowlist's hold, not the grant's.
    let _ = f.handle(&query("allowed.test"), false).unwrap();
    assert_eq!(
        nf.calls().last().unwrap(),
        &Call::Ipset("add sbx-allow4 198.18.1.9 timeout 300\n".into())
    );
}
