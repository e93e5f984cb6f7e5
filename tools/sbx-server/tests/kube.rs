//! The Kubernetes backend against a local HTTPS stand-in of an API server
//! (no kube-apiserver can be installed here: docs/kubernetes.md): the
//! requests it builds, and each failure as one line and the server's
//! `{error: {code, message}}` status. `live_cluster` runs against a real
//! cluster only with SBX_KUBECONFIG set.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use sbx_server::kube::{Api, Kube, KubeError, Target, load_kubeconfig};
use serde_json::{Value, json};

/// A request as the stand-in saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    content_type: String,
    auth: String,
    body: String,
}

/// What the stand-in answers: a status and a body, or silence.
#[derive(Clone)]
enum Answer {
    Reply(u16, Value),
    Silent,
}

struct Stand {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn ca() -> (CertificateParams, KeyPair) {
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    (p, KeyPair::generate().unwrap())
}

/// An HTTPS API server on loopback answering every request with `answer`.
fn stand(answer: Answer) -> Stand {
    let (params, ca_key) = ca();
    let ca_cert = params.clone().self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &Issuer::new(params, ca_key))
        .unwrap();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let log = Arc::clone(&log);
            let answer = answer.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut r = BufReader::new(&mut tls);
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return; // a client that refused the certificate
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or("").to_owned();
                let target = parts.next().unwrap_or("").to_owned();
                let (mut len, mut content_type, mut auth) = (0, String::new(), String::new());
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap();
                    match k.to_ascii_lowercase().as_str() {
                        "content-length" => len = v.trim().parse().unwrap(),
                        "content-type" => content_type = v.trim().to_owned(),
                        "authorization" => auth = v.trim().to_owned(),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                log.lock().unwrap().push(Seen {
                    method,
                    target,
                    content_type,
                    auth,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                match answer {
                    Answer::Silent => std::thread::sleep(Duration::from_secs(120)),
                    Answer::Reply(code, v) => {
                        let b = v.to_string();
                        let _ = write!(
                            tls,
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
                            b.len()
                        );
                        let _ = tls.flush();
                    }
                }
            });
        }
    });
    Stand {
        port,
        ca_pem: ca_cert.pem(),
        seen,
    }
}

fn target(s: &Stand) -> Target {
    Target {
        server: format!("https://localhost:{}", s.port),
        ca_pem: Some(s.ca_pem.clone().into_bytes()),
        token: Some("tok-h45b".into()),
        namespace: "sbx-test".into(),
    }
}

fn api(s: &Stand) -> Api {
    Api::with_timeout(target(s), Duration::from_secs(3)).unwrap()
}

/// The API server's failure body.
fn status(code: u16, reason: &str, message: &str) -> Answer {
    Answer::Reply(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "message": message, "code": code}),
    )
}

fn sandbox_doc() -> Value {
    json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
           "metadata": {"name": "agent-sandbox-demo-main-abc"},
           "spec": {"podTemplate": {"spec": {"containers": []}}}})
}

/// The status and JSON body the server answers for `e`.
fn answered(e: &KubeError) -> (u16, Value) {
    let r = e.api_error().into_response();
    let code = r.status().as_u16();
    let body = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(axum::body::to_bytes(r.into_body(), 1 << 20))
        .unwrap();
    (code, serde_json::from_slice(&body).unwrap())
}

#[test]
fn apply_is_a_server_side_apply_with_the_token() {
    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    let name = kube
        .apply_all(&[
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "agent-sandbox-demo-main-abc-files"}}),
            sandbox_doc(),
        ])
        .unwrap();
    assert_eq!(name, "agent-sandbox-demo-main-abc");
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(
        seen[0].target,
        "/api/v1/namespaces/sbx-test/configmaps/agent-sandbox-demo-main-abc-files?fieldManager=sbx-server&force=true"
    );
    assert_eq!(
        seen[1].target,
        "/apis/agents.x-k8s.io/v1beta1/namespaces/sbx-test/sandboxes/agent-sandbox-demo-main-abc?fieldManager=sbx-server&force=true"
    );
    for r in &seen {
        assert_eq!(r.content_type, "application/apply-patch+yaml");
        assert_eq!(r.auth, "Bearer tok-h45b");
    }
    let body: Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(body["metadata"]["namespace"], "sbx-test");
    assert_eq!(body["spec"]["operatingMode"], "Running");
}

#[test]
fn stop_suspends_and_delete_keeps_going_past_404() {
    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    kube.suspend("sb1").unwrap();
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(seen[0].content_type, "application/merge-patch+json");
    assert_eq!(
        serde_json::from_str::<Value>(&seen[0].body).unwrap(),
        json!({"spec": {"operatingMode": "Suspended"}})
    );

    // Everything already gone: delete is done, status is "none".
    let gone = stand(status(404, "NotFound", "sandboxes \"sb1\" not found"));
    let kube = Kube {
        api: api(&gone),
        image: None,
    };
    kube.remove("sb1").unwrap();
    let targets: Vec<String> = gone
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.target))
        .collect();
    assert_eq!(
        targets,
        [
            "DELETE /apis/agents.x-k8s.io/v1beta1/namespaces/sbx-test/sandboxes/sb1",
            "DELETE /api/v1/namespaces/sbx-test/configmaps/sb1-files",
            "DELETE /apis/networking.k8s.io/v1/namespaces/sbx-test/networkpolicies/sb1",
            "DELETE /api/v1/namespaces/sbx-test/persistentvolumeclaims?labelSelector=sbx.dev%2Fsandbox%3Dsb1",
        ]
    );
    assert_eq!(kube.state("sb1").unwrap(), None);
}

#[test]
fn ready_and_suspended_are_read_from_the_sandbox() {
    let ready = json!({"spec": {"operatingMode": "Running"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let s = stand(Answer::Reply(200, ready));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    assert_eq!(kube.state("sb1").unwrap(), Some(true));
    let s = stand(Answer::Reply(
        200,
        json!({"spec": {"operatingMode": "Suspended"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    ));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    assert_eq!(kube.state("sb1").unwrap(), Some(false));
}

#[test]
fn each_failure_is_one_line_and_its_status() {
    for (answer, code, err_code, words) in [
        (
            status(
                403,
                "Forbidden",
                "sandboxes.agents.x-k8s.io is forbidden: User \"system:serviceaccount:sbx:sbx-server\" cannot patch",
            ),
            502,
            "cluster_forbidden",
            "403",
        ),
        (
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            502,
            "cluster_not_found",
            "agent-sandbox controller",
        ),
        (
            status(409, "Conflict", "Apply failed with 1 conflict"),
            409,
            "cluster_conflict",
            "retry",
        ),
        (
            status(
                422,
                "Invalid",
                "Sandbox.agents.x-k8s.io \"x\" is invalid: spec.podTemplate: Required value",
            ),
            422,
            "cluster_invalid",
            "spec.podTemplate",
        ),
    ] {
        let s = stand(answer);
        let e = api(&s).apply(&sandbox_doc()).unwrap_err();
        let line = e.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains(words), "{line}");
        assert!(
            line.contains("apply Sandbox/agent-sandbox-demo-main-abc"),
            "{line}"
        );
        let (status, body) = answered(&e);
        assert_eq!(status, code, "{line}");
        assert_eq!(body["error"]["code"], err_code);
        assert_eq!(body["error"]["message"], line);
    }
}

#[test]
fn a_silent_server_is_a_timeout() {
    let s = stand(Answer::Silent);
    let e = api(&s).get("v1", "ConfigMap", "x").unwrap_err();
    assert!(matches!(e, KubeError::Timeout(_)), "{e:?}");
    assert!(e.to_string().contains("no answer in time"), "{e}");
    assert_eq!(answered(&e).0, 504);
}

#[test]
fn a_server_of_another_ca_is_a_tls_error() {
    let s = stand(Answer::Reply(200, json!({})));
    let other = stand(Answer::Reply(200, json!({})));
    let mut t = target(&s);
    t.ca_pem = Some(other.ca_pem.clone().into_bytes());
    let e = Api::with_timeout(t, Duration::from_secs(3))
        .unwrap()
        .get("v1", "ConfigMap", "x")
        .unwrap_err();
    assert!(matches!(e, KubeError::Tls(_)), "{e:?}");
    assert_eq!(answered(&e).0, 502);
    assert!(s.seen.lock().unwrap().is_empty(), "no request crossed");
}

fn kubeconfig(dir: &std::path::Path, ca_pem: &str, user: &str) -> std::path::PathBuf {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let p = dir.join("kubeconfig");
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u, namespace: sbx-ns}}\nclusters:\n- name: k\n  cluster:\n    server: https://localhost:6443\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n{user}\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn kubeconfig_gives_server_ca_token_namespace_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let s = stand(Answer::Reply(200, json!({})));
    let t = load_kubeconfig(&kubeconfig(dir.path(), &s.ca_pem, "    token: abc")).unwrap();
    assert_eq!(t.server, "https://localhost:6443");
    assert_eq!(t.token.as_deref(), Some("abc"));
    assert_eq!(t.namespace, "sbx-ns");
    assert_eq!(t.ca_pem.as_deref(), Some(s.ca_pem.as_bytes()));
    let e = load_kubeconfig(&kubeconfig(
        dir.path(),
        &s.ca_pem,
        "    client-certificate-data: AAAA",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("users.u.client-certificate-data: not supported"),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

/// Against a real cluster: SBX_KUBECONFIG names its kubeconfig. Skipped
/// otherwise, CI included: no cluster is reachable from these machines.
#[test]
fn live_cluster() {
    let Some(path) = std::env::var_os("SBX_KUBECONFIG") else {
        eprintln!("live_cluster: skipped: SBX_KUBECONFIG is not set (no cluster here)");
        return;
    };
    let api = Api::new(load_kubeconfig(std::path::Path::new(&path)).unwrap()).unwrap();
    let name = format!("sbx-live-{}", std::process::id());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {"k": "v"}});
    api.apply(&cm).unwrap();
    let got = api.get("v1", "ConfigMap", &name).unwrap().unwrap();
    assert_eq!(got["data"]["k"], "v");
    api.delete("v1", "ConfigMap", &name).unwrap();
    assert_eq!(api.get("v1", "ConfigMap", &name).unwrap(), None);
}

/// `--backend kubernetes` with a kubeconfig it cannot use: one line,
/// exit 78, before the server makes anything.
#[test]
fn serve_refuses_a_bad_kubeconfig_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sbx-server"))
            .args(["serve", "--state-dir"])
            .arg(dir.path().join("state"))
            .args(args)
            .env("JWT_SECRET", "x".repeat(40))
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    let bad = kubeconfig(
        dir.path(),
        "no certificate here",
        "    exec: {command: aws}",
    );
    let out = run(&[
        "--backend",
        "kubernetes",
        "--kubeconfig",
        bad.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("users.u.exec: not supported"), "{err}");
    assert!(!dir.path().join("state").exists(), "nothing made");

    let out = run(&["--backend", "kubernetes"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kubeconfig"));
    let out = run(&["--backend", "podman"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("podman"));
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// start applies what sbx-run's builder makes for the workspace, cloning
/// its origin; a host-path origin is refused before any request.
#[test]
fn start_applies_sbx_runs_manifests_for_the_workspace() {
    use sbx_server::backend::Backend;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("demo");
    std::fs::create_dir_all(ws.join(".agent-sandbox")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "demo\n").unwrap();
    std::fs::write(ws.join(".agent-sandbox/config.toml"), "").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-qm", "init"]);
    git(&ws, &["remote", "add", "origin", "/srv/repos/demo.git"]);

    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: Some("registry.invalid/sbx-base:1".into()),
    };
    let e = kube.start(&ws).unwrap_err();
    assert!(e.contains("not a URL the cluster can clone"), "{e}");
    assert!(s.seen.lock().unwrap().is_empty());

    git(
        &ws,
        &[
            "remote",
            "set-url",
            "origin",
            "https://git.example.invalid/demo.git",
        ],
    );
    let name = kube.start(&ws).unwrap();
    let seen = s.seen.lock().unwrap().clone();
    let kinds: Vec<String> = seen
        .iter()
        .map(|r| {
            let b: Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(b["metadata"]["namespace"], "sbx-test");
            b["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Sandbox", "NetworkPolicy"]);
    let sandbox: Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(sandbox["metadata"]["name"], name.as_str());
    assert_eq!(sandbox["spec"]["operatingMode"], "Running");
    assert_eq!(
        sandbox["metadata"]["annotations"]["sbx.dev/repo"],
        "https://git.example.invalid/demo.git"
    );
    let text = sandbox.to_string();
    assert!(
        text.contains("registry.invalid/sbx-base:1"),
        "the image given"
    );
    assert!(
        text.contains("/usr/local/bin/sbx-fw"),
        "the firewall's init container"
    );
}

/// No sshd is published under Kubernetes yet: the server refuses a
/// project made with `"ssh": true` (409 ssh_unsupported) rather than
/// hand out a key nothing lets in.
#[test]
fn kubernetes_publishes_no_sshd() {
    use sbx_server::backend::Backend;
    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    assert!(!kube.ssh());
    assert!(sbx_server::backend::Docker.ssh());
}
