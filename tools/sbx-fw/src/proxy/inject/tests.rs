//! The injecting relay against real TLS on loopback: a client that trusts
//! only the sandbox CA (the agent), the proxy's `serve`, and a stand-in
//! for the real host whose root only the proxy trusts. Each attack is
//! sent as the agent would and must leave the stand-in without the secret.

use super::*;
use std::sync::Arc as StdArc;
use tokio::net::TcpListener;

const HOST: &str = "api.test";
const SECRET: &str = "REAL-secret-4c1d";
const HOLDER: &str = "sbx-placeholder-model";

struct Bed {
    _dir: tempfile::TempDir,
    inj: StdArc<Injector>,
    ca: CertificateDer<'static>,
    /// The stand-in's address and every head it received, in order.
    up: SocketAddr,
    seen: StdArc<Mutex<Vec<String>>>,
}

/// A stand-in for `HOST` with a certificate from a root of its own;
/// `trust_up`: whether the proxy's bundle holds that root. `up_cert`:
/// the stand-in presents this server config instead (an impostor).
async fn bed(trust_up: bool, impostor: bool) -> Bed {
    bed_for(trust_up, impostor, false).await
}

/// [`bed`] with the secret a Claude Code login (`claude-login:`), sent
/// as `x-api-key` still (the header does not matter to what is refused).
async fn bed_for(trust_up: bool, impostor: bool, login: bool) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let (key, cert) = make_ca().unwrap();
    std::fs::write(dir.path().join(CA_KEY), key).unwrap();
    std::fs::write(dir.path().join(CA_CERT), &cert).unwrap();
    let b = Binding {
        name: "model".into(),
        host: HOST.into(),
        header: "x-api-key".into(),
        placeholder: HOLDER.into(),
        value: SECRET.into(),
        login,
    };
    std::fs::write(
        dir.path().join(BINDINGS),
        serde_json::to_vec(&vec![b]).unwrap(),
    )
    .unwrap();
    // The stand-in's own root and leaf.
    let root_key = KeyPair::generate().unwrap();
    let mut rp = CertificateParams::default();
    rp.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root = rp.self_signed(&root_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![HOST.into()])
        .unwrap()
        .signed_by(&leaf_key, &Issuer::new(rp, root_key))
        .unwrap();
    // The bundle: the stand-in's root when trusted, and always our own CA
    // (the sandbox's bundle holds it), which must not count upstream.
    let bundle = dir.path().join("bundle.pem");
    let mut pem = cert.clone();
    if trust_up {
        pem.push_str(&root.pem());
    }
    std::fs::write(&bundle, pem).unwrap();
    let inj = StdArc::new(Injector::load(dir.path(), &bundle).unwrap().unwrap());
    let server = if impostor {
        // Signed by the sandbox CA: what the agent could present.
        inj.server(HOST).unwrap()
    } else {
        let mut c = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
            )
            .unwrap();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        StdArc::new(c)
    };
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let seen = StdArc::new(Mutex::new(Vec::new()));
    let heads = seen.clone();
    tokio::spawn(async move {
        let acc = tokio_rustls::TlsAcceptor::from(server);
        while let Ok((s, _)) = l.accept().await {
            let (acc, heads) = (acc.clone(), heads.clone());
            tokio::spawn(async move {
                let Ok(mut t) = acc.accept(s).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..i + 4).collect();
                        heads
                            .lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&head).into_owned());
                        // TRACE (Apache's default) and an echo endpoint
                        // answer with the request as the server got it.
                        let text = String::from_utf8_lossy(&head).into_owned();
                        let answer = if text.starts_with("GET /gz")
                            || (text.starts_with("GET /echo") && text.contains("gzip"))
                        {
                            // Coded as a server compresses when asked (or
                            // always): the value's bytes are not in the
                            // body as they were sent (reversed here).
                            let body: String = text.chars().rev().collect();
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        } else if let Some(how) = text
                            .strip_prefix("GET /escaped-")
                            .and_then(|r| r.split(' ').next())
                        {
                            // An echo escaped as a host may: JSON, URL, base64.
                            let body = escape(how, &text);
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        } else if text.starts_with("TRACE ") || text.starts_with("GET /echo") {
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                                text.len()
                            )
                        } else if text.contains("/create_api_key") && text.contains(SECRET) {
                            // Claude Code's login host: a token buys a key.
                            let body = r#"{"raw_key":"sk-ant-api03-MINTED-BY-THE-AGENT"}"#;
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        } else if text.starts_with("GET /quote") {
                            // An error page quoting the key cut short.
                            let key = text.split("x-api-key: ").nth(1).unwrap_or_default();
                            let body = format!("invalid key {}...", &key[..12.min(key.len())]);
                            format!(
                                "HTTP/1.1 401 No\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        } else {
                            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_owned()
                        };
                        // In small records: the proxy's reads cut the
                        // value, as a slow server's would.
                        for piece in answer.as_bytes().chunks(5) {
                            if t.write_all(piece).await.is_err() || t.flush().await.is_err() {
                                return;
                            }
                        }
                        if String::from_utf8_lossy(&head).contains("Connection: close") {
                            let _ = t.shutdown().await;
                            return;
                        }
                    }
                    match t.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    let ca = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    Bed {
        _dir: dir,
        inj,
        ca,
        up,
        seen,
    }
}

impl Bed {
    /// One agent connection through the proxy: `reqs` sent at once, what
    /// came back, and the proxy's verdict. `trust`: the agent trusts the
    /// sandbox CA (false: a client that pins or brings its own roots).
    async fn run(&self, reqs: &str, trust: bool) -> (String, Result<(), Refusal>) {
        let (got, v) = self.run_ruled(reqs, trust, None).await;
        (got, v.map_err(|(r, _)| r))
    }

    /// [`Bed::run`] with `[network.rules]` for the host.
    async fn run_ruled(
        &self,
        reqs: &str,
        trust: bool,
        rules: Option<Vec<sbx_core::netrules::Rule>>,
    ) -> (String, Result<(), (Refusal, Option<String>)>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let (inj, up) = (self.inj.clone(), self.up);
        let proxy = tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            // Part of the hello already read, as conn.rs has when judging.
            let mut first = vec![0u8; 64];
            let n = c.read(&mut first).await.unwrap();
            first.truncate(n);
            let key: sbx_core::config::Domain = HOST.parse().unwrap();
            let ruled = rules.as_deref().map(|rules| Ruled { key: &key, rules });
            inj.serve(c, first, HOST, up, Duration::from_secs(20), ruled)
                .await
        });
        let mut roots = rustls::RootCertStore::empty();
        if trust {
            roots.add(self.ca.clone()).unwrap();
        } else {
            let k = KeyPair::generate().unwrap();
            let own = CertificateParams::default().self_signed(&k).unwrap();
            roots.add(own.der().clone()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(at).await.unwrap();
        let mut got = String::new();
        let conn = tokio_rustls::TlsConnector::from(StdArc::new(cfg))
            .connect(ServerName::try_from(HOST).unwrap(), tcp)
            .await;
        if let Ok(mut t) = conn {
            let _ = t.write_all(reqs.as_bytes()).await;
            let mut buf = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), t.read_to_end(&mut buf)).await;
            got = String::from_utf8_lossy(&buf).into_owned();
        }
        let verdict = tokio::time::timeout(Duration::from_secs(20), proxy)
            .await
            .expect("the proxy ends the connection")
            .unwrap();
        (got, verdict)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `[network.rules]` on a connection the proxy ends: every request on it
/// is judged, the first refused one gets a 403 naming the rules and
/// neither it nor anything after it reaches the host.
#[tokio::test]
async fn rules_judge_every_request_on_the_connection() {
    let b = bed(true, false).await;
    let rules: Vec<sbx_core::netrules::Rule> = ["GET /v1/**", "POST /v1/messages"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let two = format!(
        "{}POST /v1/messages HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 0\r\n\r\n",
        req(HOST, "")
    );
    let (got, v) = b.run_ruled(&two, true, Some(rules.clone())).await;
    assert_eq!(v, Ok(()), "{got}");
    assert_eq!(b.seen().len(), 2);
    // A later request on the kept-alive connection, and a path that
    // walks out of an allowed one.
    for (i, bad) in [
        "DELETE /v1/messages HTTP/1.1\r\nHost: api.test\r\n\r\n",
        "GET /v1/../admin HTTP/1.1\r\nHost: api.test\r\n\r\n",
        "GET /v2/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
    ]
    .iter()
    .enumerate()
    {
        let before = b.seen().len();
        let stream = format!("{}{bad}{}", req(HOST, ""), req(HOST, ""));
        let (got, v) = b.run_ruled(&stream, true, Some(rules.clone())).await;
        let (r, why) = v.unwrap_err();
        assert_eq!(r, Refusal::Rule, "{i}");
        let why = why.unwrap();
        let line = bad.split(" HTTP").next().unwrap();
        assert!(why.starts_with(line), "{why}");
        assert!(
            got.contains("403 Forbidden") && got.contains("[network.rules] \"api.test\" refuses"),
            "{got}"
        );
        // The request before it went, sent in the same write, and its
        // answer came down before the 403 (answers keep request order);
        // the refused one and the one after it never went.
        let seen = b.seen();
        assert_eq!(seen.len(), before + 1, "{seen:?}");
        assert!(seen[before].starts_with("GET /v1/messages"), "{seen:?}");
        let (ok, no) = (got.find("200 OK"), got.find("403 Forbidden"));
        assert!(ok.is_some() && ok < no, "{got}");
    }
}

/// Rules without any secret still need the CA: the proxy loads it alone.
#[test]
fn a_ca_without_secrets_is_loaded_for_rules() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, "").unwrap();
    assert!(Injector::load(dir.path(), &bundle).unwrap().is_none());
    let (key, cert) = make_ca().unwrap();
    std::fs::write(dir.path().join(CA_KEY), key).unwrap();
    std::fs::write(dir.path().join(CA_CERT), cert).unwrap();
    let inj = Injector::load(dir.path(), &bundle).unwrap().unwrap();
    assert!(!inj.binds(HOST));
    assert!(inj.server(HOST).is_ok());
}

fn req(host: &str, extra: &str) -> String {
    format!("GET /v1/messages HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

#[tokio::test]
async fn the_secret_replaces_the_placeholder_in_its_header_only() {
    let b = bed(true, false).await;
    let two = format!(
        "{}{}",
        req(HOST, &format!("x-api-key: {HOLDER}\r\n")),
        req(
            HOST,
            &format!("X-Api-Key: {HOLDER}\r\nx-other: {HOLDER}\r\nConnection: close\r\n")
        )
    );
    let (got, v) = b.run(&two, true).await;
    assert_eq!(v, Ok(()));
    assert_eq!(got.matches("200 OK").count(), 2, "{got}");
    let seen = b.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[0].contains(&format!("x-api-key: {SECRET}\r\n")),
        "{}",
        seen[0]
    );
    assert!(
        seen[1].contains(&format!("X-Api-Key: {SECRET}\r\n")),
        "{}",
        seen[1]
    );
    // Elsewhere the placeholder stays a placeholder.
    assert!(
        seen[1].contains(&format!("x-other: {HOLDER}\r\n")),
        "{}",
        seen[1]
    );
    assert!(!got.contains(SECRET));
}

/// A Claude Code login's token (`claude-login:`) buys an API key on its
/// host (`POST /api/oauth/claude_cli/create_api_key` answers it whole):
/// the agent asking for one, however it spells the path, is refused at
/// the head and the stand-in mints nothing; the model's own paths still
/// get the token, and a plain key's binding is not held to this.
#[tokio::test]
async fn a_login_token_mints_no_api_key() {
    let b = bed_for(true, false, true).await;
    let key = |target: &str| {
        format!(
            "POST {target} HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: {HOLDER}\r\nContent-Length: 0\r\n\r\n"
        )
    };
    for target in [
        "/api/oauth/claude_cli/create_api_key",
        "/API/OAuth/Claude_CLI/create_api_key",
        "/api/oauth/%63laude_cli/create_api_key",
        "/api/oauth/claude_cli;x/create_api_key?y=1",
        "/api//oauth/claude_cli/create_api_key",
        "/v1/../api/oauth/claude_cli/create_api_key",
    ] {
        // Behind a good request on the same connection, too.
        let stream = format!(
            "{}{}",
            req(HOST, &format!("x-api-key: {HOLDER}\r\n")),
            key(target)
        );
        let before = b.seen().len();
        let (got, v) = b.run(&stream, true).await;
        assert_eq!(v, Err(Refusal::Injection), "{target}: {got}");
        assert!(!got.contains("MINTED"), "{target}: {got}");
        let seen = b.seen();
        assert!(seen.len() <= before + 1, "{target}: {seen:?}");
        assert!(
            seen[before..].iter().all(|h| !h.contains("oauth")),
            "{target}: {seen:?}"
        );
    }
    let (got, v) = b
        .run(
            &req(
                HOST,
                &format!("x-api-key: {HOLDER}\r\nConnection: close\r\n"),
            ),
            true,
        )
        .await;
    assert_eq!(v, Ok(()), "{got}");
    assert!(b.seen().last().unwrap().contains(SECRET));
    // The stand-in mints for whoever asks: without the login mark the
    // same request is served (what the check above stops).
    let plain = bed(true, false).await;
    let (got, _) = plain
        .run(&key("/api/oauth/claude_cli/create_api_key"), true)
        .await;
    assert!(got.contains("MINTED"), "{got}");
}

/// Attacks from the agent on one injecting connection: each is refused
/// at its head, and nothing from it reaches the stand-in.
#[tokio::test]
async fn smuggled_or_ambiguous_requests_get_no_secret() {
    let b = bed(true, false).await;
    let key = format!("x-api-key: {HOLDER}\r\n");
    for attack in [
        // A second request for another host behind an allowed one.
        format!("{}{}", req(HOST, &key), req("evil.test", &key)),
        // The same, its Host in the request target.
        format!(
            "{}GET http://evil.test/ HTTP/1.1\r\nHost: {HOST}\r\n{key}\r\n",
            req(HOST, &key)
        ),
        // Two body lengths: a server could read the body as a request.
        req(
            HOST,
            &format!("{key}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        ),
        // Two of the bound header: which one the server takes is a guess.
        req(HOST, &format!("{key}{key}")),
        // No Host at all, a CONNECT, and a protocol switch.
        format!("GET / HTTP/1.1\r\n{key}\r\n"),
        format!("CONNECT evil.test:443 HTTP/1.1\r\nHost: {HOST}\r\n{key}\r\n"),
        req(HOST, &format!("{key}Upgrade: h2c\r\n")),
    ] {
        let before = b.seen().len();
        let (_, v) = b.run(&attack, true).await;
        assert_eq!(v, Err(Refusal::Injection), "{attack:?}");
        let after = b.seen();
        for h in &after[before..] {
            assert!(
                h.starts_with("GET /v1/messages") && h.contains(&format!("Host: {HOST}\r\n")),
                "{attack:?} reached the stand-in as {h:?}"
            );
        }
        assert!(after.len() - before <= 1, "{attack:?}: {after:?}");
    }
}

/// `text` escaped as a host echoing it may: `json` (PHP's `\/`, every
/// other non-alphanumeric as `\u00xx`), `url` (`%XX`), `b64`/`b64url`
/// with a lead of `pad` bytes (the value at each alignment).
fn escape(how: &str, text: &str) -> String {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let each = |f: &dyn Fn(char) -> String| text.chars().map(f).collect::<String>();
    match how {
        "json" => each(&|c| match c {
            '/' => "\\/".into(),
            c if c.is_ascii_alphanumeric() => c.into(),
            c => format!("\\u{:04x}", c as u32),
        }),
        "url" => each(&|c| match c {
            c if c.is_ascii_alphanumeric() => c.into(),
            c => format!("%{:02X}", c as u32),
        }),
        b => {
            let pad: usize = b
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .unwrap_or(0);
            let data = format!("{}{text}", "#".repeat(pad));
            if b.starts_with("b64url") {
                URL_SAFE.encode(data)
            } else {
                STANDARD.encode(data)
            }
        }
    }
}

/// What an escaped echo says, decoded again.
fn unescaped(how: &str, body: &str) -> String {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let bytes = match how {
        "json" | "url" => super::unescape(body.as_bytes()).0,
        b if b.starts_with("b64url") => URL_SAFE.decode(body).unwrap_or_default(),
        _ => STANDARD.decode(body).unwrap_or_default(),
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An echo the host escapes on its way back (JSON, URL, base64 at every
/// alignment) hides no run of the value from the masking: decoded again,
/// the answer holds no 8 bytes of it.
#[tokio::test]
async fn an_escaped_echo_gives_nothing_back() {
    let b = bed(true, false).await;
    let key = format!("x-api-key: {HOLDER}\r\n");
    for how in [
        "json", "url", "b64-0", "b64-1", "b64-2", "b64url-0", "b64url-1", "b64url-2",
    ] {
        let echo = format!(
            "GET /escaped-{how} HTTP/1.1\r\nHost: {HOST}\r\n{key}Connection: close\r\n\r\n"
        );
        let (got, v) = b.run(&echo, true).await;
        assert_eq!(v, Ok(()), "{how}");
        let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
        assert!(!body.is_empty(), "{how}: {got}");
        let back = unescaped(how, body);
        for run in SECRET.as_bytes().windows(MIN_PART) {
            let run = std::str::from_utf8(run).unwrap();
            assert!(!back.contains(run), "{how}: {run:?} in {back:?} ({body})");
        }
    }
    // Without the masking, each of them would carry it.
    let seen = b.seen();
    assert!(seen.iter().all(|h| h.contains(SECRET)), "{seen:?}");
}

/// A server that answers with the request it got (TRACE, which Apache
/// answers by default; an echo endpoint; an error page quoting a header)
/// would hand the secret back to the agent: TRACE is refused at its head,
/// and the value never comes back down, whatever the answer's framing
/// or however the proxy's reads cut it.
#[tokio::test]
async fn the_secret_never_comes_back_in_an_answer() {
    let b = bed(true, false).await;
    let key = format!("x-api-key: {HOLDER}\r\n");
    let (_, v) = b
        .run(
            &format!("TRACE / HTTP/1.1\r\nHost: {HOST}\r\n{key}\r\n"),
            true,
        )
        .await;
    assert_eq!(v, Err(Refusal::Injection));
    assert!(b.seen().is_empty(), "{:?}", b.seen());
    let echo = format!("GET /echo HTTP/1.1\r\nHost: {HOST}\r\n{key}Connection: close\r\n\r\n");
    let (got, v) = b.run(&echo, true).await;
    assert_eq!(v, Ok(()));
    // The stand-in got the value; the agent got the answer, same length,
    // without it.
    assert!(b.seen()[0].contains(SECRET), "{:?}", b.seen());
    assert!(
        got.contains("x-api-key: ") && got.ends_with("\r\n\r\n"),
        "{got}"
    );
    assert!(!got.contains(SECRET), "{got}");
    assert!(!got.contains(&SECRET[..SECRET.len() - 1]), "{got}");
}

/// An echo the agent asks to have compressed (`Accept-Encoding`, `TE`)
/// or cut at offsets it picks (`Range`) comes back uncompressed and
/// whole, so masked: the proxy asks for identity and drops the rest. A
/// server that compresses unasked is refused before its head goes down,
/// and one quoting a part of the value shows none of it.
#[tokio::test]
async fn compressed_or_partial_echoes_give_nothing_back() {
    let b = bed(true, false).await;
    let key = format!("x-api-key: {HOLDER}\r\n");
    let asks = "Accept-Encoding: gzip, br\r\nTE: gzip\r\nRange: bytes=0-3\r\nIf-Range: x\r\n";
    let echo =
        format!("GET /echo HTTP/1.1\r\nHost: {HOST}\r\n{asks}{key}Connection: close\r\n\r\n");
    let (got, v) = b.run(&echo, true).await;
    assert_eq!(v, Ok(()), "{got}");
    let seen = b.seen().remove(0).to_ascii_lowercase();
    assert!(
        seen.contains("accept-encoding: identity\r\n")
            && !seen.contains("gzip")
            && !seen.contains("range"),
        "{seen}"
    );
    assert!(!got.contains(&SECRET[..MIN_PART]), "{got}");
    let rev: String = SECRET.chars().rev().collect();
    for path in ["/gz", "/quote"] {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{key}Connection: close\r\n\r\n");
        let (got, v) = b.run(&req, true).await;
        if path == "/gz" {
            assert_eq!(v, Err(Refusal::Encoded), "{got}");
            assert!(
                !got.contains(&rev[..MIN_PART]) && !got.contains("200"),
                "{got}"
            );
        } else {
            assert_eq!(v, Ok(()), "{got}");
            assert!(got.contains("invalid key ****"), "{got}");
            assert!(!got.contains(&SECRET[..MIN_PART]), "{got}");
        }
    }
}

/// The proxy's upstream is verified against its own roots: a host whose
/// root it lacks, and an impostor with a certificate from the sandbox CA
/// (which the sandbox's bundle holds), get no request and no secret.
#[tokio::test]
async fn unverified_upstreams_get_nothing() {
    for (trust, impostor) in [(false, false), (true, true)] {
        let b = bed(trust, impostor).await;
        let (_, v) = b
            .run(&req(HOST, &format!("x-api-key: {HOLDER}\r\n")), true)
            .await;
        assert_eq!(
            v,
            Err(Refusal::UpstreamCert),
            "trust {trust} impostor {impostor}"
        );
        assert!(b.seen().is_empty());
    }
}

/// A client that does not take the sandbox CA's certificate (it pins, or
/// brings its own roots) fails at the handshake, and the audit says why.
#[tokio::test]
async fn a_pinning_client_is_refused_with_a_reason() {
    let b = bed(true, false).await;
    let (_, v) = b
        .run(&req(HOST, &format!("x-api-key: {HOLDER}\r\n")), false)
        .await;
    assert_eq!(v, Err(Refusal::Pinned));
    assert!(Refusal::Pinned.reason().contains("pin"));
    assert_eq!(b.inj.rule(HOST), "[secrets] model");
    assert!(b.seen().is_empty());
}

/// Init's part: the handoff moves onto the tmpfs (and is gone from the
/// host directory), a CA is made, the bundle is the image's plus ours,
/// and a second start's new CA replaces the first in it. Off a tmpfs
/// the secrets are refused, and stay where they were.
#[test]
fn init_moves_the_secrets_onto_the_tmpfs_and_trusts_one_ca() {
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    let host = tempfile::tempdir().unwrap();
    let handoff = host.path().join(HANDOFF);
    let (bundle, ca) = (
        host.path().join("ca-certificates.crt"),
        host.path().join("ca.pem"),
    );
    std::fs::write(&bundle, "IMAGE ROOTS\n").unwrap();
    let b = vec![Binding {
        name: "m".into(),
        host: HOST.into(),
        header: "x-api-key".into(),
        placeholder: HOLDER.into(),
        value: SECRET.into(),
        login: false,
    }];
    let json = serde_json::to_vec(&b).unwrap();
    // Not a tmpfs (unless /tmp is one): refused, the handoff kept.
    if !on_tmpfs(host.path()) {
        std::fs::write(&handoff, &json).unwrap();
        let off = host.path().join("off");
        std::fs::create_dir(&off).unwrap();
        assert!(install(&handoff, &off, &bundle, &ca, false).is_err());
        assert!(handoff.exists() && !off.join(BINDINGS).exists());
    }
    let mut cas = Vec::new();
    let staged_root = handoff.with_file_name(TEST_ROOT_HANDOFF);
    for i in 0..2 {
        std::fs::write(&handoff, &json).unwrap();
        // The tests' upstream root comes with the first start's secrets
        // only: it moves onto the tmpfs, and the second start drops it.
        if i == 0 {
            std::fs::write(&staged_root, "TEST ROOT\n").unwrap();
        }
        let _ = std::fs::remove_file(shm.path().join(CA_CERT));
        install(&handoff, shm.path(), &bundle, &ca, false).unwrap();
        assert!(!handoff.exists() && !staged_root.exists());
        assert_eq!(shm.path().join(TEST_ROOT).exists(), i == 0);
        assert_eq!(std::fs::read(shm.path().join(BINDINGS)).unwrap(), json);
        let cert = std::fs::read_to_string(shm.path().join(CA_CERT)).unwrap();
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), cert);
        assert_eq!(
            std::fs::read_to_string(&bundle).unwrap(),
            format!("IMAGE ROOTS\n{cert}")
        );
        cas.push(cert);
    }
    assert_ne!(cas[0], cas[1]);
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(mode(&shm.path().join(CA_KEY)), 0o600);
    assert_eq!(mode(&shm.path().join(BINDINGS)), 0o600);
    assert!(
        Injector::load(shm.path(), &bundle)
            .unwrap()
            .unwrap()
            .binds(HOST)
    );
}

/// The masking as the relay does it, for every cut of an answer into two
/// reads: the value never goes down whole or in parts that join, nor any
/// run of [`MIN_PART`] of its bytes (a prefix, a middle part), the length
/// stays, and an answer without it goes down unchanged and unheld at a
/// line's end.
#[test]
fn a_value_cut_between_reads_is_masked_too() {
    let b = vec![Binding {
        name: "m".into(),
        host: HOST.into(),
        header: "x-api-key".into(),
        placeholder: HOLDER.into(),
        value: SECRET.into(),
        login: false,
    }];
    let runs = |out: &str| {
        SECRET
            .as_bytes()
            .windows(MIN_PART)
            .any(|w| out.as_bytes().windows(MIN_PART).any(|o| o == w))
    };
    let answer = format!(
        "HTTP/1.1 400 Bad\r\n\r\nheader x-api-key: {SECRET} too long; {SECRET}\n\
         prefix {} middle {} suffix {}\n",
        &SECRET[..MIN_PART + 2],
        &SECRET[3..4 + MIN_PART],
        &SECRET[SECRET.len() - MIN_PART..]
    );
    for cut in 0..=answer.len() {
        let mut down = Down::new(&b);
        let mut out = Vec::new();
        for piece in [&answer.as_bytes()[..cut], &answer.as_bytes()[cut..]] {
            out.append(&mut down.feed(piece, Cut::Read).unwrap());
        }
        out.append(&mut down.feed(&[], Cut::End).unwrap());
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.len(), answer.len(), "cut {cut}");
        assert!(!out.contains(&SECRET[..4]), "cut {cut}: {out}");
        assert!(!runs(&out), "cut {cut}: {out}");
    }
    let plain = b"data: {\"type\":\"ping\"}\n\n";
    assert_eq!(Down::new(&b).feed(plain, Cut::Read).unwrap(), plain);
    // A value's start held back goes down at the host's pause; a part
    // that goes on from it after is masked.
    let mut down = Down::new(&b);
    let first = format!("ok {}", &SECRET[..3]);
    assert_eq!(down.feed(first.as_bytes(), Cut::Read).unwrap(), b"ok ");
    assert_eq!(down.feed(&[], Cut::Pause).unwrap(), &SECRET.as_bytes()[..3]);
    let rest = down.feed(&SECRET.as_bytes()[3..], Cut::Read).unwrap();
    assert_eq!(rest, vec![b'*'; SECRET.len() - 3]);
}

/// A coded answer (compressed, or a transfer coding other than chunked)
/// is refused with its head, however the reads cut it; chunked and
/// identity go down, and so does a header line merely starting alike.
#[test]
fn a_coded_answer_is_refused_at_its_head() {
    let b: Vec<Binding> = Vec::new();
    for coded in [
        "Content-Encoding: gzip",
        "content-encoding:br",
        "Transfer-Encoding: gzip, chunked",
        "CONTENT-ENCODING: identity, zstd",
    ] {
        let answer = format!("HTTP/1.1 200 OK\r\n{coded}\r\nContent-Length: 3\r\n\r\nxyz");
        for cut in 0..=answer.len() {
            let mut down = Down::new(&b);
            let mut out = Vec::new();
            let r = [&answer.as_bytes()[..cut], &answer.as_bytes()[cut..]]
                .iter()
                .try_for_each(|p| {
                    // A pause never lets a coding line go unjudged.
                    for c in [Cut::Read, Cut::Pause] {
                        let d = if c == Cut::Read { *p } else { &[][..] };
                        out.append(&mut down.feed(d, c)?);
                    }
                    Ok::<(), String>(())
                });
            assert!(r.is_err(), "{coded} cut {cut}");
            let out = String::from_utf8_lossy(&out);
            assert!(!out.to_ascii_lowercase().contains("-encoding:"), "{out}");
        }
    }
    let ok = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
              Content-Encoding: identity\r\nContent-Encodings: x\r\n\r\n3\r\nxyz\r\n0\r\n\r\n";
    assert_eq!(
        Down::new(&b).feed(ok.as_bytes(), Cut::Read).unwrap(),
        ok.as_bytes()
    );
}

/// One request on an open agent connection, and its whole answer (the
/// stand-in answers with a length; the proxy's own 503 closes).
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(t: &mut S, r: &str) -> String {
    t.write_all(r.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let done = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let Some(i) = s.find("\r\n\r\n") else {
            return false;
        };
        let len: usize = s[..i]
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        b.len() >= i + 4 + len
    };
    while !done(&buf) {
        match tokio::time::timeout(Duration::from_secs(10), t.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// A login refreshed on the host mid-run: the next request on a
/// connection already open carries the new value, an echo of it comes
/// back masked, and a failed renewal answers 503 naming the entry,
/// sending nothing on. The update goes through the real control socket.
#[tokio::test]
async fn a_renewed_value_reaches_open_connections_and_a_failure_answers_503() {
    const NEW: &str = "fresh9e2aTOKENxyz7";
    let b = bed(true, false).await;
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = l.local_addr().unwrap();
    let (inj, up) = (b.inj.clone(), b.up);
    let proxy = tokio::spawn(async move {
        let (mut c, _) = l.accept().await.unwrap();
        let mut first = vec![0u8; 64];
        let n = c.read(&mut first).await.unwrap();
        first.truncate(n);
        inj.serve(c, first, HOST, up, Duration::from_secs(20), None)
            .await
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(b.ca.clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(at).await.unwrap();
    let mut t = tokio_rustls::TlsConnector::from(StdArc::new(cfg))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap();
    let holder = format!("x-api-key: {HOLDER}\r\n");
    assert!(ask(&mut t, &req(HOST, &holder)).await.contains("200 OK"));

    // Renewed as `sbx-fw secret` does it: over the socket, root only.
    let l = control_listener(dir.path()).unwrap();
    let inj = b.inj.clone();
    std::thread::spawn(move || serve_control(&l, &inj));
    let renew = |value: Option<&str>, failed: Option<&str>| Update {
        name: "model".into(),
        value: value.map(str::to_owned),
        failed: failed.map(str::to_owned),
    };
    assert!(
        send(
            dir.path(),
            &Update {
                name: "other".into(),
                ..renew(Some(NEW), None)
            }
        )
        .unwrap()
        .is_err()
    );
    assert!(
        send(dir.path(), &renew(Some("a\r\nb"), None))
            .unwrap()
            .is_err()
    );
    send(dir.path(), &renew(Some(NEW), None)).unwrap().unwrap();

    // The same connection: the new value goes up, its echo comes back masked.
    let got = ask(&mut t, &req(HOST, &holder)).await;
    assert!(got.contains("200 OK"), "{got}");
    let got = ask(
        &mut t,
        &format!("GET /echo HTTP/1.1\r\nHost: {HOST}\r\n{holder}\r\n"),
    )
    .await;
    assert!(!got.contains(NEW) && !got.contains(SECRET), "{got}");
    let seen = b.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[0].contains(SECRET), "{}", seen[0]);
    assert!(
        seen[1].contains(&format!("x-api-key: {NEW}\r\n")),
        "{}",
        seen[1]
    );

    // A failed renewal: answered here, 503, nothing sent on.
    send(dir.path(), &renew(None, Some("invalid_grant")))
        .unwrap()
        .unwrap();
    let got = ask(&mut t, &req(HOST, &holder)).await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(
        got.contains("[secrets] model") && got.contains("invalid_grant"),
        "{got}"
    );
    assert_eq!(b.seen().len(), 3);
    let v = tokio::time::timeout(Duration::from_secs(20), proxy)
        .await
        .unwrap()
        .unwrap();
    let Err((Refusal::Renewal, Some(why))) = v else {
        panic!("{v:?}")
    };
    assert!(why.contains("invalid_grant"), "{why}");
}
