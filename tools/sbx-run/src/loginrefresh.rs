//! Claude Code's OAuth login (`[secrets]` `claude-login:`) kept fresh from
//! the host: the sandbox holds placeholders for both tokens and never
//! refreshes, so the host does it, as the CLI would (its endpoint, client
//! and body, read from its bundle), before the access token ends: at start,
//! and while `sbx-run agent` or `shell` runs. The new login is written to
//! the user's file (atomically, 0600, the CLI's own format) and the new
//! access token handed to the running proxy (`sbx-fw secret NAME` as the
//! sandbox's root over the guest socket, the value on its stdin). A failed
//! refresh is one line on stderr, an audit record, and the proxy answers
//! the entry's requests 503 naming it: nothing goes out with a dead token.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::config::SecretFrom;
use sbx_core::output;
use sbx_core::secrets::{self, LoginTokens};

use crate::workspace::Workspace;

/// The token endpoint instead of Claude Code's (the tests' stand-in); the
/// host's environment only, never the workspace's config.
pub const TOKEN_URL_ENV: &str = "SBX_LOGIN_TOKEN_URL";
/// How often the login file is looked at.
const EVERY: Duration = Duration::from_secs(5);
/// After a failed refresh, the next try.
const RETRY: Duration = Duration::from_secs(30);
/// A 401 from the bound host renews the login at most this often.
const ON_401_EVERY: Duration = Duration::from_secs(60);
/// The largest answer read from the token endpoint.
const ANSWER_MAX: u64 = 64 * 1024;

/// The `claude-login:` entries of the config: name and file.
fn logins(ws: &Workspace) -> Vec<(String, PathBuf)> {
    ws.loaded
        .config
        .secrets
        .iter()
        .filter_map(|(n, s)| match &s.from {
            SecretFrom::ClaudeLogin(p) => Some((n.clone(), p.clone())),
            _ => None,
        })
        .collect()
}

/// At start: each login with under [`secrets::LOGIN_MARGIN_MS`] left is
/// refreshed first. A failure is the start's error, naming the entry.
pub fn at_start(ws: &Workspace) -> Result<(), String> {
    for (name, p) in logins(ws) {
        let Ok(text) = secrets::read_login(&p) else {
            continue; // resolve() names what is wrong with the file
        };
        let Ok(t) = secrets::login_tokens(&text) else {
            continue;
        };
        if t.expires_at < secrets::now_ms().saturating_add(secrets::LOGIN_MARGIN_MS) {
            refresh(ws, &p, secrets::LOGIN_MARGIN_MS).map_err(|why| {
                record(ws, &name, Outcome::Blocked, &why);
                format!("[secrets] {name}: refreshing the login on the host failed: {why}")
            })?;
            record(
                ws,
                &name,
                Outcome::Allowed,
                "refreshed on the host at start",
            );
        }
    }
    Ok(())
}

/// Refresh the login at `p` unless, read under the lock, it has more than
/// `margin` ms left (another sbx-run, or the host's CLI, did it first).
/// Returns the login in force.
fn refresh(ws: &Workspace, p: &Path, margin: u64) -> Result<LoginTokens, String> {
    let lock_path = crate::spec::host_dir(&ws.names.container).join("login-refresh.lock");
    let _lock = std::fs::create_dir_all(lock_path.parent().unwrap_or(Path::new("/")))
        .ok()
        .and_then(|()| std::fs::File::create(&lock_path).ok())
        .and_then(|f| nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).ok());
    let text = secrets::read_login(p)?;
    let t = secrets::login_tokens(&text)?;
    if t.expires_at >= secrets::now_ms().saturating_add(margin) {
        return Ok(t);
    }
    if t.refresh.is_empty() {
        return Err(
            "the login holds no refreshToken: log in with `claude /login` on the host".into(),
        );
    }
    let url = std::env::var(TOKEN_URL_ENV).unwrap_or_else(|_| secrets::TOKEN_URL.to_owned());
    let answer = post(&url, &secrets::refresh_request(&t))?;
    let (new, t) = secrets::apply_refresh(&text, &answer, secrets::now_ms())?;
    secrets::write_login(p, &new).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(t)
}

/// One JSON POST to the token endpoint, verified against the host's
/// roots (and the tests' root, when the host's environment names one).
fn post(url: &str, body: &serde_json::Value) -> Result<serde_json::Value, String> {
    let client = reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(tls()?)
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("sbx-run")
        .build()
        .map_err(|e| chain(&e))?;
    let resp = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .map_err(|e| format!("{url}: {}", chain(&e)))?;
    let status = resp.status();
    let mut text = String::new();
    resp.take(ANSWER_MAX)
        .read_to_string(&mut text)
        .map_err(|e| format!("{url}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if !status.is_success() {
        // The endpoint's own words (invalid_grant: the refresh token was
        // revoked or used), never the body whole.
        let why = v["error"].as_str().unwrap_or("no error code");
        return Err(format!(
            "{url} answered {status} ({}): log in again with `claude /login` on the host",
            sbx_core::sanitize::field(why)
        ));
    }
    Ok(v)
}

fn tls() -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut files = vec![PathBuf::from("/etc/ssl/certs/ca-certificates.crt")];
    if let Some(p) = std::env::var_os(secrets::TEST_ROOT_ENV) {
        files.push(p.into());
    }
    for f in files {
        if let Ok(pem) = std::fs::read(&f) {
            for c in CertificateDer::pem_slice_iter(&pem).flatten() {
                let _ = roots.add(c);
            }
        }
    }
    if roots.is_empty() {
        return Err("no trusted roots on the host (/etc/ssl/certs/ca-certificates.crt)".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

fn record(ws: &Workspace, name: &str, outcome: Outcome, why: &str) {
    let why = format!("{why} (sandbox {})", ws.names.container);
    audit::append(
        &Record::new(
            "sbx-run",
            "login-refresh",
            &format!("[secrets] {name}"),
            outcome,
            "secrets",
        )
        .reason(&why),
    );
}

/// Hand the proxy the new access token, or the failure.
fn push(ws: &Workspace, name: &str, value: Result<&str, &str>) -> Result<(), String> {
    use crate::guestexec;
    use sbx_core::guestapi::User;
    use std::ffi::OsString;
    let mut argv: Vec<OsString> = vec!["sbx-fw".into(), "secret".into(), name.into()];
    let stdin: Box<dyn Read + Send> = match value {
        Ok(v) => Box::new(std::io::Cursor::new(format!("{v}\n").into_bytes())),
        Err(why) => {
            argv.push("--failed".into());
            argv.push(why.into());
            Box::new(std::io::empty())
        }
    };
    let client = guestexec::connect(&guestexec::socket_for(ws)).map_err(|e| e.to_string())?;
    let mut req = guestexec::exec_request(ws, &argv, "sbx-run", false);
    req.user = User::Root;
    req.timeout_ms = Some(30_000);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let x = guestexec::run_with(client, req, Some(stdin), &mut out, &mut err, false)
        .map_err(|e| e.to_string())?;
    match guestexec::status_of(&x) {
        0 => Ok(()),
        s => Err(format!(
            "sbx-fw secret exited {s}: {}",
            sbx_core::sanitize::field(String::from_utf8_lossy(&err).trim())
        )),
    }
}

/// A proxy record of a 401 on entry `name`'s host, from the proxy itself
/// (the sink stamps the writer's uid: the agent cannot forge one).
fn unauthorized(line: &str, name: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    v["tool"] == "sbx-fw"
        && v["operation"] == "unauthorized"
        && v["peer"]["uid"].as_u64() == Some(65533)
        && v["reason"].as_str().is_some_and(|r| {
            r.split(": ").next().is_some_and(|s| {
                s.strip_prefix("[secrets] ")
                    .is_some_and(|ns| ns.split(", ").any(|n| n == name))
            })
        })
}

/// The running refresher; dropping it stops it.
pub struct Watch {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Keep `ws`'s logins fresh while the caller runs; None without any.
pub fn spawn(ws: &Workspace) -> Option<Watch> {
    let logins = logins(ws);
    if logins.is_empty() {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let threads = logins
        .into_iter()
        .map(|(name, p)| {
            let (ws, s) = (ws.clone(), stop.clone());
            std::thread::spawn(move || keep(&ws, &name, &p, &s))
        })
        .collect();
    Some(Watch { stop, threads })
}

/// One login: the access token the proxy holds follows the file (a
/// refresh by the host's own CLI too), and the file is refreshed when
/// under [`secrets::REFRESH_BEFORE_MS`] is left.
fn keep(ws: &Workspace, name: &str, p: &Path, stop: &AtomicBool) {
    // What the proxy got at start: the file's token then.
    let mut pushed: Option<String> = secrets::read_login(p)
        .ok()
        .and_then(|t| secrets::login_tokens(&t).ok())
        .map(|t| t.access);
    let mut failed: Option<String> = None;
    let mut next = Instant::now();
    let log = crate::spec::host_dir(&ws.names.container).join("audit.jsonl");
    let mut tail = crate::onblock::Tail::at_end(log);
    let mut last_401: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(200));
        // The proxy saw the bound host answer 401: the token was revoked
        // before its time. Renew now, whatever its expiry says.
        let forced = tail.read_new().iter().any(|l| unauthorized(l, name))
            && last_401.is_none_or(|t| t.elapsed() > ON_401_EVERY);
        if forced {
            last_401 = Some(Instant::now());
        } else if Instant::now() < next {
            continue;
        }
        next = Instant::now() + EVERY;
        let margin = if forced {
            u64::MAX
        } else {
            secrets::REFRESH_BEFORE_MS
        };
        let t = refresh(ws, p, margin);
        match t {
            Ok(t) if pushed.as_deref() == Some(t.access.as_str()) && failed.is_none() => {}
            Ok(t) => match push(ws, name, Ok(&t.access)) {
                Ok(()) => {
                    pushed = Some(t.access);
                    failed = None;
                    record(
                        ws,
                        name,
                        Outcome::Allowed,
                        "refreshed on the host; the proxy has the new token",
                    );
                }
                Err(why) => {
                    output::error(&format!(
                        "[secrets] {name}: the refreshed login did not reach the sandbox's proxy: {why}"
                    ));
                    next = Instant::now() + RETRY;
                }
            },
            Err(why) => {
                next = Instant::now() + RETRY;
                if failed.as_deref() == Some(why.as_str()) {
                    continue;
                }
                output::error(&format!(
                    "[secrets] {name}: refreshing the login on the host failed: {why}"
                ));
                record(
                    ws,
                    name,
                    Outcome::Blocked,
                    &format!("refreshing the login failed: {why}"),
                );
                let said = format!("the login could not be refreshed on the host: {why}");
                if let Err(e) = push(ws, name, Err(&said)) {
                    output::error(&format!("[secrets] {name}: telling the proxy failed: {e}"));
                }
                failed = Some(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unauthorized;

    #[test]
    fn only_the_proxys_own_401_records_for_the_entry_count() {
        let rec = |uid: u32, op: &str, reason: &str| {
            serde_json::json!({"tool": "sbx-fw", "operation": op, "peer": {"uid": uid},
                "reason": reason})
            .to_string()
        };
        let r = "[secrets] claude: the host answered 401";
        assert!(unauthorized(&rec(65533, "unauthorized", r), "claude"));
        assert!(unauthorized(
            &rec(
                65533,
                "unauthorized",
                "[secrets] a, claude: the host answered 401"
            ),
            "claude"
        ));
        for (line, name) in [
            (rec(1000, "unauthorized", r), "claude"), // the agent's own
            (rec(65533, "connect", r), "claude"),
            (rec(65533, "unauthorized", r), "claud"),
            (rec(65533, "unauthorized", "[secrets] claudex: x"), "claude"),
            ("not json".to_owned(), "claude"),
        ] {
            assert!(!unauthorized(&line, name), "{line}");
        }
    }
}
