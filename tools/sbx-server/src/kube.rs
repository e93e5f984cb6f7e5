//! The Kubernetes backend: the manifests `sbx-run show-run --format k8s`
//! prints (sbx-run's `k8s_render`, the one builder), applied with plain
//! REST calls to the API server through the workspace's one HTTP client
//! (reqwest, rustls with ring): server-side apply, GET, merge PATCH and
//! DELETE. No kube-rs: it would bring a second HTTP stack and minutes of
//! compiling on 2 cores for the handful of calls made here
//! (docs/kubernetes.md).

use std::path::Path;
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
    /// The sandbox's pod is not running: what the cluster says it is.
    NotRunning(String),
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
            Self::Transport(w) | Self::NotRunning(w) => write!(f, "cluster: {w}"),
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
            KubeError::NotRunning(_) => ErrorKind::NotRunning,
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
            "VolumeSnapshot" => "volumesnapshots",
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
        self.delete_labelled("v1", "PersistentVolumeClaim", selector)
    }

    /// The collection of `kind` in the namespace, as a path.
    fn collection(&self, api_version: &str, kind: &str) -> Result<String, KubeError> {
        let one = self.path(api_version, kind, "x")?;
        Ok(one.trim_end_matches("/x").to_owned())
    }

    /// Delete the namespace's objects of `kind` labelled `selector`; none
    /// (or no such kind: its CRD not installed) is not an error.
    pub fn delete_labelled(
        &self,
        api_version: &str,
        kind: &str,
        selector: &str,
    ) -> Result<(), KubeError> {
        let path = self.collection(api_version, kind)?;
        let rb = self
            .client
            .delete(self.url(&format!("{path}?labelSelector={}", query_value(selector))));
        match self.send(&format!("delete {kind} {selector}"), rb) {
            Err(KubeError::Status { code: 404, .. }) => Ok(()),
            r => r.map(drop),
        }
    }

    /// The namespace's objects of `kind` labelled `selector`.
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        selector: &str,
    ) -> Result<Vec<Value>, KubeError> {
        let path = self.collection(api_version, kind)?;
        let rb = self
            .client
            .get(self.url(&format!("{path}?labelSelector={}", query_value(selector))));
        let v = self
            .send(&format!("list {kind} {selector}"), rb)?
            .unwrap_or(Value::Null);
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// Delete the object, its dependents orphaned (kept, unowned).
    pub fn delete_orphaning(
        &self,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), KubeError> {
        let path = self.path(api_version, kind, name)?;
        let rb = self
            .client
            .delete(self.url(&path))
            .header("content-type", "application/json")
            .body(
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})
                    .to_string(),
            );
        match self.send(&format!("delete {kind}/{name}"), rb) {
            Err(KubeError::Status { code: 404, .. }) => Ok(()),
            r => r.map(drop),
        }
    }
}

/// A label selector as a query value.
fn query_value(selector: &str) -> String {
    url::form_urlencoded::byte_serialize(selector.as_bytes()).collect()
}

/// The exec subprotocols, newest first: v5 can close stdin (channel 255).
const EXEC_PROTOCOLS: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
/// An exec's output may pause for long (a backup's upload); not forever.
const EXEC_IDLE: Duration = Duration::from_secs(30 * 60);

/// An exec's WebSocket request: the URL's host, port and request.
struct ExecRequest {
    what: String,
    host: String,
    port: u16,
    request: tungstenite::handshake::client::Request,
}

impl Api {
    /// The upgrade request of an exec in `container` of `pod`: stdin when
    /// asked, a tty (stderr is then the tty's too, as kubectl asks).
    fn exec_request(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: bool,
        tty: bool,
    ) -> Result<ExecRequest, KubeError> {
        use tungstenite::client::IntoClientRequest;
        let what = format!("exec in pod {pod}");
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        q.append_pair("container", container)
            .append_pair("stdout", "true")
            .append_pair("stderr", if tty { "false" } else { "true" })
            .append_pair("stdin", if stdin { "true" } else { "false" });
        if tty {
            q.append_pair("tty", "true");
        }
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
        let mut request = format!("wss://{host}:{port}{path}")
            .into_client_request()
            .map_err(|e| KubeError::Transport(format!("{what}: {e}")))?;
        let h = request.headers_mut();
        h.insert(
            "sec-websocket-protocol",
            tungstenite::http::HeaderValue::from_static(EXEC_PROTOCOLS),
        );
        if let Some(t) = &self.target.token {
            let v = tungstenite::http::HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| KubeError::Config("the token is not a header value".into()))?;
            h.insert("authorization", v);
        }
        Ok(ExecRequest {
            what,
            host,
            port,
            request,
        })
    }

    /// Why an exec was refused with 400 or 404: the pod's own state when
    /// it is not running (the API server's answer names only the
    /// symptom), else the refusal as it was.
    fn why_refused(&self, pod: &str, container: &str, e: KubeError) -> KubeError {
        let KubeError::Status {
            code: 400 | 404,
            what,
            ..
        } = &e
        else {
            return e;
        };
        match self.get("v1", "Pod", pod) {
            Ok(None) => KubeError::NotRunning(format!(
                "{what}: the sandbox has no pod (it is stopped, or not made yet): start the project"
            )),
            Ok(Some(p)) => {
                let phase = p["status"]["phase"].as_str().unwrap_or("Unknown");
                let state = p["status"]["containerStatuses"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["name"] == container))
                    .map(|c| c["state"].clone())
                    .unwrap_or(Value::Null);
                if phase == "Running" && state["running"].is_object() {
                    return e;
                }
                let reason = ["waiting", "terminated"]
                    .iter()
                    .find_map(|k| state[k]["reason"].as_str())
                    .map(|r| format!(" ({})", sbx_core::sanitize::field(r)))
                    .unwrap_or_default();
                KubeError::NotRunning(format!(
                    "{what}: pod {pod} is {}{reason}, its container {container} not running: wait for it, or start the project again",
                    sbx_core::sanitize::field(phase)
                ))
            }
            Err(_) => e,
        }
    }

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
        self.exec_once(pod, container, argv, stdin)
            .map_err(|e| self.why_refused(pod, container, e))
    }

    fn exec_once(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> Result<Exec, KubeError> {
        use tungstenite::Message;
        let ExecRequest {
            what,
            host,
            port,
            request: req,
        } = self.exec_request(pod, container, argv, stdin.is_some(), false)?;
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
        let (mut ws, resp) = tungstenite::client::client(req, stream).map_err(|e| match e {
            tungstenite::HandshakeError::Failure(e) => handshake_failed(&what, e),
            tungstenite::HandshakeError::Interrupted(_) => KubeError::Timeout(what.clone()),
        })?;
        let proto = chosen_protocol(&what, resp.headers())?;
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

    /// `argv` in `container` of `pod` on a tty of `size` through the API
    /// server's exec: a terminal whose input goes to channel 0, whose
    /// resizes go to channel 4 (`{"Width","Height"}`), whose output is
    /// channel 1 (a tty has no stderr); it ends with the `Status` on
    /// channel 3. Connected before it returns, so a refusal (RBAC, a pod
    /// not running, an upgrade a proxy refused) is this call's error.
    /// Blocking, on a blocking thread of `rt`, whose tasks then carry it.
    pub fn exec_tty(
        &self,
        rt: &tokio::runtime::Handle,
        pod: &str,
        container: &str,
        argv: &[String],
        size: sbx_core::guestapi::Winsize,
    ) -> Result<sbx_terminal::Pty, KubeError> {
        rt.block_on(self.exec_tty_once(pod, container, argv, size))
            .map_err(|e| self.why_refused(pod, container, e))
    }

    async fn exec_tty_once(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        size: sbx_core::guestapi::Winsize,
    ) -> Result<sbx_terminal::Pty, KubeError> {
        use futures_util::{SinkExt, StreamExt};
        use sbx_terminal::{In, Out};
        use tungstenite::Message;
        let ExecRequest {
            what,
            host,
            port,
            request,
        } = self.exec_request(pod, container, argv, true, true)?;
        let down = |e: std::io::Error| KubeError::Transport(format!("{what}: {e}"));
        let connect = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(down)?;
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| KubeError::Config(format!("server {host}: {e}")))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls))
                .connect(name, tcp)
                .await
                .map_err(|e| KubeError::Tls(format!("{what}: {e}")))?;
            tokio_tungstenite::client_async(request, tls)
                .await
                .map_err(|e| handshake_failed(&what, e))
        };
        let (ws, resp) = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| KubeError::Timeout(what.clone()))??;
        chosen_protocol(&what, resp.headers())?;
        let (mut sink, mut stream) = ws.split();
        sink.send(Message::Binary(resize_message(size).into()))
            .await
            .map_err(|e| KubeError::Transport(format!("{what}: {e}")))?;
        // Hanging up drops both halves: the connection closes, the API
        // server ends the exec, and the guest's client its tmux client.
        let tasks: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let abort = Arc::clone(&tasks);
        let (out_tx, mut in_rx, pty) = sbx_terminal::Pty::new(move || {
            for t in abort.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                t.abort();
            }
        });
        let reader = tokio::spawn(async move {
            let mut status = Vec::new();
            let broke = loop {
                match stream.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        let taken = match b.first() {
                            // A full queue waits here: the socket is not read.
                            Some(1 | 2) => out_tx.send(Out::Data(b[1..].to_vec())).await.is_ok(),
                            Some(3) => {
                                status.extend_from_slice(&b[1..]);
                                true
                            }
                            _ => true,
                        };
                        if !taken {
                            return;
                        }
                    }
                    Some(Ok(Message::Close(_))) | None => break None,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Some(e.to_string()),
                }
            };
            let end = match (exit_status(&what, &status), broke) {
                (Ok(0), _) => Out::End(
                    "the terminal session ended: reconnect to start a new one".into(),
                    sbx_terminal::NORMAL,
                ),
                (Ok(n), _) => Out::End(
                    format!("the terminal ended with status {n}: reconnect to try again"),
                    sbx_terminal::ERROR,
                ),
                (Err(_), Some(e)) => Out::End(
                    format!(
                        "the cluster's exec broke ({e}): reconnect once the project runs again"
                    ),
                    sbx_terminal::ERROR,
                ),
                (Err(e), None) => Out::End(
                    format!("{e}: reconnect once the project runs again"),
                    sbx_terminal::ERROR,
                ),
            };
            let _ = out_tx.send(end).await;
        });
        let writer = tokio::spawn(async move {
            while let Some(m) = in_rx.recv().await {
                let frame = match m {
                    In::Data(d) => {
                        let mut f = Vec::with_capacity(d.len() + 1);
                        f.push(0);
                        f.extend_from_slice(&d);
                        f
                    }
                    In::Resize(s) => resize_message(s),
                };
                if sink.send(Message::Binary(frame.into())).await.is_err() {
                    return;
                }
            }
            let _ = sink.close().await;
        });
        tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([reader.abort_handle(), writer.abort_handle()]);
        Ok(pty)
    }
}

/// A resize on the exec's channel 4, as kubectl sends it.
fn resize_message(size: sbx_core::guestapi::Winsize) -> Vec<u8> {
    let mut m = vec![4u8];
    m.extend_from_slice(
        json!({"Width": size.cols, "Height": size.rows})
            .to_string()
            .as_bytes(),
    );
    m
}

/// The subprotocol the API server chose: v5 or v4, else the exec cannot
/// be read.
fn chosen_protocol(
    what: &str,
    headers: &tungstenite::http::HeaderMap,
) -> Result<String, KubeError> {
    let proto = headers
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if proto != "v5.channel.k8s.io" && proto != "v4.channel.k8s.io" {
        return Err(KubeError::Transport(format!(
            "{what}: the API server speaks exec protocol {proto:?}, not v5 or v4.channel.k8s.io"
        )));
    }
    Ok(proto)
}

/// A refused upgrade: the API server's failure status and message; an
/// answer that is no failure but no upgrade either (a proxy between that
/// does not pass WebSockets on); TLS; silence.
fn handshake_failed(what: &str, e: tungstenite::Error) -> KubeError {
    match e {
        tungstenite::Error::Http(r) => {
            let code = r.status().as_u16();
            if code < 400 {
                return KubeError::Transport(format!(
                    "{what}: the API server answered {code} to the WebSocket upgrade, not 101: does a proxy between refuse upgrades?"
                ));
            }
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
                what: what.to_owned(),
                message,
            }
        }
        e => {
            let s = e.to_string();
            if s.contains("certificate") || s.contains("tls") || s.contains("TLS") {
                KubeError::Tls(what.to_owned())
            } else if s.contains("timed out") || s.contains("WouldBlock") {
                KubeError::Timeout(what.to_owned())
            } else {
                KubeError::Transport(format!("{what}: {s}"))
            }
        }
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
/// How long a snapshot may take to be ready, and a restore's deletes.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(10 * 60);
/// How often the cluster is asked while waiting.
const POLL: Duration = Duration::from_millis(500);

/// One snapshot on the cluster: its id, its tag, its VolumeSnapshots.
pub type ClusterSnapshot = (String, Option<String>, Vec<Value>);

/// A snapshot's id: its UTC time and this process's id, as sbx-run's
/// (sorts by time; lower case, so it is a valid name part and label).
fn snapshot_id() -> String {
    let t = humantime::format_rfc3339_millis(std::time::SystemTime::now())
        .to_string()
        .replace([':', '-', '.'], "")
        .to_lowercase();
    format!(
        "{}-{:04x}",
        t.trim_end_matches('z'),
        std::process::id() & 0xffff
    )
}

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

    /// The Sandbox's pod (the controller names it after the Sandbox) and
    /// its main container's working directory: the workspace's.
    pub fn pod_of(&self, ws: &Path) -> Result<(String, Option<String>), BackendError> {
        let docs = self.manifests(ws)?;
        let sandbox = docs
            .iter()
            .find(|d| d["kind"] == "Sandbox")
            .ok_or_else(|| String::from("sbx-run's builder made no Sandbox"))?;
        let name = sandbox["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let workdir = sandbox["spec"]["podTemplate"]["spec"]["containers"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == MAIN_CONTAINER))
            .and_then(|c| c["workingDir"].as_str())
            .map(str::to_owned);
        Ok((name, workdir))
    }

    /// The Sandbox's name, as `k8s_render` names it: after the branch
    /// the checkout is on (read as a plain file, beneath the workspace).
    pub fn name(ws: &Path) -> String {
        let canonical = ws.canonicalize().unwrap_or_else(|_| ws.to_owned());
        let branch = sbx_run::workspace::host_branch(&canonical);
        let names = sbx_run::names::Names::new(&canonical, branch.as_deref());
        sbx_run::k8s::object_name(&names.container)
    }

    /// Apply `docs`, the Sandbox asked to run.
    pub fn apply_all(&self, docs: &[Value]) -> Result<String, KubeError> {
        let mut name = String::new();
        for d in docs {
            let mut d = d.clone();
            if d["kind"] == "Sandbox" {
                d["spec"]["operatingMode"] = json!("Running");
                name = d["metadata"]["name"].as_str().unwrap_or("").to_owned();
                // Its volumeClaimTemplates are immutable (the CRD's rule):
                // a live Sandbox keeps its own (one started from a
                // snapshot names it in them).
                if let Some(live) = self.api.get(SANDBOX_API, "Sandbox", &name)? {
                    let t = &live["spec"]["volumeClaimTemplates"];
                    if t.is_array() {
                        d["spec"]["volumeClaimTemplates"] = t.clone();
                    }
                }
            }
            self.api.apply(&d)?;
        }
        Ok(name)
    }

    /// Snapshot the Sandbox of `ws` (docs/kubernetes.md, Snapshots): a
    /// `VolumeSnapshot` of each claim of [`sbx_run::k8s::SNAPSHOT_CLAIMS`]
    /// it has, all with one id; done when every one is ready to use
    /// within `wait`. One that failed or is not ready by then: all of
    /// this id are deleted, so no half snapshot is listed. Its id.
    pub fn snapshot_within(
        &self,
        ws: &Path,
        tag: Option<&str>,
        wait: Duration,
    ) -> Result<String, BackendError> {
        let name = Self::name(ws);
        let sandbox = self
            .api
            .get(SANDBOX_API, "Sandbox", &name)?
            .ok_or_else(|| {
                BackendError::new(
                    ErrorKind::NotFound,
                    format!(
                        "{name}: no Sandbox on the cluster: start the project, then snapshot it"
                    ),
                )
            })?;
        let id = snapshot_id();
        let docs = sbx_run::k8s::volume_snapshots(&sandbox, &id, tag);
        if docs.is_empty() {
            return Err(BackendError::new(
                ErrorKind::Config,
                format!(
                    "{name}: the Sandbox has none of the claims a snapshot keeps (home, shelf, git-record)"
                ),
            ));
        }
        let made = (|| {
            for d in &docs {
                self.api.apply(d).map_err(|e| match e {
                    KubeError::Status { code: 404, what, .. } => BackendError::new(
                        ErrorKind::NotFound,
                        format!("cluster: {what}: 404: the cluster has no VolumeSnapshot CRD: install the CSI external-snapshotter and a driver that snapshots"),
                    ),
                    e => e.into(),
                })?;
            }
            self.ready(&docs, wait)
        })();
        if let Err(e) = made {
            let _ = self.api.delete_labelled(
                sbx_run::k8s::SNAPSHOT_API,
                "VolumeSnapshot",
                &format!(
                    "sbx.dev/sandbox={name},{}={id}",
                    sbx_run::k8s::SNAPSHOT_LABEL
                ),
            );
            return Err(e);
        }
        Ok(id)
    }

    /// Every one of `docs` (VolumeSnapshots) `readyToUse` within `wait`;
    /// one with an `error` fails at once.
    fn ready(&self, docs: &[Value], wait: Duration) -> Result<(), BackendError> {
        let until = std::time::Instant::now() + wait;
        for d in docs {
            let n = d["metadata"]["name"].as_str().unwrap_or("");
            loop {
                let got = self
                    .api
                    .get(sbx_run::k8s::SNAPSHOT_API, "VolumeSnapshot", n)?;
                let st = got.as_ref().map_or(&Value::Null, |v| &v["status"]);
                if st["readyToUse"] == true {
                    break;
                }
                if let Some(m) = st["error"]["message"].as_str() {
                    return Err(BackendError::new(
                        ErrorKind::Other,
                        format!(
                            "cluster: VolumeSnapshot/{n}: {}",
                            sbx_core::sanitize::field(m)
                        ),
                    ));
                }
                if std::time::Instant::now() >= until {
                    return Err(BackendError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "cluster: VolumeSnapshot/{n}: not ready to use in {} s: is a CSI snapshotter installed for the claims' storage class?",
                            wait.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(())
    }

    /// The snapshots of sandbox `name` on the cluster: (id, tag, its
    /// VolumeSnapshots), oldest first (ids sort by time).
    pub fn snapshots(&self, name: &str) -> Result<Vec<ClusterSnapshot>, KubeError> {
        let all = match self.api.list(
            sbx_run::k8s::SNAPSHOT_API,
            "VolumeSnapshot",
            &format!("sbx.dev/sandbox={name}"),
        ) {
            // No VolumeSnapshot CRD: no snapshots.
            Err(KubeError::Status { code: 404, .. }) => Vec::new(),
            r => r?,
        };
        let mut by: std::collections::BTreeMap<String, (Option<String>, Vec<Value>)> =
            std::collections::BTreeMap::new();
        for v in all {
            let Some(id) = v["metadata"]["labels"][sbx_run::k8s::SNAPSHOT_LABEL].as_str() else {
                continue;
            };
            let tag = v["metadata"]["annotations"][sbx_run::k8s::SNAPSHOT_TAG]
                .as_str()
                .map(str::to_owned);
            let e = by.entry(id.to_owned()).or_default();
            e.0 = e.0.take().or(tag);
            e.1.push(v);
        }
        Ok(by.into_iter().map(|(id, (t, v))| (id, t, v)).collect())
    }

    /// Make `ws`'s sandbox anew from snapshot `id` (its id or tag; None:
    /// the newest) and start it: its claims of the snapshot are made
    /// from their VolumeSnapshots through the Sandbox's
    /// `volumeClaimTemplates` (`dataSource`). Checked before anything is
    /// changed: the snapshot is this sandbox's, complete and ready, and
    /// the sandbox is stopped. Then the Sandbox is deleted with its
    /// claims orphaned (its templates are immutable; the claims the
    /// snapshot does not hold are kept and adopted again), the claims
    /// it holds deleted, each waited for within `wait`, and the
    /// manifests applied. Its name.
    pub fn start_from_snapshot_within(
        &self,
        ws: &Path,
        id: Option<&str>,
        wait: Duration,
    ) -> Result<String, BackendError> {
        let name = Self::name(ws);
        let snaps = self.snapshots(&name)?;
        let pick = match id {
            None => snaps.last(),
            Some(id) => snaps
                .iter()
                .find(|(i, t, _)| i == id || t.as_deref() == Some(id)),
        };
        let Some((sid, _, vss)) = pick else {
            return Err(BackendError::new(
                ErrorKind::NotFound,
                match id {
                    Some(id) => format!("{name}: no snapshot {id} of this sandbox on the cluster"),
                    None => format!(
                        "{name}: no snapshot of this sandbox on the cluster: take one first"
                    ),
                },
            ));
        };
        let mut claims = Vec::new();
        for v in vss {
            let n = v["metadata"]["name"].as_str().unwrap_or("");
            if v["status"]["readyToUse"] != true {
                return Err(BackendError::new(
                    ErrorKind::Conflict,
                    format!("cluster: VolumeSnapshot/{n} is not ready to use: retry once it is"),
                ));
            }
            if let Some(c) = v["metadata"]["labels"]["sbx.dev/claim"].as_str() {
                claims.push(c.to_owned());
            }
        }
        let mut docs = self.manifests(ws)?;
        let wanted = docs
            .iter()
            .find(|d| d["kind"] == "Sandbox")
            .map(sbx_run::k8s::snapshot_claims)
            .unwrap_or_default();
        if let Some(c) = wanted.iter().find(|c| !claims.contains(c)) {
            return Err(BackendError::new(
                ErrorKind::Conflict,
                format!(
                    "{name}: snapshot {sid} has no VolumeSnapshot of the claim {c}: it is incomplete, take another"
                ),
            ));
        }
        if let Some(live) = self.api.get(SANDBOX_API, "Sandbox", &name)? {
            if live["spec"]["operatingMode"] != "Suspended" {
                return Err(BackendError::new(
                    ErrorKind::Conflict,
                    format!("{name}: the sandbox runs: stop it first (its claims are in use)"),
                ));
            }
            // What is replaced is kept first, so the start can be undone.
            self.snapshot_within(ws, Some(&format!("before {sid}")), wait)?;
            self.api.delete_orphaning(SANDBOX_API, "Sandbox", &name)?;
            self.gone(SANDBOX_API, "Sandbox", &name, wait)?;
        }
        for c in &claims {
            let pvc = format!("{c}-{name}");
            self.api.delete("v1", "PersistentVolumeClaim", &pvc)?;
            self.gone("v1", "PersistentVolumeClaim", &pvc, wait)?;
        }
        sbx_run::k8s::from_snapshot(&mut docs, sid, &claims);
        Ok(self.apply_all(&docs)?)
    }

    /// Wait within `wait` for the object to be gone (its finalizers run).
    fn gone(&self, api: &str, kind: &str, name: &str, wait: Duration) -> Result<(), BackendError> {
        let until = std::time::Instant::now() + wait;
        while self.api.get(api, kind, name)?.is_some() {
            if std::time::Instant::now() >= until {
                return Err(BackendError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "cluster: {kind}/{name} is not gone after {} s (a finalizer waits: is a pod still using it?)",
                        wait.as_secs()
                    ),
                ));
            }
            std::thread::sleep(POLL);
        }
        Ok(())
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
        let mine = format!("sbx.dev/sandbox={name}");
        self.api.delete_claims(&mine)?;
        // Its snapshots too, as `rm --volumes` removes docker's.
        self.api
            .delete_labelled(sbx_run::k8s::SNAPSHOT_API, "VolumeSnapshot", &mine)
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

/// The web terminal's command in the pod: the guest's client on the
/// exec's tty, tmux's client as the agent behind it.
pub fn terminal_command(workdir: Option<&str>) -> Vec<String> {
    let mut cmd: Vec<String> = [
        "sbx-guest",
        "exec",
        "--tty",
        "--agent",
        "sbx-server",
        "--env",
        "TERM=xterm-256color",
        "--env",
        "COLORTERM=truecolor",
    ]
    .map(str::to_owned)
    .into();
    if let Some(w) = workdir {
        cmd.extend(["--cwd".to_owned(), w.to_owned()]);
    }
    cmd.push("--".into());
    cmd.extend(sbx_terminal::TMUX.map(str::to_owned));
    cmd
}

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
        let (name, workdir) = self.pod_of(ws)?;
        let cmd = guest_command(client, workdir.as_deref(), argv);
        Ok(self.api.exec(&name, MAIN_CONTAINER, &cmd, None)?)
    }

    /// The guest's client on a tty in the pod (`sbx-guest exec --tty`),
    /// through the API server's exec: it asks the guest for the PTY
    /// `sbx-run shell` gets (tmux as the agent, every guard on), relays
    /// its own tty's resizes, and ends its tmux client when the exec
    /// ends. 80x24 until the viewer's hello resizes it.
    fn terminal(&self, ws: &Path) -> crate::backend::Result<sbx_terminal::Target> {
        let (name, workdir) = self.pod_of(ws)?;
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| format!("the terminal needs the server's runtime: {e}"))?;
        let cmd = terminal_command(workdir.as_deref());
        let size = sbx_core::guestapi::Winsize { cols: 80, rows: 24 };
        let pty = self.api.exec_tty(&rt, &name, MAIN_CONTAINER, &cmd, size)?;
        Ok(sbx_terminal::Target::Connected(pty))
    }

    /// VolumeSnapshots of the home, the shelf and the git record (docs/kubernetes.md).
    fn snapshot(&self, ws: &Path, tag: Option<&str>) -> crate::backend::Result<String> {
        self.snapshot_within(ws, tag, SNAPSHOT_WAIT)
    }

    fn start_from_snapshot(&self, ws: &Path, id: Option<&str>) -> crate::backend::Result<String> {
        self.start_from_snapshot_within(ws, id, SNAPSHOT_WAIT)
    }
}
