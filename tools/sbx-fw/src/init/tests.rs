//! Every way init fails closed, against recording fakes: no root, no
//! network namespace. The real implementations are proven in tests/fwbed.

use sbx_core::config::Config;
use sbx_core::error::SbxError;

use super::*;
use crate::fake::{Call, FakeAudit, FakeMeta, FakeNetfilter, FakeResolver, FixedClock};
use crate::plan::{Family, block_all};

const META: &str = r#"{"web":["192.0.2.0/24"],"api":["2001:db8::/32"],"git":[]}"#;

struct World {
    nf: FakeNetfilter,
    resolver: FakeResolver,
    meta: FakeMeta,
    audit: FakeAudit,
    cache: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        Self {
            nf: FakeNetfilter::default(),
            resolver: FakeResolver::with(&[
                ("must.test", "198.18.1.1"),
                ("other.test", "2001:2::1"),
            ]),
            meta: FakeMeta(Ok(META.into())),
            audit: FakeAudit::default(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn sys(&self) -> Sys<'_> {
        Sys {
            nf: &self.nf,
            resolver: &self.resolver,
            meta: &self.meta,
            clock: &FixedClock,
            audit: &self.audit,
        }
    }

    /// init with `required` names, only those on the allowlist (plus the
    /// built-in ones), GitHub on.
    fn install(&self, required: &[&str]) -> Result<Built, FwError> {
        let mut cfg = Config::default();
        cfg.network.github = true;
        cfg.network.required =
            sbx_core::config::Unique(required.iter().map(|d| d.parse().unwrap()).collect());
        let list = Allowlist::build(&cfg.network, &[]);
        let upstreams = ["198.18.0.53".parse().unwrap()];
        let req = Request {
            cfg: &cfg,
            list: &list,
            upstreams: &upstreams,
            local: Vec::new(),
            was_proxy: false,
            dry_run: false,
            timeout: Duration::from_millis(50),
            meta_url: "https://meta.github.test/meta",
            cache_dir: self.cache.path().to_owned(),
            lock_dir: None,
        };
        install(&self.sys(), &req)
    }

    /// The calls after which everything is blocked, in both families.
    fn ends_blocked(&self) -> bool {
        let calls = self.nf.calls();
        let n = calls.len();
        n >= 2
            && calls[n - 2..]
                == [
                    Call::Tables(Family::V4, block_all(Family::V4)),
                    Call::Tables(Family::V6, block_all(Family::V6)),
                ]
    }
}

/// A required name whose lookup times out: nothing of the plan goes in,
/// and a first run blocks everything, audited.
#[test]
fn a_resolver_timeout_on_a_required_name_blocks_everything() {
    let w = World::new();
    let err = w.install(&["slow.test"]).unwrap_err();
    assert_eq!(err.exit().code(), 69);
    let msg = err.to_string();
    assert!(msg.contains("slow.test: lookup failed: timed out"), "{msg}");
    assert!(msg.contains("all traffic is blocked"), "{msg}");
    assert!(!w.nf.calls().iter().any(|c| matches!(c, Call::Ipset(_))));
    assert!(w.ends_blocked(), "{:?}", w.nf.calls());
    assert!(w.audit.text().contains(r#""policy":"fail-closed""#));
}

/// The same on a running firewall: it is left exactly as it was.
#[test]
fn a_resolver_timeout_keeps_a_running_firewall() {
    let mut w = World::new();
    w.nf.installed = true;
    let err = w.install(&["slow.test"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("the previous firewall is unchanged")
    );
    assert_eq!(w.nf.calls(), []);
}

/// The IPv6 rules refused after the sets and the IPv4 rules went in:
/// both families end blocked, and nothing after (nat, conntrack) runs.
#[test]
fn a_restore_that_fails_halfway_leaves_everything_blocked() {
    let w = World::new();
    w.nf.fail
        .lock()
        .unwrap()
        .push(Call::Tables(Family::V6, String::new()));
    let err = w.install(&["must.test"]).unwrap_err();
    assert_eq!(err.exit().code(), 69);
    assert!(err.to_string().contains("all traffic is blocked"), "{err}");
    let calls = w.nf.calls();
    assert!(matches!(calls[0], Call::Ipset(_)), "{calls:?}");
    assert!(w.ends_blocked(), "{calls:?}");
    assert!(!calls.contains(&Call::Flush), "{calls:?}");
}

/// The conntrack flush, the last step, failing: still blocked, since old
/// connections would otherwise outlive the rules.
#[test]
fn a_failed_conntrack_flush_blocks_everything() {
    let w = World::new();
    w.nf.fail.lock().unwrap().push(Call::Flush);
    assert!(w.install(&[]).is_err());
    assert!(w.ends_blocked(), "{:?}", w.nf.calls());
}

/// A set with no room for the resolved addresses: the restore fails and
/// everything is blocked.
#[test]
fn a_set_that_fills_blocks_everything() {
    let mut w = World::new();
    w.nf.set_room = Some(1);
    let err = w.install(&["must.test"]).unwrap_err();
    assert!(err.to_string().contains("Hash is full"), "{err}");
    assert!(w.ends_blocked(), "{:?}", w.nf.calls());
}

fn github_sets(w: &World) -> Vec<String> {
    let calls = w.nf.calls();
    let Some(Call::Ipset(script)) = calls.first() else {
        panic!("no ipset restore: {calls:?}");
    };
    script
        .lines()
        .filter(|l| l.starts_with("add sbx-gh"))
        .map(str::to_owned)
        .collect()
}

/// The meta fetch failing with nothing cached: the firewall goes up with
/// GitHub blocked (empty sets), and says so.
#[test]
fn a_failed_meta_fetch_leaves_github_blocked() {
    let mut w = World::new();
    w.meta = FakeMeta(Err(crate::github::MetaError::Fetch(
        "connection refused".into(),
    )));
    let b = w.install(&[]).unwrap();
    assert!(b.plan.github.is_empty());
    assert_eq!(github_sets(&w), Vec::<String>::new());
    let warned = b.state.warnings.join("\n");
    assert!(warned.contains("GitHub stays blocked"), "{warned}");
    assert!(warned.contains("connection refused"), "{warned}");
}

/// A meta body that is not a meta document counts as a failed fetch:
/// the last good copy is used, else GitHub stays blocked.
#[test]
fn a_garbage_meta_document_is_a_failed_fetch() {
    let mut w = World::new();
    w.meta = FakeMeta(Ok("<html>rate limited</html>".into()));
    let b = w.install(&[]).unwrap();
    assert!(b.plan.github.is_empty());
    assert!(b.state.warnings.join("\n").contains("not JSON"));

    // With a good copy cached, that copy is installed.
    let mut w = World::new();
    w.install(&[]).unwrap();
    w.nf = FakeNetfilter::default();
    w.meta = FakeMeta(Ok(r#"{"web":["not a range"]}"#.into()));
    let b = w.install(&[]).unwrap();
    assert_eq!(b.state.github.source, crate::github::RangeSource::Cache);
    assert_eq!(
        github_sets(&w),
        [
            "add sbx-gh4-new 192.0.2.0/24",
            "add sbx-gh6-new 2001:db8::/32"
        ]
    );
}

/// All good: sets, both families' rules, conntrack flushed, in that order.
#[test]
fn a_good_init_installs_sets_then_rules_then_flushes() {
    let w = World::new();
    let b = w.install(&["must.test"]).unwrap();
    assert_eq!(
        b.plan.allow4,
        ["198.18.1.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let calls = w.nf.calls();
    assert!(matches!(calls[0], Call::Ipset(_)));
    assert!(matches!(calls.last(), Some(Call::Flush)), "{calls:?}");
    assert!(!w.ends_blocked());
}
