//! The Kubernetes backend: the manifests `sbx-run show-run --format k8s`
//! prints (sbx-run's `k8s_render`, the one builder), applied with plain
//! REST calls to the API server through the workspace's one HTTP client
//! (reqwest, rustls with ring): server-side apply, GET, merge PATCH and
//! DELETE. No kube-rs: it would bring a second HTTP stack and minutes of
//! compiling on 2 cores for the handful of calls made here
//! (docs/kubernetes.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use saphyr::{LoadableYamlNode, Yaml};
use serde_json::{Value, json};

use crate::backend::{Backend, BackendError, ErrorKind, Exec};
use crate::error::ApiError;

/// Who owns the fields sbx-server applies.
pub const FIELD_MANAGER: &str = "sbx-server";
/// One API call's deadline.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call to the cluster failed: each is one line.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeError {
    /// The kubeconfig could not be used: the file and what to do.
    Config(String),
    /// The API server answered with a failure status (its `Status`
    /// object's reason and message, when it sent one).
    Status {
        code: u16,
        what: String,
        message: String,
    },
    /// No answer within the deadline.
    Timeout(String),
    /// The TLS handshake failed (an untrusted or wrong certificate).
    Tls(String),
    /// No connection, or an answer that is not the API's.
    Transport(String),
}

impl std::fmt::Display for KubeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(m) => write!(f, "kubeconfig: {m}"),
            Self::Status {
                code,
                what,
                message,
            } => {
                let hint = match code {
                    401 => ": the kubeconfig's credentials were not accepted",
                    403 => ": grant sbx-server's account the RBAC in docs/kubernetes.md",
                    404 => ": is the agent-sandbox controller (its CRDs) installed?",
                    409 => ": another writer changed it; retry",
                    422 => ": the cluster refused the manifest",
                    _ => "",
                };
                write!(f, "cluster: {what}: {code} {message}{hint}")
            }
            Self::Timeout(w) => write!(
                f,
                "cluster: {w}: no answer in time: is the API server reachable?"
            ),
            Self::Tls(w) => write!(
                f,
                "cluster: {w}: TLS failed (check certificate-authority-data in the kubeconfig)"
            ),
            Self::Transport(w) => write!(f, "cluster: {w}"),
        }
    }
}

impl KubeError {
    /// The server's answer for this failure (error.rs, by its kind).
    pub fn api_error(&self) -> ApiError {
        BackendError::from(self.clone()).into()
    }
}

/// The API server's 404 is the sandbox's (or its CRD's) absence, 409
/// another writer, 400/422 a manifest it refused (the project's config);
/// a refusal of the server's account (401/403), the server's own
/// trouble (5xx), silence, TLS and an unusable kubeconfig are the
/// cluster being unavailable to sbx-server: the operator's to fix.
impl From<KubeError> for BackendError {
    fn from(e: KubeError) -> Self {
        let kind = match &e {
            KubeError::Status { code: 404, .. } => ErrorKind::NotFound,
            KubeError::Status { code: 409, .. } => ErrorKind::Conflict,
            KubeError::Status {
                code: 400 | 422, ..
            } => ErrorKind::Config,
            KubeError::Status {
                code: 401 | 403 | 429 | 500..=599,
                ..
            }
            | KubeError::Timeout(_)
            | KubeError::Tls(_)
            | KubeError::Transport(_)
            | KubeError::Config(_) => ErrorKind::Unavailable,
            KubeError::Status { .. } => ErrorKind::Other,
        };
        BackendError::new(kind, e.to_string())
    }
}

/// What a kubeconfig's current context names: the API server, the CA
/// it is trusted by, a bearer token and the namespace.
#[derive(Debug, Clone)]
pub struct Target {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub token: Option<String>,
    pub namespace: String,
}

/// `path`'s current context. Only what sbx-server can use is accepted:
/// a client certificate or an exec plugin is refused by name.
pub fn load_kubeconfig(path: &Path) -> Result<Target, KubeError> {
    let bad = |m: String| KubeError::Config(format!("{}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let docs = Yaml::load_from_str(&text).map_err(|e| bad(format!("not valid YAML: {e}")))?;
    let doc = docs.first().ok_or_else(|| bad("empty".into()))?;
    // saphyr's index panics on a missing key: every look-up is a get.
    let s = |y: &Yaml, k: &str| {
        y.as_mapping_get(k)
            .and_then(Yaml::as_str)
            .map(str::to_owned)
    };
    let missing = |k: &str| bad(format!("an entry has no {k}"));
    let current = s(doc, "current-context").ok_or_else(|| bad("no current-context".into()))?;
    let named = |list: &str, name: &str| {
        named_in(doc, list, name).ok_or_else(|| bad(format!("{list}: no entry named {name:?}")))
    };
    let ctx = named("contexts", &current)?
        .as_mapping_get("context")
        .ok_or_else(|| missing("context"))?;
    let cluster_name = s(ctx, "cluster").ok_or_else(|| bad("context has no cluster".into()))?;
    let cluster = named("clusters", &cluster_name)?
        .as_mapping_get("cluster")
        .ok_or_else(|| missing("cluster"))?;
    let server = s(cluster, "server").ok_or_else(|| bad("cluster has no server".into()))?;
    if !server.starts_with("https://") {
        return Err(bad(format!(
            "server {server:?}: only https:// API servers are used"
        )));
    }
    let ca_pem = match (
        s(cluster, "certificate-authority-data"),
        s(cluster, "certificate-authority"),
    ) {
        (Some(b64), _) => Some(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64.trim())
                .map_err(|e| bad(format!("certificate-authority-data: {e}")))?,
        ),
        (None, Some(f)) => Some(std::fs::read(&f).map_err(|e| bad(format!("{f}: {e}")))?),
        (None, None) => None,
    };
    let mut token = None;
    if let Some(user_name) = s(ctx, "user") {
        let user = named("users", &user_name)?
            .as_mapping_get("user")
            .ok_or_else(|| missing("user"))?;
        for refused in [
            "client-certificate",
            "client-certificate-data",
            "exec",
            "auth-provider",
        ] {
            if user.contains_mapping_key(refused) {
                return Err(bad(format!(
                    "users.{user_name}.{refused}: not supported by sbx-server: give it a ServiceAccount token (token or tokenFile)"
                )));
            }
        }
        token = match (s(user, "token"), s(user, "tokenFile")) {
            (Some(t), _) => Some(t),
            (None, Some(f)) => Some(
                std::fs::read_to_string(&f)
                    .map_err(|e| bad(format!("{f}: {e}")))?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
    }
    Ok(Target {
        server: server.trim_end_matches('/').to_owned(),
        ca_pem,
        token,
        namespace: s(ctx, "namespace").unwrap_or_else(|| "default".into()),
    })
}

fn named_in<'a, 'y>(doc: &'a Yaml<'y>, list: &str, name: &str) -> Option<&'a Yaml<'y>> {
    doc.as_mapping_get(list)
        .and_then(Yaml::as_vec)
        .and_then(|v| {
            v.iter()
                .find(|e| e.as_mapping_get("name").and_then(Yaml::as_str) == Some(name))
        })
}

/// The API server, called with the target's token over rustls (ring).
#[derive(Debug)]
pub struct Api {
    target: Target,
    client: reqwest::blocking::Client,
    /// The same trust, for the exec WebSocket (its own connection).
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl Api {
    pub fn new(target: Target) -> Result<Self, KubeError> {
        Self::with_timeout(target, TIMEOUT)
    }

    /// With another deadline per call (tests).
    pub fn with_timeout(target: Target, timeout: Duration) -> Result<Self, KubeError> {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &target.ca_pem {
            for c in CertificateDer::pem_slice_iter(pem).flatten() {
                let _ = roots.add(c);
            }
        }
        if roots.is_empty() {
            return Err(KubeError::Config(
                "the cluster has no usable certificate-authority: sbx-server trusts only the cluster's CA".into(),
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| KubeError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = Arc::new(tls);
        let client = reqwest::blocking::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(timeout)
            .connect_timeout(timeout)
            .no_proxy()
            .build()
            .map_err(|e| KubeError::Config(e.to_string()))?;
        Ok(Self {
            target,
            client,
            tls,
            timeout,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.target.namespace
    }

    /// The object's URL path: core objects under /api/v1, the rest under
    /// /apis/GROUP/VERSION.
    pub fn path(&self, api_version: &str, kind: &str, name: &str) -> Result<String, KubeError> {
        let plural = match kind {
            "Sandbox" => "sandboxes",
            "SandboxTemplate" => "sandboxtemplates",
            "SandboxWarmPool" => "sandboxwarmpools",
            "ConfigMap" => "configmaps",
            "NetworkPolicy" => "networkpolicies",
            "Pod" => "pods",
            "PersistentVolumeClaim" => "persistentvolumeclaims",
            other => {
                return Err(KubeError::Transport(format!(
                    "kind {other:?} is not one sbx-server manages"
                )));
            }
        };
        let root = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        Ok(format!(
            "{root}/namespaces/{}/{plural}/{name}",
            self.target.namespace
        ))
    }

    fn send(
        &self,
        what: &str,
        rb: reqwest::blocking::RequestBuilder,
    ) -> Result<Option<Value>, KubeError> {
        let rb = match &self.target.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        };
        let r = rb.send().map_err(|e| transport(what, &e))?;
        let code = r.status().as_u16();
        let body: Value = r
            .bytes()
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        if (200..300).contains(&code) {
            return Ok(Some(body));
        }
        let message = body["message"]
            .as_str()
            .map(|m| sbx_core::sanitize::field(m).into_owned())
            .unwrap_or_else(|| {
                StatusCode::from_u16(code)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("")
                    .to_owned()
            });
        Err(KubeError::Status {
            code,
            what: what.to_owned(),
            message,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.target.server)
    }

    /// Server-side apply of `doc` in the namespace, sbx-server owning its
    /// fields (force: the server's manifest is the truth).
    pub fn apply(&self, doc: &Value) -> Result<(), KubeError> {
        let kind = doc["kind"].as_str().unwrap_or("");
        let name = doc["metadata"]["name"].as_str().unwrap_or("");
        let path = self.path(doc["apiVersion"].as_str().unwrap_or(""), kind, name)?;
        let mut doc = doc.clone();
        doc["metadata"]["namespace"] = json!(self.target.namespace);
        let rb = self
            .client
            .patch(self.url(&format!("{path}?fieldManager={FIELD_MANAGER}&force=true")))
            .header("content-type", "application/apply-patch+yaml")
            .body(doc.to_string());
        self.send(&format!("apply {kind}/{name}"), rb).map(drop)
    }

    /// The object, or None when the cluster has none (404).
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Result<Option<Value>, KubeError> {
        let path = self.path(api_version, kind, name)?;
        match self.send(
            &format!("get {kind}/{name}"),
            self.client.get(self.url(&path)),
        ) {
            Err(KubeError::Status { code: 404, .. }) => Ok(None),
            r => r,
        }
    }

    /// A JSON merge patch of the object.
    pub fn merge(
        &self,
        api_version: &str,
        kind: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(), KubeError> {
        let path = self.path(api_version, kind, name)?;
        let rb = self
            .client
            .patch(self.url(&path))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string());
        self.send(&format!("patch {kind}/{name}"), rb).map(drop)
    }

    /// Delete the object; one already gone is not an error.
    pub fn delete(&self, api_version: &str, kind: &str, name: &str) -> Result<(), KubeError> {
        let path = self.path(api_version, kind, name)?;
        match self.send(
            &format!("delete {kind}/{name}"),
            self.client.delete(self.url(&path)),
        ) {
            Err(KubeError::Status { code: 404, .. }) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Delete the namespace's PersistentVolumeClaims labelled `selector`.
    pub fn delete_claims(&self, selector: &str) -> Result<(), KubeError> {
        let path = format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims",
            self.target.namespace
        );
        let selector = selector.replace('/', "%2F").replace('=', "%3D");
        let rb = self
            .client
            .delete(self.url(&format!("{path}?labelSelector={selector}")));
        match self.send("delete claims", rb) {
            Err(KubeError::Status { code: 404, .. }) => Ok(()),
            r => r.map(drop),
        }
    }
}

/// The exec subprotocols, newest first: v5 can close stdin (channel 255).
const EXEC_PROTOCOLS: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
/// An exec's output may pause for long (a backup's upload); not forever.
const EXEC_IDLE: Duration = Duration::from_secs(30 * 60);

impl Api {
    /// Run `argv` in `container` of `pod` through the API server's exec
    /// WebSocket (the kubelet runs it; channels 0 stdin, 1 stdout,
    /// 2 stderr, 3 the `Status` that carries the exit code, 255 close in
    /// v5). Its exit status and output.
    pub fn exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> Result<Exec, KubeError> {
        use tungstenite::Message;
        use tungstenite::client::IntoClientRequest;
        let what = format!("exec in pod {pod}");
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        q.append_pair("container", container)
            .append_pair("stdout", "true")
            .append_pair("stderr", "true")
            .append_pair("stdin", if stdin.is_some() { "true" } else { "false" });
        for a in argv {
            q.append_pair("command", a);
        }
        let path = format!(
            "/api/v1/namespaces/{}/pods/{pod}/exec?{}",
            self.target.namespace,
            q.finish()
        );
        let base = url::Url::parse(&self.target.server)
            .map_err(|e| KubeError::Config(format!("server: {e}")))?;
        let host = base.host_str().unwrap_or("").to_owned();
        let port = base.port_or_known_default().unwrap_or(443);
        let down = |e: std::io::Error| KubeError::Transport(format!("{what}: {e}"));
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .map_err(down)?
            .next()
            .ok_or_else(|| KubeError::Transport(format!("{what}: {host}: no address")))?;
        let tcp = std::net::TcpStream::connect_timeout(&addr, self.timeout).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                KubeError::Timeout(what.clone())
            } else {
                down(e)
            }
        })?;
        tcp.set_read_timeout(Some(self.timeout)).map_err(down)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| KubeError::Config(format!("server {host}: {e}")))?;
        let conn = rustls::ClientConnection::new(Arc::clone(&self.tls), name)
            .map_err(|e| KubeError::Tls(format!("{what}: {e}")))?;
        let stream = rustls::StreamOwned::new(conn, tcp);
        let mut req = format!("wss://{host}:{port}{path}")
            .into_client_request()
            .map_err(|e| KubeError::Transport(format!("{what}: {e}")))?;
        let h = req.headers_mut();
        h.insert(
            "sec-websocket-protocol",
            tungstenite::http::HeaderValue::from_static(EXEC_PROTOCOLS),
        );
        if let Some(t) = &self.target.token {
            let v = tungstenite::http::HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| KubeError::Config("the token is not a header value".into()))?;
            h.insert("authorization", v);
        }
        let (mut ws, resp) = tungstenite::client::client(req, stream).map_err(|e| match e {
            tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r)) => {
                let code = r.status().as_u16();
                let body: Value = r
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null);
                let message = body["message"]
                    .as_str()
                    .map(|m| sbx_core::sanitize::field(m).into_owned())
                    .unwrap_or_else(|| r.status().canonical_reason().unwrap_or("").to_owned());
                KubeError::Status {
                    code,
                    what: what.clone(),
                    message,
                }
            }
            tungstenite::HandshakeError::Failure(e) => {
                let s = e.to_string();
                if s.contains("certificate") || s.contains("tls") || s.contains("TLS") {
                    KubeError::Tls(what.clone())
                } else if s.contains("timed out") || s.contains("WouldBlock") {
                    KubeError::Timeout(what.clone())
                } else {
                    KubeError::Transport(format!("{what}: {s}"))
                }
            }
            tungstenite::HandshakeError::Interrupted(_) => KubeError::Timeout(what.clone()),
        })?;
        let proto = resp
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if proto != "v5.channel.k8s.io" && proto != "v4.channel.k8s.io" {
            return Err(KubeError::Transport(format!(
                "{what}: the API server speaks exec protocol {proto:?}, not v5 or v4.channel.k8s.io"
            )));
        }
        let _ = ws.get_mut().get_mut().set_read_timeout(Some(EXEC_IDLE));
        let broken = |e: tungstenite::Error| KubeError::Transport(format!("{what}: {e}"));
        if let Some(input) = stdin {
            let mut m = Vec::with_capacity(input.len() + 1);
            m.push(0);
            m.extend_from_slice(input);
            ws.send(Message::Binary(m.into())).map_err(broken)?;
            // v4 cannot close stdin: the command must not wait for EOF.
            if proto.starts_with("v5") {
                ws.send(Message::Binary(vec![255, 0].into()))
                    .map_err(broken)?;
            }
        }
        let mut x = Exec::default();
        let mut status = Vec::new();
        loop {
            match ws.read() {
                Ok(Message::Binary(b)) => match b.first() {
                    Some(1) => x.stdout.extend_from_slice(&b[1..]),
                    Some(2) => x.stderr.extend_from_slice(&b[1..]),
                    Some(3) => status.extend_from_slice(&b[1..]),
                    _ => {}
                },
                Ok(Message::Close(_))
                | Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    break;
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(KubeError::Timeout(what));
                }
                Err(e) => return Err(broken(e)),
            }
        }
        x.status = exit_status(&what, &status)?;
        Ok(x)
    }
}

/// The exit code in the error channel's `Status`: Success is 0, a
/// `NonZeroExitCode` names it in its `ExitCode` cause; anything else (or
/// none at all) is the exec's own failure.
fn exit_status(what: &str, status: &[u8]) -> Result<i32, KubeError> {
    let s: Value = serde_json::from_slice(status).map_err(|_| {
        KubeError::Transport(format!(
            "{what}: the API server ended the exec without its status"
        ))
    })?;
    if s["status"] == "Success" {
        return Ok(0);
    }
    if s["reason"] == "NonZeroExitCode" {
        let code = s["details"]["causes"].as_array().and_then(|c| {
            c.iter()
                .find(|c| c["reason"] == "ExitCode")
                .and_then(|c| c["message"].as_str())
                .and_then(|m| m.parse::<i32>().ok())
        });
        if let Some(code) = code {
            return Ok(code);
        }
    }
    let message = s["message"].as_str().unwrap_or("failed");
    Err(KubeError::Transport(format!(
        "{what}: {}",
        sbx_core::sanitize::field(message)
    )))
}

/// One line for a failed request, telling a timeout and TLS apart.
fn transport(what: &str, e: &reqwest::Error) -> KubeError {
    let chain = {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(c) = src {
            s.push_str(": ");
            s.push_str(&c.to_string());
            src = c.source();
        }
        s
    };
    if e.is_timeout() {
        KubeError::Timeout(what.to_owned())
    } else if chain.contains("certificate") || chain.contains("tls") || chain.contains("TLS") {
        KubeError::Tls(what.to_owned())
    } else {
        KubeError::Transport(format!("{what}: {chain}"))
    }
}

/// Sandboxes as agent-sandbox `Sandbox` objects on a cluster.
#[derive(Debug)]
pub struct Kube {
    pub api: Api,
    /// The image the cluster pulls (its registry's name for sbx's base).
    pub image: Option<String>,
}

const SANDBOX_API: &str = "agents.x-k8s.io/v1beta1";

fn quiet() -> sbx_core::cli::CommonArgs {
    sbx_core::cli::CommonArgs {
        quiet: true,
        ..Default::default()
    }
}

/// The cluster clones the project's origin: a host path it cannot reach.
/// The workspace is the agent's: git refuses to run in it for the
/// server (its ownership check), so `.git/config` is read as a plain
/// file (`git config --file`: no includes, nothing run), links refused.
fn origin(ws: &Path) -> Result<String, BackendError> {
    let config = ws.join(".git/config");
    for p in [ws.join(".git"), config.clone()] {
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(BackendError::new(
                ErrorKind::Config,
                format!("{}: a symbolic link: not followed", p.display()),
            ));
        }
    }
    let out = std::process::Command::new("git")
        .arg("config")
        .arg("--file")
        .arg(&config)
        .args(["--get", "remote.origin.url"])
        .output()
        .map_err(|e| format!("git: {e}"))?;
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || !url.contains("://") || url.starts_with("file://") {
        return Err(BackendError::new(
            ErrorKind::Config,
            format!(
                "{}: the project's repository {url:?} is not a URL the cluster can clone: the kubernetes backend needs projects made from a network repository",
                ws.display()
            ),
        ));
    }
    Ok(url)
}

impl Kube {
    /// The manifests of `ws`'s sandbox, from sbx-run's one builder.
    pub fn manifests(&self, ws: &Path) -> Result<Vec<Value>, BackendError> {
        let repo = origin(ws)?;
        let (_, _, _, docs) = sbx_run::lifecycle::k8s_render(
            &quiet(),
            Some(ws.to_owned()),
            None,
            sbx_run::k8s::Format::Sandbox,
            Some(repo),
            self.image.clone(),
        )
        .map_err(|e| BackendError::from_sbx(&*e))?;
        Ok(docs)
    }

    fn name(ws: &Path) -> String {
        let canonical = ws.canonicalize().unwrap_or_else(|_| ws.to_owned());
        sbx_run::k8s::object_name(&sbx_run::names::Names::new(&canonical, None).container)
    }

    /// Apply `docs`, the Sandbox asked to run.
    pub fn apply_all(&self, docs: &[Value]) -> Result<String, KubeError> {
        let mut name = String::new();
        for d in docs {
            let mut d = d.clone();
            if d["kind"] == "Sandbox" {
                d["spec"]["operatingMode"] = json!("Running");
                name = d["metadata"]["name"].as_str().unwrap_or("").to_owned();
            }
            self.api.apply(&d)?;
        }
        Ok(name)
    }

    /// Running: the Sandbox not suspended and Ready.
    pub fn state(&self, name: &str) -> Result<Option<bool>, KubeError> {
        Ok(self.api.get(SANDBOX_API, "Sandbox", name)?.map(|s| {
            let ready = s["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            s["spec"]["operatingMode"] != "Suspended" && ready
        }))
    }

    /// Suspend: the controller deletes the pod and keeps the claims.
    pub fn suspend(&self, name: &str) -> Result<(), KubeError> {
        match self.api.merge(
            SANDBOX_API,
            "Sandbox",
            name,
            &json!({"spec": {"operatingMode": "Suspended"}}),
        ) {
            Err(KubeError::Status { code: 404, .. }) => Ok(()),
            r => r,
        }
    }

    /// The Sandbox, its ConfigMap, NetworkPolicy and claims.
    pub fn remove(&self, name: &str) -> Result<(), KubeError> {
        self.api.delete(SANDBOX_API, "Sandbox", name)?;
        self.api
            .delete("v1", "ConfigMap", &format!("{name}-files"))?;
        self.api
            .delete("networking.k8s.io/v1", "NetworkPolicy", name)?;
        self.api.delete_claims(&format!("sbx.dev/sandbox={name}"))
    }
}

/// The pod's container that runs sbx-guest (sbx-run's k8s.rs).
pub const MAIN_CONTAINER: &str = "sandbox";

/// `argv` as the guest's client runs it in the pod.
pub fn guest_command(
    client: &str,
    workdir: Option<&str>,
    argv: &[std::ffi::OsString],
) -> Vec<String> {
    let mut cmd: Vec<String> = ["sbx-guest", "exec", "--agent", client]
        .map(str::to_owned)
        .into();
    if let Some(w) = workdir {
        cmd.extend(["--cwd".to_owned(), w.to_owned()]);
    }
    cmd.push("--".into());
    cmd.extend(argv.iter().map(|a| a.to_string_lossy().into_owned()));
    cmd
}

const NO_EXEC: &str = "the kubernetes backend has no terminal or image snapshot yet (commands run through the API server's exec: docs/kubernetes.md)";

impl Backend for Kube {
    /// The sandbox's config only: `sbx-run init` would also build the
    /// per-repo image with the host's Docker, which a cluster has no use
    /// for (it pulls the image it is given).
    fn create(&self, ws: &Path) -> crate::backend::Result<()> {
        let dir = ws.join(sbx_core::config::DIR);
        if dir.exists() {
            return Ok(());
        }
        let file = dir.join("config.toml");
        let at = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir(&dir).map_err(|e| at(&dir, e))?;
        // create_new: O_EXCL, a link in its place is not followed.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .map_err(|e| at(&file, e))?;
        std::io::Write::write_all(&mut f, sbx_run::image::CONFIG_TEMPLATE.as_bytes())
            .map_err(|e| at(&file, e).into())
    }

    fn start(&self, ws: &Path) -> crate::backend::Result<String> {
        let docs = self.manifests(ws)?;
        self.apply_all(&docs).map_err(BackendError::from)
    }

    fn stop(&self, ws: &Path) -> crate::backend::Result<()> {
        self.suspend(&Self::name(ws)).map_err(BackendError::from)
    }

    fn delete(&self, ws: &Path) -> crate::backend::Result<()> {
        self.remove(&Self::name(ws)).map_err(BackendError::from)
    }

    fn status(&self, ws: &Path) -> crate::backend::Result<Option<(String, bool)>> {
        let name = Self::name(ws);
        let s = self.state(&name).map_err(BackendError::from)?;
        Ok(s.map(|running| (name, running)))
    }

    /// Through the API server's exec into the Sandbox's pod (the
    /// controller names it after the Sandbox): `sbx-guest exec` in the
    /// main container, the guest's client, so the command runs as
    /// `sbx-run exec` runs it (the agent's uid, its audit record, the
    /// guards), in the workspace's directory of the pod.
    fn exec(
        &self,
        ws: &Path,
        argv: &[std::ffi::OsString],
        client: &str,
    ) -> crate::backend::Result<Exec> {
        let docs = self.manifests(ws)?;
        let sandbox = docs
            .iter()
            .find(|d| d["kind"] == "Sandbox")
            .ok_or_else(|| String::from("sbx-run's builder made no Sandbox"))?;
        let name = sandbox["metadata"]["name"].as_str().unwrap_or("");
        let workdir = sandbox["spec"]["podTemplate"]["spec"]["containers"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == MAIN_CONTAINER))
            .and_then(|c| c["workingDir"].as_str());
        let cmd = guest_command(client, workdir, argv);
        Ok(self.api.exec(name, MAIN_CONTAINER, &cmd, None)?)
    }

    fn terminal(&self, _ws: &Path) -> crate::backend::Result<(PathBuf, String)> {
        Err(BackendError::new(ErrorKind::Unsupported, NO_EXEC))
    }

    fn snapshot(&self, _ws: &Path, _tag: Option<&str>) -> crate::backend::Result<()> {
        Err(BackendError::new(ErrorKind::Unsupported, NO_EXEC))
    }
}
