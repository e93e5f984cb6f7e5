//! Credential injection (`[secrets]`, issue 44): for a host a secret is
//! bound to, and for it alone, the proxy ends the agent's TLS with a leaf
//! for that name signed by the sandbox's own CA, checks every request on
//! the connection (the Host is the bound host; heads and bodies followed
//! as on port 80), puts the secret where the placeholder is in the bound
//! header, and opens its own TLS to the real host, verified against its
//! own roots (the image's bundle without our CA). Everywhere else the
//! proxy stays a name-checked passthrough.
//!
//! The secrets and the CA's key are read once, as root, before the proxy
//! drops to its uid: the files are root's alone, on a tmpfs (never in an
//! image, a volume or a snapshot). A value renewed on the host (an OAuth
//! login refreshed there) comes in later over [`CONTROL`], a socket on that
//! tmpfs bound while root, so only root in the sandbox (the host's
//! `sbx-fw secret`, through the guest) reaches it.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sbx_core::IoContext;
use sbx_core::error::PathError;
use sbx_core::secrets::Binding;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::answers::Answers;
use super::http::Request;
use super::policy::Refusal;
use super::relay::Activity;
use super::requests::Requests;
use super::rules::Ruled;

pub use sbx_core::secrets::{HANDOFF, HANDOFF_DIR, SANDBOX_CA, TEST_ROOT_HANDOFF, TMPFS as DIR};
/// Another directory instead (the tests).
pub const DIR_ENV: &str = "SBX_FW_SECRETS_DIR";
/// Extra roots the proxy trusts upstream (the tests' stand-in servers),
/// on the tmpfs: only a file sbx-run staged from the host's environment
/// gets there, never a variable of the sandbox's (the agent's) own.
pub const TEST_ROOT: &str = "test-root.pem";
/// The image's trust bundle: the proxy's roots (our CA left out), and
/// where init adds our CA for the sandbox's clients.
pub const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
pub const BINDINGS: &str = "secrets.json";
/// The running proxy's socket for renewed values ([`Update`]).
pub const CONTROL: &str = "control.sock";

pub const CA_KEY: &str = "ca.key";
pub const CA_CERT: &str = "ca.crt";
/// The CA's name: fixed, so its issuer can be rebuilt from the key alone.
const CA_NAME: &str = "sbx sandbox proxy CA";

/// The directory in force.
pub fn dir() -> PathBuf {
    std::env::var_os(DIR_ENV).map_or_else(|| PathBuf::from(DIR), PathBuf::from)
}

/// Another trust bundle and sandbox-CA path instead of the image's (the
/// tests, which run on a host whose own bundle must stay as it is). Like
/// [`DIR_ENV`], only root's environment at init sets them: sbx-run passes
/// no `SBX_FW_*` variable into the container.
pub const BUNDLE_ENV: &str = "SBX_FW_CA_BUNDLE";
pub const SANDBOX_CA_ENV: &str = "SBX_FW_SANDBOX_CA";

/// The trust bundle in force.
pub fn bundle() -> PathBuf {
    std::env::var_os(BUNDLE_ENV).map_or_else(|| PathBuf::from(BUNDLE), PathBuf::from)
}

/// Where the sandbox CA's certificate goes.
pub fn sandbox_ca() -> PathBuf {
    std::env::var_os(SANDBOX_CA_ENV).map_or_else(|| PathBuf::from(SANDBOX_CA), PathBuf::from)
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

/// A fresh CA for this sandbox: its key and certificate in PEM.
pub fn make_ca() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let cert = ca_params().self_signed(&key)?;
    Ok((key.serialize_pem(), cert.pem()))
}

/// At init (root, proxy mode): take the secrets sbx-run left in the host
/// directory onto the tmpfs, make the sandbox's CA when there is none,
/// and put its certificate where the sandbox's clients look (the system
/// bundle, rebuilt from the image's own each time, and [`SANDBOX_CA`]).
/// Without secrets nothing changes, unless `need_ca` (a host has
/// `[network.rules]`: its TLS is ended with the same CA). The proxy reads
/// them at its start.
pub fn install(
    handoff: &Path,
    dir: &Path,
    bundle: &Path,
    sandbox_ca: &Path,
    need_ca: bool,
) -> Result<(), PathError> {
    use std::os::unix::fs::OpenOptionsExt;
    let write = |p: &Path, data: &[u8], mode: u32| -> Result<(), PathError> {
        let tmp = p.with_extension("sbx-tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .with_path(&tmp)?;
        std::io::Write::write_all(&mut f, data).with_path(&tmp)?;
        std::fs::rename(&tmp, p).with_path(p)
    };
    match std::fs::read(handoff) {
        Ok(text) => {
            // Checked before it replaces anything: a bad file stops init.
            serde_json::from_slice::<Vec<Binding>>(&text)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
                .with_path(handoff)?;
            // The tmpfs must be there: the values go nowhere else.
            if !on_tmpfs(dir) {
                return Err(io::Error::other(
                    "not a tmpfs: the secrets would be written to disk",
                ))
                .with_path(dir);
            }
            write(&dir.join(BINDINGS), &text, 0o600)?;
            std::fs::remove_file(handoff).with_path(handoff)?;
            // A start that brings secrets and no test root: none stays.
            if !handoff.with_file_name(TEST_ROOT_HANDOFF).exists() {
                let _ = std::fs::remove_file(dir.join(TEST_ROOT));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_path(handoff),
    }
    // The tests' upstream root, staged by sbx-run from the host alone,
    // with secrets or for [network.rules] (`need_ca`).
    let test_root = handoff.with_file_name(TEST_ROOT_HANDOFF);
    match std::fs::read(&test_root) {
        Ok(pem) => {
            if !on_tmpfs(dir) {
                return Err(io::Error::other("not a tmpfs")).with_path(dir);
            }
            write(&dir.join(TEST_ROOT), &pem, 0o600)?;
            std::fs::remove_file(&test_root).with_path(&test_root)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_path(&test_root),
    }
    if !dir.join(BINDINGS).exists() {
        if !need_ca {
            return Ok(());
        }
        // The CA's key goes nowhere but the tmpfs either.
        if !on_tmpfs(dir) {
            return Err(io::Error::other(
                "not a tmpfs: the sandbox CA's key would be written to disk",
            ))
            .with_path(dir);
        }
    }
    let cert_path = dir.join(CA_CERT);
    if !cert_path.exists() {
        let (key, cert) = make_ca().map_err(io::Error::other).with_path(&cert_path)?;
        write(&dir.join(CA_KEY), key.as_bytes(), 0o600)?;
        write(&cert_path, cert.as_bytes(), 0o644)?;
    }
    let cert = std::fs::read(&cert_path).with_path(&cert_path)?;
    write(sandbox_ca, &cert, 0o644)?;
    // The image's bundle is kept aside once; ours is it plus our CA, so
    // a CA of an earlier start never stays trusted.
    let orig = bundle.with_extension("crt.sbx-orig");
    if !orig.exists() {
        std::fs::copy(bundle, &orig).with_path(&orig)?;
    }
    let mut all = std::fs::read(&orig).with_path(&orig)?;
    all.extend_from_slice(&cert);
    write(bundle, &all, 0o644)
}

fn on_tmpfs(p: &Path) -> bool {
    use nix::sys::statfs::{TMPFS_MAGIC, statfs};
    statfs(p).is_ok_and(|s| s.filesystem_type() == TMPFS_MAGIC)
}

/// A renewed value for one `[secrets]` entry, or why it could not be
/// renewed (its requests are then answered with that, not sent on with a
/// value the host no longer takes).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Update {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub failed: Option<String>,
}

/// What the proxy injects: loaded at its start, values renewed by
/// [`Injector::update`] (the hosts never change).
pub struct Injector {
    by_host: RwLock<HashMap<String, Arc<[Binding]>>>,
    /// Entries whose renewal failed, by name: why.
    failed: RwLock<HashMap<String, String>>,
    /// Bumped at every update: a connection's answers are masked for the
    /// new values too.
    generation: AtomicU64,
    issuer: Issuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field(
                "hosts",
                &self
                    .by_host
                    .read()
                    .map(|h| h.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default(),
            )
            .finish_non_exhaustive()
    }
}

fn bad(p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display()))
}

impl Injector {
    /// The injector for `dir`, None when it holds no secrets. `bundle` is
    /// read for the upstream roots; certificates equal to our CA's are
    /// left out of them.
    pub fn load(dir: &Path, bundle: &Path) -> io::Result<Option<Self>> {
        let path = dir.join(BINDINGS);
        // No secrets but a CA: hosts with [network.rules] use it alone.
        let bindings: Vec<Binding> = match std::fs::read(&path) {
            Ok(t) => serde_json::from_slice(&t).map_err(|e| bad(&path, e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(bad(&path, e)),
        };
        if bindings.is_empty() && !dir.join(CA_KEY).exists() {
            return Ok(None);
        }
        let key_path = dir.join(CA_KEY);
        let key_pem = std::fs::read_to_string(&key_path).map_err(|e| bad(&key_path, e))?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| bad(&key_path, e))?;
        let cert_path = dir.join(CA_CERT);
        let ca = CertificateDer::from_pem_file(&cert_path).map_err(|e| bad(&cert_path, e))?;
        let mut roots = rustls::RootCertStore::empty();
        let mut extra = vec![bundle.to_owned()];
        if dir.join(TEST_ROOT).exists() {
            extra.push(dir.join(TEST_ROOT));
        }
        for f in extra {
            let data = std::fs::read(&f).map_err(|e| bad(&f, e))?;
            for c in CertificateDer::pem_slice_iter(&data).flatten() {
                // The sandbox's bundle holds our CA: never trusted upstream.
                if c != ca {
                    let _ = roots.add(c);
                }
            }
        }
        let mut upstream = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut grouped: HashMap<String, Vec<Binding>> = HashMap::new();
        for b in bindings {
            grouped.entry(b.host.clone()).or_default().push(b);
        }
        let by_host = grouped.into_iter().map(|(h, v)| (h, v.into())).collect();
        Ok(Some(Self {
            by_host: RwLock::new(by_host),
            failed: RwLock::new(HashMap::new()),
            generation: AtomicU64::new(0),
            issuer: Issuer::new(ca_params(), key),
            leaves: Mutex::new(HashMap::new()),
            upstream: Arc::new(upstream),
        }))
    }

    /// Whether a secret is bound to `host`.
    pub fn binds(&self, host: &str) -> bool {
        self.by_host
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(host)
    }

    /// The bindings of `host` in force now.
    fn current(&self, host: &str) -> Arc<[Binding]> {
        self.by_host
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(host)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()))
    }

    /// Why one of `bindings` cannot be used now, if one cannot.
    fn failure(&self, bindings: &[Binding]) -> Option<String> {
        let failed = self.failed.read().unwrap_or_else(|e| e.into_inner());
        bindings.iter().find_map(|b| {
            failed
                .get(&b.name)
                .map(|why| format!("[secrets] {}: {why}", b.name))
        })
    }

    /// Take a renewed value (or a failed renewal) for the entry named in
    /// `u`. Requests after it carry the new value, on connections already
    /// open too; an unknown name or a value that cannot be a header value
    /// changes nothing.
    pub fn update(&self, u: &Update) -> Result<(), String> {
        let known = self
            .by_host
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|bs| bs.iter().any(|b| b.name == u.name));
        if !known {
            return Err(format!("no [secrets] entry {:?} in this sandbox", u.name));
        }
        match (&u.value, &u.failed) {
            (Some(v), None) => {
                if v.is_empty() || v.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                    return Err("the value is empty or holds control characters".into());
                }
                let mut hosts = self.by_host.write().unwrap_or_else(|e| e.into_inner());
                for bs in hosts.values_mut() {
                    if bs.iter().any(|b| b.name == u.name) {
                        let mut next = bs.to_vec();
                        for b in next.iter_mut().filter(|b| b.name == u.name) {
                            b.value.clone_from(v);
                        }
                        *bs = next.into();
                    }
                }
                // Under the lock: whoever sees the new value sees the
                // new generation, so its echo is masked.
                self.generation.fetch_add(1, Ordering::AcqRel);
                drop(hosts);
                self.failed
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&u.name);
            }
            (None, Some(why)) => {
                let why = sbx_core::sanitize::field(why).into_owned();
                self.failed
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(u.name.clone(), why);
            }
            _ => return Err("give a value or a failure, one of them".into()),
        }
        Ok(())
    }

    /// The `[secrets]` entries bound to `host`, as the config names them
    /// (`[secrets] model`): what a refusal on its connection points at.
    pub fn rule(&self, host: &str) -> String {
        let bs = self.current(host);
        let names: Vec<&str> = bs.iter().map(|b| b.name.as_str()).collect();
        format!("[secrets] {}", names.join(", "))
    }

    /// The TLS server side for `host`: a leaf for it, made once.
    fn server(&self, host: &str) -> io::Result<Arc<rustls::ServerConfig>> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = leaves.get(host) {
            return Ok(c.clone());
        }
        let key = KeyPair::generate().map_err(io::Error::other)?;
        let params = CertificateParams::new(vec![host.to_owned()]).map_err(io::Error::other)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(io::Error::other)?;
        let key_der = PrivateKeyDer::try_from(key.serialize_der()).map_err(io::Error::other)?;
        let mut c = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key_der)
            .map_err(io::Error::other)?;
        // HTTP/1.1 only: its requests we follow one by one; a client
        // offering h2 falls back to it.
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        let c = Arc::new(c);
        leaves.insert(host.to_owned(), c.clone());
        Ok(c)
    }

    /// Serve one connection the agent opened to `host` (judged already):
    /// `first` is what was read of its ClientHello. `rules`: the host's
    /// `[network.rules]`, each request judged by them first (a refusal
    /// answers 403). Returns the refusal to audit, if any, with what
    /// refused it when that was a rule.
    pub async fn serve(
        &self,
        c: TcpStream,
        first: Vec<u8>,
        host: &str,
        dst: SocketAddr,
        idle: Duration,
        rules: Option<Ruled<'_>>,
    ) -> Result<(), (Refusal, Option<String>)> {
        if self.current(host).is_empty() && rules.is_none() {
            return Err((Refusal::Injection, None));
        }
        self.relay(c, first, host, dst, idle, rules)
            .await
            .map_err(|r| (r, None))
            .and_then(|denied| match denied {
                Some(Denied::Rule(why)) => Err((Refusal::Rule, Some(why))),
                Some(Denied::Renewal(why)) => Err((Refusal::Renewal, Some(why))),
                None => Ok(()),
            })
    }

    /// [`Self::serve`]'s work: Ok(Some(why)) when a rule refused, or a
    /// secret's renewal had failed.
    async fn relay(
        &self,
        c: TcpStream,
        first: Vec<u8>,
        host: &str,
        dst: SocketAddr,
        idle: Duration,
        rules: Option<Ruled<'_>>,
    ) -> Result<Option<Denied>, Refusal> {
        let server = self.server(host).map_err(|_| Refusal::Injection)?;
        let client = tokio::time::timeout(
            super::HELLO_TIMEOUT,
            tokio_rustls::TlsAcceptor::from(server).accept(Rewind {
                first,
                at: 0,
                inner: c,
            }),
        )
        .await
        .map_err(|_| Refusal::Malformed)?
        .map_err(|_| Refusal::Pinned)?;
        let up = super::conn::dial(dst).await.ok_or(Refusal::Upstream)?;
        let name = ServerName::try_from(host.to_owned()).map_err(|_| Refusal::Injection)?;
        let up = tokio::time::timeout(
            super::HELLO_TIMEOUT,
            tokio_rustls::TlsConnector::from(self.upstream.clone()).connect(name, up),
        )
        .await
        .map_err(|_| Refusal::Upstream)?
        .map_err(|_| Refusal::UpstreamCert)?;
        let (mut cr, mut cw) = tokio::io::split(client);
        let (mut ur, mut uw) = tokio::io::split(up);
        let act = Activity::new();
        let refused = Mutex::new(None);
        let denied: Mutex<Option<Denied>> = Mutex::new(None);
        // Refused (a rule, a failed renewal): the requests before it went,
        // and their answers come down before the refusal's answer (`stop`
        // wakes the downward side).
        let answers = Mutex::new(Answers::default());
        let stopping = AtomicBool::new(false);
        let stop = tokio::sync::Notify::new();
        let upward = async {
            let mut reqs = Requests::default();
            let mut chunk = vec![0u8; 16 * 1024];
            let mut out = Vec::new();
            loop {
                let n = cr.read(&mut chunk).await?;
                act.touch();
                if n == 0 {
                    return uw.shutdown().await;
                }
                let mut heads = Vec::new();
                let r = reqs.feed_with(&chunk[..n], &mut out, &mut heads, &mut |r, head| {
                    if let Some(rs) = rules
                        && let Err(why) = rs.check(r)
                    {
                        *denied.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(Denied::Rule(why.clone()));
                        return Err(why);
                    }
                    // Each request takes the values in force as it goes:
                    // a login renewed on the host reaches connections the
                    // client keeps open.
                    let bindings = self.current(host);
                    if let Some(why) = self.failure(&bindings) {
                        *denied.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(Denied::Renewal(why.clone()));
                        return Err(why);
                    }
                    inject(r, head, host, &bindings)
                });
                let ruled_out = denied.lock().unwrap_or_else(|e| e.into_inner()).is_some();
                if r.is_err() && !ruled_out {
                    *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(Refusal::Injection);
                    return Err(io::Error::other("refused"));
                }
                {
                    let mut a = answers.lock().unwrap_or_else(|e| e.into_inner());
                    heads.iter().for_each(|h| a.asked(&h.method));
                }
                uw.write_all(&out).await?;
                out.clear();
                if ruled_out {
                    stopping.store(true, Ordering::Release);
                    stop.notify_one();
                    return Ok(());
                }
            }
        };
        let downward = async {
            let mut chunk = vec![0u8; 16 * 1024];
            let mut seen = self.generation.load(Ordering::Acquire);
            let mut down = Down::new(&self.current(host));
            let mut told = false;
            // A renewed value is masked from its renewal on, the old ones
            // too: looked at after each read, before what was read goes.
            let mut renewed = |down: &mut Down| {
                let now = self.generation.load(Ordering::Acquire);
                if now != seen {
                    seen = now;
                    down.add(&self.current(host));
                }
            };
            loop {
                let owed = answers.lock().unwrap_or_else(|e| e.into_inner()).owed();
                if stopping.load(Ordering::Acquire) && owed == Some(0) {
                    let Ok(out) = down.feed(&[], Cut::End) else {
                        *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(Refusal::Encoded);
                        return Err(io::Error::other("refused"));
                    };
                    cw.write_all(&out).await?;
                    return Ok(());
                }
                // A value's start held back goes down masked as far as it
                // is known once the host pauses: an answer ending alike
                // (an "s") is not kept waiting for more.
                let held = !down.held.is_empty();
                let read = tokio::select! {
                    r = async {
                        if held {
                            tokio::time::timeout(HOLD, ur.read(&mut chunk)).await
                        } else {
                            Ok(ur.read(&mut chunk).await)
                        }
                    } => r,
                    () = stop.notified() => continue,
                };
                renewed(&mut down);
                let Ok(n) = read else {
                    let Ok(out) = down.feed(&[], Cut::Pause) else {
                        *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(Refusal::Encoded);
                        return Err(io::Error::other("refused"));
                    };
                    cw.write_all(&out).await?;
                    continue;
                };
                let n = n?;
                act.touch();
                answers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .feed(&chunk[..n]);
                // A 401 from a host a secret is bound to: the host's
                // sbx-run follows the audit and renews a login at once.
                if !told && unauthorized(&chunk[..n]) {
                    told = true;
                    let why = format!("{}: the host answered 401", self.rule(host));
                    sbx_core::audit::append(
                        &sbx_core::audit::Record::new(
                            "sbx-fw",
                            "unauthorized",
                            host,
                            sbx_core::audit::Outcome::Allowed,
                            "proxy",
                        )
                        .reason(&why),
                    );
                }
                let cut = if n == 0 { Cut::End } else { Cut::Read };
                let Ok(out) = down.feed(&chunk[..n], cut) else {
                    *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(Refusal::Encoded);
                    return Err(io::Error::other("refused"));
                };
                cw.write_all(&out).await?;
                if n == 0 {
                    // The 403 still goes after it.
                    if stopping.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    return cw.shutdown().await;
                }
            }
        };
        tokio::select! {
            _ = async { tokio::try_join!(upward, downward) } => {}
            () = act.idle(idle) => {}
        }
        if let Some(d) = denied.into_inner().unwrap_or_else(|e| e.into_inner()) {
            // Answered by us, and the connection ends: nothing after the
            // refused head is read as a request.
            let answer = match (&d, rules) {
                (Denied::Rule(why), Some(rs)) => Some(rs.forbidden(why)),
                (Denied::Renewal(why), _) => Some(unavailable(why)),
                (Denied::Rule(_), None) => None,
            };
            if let Some(answer) = answer {
                let _ = cw.write_all(&answer).await;
                let _ = cw.shutdown().await;
                // The body the client is still sending is read and
                // dropped for a while: closing on unread bytes resets the
                // connection, and the client may lose the answer.
                let drain = async {
                    let mut sink = vec![0u8; 16 * 1024];
                    let mut left: usize = 8 << 20;
                    while left > 0 {
                        match cr.read(&mut sink).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => left = left.saturating_sub(n),
                        }
                    }
                };
                let _ = tokio::time::timeout(super::HELLO_TIMEOUT, drain).await;
            }
            return Ok(Some(d));
        }
        match refused.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(r) => Err(r),
            None => Ok(None),
        }
    }
}

/// Whether a read holds the status line of a 401 answer.
fn unauthorized(buf: &[u8]) -> bool {
    const LINE: &[u8] = b"HTTP/1.1 401 ";
    buf.starts_with(LINE)
        || buf
            .windows(LINE.len() + 1)
            .any(|w| w[0] == b'\n' && &w[1..] == LINE)
}

/// Why the proxy answered a request itself.
enum Denied {
    /// `[network.rules]` let it through to nowhere.
    Rule(String),
    /// A bound secret's renewal on the host failed.
    Renewal(String),
}

/// The answer to a request whose secret could not be renewed: a 503 the
/// client shows, naming the entry and the cause (never a 401, which a
/// CLI would take as its own login's fault and try to refresh).
fn unavailable(why: &str) -> Vec<u8> {
    let body = format!(
        "sbx: {why}; the request was not sent (see `sbx-run log --blocked-only` on the host)\n"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The ring provider: the build's one (scripts/one-of-each).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The shortest run of a secret's bytes masked wherever it comes back
/// (the whole value when it is shorter). A server that quotes a header
/// cut at a fixed length, or its last characters, gives back a prefix or
/// a suffix of the value, whatever the agent pads it with: at most
/// `MIN_PART - 1` bytes of each end, where an API key's first 13 are
/// public anyway. Eight bytes of a random value match honest data about
/// once in 2^48 windows. Offsets the agent picks (`Range`) are stripped
/// from its requests, so parts cannot be collected and joined.
pub const MIN_PART: usize = 8;

/// The longest response header line (a coding) waited for.
const MAX_LINE: usize = 1024;
/// The host's bytes already sent that the next read is matched after:
/// `MIN_PART - 1` of the value's, each escaped at most as `\u00XX`.
const CTX: usize = 6 * (MIN_PART - 1);
/// How long a held start of a value waits for the rest.
const HOLD: Duration = Duration::from_millis(100);

/// Why [`Down::feed`] is called: a read, the host's pause with bytes
/// held, its end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    Read,
    Pause,
    End,
}

/// The answers on one injecting connection on their way down: every run
/// of [`MIN_PART`] bytes of a secret is overwritten with as many `*`
/// (the length kept, so `Content-Length` and chunk sizes still hold),
/// however the reads cut it (a whole value's start is held for the next
/// read; a run that goes on from bytes already sent is masked from there
/// on, so at most `MIN_PART - 1` bytes pass at a cut), also when the
/// host echoes it JSON- or URL-escaped or base64-encoded; a coding the proxy cannot read through
/// (`Content-Encoding: gzip`, a `Transfer-Encoding` other than chunked)
/// is refused before its head goes down, since a compressed echo hides
/// the value from the scan.
struct Down {
    /// Each secret's windows as numbers (at most 8 bytes), sorted, and
    /// the window's length and the value itself; its base64 forms too.
    secrets: Vec<(usize, Vec<u64>, Vec<u8>)>,
    /// Bytes read but not sent yet (the start of a value or of a header
    /// line that may go on in the next read), and which are masked.
    held: Vec<u8>,
    star: Vec<bool>,
    /// The last two bytes sent: whether `held` starts a line.
    sent: [u8; 2],
    /// The last bytes sent as the host sent them (`MIN_PART - 1`): a
    /// run of a value that goes on from them is still found.
    ctx: Vec<u8>,
}

fn word(w: &[u8]) -> u64 {
    w.iter().fold(0, |a, &b| (a << 8) | u64::from(b))
}

impl Down {
    fn new(bindings: &[Binding]) -> Self {
        let mut d = Self {
            secrets: Vec::new(),
            held: Vec::new(),
            star: Vec::new(),
            sent: [0; 2],
            ctx: Vec::new(),
        };
        d.add(bindings);
        d
    }

    /// Mask `bindings`' values too (those not masked already), and the
    /// base64 of an echo of each.
    fn add(&mut self, bindings: &[Binding]) {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        for v in bindings.iter().map(|b| b.value.as_bytes()) {
            if v.is_empty() {
                continue;
            }
            let mut values = vec![v.to_vec()];
            // Base64 of an echo, wherever the value starts in what was
            // encoded: its three alignments, in both alphabets (a44).
            for s in 0..3.min(v.len()) {
                let part = &v[s..];
                let part = &part[..part.len() - part.len() % 3];
                for e in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
                    let t = e.encode(part).into_bytes();
                    if t.len() >= MIN_PART && !values.contains(&t) {
                        values.push(t);
                    }
                }
            }
            for v in values {
                if self.secrets.iter().any(|(_, _, s)| *s == v) {
                    continue;
                }
                let k = MIN_PART.min(v.len());
                let mut ws: Vec<u64> = v.windows(k).map(word).collect();
                ws.sort_unstable();
                ws.dedup();
                self.secrets.push((k, ws, v));
            }
        }
    }

    /// Take the next read and return what may go down now; an error
    /// when the answer is coded. Held back: a tail that may be the start
    /// of a value (until the next read, or a pause), a header line not
    /// ended that may name a coding.
    fn feed(&mut self, data: &[u8], cut: Cut) -> Result<Vec<u8>, String> {
        self.held.extend_from_slice(data);
        self.star.resize(self.held.len(), false);
        let c = self.ctx.len();
        let mut scan = std::mem::take(&mut self.ctx);
        scan.extend_from_slice(&self.held);
        let mut keep = 0;
        // The scan with JSON and URL escapes decoded, each byte's span in
        // `scan`: a host that echoes the value escaped (`\/`, `\u002b`,
        // `%2F`) cuts its raw runs short (a44).
        let (dec, span) = unescape(&scan);
        let star = &mut self.star;
        let mut mark = |from: usize, to: usize| {
            // Bytes before `c` went down already.
            if to > c {
                star[from.max(c) - c..to - c].fill(true);
            }
        };
        for (k, ws, v) in &self.secrets {
            let k = *k;
            for i in 0..scan.len().saturating_sub(k - 1) {
                if ws.binary_search(&word(&scan[i..i + k])).is_ok() {
                    mark(i, i + k);
                }
            }
            if dec.len() < scan.len() {
                for i in 0..dec.len().saturating_sub(k - 1) {
                    if ws.binary_search(&word(&dec[i..i + k])).is_ok() {
                        mark(span[i].0, span[i + k - 1].1);
                    }
                }
            }
            let buf = &scan[c..];
            let tail = (1..v.len().min(buf.len() + 1))
                .rev()
                .find(|&t| buf.ends_with(&v[..t]))
                .unwrap_or(0);
            keep = keep.max(tail);
        }
        let mut lines = self.sent.to_vec();
        lines.extend_from_slice(&self.held);
        let line = coded(&lines)?.saturating_sub(2);
        let n = match cut {
            Cut::End => self.held.len(),
            Cut::Pause => line,
            Cut::Read => line.min(self.held.len() - keep),
        };
        let sent: Vec<u8> = self.held.drain(..n).collect();
        let mut out = sent.clone();
        for (b, s) in out.iter_mut().zip(self.star.drain(..n)) {
            if s {
                *b = b'*';
            }
        }
        // What the next read is matched after: the host's bytes.
        scan.truncate(c);
        scan.extend_from_slice(&sent);
        let from = scan.len().saturating_sub(CTX);
        self.ctx = scan.split_off(from);
        for &b in &sent {
            self.sent = [self.sent[1], b];
        }
        Ok(out)
    }
}

/// How much of `buf` (the last two bytes sent, then what is held) the
/// header lines in it let go down: up to a line not ended yet that may
/// name a coding. An error names a coding the
/// proxy cannot read through. Lines are found anywhere (heads are not
/// told from bodies here): a body holding such a line (an echo of the
/// agent's own header) is refused too, failing closed.
fn coded(buf: &[u8]) -> Result<usize, String> {
    const NAMES: [&[u8]; 2] = [b"content-encoding:", b"transfer-encoding:"];
    let may_name = |rest: &[u8]| {
        NAMES.iter().any(|n| {
            let m = rest.len().min(n.len());
            rest[..m].eq_ignore_ascii_case(&n[..m])
        })
    };
    let mut at = 0;
    while let Some(p) = find(&buf[at..], b"\r\n") {
        let s = at + p + 2;
        let Some(e) = find(&buf[s..], b"\r\n") else {
            if may_name(&buf[s..]) {
                if buf.len() - s > MAX_LINE {
                    return Err("a coding header line too long".into());
                }
                return Ok(s);
            }
            break;
        };
        judge(&buf[s..s + e])?;
        at = s;
    }
    Ok(buf.len())
}

/// `buf` with the escapes a host may put on an echoed value decoded
/// (JSON's `\/` and ASCII `\uXXXX`, URL `%XX`), and for each byte out
/// the span of `buf` it came from.
fn unescape(buf: &[u8]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let hex = |h: &[u8]| {
        std::str::from_utf8(h)
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let mut out = Vec::with_capacity(buf.len());
    let mut span = Vec::with_capacity(buf.len());
    let mut i = 0;
    while i < buf.len() {
        let (b, n) = match (buf[i], buf.get(i + 1)) {
            (b'\\', Some(b'/')) => (b'/', 2),
            (b'\\', Some(b'u')) => match buf.get(i + 2..i + 6).and_then(hex) {
                Some(c) if c < 0x80 => (c as u8, 6),
                _ => (buf[i], 1),
            },
            (b'%', _) => match buf.get(i + 1..i + 3).and_then(hex) {
                Some(c) => (c as u8, 3),
                None => (buf[i], 1),
            },
            (b, _) => (b, 1),
        };
        out.push(b);
        span.push((i, i + n));
        i += n;
    }
    (out, span)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One header line: a content coding other than identity, a transfer
/// coding other than chunked, is refused.
fn judge(line: &[u8]) -> Result<(), String> {
    let Some(c) = line.iter().position(|&b| b == b':') else {
        return Ok(());
    };
    let name = &line[..c];
    let value = String::from_utf8_lossy(&line[c + 1..]).to_ascii_lowercase();
    let ok: &[&str] = if name.eq_ignore_ascii_case(b"content-encoding") {
        &["identity", ""]
    } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
        &["chunked", "identity"]
    } else {
        return Ok(());
    };
    match value.split(',').map(str::trim).find(|v| !ok.contains(v)) {
        Some(v) => Err(format!("an answer coded {v:?}")),
        None => Ok(()),
    }
}

/// Request headers the proxy drops on an injecting connection.
const STRIPPED: [&str; 4] = ["accept-encoding", "te", "range", "if-range"];

/// Check one request head on an injecting connection and put the secrets
/// in: its Host must be the bound host (HTTP/1.1 requires one), no
/// CONNECT, no TRACE (answered with the request, the secret in it), at
/// most one of each bound header, and the placeholder is replaced in that
/// header's value only.
fn inject(r: &Request, head: &mut Vec<u8>, host: &str, bindings: &[Binding]) -> Result<(), String> {
    if r.method == "CONNECT" || r.host.as_deref() != Some(host) {
        return Err(format!("request for {:?} on {host}'s connection", r.host));
    }
    // TRACE echoes the request (Apache answers it by default), TRACK is
    // IIS's; the method is case-sensitive, but a server may not be.
    if ["TRACE", "TRACK"]
        .iter()
        .any(|m| r.method.eq_ignore_ascii_case(m))
    {
        return Err(format!("{} would echo the secret", r.method));
    }
    // A login's token must not buy a key the agent can read (a44).
    if bindings.iter().any(|b| b.login)
        && let Some(why) = sbx_core::secrets::login_refuses(&r.target)
    {
        return Err(why);
    }
    let text = std::str::from_utf8(head).map_err(|_| "head is not UTF-8".to_owned())?;
    let mut seen = vec![false; bindings.len()];
    let mut out = String::with_capacity(text.len() + 64);
    for (i, line) in text.split_inclusive("\r\n").enumerate() {
        if line == "\r\n" {
            // Answers the proxy can scan for the secret: uncompressed.
            out.push_str("Accept-Encoding: identity\r\n\r\n");
            continue;
        }
        let Some((k, v)) = line.split_once(':').filter(|_| i > 0) else {
            out.push_str(line);
            continue;
        };
        // Codings the agent asks for, and offsets it picks: a compressed
        // echo, or parts of one joined, would hide the value from the
        // scan. A server may ignore Range, so dropping it is an answer.
        if STRIPPED.iter().any(|h| k.eq_ignore_ascii_case(h)) {
            continue;
        }
        match bindings
            .iter()
            .position(|b| k.eq_ignore_ascii_case(&b.header))
        {
            Some(j) => {
                if std::mem::replace(&mut seen[j], true) {
                    return Err(format!("two {} headers", bindings[j].header));
                }
                let b = &bindings[j];
                out.push_str(k);
                out.push(':');
                out.push_str(&v.replace(&b.placeholder, &b.value));
            }
            None => out.push_str(line),
        }
    }
    *head = out.into_bytes();
    Ok(())
}

/// The accepted socket with the bytes already read from it (the
/// ClientHello, read to judge its name) put back in front.
struct Rewind {
    first: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.first.len() {
            let n = buf.remaining().min(self.first.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.first[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

mod control;
pub use control::{control_listener, send, serve_control, store};

#[cfg(test)]
mod tests;
