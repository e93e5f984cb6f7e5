//! `[secrets]` resolved on the host at start: the values sbx-fw's proxy
//! injects, and the placeholders the sandbox sees instead. A reference
//! that does not resolve refuses the start, naming its key; a value is
//! never printed, logged or written where the sandbox can read it.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::config::{Secret, SecretFrom};
use crate::{Exit, SbxError};

/// Where `sbx-fw init` keeps the secrets and the sandbox CA's key: a
/// tmpfs, root's 0700 (never in an image, a volume or a snapshot).
pub const TMPFS: &str = "/run/sbx-secrets";
/// Where sbx-run leaves the resolved secrets for init, in the sandbox's
/// host directory (root's alone inside); init moves them to [`TMPFS`].
pub const HANDOFF_DIR: &str = "/run/sbx/host";
pub const HANDOFF: &str = "secrets.json";
/// The tests' extra root for the proxy's upstreams, next to [`HANDOFF`]:
/// sbx-run stages it from the host's [`TEST_ROOT_ENV`] only, so neither
/// the agent nor the workspace's config can name one.
pub const TEST_ROOT_HANDOFF: &str = "proxy-test-root.pem";
/// The host variable naming that PEM file (the e2e tests' stand-ins).
pub const TEST_ROOT_ENV: &str = "SBX_FW_PROXY_TEST_ROOT";
/// The sandbox CA's certificate for the sandbox's clients: Node reads it
/// through NODE_EXTRA_CA_CERTS; init adds it to the system bundle too.
pub const SANDBOX_CA: &str = "/etc/ssl/certs/sbx-proxy-ca.pem";

/// The largest secret read (a file or a command's output).
const MAX_VALUE: u64 = 64 * 1024;

/// One secret ready for the proxy: where it goes, the placeholder the
/// sandbox holds for it and the value put in its place.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub name: String,
    pub host: String,
    pub header: String,
    pub placeholder: String,
    pub value: String,
    /// A Claude Code OAuth login (`claude-login:`): its token is refused
    /// on the paths that mint other credentials ([`login_refuses`]).
    #[serde(default)]
    pub login: bool,
}

/// Never the value: a Debug print (a panic, a log line) shows its length.
impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("header", &self.header)
            .field("placeholder", &self.placeholder)
            .field("value", &format_args!("<{} bytes>", self.value.len()))
            .field("login", &self.login)
            .finish()
    }
}

/// The placeholder the sandbox holds for secret `name`: fixed, so a CLI
/// configured with it keeps working across restarts, and plainly not a
/// key, so it is useless anywhere the proxy does not replace it.
pub fn placeholder(name: &str) -> String {
    format!("sbx-placeholder-{name}")
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("[secrets] {0}: {1}")]
    Unresolved(String, String),
    #[error("[secrets] {0}: {1}")]
    Missing(String, String),
}

impl SbxError for SecretError {
    fn exit(&self) -> Exit {
        match self {
            Self::Unresolved(..) => Exit::Config,
            Self::Missing(..) => Exit::NoInput,
        }
    }
}

/// Every secret of the config resolved, in name order; `var` reads the
/// host's environment. The first that does not resolve is the error.
pub fn resolve(
    secrets: &BTreeMap<String, Secret>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Binding>, SecretError> {
    let mut hosts: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(secrets.len());
    for (name, s) in secrets {
        let err = |why: String| SecretError::Unresolved(name.clone(), why);
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(err("name it with letters, digits, - and _ only".into()));
        }
        // Two values for one header of one host: which one goes is a guess.
        if let Some(other) = hosts.insert((&s.host.0, &s.header.0), name) {
            return Err(err(format!(
                "{} {} is bound by [secrets] {other} too: keep one",
                s.host.0, s.header.0
            )));
        }
        let value = match &s.from {
            SecretFrom::Env(v) => var(v).filter(|v| !v.is_empty()).ok_or_else(|| {
                err(format!(
                    "env:{v} is not set on the host: export it, or change `from`"
                ))
            })?,
            SecretFrom::File(p) => read_file(p).map_err(|e| match e {
                FileErr::Missing(m) => SecretError::Missing(name.clone(), m),
                FileErr::Bad(m) => err(m),
            })?,
            SecretFrom::Cmd(argv) => run(argv).map_err(err)?,
            SecretFrom::ClaudeLogin(p) => {
                if !s.header.0.eq_ignore_ascii_case("authorization") {
                    return Err(err(format!(
                        "{} sends its token as Authorization: Bearer: set header = \"authorization\"",
                        s.from
                    )));
                }
                let text = read_file(p).map_err(|e| match e {
                    FileErr::Missing(m) => SecretError::Missing(name.clone(), m),
                    FileErr::Bad(m) => err(m),
                })?;
                login_token(&text, now_ms()).map_err(|why| err(format!("{}: {why}", s.from)))?
            }
        };
        let value = value.trim_end_matches(['\r', '\n']).to_owned();
        // It goes into a header line: a CR, LF or NUL would split it.
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(err(format!(
                "the value from {} is empty or holds control characters: a header value is one line",
                s.from
            )));
        }
        out.push(Binding {
            name: name.clone(),
            host: s.host.0.clone(),
            header: s.header.0.clone(),
            placeholder: placeholder(name),
            value,
            login: matches!(s.from, SecretFrom::ClaudeLogin(_)),
        });
    }
    Ok(out)
}

/// A Claude Code login (`.credentials.json`): its OAuth tokens under
/// `claudeAiOauth`, `expiresAt` in milliseconds. The CLI refreshes the
/// access token itself when it nears that time, or on a 401.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Login {
    claude_ai_oauth: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Left of a login at start: less and sbx-run refreshes it on the host
/// first (`sbx-run`'s loginrefresh).
pub const LOGIN_MARGIN_MS: u64 = 30 * 60 * 1000;
/// Left of a login at start after that: less and the start is refused
/// (the refresh failed, or the login host gives tokens this short).
pub const LOGIN_MIN_MS: u64 = 60 * 1000;
/// Left of a login when the running sandbox's refresher renews it: what
/// Claude Code itself waits for (its bundle, 2.1.x: five minutes).
pub const REFRESH_BEFORE_MS: u64 = 5 * 60 * 1000;
/// Claude Code's token endpoint and OAuth client (its bundle, 2.1.x:
/// `TOKEN_URL`, `CLIENT_ID`); a login that names its own `clientId` is
/// refreshed with that.
pub const TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
pub const CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn login_oauth(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    serde_json::from_str::<Login>(text)
        .map_err(|e| format!("not a Claude Code login file: {e}"))?
        .claude_ai_oauth
        .ok_or_else(|| "holds no claudeAiOauth login: log in with `claude /login`".to_owned())
}

/// What the host's refresher needs of a login file.
#[derive(Clone, PartialEq, Eq)]
pub struct LoginTokens {
    pub access: String,
    pub refresh: String,
    /// Milliseconds since the epoch.
    pub expires_at: u64,
    pub scopes: Vec<String>,
    pub client_id: String,
}

/// Never a token: a Debug print shows their lengths.
impl std::fmt::Debug for LoginTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginTokens")
            .field("access", &format_args!("<{} bytes>", self.access.len()))
            .field("refresh", &format_args!("<{} bytes>", self.refresh.len()))
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// The tokens of a login file's text.
pub fn login_tokens(text: &str) -> Result<LoginTokens, String> {
    let o = login_oauth(text)?;
    let s = |k: &str| {
        o.get(k)
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    Ok(LoginTokens {
        access: s("accessToken").ok_or("holds no accessToken: log in with `claude /login`")?,
        refresh: s("refreshToken").unwrap_or_default(),
        expires_at: o
            .get("expiresAt")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
        scopes: o
            .get("scopes")
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        client_id: s("clientId").unwrap_or_else(|| CLIENT_ID.to_owned()),
    })
}

/// The body of Claude Code's refresh request (JSON, as its bundle sends
/// it): `grant_type`, `refresh_token`, `client_id`, `scope`.
pub fn refresh_request(t: &LoginTokens) -> serde_json::Value {
    let mut body = serde_json::json!({
        "grant_type": "refresh_token",
        "refresh_token": t.refresh,
        "client_id": t.client_id,
    });
    if !t.scopes.is_empty() {
        body["scope"] = t.scopes.join(" ").into();
    }
    body
}

/// The login file's text with the token endpoint's `answer` applied as
/// Claude Code applies it: the new access token, the new refresh token
/// (the old one when none comes), `expiresAt` = now + `expires_in`
/// seconds, the granted `scope` when given; every other field kept.
pub fn apply_refresh(
    text: &str,
    answer: &serde_json::Value,
    now: u64,
) -> Result<(String, LoginTokens), String> {
    let mut doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a Claude Code login file: {e}"))?;
    let token_ok = |t: &&str| !t.is_empty() && !t.bytes().any(|b| b.is_ascii_control());
    let access = answer["access_token"]
        .as_str()
        .filter(token_ok)
        .ok_or("the token endpoint's answer holds no access_token")?;
    let life = answer["expires_in"]
        .as_u64()
        .filter(|s| *s > 0)
        .ok_or("the token endpoint's answer holds no expires_in")?;
    let o = doc
        .get_mut("claudeAiOauth")
        .and_then(serde_json::Value::as_object_mut)
        .ok_or("holds no claudeAiOauth login: log in with `claude /login`")?;
    o.insert("accessToken".into(), access.into());
    if let Some(r) = answer["refresh_token"].as_str().filter(token_ok) {
        o.insert("refreshToken".into(), r.into());
    }
    o.insert(
        "expiresAt".into(),
        now.saturating_add(life.saturating_mul(1000)).into(),
    );
    if let Some(scope) = answer["scope"].as_str().filter(|s| !s.trim().is_empty()) {
        let scopes: Vec<serde_json::Value> = scope.split_whitespace().map(Into::into).collect();
        o.insert("scopes".into(), scopes.into());
    }
    let text = doc.to_string();
    let tokens = login_tokens(&text)?;
    Ok((text, tokens))
}

/// Replace the login file at `p` with `text` as Claude Code writes it
/// (mode 0600): a new file beside it, synced, renamed over, so a reader
/// (the host's own CLI) sees the old login or the new one, never half.
/// A link at `p` is replaced, not followed.
pub fn write_login(p: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = p.parent().unwrap_or(Path::new("/"));
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.sbx-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    let done = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, p));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// A login file's text, read as a `file:` secret is (no links followed,
/// not writable by others).
pub fn read_login(p: &Path) -> Result<String, String> {
    read_file(p).map_err(|e| match e {
        FileErr::Missing(m) | FileErr::Bad(m) => m,
    })
}

/// The access token of a login file, when it is good for
/// [`LOGIN_MIN_MS`] more at `now` (ms).
fn login_token(text: &str, now: u64) -> Result<String, String> {
    let t = login_tokens(text)?;
    if t.expires_at < now.saturating_add(LOGIN_MIN_MS) {
        return Err(
            "the login's access token has expired and could not be refreshed on the host: run `claude` once on the host (or `claude /login`), then start again"
                .to_owned(),
        );
    }
    Ok(t.access)
}

/// Paths on the bound host where an OAuth login's access token buys a
/// credential of another kind: Claude Code's login turns it into an API
/// key there (`POST /api/oauth/claude_cli/create_api_key`, answered with
/// the key in full), which the masking cannot know and which outlives the
/// sandbox. The CLI calls them only while logging in, never inside.
const LOGIN_REFUSED: &[&[&str]] = &[&["api", "oauth", "claude_cli"]];

/// Why a request for `target` on a `claude-login:` secret's host is
/// refused, if it is: under [`LOGIN_REFUSED`] (escapes decoded, any case,
/// `;params` dropped, as a lenient server reads it), or a target that
/// cannot be read unambiguously.
pub fn login_refuses(target: &str) -> Option<String> {
    let segs = match crate::netrules::request_path(target) {
        Ok(crate::netrules::Target::Path(s)) => s,
        Ok(crate::netrules::Target::Asterisk) => return None,
        Err(e) => return Some(format!("{e}, on a login's host")),
    };
    let bare: Vec<String> = segs
        .iter()
        .map(|s| s.split(';').next().unwrap_or_default().to_ascii_lowercase())
        .collect();
    LOGIN_REFUSED
        .iter()
        .find(|p| bare.len() >= p.len() && bare.iter().zip(p.iter()).all(|(a, b)| a == b))
        .map(|p| {
            format!(
                "/{}/ mints credentials from the login's token: refused",
                p.join("/")
            )
        })
}

/// The `.credentials.json` the sandbox's CLI gets for a `claude-login:`
/// secret `name`: the placeholder as its access token, another as its
/// refresh token (the real one never leaves the host), an expiry a year
/// on (so the CLI does not try to refresh: its refresh would go to the
/// login host with a placeholder), and the login's scopes and plan kept
/// (not secret; the CLI needs `user:inference` to use the login).
pub fn sandbox_login(name: &str, secret: &Secret) -> Result<Option<String>, SecretError> {
    let SecretFrom::ClaudeLogin(p) = &secret.from else {
        return Ok(None);
    };
    let err = |why: String| SecretError::Unresolved(name.to_owned(), why);
    let text = read_file(p).map_err(|e| match e {
        FileErr::Missing(m) => SecretError::Missing(name.to_owned(), m),
        FileErr::Bad(m) => err(m),
    })?;
    let real = login_oauth(&text).map_err(|why| err(format!("{}: {why}", secret.from)))?;
    Ok(Some(placeholder_login(name, &real, now_ms())))
}

fn placeholder_login(
    name: &str,
    real: &serde_json::Map<String, serde_json::Value>,
    now: u64,
) -> String {
    const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;
    let mut o = serde_json::Map::new();
    o.insert("accessToken".into(), placeholder(name).into());
    o.insert(
        "refreshToken".into(),
        format!("{}-refresh", placeholder(name)).into(),
    );
    o.insert("expiresAt".into(), (now + YEAR_MS).into());
    for k in ["scopes", "subscriptionType", "rateLimitTier"] {
        if let Some(v) = real.get(k) {
            o.insert(k.into(), v.clone());
        }
    }
    serde_json::json!({ "claudeAiOauth": o }).to_string()
}

enum FileErr {
    Missing(String),
    Bad(String),
}

/// The file's first 64 KiB, opened without following any link in the
/// path, refused when others could have written it.
fn read_file(p: &Path) -> Result<String, FileErr> {
    let root = sbx_sys::beneath::Root::open(Path::new("/"))
        .map_err(|e| FileErr::Bad(format!("cannot open /: {e}")))?;
    let rel = p.strip_prefix("/").unwrap_or(p);
    let f = root.open_read(rel).map_err(|e| {
        let m = format!("file:{}: {e}", p.display());
        if e.kind() == std::io::ErrorKind::NotFound {
            FileErr::Missing(format!("{m}: create it or change `from`"))
        } else {
            FileErr::Bad(m)
        }
    })?;
    let md = f
        .metadata()
        .map_err(|e| FileErr::Bad(format!("file:{}: {e}", p.display())))?;
    if md.mode() & 0o022 != 0 {
        return Err(FileErr::Bad(format!(
            "file:{} is writable by its group or everyone: chmod go-w it",
            p.display()
        )));
    }
    let mut text = String::new();
    f.take(MAX_VALUE)
        .read_to_string(&mut text)
        .map_err(|e| FileErr::Bad(format!("file:{}: {e}", p.display())))?;
    Ok(text)
}

/// The command's stdout; its stderr goes to the user (a password prompt,
/// an error), stdin is closed. It runs in `/`, not where sbx-run was
/// started (the repository, as a rule, which the agent writes): `python3
/// -m`, npx, mise or asdf shims would run what the agent put there.
fn run(argv: &[String]) -> Result<String, String> {
    let shown = format!("cmd:{}", argv.join(" "));
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{shown}: cannot run it: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({}): fix it, or change `from`",
            out.status
        ));
    }
    if out.stdout.len() as u64 > MAX_VALUE {
        return Err(format!("{shown} printed over {MAX_VALUE} bytes"));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{shown} printed something not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_toml;
    use std::os::unix::fs::PermissionsExt;

    fn load(text: &str) -> BTreeMap<String, Secret> {
        parse_toml(text, Path::new("c.toml")).unwrap().secrets
    }

    #[test]
    fn each_source_resolves_and_bad_ones_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("key");
        std::fs::write(&f, "from-file\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = load(&format!(
            "[secrets]\n\
             a = {{ from = \"env:K\", host = \"api.test\", header = \"X-Api-Key\" }}\n\
             b = {{ from = \"file:{}\", host = \"b.test\", header = \"authorization\" }}\n\
             c = {{ from = \"cmd:printf 'from cmd'\", host = \"c.test\", header = \"x-token\" }}\n",
            f.display()
        ));
        let got = resolve(&s, |k| (k == "K").then(|| "from-env".into())).unwrap();
        let v: Vec<_> = got
            .iter()
            .map(|b| {
                (
                    b.name.as_str(),
                    b.host.as_str(),
                    b.header.as_str(),
                    b.value.as_str(),
                )
            })
            .collect();
        assert_eq!(
            v,
            [
                ("a", "api.test", "x-api-key", "from-env"),
                ("b", "b.test", "authorization", "from-file"),
                ("c", "c.test", "x-token", "from cmd"),
            ]
        );
        assert_eq!(got[0].placeholder, "sbx-placeholder-a");
        assert!(!format!("{got:?}").contains("from-env"));

        let one = |from: &str| {
            let s = load(&format!(
                "[secrets.k1]\nfrom = \"{from}\"\nhost = \"a.test\"\nheader = \"x-k\"\n"
            ));
            let e = resolve(&s, |_| None).unwrap_err();
            assert!(e.to_string().starts_with("[secrets] k1: "), "{e}");
            e.exit()
        };
        assert_eq!(one("env:UNSET"), Exit::Config);
        assert_eq!(one("file:/nonexistent/key"), Exit::NoInput);
        assert_eq!(one("cmd:false"), Exit::Config);
        assert_eq!(one("cmd:printf 'a\\\\nb'"), Exit::Config);
        // Not in the caller's directory (the repository the agent writes).
        let s =
            load("[secrets]\nk = { from = \"cmd:pwd\", host = \"a.test\", header = \"x-k\" }\n");
        assert_eq!(resolve(&s, |_| None).unwrap()[0].value, "/");
        // A link anywhere in the path, and a file others may write.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(one(&format!("file:{}", link.display())), Exit::Config);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert_eq!(one(&format!("file:{}", f.display())), Exit::Config);
    }

    /// A Claude Code login: the access token is the value, the sandbox's
    /// file holds placeholders only (neither token, a far expiry, the
    /// scopes kept), and a login near its end, without a token, or bound
    /// to another header refuses the start, naming its key.
    #[test]
    fn a_claude_login_gives_its_access_token_and_a_placeholder_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(".credentials.json");
        let write = |until: u64| {
            let text = serde_json::json!({"claudeAiOauth": {
                "accessToken": "sk-ant-oat01-REAL-access",
                "refreshToken": "sk-ant-ort01-REAL-refresh",
                "expiresAt": until,
                "scopes": ["user:inference", "user:profile"],
                "subscriptionType": "max"}});
            std::fs::write(&f, text.to_string()).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        let conf = |header: &str| {
            load(&format!(
                "[secrets]\nclaude = {{ from = \"claude-login:{}\", host = \"api.test\", header = \"{header}\" }}\n",
                f.display()
            ))
        };
        let hour = 3600 * 1000;
        write(now_ms() + 8 * hour);
        let s = conf("authorization");
        let got = resolve(&s, |_| None).unwrap();
        assert_eq!(got[0].value, "sk-ant-oat01-REAL-access");
        assert_eq!(got[0].placeholder, "sbx-placeholder-claude");
        let file = sandbox_login("claude", &s["claude"]).unwrap().unwrap();
        assert!(!file.contains("REAL"), "{file}");
        let v: serde_json::Value = serde_json::from_str(&file).unwrap();
        let o = &v["claudeAiOauth"];
        assert_eq!(o["accessToken"], "sbx-placeholder-claude");
        assert_eq!(o["refreshToken"], "sbx-placeholder-claude-refresh");
        assert!(o["expiresAt"].as_u64().unwrap() > now_ms() + 300 * 24 * hour);
        assert_eq!(o["scopes"][0], "user:inference");
        assert_eq!(o["subscriptionType"], "max");
        let env =
            load("[secrets]\nk = { from = \"env:K\", host = \"a.test\", header = \"x-k\" }\n");
        assert!(sandbox_login("k", &env["k"]).unwrap().is_none());

        let refused = |s: &BTreeMap<String, Secret>| {
            let e = resolve(s, |_| None).unwrap_err().to_string();
            assert!(e.starts_with("[secrets] claude: "), "{e}");
            assert!(!e.contains("REAL"), "{e}");
            e
        };
        assert!(refused(&conf("x-api-key")).contains("authorization"));
        write(now_ms() + 30 * 1000);
        assert!(refused(&conf("authorization")).contains("run `claude` once on the host"));
        std::fs::write(&f, "{\"claudeAiOauth\": {}}").unwrap();
        assert!(refused(&conf("authorization")).contains("accessToken"));
        std::fs::write(&f, "{}").unwrap();
        assert!(refused(&conf("authorization")).contains("claude /login"));
        assert!(
            parse_toml(
                "[secrets]\nc = { from = \"claude-login:rel/.credentials.json\", host = \"a.test\", header = \"authorization\" }\n",
                Path::new("c.toml")
            )
            .is_err()
        );
    }

    #[test]
    fn a_refresh_is_asked_and_applied_as_claude_code_does() {
        let text = serde_json::json!({"claudeAiOauth": {
            "accessToken": "old-access", "refreshToken": "old-refresh", "expiresAt": 5,
            "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"},
            "other": {"kept": true}})
        .to_string();
        let t = login_tokens(&text).unwrap();
        assert!(!format!("{t:?}").contains("old-"), "{t:?}");
        let body = refresh_request(&t);
        assert_eq!(
            body,
            serde_json::json!({"grant_type": "refresh_token", "refresh_token": "old-refresh",
                "client_id": CLIENT_ID, "scope": "user:inference user:profile"})
        );
        // A rotated refresh token, and one that is not rotated.
        let answer = serde_json::json!({"access_token": "new-access", "refresh_token": "new-refresh",
            "expires_in": 300, "scope": "user:inference"});
        let (new, t) = apply_refresh(&text, &answer, 1000).unwrap();
        assert_eq!(
            (t.access.as_str(), t.refresh.as_str()),
            ("new-access", "new-refresh")
        );
        assert_eq!(
            (t.expires_at, t.scopes.clone()),
            (301_000, vec!["user:inference".to_owned()])
        );
        let v: serde_json::Value = serde_json::from_str(&new).unwrap();
        assert_eq!(v["claudeAiOauth"]["subscriptionType"], "max");
        assert_eq!(v["other"]["kept"], true);
        let (_, t) = apply_refresh(
            &text,
            &serde_json::json!({"access_token": "a2", "expires_in": 60}),
            0,
        )
        .unwrap();
        assert_eq!(t.refresh, "old-refresh");
        for bad in [
            serde_json::json!({"expires_in": 60}),
            serde_json::json!({"access_token": "a\r\nx", "expires_in": 60}),
            serde_json::json!({"access_token": "a"}),
            serde_json::json!({"error": "invalid_grant"}),
        ] {
            assert!(apply_refresh(&text, &bad, 0).is_err(), "{bad}");
        }
        // Written whole, 0600, over a link without following it.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched").unwrap();
        let f = dir.path().join(".credentials.json");
        std::os::unix::fs::symlink(&target, &f).unwrap();
        write_login(&f, &new).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), new);
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert!(m.is_file() && m.permissions().mode() & 0o777 == 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn bad_references_hosts_and_headers_do_not_parse() {
        for bad in [
            "from = \"ANTHROPIC_API_KEY\", host = \"a.test\", header = \"x-k\"",
            "from = \"env:\", host = \"a.test\", header = \"x-k\"",
            "from = \"file:rel/path\", host = \"a.test\", header = \"x-k\"",
            "from = \"cmd:\", host = \"a.test\", header = \"x-k\"",
            "from = \"env:K\", host = \"*.a.test\", header = \"x-k\"",
            "from = \"env:K\", host = \"10.0.0.1\", header = \"x-k\"",
            "from = \"env:K\", host = \"a.test\", header = \"x k\"",
            "from = \"env:K\", host = \"a.test\", header = \"Host\"",
            "from = \"env:K\", host = \"a.test\"",
        ] {
            let text = format!("[secrets]\nk = {{ {bad} }}\n");
            assert!(parse_toml(&text, Path::new("c.toml")).is_err(), "{bad}");
        }
        let s = load(
            "[secrets]\na = { from = \"env:K\", host = \"a.test\", header = \"x-k\" }\n\
             b = { from = \"env:K\", host = \"a.test\", header = \"X-K\" }\n",
        );
        assert!(resolve(&s, |_| Some("v".into())).is_err());
    }

    /// The paths where a login's token buys a key, however a lenient
    /// server would read them; the model's paths pass.
    #[test]
    fn a_login_refuses_the_paths_that_mint_keys() {
        for t in [
            "/api/oauth/claude_cli/create_api_key",
            "/api/oauth/claude_cli/roles",
            "/Api/OAUTH/claude_cli/create_api_key",
            "/api/oauth/%63laude_cli/create_api_key",
            "/api/oauth/claude_cli;v=1/create_api_key",
            "/api/oauth/claude_cli",
            "/api/./oauth/claude_cli/create_api_key",
            "https://api.test/api/oauth/claude_cli/create_api_key",
        ] {
            assert!(login_refuses(t).is_some(), "{t}");
        }
        for t in [
            "/v1/messages?beta=true",
            "/api/oauth/profile",
            "/v1/models",
            "*",
        ] {
            assert_eq!(login_refuses(t), None, "{t}");
        }
    }
}
