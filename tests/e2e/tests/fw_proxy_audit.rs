//! Proxy mode's refusals reach the user (issue 39): in a sandbox started
//! with `sbx-run start` and `[network] mode = "proxy"`, the agent tries an
//! address its name never resolved to, a TLS server name and an HTTP Host
//! off the allowlist, a request target that disagrees with its Host, and
//! a CONNECT for a name off the list; each must show in `sbx-run log
//! --blocked-only` on the host as one record sent by the proxy (its own
//! uid, stamped by the guest from the socket's credentials, which the
//! agent cannot choose).

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::Command;

use sbx_e2e::{Repo, base_image, sbx, sh, text};

/// The uid `sbx-fw init` runs the proxy as (docs/security.md, proxy mode).
const PROXY_UID: u64 = 65533;

/// An allowlisted name that resolves nowhere: any address dialled for it
/// is outside its set.
const ALLOWED: &str = "allowed.sbx-e2e.test";

#[test]
fn every_proxy_refusal_is_in_the_users_log_as_the_proxys() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("fwproxyaudit");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    repo.give_to_agent();
    sh(sbx().args(["-q", "init"]).arg(&repo.path));
    let cfg = repo.path.join(".agent-sandbox/config.toml");
    let conf = std::fs::read_to_string(&cfg).unwrap();
    let net = format!(
        "\n[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
         allow-domains = [\"{ALLOWED}\"]\n"
    );
    assert!(conf.contains("\n[network]\n"), "{conf}");
    std::fs::write(&cfg, conf.replacen("\n[network]\n", &net, 1)).unwrap();
    sh(sbx().arg("start").arg(&repo.path));
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);

    // The endpoint: the host, at the sandbox's gateway, ports 80 and 443.
    let o = repo.exec("ip -4 route show default");
    let route = text(&o);
    let gw: IpAddr = route
        .split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no default route: {route}"));
    let listeners: Vec<TcpListener> = [80, 443]
        .iter()
        .map(|p| TcpListener::bind(SocketAddr::new(gw, *p)).expect("listener on the gateway"))
        .collect();

    // As the agent. `--noproxy` keeps curl off the CONNECT proxy, so the
    // first four are the redirected (transparent) path.
    let attacks = [
        // (a) an allowed name at an address that is not one of its
        format!(
            "curl -sk --noproxy '*' -m 20 --connect-to {ALLOWED}:443:{gw}:443 https://{ALLOWED}/"
        ),
        // (b) a server name off the allowlist
        format!(
            "curl -sk --noproxy '*' -m 20 --connect-to sni-refused.test:443:{gw}:443 https://sni-refused.test/"
        ),
        // (c) a Host off the allowlist
        format!(
            "curl -s --noproxy '*' -m 20 --connect-to host-refused.test:80:{gw}:80 http://host-refused.test/"
        ),
        // (d) a request target naming another host than its Host
        format!(
            "curl -s --noproxy '*' -m 20 --request-target http://{ALLOWED}/ -H 'Host: mismatch.test' http://{gw}/"
        ),
        // (e) the explicit proxy, for a name off the allowlist
        "curl -sk -m 20 -x http://127.0.0.1:3128 https://connect-refused.test/".to_owned(),
    ];
    for a in &attacks {
        let o = repo.exec(a);
        assert!(!o.status.success(), "{a} got through: {}", text(&o));
    }
    // The agent's forgery: a record claiming to be the proxy's, sent to
    // the guest's socket (open to the agent) itself.
    let forged = r#"perl -MSocket -e 'socket(S, PF_UNIX, SOCK_DGRAM, 0) or die; send(S, q({"timestamp":"x","tool":"sbx-fw","agent":"a","operation":"connect","target":"forged.test","result":"blocked","policy":"proxy","reason":"not on the allowlist"}), 0, pack_sockaddr_un("/run/sbx-audit/audit.sock")) or die'"#;
    let o = repo.exec(forged);
    assert!(o.status.success(), "{}", text(&o));
    for l in &listeners {
        l.set_nonblocking(true).unwrap();
        let got = l.accept();
        assert!(got.is_err(), "a refused connection reached the host");
    }

    // As the user on the host. Records arrive through the guest's socket;
    // give them a moment.
    let expected = [
        (
            ALLOWED.to_owned(),
            "address is not one the name resolved to",
        ),
        ("sni-refused.test".to_owned(), "not on the allowlist"),
        ("host-refused.test".to_owned(), "not on the allowlist"),
        (
            format!("{gw}:80"),
            "not a well-formed ClientHello or request",
        ),
        ("connect-refused.test".to_owned(), "not on the allowlist"),
    ];
    let mut records = Vec::new();
    for _ in 0..50 {
        let o = sbx()
            .args(["log", "--blocked-only", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        records = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| v["data"].clone())
            .filter(|d| d["origin"] == names.container.as_str() && d["policy"] == "proxy")
            .collect::<Vec<_>>();
        if records.len() >= expected.len() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let all = records
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    // The forgery is refused: sbx-fw's name is the proxy's uid's (or root's).
    assert!(
        records.iter().all(|d| d["target"] != "forged.test"),
        "{all}"
    );
    assert_eq!(records.len(), expected.len(), "{all}");
    for (target, reason) in &expected {
        let mine: Vec<_> = records.iter().filter(|d| d["target"] == **target).collect();
        assert_eq!(mine.len(), 1, "one record for {target}:\n{all}");
        let d = mine[0];
        assert_eq!(d["tool"], "sbx-fw", "{d}");
        assert_eq!(d["result"], "blocked", "{d}");
        assert!(
            d["reason"].as_str().unwrap_or("").starts_with(reason),
            "{d}"
        );
        // The sender as the kernel named it, not as the record claims.
        assert_eq!(d["peer"]["uid"].as_u64(), Some(PROXY_UID), "{d}");
    }

    // The text form shows them too, marked as from a sandbox.
    let o = sbx().args(["log", "--blocked-only"]).output().unwrap();
    let out = text(&o);
    for (target, reason) in &expected {
        assert!(
            out.lines().any(|l| l.contains("sbx-fw*")
                && l.contains("proxy")
                && l.contains(target.as_str())
                && l.contains(reason)
                && l.starts_with(&format!("[sbx-fw, uid {PROXY_UID}] "))),
            "{target} not in the text log as the proxy's:\n{out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.contains("audit-sink")
                && l.contains("uid 1000 may not send records as sbx-fw")),
        "the forgery's refusal not shown:\n{out}"
    );
}
