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

mod common;
use serde_json::{Value, json};

/// Answers for some requests: (method, a part of the path, answer).
type Routes = Arc<Mutex<Vec<(&'static str, String, Answer)>>>;

/// A request as the stand-in saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    content_type: String,
    auth: String,
    body: String,
}

/// What the stand-in answers: a status and a body, or silence; an exec
/// WebSocket is served by `docker exec` in the container named as the
/// pod (as the kubelet runs it in the pod's), speaking the newest of the
/// client's offered subprotocols among `protocols`.
#[derive(Clone)]
enum Answer {
    Reply(u16, Value),
    Silent,
    Exec {
        protocols: &'static [&'static str],
    },
    /// A 200 to an upgrade: what a proxy that passes no WebSockets does.
    NoUpgrade,
    /// These in turn, the last for good (an object that goes away).
    Seq(Arc<Mutex<Vec<Answer>>>),
}

fn seq(answers: Vec<Answer>) -> Answer {
    Answer::Seq(Arc::new(Mutex::new(answers)))
}

struct Stand {
    port: u16,
    /// What it answers next (tests change it between calls).
    answer: Arc<Mutex<Answer>>,
    /// Answers for some requests: (method, a part of the path, answer),
    /// the first that matches before `answer`.
    routes: Routes,
    /// The container an exec in a pod runs in, when not named as it.
    pods: Arc<Mutex<std::collections::HashMap<String, String>>>,
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
    let answer = Arc::new(Mutex::new(answer));
    let answers = Arc::clone(&answer);
    let routes: Routes = Arc::default();
    let routed = Arc::clone(&routes);
    let pods: Arc<Mutex<std::collections::HashMap<String, String>>> = Arc::default();
    let podmap = Arc::clone(&pods);
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let log = Arc::clone(&log);
            let answers = Arc::clone(&answers);
            let routed = Arc::clone(&routed);
            let podmap = Arc::clone(&podmap);
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
                let (mut ws_key, mut offered) = (String::new(), String::new());
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
                        "sec-websocket-key" => ws_key = v.trim().to_owned(),
                        "sec-websocket-protocol" => offered = v.trim().to_owned(),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let path = target.split('?').next().unwrap_or("").to_owned();
                let answer = routed
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(m, p, _)| *m == method && path.contains(p.as_str()))
                    .map(|(_, _, a)| a.clone())
                    .unwrap_or_else(|| answers.lock().unwrap().clone());
                let answer = match answer {
                    Answer::Seq(q) => {
                        let mut q = q.lock().unwrap();
                        if q.len() > 1 {
                            q.remove(0)
                        } else {
                            q[0].clone()
                        }
                    }
                    a => a,
                };
                log.lock().unwrap().push(Seen {
                    method,
                    target: target.clone(),
                    content_type,
                    auth,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                match answer {
                    Answer::Exec { protocols } => {
                        let pods = podmap.lock().unwrap().clone();
                        serve_exec(tls, &target, &ws_key, &offered, protocols, &pods)
                    }
                    Answer::NoUpgrade => {
                        let b = "{}";
                        let _ = write!(
                            tls,
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
                            b.len()
                        );
                        let _ = tls.flush();
                    }
                    Answer::Silent => std::thread::sleep(Duration::from_secs(120)),
                    Answer::Seq(_) => unreachable!("a sequence of sequences"),
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
        answer,
        routes,
        pods,
        ca_pem: ca_cert.pem(),
        seen,
    }
}

/// The exec upgrade as the API server and kubelet serve it: 101 with the
/// chosen subprotocol, stdin (channel 0) until v5's close (255), the
/// command run by `docker exec -i`, its stdout (1) and stderr (2), then
/// the `Status` on the error channel (3) and a close.
fn serve_exec(
    mut tls: rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
    target: &str,
    key: &str,
    offered: &str,
    protocols: &[&str],
    pods: &std::collections::HashMap<String, String>,
) {
    use tungstenite::Message;
    let chosen = offered
        .split(',')
        .map(str::trim)
        .find(|p| protocols.contains(p));
    let Some(proto) = chosen else {
        let _ = write!(
            tls,
            "HTTP/1.1 400 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        return;
    };
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    write!(
        tls,
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\nsec-websocket-protocol: {proto}\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    let mut ws =
        tungstenite::WebSocket::from_raw_socket(tls, tungstenite::protocol::Role::Server, None);
    let (path, query) = target.split_once('?').unwrap();
    let pod = path.rsplit('/').nth(1).unwrap().to_owned();
    let q: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let command: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.as_str())
        .collect();
    let pod = pods.get(&pod).cloned().unwrap_or(pod);
    if q.iter().any(|(k, v)| k == "tty" && v == "true") {
        return serve_tty(ws, &pod, &command);
    }
    let mut input = Vec::new();
    if q.iter().any(|(k, v)| k == "stdin" && v == "true") {
        loop {
            match ws.read().unwrap() {
                Message::Binary(b) if b.first() == Some(&0) => input.extend_from_slice(&b[1..]),
                Message::Binary(b) if b[..] == [255, 0] => break,
                _ => {}
            }
        }
    }
    let mut child = std::process::Command::new("docker")
        .args(["exec", "-i", &pod])
        .args(&command)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    for (ch, data) in [(1u8, &out.stdout), (2, &out.stderr)] {
        if !data.is_empty() {
            let mut m = vec![ch];
            m.extend_from_slice(data);
            ws.send(Message::Binary(m.into())).unwrap();
        }
    }
    let code = out.status.code().unwrap_or(1);
    let status = if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    let mut m = vec![3u8];
    m.extend_from_slice(status.to_string().as_bytes());
    ws.send(Message::Binary(m.into())).unwrap();
    let _ = ws.close(None);
    let _ = ws.flush();
}

/// One call to the Docker engine's API on its socket (HTTP/1.0: one
/// answer, no chunks): its status and JSON body.
fn engine(method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = std::os::unix::net::UnixStream::connect("/var/run/docker.sock").unwrap();
    let b = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nhost: docker\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap();
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// An exec with a tty, as the kubelet has the runtime run it: the
/// engine's exec with `Tty`, its stream hijacked, channel 0 its input,
/// channel 4's `{"Width","Height"}` the engine's exec resize, channel 1
/// the tty's output; at its end the `Status` with its exit code.
fn serve_tty(
    mut ws: tungstenite::WebSocket<
        rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
    >,
    container: &str,
    command: &[&str],
) {
    use tungstenite::Message;
    let (code, v) = engine(
        "POST",
        &format!("/containers/{container}/exec"),
        Some(
            &json!({"AttachStdin": true, "AttachStdout": true, "AttachStderr": true,
                     "Tty": true, "Cmd": command}),
        ),
    );
    assert_eq!(code, 201, "exec create: {v}");
    let id = v["Id"].as_str().unwrap().to_owned();
    let mut raw = std::os::unix::net::UnixStream::connect("/var/run/docker.sock").unwrap();
    let b = json!({"Detach": false, "Tty": true}).to_string();
    write!(
        raw,
        "POST /exec/{id}/start HTTP/1.1\r\nhost: docker\r\ncontent-type: application/json\r\nconnection: Upgrade\r\nupgrade: tcp\r\ncontent-length: {}\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        raw.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.contains(" 101 ") || head.contains(" 200 "), "{head}");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut from = raw.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    // One thread: the WebSocket read in short turns, output sent between.
    ws.get_mut()
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    'outer: loop {
        loop {
            match rx.try_recv() {
                Ok(d) => {
                    let mut m = vec![1u8];
                    m.extend_from_slice(&d);
                    if ws.send(Message::Binary(m.into())).is_err() {
                        return;
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break 'outer,
            }
        }
        match ws.read() {
            Ok(Message::Binary(b)) => match b.first() {
                Some(0) => {
                    let _ = raw.write_all(&b[1..]);
                }
                Some(4) => {
                    let sz: Value = serde_json::from_slice(&b[1..]).unwrap();
                    let (code, v) = engine(
                        "POST",
                        &format!("/exec/{id}/resize?h={}&w={}", sz["Height"], sz["Width"]),
                        None,
                    );
                    assert!(code < 300, "resize: {code} {v}");
                }
                _ => {}
            },
            Ok(Message::Close(_))
            | Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                // The client hung up: the runtime closes the tty.
                let _ = raw.shutdown(std::net::Shutdown::Both);
                return;
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                let _ = raw.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
    let mut code = -1;
    for _ in 0..600 {
        let (_, v) = engine("GET", &format!("/exec/{id}/json"), None);
        if v["Running"] == false {
            code = v["ExitCode"].as_i64().unwrap_or(-1);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    let mut m = vec![3u8];
    m.extend_from_slice(status.to_string().as_bytes());
    let _ = ws.send(Message::Binary(m.into()));
    let _ = ws.close(None);
    let _ = ws.flush();
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
    let all = s.seen.lock().unwrap().clone();
    // The live Sandbox is read first: its claim templates are immutable.
    assert_eq!(all[1].method, "GET", "{all:?}");
    assert!(
        all[1]
            .target
            .ends_with("/sandboxes/agent-sandbox-demo-main-abc")
    );
    let seen: Vec<Seen> = all.into_iter().filter(|r| r.method != "GET").collect();
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
            "DELETE /apis/snapshot.storage.k8s.io/v1/namespaces/sbx-test/volumesnapshots?labelSelector=sbx.dev%2Fsandbox%3Dsb1",
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
            503,
            "backend_unavailable",
            "RBAC",
        ),
        (
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            404,
            "sandbox_not_found",
            "agent-sandbox controller",
        ),
        (
            status(409, "Conflict", "Apply failed with 1 conflict"),
            409,
            "sandbox_conflict",
            "retry",
        ),
        (
            status(
                422,
                "Invalid",
                "Sandbox.agents.x-k8s.io \"x\" is invalid: spec.podTemplate: Required value",
            ),
            422,
            "sandbox_config",
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
    assert_eq!(answered(&e).0, 503);
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
    assert_eq!(answered(&e).0, 503);
    assert!(s.seen.lock().unwrap().is_empty(), "no request crossed");
}

fn kubeconfig(dir: &std::path::Path, ca_pem: &str, user: &str) -> std::path::PathBuf {
    kubeconfig_at(dir, ca_pem, user, 6443)
}

fn kubeconfig_at(dir: &std::path::Path, ca_pem: &str, user: &str, port: u16) -> std::path::PathBuf {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let p = dir.join("kubeconfig");
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u, namespace: sbx-ns}}\nclusters:\n- name: k\n  cluster:\n    server: https://localhost:{port}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n{user}\n"
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
    let e = kube.start(&ws).unwrap_err().message;
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
    // stop, status and delete name the Sandbox start made.
    assert_eq!(Kube::name(&ws), name);
    let seen: Vec<Seen> = s
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == "PATCH")
        .cloned()
        .collect();
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

/// The real server on the Kubernetes backend, the stand-in its API
/// server: each failure of the cluster reaches the HTTP client as its
/// status and `{error: {code, message}}`, and the project keeps why.
#[test]
fn the_clusters_answers_reach_the_api_as_their_status() {
    let dir = tempfile::tempdir().unwrap();
    let s = stand(Answer::Reply(200, json!({})));
    let kc = kubeconfig_at(dir.path(), &s.ca_pem, "    token: tok-h45e", s.port);
    let server = common::start(&[
        "--backend",
        "kubernetes",
        "--kubeconfig",
        kc.to_str().unwrap(),
    ]);
    let (t, _) = server.session();
    let r = server.call("POST", "/projects", Some(&t), Some(json!({"name": "k"})));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "stopped", "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    let start = || server.call("POST", &format!("/projects/{id}/start"), Some(&t), None);

    // Made from no network repository: the cluster cannot clone it.
    let r = start();
    assert_eq!(
        (r.status, r.code()),
        (422, "sandbox_config"),
        "{r:?} {}",
        server.stderr.lock().unwrap()
    );
    assert!(s.seen.lock().unwrap().is_empty(), "no request crossed");

    let ws = common::workspace(&server, &id);
    let o = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(&ws)
        .args([
            "remote",
            "add",
            "origin",
            "https://git.example.invalid/k.git",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    for (answer, want, code, words) in [
        (
            status(403, "Forbidden", "sandboxes.agents.x-k8s.io is forbidden"),
            503,
            "backend_unavailable",
            "RBAC",
        ),
        (
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            404,
            "sandbox_not_found",
            "agent-sandbox controller",
        ),
        (
            status(409, "Conflict", "Apply failed with 1 conflict"),
            409,
            "sandbox_conflict",
            "retry",
        ),
        (
            status(422, "Invalid", "spec.podTemplate: Required value"),
            422,
            "sandbox_config",
            "spec.podTemplate",
        ),
        (
            status(500, "InternalError", "etcdserver: request timed out"),
            503,
            "backend_unavailable",
            "etcdserver",
        ),
    ] {
        *s.answer.lock().unwrap() = answer;
        let r = start();
        assert_eq!((r.status, r.code()), (want, code), "{r:?}");
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains(words) && !m.contains('\n'), "{m}");
        let p = server.call("GET", &format!("/projects/{id}"), Some(&t), None);
        assert_eq!(p.body["status"], "error", "{p:?}");
        assert_eq!(p.body["status_reason"], m, "{p:?}");
    }

    // Applied: running; stopped by a suspend.
    *s.answer.lock().unwrap() = Answer::Reply(200, json!({}));
    let r = start();
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("running")),
        "{r:?}"
    );
    let r = server.call("POST", &format!("/projects/{id}/stop"), Some(&t), None);
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("stopped")),
        "{r:?}"
    );
    let last = s.seen.lock().unwrap().last().unwrap().clone();
    assert_eq!(last.method, "PATCH");
    assert_eq!(last.auth, "Bearer tok-h45e");
}

/// A real container for the stand-in's exec, removed when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

/// A container of an image already on the machine (none can be pulled):
/// sbx's bootstrap one (mmdebstrap), which has a shell.
fn container() -> Option<Container> {
    let out = std::process::Command::new("docker")
        .args([
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "agent-sandbox-bootstrap",
        ])
        .output()
        .ok()?;
    let image = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .to_owned();
    let name = format!(
        "sbx-h45e-exec-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let st = std::process::Command::new("docker")
        .args(["run", "-d", "--rm", "--name", &name, &image, "sleep", "600"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    Some(Container(name))
}

/// Exec through the API server's WebSocket, v5 and the fallback to v4:
/// the bytes on stdout and stderr and the exit code are a real command's
/// in a real container, stdin reaches it and v5's close ends it.
#[test]
fn exec_runs_through_the_websocket_with_the_real_exit_code() {
    let Some(c) = container() else {
        eprintln!(
            "exec test: skipped: no agent-sandbox-bootstrap image (sbx-run build-base makes it)"
        );
        return;
    };
    let s = stand(Answer::Exec {
        protocols: &["v5.channel.k8s.io", "v4.channel.k8s.io"],
    });
    let api = api(&s);
    let sh = |script: &str| -> Vec<String> { vec!["sh".into(), "-c".into(), script.into()] };
    let x = api
        .exec(
            &c.0,
            "sandbox",
            &sh("printf 'out put'; printf 'err\\n' >&2; exit 3"),
            None,
        )
        .unwrap();
    assert_eq!(
        (x.status, x.stdout.as_slice(), x.stderr.as_slice()),
        (3, &b"out put"[..], &b"err\n"[..])
    );
    let seen = s.seen.lock().unwrap().last().unwrap().clone();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.auth, "Bearer tok-h45b");
    assert!(
        seen.target.starts_with(&format!("/api/v1/namespaces/sbx-test/pods/{}/exec?container=sandbox&stdout=true&stderr=true&stdin=false&command=sh&command=-c&command=", c.0)),
        "{}",
        seen.target
    );
    let x = api
        .exec(&c.0, "sandbox", &sh("tr a-z A-Z"), Some(b"through stdin"))
        .unwrap();
    assert_eq!((x.status, x.stdout.as_slice()), (0, &b"THROUGH STDIN"[..]));

    // An API server of v4 only: the same exit code.
    *s.answer.lock().unwrap() = Answer::Exec {
        protocols: &["v4.channel.k8s.io"],
    };
    let x = api.exec(&c.0, "sandbox", &sh("exit 42"), None).unwrap();
    assert_eq!(x.status, 42);
    // Neither: refused in one line.
    *s.answer.lock().unwrap() = Answer::Exec {
        protocols: &["v1.channel.k8s.io"],
    };
    let e = api.exec(&c.0, "sandbox", &sh("true"), None).unwrap_err();
    assert!(matches!(e, KubeError::Status { code: 400, .. }), "{e:?}");
    // Refused by RBAC: the API server's 403 before any upgrade.
    *s.answer.lock().unwrap() = status(
        403,
        "Forbidden",
        "pods \"x\" is forbidden: cannot create resource \"pods/exec\"",
    );
    let e = api.exec(&c.0, "sandbox", &sh("true"), None).unwrap_err();
    assert!(matches!(e, KubeError::Status { code: 403, .. }), "{e:?}");
    assert!(e.to_string().contains("pods/exec"), "{e}");
}

/// The backend's exec runs the guest's client in the Sandbox's pod's
/// main container, in the workspace's directory, so the guest applies
/// the agent's uid, its audit record and the guards.
#[test]
fn the_backends_exec_goes_through_the_guest() {
    use sbx_server::backend::Backend;
    let Some(c) = container() else {
        eprintln!("exec test: skipped: no agent-sandbox-bootstrap image");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = cluster_ws(dir.path());
    let s = stand(Answer::Exec {
        protocols: &["v5.channel.k8s.io"],
    });
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    let pod = kube
        .manifests(&ws)
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "Sandbox")
        .unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    // The container plays the pod: named as it.
    let st = std::process::Command::new("docker")
        .args(["rename", &c.0, &pod])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let c = Container(pod.clone());
    // This workspace's sbx-guest, as the image has it; no guest runs as
    // PID 1 here, so its client reaches no socket and says so (69).
    let guest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/sbx-guest");
    if !guest.exists() {
        eprintln!("exec test: skipped: build sbx-guest first (cargo build -p sbx-guest)");
        return;
    }
    let st = std::process::Command::new("docker")
        .arg("cp")
        .arg(&guest)
        .arg(format!("{pod}:/usr/local/bin/sbx-guest"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let x = kube
        .exec(&ws, &["sbx-backup".into(), "status".into()], "sbx-server")
        .unwrap();
    let err = String::from_utf8_lossy(&x.stderr);
    assert_eq!(x.status, 69, "{err}");
    assert!(
        err.contains("no guest API") && err.contains("/run/sbx/guest.sock"),
        "{err}"
    );
    let seen = s.seen.lock().unwrap().last().unwrap().clone();
    let q: Vec<String> =
        url::form_urlencoded::parse(seen.target.split_once('?').unwrap().1.as_bytes())
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.into_owned())
            .collect();
    assert_eq!(q[..4], ["sbx-guest", "exec", "--agent", "sbx-server"]);
    assert_eq!(q[4], "--cwd");
    assert!(q[5].starts_with('/'), "{q:?}");
    assert_eq!(q[6..], ["--", "sbx-backup", "status"]);
    drop(c);
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

/// A checkout `demo` on branch main with one commit and a network
/// origin, as a project the cluster can clone.
fn cluster_ws(dir: &std::path::Path) -> std::path::PathBuf {
    let ws = dir.join("demo");
    std::fs::create_dir_all(ws.join(".agent-sandbox")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join(".agent-sandbox/config.toml"), "").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-qm", "init"]);
    git(
        &ws,
        &[
            "remote",
            "add",
            "origin",
            "https://git.example.invalid/demo.git",
        ],
    );
    ws
}

fn requests(s: &Stand) -> Vec<String> {
    s.seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.target))
        .collect()
}

const VS: &str = "/apis/snapshot.storage.k8s.io/v1/namespaces/sbx-test/volumesnapshots";

/// A snapshot on the cluster: a VolumeSnapshot of the home, the shelf
/// and the git record of the live Sandbox, one id, applied and waited
/// for; a snapshot that fails (the CSI driver's error, or the CRD not
/// installed) leaves none of its VolumeSnapshots; no Sandbox, none made.
#[test]
fn a_snapshot_is_volume_snapshots_of_the_claims() {
    let dir = tempfile::tempdir().unwrap();
    let ws = cluster_ws(dir.path());
    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    let live = kube
        .manifests(&ws)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "Sandbox")
        .unwrap();
    let name = live["metadata"]["name"].as_str().unwrap().to_owned();
    s.routes.lock().unwrap().extend([
        (
            "GET",
            "/sandboxes/".to_owned(),
            Answer::Reply(200, live.clone()),
        ),
        (
            "GET",
            format!("{VS}/"),
            seq(vec![
                Answer::Reply(200, json!({"status": {"readyToUse": false}})),
                Answer::Reply(200, json!({"status": {"readyToUse": true}})),
            ]),
        ),
    ]);
    let id = kube
        .snapshot_within(&ws, Some("before"), Duration::from_secs(60))
        .unwrap();
    let seen = s.seen.lock().unwrap().clone();
    let applied: Vec<Value> = seen
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| {
            assert_eq!(r.content_type, "application/apply-patch+yaml");
            assert_eq!(r.auth, "Bearer tok-h45b");
            let b: Value = serde_json::from_str(&r.body).unwrap();
            assert!(
                r.target.starts_with(&format!(
                    "{VS}/{}?fieldManager=sbx-server&force=true",
                    b["metadata"]["name"].as_str().unwrap()
                )),
                "{}",
                r.target
            );
            b
        })
        .collect();
    assert_eq!(applied.len(), 3, "{seen:?}");
    for (b, claim) in applied.iter().zip(["home", "shelf", "git-record"]) {
        assert_eq!(b["kind"], "VolumeSnapshot");
        assert_eq!(b["metadata"]["name"], format!("{name}-{id}-{claim}"));
        assert_eq!(b["metadata"]["namespace"], "sbx-test");
        assert_eq!(b["metadata"]["labels"]["sbx.dev/snapshot"], id.as_str());
        assert_eq!(
            b["metadata"]["annotations"]["sbx.dev/snapshot-tag"],
            "before"
        );
        assert_eq!(
            b["spec"],
            json!({"source": {"persistentVolumeClaimName": format!("{claim}-{name}")}})
        );
    }
    // Waited for: asked until ready.
    assert!(
        seen.iter()
            .filter(|r| r.method == "GET" && r.target.starts_with(&format!("{VS}/")))
            .count()
            >= 4
    );
    let cleanup =
        format!("DELETE {VS}?labelSelector=sbx.dev%2Fsandbox%3D{name}%2Csbx.dev%2Fsnapshot%3D");
    assert!(!requests(&s).iter().any(|r| r.starts_with(&cleanup)));

    // The CSI driver's failure: one line, and nothing of it is left.
    for (route, answer, words) in [
        (
            ("GET", format!("{VS}/")),
            Answer::Reply(
                200,
                json!({"status": {"readyToUse": false,
                    "error": {"message": "rpc error: the driver does not support snapshots"}}}),
            ),
            "does not support snapshots",
        ),
        (
            ("PATCH", format!("{VS}/")),
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            "external-snapshotter",
        ),
    ] {
        s.seen.lock().unwrap().clear();
        {
            let mut r = s.routes.lock().unwrap();
            r.retain(|(m, p, _)| !(*m == route.0 && *p == route.1));
            r.insert(0, (route.0, route.1.clone(), answer));
        }
        let e = kube
            .snapshot_within(&ws, None, Duration::from_secs(60))
            .unwrap_err();
        assert!(
            e.message.contains(words) && !e.message.contains('\n'),
            "{}",
            e.message
        );
        assert!(
            requests(&s).iter().any(|r| r.starts_with(&cleanup)),
            "no cleanup: {:?}",
            requests(&s)
        );
    }

    // No Sandbox: nothing is made.
    s.seen.lock().unwrap().clear();
    s.routes.lock().unwrap().insert(
        0,
        (
            "GET",
            "/sandboxes/".to_owned(),
            status(404, "NotFound", "not found"),
        ),
    );
    let e = kube
        .snapshot_within(&ws, None, Duration::from_secs(60))
        .unwrap_err();
    assert_eq!(e.kind, sbx_server::backend::ErrorKind::NotFound, "{e:?}");
    assert!(!requests(&s).iter().any(|r| r.starts_with("PATCH")));
}

/// A start from a snapshot checks everything before it changes
/// anything (the snapshot is there, whole and ready; the sandbox is
/// stopped), snapshots what it replaces (to undo it), then deletes the
/// Sandbox with its claims orphaned, the
/// claims the snapshot holds, waits for each to be gone, and applies
/// the Sandbox with those claims made from their VolumeSnapshots.
#[test]
fn a_start_from_a_snapshot_remakes_its_claims_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = cluster_ws(dir.path());
    let s = stand(Answer::Reply(200, json!({})));
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    let mut live = kube
        .manifests(&ws)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "Sandbox")
        .unwrap();
    let name = live["metadata"]["name"].as_str().unwrap().to_owned();
    let id = "20261130t071500000-0001";
    let vs = |claim: &str, ready: bool, id: &str| {
        json!({"metadata": {"name": format!("{name}-{id}-{claim}"),
            "labels": {"sbx.dev/sandbox": name, "sbx.dev/snapshot": id, "sbx.dev/claim": claim}},
            "status": {"readyToUse": ready}})
    };
    let whole = |ready: bool| {
        json!({"items": [vs("home", ready, id), vs("shelf", true, id), vs("git-record", true, id),
                         vs("home", true, "20261130t060000000-0001")]})
    };
    let set = |routes: Vec<(&'static str, String, Answer)>| {
        s.seen.lock().unwrap().clear();
        *s.routes.lock().unwrap() = routes;
    };
    let changed = || {
        requests(&s)
            .into_iter()
            .filter(|r| !r.starts_with("GET"))
            .collect::<Vec<_>>()
    };

    // Refused, nothing changed: a running sandbox; a snapshot not ready;
    // one not whole; an id the sandbox has none of.
    live["spec"]["operatingMode"] = json!("Running");
    for (list, id_asked, kind, words) in [
        (whole(true), Some(id), "Conflict", "stop it first"),
        (whole(false), Some(id), "Conflict", "not ready"),
        (
            json!({"items": [vs("home", true, id), vs("shelf", true, id)]}),
            None,
            "Conflict",
            "git-record",
        ),
        (whole(true), Some("nope"), "NotFound", "no snapshot nope"),
    ] {
        set(vec![
            ("GET", VS.to_owned(), Answer::Reply(200, list)),
            (
                "GET",
                "/sandboxes/".into(),
                Answer::Reply(200, live.clone()),
            ),
        ]);
        let e = kube
            .start_from_snapshot_within(&ws, id_asked, Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(format!("{:?}", e.kind), kind, "{e:?}");
        assert!(e.message.contains(words), "{}", e.message);
        assert_eq!(changed(), Vec::<String>::new(), "changed before refusing");
    }

    // Stopped: remade from the newest snapshot (None), by its tag too.
    live["spec"]["operatingMode"] = json!("Suspended");
    let pvc = |c: &str| format!("/api/v1/namespaces/sbx-test/persistentvolumeclaims/{c}-{name}");
    set(vec![
        (
            "GET",
            format!("{VS}/"),
            Answer::Reply(200, json!({"status": {"readyToUse": true}})),
        ),
        ("GET", VS.to_owned(), Answer::Reply(200, whole(true))),
        (
            "GET",
            "/sandboxes/".into(),
            seq(vec![
                Answer::Reply(200, live.clone()),
                Answer::Reply(200, live.clone()),
                Answer::Reply(200, live.clone()),
                status(404, "NotFound", "gone"),
            ]),
        ),
        (
            "GET",
            pvc("home"),
            seq(vec![
                Answer::Reply(200, json!({})),
                status(404, "NotFound", "gone"),
            ]),
        ),
        (
            "GET",
            "/persistentvolumeclaims/".into(),
            status(404, "NotFound", "gone"),
        ),
    ]);
    let started = kube
        .start_from_snapshot_within(&ws, None, Duration::from_secs(60))
        .unwrap();
    assert_eq!(started, name);
    let seen = s.seen.lock().unwrap().clone();
    let sb = format!("/apis/agents.x-k8s.io/v1beta1/namespaces/sbx-test/sandboxes/{name}");
    let order: Vec<String> = changed();
    // First, what is replaced is snapshotted: the start can be undone.
    let undo: Vec<Value> = seen
        .iter()
        .filter(|r| r.method == "PATCH" && r.target.starts_with(VS))
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    assert_eq!(undo.len(), 3, "{order:?}");
    assert!(
        order[..3]
            .iter()
            .all(|r| r.starts_with(&format!("PATCH {VS}/")))
    );
    assert_eq!(
        undo[0]["metadata"]["annotations"]["sbx.dev/snapshot-tag"],
        format!("before {id}")
    );
    let order = order[3..].to_vec();
    assert_eq!(
        order[..4],
        [
            format!("DELETE {sb}"),
            format!("DELETE {}", pvc("home")),
            format!("DELETE {}", pvc("shelf")),
            format!("DELETE {}", pvc("git-record")),
        ],
        "{order:?}"
    );
    let del = seen.iter().find(|r| r.method == "DELETE").unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&del.body).unwrap()["propagationPolicy"],
        "Orphan"
    );
    // Each waited for: the Sandbox and the home asked until gone.
    let all = requests(&s);
    let pos = |r: &str| all.iter().position(|x| x == r).unwrap();
    assert!(pos(&format!("DELETE {}", pvc("shelf"))) > pos(&format!("GET {}", pvc("home"))) + 1);
    let applied: Value = serde_json::from_str(
        &seen
            .iter()
            .find(|r| r.method == "PATCH" && r.target.starts_with(&sb))
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(applied["spec"]["operatingMode"], "Running");
    for t in applied["spec"]["volumeClaimTemplates"].as_array().unwrap() {
        let c = t["metadata"]["name"].as_str().unwrap();
        if ["home", "shelf", "git-record"].contains(&c) {
            assert_eq!(
                t["spec"]["dataSource"],
                json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                       "name": format!("{name}-{id}-{c}")}),
                "{c}"
            );
        } else {
            assert!(t["spec"]["dataSource"].is_null(), "{c} is kept as it is");
            assert!(
                !order.contains(&format!("DELETE {}", pvc(c))),
                "{c} deleted"
            );
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// `GET /terminal/{id}` opened as ttyd's client opens it, or the
/// status and JSON body it was refused with.
async fn open_terminal(base: &str, id: &str, token: &str) -> Result<Ws, (u16, Value)> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!(
        "{}/terminal/{id}?token={token}",
        base.replacen("http://", "ws://", 1)
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "tty".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err((
            r.status().as_u16(),
            r.body()
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null),
        )),
        Err(e) => panic!("connecting: {e}"),
    }
}

/// A project of the real server on the Kubernetes backend, started
/// (the stand-in took its manifests): (server, token, id, workspace).
fn kube_project(
    s: &Stand,
    dir: &std::path::Path,
) -> (common::Server, String, String, std::path::PathBuf) {
    let kc = kubeconfig_at(dir, &s.ca_pem, "    token: tok-h45t", s.port);
    let server = common::start(&[
        "--backend",
        "kubernetes",
        "--kubeconfig",
        kc.to_str().unwrap(),
    ]);
    let (t, _) = server.session();
    let r = server.call("POST", "/projects", Some(&t), Some(json!({"name": "kt"})));
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    let ws = common::workspace(&server, &id);
    let o = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(&ws)
        .args([
            "remote",
            "add",
            "origin",
            "https://git.example.invalid/kt.git",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = server.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?} {}", server.stderr.lock().unwrap());
    (server, t, id, ws)
}

/// The terminal on the Kubernetes backend is the API server's exec,
/// opened before the upgrade: what the cluster refuses is the viewer's
/// HTTP answer, with the API's status for it. RBAC's 403 is 503
/// `backend_unavailable`; a pod not running (the exec's 400 or 404,
/// then the pod read) 409 `not_running` naming its state; an answer
/// that is no upgrade (a proxy that passes no WebSockets) 503.
#[test]
fn the_terminal_answers_the_clusters_refusals_before_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let s = stand(Answer::Reply(200, json!({})));
    let (server, t, id, ws) = kube_project(&s, dir.path());
    let pod = Kube::name(&ws);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pending = json!({"status": {"phase": "Pending", "containerStatuses": [
        {"name": "sandbox", "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
    for (exec, pod_answer, want, code, words) in [
        (
            status(
                403,
                "Forbidden",
                "pods \"x\" is forbidden: cannot create resource \"pods/exec\"",
            ),
            None,
            503,
            "backend_unavailable",
            "pods/exec",
        ),
        (
            status(
                400,
                "BadRequest",
                "container sandbox is not valid for pod x",
            ),
            Some(Answer::Reply(200, pending.clone())),
            409,
            "not_running",
            "Pending (ContainerCreating)",
        ),
        (
            status(404, "NotFound", "pods \"x\" not found"),
            Some(status(404, "NotFound", "pods \"x\" not found")),
            409,
            "not_running",
            "no pod",
        ),
        (
            Answer::NoUpgrade,
            None,
            503,
            "backend_unavailable",
            "not 101",
        ),
    ] {
        s.seen.lock().unwrap().clear();
        let mut routes = vec![("GET", "/exec".to_owned(), exec)];
        if let Some(a) = pod_answer {
            routes.push(("GET", format!("/pods/{pod}"), a));
        }
        *s.routes.lock().unwrap() = routes;
        let (got, body) = rt
            .block_on(open_terminal(&server.base, &id, &t))
            .map(drop)
            .expect_err("no upgrade");
        assert_eq!(
            (got, body["error"]["code"].as_str().unwrap()),
            (want, code),
            "{body}"
        );
        let m = body["error"]["message"].as_str().unwrap();
        assert!(m.contains(words) && !m.contains('\n'), "{m}");
        let exec = s
            .seen
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.target.contains("/exec?"))
            .cloned()
            .expect("an exec was asked for");
        assert_eq!(exec.auth, "Bearer tok-h45t");
        assert!(
            exec.target.contains(&format!("/namespaces/sbx-ns/pods/{pod}/exec?container=sandbox&stdout=true&stderr=false&stdin=true&tty=true&command=sbx-guest&command=exec&command=--tty")),
            "{}",
            exec.target
        );
    }
}

/// The web terminal on the Kubernetes backend, end to end: a WebSocket
/// client speaking ttyd's framing to the real sbx-server, whose
/// backend opens the stand-in API server's exec with a tty; the
/// stand-in has the engine run it as the kubelet has the runtime run it
/// (an exec with a tty, its resize), in a real sandbox playing the pod,
/// where this build's `sbx-guest exec --tty` asks the guest for tmux
/// on a PTY as the agent. Bytes both ways, a resize `stty size` sees,
/// `exit` closing the session normally, the session recorded.
#[test]
fn the_terminal_runs_through_the_api_servers_exec() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    if !(sbx_e2e::prerequisite(sbx_e2e::is_root(), "root (workspaces go to uid 1000)")
        && sbx_e2e::base_image())
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = stand(Answer::Reply(200, json!({})));
    let (server, t, id, ws) = kube_project(&s, dir.path());
    let pod = Kube::name(&ws);
    // The pod: a real sandbox, in branch mode on the project's branch, so
    // the pod's working directory (the shelf) is there too.
    let branch = sbx_run::workspace::host_branch(&ws).unwrap();
    let repo = sbx_e2e::Repo::new("kpod");
    repo.git(&["init", "-q", "-b", "sbx-base"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.git(&["branch", &branch]);
    struct Rm(std::path::PathBuf, String);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = sbx_e2e::sbx()
                .args(["-q", "rm", "--volumes", "--force", "--branch", &self.1])
                .arg(&self.0)
                .output();
        }
    }
    let _rm = Rm(repo.path.clone(), branch.clone());
    for args in [&["-q", "init"][..], &["start", "--branch", &branch]] {
        let o = sbx_e2e::sbx().args(args).arg(&repo.path).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", sbx_e2e::text(&o));
    }
    let canonical = repo.path.canonicalize().unwrap();
    let container = sbx_run::names::Names::new(&canonical, Some(&branch)).container;
    s.pods.lock().unwrap().insert(pod.clone(), container);
    *s.routes.lock().unwrap() = vec![(
        "GET",
        "/exec".to_owned(),
        Answer::Exec {
            protocols: &["v5.channel.k8s.io", "v4.channel.k8s.io"],
        },
    )];
    let nonce = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let wait = Duration::from_secs(90);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut term = open_terminal(&server.base, &id, &t)
            .await
            .unwrap_or_else(|e| panic!("{e:?} {}", server.stderr.lock().unwrap()));
        let mut out = String::new();
        let mut closed: Option<u16> = None;
        // Read until the output holds `needle` (false at a close).
        async fn until(
            term: &mut Ws,
            out: &mut String,
            closed: &mut Option<u16>,
            needle: &str,
            wait: Duration,
        ) -> bool {
            let deadline = tokio::time::Instant::now() + wait;
            while !out.contains(needle) {
                if closed.is_some() {
                    return false;
                }
                match tokio::time::timeout_at(deadline, term.next()).await {
                    Err(_) => return false,
                    Ok(Some(Ok(Message::Binary(b)))) if b.first() == Some(&b'0') => {
                        out.push_str(&String::from_utf8_lossy(&b[1..]))
                    }
                    Ok(Some(Ok(Message::Close(f)))) => {
                        *closed = Some(f.map_or(0, |f| f.code.into()))
                    }
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err(_)) | None) => *closed = Some(0),
                }
            }
            true
        }
        let send = |t: String| Message::Binary(t.into_bytes().into());
        term.send(send(
            json!({"AuthToken": "", "columns": 80, "rows": 24}).to_string(),
        ))
        .await
        .unwrap();
        term.send(send(format!("0echo uid-$(id -u)-$((6*7))-{nonce}\r")))
            .await
            .unwrap();
        assert!(
            until(
                &mut term,
                &mut out,
                &mut closed,
                &format!("uid-1000-42-{nonce}"),
                wait
            )
            .await,
            "no echo as the agent: {out}"
        );
        // A resize reaches the pane through channel 4 and the guest's PTY
        // (tmux keeps a row for its status line); asked until applied.
        term.send(send(r#"1{"columns":100,"rows":30}"#.into()))
            .await
            .unwrap();
        let mut sized = false;
        for i in 0..20 {
            term.send(send(format!("0stty size; echo {i}-sz-{nonce}\r")))
                .await
                .unwrap();
            if until(
                &mut term,
                &mut out,
                &mut closed,
                &format!("29 100\r\n{i}-sz-{nonce}"),
                wait / 20,
            )
            .await
            {
                sized = true;
                break;
            }
        }
        assert!(sized, "the resize did not reach the pane: {out}");
        // Exit: tmux's session ends, so does the exec, and the viewer's
        // socket closes normally.
        term.send(send("0exit\r".into())).await.unwrap();
        until(&mut term, &mut out, &mut closed, "\u{0}never\u{0}", wait).await;
        assert_eq!(closed, Some(1000), "{out}");
    });
    let exec = s
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.target.contains("/exec?"))
        .cloned()
        .unwrap();
    let q: Vec<String> =
        url::form_urlencoded::parse(exec.target.split_once('?').unwrap().1.as_bytes())
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.into_owned())
            .collect();
    // Recorded as on Docker: the input and the output in the session's
    // asciicast (written to its end once the viewer's socket closed).
    let casts = server.state.join("projects").join(&id).join("sessions");
    let mut text = String::new();
    for _ in 0..60 {
        text = std::fs::read_dir(&casts)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        if text.contains("session ended") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let events: Vec<Value> = text
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let has = |kind: &str, needle: &str| {
        events
            .iter()
            .any(|e| e[1] == kind && e[2].as_str().is_some_and(|t| t.contains(needle)))
    };
    assert!(has("i", "echo uid-$(id -u)"), "no input event: {text}");
    assert!(
        has("o", &format!("uid-1000-42-{nonce}")),
        "no output event: {text}"
    );
    assert!(has("r", "100x30"), "no resize event: {text}");
    let kube = Kube {
        api: api(&s),
        image: None,
    };
    let (name, workdir) = kube.pod_of(&ws).unwrap();
    assert_eq!(name, pod);
    assert_eq!(q, sbx_server::kube::terminal_command(workdir.as_deref()));
}

/// Against a real cluster with the agent-sandbox controller and a CSI
/// driver that snapshots: SBX_KUBECONFIG, SBX_KUBE_REPO (a repository
/// the cluster can clone) and SBX_KUBE_IMAGE (sbx's image pushed to its
/// registry). The terminal as the agent, a resize, `exit`; a snapshot
/// of the stopped sandbox, a home file removed after it, and the start
/// from the snapshot bringing it back. Skipped without them.
#[test]
fn live_cluster_terminal_and_snapshot() {
    use sbx_server::backend::Backend;
    use sbx_terminal::{In, Out};
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(path), Some(repo), Some(image)) = (
        var("SBX_KUBECONFIG"),
        var("SBX_KUBE_REPO"),
        var("SBX_KUBE_IMAGE"),
    ) else {
        eprintln!(
            "live_cluster_terminal_and_snapshot: skipped: SBX_KUBECONFIG, SBX_KUBE_REPO and SBX_KUBE_IMAGE are not all set"
        );
        return;
    };
    let kube = Kube {
        api: Api::new(load_kubeconfig(std::path::Path::new(&path)).unwrap()).unwrap(),
        image: Some(image),
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join(format!("live-{}", std::process::id()));
    std::fs::create_dir_all(ws.join(".agent-sandbox")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join(".agent-sandbox/config.toml"), "").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-qm", "init"]);
    git(&ws, &["remote", "add", "origin", &repo]);
    struct Gone<'a>(&'a Kube, String);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            let _ = self.0.remove(&self.1);
        }
    }
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let until = std::time::Instant::now() + Duration::from_secs(600);
        while !ok() {
            assert!(
                std::time::Instant::now() < until,
                "{what}: not in 10 minutes"
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    };
    let name = kube.start(&ws).unwrap();
    let _gone = Gone(&kube, name.clone());
    let ready = || kube.state(&name).unwrap() == Some(true);
    let no_pod = || kube.api.get("v1", "Pod", &name).unwrap().is_none();
    wait_for("ready", &ready);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in = rt.enter();
    let sbx_terminal::Target::Connected(mut pty) = kube.terminal(&ws).unwrap() else {
        panic!("not connected");
    };
    rt.block_on(async {
        let mut out = String::new();
        let mut read_until = async |pty: &mut sbx_terminal::Pty, needle: &str| -> Option<u16> {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while !out.contains(needle) {
                match tokio::time::timeout_at(deadline, pty.output.recv()).await {
                    Ok(Some(Out::Data(d))) => out.push_str(&String::from_utf8_lossy(&d)),
                    Ok(Some(Out::End(_, code))) => return Some(code),
                    Ok(None) | Err(_) => return Some(0),
                }
            }
            None
        };
        let input = |t: &str| In::Data(t.as_bytes().to_vec());
        pty.input
            .send(input("echo uid-$(id -u)-$((6*7))\r"))
            .await
            .unwrap();
        assert_eq!(read_until(&mut pty, "uid-1000-42").await, None);
        pty.input
            .send(In::Resize(sbx_core::guestapi::Winsize {
                cols: 100,
                rows: 30,
            }))
            .await
            .unwrap();
        pty.input
            .send(input("sleep 1; stty size; echo sized\r"))
            .await
            .unwrap();
        assert_eq!(read_until(&mut pty, "29 100\r\nsized").await, None);
        pty.input
            .send(input("echo kept > ~/snap-h45t; exit\r"))
            .await
            .unwrap();
        assert_eq!(read_until(&mut pty, "\u{0}never").await, Some(1000));
    });

    // A snapshot of the stopped sandbox; the file removed; the start from
    // the snapshot has it again.
    kube.suspend(&name).unwrap();
    wait_for("the pod gone", &no_pod);
    let id = kube
        .snapshot_within(&ws, Some("live"), Duration::from_secs(600))
        .unwrap();
    kube.start(&ws).unwrap();
    wait_for("ready again", &ready);
    let sh = |script: &str| {
        kube.exec(&ws, &["sh".into(), "-c".into(), script.into()], "sbx-live")
            .unwrap()
    };
    assert_eq!(sh("rm ~/snap-h45t").status, 0);
    kube.suspend(&name).unwrap();
    wait_for("the pod gone again", &no_pod);
    kube.start_from_snapshot_within(&ws, Some(&id), Duration::from_secs(600))
        .unwrap();
    wait_for("ready from the snapshot", &ready);
    let x = sh("cat ~/snap-h45t");
    assert_eq!((x.status, x.stdout.as_slice()), (0, &b"kept\n"[..]));
}
