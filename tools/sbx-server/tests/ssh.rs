//! SSH to a project through sbx-server (issue 43), against a real Postgres,
//! real Docker and the host's real `ssh` client: a project made with
//! `"ssh": true` answers its private key once, in the create response; the
//! database never holds it (pg_dump of the whole database); the returned
//! key logs in as the agent against the pinned host key, under the git
//! guard (`--no-verify` refused); a rotation hands
//! out a new key and the old one is refused; another user's project is a
//! 404, a project without SSH a 409.
//! Run with SBX_BASE_TAG and SBX_BIN_DIR set (scripts/test does).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Root (workspaces go to uid 1000), Docker, the base image and `ssh`.
fn docker_bed() -> bool {
    sbx_e2e::prerequisite(sbx_e2e::is_root(), "root (workspaces go to uid 1000)")
        && sbx_e2e::prerequisite(
            Command::new("ssh").arg("-V").output().is_ok(),
            "OpenSSH's client (ssh)",
        )
        && sbx_e2e::base_image()
}

/// The project's private key in a 0600 file, and its known_hosts line in
/// another: what a client keeps from the responses.
fn client_files(dir: &Path, name: &str, project: &Value, key: &str) -> (PathBuf, PathBuf) {
    let k = dir.join(format!("{name}.key"));
    std::fs::write(&k, key).unwrap();
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    let kh = dir.join(format!("{name}.known_hosts"));
    let line = project["ssh"]["known_hosts"]
        .as_str()
        .unwrap_or_else(|| panic!("no known_hosts line: {project}"));
    std::fs::write(&kh, format!("{line}\n")).unwrap();
    (k, kh)
}

/// The real ssh client with `key` only and the host key pinned by
/// `known_hosts`, running `command` as `project`'s `ssh.user`.
fn ssh(project: &Value, key: &Path, known_hosts: &Path, command: &str) -> Output {
    let x = &project["ssh"];
    Command::new("ssh")
        .args([
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .args([
            "-o",
            "IdentityAgent=none",
            "-o",
            "StrictHostKeyChecking=yes",
        ])
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=20",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg("-i")
        .arg(key)
        .args([
            "-p",
            &x["port"].to_string(),
            "-l",
            x["user"].as_str().unwrap(),
        ])
        .arg(x["host"].as_str().unwrap())
        .arg(command)
        .output()
        .unwrap()
}

/// `ssh … id -u` until it succeeds: sshd comes up after the start
/// returns; a loaded machine gets a wide margin.
fn login(project: &Value, key: &Path, known_hosts: &Path) -> Output {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let o = ssh(project, key, known_hosts, "id -u");
        if o.status.success() || Instant::now() > deadline {
            return o;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The whole database as SQL (every table, every row).
fn dump(db: &str) -> String {
    let out = Command::new(common::cluster().pg.bin().join("pg_dump"))
        .args(["--data-only", "-d", db])
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_dump: {}", sbx_e2e::text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A private key's base64 lines: a stored copy holds each, however its
/// line breaks are escaped.
fn body(key: &str) -> Vec<&str> {
    key.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 32)
        .collect()
}

#[test]
fn a_project_key_is_handed_out_once_logs_in_and_rotates() {
    if !docker_bed() {
        return;
    }
    let s = common::start_with_docker(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut cleanup = common::Cleanup(Vec::new());
    let (alice, _) = s.session();
    let (bob, _) = s.session();

    // Create: the private key is in this response and nowhere else.
    let r = s.call(
        "POST",
        "/projects",
        Some(&alice),
        Some(json!({"name": "ide", "ssh": true})),
    );
    assert_eq!(r.status, 201, "{r:?}\n{}", s.stderr.lock().unwrap());
    let id = r.body["id"].as_str().unwrap().to_owned();
    cleanup.0.push(common::workspace(&s, &id));
    let key1 = r.body["ssh"]["private_key"]
        .as_str()
        .unwrap_or_else(|| panic!("no private key: {r:?}"))
        .to_owned();
    assert!(
        key1.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{key1}"
    );
    assert_eq!(r.body["ssh"]["user"], "agent", "{r:?}");
    let fp = r.body["ssh"]["host_key_fingerprint"].as_str().unwrap();
    assert!(fp.starts_with("SHA256:"), "{r:?}");

    // Bob: alice's project is not found, to read or to rotate.
    for (m, p) in [
        ("GET", format!("/projects/{id}")),
        ("POST", format!("/projects/{id}/ssh-key")),
    ] {
        let r = s.call(m, &p, Some(&bob), None);
        assert_eq!(r.status, 404, "bob {m} {p}: {r:?}");
    }
    // A project made without SSH has no key to rotate.
    let r = s.call(
        "POST",
        "/projects",
        Some(&bob),
        Some(json!({"name": "plain"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ssh"], Value::Null, "{r:?}");
    let plain = r.body["id"].as_str().unwrap().to_owned();
    cleanup.0.push(common::workspace(&s, &plain));
    let r = s.call(
        "POST",
        &format!("/projects/{plain}/ssh-key"),
        Some(&bob),
        None,
    );
    assert_eq!((r.status, r.code()), (409, "no_ssh"), "{r:?}");

    // Start; GET shows where and the pinned host key, never a private key.
    let r = s.call("POST", &format!("/projects/{id}/start"), Some(&alice), None);
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    let p = s
        .call("GET", &format!("/projects/{id}"), Some(&alice), None)
        .body;
    assert_eq!(p["ssh"]["host"], "127.0.0.1", "{p}");
    assert!(p["ssh"]["port"].as_u64().is_some(), "{p}");
    assert!(p["ssh"].get("private_key").is_none(), "{p}");
    assert!(!p.to_string().contains("PRIVATE KEY"), "{p}");
    let (k1, kh) = client_files(tmp.path(), "first", &p, &key1);

    // The real ssh client, the returned key, the pinned host key: the agent.
    let o = login(&p, &k1, &kh);
    assert!(o.status.success(), "ssh: {}", sbx_e2e::text(&o));
    assert_eq!(sbx_e2e::text(&o).trim(), "1000", "{}", sbx_e2e::text(&o));
    // The session is the agent's under the git guard: --no-verify refused.
    let ws = common::workspace(&s, &id);
    let head = || {
        let o = Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(&ws)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        sbx_e2e::text(&o)
    };
    let before = head();
    assert!(
        before.trim().len() == 40 && before.trim().bytes().all(|b| b.is_ascii_hexdigit()),
        "{before}"
    );
    let dir = ws.file_name().unwrap().to_string_lossy().into_owned();
    let o = ssh(
        &p,
        &k1,
        &kh,
        &format!(
            "cd /workspace/{dir} && git -c user.name=a -c user.email=a@b commit -q --allow-empty --no-verify -m via-ssh"
        ),
    );
    assert!(!o.status.success(), "--no-verify over ssh went through");
    assert!(
        sbx_e2e::text(&o).contains("no-verify"),
        "not the guard's refusal: {}",
        sbx_e2e::text(&o)
    );
    assert_eq!(head(), before, "a commit was made");

    // Rotate: a new key, once; the old one is refused from then on.
    let r = s.call(
        "POST",
        &format!("/projects/{id}/ssh-key"),
        Some(&alice),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    assert_eq!(r.body["status"], "running", "{r:?}");
    let key2 = r.body["ssh"]["private_key"].as_str().unwrap().to_owned();
    assert_ne!(key1, key2);
    let p = s
        .call("GET", &format!("/projects/{id}"), Some(&alice), None)
        .body;
    assert!(p["ssh"].get("private_key").is_none(), "{p}");
    let (k2, kh) = client_files(tmp.path(), "second", &p, &key2);
    let o = login(&p, &k2, &kh);
    assert!(o.status.success(), "ssh, new key: {}", sbx_e2e::text(&o));
    let o = ssh(&p, &k1, &kh, "id -u");
    assert_eq!(
        o.status.code(),
        Some(255),
        "the old key still logs in: {}",
        sbx_e2e::text(&o)
    );
    assert!(
        sbx_e2e::text(&o).contains("Permission denied"),
        "{}",
        sbx_e2e::text(&o)
    );

    // The database never held either private key, nor any private key.
    let all = dump(&s.db);
    assert!(all.contains(fp), "the dump holds no host key fingerprint");
    for k in [&key1, &key2] {
        assert!(!body(k).is_empty(), "{k}");
        for line in body(k) {
            assert!(!all.contains(line), "a private key is in the database");
        }
    }
    assert!(
        !all.contains("PRIVATE KEY"),
        "a private key is in the database"
    );

    // A rotation whose restart fails still hands out the new key: the
    // old one is already gone. A config the start refuses makes it fail.
    let o = Command::new(common::cluster().pg.bin().join("psql"))
        .args(["-q", "-d", &s.db, "-c"])
        .arg(format!(
            "UPDATE projects SET config = '[network]\nmode = \"no-such-mode\"\n' WHERE id = '{id}'"
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "psql: {}", sbx_e2e::text(&o));
    let r = s.call(
        "POST",
        &format!("/projects/{id}/ssh-key"),
        Some(&alice),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    assert_eq!(r.body["status"], "error", "{r:?}");
    assert!(
        r.body["status_reason"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{r:?}"
    );
    let key3 = r.body["ssh"]["private_key"]
        .as_str()
        .unwrap_or_else(|| panic!("a failed restart lost the new key: {r:?}"));
    assert!(key3.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") && key3 != key2);

    for (t, pid) in [(&alice, &id), (&bob, &plain)] {
        let r = s.call("DELETE", &format!("/projects/{pid}"), Some(t), None);
        assert_eq!(r.status, 204, "{r:?}");
    }
}
