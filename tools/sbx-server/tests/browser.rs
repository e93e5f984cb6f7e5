//! The page in a real browser: headless Chromium (Debian's `chromium`)
//! driven through chromedriver's WebDriver HTTP API, against the real
//! server, Postgres and a Docker sandbox. It registers, creates and starts
//! a project, opens its terminal, types a command, reads the echo back
//! from xterm.js's rows, reloads and finds the same tmux session, and
//! saves a screenshot under target/tmp/.
//! Run with SBX_BASE_TAG and SBX_BIN_DIR set (scripts/test does).

mod common;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// Long: a loaded 2-core machine, a sandbox starting.
const WAIT: Duration = Duration::from_secs(90);

/// The W3C name of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver and one Chromium session. Dropped on every exit path,
/// panics included: the session is ended (Chromium quits) and
/// chromedriver's process group, Chromium's leftovers with it, killed.
struct Browser {
    driver: Child,
    url: String,
    http: reqwest::blocking::Client,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.http.delete(&self.url).send();
        let pgid = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

impl Browser {
    fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so Drop can kill Chromium's processes with it.
            .process_group(0)
            .spawn()
            .expect("chromedriver");
        let http = common::client();
        let base = format!("http://127.0.0.1:{port}");
        let mut b = Browser {
            driver,
            url: base.clone(),
            http,
        };
        let t0 = Instant::now();
        while b.http.get(format!("{base}/status")).send().is_err() {
            assert!(t0.elapsed() < WAIT, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                // --no-sandbox: the tests run as root, where Chromium's own
                // sandbox will not start.
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=900,700"]
            }
        }}});
        let r = b.call("POST", "/session", caps);
        b.url = format!("{base}/session/{}", r["sessionId"].as_str().unwrap());
        b
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(m, format!("{}{path}", self.url));
        if !body.is_null() {
            r = r
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap());
        }
        let r = r.send().unwrap();
        let status = r.status();
        let v: Value = serde_json::from_slice(&r.bytes().unwrap()).unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {v}");
        v["value"].clone()
    }

    fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
    }

    /// Run `script` until it returns something truthy; that value.
    fn wait_for(&self, what: &str, script: &str, args: Value) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.run(script, args.clone());
            if !(v.is_null() || v == false || v == "") {
                return v;
            }
            assert!(
                t0.elapsed() < WAIT,
                "waited {WAIT:?} for {what}; the page says: {}",
                self.run("return document.body.innerText", json!([]))
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn element(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {v}"))
            .to_owned()
    }

    fn click(&self, el: &str) {
        self.call("POST", &format!("/element/{el}/click"), json!({}));
    }

    /// Typed as key events, as a user types.
    fn keys(&self, el: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{el}/value"),
            json!({"text": text}),
        );
    }
}

/// The terminal's visible text, row by row (xterm.js's DOM renderer).
const ROWS: &str = "const r = document.querySelector('.xterm-rows'); return r ? r.innerText : '';";

#[test]
fn the_page_opens_a_terminal_that_survives_a_reload() {
    if !(sbx_e2e::prerequisite(sbx_e2e::is_root(), "root (workspaces go to uid 1000)")
        && sbx_e2e::prerequisite(
            Command::new("chromedriver")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "chromedriver (Debian's chromium-driver)",
        )
        && sbx_e2e::base_image())
    {
        return;
    }
    let t0 = Instant::now();
    let s = common::start_with_docker(&[]);
    let mut cleanup = common::Cleanup(Vec::new());
    let b = Browser::start();
    b.call("POST", "/url", json!({"url": s.base}));

    // Register (which logs in) through the form.
    let email = format!("b{}@example.test", uuid::Uuid::new_v4().simple());
    b.keys(&b.element("#login-form input[name=email]"), &email);
    b.keys(
        &b.element("#login-form input[name=password]"),
        "correct horse battery",
    );
    b.click(&b.element("#register-btn"));
    b.wait_for(
        "the project list",
        "return !document.getElementById('projects').hidden",
        json!([]),
    );
    let token = b.run("return sessionStorage.getItem('access')", json!([]));
    assert!(token.is_string(), "no token kept: {token}");
    let url = b.call("GET", "/url", json!(null));
    assert!(
        !url.as_str().unwrap().contains(token.as_str().unwrap()),
        "the token is in the URL: {url}"
    );

    // Create a project, then start it from its row.
    b.keys(&b.element("#new-form input[name=name]"), "browser");
    b.click(&b.element("#create-btn"));
    let row = "const li = [...document.querySelectorAll('#list li')]\
        .find(li => li.querySelector('.name')?.textContent === 'browser');";
    let id = b.wait_for(
        "the new project's row",
        &format!("{row} return li?.dataset.id"),
        json!([]),
    );
    let id = id.as_str().unwrap().to_owned();
    cleanup.0.push(common::workspace(&s, &id));
    let button = |label: &str| {
        let script = format!(
            "{row} return li && [...li.querySelectorAll('button')]\
             .find(x => x.textContent === arguments[0] && !x.disabled)"
        );
        let v = b.wait_for(&format!("a {label} button"), &script, json!([label]));
        v[ELEMENT].as_str().unwrap().to_owned()
    };
    b.click(&button("Start"));
    b.click(&button("Terminal"));

    // Type into xterm.js as a user does; read the echo from its rows.
    let nonce = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    b.wait_for(
        "the terminal",
        "return document.querySelector('.xterm-helper-textarea')",
        json!([]),
    );
    b.keys(
        &b.element(".xterm-helper-textarea"),
        &format!("echo sbx-$RANDOM-$((6*7))-{nonce}\u{E007}"),
    );
    let echoed = format!("-42-{nonce}");
    let text = b.wait_for(
        "the echo",
        &format!("const t = (() => {{ {ROWS} }})(); \
                  return t.split('\\n').find(l => /^sbx-[0-9]+-42-/.test(l.trim()) && l.includes(arguments[0]))"),
        json!([echoed]),
    );
    let line = text.as_str().unwrap().trim().to_owned();
    assert!(
        line.starts_with("sbx-") && line.ends_with(&echoed),
        "{line}"
    );

    // A reload reattaches the same tmux session: the line is still there.
    b.call("POST", "/refresh", json!({}));
    b.wait_for(
        "the same line after a reload",
        &format!("const t = (() => {{ {ROWS} }})(); return t.includes(arguments[0])"),
        json!([line]),
    );

    let png = b.call("GET", "/screenshot", json!(null));
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sbx-server-browser.png");
    std::fs::write(&out, png).unwrap();
    eprintln!("screenshot: {}; took {:?}", out.display(), t0.elapsed());
    drop(b);
    let r = s.call("GET", "/healthz", None, None);
    assert_eq!(r.status, 200, "{r:?}");
}
