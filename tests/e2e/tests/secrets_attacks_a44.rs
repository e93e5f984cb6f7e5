//! `[secrets]` attacked from inside (issue 44, helper a44): in a sandbox
//! started with `sbx-run start`, proxy mode and a secret bound to a stand-in
//! host's `x-api-key`, the agent tries to get the value back through the
//! bound host itself: a server that answers with the request it got (TRACE,
//! which Apache answers by default; an echo endpoint; an error page quoting
//! a header) hands the injected header back. And it looks for the value or
//! the CA's key where it could read them: the tmpfs, the proxy's /proc.
//! Last, it plants a module where the user's `cmd:` key command would
//! find it at the next start if that ran in the repository.
//!
//! The stand-in is a Python TLS server in a container of its own on the
//! sandbox's network (the base image has python3), its root made here with
//! openssl; the proxy is made to trust that root from the host's side, as
//! root inside (appended to the bundle the proxy reads at its start, then
//! the proxy restarted by the guest), never by the agent.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, Started, base_image, prerequisite, sbx, sh, text};

const KEY: &str = "sk-a44-REAL-5b8e1f0c9d2a7346";
const HOLDER: &str = "sbx-placeholder-key";
const HOLDER_MODEL: &str = "sbx-placeholder-model";
const API: &str = "api.a44-e2e.test";
const KEYS: &str = "keys.a44-e2e.test";

/// A server that answers TRACE and `GET /echo` with the request head it
/// got, anything else with `ok`, and logs every head to /d/log.
const STANDIN: &str = r#"import socket, ssl, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/d/leaf.pem", "/d/leaf.key")
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 443))
s.listen(16)
print("listening", flush=True)
def serve(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = t.recv(4096)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            head += b"\r\n\r\n"
            with open("/d/log", "ab") as f:
                f.write(head)
            body = head if head.startswith((b"TRACE ", b"GET /echo")) else b"ok"
            t.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except Exception:
        pass
    finally:
        c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The stand-in's container, removed when the test ends.
struct Standin(String);

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A root and a leaf for [`API`] signed by it, in `d`.
fn certificates(d: &Path) {
    let ssl = |args: &[&str]| {
        sh(Command::new("openssl").args(args).current_dir(d));
    };
    ssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "root.key",
        "-out",
        "root.pem",
        "-days",
        "2",
        "-subj",
        "/CN=a44 test root",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    ssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        &format!("/CN={API}"),
    ]);
    std::fs::write(
        d.join("leaf.ext"),
        format!(
            "subjectAltName=DNS:{API}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    ssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "root.pem",
        "-CAkey",
        "root.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
}

/// As root inside the sandbox (the host's side, not the agent's).
fn as_root(container: &str, script: &str, input: Option<&Path>) -> String {
    let mut c = Command::new("docker");
    c.args(["exec", "-i", "-u", "0", container, "sh", "-c", script]);
    if let Some(f) = input {
        c.stdin(std::fs::File::open(f).unwrap());
    }
    sh(&mut c)
}

const PROXY_PID: &str = "for p in /proc/[0-9]*; do \
     tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^[^ ]*sbx-fw proxy' && echo ${p#/proc/}; \
     done; true";

#[test]
fn the_secret_never_comes_back_to_the_agent() {
    if !base_image()
        || !prerequisite(
            Command::new("openssl")
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "openssl",
        )
    {
        return;
    }
    let t0 = Instant::now();
    let repo = Repo::new("secretsa44");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    let cfg = repo.path.join(".agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "[network]\nmode = \"proxy\"\nregistries = false\ngithub = false\n\
             allow-domains = [\"{API}\", \"{KEYS}\"]\n\
             [secrets]\nkey = {{ from = \"env:A44_E2E_KEY\", host = \"{API}\", header = \"x-api-key\" }}\n\
             cmd = {{ from = \"cmd:python3 -m a44keys\", host = \"{KEYS}\", header = \"x-token\" }}\n\
             model = {{ from = \"cmd:printf sk-a44-by-cmd\", host = \"api.anthropic.com\", header = \"x-api-key\" }}\n"
        ),
    )
    .unwrap();
    repo.give_to_agent();
    let d = repo.root().join("standin");
    std::fs::create_dir_all(&d).unwrap();
    certificates(&d);
    std::fs::write(d.join("server.py"), STANDIN).unwrap();
    // The user's key command: a module of the user's own, on PYTHONPATH.
    let lib = repo.root().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("a44keys.py"), "print('from-the-users-module')\n").unwrap();
    let start = || {
        sbx()
            .env("A44_E2E_KEY", KEY)
            .env("PYTHONPATH", &lib)
            .args(["-q", "start"])
            .arg(&repo.path)
            // As the user runs it: in the repository.
            .current_dir(&repo.path)
            .output()
            .unwrap()
    };
    let o = start();
    let _started = Started(&repo);
    assert!(o.status.success(), "start: {}", text(&o));
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);
    let ct = &names.container;

    // The stand-in, on the sandbox's network under the bound name.
    let tag = std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into());
    let standin = Standin(format!("{ct}-a44-standin"));
    let _ = Command::new("docker")
        .args(["rm", "-f", &standin.0])
        .output();
    sh(Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &standin.0,
            "--network",
            &names.network,
        ])
        .args(["--network-alias", API, "-u", "0", "--entrypoint", "python3"])
        .arg("-v")
        .arg(format!("{}:/d", d.display()))
        .arg(format!("agent-sandbox-base:{tag}"))
        .arg("/d/server.py"));
    let t = Instant::now();
    while !text(
        &Command::new("docker")
            .args(["logs", &standin.0])
            .output()
            .unwrap(),
    )
    .contains("listening")
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the stand-in did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The proxy may reach it (a neighbour, which the firewall refuses
    // everyone) and trusts its root: root's doing, from the host; the
    // root goes in the bundle the proxy reads at its start, and the guest
    // restarts the proxy.
    let ip = sh(Command::new("docker").args([
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &standin.0,
    ]));
    as_root(
        ct,
        &format!(
            "for i in iptables-legacy iptables; do $i -S SBX-OUT >/dev/null 2>&1 && \
             exec $i -I SBX-OUT 1 -p tcp -d {} --dport 443 -m owner --uid-owner 65533 -j ACCEPT; \
             done; exit 1",
            ip.trim()
        ),
        None,
    );
    as_root(
        ct,
        "cat >> /etc/ssl/certs/ca-certificates.crt",
        Some(&d.join("root.pem")),
    );
    let old = as_root(ct, PROXY_PID, None);
    assert!(!old.trim().is_empty(), "no proxy running");
    as_root(ct, &format!("kill {}", old.trim()), None);
    let t = Instant::now();
    let pid = loop {
        let now = as_root(ct, PROXY_PID, None);
        if !now.trim().is_empty() && now != old {
            break now.trim().to_owned();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the proxy did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    // As the agent: an ordinary request gets the secret added (so the
    // rest is not vacuous), then the echoes.
    let curl = format!("curl -s --noproxy '*' -m 20 -H 'x-api-key: {HOLDER}'");
    let t = Instant::now();
    loop {
        let o = repo.agent(&format!("{curl} https://{API}/"));
        if text(&o) == "ok" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the proxy does not inject: {}",
            text(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(d.join("log")).unwrap_or_default();
    assert!(log.contains(&format!("x-api-key: {KEY}\r\n")), "{log}");
    for attack in [
        format!("{curl} -X TRACE https://{API}/"),
        format!("{curl} -X trace https://{API}/"),
        format!("{curl} https://{API}/echo"),
        // Behind a long header: the value falls elsewhere in the answer.
        format!("{curl} -H 'x-pad: {}' https://{API}/echo", "a".repeat(3000)),
    ] {
        let o = repo.agent(&attack);
        let got = text(&o);
        assert!(!got.contains(KEY), "{attack}: the agent got the key: {got}");
        assert!(
            !got.contains(&KEY[..12]),
            "{attack}: part of the key: {got}"
        );
    }
    // The echo still answers (masked, the same length).
    let got = text(&repo.agent(&format!("{curl} https://{API}/echo")));
    assert!(
        got.contains(&format!("x-api-key: {}\r\n", "*".repeat(KEY.len()))),
        "{got}"
    );

    // Where the agent could read the value or the CA's key: nowhere.
    let o = repo.agent(&format!(
        "for f in /run/sbx-secrets/ca.key /run/sbx-secrets/secrets.json \
         /run/sbx/host/secrets.json /proc/{pid}/environ /proc/{pid}/root/run/sbx-secrets/ca.key; \
         do cat $f >/dev/null 2>&1 && echo READ $f; done; \
         for d in /run/sbx-secrets /proc/{pid}/fd /proc/{pid}/map_files; do \
           ls $d/ >/dev/null 2>&1 && echo LISTED $d; done; \
         grep -rsl -- '{KEY}' /etc /run /tmp /home /workspace 2>/dev/null; \
         env | grep -c -- '{KEY}'; true"
    ));
    let got = text(&o);
    assert_eq!(got.trim(), "0", "{got}");

    // A `cmd:` source runs on the host at each start: not where the agent
    // writes (the repository, the user's usual working directory), or
    // `python3 -m` (as npx, mise or asdf shims do with their own files)
    // runs the agent's module, as root, instead of the user's.
    let o = repo.agent(
        "printf 'open(\"../a44-cmd-canary\", \"w\").close()\\nprint(\"x\")\\n' > a44keys.py && ls a44keys.py",
    );
    assert!(repo.path.join("a44keys.py").exists(), "{}", text(&o));
    sh(sbx().args(["-q", "stop"]).arg(&repo.path));
    let o = start();
    assert!(o.status.success(), "start: {}", text(&o));
    assert!(
        !repo.root().join("a44-cmd-canary").exists(),
        "the agent's module ran on the host at start"
    );

    // `sbx-run agent` with the CLI's own endpoint (no base URL set) and a
    // secret bound to that endpoint's host, the key also in the user's
    // shell: the CLI must get the placeholder, not the key. The stand-in
    // CLI (put there by root: the base image has none) asks its key
    // helper, as Claude Code does, and keeps the answer.
    let fake = "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --settings ] && s=$2; shift; done\n\
                h=$(printf %s \"$s\" | sed -n 's/.*\"apiKeyHelper\":\"\\([^\"]*\\)\".*/\\1/p')\n\
                $h > /tmp/a44-cli-key 2>&1\n";
    let f = repo.root().join("fake-claude");
    std::fs::write(&f, fake).unwrap();
    as_root(
        ct,
        "cat > /usr/local/bin/claude && chmod 755 /usr/local/bin/claude",
        Some(&f),
    );
    let o = sbx()
        .env("ANTHROPIC_API_KEY", KEY)
        .env_remove("ANTHROPIC_BASE_URL")
        .args(["agent", "-C"])
        .arg(&repo.path)
        .arg("hi")
        .output()
        .unwrap();
    let got = as_root(ct, "cat /tmp/a44-cli-key", None);
    assert!(got.contains(HOLDER_MODEL), "{got}\n{}", text(&o));
    assert!(
        !got.contains(KEY),
        "the CLI in the sandbox got the key: {got}"
    );
    eprintln!("took {:?}", t0.elapsed());
}
