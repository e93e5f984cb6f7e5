//! The test bed: one real Postgres cluster per test binary (initdb in a
//! temporary directory under /var/tmp, its own socket directory, no TCP)
//! and real `sbx-server` processes on it, each with its own database.
//! Statics are never dropped, so a watchdog process stops the cluster and
//! the servers when the test binary exits, however it exits.
#![allow(dead_code)] // each test binary uses its own part of the bed

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sbx_server::pg::LocalCluster;
use serde_json::{Value, json};

pub const SECRET: &str = "test-secret-that-is-long-enough-for-hs256!";

pub struct Cluster {
    pub pg: LocalCluster,
    pub dir: tempfile::TempDir,
}

/// After this test process is gone: `then` (a shell command line).
fn when_gone(then: &str) {
    let script = format!(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; {then}",
        std::process::id()
    );
    // -f: setsid forks and returns at once; the watchdog outlives us.
    let st = Command::new("setsid")
        .args(["-f", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("watchdog");
    assert!(st.success(), "watchdog: {st}");
}

pub fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("sbx-server-test-")
            .tempdir_in("/var/tmp")
            .unwrap();
        // The cluster's user (postgres, when we are root) passes through.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .unwrap();
        let pg = LocalCluster::start(&dir.path().join("pg")).expect("a local Postgres cluster");
        let pid = dir.path().join("pg/data/postmaster.pid");
        when_gone(&format!(
            "read p < {pid} && kill -INT $p; n=0; \
             while [ -e {pid} ] && [ $n -lt 120 ]; do sleep 1; n=$((n+1)); done; rm -rf {dir}",
            pid = pid.display(),
            dir = dir.path().display()
        ));
        Cluster { pg, dir }
    })
}

/// Workspaces whose sandboxes a failing run would leave: removed on drop
/// (as sbx_e2e::Repo does), before the server and its state go.
pub struct Cleanup(pub Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for ws in self.0.iter().filter(|w| w.exists()) {
            let _ = sbx_e2e::sbx()
                .args(["-q", "rm", "--volumes"])
                .arg(ws)
                .output();
        }
    }
}

/// A running sbx-server and where it answers.
pub struct Server {
    pub base: String,
    pub state: PathBuf,
    /// Its database's connection string.
    pub db: String,
    child: Child,
    pub stderr: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// A fresh database on the shared cluster.
fn database() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    cluster().pg.create_database(&name).unwrap();
    cluster().pg.url(&name)
}

/// The server binary with a cleared environment.
pub fn server_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-server"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for k in [
        "SBX_BASE_TAG",
        "SBX_BIN_DIR",
        "CI",
        "HOME",
        "XDG_STATE_HOME",
        "DOCKER_HOST",
    ] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    c
}

/// Start a server on its own database with `args` after `serve`, with
/// no Docker engine: an API test that wrongly reached a sandbox fails
/// fast instead of starting one.
pub fn start(args: &[&str]) -> Server {
    start_on(database(), args)
}

/// [`start`] on database `db` (a connection string).
pub fn start_on(db: String, args: &[&str]) -> Server {
    spawn(db, args, false)
}

/// [`start`] with the machine's Docker engine, for the e2e test.
pub fn start_with_docker(args: &[&str]) -> Server {
    spawn(database(), args, true)
}

fn spawn(db: String, args: &[&str], docker: bool) -> Server {
    let state = cluster()
        .dir
        .path()
        .join(format!("state-{}", uuid::Uuid::new_v4().simple()));
    spawn_in(db, state, args, docker)
}

/// `server` stopped, then started again on its database and state
/// directory with `args`: what a crash and a restart leave.
pub fn restart(server: Server, args: &[&str], docker: bool) -> Server {
    let (db, state) = (server.db.clone(), server.state.clone());
    drop(server);
    spawn_in(db, state, args, docker)
}

fn spawn_in(db: String, state: PathBuf, args: &[&str], docker: bool) -> Server {
    let mut cmd = server_command();
    if !docker {
        cmd.env(
            "DOCKER_HOST",
            format!("unix://{}/no-docker.sock", state.display()),
        );
    }
    let mut child = cmd
        .env("JWT_SECRET", SECRET)
        .env("DATABASE_URL", &db)
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    when_gone(&format!("kill {}", child.id()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::clone(&stderr);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for l in lines.by_ref().map_while(Result::ok) {
            if let Some(a) = l.strip_prefix("sbx-server: listening on ") {
                if let Some(t) = tx.take() {
                    let _ = t.send(a.to_owned());
                }
            }
            let mut g = log.lock().unwrap();
            g.push_str(&l);
            g.push('\n');
        }
    });
    // Migrations and all, on a loaded 2-core machine: a wide margin.
    let base = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("sbx-server did not start: {}", stderr.lock().unwrap()));
    Server {
        base,
        state,
        db,
        child,
        stderr,
    }
}

/// The server most tests share (one per test binary).
pub fn shared() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        start(&[
            "--max-projects",
            "3",
            "--login-limit-address",
            "100000",
            "--register-limit-address",
            "100000",
        ])
    })
}

pub fn client() -> reqwest::blocking::Client {
    // The workspace's one crypto provider (plain HTTP here, but reqwest
    // builds its TLS config anyway).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap()
}

/// A response: status, JSON body (Null when empty), headers.
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl std::fmt::Debug for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.body)
    }
}

impl Resp {
    /// The error code of a JSON error, asserting its shape.
    pub fn code(&self) -> &str {
        assert!(
            self.body["error"]["message"].is_string(),
            "not a JSON error: {self:?}"
        );
        self.body["error"]["code"].as_str().unwrap()
    }
}

impl Server {
    /// `method path` with an optional bearer token and raw body.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
    ) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = client().request(m, format!("{}{path}", self.base));
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b);
        }
        let resp = r.send().unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                panic!(
                    "{method} {path}: not JSON ({status}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Resp {
            status,
            body,
            headers,
        }
    }

    pub fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Resp {
        self.raw(
            method,
            path,
            token,
            body.map(|b| ("application/json", serde_json::to_vec(&b).unwrap())),
        )
    }

    /// A new user; (email, password).
    pub fn user(&self) -> (String, String) {
        let email = format!("u{}@example.test", uuid::Uuid::new_v4().simple());
        let password = "correct horse battery".to_owned();
        let r = self.call(
            "POST",
            "/auth/register",
            None,
            Some(json!({"email": email, "password": password})),
        );
        assert_eq!(r.status, 201, "{r:?}");
        (email, password)
    }

    pub fn login(&self, email: &str, password: &str) -> Resp {
        self.call(
            "POST",
            "/auth/login",
            None,
            Some(json!({"email": email, "password": password})),
        )
    }

    /// A new user's access and refresh tokens.
    pub fn session(&self) -> (String, String) {
        let (e, p) = self.user();
        self.tokens(&e, &p)
    }

    /// A new session's access and refresh tokens, by logging in.
    pub fn tokens(&self, email: &str, password: &str) -> (String, String) {
        let r = self.login(email, password);
        assert_eq!(r.status, 200, "{r:?}");
        (
            r.body["access_token"].as_str().unwrap().to_owned(),
            r.body["refresh_token"].as_str().unwrap().to_owned(),
        )
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn audit_log(&self) -> PathBuf {
        self.state.join("audit.jsonl")
    }
}

/// Project `id`'s workspace under server `s`'s state dir.
pub fn workspace(s: &Server, id: &str) -> PathBuf {
    s.state
        .join("projects")
        .join(id)
        .join(format!("project-{}", id.replace('-', "")))
}

/// Make `dir` a git repository with everything in it committed.
pub fn commit_all(dir: &std::path::Path) {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "x",
        ],
    ] {
        let st = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    }
}
