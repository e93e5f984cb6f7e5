//! sbx-fw against real netfilter in the sealed bed (see src/main.rs). Each
//! test makes its own namespaces, so they run in parallel. The attacks run
//! as uid 1000 with an empty capability bounding set and no_new_privs, as
//! the agent does in a container.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{bin, is_root, prerequisite};
use serde_json::Value;

/// How the agent runs: uid 1000, no capabilities in any set, no_new_privs.
const AGENT: &[&str] = &[
    "setpriv",
    "--reuid=1000",
    "--regid=1000",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--",
];

struct Bed {
    child: Child,
    sbx: String,
    /// The gateway's and the neighbour's namespaces, as the bed names them.
    gw: String,
    nb: String,
    dir: tempfile::TempDir,
    /// `SBX_FW_BACKEND` for every sbx-fw run; None lets it choose.
    backend: Option<&'static str>,
    /// More variables for every sbx-fw run (the backup store's).
    env: Vec<(&'static str, &'static str)>,
}

/// `args` run in network namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap()
}

const CONFIG: &str = r#"
[sandbox]
ports = ["8080:3000"]

[network]
allow-domains = ["allowed.test", "dup.test", "rebind.test", "*.wild.test", "nx.test", "rotate.test"]
registries = false
"#;

impl Bed {
    /// A bed whose sbx-fw uses the system's (nft-backed) iptables.
    fn with_system_iptables(prefix: &str) -> Option<Self> {
        let mut bed = Self::new(prefix)?;
        bed.backend = Some("system");
        Some(bed)
    }

    fn new(prefix: &str) -> Option<Self> {
        if !prerequisite(is_root(), "root (network namespaces)") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        // Two checkouts testing at once name their namespaces apart.
        let prefix = format!(
            "{}{prefix}",
            std::env::var("SBX_FWBED_PREFIX").unwrap_or_default()
        );
        let mut child = Command::new(bin("sbx-fwbed"))
            .args([prefix.as_str(), dir.path().to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("bed did not start: {line:?}"));
        std::fs::write(
            dir.path().join("config.toml"),
            format!("{CONFIG}mode = \"address\"\n"),
        )
        .unwrap();
        // The audit log is written by root and by the agent uid.
        let log = dir.path().join("audit.jsonl");
        std::fs::write(&log, "").unwrap();
        Command::new("chmod")
            .args(["0666"])
            .arg(&log)
            .status()
            .unwrap();
        Some(Bed {
            child,
            sbx: v["sandbox"].as_str().unwrap().to_owned(),
            gw: v["gateway"].as_str().unwrap().to_owned(),
            nb: v["neighbour"].as_str().unwrap().to_owned(),
            dir,
            backend: None,
            env: Vec::new(),
        })
    }

    /// `sbx-fwbed resolver [ADDR]` in the sandbox namespace, up, and named
    /// by the namespace's resolv.conf as 127.0.0.11 (Docker's address).
    fn loopback_resolver(&self, addr: &[&str]) -> std::process::Child {
        let mut resolver = Command::new("ip")
            .args(["netns", "exec", &self.sbx])
            .arg(bin("sbx-fwbed"))
            .args(["resolver", self.dir.path().to_str().unwrap()])
            .args(addr)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(resolver.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        std::fs::write(
            format!("/etc/netns/{}/resolv.conf", self.sbx),
            "nameserver 127.0.0.11\noptions ndots:0\n",
        )
        .unwrap();
        resolver
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// The bed's config plus `extra` (in [network] unless it opens a
    /// table). Address mode unless `extra` sets a mode: the bed tests it
    /// by name, the default being proxy mode.
    fn config(&self, extra: &str) {
        let mode = if extra.contains("mode =") {
            ""
        } else {
            "mode = \"address\"\n"
        };
        std::fs::write(self.path("config.toml"), format!("{CONFIG}{mode}{extra}")).unwrap();
    }

    /// sbx-fw in the sandbox namespace, as root, or as the agent.
    fn fw(&self, agent: bool, args: &[&str]) -> Output {
        self.fw_as(if agent { AGENT } else { &[] }, args)
    }

    /// sbx-fw as the agent sbx-guest starts: under its seccomp filters.
    fn fw_guest_agent(&self, args: &[&str]) -> Output {
        let fwbed = bin("sbx-fwbed");
        self.fw_as(&[fwbed.to_str().unwrap(), "agent", "--"], args)
    }

    /// sbx-fw in the sandbox namespace, after the `prefix` command.
    fn fw_as(&self, prefix: &[&str], args: &[&str]) -> Output {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.sbx]);
        c.args(prefix);
        c.arg(bin("sbx-fw"));
        self.fw_args(&mut c, args);
        c.output().unwrap()
    }

    /// sbx-fw's arguments and environment, after the program in `c`.
    fn fw_args(&self, c: &mut Command, args: &[&str]) {
        c.args(["--config", self.path("config.toml").to_str().unwrap()])
            .args(args)
            .env("SBX_FW_STATE_DIR", self.path("state"))
            .env("SBX_FW_CACHE_DIR", self.path("cache"))
            .env("SSL_CERT_FILE", self.path("ca.pem"))
            .env("SBX_FW_GITHUB_META_URL", "https://meta.github.test/meta")
            .env("SBX_AUDIT_LOG", self.path("audit.jsonl"))
            .env_remove("GH_TOKEN");
        for k in [
            "AWS_ENDPOINT_URL_S3",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ] {
            c.env_remove(k);
        }
        c.envs(self.env.iter().copied());
        match self.backend {
            Some(b) => c.env("SBX_FW_BACKEND", b),
            None => c.env_remove("SBX_FW_BACKEND"),
        };
    }

    fn init(&self) -> Output {
        self.fw(false, &["init"])
    }

    fn ok(&self, agent: bool, args: &[&str]) -> String {
        let o = self.fw(agent, args);
        assert!(
            o.status.success(),
            "sbx-fw {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Verdicts of probes, keyed by probe text.
    fn probe(&self, agent: bool, probes: &[&str]) -> Vec<(String, String)> {
        // Refusals come back at once; only an expected open connection can
        // wait, so a long timeout costs nothing and holds on a loaded machine.
        let mut args = vec!["probe", "--json", "--timeout", "5000"];
        args.extend_from_slice(probes);
        self.ok(agent, &args)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["data"]["probe"].as_str().unwrap().to_owned(),
                    v["data"]["verdict"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    fn audit(&self) -> String {
        std::fs::read_to_string(self.path("audit.jsonl")).unwrap()
    }

    /// A thread inside the sandbox namespace (for long-lived connections).
    fn connect(&self, addr: &str) -> TcpStream {
        let (ns, addr) = (self.sbx.clone(), addr.to_owned());
        std::thread::spawn(move || {
            let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s
        })
        .join()
        .unwrap()
    }
}

impl Bed {
    /// A listener inside the sandbox namespace.
    fn listen(&self, addr: &str) -> std::net::TcpListener {
        let (ns, addr) = (self.sbx.clone(), addr.to_owned());
        std::thread::spawn(move || {
            let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            std::net::TcpListener::bind(&addr).unwrap()
        })
        .join()
        .unwrap()
    }
}

impl Bed {
    fn xtables_lock(&self) -> PathBuf {
        std::env::temp_dir().join(format!("{}.xtables.lock", self.sbx))
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.xtables_lock());
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn alive(s: &mut TcpStream) -> bool {
    if s.write_all(b"ping").is_err() {
        return false;
    }
    let mut buf = [0u8; 4];
    matches!(s.read(&mut buf), Ok(4))
}

fn assert_verdicts(got: &[(String, String)], want: &str) {
    for (p, v) in got {
        let ok = match want {
            "blocked" => v == "refused" || v == "dns-refused",
            w => v == w,
        };
        assert!(ok, "{p}: {v}, expected {want}\nall: {got:#?}");
    }
}

#[test]
fn every_leak_class_is_blocked_for_the_agent_and_the_allowlist_works() {
    let Some(bed) = Bed::new("fwa") else { return };
    leak_classes(&bed);
    // This kernel has x_tables, so the faster legacy tables were chosen.
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    assert_eq!(st["data"]["rules"]["backend"], "legacy", "{st}");
}

#[test]
fn every_leak_class_is_blocked_with_the_systems_nft_iptables_too() {
    let Some(bed) = Bed::with_system_iptables("fwn") else {
        return;
    };
    leak_classes(&bed);
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    assert_eq!(st["data"]["rules"]["backend"], "system", "{st}");
    assert!(st["data"]["rules"]["ipv4"].as_u64() > Some(10), "{st}");
}

fn leak_classes(bed: &Bed) {
    // Before init everything is open: the probes can tell open from refused.
    assert_verdicts(
        &bed.probe(
            true,
            &[
                "tcp:198.18.2.1:443",
                "tcp:10.77.0.3:443",
                "dns:198.18.0.54/x.tunnel.test/TXT",
            ],
        ),
        "open",
    );
    bed.ok(false, &["init"]);

    let blocked = [
        "tcp:198.18.2.1:443",    // a host not on the allowlist
        "tcp:[2001:2::2:1]:443", // the same over IPv6
        "tcp:198.18.1.1:80",     // another port on an allowlisted address
        "udp:198.18.1.1:443",    // another protocol (QUIC) to it
        "tcp:198.18.1.1:22",     // SSH to a non-GitHub host
        "tcp:10.77.0.1:8080",    // a port on the host/gateway
        "tcp:[fd77::1]:8080",    // the gateway over IPv6
        "tcp:10.77.0.3:443",     // a neighbour container
        "tcp:[fd77::3]:443",
        "tcp:169.254.169.254:80",           // cloud metadata
        "tcp:10.77.0.1:443",                // what rebind.test resolves to
        "dns:198.18.0.53/allowed.test",     // the upstream resolver, bypassing the filter
        "dns:198.18.0.54/allowed.test",     // another resolver
        "dns:127.0.0.53/x.tunnel.test/TXT", // tunnelling through the filter
        "dns:127.0.0.53/blocked.test",
        "raw",
        "packet",
    ];
    assert_verdicts(&bed.probe(true, &blocked), "blocked");

    // The allowlisted control passes, and names only the filter knows work.
    assert_verdicts(
        &bed.probe(
            true,
            &[
                "tcp:198.18.1.1:443",
                "tcp:[2001:2::1:1]:443",
                "tcp:198.18.3.1:22",
                "tcp:198.18.3.1:443",
            ],
        ),
        "open",
    );
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/x.wild.test"]), "open");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.3:443"]), "open");

    // Tampering as the agent fails and changes nothing.
    for cmd in [
        &["iptables", "-P", "OUTPUT", "ACCEPT"][..],
        &["iptables", "-F"],
        &["ip6tables", "-F"],
        &["iptables-legacy", "-P", "OUTPUT", "ACCEPT"],
        &["iptables-legacy", "-F"],
        &["ip6tables-legacy", "-F"],
        &["ipset", "flush", "sbx-allow4"],
        &["nft", "flush", "ruleset"],
    ] {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &bed.sbx]).args(AGENT);
        // A lock file the agent may open, so the kernel is what refuses.
        c.env("XTABLES_LOCKFILE", bed.xtables_lock());
        let o = c.args(cmd).output().unwrap();
        assert!(!o.status.success(), "{cmd:?} worked as the agent");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            ["Permission denied", "Operation not permitted"]
                .iter()
                .any(|m| err.contains(m))
                && !err.contains("lock file"),
            "{cmd:?}: {err}"
        );
    }
    for args in [
        &["reset", "--yes"][..],
        &["allow", "blocked.test"],
        &["init"],
        &["status"],
    ] {
        let o = bed.fw(true, args);
        assert_eq!(o.status.code(), Some(77), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("CAP_NET_ADMIN"));
    }
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");

    // What could be seen is in the audit log.
    let log = bed.audit();
    assert!(
        log.contains(
            r#""operation":"dns","target":"x.tunnel.test","result":"blocked","policy":"dns-filter""#
        ),
        "{log}"
    );
    assert!(
        log.contains(
            r#""operation":"reset","target":"firewall","result":"blocked","policy":"net-admin""#
        ),
        "{log}"
    );

    // Inbound: only the published container port.
    let _l3000 = bed.listen("10.77.0.2:3000");
    let _l3001 = bed.listen("10.77.0.2:3001");
    let nb = bed.nb.clone();
    let from_nb = |port: u16| {
        let o = Command::new("ip")
            .args(["netns", "exec", &nb])
            .arg(bin("sbx-fw"))
            .args([
                "probe",
                "--timeout",
                "5000",
                &format!("tcp:10.77.0.2:{port}"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(from_nb(3000), "open");
    assert_ne!(from_nb(3001), "open");

    // As sbx-guest starts the agent (its seccomp filters): verify also
    // checks the socket families only those leave out.
    let o = bed.fw_guest_agent(&["verify", "--reach", "allowed.test", "--json"]);
    let v = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && v.contains(r#""failed":0"#), "{v}");
    assert!(bed.audit().contains(r#""operation":"verify""#));
}

#[test]
fn the_fail_open_triggers_end_closed() {
    let Some(bed) = Bed::new("fwb") else { return };
    // A required name that does not exist: abort, and a first run blocks everything.
    bed.config("required = [\"nx.test\"]\n");
    let o = bed.init();
    assert_eq!(
        o.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("nx.test") && err.contains("all traffic is blocked"),
        "{err}"
    );
    assert_verdicts(
        &bed.probe(
            true,
            &[
                "tcp:198.18.1.1:443",
                "tcp:198.18.2.1:443",
                "dns:198.18.0.53/allowed.test",
                "tcp:10.77.0.3:443",
                "dns:127.0.0.53/allowed.test",
            ],
        ),
        "blocked",
    );
    // Root may still resolve, so the next init can recover; nothing else.
    assert_verdicts(
        &bed.probe(false, &["tcp:198.18.1.1:443", "udp:198.18.1.1:443"]),
        "blocked",
    );

    // A required name whose lookup fails (no answer): the same.
    bed.config("required = [\"slow.test\"]\n");
    let o = bed.fw(false, &["init", "--timeout", "300"]);
    assert_eq!(o.status.code(), Some(69));

    // Duplicate addresses and an optional NXDOMAIN or failed lookup are
    // warnings; the firewall goes up and is closed.
    bed.config("");
    std::fs::write(
        bed.path("config.toml"),
        CONFIG.replace("\"rotate.test\"", "\"rotate.test\", \"slow.test\"")
            + "mode = \"address\"\n",
    )
    .unwrap();
    let o = bed.fw(false, &["init", "--timeout", "300"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("198.18.1.1 is shared by allowed.test and dup.test"),
        "{err}"
    );
    assert!(err.contains("nx.test: no such name"), "{err}");
    assert!(err.contains("slow.test: lookup failed"), "{err}");
    assert_verdicts(
        &bed.probe(true, &["tcp:198.18.2.1:443", "tcp:10.77.0.1:443"]),
        "blocked",
    );
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.1:443"]), "open");

    // A failure on a running firewall keeps it as it was.
    bed.config("required = [\"nx.test\"]\n");
    let o = bed.init();
    assert_eq!(o.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the previous firewall is unchanged"));
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.1:443"]), "open");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");
}

#[test]
fn rerun_and_allow_keep_connections_and_old_ones_die() {
    let Some(bed) = Bed::new("fwc") else { return };
    // Opened before the firewall: one to a host that will be blocked, one
    // to a GitHub range (allowed).
    let mut doomed = bed.connect("198.18.2.1:80");
    let mut github = bed.connect("198.18.3.1:22");
    assert!(alive(&mut doomed) && alive(&mut github));
    bed.ok(false, &["init"]);
    assert!(
        !alive(&mut doomed),
        "a connection opened before init survived it"
    );
    assert!(alive(&mut github));

    // Re-running on a locked namespace works and stays closed (its speed is
    // bench/fw.sh's: a timed assertion here failed on a loaded machine).
    bed.ok(false, &["init"]);
    assert!(alive(&mut github), "an allowed connection died in a re-run");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");

    // allow: a new name becomes reachable, open connections stay.
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.2:443"]), "blocked");
    bed.ok(false, &["allow", "other.test"]);
    assert_verdicts(
        &bed.probe(true, &["tcp:198.18.1.2:443", "dns:127.0.0.53/other.test"]),
        "open",
    );
    assert!(alive(&mut github), "an allowed connection died in allow");
    // deny takes it back.
    bed.ok(false, &["deny", "other.test"]);
    assert_verdicts(
        &bed.probe(true, &["tcp:198.18.1.2:443", "dns:127.0.0.53/other.test"]),
        "blocked",
    );
    let log = bed.audit();
    assert!(
        log.contains(r#""operation":"allow","target":"other.test","result":"allowed""#),
        "{log}"
    );

    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    assert_eq!(st["data"]["sets"]["sbx-gh4"], 49);
    assert_eq!(st["data"]["dns_filter"]["running"], true);
    assert_eq!(st["data"]["state"]["github"]["source"], "fetched");
}

/// sbx-run keeps a sandbox's network namespace (and so its rules and
/// resolv.conf) when the sandbox container is replaced: the new container's
/// init starts with no state of its own, finds resolv.conf pointing at a
/// filter that died with the old container, and must still come up right.
#[test]
fn a_new_container_in_a_kept_namespace_gets_a_working_firewall() {
    let Some(bed) = Bed::new("fwk") else { return };
    bed.ok(false, &["init"]);
    let pid = std::fs::read_to_string(bed.path("state/dns.pid")).unwrap();
    Command::new("kill").arg(pid.trim()).status().unwrap();
    // kill(1) returns before the filter has closed its socket; until then a
    // query is read and never answered (a timeout, not a refusal).
    let proc_dir = format!("/proc/{}", pid.trim());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&proc_dir).exists() && std::time::Instant::now() < until {
        let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::remove_dir_all(bed.path("state")).unwrap();
    assert_verdicts(
        &bed.probe(true, &["dns:127.0.0.53/allowed.test"]),
        "blocked",
    );

    bed.ok(false, &["init"]);
    assert_verdicts(
        &bed.probe(true, &["dns:127.0.0.53/allowed.test", "tcp:198.18.1.1:443"]),
        "open",
    );
    assert_verdicts(
        &bed.probe(
            true,
            &["tcp:198.18.2.1:443", "dns:198.18.0.53/allowed.test"],
        ),
        "blocked",
    );
    // The filter forwards to the original resolver, not to itself.
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    assert_eq!(
        st["data"]["state"]["upstreams"],
        serde_json::json!(["198.18.0.53"]),
        "{st}"
    );
}

#[test]
fn github_ranges_come_from_the_cache_when_the_fetch_fails_else_github_stays_blocked() {
    let Some(bed) = Bed::new("fwd") else { return };
    let dead = [
        "init",
        "--github-meta-url",
        "https://meta.github.test:8443/meta",
        "--timeout",
        "500",
    ];
    // No fetch, no cache: GitHub stays blocked and init says so.
    let o = bed.fw(false, &dead);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("GitHub stays blocked"));
    assert_verdicts(&bed.probe(true, &["tcp:198.18.3.1:22"]), "blocked");
    // One good fetch fills the cache; a later failing one uses it.
    let o = bed.init();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("GitHub"), "{err}");
    let o = bed.fw(false, &dead);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("GitHub ranges from the cache"), "{err}");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.3.1:22"]), "open");
}

/// A re-init looks up what it needs (GitHub's meta host here) at the
/// upstream resolvers themselves: the filter it replaces may be dead.
#[test]
fn a_reinit_does_not_need_the_filter_it_replaces() {
    let Some(bed) = Bed::new("fwri") else { return };
    bed.ok(false, &["init"]);
    let pid = bed.path("state/dns.pid");
    let pid = std::fs::read_to_string(pid).unwrap().trim().to_owned();
    Command::new("kill").args(["-9", &pid]).status().unwrap();
    assert!(wait_gone(&pid), "the filter {pid} did not die");
    // Without a cache the meta fetch must succeed; with one, the warning
    // says it failed.
    std::fs::remove_dir_all(bed.path("cache")).unwrap();
    let o = bed.fw(false, &["init", "--timeout", "3000"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("GitHub"), "{err}");
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    assert_eq!(st["data"]["state"]["github"]["source"], "fetched", "{st}");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.3.1:22"]), "open");
}

#[test]
fn the_dns_filter_follows_rotating_addresses() {
    let Some(bed) = Bed::new("fwe") else { return };
    bed.ok(false, &["init"]);
    // rotate.test answers a new address (TTL 1) every time, like a CDN; each
    // one handed out is reachable at once, one never handed out is not.
    for _ in 0..3 {
        let out = bed.ok(true, &["probe", "--json", "dns:127.0.0.53/rotate.test"]);
        assert!(out.contains("with 1 answers"), "{out}");
    }
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    let sets = &st["data"]["sets"];
    assert!(sets["sbx-allow4"].as_u64().unwrap() >= 3, "{sets}");
    // rotate.test was resolved once at init and three times since: .1 to .4.
    assert_verdicts(
        &bed.probe(
            true,
            &[
                "tcp:198.18.6.1:443",
                "tcp:198.18.6.2:443",
                "tcp:198.18.6.3:443",
                "tcp:198.18.6.4:443",
            ],
        ),
        "open",
    );
    assert_verdicts(&bed.probe(true, &["tcp:198.18.6.9:443"]), "blocked");
}

#[test]
fn dry_run_prints_everything_and_installs_nothing() {
    let Some(bed) = Bed::new("fwf") else { return };
    let out = bed.ok(false, &["init", "--dry-run"]);
    assert!(
        out.contains("# iptables-restore\n*filter\n:INPUT DROP"),
        "{out}"
    );
    assert!(out.contains("add sbx-allow4-new 198.18.1.1"));
    assert!(out.contains(
        "-A SBX-OUT -p tcp -m multiport --dports 22,443 -m set --match-set sbx-gh6 dst -j ACCEPT"
    ));
    // Proxy mode: the nat part is our chain alone, for --noflush.
    bed.config("mode = \"proxy\"\n");
    let out = bed.ok(false, &["init", "--dry-run"]);
    assert!(
        out.contains("# iptables-restore --noflush, then iptables -t nat -I OUTPUT -j SBX-NAT")
            && out.contains("*nat\n:SBX-NAT - [0:0]\n-A SBX-NAT "),
        "{out}"
    );
    assert!(!out.contains(":OUTPUT ACCEPT"), "{out}");
    let v: Value = serde_json::from_str(&bed.ok(false, &["--json", "init", "--dry-run"])).unwrap();
    for fam in ["iptables", "ip6tables"] {
        let nat = v["data"]["nat"][fam].as_str().unwrap_or_default();
        assert!(nat.contains("-j REDIRECT --to-ports 3129"), "{v}");
        assert!(!v["data"][fam].as_str().unwrap().contains("*nat"), "{v}");
    }
    assert_eq!(v["data"]["nat"]["jump"], "OUTPUT -j SBX-NAT");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "open");
    assert!(!bed.path("state/state.json").exists());
    for v6 in [false, true] {
        assert!(!bed.tables(v6, &["-t", "nat", "-S"]).contains("SBX-NAT"));
    }
}

/// A backup store is reachable from inside by the endpoint sbx-backup uses,
/// read from the same variables, and nothing more comes with it; an
/// endpoint the firewall can never open is named at init.
#[test]
fn the_backup_store_and_only_it_is_reachable() {
    let Some(mut bed) = Bed::new("fwg") else {
        return;
    };
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.2:443"]), "open");
    bed.ok(false, &["init"]);
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.2:443"]), "blocked");

    bed.config("\n[backup]\nurl = \"s3://bkt/home\"\n");
    bed.env = vec![("AWS_ENDPOINT_URL", "https://other.test")];
    bed.ok(false, &["init"]);
    assert_verdicts(
        &bed.probe(true, &["tcp:198.18.1.2:443", "dns:127.0.0.53/other.test"]),
        "open",
    );
    assert_verdicts(
        &bed.probe(true, &["tcp:198.18.1.2:80", "tcp:198.18.2.1:443"]),
        "blocked",
    );
    let st: Value = serde_json::from_str(&bed.ok(false, &["status", "--json"])).unwrap();
    let names = st["data"]["state"]["names"].as_array().unwrap();
    assert!(
        names
            .iter()
            .any(|n| n["name"] == "other.test" && n["source"] == "backup"),
        "{names:?}"
    );

    // Plain http on another port is never opened: init says so, and the
    // store's name is not let in for it.
    bed.env = vec![("AWS_ENDPOINT_URL", "http://other.test:9000")];
    let o = bed.init();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("endpoint http://other.test:9000 is not https on port 443"),
        "{err}"
    );
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.2:443"]), "blocked");
}

impl Bed {
    /// `sbx-fwbed attack ARGS` in the sandbox, as the agent or as root.
    fn attack(&self, agent: bool, args: &[&str]) -> Value {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.sbx]);
        if agent {
            c.args(AGENT);
        }
        let o = c
            .arg(bin("sbx-fwbed"))
            .arg("attack")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "attack {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// `sbx-fwbed attack ARGS` as the agent, left running once its first
    /// line says `ready`; stdin is a pipe (closing it stops some attacks).
    fn attack_running(
        &self,
        args: &[&str],
        ready: &str,
    ) -> (Child, BufReader<std::process::ChildStdout>) {
        let mut c = Command::new("ip")
            .args(["netns", "exec", &self.sbx])
            .args(AGENT)
            .arg(bin("sbx-fwbed"))
            .arg("attack")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), ready, "attack {args:?}");
        (c, out)
    }

    /// A counting rule on the far side (the gateway's raw PREROUTING): what
    /// arrives there, whatever the sandbox's kernel reported to the sender.
    fn far_side_count(&self, v6: bool, spec: &[&str]) {
        let gw = self.gw.clone();
        let tables = if v6 {
            "ip6tables-legacy"
        } else {
            "iptables-legacy"
        };
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &gw,
                tables,
                "-t",
                "raw",
                "-A",
                "PREROUTING",
            ])
            .args(spec)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    fn far_side_arrived(&self, v6: bool) -> u64 {
        let gw = self.gw.clone();
        let tables = if v6 {
            "ip6tables-legacy"
        } else {
            "iptables-legacy"
        };
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &gw,
                tables,
                "-t",
                "raw",
                "-nvxL",
                "PREROUTING",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// Queries the upstream resolvers received whose name contains `needle`.
    fn resolver_saw(&self, needle: &str) -> Vec<String> {
        std::fs::read_to_string(self.path("queries.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// The agent binds every ephemeral port, hoping to land on one
/// whose conntrack entry still belongs to a root flow to the resolver (the
/// DNS filter's, init's lookups), and sends its own query there.
#[test]
fn the_agent_cannot_ride_roots_connections_to_the_resolver() {
    let Some(bed) = Bed::new("fwh") else { return };
    hijack_fails(&bed);
}

#[test]
fn the_agent_cannot_ride_roots_connections_to_the_resolver_with_nft_iptables() {
    let Some(bed) = Bed::with_system_iptables("fwhn") else {
        return;
    };
    hijack_fails(&bed);
}

fn hijack_fails(bed: &Bed) {
    bed.ok(false, &["init"]);
    // The filter looks a name up, so it has a flow to the resolver now, and
    // so does a root process asking directly from a socket it then closes.
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
    assert_verdicts(&bed.probe(false, &["dns:198.18.0.53/allowed.test"]), "open");
    let r = bed.attack(true, &["hijack", "198.18.0.53:53"]);
    assert!(
        r["bound"].as_u64() > Some(20000),
        "the scan did not run: {r}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let got = bed.resolver_saw(".hijack.");
    assert!(
        got.is_empty(),
        "reached the resolver as uid 1000: {got:?}\n{r}"
    );
}

/// A SYN to an allowlisted address from an address the
/// sandbox does not own (the allowed host's answers would go there).
#[test]
fn forged_source_addresses_never_leave() {
    let Some(bed) = Bed::new("fws") else { return };
    forged_fails(&bed);
}

#[test]
fn forged_source_addresses_never_leave_with_nft_iptables() {
    let Some(bed) = Bed::with_system_iptables("fwsn") else {
        return;
    };
    forged_fails(&bed);
}

fn forged_fails(bed: &Bed) {
    bed.ok(false, &["init"]);
    bed.far_side_count(false, &["-s", "198.18.9.9"]);
    bed.far_side_count(true, &["-s", "2001:2::9:9"]);
    // The agent: IPV6_FREEBIND and IP_FREEBIND need no privilege.
    let v6 = bed.attack(true, &["forge", "2001:2::9:9", "[2001:2::1:1]:443"]);
    assert_eq!(v6["tcp"]["bind"], "ok", "the attack did not run: {v6}");
    let v4 = bed.attack(true, &["forge", "198.18.9.9", "198.18.1.1:443"]);
    // Root with IP_TRANSPARENT, which the kernel would let through in both
    // families: the rule, not luck, must stop it.
    let r4 = bed.attack(
        false,
        &["forge", "198.18.9.9", "198.18.1.1:443", "transparent"],
    );
    let r6 = bed.attack(
        false,
        &["forge", "2001:2::9:9", "[2001:2::1:1]:443", "transparent"],
    );
    assert_eq!(bed.far_side_arrived(false), 0, "IPv4: {v4} {r4}");
    assert_eq!(bed.far_side_arrived(true), 0, "IPv6: {v6} {r6}");
    // The allowlisted host itself is still reachable from our own address.
    assert_verdicts(
        &bed.probe(true, &["tcp:[2001:2::1:1]:443", "tcp:198.18.1.1:443"]),
        "open",
    );
}

/// A routing header set without privileges sends a packet
/// addressed to an allowed first hop on to a blocked final destination.
#[test]
fn ipv6_routing_headers_never_leave() {
    let Some(bed) = Bed::new("fwr") else { return };
    rthdr_fails(&bed);
}

#[test]
fn ipv6_routing_headers_never_leave_with_nft_iptables() {
    let Some(bed) = Bed::with_system_iptables("fwrn") else {
        return;
    };
    rthdr_fails(&bed);
}

fn rthdr_fails(bed: &Bed) {
    bed.ok(false, &["init"]);
    bed.far_side_count(true, &["-m", "rt"]);
    let mut tried = Vec::new();
    for t in ["4", "2", "0"] {
        tried.push(bed.attack(true, &["rthdr", t, "2001:2::1:1", "[2001:2::2:1]:443"]));
    }
    assert_eq!(
        tried[0]["opt"], "ok",
        "the kernel refused the SRH: {tried:?}"
    );
    assert_eq!(bed.far_side_arrived(true), 0, "{tried:?}");
}

impl Bed {
    /// The DNS filter's refusal counters from `status --json`, once the
    /// filter has published them (it does so every 250 ms).
    fn refused(&self, reason: &str, at_least: u64) -> u64 {
        let t = Instant::now();
        loop {
            let st: Value = serde_json::from_str(&self.ok(false, &["status", "--json"])).unwrap();
            let n = st["data"]["dns_filter"]["refused"][reason]
                .as_u64()
                .unwrap_or(0);
            // Returns as soon as they are there: the deadline is for a loaded machine.
            if n >= at_least || t.elapsed() > Duration::from_secs(20) {
                return n;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// GitHub's names are answered only with addresses inside
/// GitHub's meta ranges; an answer elsewhere opens nothing.
#[test]
fn github_names_resolve_only_inside_githubs_ranges() {
    let Some(bed) = Bed::new("fwgh") else { return };
    bed.ok(false, &["init"]);
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/github.com"]), "open");
    // Its only address lies outside the ranges: refused, and not allowed.
    assert_verdicts(
        &bed.probe(true, &["dns:127.0.0.53/raw.githubusercontent.com"]),
        "blocked",
    );
    // One inside, one outside: the answer keeps the one inside.
    let out = bed.ok(
        true,
        &["probe", "--json", "dns:127.0.0.53/mixed.github.com"],
    );
    assert!(out.contains("with 1 answers"), "{out}");
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");
    assert!(bed.refused("github-outside-ranges", 2) >= 2);
}

/// A DNS query, by hand: header with `ar` additional records, the labels
/// as given (dots, backslashes, NULs and all), type A class IN, `extra`.
fn raw_query(labels: &[&[u8]], ar: u8, extra: &[u8]) -> String {
    raw_query_as(labels, 1, [0x01, 0x00], ar, extra)
}

/// [`raw_query`] of type `qtype` with header flag bytes `flags`.
fn raw_query_as(labels: &[&[u8]], qtype: u16, flags: [u8; 2], ar: u8, extra: &[u8]) -> String {
    let mut b = vec![0x12, 0x34, flags[0], flags[1], 0, 1, 0, 0, 0, 0, 0, ar];
    for l in labels {
        b.push(l.len() as u8);
        b.extend_from_slice(l);
    }
    b.push(0);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&[0, 1]);
    b.extend_from_slice(extra);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the filter cannot parse strictly is refused with a
/// counted reason and never reaches the resolver in any form.
#[test]
fn the_dns_filter_refuses_what_it_cannot_parse_and_forwards_nothing_raw() {
    let Some(bed) = Bed::new("fwq") else { return };
    bed.ok(false, &["init"]);
    let a_record = [0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4];
    let packets = [
        raw_query(&[b"x", b"wild", b"test"], 0, b"exfil"),
        raw_query(&[b"x", b"wild", b"test"], 1, &a_record),
        raw_query(&[b"se.cret", b"wild", b"test"], 0, &[]),
        raw_query(&[b"se\\cret", b"wild", b"test"], 0, &[]),
        raw_query(&[b"se\0cret", b"wild", b"test"], 0, &[]),
        "1234010000".into(),
        "12".into(),
        // The control: the same query, well formed.
        raw_query(&[b"x", b"wild", b"test"], 0, &[]),
    ];
    let args: Vec<&str> = ["dnsraw", "127.0.0.53:53"]
        .into_iter()
        .chain(packets.iter().map(String::as_str))
        .collect();
    let r = bed.attack(true, &args);
    let rcodes: Vec<&str> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rcode"].as_str().unwrap())
        .collect();
    assert_eq!(
        rcodes,
        [
            "Form Error",
            "Form Error",
            "Query Refused",
            "Query Refused",
            "Query Refused",
            "Form Error",
            "none",
            "No Error"
        ],
        "{r}"
    );
    let got = bed.resolver_saw("cret");
    assert!(got.is_empty(), "reached the resolver: {got:?}");
    assert!(bed.refused("trailing-data", 1) >= 1);
    assert!(bed.refused("extra-records", 1) >= 1);
    assert!(bed.refused("bad-label", 3) >= 3);
    assert!(bed.refused("short", 2) >= 2);
    let text = bed.ok(false, &["status"]);
    assert!(
        text.contains("dns refused") && text.contains("bad-label 3"),
        "{text}"
    );
}

/// A thousand TCP clients at once cost a bounded number of
/// threads, and the filter keeps answering.
#[test]
fn a_thousand_tcp_clients_do_not_take_the_filter_down() {
    let Some(bed) = Bed::new("fwt") else { return };
    bed.ok(false, &["init"]);
    let pid = std::fs::read_to_string(bed.path("state/dns.pid")).unwrap();
    let r = bed.attack(true, &["tcpflood", "127.0.0.53:53", "1000", pid.trim()]);
    eprintln!("{r}");
    assert_eq!(r["connected"], 1000, "{r}");
    assert!(r["peak_threads"].as_u64().unwrap() <= 64, "{r}");
    assert_eq!(r["udp_answer"], true, "{r}");
    assert!(r["answered"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["closed"].as_u64().unwrap() >= 500, "{r}");
    assert!(bed.refused("tcp-busy", 500) >= 500);
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
}

/// A dns.pid naming a filter in another network namespace is
/// not this sandbox's filter: init starts one here and says why.
#[test]
fn a_filter_in_another_namespace_is_not_taken_for_ours() {
    let Some(bed) = Bed::new("fwo") else { return };
    let nb = bed.nb.clone();
    let mut other = Command::new("ip")
        .args(["netns", "exec", &nb])
        .arg(bin("sbx-fw"))
        .args(["dns", "--listen", "127.0.0.53:53"])
        .env("SBX_FW_STATE_DIR", bed.path("other"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(other.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    std::fs::create_dir_all(bed.path("state")).unwrap();
    std::fs::write(bed.path("state/dns.pid"), format!("{}\n", other.id())).unwrap();
    let o = bed.init();
    let _ = other.kill();
    let _ = other.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("in another network namespace"), "{err}");
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
}

/// The ephemeral-port ride, with Docker's embedded resolver: a resolver on loopback
/// (127.0.0.11), which only uid 0 may reach, and whose flows the agent
/// tries to ride the same way.
#[test]
fn the_agent_cannot_ride_roots_connections_to_a_loopback_resolver() {
    let Some(bed) = Bed::new("fwl") else { return };
    let mut resolver = bed.loopback_resolver(&[]);
    bed.ok(false, &["init"]);
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
    assert_verdicts(
        &bed.probe(true, &["dns:127.0.0.11/allowed.test"]),
        "blocked",
    );
    // A root process (as Docker's resolver or init would) asks it from a
    // socket it then closes: a flow conntrack keeps after the socket is gone.
    assert_verdicts(&bed.probe(false, &["dns:127.0.0.11/allowed.test"]), "open");
    let r = bed.attack(true, &["hijack", "127.0.0.11:53"]);
    std::thread::sleep(Duration::from_millis(300));
    let _ = resolver.kill();
    let _ = resolver.wait();
    assert!(
        r["bound"].as_u64() > Some(20000),
        "the scan did not run: {r}"
    );
    let got = bed.resolver_saw(".hijack.");
    assert!(
        got.is_empty(),
        "reached the resolver as uid 1000: {got:?}\n{r}"
    );
    // The filter did use it.
    assert!(
        bed.resolver_saw("allowed.test")
            .iter()
            .any(|l| l.starts_with("127.0.0.11:53 ")),
        "{:?}",
        bed.resolver_saw("")
    );
}

/// IPv4's routing header: a loose source route option (IP_OPTIONS needs
/// no privilege) on a SYN addressed to an allowed first hop, naming a
/// blocked host as the final destination. TCP Fast Open without a cookie
/// (also unprivileged) puts the agent's data in that SYN, so one packet
/// out is enough. The gateway here honours source routes, as any host on
/// the path may: the payload must not reach the blocked address.
#[test]
fn ipv4_source_routes_never_leave() {
    let Some(bed) = Bed::new("fwsr") else { return };
    srr_fails(&bed);
}

#[test]
fn ipv4_source_routes_never_leave_with_nft_iptables() {
    let Some(bed) = Bed::with_system_iptables("fwsrn") else {
        return;
    };
    srr_fails(&bed);
}

fn srr_fails(bed: &Bed) {
    bed.ok(false, &["init"]);
    let gw = bed.gw.clone();
    let in_gw = |args: &[&str]| {
        let o = Command::new("ip")
            .args(["netns", "exec", &gw])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for k in ["all", "default", "br0"] {
        in_gw(&[
            "sysctl",
            "-q",
            &format!("net.ipv4.conf.{k}.accept_source_route=1"),
        ]);
    }
    // What arrives at the gateway with IP options at all, and what the
    // blocked address receives after the gateway followed the route.
    bed.far_side_count(
        false,
        &["-s", "10.77.0.2", "-m", "u32", "--u32", "0>>24&0xF=6:15"],
    );
    let mark = "EXFIL-via-lsrr";
    in_gw(&[
        "iptables-legacy",
        "-I",
        "INPUT",
        "-s",
        "10.77.0.2",
        "-d",
        "198.18.2.1",
        "-p",
        "tcp",
        "-m",
        "string",
        "--string",
        mark,
        "--algo",
        "bm",
    ]);
    // As the agent (the kernel refuses unprivileged IP options today) and
    // as root, whom the kernel lets: only the rule stops root's packet.
    let mut r = Vec::new();
    for as_agent in [true, false] {
        let a = bed.attack(as_agent, &["srr", "198.18.1.1", "198.18.2.1:443", mark]);
        eprintln!("srr attempt (agent: {as_agent}): {a}");
        r.push(a);
    }
    let r = Value::Array(r);
    let delivered: u64 = in_gw(&["iptables-legacy", "-nvxL", "INPUT"])
        .lines()
        .filter(|l| l.contains(mark))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(
        (bed.far_side_arrived(false), delivered),
        (0, 0),
        "source-routed packets left the sandbox (arrived, delivered to 198.18.2.1): {r}"
    );
    // The allowlisted host itself is still reachable.
    assert_verdicts(&bed.probe(true, &["tcp:198.18.1.1:443"]), "open");
}

/// The filter writes one audit record per refused name per minute, but the
/// agent picks the names: each distinct name is a fresh record, so a loop
/// of unique names grows the audit log (outside the sandbox) without
/// bound. The log must stay bounded however many names the agent makes up.
#[test]
fn made_up_names_do_not_flood_the_audit_log() {
    let Some(bed) = Bed::new("fwaf") else { return };
    bed.ok(false, &["init"]);
    let before = bed.audit().len();
    let n: u64 = std::env::var("SBX_FLOOD_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let r = bed.attack(true, &["refusedflood", "127.0.0.53:53", &n.to_string()]);
    assert_eq!(
        r["answered"].as_u64(),
        Some(n),
        "the flood did not run: {r}"
    );
    let audit = bed.audit();
    let records = audit
        .lines()
        .filter(|l| l.contains(".exfil.example"))
        .count();
    let bytes = audit.len() - before;
    eprintln!("flood: {r}; {records} audit records, {bytes} bytes");
    assert!(
        records <= 200,
        "{records} audit records ({bytes} bytes) from {n} made-up names in {}s",
        r["secs"]
    );
}

/// The filter's TCP idle timeout is per read, so a client that sends one
/// byte of a frame every few seconds keeps its slot forever; the agent
/// holds all of them and DNS over TCP (what a truncated answer needs)
/// stops for everyone in the sandbox. A slot must have a whole-query
/// deadline, not only an idle one.
#[test]
fn slow_tcp_clients_do_not_hold_the_filter() {
    let Some(bed) = Bed::new("fwdr") else { return };
    bed.ok(false, &["init"]);
    let r = bed.attack(true, &["tcpdribble", "127.0.0.53:53", "40", "12"]);
    assert!(r["held"].as_u64() > Some(0), "the attack did not run: {r}");
    assert!(
        r["honest"]
            .as_str()
            .is_some_and(|h| h.starts_with("answered")),
        "DNS over TCP refused while slow clients hold the slots: {r}"
    );
}

/// The filter asks upstream from one socket that lives as long as it does
/// (so its port never changes, and the agent reads it from /proc/net/udp),
/// and takes any reply whose 16-bit id and question match. An accomplice
/// outside who can forge the resolver's source address sprays answers for
/// every id while the agent keeps asking for an allowlisted name: a forged
/// address gets into the allow set. Here the resolver's own answers are
/// held back (as a real round trip delays them), so the race is won at once.
#[test]
fn forged_upstream_answers_open_nothing() {
    let Some(bed) = Bed::new("fwkm") else { return };
    bed.ok(false, &["init"]);
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");
    // One query of its own makes the filter open its upstream socket.
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
    let udp = Command::new("ip")
        .args(["netns", "exec", &bed.sbx])
        .args(AGENT)
        .args(["cat", "/proc/net/udp"])
        .output()
        .unwrap();
    // The filter's connected socket to 198.18.0.53:53 (hex, little-endian).
    let port = String::from_utf8_lossy(&udp.stdout)
        .lines()
        .find(|l| l.contains(" 350012C6:0035 "))
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)?
                .split(':')
                .nth(1)
                .map(str::to_owned)
        })
        .and_then(|p| u16::from_str_radix(&p, 16).ok())
        // A fresh socket per query leaves none open to read: the accomplice
        // then sprays a guessed port (the 0x20 and owner checks must hold
        // even when the guess is right).
        .unwrap_or(32768);
    let gw = bed.gw.clone();
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            &gw,
            "iptables-legacy",
            "-I",
            "OUTPUT",
            "-s",
            "198.18.0.53",
        ])
        .args([
            "-d",
            "10.77.0.2",
            "-p",
            "udp",
            "--sport",
            "53",
            "-j",
            "DROP",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let nb = bed.nb.clone();
    let victim = format!("10.77.0.2:{port}");
    let spoofer = Command::new("ip")
        .args(["netns", "exec", &nb])
        .arg(bin("sbx-fwbed"))
        .args([
            "attack",
            "spoofdns",
            "198.18.0.53",
            &victim,
            "allowed.test",
            "198.18.2.1",
            "6",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        bed.probe(true, &["dns:127.0.0.53/allowed.test"]);
    }
    let sent = spoofer.wait_with_output().unwrap();
    assert_verdicts(&bed.probe(true, &["tcp:198.18.2.1:443"]), "blocked");
    eprintln!("spoofer: {}", String::from_utf8_lossy(&sent.stdout));
}

/// `sbx-fw deny NAME` takes out the addresses init resolved, but not those
/// the DNS filter handed out since (a wildcard's names, a CDN name's later
/// addresses): they stay reachable until their hold runs out, up to an
/// hour. A denied name must close every address given out for it alone.
#[test]
fn deny_closes_what_the_filter_handed_out() {
    let Some(bed) = Bed::new("fwdn") else { return };
    bed.ok(false, &["init"]);
    // Handed out by the filter only: a wildcard's name and later addresses
    // of rotate.test (init saw 198.18.6.1; these are .2 and .3).
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/x.wild.test"]), "open");
    for _ in 0..2 {
        bed.probe(true, &["dns:127.0.0.53/rotate.test"]);
    }
    let handed = [
        "tcp:198.18.1.3:443",
        "tcp:198.18.6.2:443",
        "tcp:198.18.6.3:443",
    ];
    assert_verdicts(&bed.probe(true, &handed), "open");
    bed.ok(false, &["deny", "*.wild.test", "rotate.test"]);
    assert_verdicts(&bed.probe(true, &["tcp:198.18.6.1:443"]), "blocked");
    assert_verdicts(&bed.probe(true, &handed), "blocked");
}

/// The filter mixes the letter case of its upstream query (DNS 0x20); the
/// client still gets its question back as it asked it (or as the strict
/// parser lower-cased it), never in the filter's random case.
#[test]
fn the_reply_repeats_the_clients_question() {
    let Some(bed) = Bed::new("fwqc") else { return };
    bed.ok(false, &["init"]);
    prerequisite(
        Command::new("dig").arg("-v").output().is_ok(),
        "dig (bind9-dnsutils)",
    );
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.sbx])
        .args(AGENT)
        .args(["dig", "+noall", "+question", "+answer", "+tries=1"])
        .args(["@127.0.0.53", "AlLoWeD.TeSt", "A"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains(";AlLoWeD.TeSt.") || out.contains(";allowed.test."),
        "{out}{err}"
    );
    assert!(
        !out.contains("mismatch") && !err.contains("mismatch"),
        "{out}{err}"
    );
    assert!(out.contains("\tA\t"), "no answer: {out}{err}");
}

// ---- Proxy mode ([network] mode = "proxy") ----

impl Bed {
    /// A bed in proxy mode, initialised.
    fn proxy(prefix: &str) -> Option<Self> {
        let bed = Self::new(prefix)?;
        bed.proxy_config();
        let o = bed.init();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Some(bed)
    }

    /// Proxy mode in the config; the proxy's uid must read the state.
    fn proxy_config(&self) {
        Command::new("chmod")
            .arg("0755")
            .arg(self.dir.path())
            .status()
            .unwrap();
        self.config("mode = \"proxy\"\n");
    }

    fn reached(&self, args: &[&str]) -> bool {
        let v = self.attack(true, args);
        eprintln!("{args:?}: {v}");
        v["reached"] == true
    }

    fn proxy_pid(&self) -> String {
        self.pid("proxy")
    }

    fn pid(&self, what: &str) -> String {
        std::fs::read_to_string(self.path(&format!("state/{what}.pid")))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// `iptables-legacy ARGS` (or ip6tables-legacy) in the sandbox: stdout.
    fn tables(&self, v6: bool, args: &[&str]) -> String {
        let prog = if v6 {
            "ip6tables-legacy"
        } else {
            "iptables-legacy"
        };
        let o = Command::new("ip")
            .args(["netns", "exec", &self.sbx, prog, "--wait"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{prog} {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// Whether `pid` still runs (a zombie is not running).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(") ").next().unwrap_or("").starts_with('Z'))
}

fn wait_gone(pid: &str) -> bool {
    let t0 = Instant::now();
    while running(pid) {
        if t0.elapsed() > Duration::from_secs(20) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

// ---- Grants (`sbx-fw grant`, what `sbx-run allow` and on-block run) ----

/// Poll `cond` for up to `secs` (generous: the machine may be loaded).
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// A refused name opens for its time and no longer, in either mode: the
/// DNS filter stops answering it, and what was handed out for it ends
/// with the grant (the set entry's timeout in address mode, the proxy's
/// per-connection check in proxy mode), both tried by address with the
/// name's SNI. The agent cannot grant itself anything (77, recorded).
fn grant_opens_for_its_time(bed: &Bed, proxy: bool) {
    let by_name = ["tls", "blocked.test:443", "blocked.test"];
    let by_addr = ["tls", "198.18.2.1:443", "blocked.test"];
    assert!(!bed.reached(&by_name));
    // As the agent: refused before anything is read or written.
    let o = bed.fw(true, &["grant", "blocked.test", "--for", "1h"]);
    assert_eq!(
        o.status.code(),
        Some(77),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        bed.audit()
            .lines()
            .any(|l| l.contains("\"operation\":\"grant\"")
                && l.contains("\"result\":\"blocked\"")
                && l.contains("blocked.test")),
        "{}",
        bed.audit()
    );
    assert!(!bed.reached(&by_name));
    // As root, for 30 s: open by name and by address; other names not.
    bed.ok(
        false,
        &["grant", "blocked.test", "--for", "30s", "--by", "fwbed"],
    );
    let list = bed.ok(false, &["grant", "--list", "--json"]);
    assert!(
        list.contains("\"name\":\"blocked.test\"") && list.contains("\"by\":\"fwbed\""),
        "{list}"
    );
    assert!(bed.reached(&by_name));
    assert!(bed.reached(&by_addr));
    assert!(!bed.reached(&["tls", "other.test:443", "other.test"]));
    // Then it ends, with nothing run to end it.
    assert!(
        eventually(120, || !bed.reached(&by_name) && !bed.reached(&by_addr)),
        "the grant outlived its time"
    );
    assert_eq!(bed.ok(false, &["grant", "--list"]), "");
    // Revoked: the filter stops answering at once; in proxy mode the
    // proxy refuses the address as soon as it has read the change.
    bed.ok(false, &["grant", "blocked.test", "--for", "1h"]);
    assert!(bed.reached(&by_name));
    bed.ok(false, &["grant", "--revoke", "blocked.test"]);
    assert!(!bed.reached(&by_name));
    if proxy {
        assert!(eventually(30, || !bed.reached(&by_addr)));
    }
    let o = bed.fw(false, &["grant", "--revoke", "blocked.test"]);
    assert_eq!(o.status.code(), Some(1), "nothing left to revoke");
}

#[test]
fn grant_opens_for_its_time_in_address_mode() {
    let Some(bed) = Bed::new("gra") else { return };
    bed.config("");
    bed.ok(false, &["init"]);
    grant_opens_for_its_time(&bed, false);
}

#[test]
fn grant_opens_for_its_time_in_proxy_mode() {
    let Some(bed) = Bed::proxy("grp") else { return };
    grant_opens_for_its_time(&bed, true);
}

/// A connection opened under a grant ends with it, kept busy or not: the
/// agent holding a transfer open past `--for` (or past a revoke) is cut,
/// as a record says (a44). In proxy mode, where the proxy relays it.
#[test]
fn a_granted_connection_ends_with_its_grant() {
    let Some(bed) = Bed::proxy("gre") else { return };
    // The name looked up first (the DNS filter hands its address out).
    let hold = |secs: &str| {
        assert!(bed.reached(&["tls", "blocked.test:443", "blocked.test"]));
        bed.attack_running(&["holdhttp", "198.18.2.1:80", "blocked.test", secs], "open")
    };
    let done = |(mut c, mut out): (Child, BufReader<std::process::ChildStdout>)| {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        c.wait().unwrap();
        serde_json::from_str::<Value>(line.trim()).unwrap()
    };
    // Revoked while a transfer runs: cut soon after, not at its end.
    bed.ok(
        false,
        &["grant", "blocked.test", "--for", "1h", "--by", "fwbed"],
    );
    let h = hold("60");
    bed.ok(false, &["grant", "--revoke", "blocked.test"]);
    let v = done(h);
    assert_eq!(v["alive"], false, "kept after the revoke: {v}");
    // Run out: a 6 s grant, a transfer of 60 s.
    bed.ok(
        false,
        &["grant", "blocked.test", "--for", "6s", "--by", "fwbed"],
    );
    let v = done(hold("60"));
    assert_eq!(v["alive"], false, "kept after the grant ran out: {v}");
    assert!(
        bed.audit()
            .lines()
            .any(|l| l.contains("\"operation\":\"close\"") && l.contains("blocked.test")),
        "{}",
        bed.audit()
    );
    // The allowlist's connections are kept, as after a deny.
    let v = done(bed.attack_running(&["holdhttp", "198.18.1.1:80", "allowed.test", "4"], "open"));
    assert_eq!(v["alive"], true, "{v}");
}

/// The names the proxy refused, from the audit log.
fn proxy_refusals(bed: &Bed) -> Vec<String> {
    bed.audit()
        .lines()
        .filter(|l| l.contains("\"policy\":\"proxy\""))
        .map(str::to_owned)
        .collect()
}

#[test]
fn proxy_checks_names_against_addresses_on_both_paths() {
    let Some(bed) = Bed::proxy("px1") else { return };
    // The allowed name to its own address: transparent (v4, v6) and CONNECT.
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
    assert!(bed.reached(&["tls", "[2001:2::1:1]:443", "allowed.test"]));
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test", "127.0.0.1:3128"]));
    assert!(bed.reached(&["http", "allowed.test:80", "allowed.test"]));
    // A wildcard name, once the DNS filter handed out its address.
    assert!(bed.reached(&["tls", "x.wild.test:443", "x.wild.test"]));
    // CONNECT to a name only a wildcard covers: resolved through the filter.
    assert!(bed.reached(&["tls", "x.wild.test:443", "x.wild.test", "127.0.0.1:3128"]));
    // Fronting: an allowed address with a forbidden name, or with another
    // allowed name whose address it is not.
    assert!(!bed.reached(&["tls", "198.18.1.1:443", "blocked.test"]));
    assert!(!bed.reached(&["tls", "198.18.1.1:443", "x.wild.test"]));
    assert!(!bed.reached(&["http", "198.18.1.1:80", "x.wild.test"]));
    // No server name, no Host.
    assert!(!bed.reached(&["tls", "198.18.1.1:443", "-"]));
    assert!(!bed.reached(&["http", "198.18.1.1:80", "198.18.1.1"]));
    // CONNECT: a forbidden name, and an allowed one whose tunnel then
    // names another.
    assert!(!bed.reached(&["tls", "blocked.test:443", "blocked.test", "127.0.0.1:3128"]));
    assert!(!bed.reached(&["tls", "allowed.test:443", "x.wild.test", "127.0.0.1:3128"]));
    // An address no name resolved to, whatever the hello says.
    assert!(!bed.reached(&["tls", "198.18.2.1:443", "allowed.test"]));
    let refused = proxy_refusals(&bed);
    for want in [
        "not on the allowlist",
        "address is not one the name resolved to",
        "no server name",
    ] {
        assert!(
            refused.iter().any(|l| l.contains(want)),
            "no {want:?} record: {refused:#?}"
        );
    }
    assert!(
        refused
            .iter()
            .any(|l| l.contains("\"target\":\"blocked.test\"") && l.contains("198.18.1.1:443"))
    );
}

/// A client that sends its ClientHello in the same write as the CONNECT
/// (before the 200): the hello that came with the request is read and
/// judged like one that came after it, never passed on unchecked.
#[test]
fn proxy_connect_with_a_pipelined_hello_is_still_checked() {
    let Some(bed) = Bed::proxy("pxq") else { return };
    let pipe = "pipe:127.0.0.1:3128";
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test", pipe]));
    assert!(bed.reached(&["tls", "x.wild.test:443", "x.wild.test", pipe]));
    // An allowed CONNECT whose pipelined hello names another name, or none.
    assert!(!bed.reached(&["tls", "allowed.test:443", "blocked.test", pipe]));
    assert!(!bed.reached(&["tls", "allowed.test:443", "x.wild.test", pipe]));
    assert!(!bed.reached(&["tls", "allowed.test:443", "-", pipe]));
    let refused = proxy_refusals(&bed);
    for (name, why) in [
        ("blocked.test", "address is not one the name resolved to"),
        ("x.wild.test", "address is not one the name resolved to"),
        ("allowed.test", "no server name"),
    ] {
        assert!(
            refused
                .iter()
                .any(|l| l.contains(&format!("\"target\":\"{name}\"")) && l.contains(why)),
            "no {name} / {why:?} record: {refused:#?}"
        );
    }
}

/// An upstream that refuses the connection (a reset from the far side's
/// netfilter): through CONNECT a 502, never a 200 for a tunnel that leads
/// nowhere; redirected, a reset; and the next connections go through
/// once it answers again.
#[test]
fn proxy_an_upstream_that_refuses_is_a_502_or_a_reset() {
    let Some(bed) = Bed::proxy("pxr") else { return };
    let gw = bed.gw.clone();
    let reject = |op: &str| {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &gw,
                "iptables-legacy",
                "--wait",
                op,
                "INPUT",
            ])
            .args(["-d", "198.18.1.1", "-p", "tcp", "--dport", "443"])
            .args(["-j", "REJECT", "--reject-with", "tcp-reset"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    let connect = ["tls", "allowed.test:443", "allowed.test", "127.0.0.1:3128"];
    let redirected = ["tls", "198.18.1.1:443", "allowed.test"];
    assert!(bed.reached(&connect) && bed.reached(&redirected));
    reject("-I");
    let v = bed.attack(true, &connect);
    assert!(
        v["reached"] == false && v["error"].as_str().unwrap_or("").contains("502"),
        "{v}"
    );
    let v = bed.attack(true, &redirected);
    assert!(v["reached"] == false, "{v}");
    reject("-D");
    assert!(bed.reached(&connect) && bed.reached(&redirected));
}

/// Refusals over the proxy's audit budget (20 a second) are counted into
/// the next record; a burst followed by silence left its count nowhere:
/// the log showed 20 refusals of a hundred and never the rest. Every
/// refusal must be in the log, one by one or in a count, within seconds.
#[test]
fn proxy_a_burst_of_refusals_is_counted_in_the_log() {
    let Some(bed) = Bed::proxy("pa7") else { return };
    let v = bed.attack(true, &["tlsmany", "198.18.2.1:443", "blocked.test", "100"]);
    assert_eq!(v["reached"], 0, "{v}");
    // Nothing else is refused from here on.
    let counted = || -> u64 {
        proxy_refusals(&bed)
            .iter()
            .map(|l| {
                let more = l
                    .split(" more refusals not recorded")
                    .next()
                    .filter(|head| head.len() < l.len())
                    .and_then(|head| head.rsplit([' ', '(', '"']).next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                let one = u64::from(!l.contains("(refusals over the audit budget)"));
                one + more
            })
            .sum()
    };
    let t = Instant::now();
    while counted() < 100 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        counted(),
        100,
        "refusals in the log:\n{}",
        proxy_refusals(&bed).join("\n")
    );
}

/// Ways out no TCP rule names, as Docker leaves a container: ICMP echo
/// (unprivileged ping sockets, `ping_group_range` open to all) to an
/// allowlisted address, the gateway and the resolver, in both families;
/// UDP to the broadcast addresses, to multicast groups on the bridge, and
/// to an allowlisted address with the largest TTL. Nothing of it reaches
/// the gateway (where the host and the internet are).
fn datagrams_stay_in(bed: &Bed) {
    let sysctl = Command::new("ip")
        .args(["netns", "exec", &bed.sbx, "sysctl", "-qw"])
        .arg("net.ipv4.ping_group_range=0 2147483647")
        .status()
        .unwrap();
    assert!(sysctl.success());
    bed.far_side_count(false, &["-p", "icmp", "--icmp-type", "echo-request"]);
    bed.far_side_count(false, &["-p", "udp", "!", "--dport", "53"]);
    bed.far_side_count(true, &["-p", "ipv6-icmp", "--icmpv6-type", "echo-request"]);
    bed.far_side_count(true, &["-p", "udp", "!", "--dport", "53"]);
    let v = bed.attack(
        true,
        &[
            "outs",
            "echo:198.18.1.1",
            "echo:10.77.0.1",
            "echo:198.18.0.53",
            "echo:2001:2::1:1",
            "echo:fd77::1",
            "udp:255.255.255.255:9",
            "udp:10.77.0.255:9",
            "udp:224.0.0.251:5353",
            "udp:198.18.1.1:443",
            "udp:[ff02::1]:9",
            "udp:[ff02::fb]:5353",
            "udp:[2001:2::1:1]:443",
        ],
    );
    // The attack ran: the sockets were made (the kernel refuses the sends).
    assert!(
        v.as_object()
            .unwrap()
            .values()
            .all(|s| s.as_str().is_some_and(|s| !s.starts_with("socket"))),
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(bed.far_side_arrived(false), 0, "IPv4: {v}");
    assert_eq!(bed.far_side_arrived(true), 0, "IPv6: {v}");
}

#[test]
fn datagrams_no_tcp_rule_names_stay_in() {
    let Some(bed) = Bed::new("od1") else { return };
    bed.ok(false, &["init"]);
    datagrams_stay_in(&bed);
}

#[test]
fn proxy_datagrams_no_tcp_rule_names_stay_in() {
    let Some(bed) = Bed::proxy("od2") else { return };
    datagrams_stay_in(&bed);
}

#[test]
fn proxy_killed_leaves_everything_blocked_until_restarted() {
    let Some(bed) = Bed::proxy("px2") else { return };
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
    let pid = bed.proxy_pid();
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::thread::sleep(Duration::from_millis(200));
    for a in [
        &["tls", "198.18.1.1:443", "allowed.test"][..],
        &["tls", "[2001:2::1:1]:443", "allowed.test"],
        &["http", "198.18.1.1:80", "allowed.test"],
        &["tls", "allowed.test:443", "allowed.test", "127.0.0.1:3128"],
    ] {
        assert!(!bed.reached(a), "{a:?} got through with the proxy dead");
    }
    // With the redirect lost too (the nat table flushed), the agent's own
    // connections to the allowed address are still refused: only the
    // proxy's uid may go out to 80 and 443.
    bed.tables(false, &["-t", "nat", "-F", "OUTPUT"]);
    bed.tables(true, &["-t", "nat", "-F", "OUTPUT"]);
    for a in [
        &["tls", "198.18.1.1:443", "allowed.test"][..],
        &["tls", "[2001:2::1:1]:443", "allowed.test"],
        &["http", "198.18.1.1:80", "allowed.test"],
    ] {
        assert!(
            !bed.reached(a),
            "{a:?} got through with the proxy dead and no redirect"
        );
    }
    // The next init (the guest's restart) brings it back.
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(bed.proxy_pid(), pid);
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
}

#[test]
fn proxy_reload_adds_a_name_and_keeps_open_connections() {
    let Some(bed) = Bed::proxy("px3") else { return };
    assert!(!bed.reached(&["tls", "198.18.1.2:443", "other.test"]));
    // A running transfer through the proxy (the far side echoes).
    let (mut hold, mut out) =
        bed.attack_running(&["holdhttp", "198.18.1.1:80", "allowed.test", "4"], "open");
    bed.ok(false, &["allow", "other.test"]);
    assert!(bed.reached(&["tls", "other.test:443", "other.test"]));
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    hold.wait().unwrap();
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        v["alive"], true,
        "the open connection was dropped by the reload: {v}"
    );
    // And a removal is followed too.
    bed.ok(false, &["deny", "other.test"]);
    assert!(!bed.reached(&["tls", "198.18.1.2:443", "other.test"]));
}

#[test]
fn proxy_serves_a_thousand_at_once_and_slow_clients_starve_nobody() {
    let Some(bed) = Bed::proxy("px4") else { return };
    let v = bed.attack(true, &["tlsmany", "198.18.1.1:443", "allowed.test", "1000"]);
    eprintln!("1000 at once: {v}");
    assert_eq!(v["reached"], 1000, "{v}");
    // 300 clients dribbling their hello a byte a second for 8 s, while a
    // normal client connects: it is served at once, and the slow ones are
    // cut when their hello is not whole within the proxy's timeout.
    let ns = bed.sbx.clone();
    let mut slow = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(AGENT)
        .arg(bin("sbx-fwbed"))
        .args(["attack", "slowloris", "198.18.1.1:443", "300", "8"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
    // Served while the attack still runs (it ends 7 s after t0), with room
    // for a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    let mut out = String::new();
    slow.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    slow.wait().unwrap();
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    eprintln!("slowloris: {v}");
    assert_eq!(v["cut"], 300, "{v}");
    assert!(v["max_ms"].as_u64().unwrap() < 7500, "{v}");
}

/// The splice pipes go back to a pool for the next connections, however a
/// connection ends; one dropped with bytes still in it must not be: the next
/// connection would send a stranger's bytes first. Downloads killed while
/// the proxy holds their data (the agent stops reading, then goes away),
/// then connections that must all complete a verified handshake. Small
/// socket buffers keep each splice small, so the pipes stay pool-sized.
#[test]
fn proxy_reuses_no_pipe_with_bytes_left_in_it() {
    let Some(bed) = Bed::proxy("px9") else { return };
    let ca = bed.dir.path().join("ca.der");
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.sbx, "sysctl", "-qw"])
        .arg("net.ipv4.tcp_rmem=4096 8192 8192")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    for _ in 0..12 {
        let mut c = Command::new("ip")
            .args(["netns", "exec", &bed.sbx])
            .args(AGENT)
            .arg(bin("sbx-fwbed"))
            .args(["bench", "tls", "198.18.1.1:443", "allowed.test"])
            .arg(&ca)
            .args(["-", "1", "1", "1073741824"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        Command::new("kill")
            .args(["-STOP", &c.id().to_string()])
            .status()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        c.kill().unwrap();
        c.wait().unwrap();
    }
    for i in 0..30 {
        assert!(
            bed.reached(&["tls", "allowed.test:443", "allowed.test"]),
            "connection {i} after the killed downloads"
        );
    }
}

#[test]
fn proxy_reset_removes_the_redirect_and_stops_proxy_and_filter() {
    let Some(bed) = Bed::proxy("px5") else { return };
    assert!(!bed.reached(&["tls", "198.18.2.1:443", "blocked.test"]));
    for v6 in [false, true] {
        assert!(bed.tables(v6, &["-t", "nat", "-S"]).contains("REDIRECT"));
    }
    let (proxy, dns) = (bed.proxy_pid(), bed.pid("dns"));
    assert!(running(&proxy) && running(&dns));
    bed.ok(false, &["reset", "--yes"]);
    for v6 in [false, true] {
        let nat = bed.tables(v6, &["-t", "nat", "-S"]);
        assert!(
            !nat.contains("REDIRECT") && !nat.contains("65533") && !nat.contains("SBX-NAT"),
            "{nat}"
        );
    }
    assert!(
        wait_gone(&proxy),
        "the proxy {proxy} still runs after reset"
    );
    assert!(
        wait_gone(&dns),
        "the DNS filter {dns} still runs after reset"
    );
    assert!(!bed.path("state/proxy.pid").exists());
    // Open, and straight to the address: no proxy in the way.
    assert!(bed.reached(&["tls", "198.18.2.1:443", "blocked.test"]));
    assert!(bed.reached(&["tls", "[2001:2::2:1]:443", "blocked.test"]));
    // A later init in proxy mode installs it all again.
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!bed.reached(&["tls", "198.18.1.1:443", "blocked.test"]));
    assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
}

#[test]
fn proxy_mode_leaves_roots_own_443_direct() {
    let Some(bed) = Bed::proxy("px6") else { return };
    // Root (init's fetches, backups) is not redirected: the hello's name
    // is not checked for it, the address still is.
    let v = bed.attack(false, &["tls", "198.18.1.1:443", "blocked.test"]);
    assert_eq!(v["reached"], true, "{v}");
    let v = bed.attack(false, &["tls", "198.18.2.1:443", "blocked.test"]);
    assert_eq!(v["reached"], false, "{v}");
    // The agent with the same hello is refused by the proxy.
    assert!(!bed.reached(&["tls", "198.18.1.1:443", "blocked.test"]));
}

/// A bed in proxy mode whose proxy runs with `env` (shorter limits).
fn proxy_bed_with(prefix: &str, env: &[(&'static str, &'static str)]) -> Option<Bed> {
    let mut bed = Bed::new(prefix)?;
    bed.env.extend_from_slice(env);
    Command::new("chmod")
        .arg("0755")
        .arg(bed.dir.path())
        .status()
        .unwrap();
    bed.config("mode = \"proxy\"\n");
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(bed)
}

/// Issue 22: a connection with nothing moving either way past the idle
/// limit (2 s here; 120 s for kept-alive port 80 and 15 min for tunnels
/// by default) is closed; one that keeps moving bytes is not.
#[test]
fn proxy_closes_idle_connections_only() {
    let Some(bed) = proxy_bed_with("px7", &[("SBX_FW_PROXY_IDLE", "2")]) else {
        return;
    };
    // Pings every 100 ms for 4 s, twice the limit: kept.
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.sbx])
        .args(AGENT)
        .arg(bin("sbx-fwbed"))
        .args(["attack", "holdhttp", "198.18.1.1:80", "allowed.test", "4"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(v["alive"], true, "a busy connection was cut: {v}");
    // Silent after one exchange: closed at the limit. The far sides would
    // hold it (port 80 for ever, the TLS server 5 s).
    for (target, name) in [
        ("198.18.1.1:80", "allowed.test"),
        ("198.18.1.1:443", "allowed.test"),
    ] {
        let v = bed.attack(true, &["idle", target, name, "8"]);
        eprintln!("idle {target}: {v}");
        assert_eq!(v["opened"], true, "{v}");
        let ms = v["closed_ms"].as_u64().unwrap_or(u64::MAX);
        assert!(
            (1500..4000).contains(&ms),
            "{target}: not closed at the idle limit: {v}"
        );
    }
}

/// Issue 22: an address the DNS filter handed out is trusted by the proxy
/// for the filter's longest hold (5 s here: the first connection must come
/// within it on a loaded machine, which 2 s did not always); after that only
/// if the name still resolves to it, looked up afresh.
#[test]
fn proxy_handed_addresses_expire_and_are_looked_up_again() {
    let Some(bed) = proxy_bed_with("px8", &[("SBX_FW_PROXY_HOLD", "5")]) else {
        return;
    };
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.sbx])
        .args(AGENT)
        .args(["getent", "ahostsv4", "rotate.test"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let addr = out
        .split_whitespace()
        .next()
        .expect("rotate.test resolves")
        .to_owned();
    let target = format!("{addr}:443");
    assert!(bed.reached(&["tls", &target, "rotate.test"]));
    assert!(bed.reached(&["tls", "x.wild.test:443", "x.wild.test"]));
    std::thread::sleep(Duration::from_secs(6));
    // Stale: rotate.test now resolves elsewhere (each answer is the next
    // address), x.wild.test still to the same one.
    assert!(
        !bed.reached(&["tls", &target, "rotate.test"]),
        "a handed-out address outlived its hold"
    );
    assert!(
        bed.reached(&["tls", "198.18.1.3:443", "x.wild.test"]),
        "a name still resolving to its address was refused after the hold"
    );
}

// ---- Attacks on proxy mode as the agent (fresh eyes) ----

impl Bed {
    /// `sbx-fwbed attack raw TARGET CHUNKS..` as the agent: what came back.
    fn raw(&self, target: &str, chunks: &[&str]) -> Value {
        let mut args = vec!["raw", target];
        args.extend_from_slice(chunks);
        let v = self.attack(true, &args);
        eprintln!("raw {target} {chunks:?}: {v}");
        v
    }
}

/// Cases the proxy must hold; each was tried as the agent and held.
#[test]
fn proxy_holds_against_names_ports_paths_and_signals() {
    let Some(bed) = Bed::proxy("pa1") else { return };
    // The name as clients may spell it is the same name.
    assert!(bed.reached(&["tls", "198.18.1.1:443", "ALLOWED.test"]));
    assert!(bed.reached(&["tls", "198.18.1.1:443", "allowed.test."]));
    // An allowed name on an address it never resolved to (other.test's, not
    // allowed; the gateway's), an IP literal, a NUL inside, a long label.
    for sni in [
        "198.18.1.1",
        &format!("{}.allowed.test", "a".repeat(64)),
        "\u{e4}llowed.test",
        "xn--llowed-cua.test",
        "allowed.test..",
        "*.wild.test",
    ] {
        assert!(!bed.reached(&["tls", "198.18.1.1:443", sni]), "{sni:?}");
    }
    for hello in [
        "@hello:allowed.test\\x00.blocked.test",
        "@hello:blocked.test\\x00allowed.test",
        "@hello:allowed.test\\x00",
    ] {
        assert_eq!(
            bed.raw("198.18.1.1:443", &[hello])["reached"],
            false,
            "{hello}"
        );
    }
    assert!(!bed.reached(&["tls", "198.18.1.2:443", "allowed.test"]));
    assert!(!bed.reached(&["tls", "10.77.0.1:443", "rebind.test"]));
    assert!(!bed.reached(&["tls", "rebind.test:443", "rebind.test", "127.0.0.1:3128"]));
    // The proxy's own ports dialled directly: nothing to go to.
    for t in ["127.0.0.1:3129", "[::1]:3129"] {
        assert!(!bed.reached(&["tls", t, "allowed.test"]), "{t}");
        assert_eq!(bed.raw(t, &["@hello:allowed.test"])["reached"], false);
    }
    // HTTP/2 prior knowledge, TLS on 80, HTTP on 443.
    assert_eq!(
        bed.raw(
            "198.18.1.1:80",
            &["PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n"]
        )["reached"],
        false
    );
    // Refused at once (a reset), not left to the head timeout.
    let v = bed.raw("198.18.1.1:80", &["@hello:allowed.test"]);
    assert!(v["error"].as_str().unwrap_or("").contains("reset"), "{v}");
    assert_eq!(
        bed.raw(
            "198.18.1.1:443",
            &["GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"]
        )["reached"],
        false
    );
    // CONNECT: another port, an address, a Host that disagrees (the target
    // is what counts, and the tunnel's hello must name it).
    for head in [
        "CONNECT allowed.test:80 HTTP/1.1\\r\\n\\r\\n",
        "CONNECT 198.18.1.1:443 HTTP/1.1\\r\\n\\r\\n",
        "CONNECT blocked.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\n\\r\\n",
    ] {
        let v = bed.raw("127.0.0.1:3128", &[head]);
        assert!(
            !v["echo"].as_str().unwrap_or("").contains(" 200 "),
            "{head}: {v}"
        );
    }
    let v = bed.raw(
        "127.0.0.1:3128",
        &[
            "CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: blocked.test:443\\r\\n\\r\\n",
            "@hello:blocked.test",
        ],
    );
    assert!(
        !v["echo"].as_str().unwrap_or("").contains("\u{16}\u{3}"),
        "{v}"
    );
    // Other ports and QUIC to an allowed address stay closed.
    assert_verdicts(
        &bed.probe(
            true,
            &[
                "tcp:198.18.1.1:8443",
                "udp:198.18.1.1:443",
                "tcp:198.18.1.1:22",
            ],
        ),
        "blocked",
    );
    // The agent cannot stop or kill the proxy (another uid).
    let pid = bed.proxy_pid();
    for sig in ["-STOP", "-KILL"] {
        let o = Command::new("ip")
            .args(["netns", "exec", &bed.sbx])
            .args(AGENT)
            .args(["kill", sig, &pid])
            .output()
            .unwrap();
        assert!(!o.status.success(), "kill {sig} as the agent worked");
    }
    assert!(bed.reached(&["tls", "198.18.1.1:443", "allowed.test"]));
}

/// Plain HTTP: the name a server acts on is the request target's when it
/// has one (absolute-form), and lenient servers read headers our parser
/// does not see (a bare LF, a space before the colon). The proxy judged the
/// Host header only, so a forbidden name rode on an allowed one. An
/// absolute-form target is refused even when it agrees with the Host: it
/// is what clients send a proxy, and the server may be one (found in the
/// issue-44 round; rules judge paths, not URLs).
#[test]
fn proxy_http_target_and_header_differentials_are_refused() {
    let Some(bed) = Bed::proxy("pa2") else { return };
    let v = bed.raw(
        "198.18.1.1:80",
        &["GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"],
    );
    assert_eq!(v["reached"], true, "{v}");
    for head in [
        "GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET http://blocked.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET http://blocked.test:80/x HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "CONNECT blocked.test:443 HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nX: a\\nHost: blocked.test\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost : blocked.test\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n blocked.test\\r\\n\\r\\n",
    ] {
        let v = bed.raw("198.18.1.1:80", &[head]);
        assert_eq!(v["reached"], false, "{head}: {v}");
    }
}

/// `[network.rules]` on port 80 (issue 44): every request on a kept-alive
/// connection is judged by method and path; the first one no rule allows
/// gets a 403 naming the rules, and neither it nor anything after it
/// reaches the server. A host whose rules allow nothing is refused too.
#[test]
fn proxy_http_rules_judge_every_request() {
    let Some(mut bed) = Bed::new("pr1") else {
        return;
    };
    // The CA rules need goes to a tmpfs and a bundle of the bed's own,
    // never the host's.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    std::fs::write(bed.path("bundle.pem"), "").unwrap();
    let leak = |p: PathBuf| -> &'static str {
        Box::leak(p.into_os_string().into_string().unwrap().into_boxed_str())
    };
    bed.env.extend([
        ("SBX_FW_SECRETS_DIR", leak(shm.path().to_owned())),
        ("SBX_FW_CA_BUNDLE", leak(bed.path("bundle.pem"))),
        ("SBX_FW_SANDBOX_CA", leak(bed.path("sandbox-ca.pem"))),
    ]);
    bed.proxy_config();
    bed.config(
        "mode = \"proxy\"\n[network.rules]\n\"allowed.test\" = [\"GET /ok/**\"]\n\"*.wild.test\" = \"off\"\n",
    );
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ok = "GET /ok/a HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n";
    let v = bed.raw("198.18.1.1:80", &[ok, ok]);
    let echo = v["echo"].as_str().unwrap_or("").to_owned();
    assert_eq!(echo.matches("GET /ok/a").count(), 2, "{v}");
    // Pipelined in one segment: the allowed request before the refused one
    // still goes, and its answer comes before the 403.
    let post = "POST /ok/a HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 0\\r\\n\\r\\n";
    let v = bed.raw("198.18.1.1:80", &[&format!("{ok}{post}{ok}")]);
    let echo = v["echo"].as_str().unwrap_or("");
    assert_eq!(echo.matches("GET /ok/a").count(), 1, "{v}");
    assert!(echo.find("GET /ok/a") < echo.find("403 Forbidden"), "{v}");
    assert!(!echo.contains("POST /ok/a HTTP"), "{v}");
    for bad in [
        "POST /ok/a HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 0\\r\\n\\r\\n",
        "GET /ok/../admin HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET /admin HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        // Attack round a44r: what some servers read as another path or
        // method than the one judged.
        "GET /ok/..;/admin HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET /ok/%c0%ae%c0%ae/admin HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        "GET /ok/a HTTP/1.1\\r\\nHost: allowed.test\\r\\nX-HTTP-Method-Override: DELETE\\r\\n\\r\\n",
        "GET /ok/a?_method=DELETE HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        // CL.0: a server ignoring a GET's body reads it as a request.
        "GET /ok/a HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 52\\r\\n\\r\\n\
         DELETE /ok/smuggled HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
    ] {
        let v = bed.raw("198.18.1.1:80", &[ok, bad, ok]);
        let echo = v["echo"].as_str().unwrap_or("");
        assert!(
            echo.contains("403 Forbidden")
                && echo.contains("[network.rules] \"allowed.test\" refuses"),
            "{bad}: {v}"
        );
        // In the 403's reason alone, never echoed by the server.
        let line = bad.split(" HTTP").next().unwrap();
        let prefix = usize::from(line.starts_with("GET /ok/a"));
        let same = usize::from(line == "GET /ok/a");
        assert_eq!(echo.matches("GET /ok/a").count(), 1 + prefix, "{bad}: {v}");
        assert_eq!(echo.matches(line).count(), 1 + same, "{bad}: {v}");
        // Answers in request order: the first request's before the 403.
        assert!(
            echo.find("GET /ok/a") < echo.find("403 Forbidden"),
            "{bad}: {v}"
        );
        assert!(!echo.contains("Override: DELETE"), "{bad}: {v}");
        assert!(!echo.contains("smuggled"), "{bad}: {v}");
    }
}

/// HTTP keep-alive: the proxy judged the first request head and spliced
/// the rest, so a second request on the same connection named any host.
#[test]
fn proxy_http_later_requests_on_one_connection_are_checked() {
    let Some(bed) = Bed::proxy("pa3") else { return };
    let v = bed.raw(
        "198.18.1.1:80",
        &[
            "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
            "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
        ],
    );
    assert_eq!(
        v["echo"]
            .as_str()
            .unwrap_or("")
            .matches("allowed.test")
            .count(),
        2,
        "{v}"
    );
    for second in [
        "GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n",
        "GET http://blocked.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n",
    ] {
        let v = bed.raw(
            "198.18.1.1:80",
            &["GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n", second],
        );
        assert!(
            !v["echo"].as_str().unwrap_or("").contains("blocked.test"),
            "a second request reached the server: {v}"
        );
    }
}

/// Racing the reload: a fronting verdict re-reads the DNS filter's record
/// and stored a policy built from the one it started with, so a `deny`
/// loaded meanwhile by another connection could be overwritten, and the
/// denied name (on an address another allowed name keeps open) went on
/// passing. The agent keeps fronting verdicts coming while the host denies.
/// (Found by reading; not reproduced in 150 rounds before the fix, so this
/// is a regression check of the common path, kept to 25 rounds: 100 cost
/// 84 s of both cores in every suite run.)
#[test]
fn proxy_a_deny_is_not_lost_to_concurrent_verdicts() {
    let Some(bed) = Bed::proxy("pa4") else { return };
    assert!(bed.reached(&["tls", "198.18.1.1:443", "dup.test"]));
    let spam: Vec<Child> = (0..3)
        .map(|_| {
            Command::new("ip")
                .args(["netns", "exec", &bed.sbx])
                .args(AGENT)
                .args(["sh", "-c"])
                .arg(format!(
                    "while :; do {} attack tlsmany 198.18.1.1:443 x.wild.test 200; done",
                    bin("sbx-fwbed").display()
                ))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut lost = Vec::new();
    for i in 0..25 {
        bed.ok(false, &["deny", "dup.test"]);
        // The proxy takes the change from a file event: give it time under
        // load, but a deny that never lands is lost.
        let t = std::time::Instant::now();
        while bed.attack(true, &["tls", "198.18.1.1:443", "dup.test"])["reached"] == true {
            if t.elapsed() > Duration::from_secs(10) {
                lost.push(i);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bed.ok(false, &["allow", "dup.test"]);
    }
    for mut c in spam {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(lost.is_empty(), "the deny was lost in rounds {lost:?}");
}

impl Bed {
    /// `iptables ARGS` (or ip6tables) of the backend this bed's sbx-fw uses.
    fn own_tables(&self, v6: bool, args: &[&str]) -> String {
        let prog = match (v6, self.backend == Some("system")) {
            (false, true) => "iptables",
            (true, true) => "ip6tables",
            (false, false) => "iptables-legacy",
            (true, false) => "ip6tables-legacy",
        };
        let o = Command::new("ip")
            .args(["netns", "exec", &self.sbx, prog, "--wait"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{prog} {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// Docker's embedded DNS as it is in a container on a user-defined network
/// (every sbx sandbox): the resolver on 127.0.0.11 at a random port, and
/// nat rules that send 127.0.0.11:53 there and put port 53 back on the
/// answers. Plus an IPv6 rule of someone else's.
const FOREIGN_NAT4: &[&[&str]] = &[
    &["-N", "DOCKER_OUTPUT"],
    &["-N", "DOCKER_POSTROUTING"],
    &["-A", "OUTPUT", "-d", "127.0.0.11/32", "-j", "DOCKER_OUTPUT"],
    &[
        "-A",
        "POSTROUTING",
        "-d",
        "127.0.0.11/32",
        "-j",
        "DOCKER_POSTROUTING",
    ],
    &[
        "-A",
        "DOCKER_OUTPUT",
        "-d",
        "127.0.0.11/32",
        "-p",
        "udp",
        "-m",
        "udp",
        "--dport",
        "53",
        "-j",
        "DNAT",
        "--to-destination",
        "127.0.0.11:45353",
    ],
    &[
        "-A",
        "DOCKER_POSTROUTING",
        "-s",
        "127.0.0.11/32",
        "-p",
        "udp",
        "-m",
        "udp",
        "--sport",
        "45353",
        "-j",
        "SNAT",
        "--to-source",
        ":53",
    ],
];
const FOREIGN_NAT6: &[&[&str]] = &[
    &["-N", "OTHER_OUTPUT"],
    &["-A", "OUTPUT", "-d", "fd00:53::1/128", "-j", "OTHER_OUTPUT"],
    &[
        "-A",
        "OTHER_OUTPUT",
        "-p",
        "udp",
        "-m",
        "udp",
        "--dport",
        "53",
        "-j",
        "DNAT",
        "--to-destination",
        "[::1]:45353",
    ],
];

/// Proxy mode's redirect is our own nat chain; init, a re-init,
/// a switch out of proxy mode and reset leave every other nat rule (here
/// Docker's DNS) in place, so names keep resolving through 127.0.0.11.
fn foreign_nat_rules_survive(bed: Bed) {
    Command::new("chmod")
        .arg("0755")
        .arg(bed.dir.path())
        .status()
        .unwrap();
    let mut resolver = bed.loopback_resolver(&["127.0.0.11:45353"]);
    for r in FOREIGN_NAT4 {
        bed.own_tables(false, &[&["-t", "nat"][..], r].concat());
    }
    for r in FOREIGN_NAT6 {
        bed.own_tables(true, &[&["-t", "nat"][..], r].concat());
    }
    let foreign = |v6: bool| -> Vec<String> {
        bed.own_tables(v6, &["-t", "nat", "-S"])
            .lines()
            .filter(|l| !l.contains("SBX-NAT"))
            .map(str::to_owned)
            .collect()
    };
    let before = [foreign(false), foreign(true)];
    assert!(before[0].iter().any(|l| l.contains("DNAT")), "{before:?}");
    // Docker's DNS works as root before sbx-fw is there.
    assert_verdicts(&bed.probe(false, &["dns:127.0.0.11/allowed.test"]), "open");
    let check = |when: &str, ours: bool| {
        for v6 in [false, true] {
            let nat = bed.own_tables(v6, &["-t", "nat", "-S"]);
            let now: Vec<String> = nat
                .lines()
                .filter(|l| !l.contains("SBX-NAT"))
                .map(str::to_owned)
                .collect();
            assert_eq!(
                now, before[v6 as usize],
                "{when}: foreign nat rules changed\n{nat}"
            );
            let jumps = nat.lines().filter(|l| *l == "-A OUTPUT -j SBX-NAT").count();
            assert_eq!(jumps, ours as usize, "{when}: jumps to our chain\n{nat}");
            // Re-declaring our chain under --noflush empties it first.
            let redirects = nat.matches("REDIRECT --to-ports 3129").count();
            assert_eq!(redirects, ours as usize, "{when}\n{nat}");
            assert_eq!(nat.contains("-N SBX-NAT"), ours, "{when}\n{nat}");
        }
    };
    bed.config("mode = \"proxy\"\n");
    for when in ["init", "re-init"] {
        bed.ok(false, &["init"]);
        check(when, true);
        // Names resolve for the agent through the filter, whose upstream
        // is Docker's resolver behind its DNAT.
        assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
        assert!(bed.reached(&["tls", "allowed.test:443", "allowed.test"]));
    }
    // Out of proxy mode by init: our chain goes, theirs stays.
    bed.config("");
    bed.ok(false, &["init"]);
    check("init out of proxy mode", false);
    assert_verdicts(&bed.probe(true, &["dns:127.0.0.53/allowed.test"]), "open");
    bed.config("mode = \"proxy\"\n");
    bed.ok(false, &["init"]);
    check("init back in proxy mode", true);
    bed.ok(false, &["reset", "--yes"]);
    check("reset", false);
    assert_verdicts(&bed.probe(false, &["dns:127.0.0.11/allowed.test"]), "open");
    let _ = resolver.kill();
    let _ = resolver.wait();
}

#[test]
fn proxy_mode_leaves_other_nat_rules_alone() {
    let Some(bed) = Bed::new("px7") else { return };
    foreign_nat_rules_survive(bed);
}

/// The same with the nft-backed iptables, which is where Docker's own rules
/// are on most hosts.
#[test]
fn proxy_mode_leaves_other_nat_rules_alone_nft() {
    let Some(bed) = Bed::with_system_iptables("px8") else {
        return;
    };
    foreign_nat_rules_survive(bed);
}

// ---- Round three: issue 39 ----

/// The agent asks the kernel for sockets no rule sees (vsock, whose ports
/// are the kernel's and in a VM the host's; packet; raw; a netlink
/// protocol beyond route and diag; AF_ALG) natively and through the i386
/// and x32 entry points, which Docker's profile does not inspect. Under
/// sbx-guest's filters none is made and `verify` passes; started without
/// them, `verify` finds the holes (so the check is real).
fn socket_families(bed: &Bed) {
    let args = ["verify", "--reach", "allowed.test", "--json"];
    // verify's socket checks, as (probe, pass); its address checks assume
    // address mode (in proxy mode 443 and 80 reach the proxy).
    let sockets = |o: Output| -> Vec<(String, bool)> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                let c = v["data"]["check"].as_str().unwrap_or("");
                c.starts_with("no ") && c != "no advertised route"
            })
            .map(|v| {
                let d = &v["data"];
                (d["probe"].as_str().unwrap().to_owned(), d["pass"] == true)
            })
            .collect()
    };
    let got = sockets(bed.fw_guest_agent(&args));
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got.iter().all(|(_, pass)| *pass), "{got:#?}");
    // The same agent without the filters: vsock (where the kernel has it)
    // and uevent netlink are open to any uid, and verify says so.
    let got = sockets(bed.fw(true, &args));
    let open: Vec<_> = got.iter().filter(|(_, pass)| !pass).collect();
    assert!(
        open.iter()
            .any(|(p, _)| p == "socket(AF_NETLINK/KOBJECT_UEVENT)"),
        "{got:#?}"
    );
}

#[test]
fn no_socket_family_the_rules_cannot_see() {
    let Some(bed) = Bed::new("f3a") else { return };
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    socket_families(&bed);
    let v = bed.fw_guest_agent(&["verify", "--reach", "allowed.test", "--json"]);
    let v = String::from_utf8_lossy(&v.stdout);
    assert!(v.contains(r#""failed":0"#), "{v}");
}

#[test]
fn proxy_no_socket_family_the_rules_cannot_see() {
    let Some(bed) = Bed::proxy("f3b") else { return };
    socket_families(&bed);
}

/// The agent picks the query type (16 bits) and header bits (CD, AD, Z,
/// EDNS's DO, Z and payload size) of queries for an exactly allowlisted
/// name, to carry data to the resolver. Only lookup types leave (A, AAAA,
/// CNAME, HTTPS, SVCB, or a configured one), every other is answered
/// locally with no records, and what leaves has the filter's own header.
fn dns_bits(bed: &Bed, mode: &str) {
    let name: &[&[u8]] = &[b"allowed", b"test"];
    // OPT: payload 4096, DO and every Z bit set.
    let opt = [0, 0, 41, 0x10, 0, 0, 0, 0xff, 0xff, 0, 0];
    let types: [u16; 7] = [16, 15, 10, 99, 0xff00, 28, 65];
    let packets: Vec<String> = types
        .iter()
        .map(|t| raw_query_as(name, *t, [0x01, 0x70], 1, &opt))
        .collect();
    std::fs::write(bed.path("queries.log"), "").unwrap();
    let mut args = vec!["dnsraw", "127.0.0.53:53"];
    args.extend(packets.iter().map(String::as_str));
    let r = bed.attack(true, &args);
    let replies = r.as_array().unwrap();
    // Each is answered: the local ones with no records, no error.
    for (t, rep) in types.iter().zip(replies) {
        assert_eq!(rep["rcode"], "No Error", "type {t}: {r}");
    }
    // The filter asks in mixed letter case (0x20).
    let saw = || -> Vec<String> {
        let log = std::fs::read_to_string(bed.path("queries.log")).unwrap();
        log.lines()
            .filter(|l| l.to_ascii_lowercase().contains(" allowed.test. "))
            .map(str::to_owned)
            .collect()
    };
    let seen = saw();
    let sent: Vec<&str> = seen
        .iter()
        .map(|l| l.split_whitespace().nth(3).unwrap_or(""))
        .collect();
    assert_eq!(sent, ["type=28", "type=65"], "{seen:#?}");
    for l in &seen {
        assert!(l.ends_with("flags=0100 edns=1232/false/0000"), "{l}");
    }
    assert!(bed.refused("query-type", 5) >= 5);
    // A configured type is forwarded, with the same fixed header.
    bed.config(&format!("dns-types = [\"TXT\"]\n{mode}"));
    bed.ok(false, &["init"]);
    std::fs::write(bed.path("queries.log"), "").unwrap();
    bed.attack(true, &["dnsraw", "127.0.0.53:53", &packets[0]]);
    let seen = saw();
    assert!(
        seen.iter()
            .any(|l| l.contains(" type=16 flags=0100 edns=1232/false/0000")),
        "{seen:#?}"
    );
}

#[test]
fn dns_queries_carry_no_chosen_type_or_header_bits() {
    let Some(bed) = Bed::new("f3c") else { return };
    bed.ok(false, &["init"]);
    dns_bits(&bed, "");
}

#[test]
fn proxy_dns_queries_carry_no_chosen_type_or_header_bits() {
    let Some(bed) = Bed::proxy("f3d") else { return };
    dns_bits(&bed, "mode = \"proxy\"\n");
}

/// A query for an allowlisted name that passed the check before `deny`
/// added its address after deny's cleanup: the denied destination stayed
/// open for the rest of its hold. The agent floods queries for a name
/// under a wildcard (whose addresses only the filter hands out) while root
/// allows and denies the wildcard, a thousand times; each time, once the
/// answers in flight at the deny are in, the address must be out of the
/// allow set. A round costs the two sbx-fw runs and little else: they
/// start from a thread already in the sandbox's namespace (no `ip netns exec`, whose
/// mount namespace is half the cost of a run), the flood says when the
/// answers in flight are in (no fixed wait), and one `ipset -` kept
/// running answers the set tests.
fn deny_race(bed: &mut Bed) {
    let (mut flood, mut out) =
        bed.attack_running(&["dnsloop", "127.0.0.53:53", "x.wild.test", "2"], "started");
    let mut flood_in = flood.stdin.take().unwrap();
    let bed = &*bed;
    let (rounds, took) = std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(format!("/run/netns/{}", bed.sbx)).unwrap();
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let fw = |args: &[&str]| {
                let mut c = Command::new(bin("sbx-fw"));
                bed.fw_args(&mut c, args);
                let o = c.output().unwrap();
                assert!(
                    o.status.success(),
                    "sbx-fw {args:?}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            };
            let mut ipset = Command::new("ipset")
                .arg("-")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut ipset_in = ipset.stdin.take().unwrap();
            let mut ipset_out = BufReader::new(ipset.stderr.take().unwrap());
            let mut in_set = || {
                writeln!(ipset_in, "test sbx-allow4 198.18.1.3").unwrap();
                let mut line = String::new();
                ipset_out.read_line(&mut line).unwrap();
                assert!(line.contains("in set"), "ipset: {line:?}");
                !line.contains("NOT")
            };
            let mut answered = || {
                writeln!(flood_in, "barrier").unwrap();
                let mut line = String::new();
                out.read_line(&mut line).unwrap();
                assert_eq!(line.trim(), "answered");
            };
            let t0 = Instant::now();
            let mut rounds = 0;
            // A thousand rounds, or as many as fit in 120 s: beside another
            // suite on 2 cores a deny took 170 ms and only 642 fitted in
            // 150 s. Fewer than 200 means the bed itself is broken.
            // Where the time goes: allow, barrier, deny, barrier, test.
            let mut spent = [Duration::ZERO; 5];
            let mut lap = |i: usize, t: &mut Instant| {
                spent[i] += t.elapsed();
                *t = Instant::now();
            };
            while rounds < 1000 && t0.elapsed() < Duration::from_secs(120) {
                let mut t = Instant::now();
                fw(&["allow", "*.wild.test"]);
                lap(0, &mut t);
                // Answers for the allowed name come and go meanwhile.
                answered();
                lap(1, &mut t);
                fw(&["deny", "*.wild.test"]);
                lap(2, &mut t);
                // Every answer in flight at the deny is in.
                answered();
                lap(3, &mut t);
                assert!(
                    !in_set(),
                    "round {rounds}: 198.18.1.3 still allowed after deny"
                );
                lap(4, &mut t);
                rounds += 1;
            }
            let _ = ipset.kill();
            let _ = ipset.wait();
            eprintln!("allow, barrier, deny, barrier, test: {spent:?}");
            (rounds, t0.elapsed())
        })
        .join()
        .unwrap()
    });
    drop(flood_in);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    flood.wait().unwrap();
    eprintln!("{rounds} rounds in {took:?}; flood {rest}");
    assert!(rounds >= 200, "only {rounds} rounds in time");
}

#[test]
fn deny_leaves_no_window_for_answers_in_flight() {
    let Some(mut bed) = Bed::new("f3e") else {
        return;
    };
    bed.ok(false, &["init"]);
    deny_race(&mut bed);
}

#[test]
fn proxy_deny_leaves_no_window_for_answers_in_flight() {
    let Some(mut bed) = Bed::proxy("f3f") else {
        return;
    };
    deny_race(&mut bed);
}

/// A root neighbour on the bridge takes the gateway over: it advertises
/// an allowlisted range (2001:2::/64, allowed.test's) as on-link, and
/// claims the gateway's addresses (a new link-layer address with
/// arp_notify and ndisc_notify on: the kernel sends a gratuitous ARP and
/// an unsolicited neighbour advertisement). Init runs as in a container:
/// an empty neighbour cache and sbx-guest's block in place, so it must
/// learn both gateways itself. Then nothing the neighbour sends changes
/// the sandbox: the range still goes via the gateway, the gateway's
/// entries keep its link-layer address, and `verify` (as the agent) finds
/// both pinned. (With the pinning off, the route and both entries move.)
fn gateway_takeover(prefix: &str, proxy: bool) {
    let Some(bed) = Bed::new(prefix) else { return };
    if proxy {
        bed.proxy_config();
    }
    let sbx_out =
        |args: &[&str]| String::from_utf8_lossy(&in_ns(&bed.sbx, args).stdout).into_owned();
    // The gateway's entry: link-layer address and state.
    let entry = |ip: &str| -> (String, String) {
        let v: Value = serde_json::from_str(&sbx_out(&["ip", "-j", "neigh", "show", ip])).unwrap();
        let mac = v[0]["lladdr"].as_str().unwrap_or("").to_owned();
        (mac, v[0]["state"].to_string())
    };
    sbx_out(&["ip", "neigh", "flush", "all"]);
    for ip in ["10.77.0.1", "fd77::1"] {
        assert_eq!(entry(ip).0, "", "{}", sbx_out(&["ip", "neigh"]));
    }
    for (prog, v6) in [
        ("iptables-legacy-restore", false),
        ("ip6tables-legacy-restore", true),
    ] {
        let mut c = Command::new("ip")
            .args(["netns", "exec", &bed.sbx, prog])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let rules = sbx_core::netblock::block_all(v6);
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success(), "{prog}");
    }
    let o = bed.init();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = in_ns(&bed.gw, &["cat", "/sys/class/net/br0/address"]);
    let br0 = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let mut wrong = Vec::new();
    for ip in ["10.77.0.1", "fd77::1"] {
        let (mac, state) = entry(ip);
        if mac != br0 || !state.contains("PERMANENT") {
            wrong.push(format!(
                "after init, {ip}: {mac} {state}, want {br0} PERMANENT"
            ));
        }
    }
    // The agent's traffic to both families, so that even an unpinned
    // gateway has an entry for the neighbour to move.
    bed.probe(true, &["tcp:198.18.1.1:443", "tcp:[2001:2::1:1]:443"]);
    let nbx = |args: &[&str]| {
        let o = in_ns(&bed.nb, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
    };
    // An advertisement counts only from a link-local source: wait out
    // duplicate address detection of the neighbour's own.
    let t0 = Instant::now();
    loop {
        let o = in_ns(
            &bed.nb,
            &["ip", "-6", "addr", "show", "dev", "eth0", "scope", "link"],
        );
        let a = String::from_utf8_lossy(&o.stdout);
        if a.contains("fe80") && !a.contains("tentative") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{a}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.nb])
        .arg(bin("sbx-fwbed"))
        .args(["attack", "ra", "eth0", "2001:2::"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(r#""sent":3"#),
        "{o:?}"
    );
    // The neighbour becomes the gateway: its addresses, then a new
    // link-layer address, which the kernel announces for each of them.
    nbx(&["sysctl", "-qw", "net.ipv4.conf.eth0.arp_notify=1"]);
    nbx(&["sysctl", "-qw", "net.ipv6.conf.eth0.ndisc_notify=1"]);
    nbx(&["ip", "addr", "flush", "dev", "eth0"]);
    nbx(&["ip", "addr", "add", "10.77.0.1/24", "dev", "eth0"]);
    nbx(&[
        "ip",
        "-6",
        "addr",
        "add",
        "fd77::1/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    nbx(&["ip", "link", "set", "eth0", "address", "02:00:00:00:0b:ad"]);
    std::thread::sleep(Duration::from_millis(1500));
    let route = sbx_out(&["ip", "-6", "route", "get", "2001:2::1:1"]);
    if !route.contains("via fd77::1") {
        wrong.push(format!("advertised on-link: {route}"));
    }
    for ip in ["10.77.0.1", "fd77::1"] {
        let (mac, state) = entry(ip);
        if mac != br0 {
            wrong.push(format!("taken over, {ip}: {mac} {state}"));
        }
    }
    let o = bed.fw_guest_agent(&["verify", "--reach", "allowed.test", "--json"]);
    let checks: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            matches!(
                v["data"]["check"].as_str(),
                Some("gateway pinned" | "no advertised route")
            )
        })
        .collect();
    if checks.len() != 3 || checks.iter().any(|c| c["data"]["pass"] != true) {
        wrong.push(format!("verify: {checks:#?}"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn no_neighbour_takes_the_gateway_over() {
    gateway_takeover("f3g", false);
}

#[test]
fn proxy_no_neighbour_takes_the_gateway_over() {
    gateway_takeover("f3h", true);
}

/// A gateway that misses the kernel's three solicitations (about 3 s) is
/// still learnt and pinned when it answers later within init's 6 s: init
/// probes again each second. Its address comes back 3.5 s after init
/// starts; with a single probe the entry has failed by then and init
/// fails closed at 6 s.
#[test]
fn a_gateway_that_answers_late_is_still_pinned() {
    let Some(bed) = Bed::new("f3l") else { return };
    let ns = |n: &str, args: &[&str]| {
        let o = in_ns(n, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let gw = &bed.gw;
    ns(&bed.sbx, &["ip", "neigh", "flush", "all"]);
    ns(gw, &["ip", "-6", "addr", "del", "fd77::1/64", "dev", "br0"]);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &bed.sbx]).arg(bin("sbx-fw"));
    bed.fw_args(&mut c, &["init"]);
    let init = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    ns(
        gw,
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "fd77::1/64",
            "dev",
            "br0",
            "nodad",
        ],
    );
    let o = init.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "init gave up on a gateway that answered late: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let entry = ns(&bed.sbx, &["ip", "neigh", "show", "fd77::1"]);
    assert!(entry.contains("PERMANENT"), "{entry}");
}
