//! The API against a real Postgres and the real binary: every auth rule,
//! bad input, tenancy on every route with a second user, limits, the
//! OpenAPI document and the audit log. No Docker here (tests/e2e.rs).

mod common;

use std::io::{Read, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use uuid::Uuid;

use common::{SECRET, shared};
use sbx_server::pg::LocalCluster;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sign(alg: Algorithm, secret: &[u8], claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, &EncodingKey::from_secret(secret)).unwrap()
}

/// The `sub` of a token the server issued, read without verifying.
fn user_of(token: &str) -> String {
    claim_of(token, "sub")
}

/// Claim `name` of a token the server issued, read without verifying.
fn claim_of(token: &str, name: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    let v: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    v[name].as_str().unwrap().to_owned()
}

#[test]
fn register_login_refresh_rotates_and_reuse_revokes_the_family() {
    let s = shared();
    let (email, pw) = s.user();
    let r = s.login(&email, &pw);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["expires_in"], 900);
    let access = r.body["access_token"].as_str().unwrap();
    let first = r.body["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(s.call("GET", "/projects", Some(access), None).status, 200);

    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": first})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let second = r.body["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    let access2 = r.body["access_token"].as_str().unwrap();
    assert_eq!(s.call("GET", "/projects", Some(access2), None).status, 200);

    // The first token again: a thief's replay. The whole family goes.
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": first})),
    );
    assert_eq!((r.status, r.code()), (401, "refresh_reused"), "{r:?}");
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": second})),
    );
    assert_eq!((r.status, r.code()), (401, "refresh_reused"), "{r:?}");

    // A new login is a new family; logout revokes it.
    let r = s.login(&email, &pw);
    let access = r.body["access_token"].as_str().unwrap();
    let third = r.body["refresh_token"].as_str().unwrap();
    let r = s.call(
        "POST",
        "/auth/logout",
        Some(access),
        Some(json!({"refresh_token": third})),
    );
    assert_eq!(r.status, 204, "{r:?}");
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": third})),
    );
    assert_eq!(r.status, 401, "{r:?}");
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": "made-up"})),
    );
    assert_eq!((r.status, r.code()), (401, "invalid_refresh"), "{r:?}");
}

#[test]
fn logout_and_a_reused_refresh_token_end_the_sessions_access_tokens() {
    // Route (issue 41, a41): logout ended the refresh family only; its
    // access token went on working for up to 15 minutes, on REST and on
    // the terminal. A token now names its session, and an ended session's
    // tokens are refused at once, after a restart too.
    let s = common::start(&[]);
    let (email, pw) = s.user();
    let (a1, r1) = s.tokens(&email, &pw);
    let (a2, _) = s.tokens(&email, &pw);
    let (b1, rb) = s.tokens(&email, &pw);
    let terminal = |t: &str| {
        s.call(
            "GET",
            &format!("/terminal/{}?token={t}", Uuid::new_v4()),
            None,
            None,
        )
        .status
    };
    assert_eq!(
        terminal(&a1),
        404,
        "the control: a live token reaches the route"
    );
    let r = s.call(
        "POST",
        "/auth/logout",
        Some(&a1),
        Some(json!({"refresh_token": r1})),
    );
    assert_eq!(r.status, 204, "{r:?}");
    let r = s.call("GET", "/projects", Some(&a1), None);
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    assert_eq!(terminal(&a1), 401, "the terminal after logout");
    // Another session of the same user goes on.
    assert_eq!(s.call("GET", "/projects", Some(&a2), None).status, 200);

    // A refresh token replayed: both the thief's and the holder's access
    // tokens of that family end.
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": rb})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let b2 = r.body["access_token"].as_str().unwrap().to_owned();
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": rb})),
    );
    assert_eq!((r.status, r.code()), (401, "refresh_reused"), "{r:?}");
    for t in [&b1, &b2] {
        assert_eq!(s.call("GET", "/projects", Some(t), None).status, 401);
    }

    // A restart loads the ended sessions from the database.
    let s = common::restart(s, &[], false);
    for t in [&a1, &b1, &b2] {
        assert_eq!(s.call("GET", "/projects", Some(t), None).status, 401);
    }
    assert_eq!(s.call("GET", "/projects", Some(&a2), None).status, 200);
}

#[test]
fn refresh_tokens_are_stored_hashed() {
    let s = shared();
    let (_, refresh) = s.session();
    let out = std::process::Command::new(common::cluster().pg.bin().join("psql"))
        .args([
            "-At",
            "-d",
            &s.db,
            "-c",
            "SELECT token_hash FROM refresh_tokens",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.is_empty());
    assert!(
        !text.contains(&refresh),
        "a refresh token is stored in clear"
    );
}

#[test]
fn login_does_not_reveal_whether_an_email_exists() {
    let s = shared();
    let (email, _) = s.user();
    let wrong = s.login(&email, "not the password");
    let unknown = s.login(
        &format!("nobody-{}@example.test", Uuid::new_v4()),
        "whatever1",
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body, unknown.body, "the answers differ");
    assert_eq!(wrong.code(), "invalid_credentials");
}

#[test]
fn login_is_limited_per_account() {
    let s = shared();
    let (email, pw) = s.user();
    for _ in 0..5 {
        assert_eq!(s.login(&email, "wrong password").status, 401);
    }
    // Even the right password now waits: the limit is the account's.
    let r = s.login(&email, &pw);
    assert_eq!((r.status, r.code()), (429, "rate_limited"), "{r:?}");
    assert!(r.headers.contains_key("retry-after"));
    // Another account from the same address is not affected.
    let (e2, p2) = s.user();
    assert_eq!(s.login(&e2, &p2).status, 200);
}

#[test]
fn login_is_limited_per_address() {
    let s = common::start(&["--login-limit-address", "3"]);
    let (email, pw) = s.user();
    for i in 0..3 {
        let r = s.login(&format!("probe{i}@example.test"), "wrong password");
        assert_eq!(r.status, 401, "{r:?}");
    }
    let r = s.login(&email, &pw);
    assert_eq!((r.status, r.code()), (429, "rate_limited"), "{r:?}");
}

#[test]
fn registrations_are_limited_per_address() {
    // Route (issue 41): successful sign-ups counted against nothing, so
    // one anonymous client could make users without end, each with its
    // own --max-projects workspaces and --max-running sandboxes (and an
    // argon2 hash each): the per-user quotas bounded nothing.
    let s = common::start(&["--register-limit-address", "3"]);
    for _ in 0..3 {
        s.user();
    }
    let r = s.call(
        "POST",
        "/auth/register",
        None,
        Some(json!({"email": "one-more@example.test", "password": "correct horse battery"})),
    );
    assert_eq!((r.status, r.code()), (429, "rate_limited"), "{r:?}");
    assert!(r.headers.contains_key("retry-after"), "{r:?}");
    // Logins from that address are not refused by it.
    let (e, p) = ("one-more@example.test", "correct horse battery");
    assert_eq!(s.login(e, p).code(), "invalid_credentials");
}

#[test]
fn registration_refuses_a_taken_email_and_bad_credentials() {
    let s = shared();
    let (email, _) = s.user();
    let r = s.call(
        "POST",
        "/auth/register",
        None,
        Some(json!({"email": email.to_uppercase(), "password": "another password"})),
    );
    assert_eq!((r.status, r.code()), (409, "email_taken"), "{r:?}");
    for (email, pw, code) in [
        ("not-an-email", "long enough", "invalid_email"),
        ("a\u{7}b@example.test", "long enough", "invalid_email"),
        ("short@example.test", "short", "invalid_password"),
    ] {
        let r = s.call(
            "POST",
            "/auth/register",
            None,
            Some(json!({"email": email, "password": pw})),
        );
        assert_eq!((r.status, r.code()), (422, code), "{email:?}: {r:?}");
    }
}

#[test]
fn bad_expired_tampered_and_foreign_tokens_are_refused() {
    let s = shared();
    let (access, _) = s.session();
    let sub = user_of(&access);
    let sid = claim_of(&access, "sid");
    let claims = |exp: u64| json!({"sub": sub, "sid": sid, "iat": now(), "exp": exp});
    let b64 = |v: Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&v).unwrap())
    };
    let mut parts: Vec<String> = access.split('.').map(str::to_owned).collect();
    // Same signature, another user in the payload.
    parts[1] = b64(json!({"sub": Uuid::new_v4(), "iat": now(), "exp": now() + 600}));
    let tampered = parts.join(".");
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(claims(now() + 600))
    );
    let cases = [
        ("missing", None),
        ("garbage", Some("not.a.token".to_owned())),
        ("tampered", Some(tampered)),
        ("alg none", Some(none)),
        (
            "HS512 with the right secret",
            Some(sign(
                Algorithm::HS512,
                SECRET.as_bytes(),
                &claims(now() + 600),
            )),
        ),
        (
            "another secret",
            Some(sign(
                Algorithm::HS256,
                b"another-secret-another-secret-another!",
                &claims(now() + 600),
            )),
        ),
        (
            "expired",
            Some(sign(
                Algorithm::HS256,
                SECRET.as_bytes(),
                &claims(now() - 10),
            )),
        ),
        (
            "no exp",
            Some(sign(
                Algorithm::HS256,
                SECRET.as_bytes(),
                &json!({"sub": sub}),
            )),
        ),
    ];
    for (what, token) in cases {
        let r = s.call("GET", "/projects", token.as_deref(), None);
        assert_eq!((r.status, r.code()), (401, "unauthorized"), "{what}: {r:?}");
    }
    // The control: a token signed right is accepted.
    let good = sign(Algorithm::HS256, SECRET.as_bytes(), &claims(now() + 600));
    assert_eq!(s.call("GET", "/projects", Some(&good), None).status, 200);
}

/// (what, method, path, (content type, body), status, error code)
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Option<(&'a str, Vec<u8>)>,
    u16,
    &'a str,
);

#[test]
fn bad_input_gets_json_errors_with_the_right_status() {
    let s = shared();
    let (tok, _) = s.session();
    let t = Some(tok.as_str());
    let json = |v: &str| Some(("application/json", v.as_bytes().to_vec()));
    let unknown = format!("/projects/{}", Uuid::new_v4());
    let cases: Vec<Case> = vec![
        (
            "malformed",
            "POST",
            "/projects",
            json("{\"name\":"),
            400,
            "malformed_json",
        ),
        (
            "unknown field",
            "POST",
            "/projects",
            json(r#"{"name":"a","x":1}"#),
            422,
            "invalid_body",
        ),
        (
            "missing field",
            "POST",
            "/projects",
            json("{}"),
            422,
            "invalid_body",
        ),
        (
            "not JSON",
            "POST",
            "/projects",
            Some(("text/plain", b"{}".to_vec())),
            415,
            "not_json",
        ),
        (
            "a body over the cap",
            "POST",
            "/projects",
            Some((
                "application/json",
                format!(r#"{{"name":"{}"}}"#, "a".repeat(20_000)).into_bytes(),
            )),
            413,
            "body_too_large",
        ),
        (
            "long name",
            "POST",
            "/projects",
            json(&format!(r#"{{"name":"{}"}}"#, "a".repeat(65))),
            422,
            "invalid_name",
        ),
        (
            "control character",
            "POST",
            "/projects",
            json(r#"{"name":"a\u001b[31m"}"#),
            422,
            "invalid_name",
        ),
        (
            "empty name",
            "POST",
            "/projects",
            json(r#"{"name":""}"#),
            422,
            "invalid_name",
        ),
        (
            "repo without --repo-root",
            "POST",
            "/projects",
            json(r#"{"name":"r","repo":"/etc"}"#),
            422,
            "invalid_repo",
        ),
        (
            "bad UUID",
            "GET",
            "/projects/not-a-uuid",
            None,
            400,
            "bad_id",
        ),
        (
            "bad UUID on start",
            "POST",
            "/projects/1234/start",
            None,
            400,
            "bad_id",
        ),
        ("no route", "GET", "/nothing", None, 404, "no_route"),
        (
            "wrong method",
            "PUT",
            "/projects",
            None,
            405,
            "method_not_allowed",
        ),
        ("unknown project", "GET", &unknown, None, 404, "not_found"),
        (
            "unknown field at login",
            "POST",
            "/auth/login",
            json(r#"{"email":"a@b","password":"x","admin":true}"#),
            422,
            "invalid_body",
        ),
    ];
    for (what, m, path, body, status, code) in cases {
        let r = s.raw(m, path, t, body);
        assert_eq!((r.status, r.code()), (status, code), "{what}: {r:?}");
    }
    // A 10 MB name: refused from its Content-Length, before it is read
    // (the server closes while we still write, so a plain socket reads it).
    let head = format!(
        "POST /projects HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{{\"name\":\"",
        tok,
        10 << 20
    );
    let addr = s.base.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let _ = sock.write_all(head.as_bytes());
    let _ = sock.write_all(&vec![b'a'; 1 << 20]);
    let mut answer = String::new();
    let _ = sock.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large"), "{answer}");
    // Nothing above made a project.
    let r = s.call("GET", "/projects", t, None);
    assert_eq!(r.body, json!([]), "{r:?}");
}

#[test]
fn another_users_project_is_a_404_on_every_route() {
    let s = shared();
    let (alice, alice_refresh) = s.session();
    let (bob, _) = s.session();
    let r = s.call(
        "POST",
        "/projects",
        Some(&alice),
        Some(json!({"name": "alice's"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "stopped", "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    // A name is per user: bob may use the same one.
    let r = s.call(
        "POST",
        "/projects",
        Some(&bob),
        Some(json!({"name": "alice's"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let bobs = r.body["id"].as_str().unwrap().to_owned();

    for (m, path) in [
        ("GET", format!("/projects/{id}")),
        ("POST", format!("/projects/{id}/start")),
        ("POST", format!("/projects/{id}/stop")),
        ("POST", format!("/projects/{id}/ssh-key")),
        ("POST", format!("/projects/{id}/snapshot")),
        ("POST", format!("/projects/{id}/restore")),
        ("GET", format!("/projects/{id}/backup-status")),
        ("DELETE", format!("/projects/{id}")),
        ("GET", format!("/projects/{id}/sessions")),
        // The terminal checks the owner before the upgrade (and before it
        // asks whether the request is a WebSocket at all).
        ("GET", format!("/terminal/{id}")),
    ] {
        let r = s.call(m, &path, Some(&bob), None);
        assert_eq!(
            (r.status, r.code()),
            (404, "not_found"),
            "bob {m} {path}: {r:?}"
        );
    }
    let r = s.call("GET", "/projects", Some(&bob), None);
    let ids: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [bobs.as_str()], "bob's list");
    // Bob's logout with alice's refresh token revokes nothing of hers.
    let r = s.call(
        "POST",
        "/auth/logout",
        Some(&bob),
        Some(json!({"refresh_token": alice_refresh})),
    );
    assert_eq!(r.status, 204);
    let r = s.call(
        "POST",
        "/auth/refresh",
        None,
        Some(json!({"refresh_token": alice_refresh})),
    );
    assert_eq!(r.status, 200, "alice's session was revoked by bob: {r:?}");

    // Alice's project is untouched and hers alone (her own delete, with
    // Docker, is tests/e2e.rs).
    let r = s.call("GET", &format!("/projects/{id}"), Some(&alice), None);
    assert_eq!(
        (r.status, r.body["name"].as_str()),
        (200, Some("alice's")),
        "{r:?}"
    );
    assert_eq!(r.body["status"], "stopped", "{r:?}");
}

/// Without a backup store the backup routes say so (409), and a restore's
/// snapshot id is digits or refused (422) before anything runs: it goes
/// to `sbx-backup restore --snapshot`, where `--to=/…` would be an option.
#[test]
fn backups_need_a_store_and_a_snapshot_id_is_digits() {
    let s = shared();
    let (t, _) = s.session();
    let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": "b"})));
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    for (m, path) in [
        ("POST", format!("/projects/{id}/snapshot")),
        ("POST", format!("/projects/{id}/restore")),
        ("GET", format!("/projects/{id}/backup-status")),
    ] {
        let r = s.call(m, &path, Some(&t), None);
        assert_eq!(
            (r.status, r.code()),
            (409, "no_backup_store"),
            "{m} {path}: {r:?}"
        );
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--backup-url")
        );
    }
    let restore = format!("/projects/{id}/restore");
    for (body, status, code) in [
        (json!({"snapshot": "--to=/etc"}), 422, "invalid_snapshot"),
        (json!({"snapshot": ""}), 422, "invalid_snapshot"),
        (json!({"snapshot": "1".repeat(21)}), 422, "invalid_snapshot"),
        (json!({"snapshot": 1}), 422, "invalid_body"),
        (json!({"snap": "1"}), 422, "invalid_body"),
    ] {
        let r = s.call("POST", &restore, Some(&t), Some(body.clone()));
        assert_eq!((r.status, r.code()), (status, code), "{body}: {r:?}");
    }
    let r = s.raw(
        "POST",
        &restore,
        Some(&t),
        Some(("application/json", b"{".to_vec())),
    );
    assert_eq!((r.status, r.code()), (400, "malformed_json"), "{r:?}");
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.body["status"], "stopped", "{r:?}");
}

/// A project's config is read by sbx-core's parser (a bad key is a 400
/// naming it), held to a project's keys (the server's own, such as the
/// environment it passes or the firewall's off switch, are a 400 naming
/// them) and to the server's caps (409); refused, no project is made.
#[test]
fn a_projects_config_is_checked_and_held_to_a_projects_keys() {
    let s = shared();
    let (t, _) = s.session();
    for (config, status, code, names) in [
        (
            json!("[sandbox]\nmemry = \"1g\"\n"),
            400,
            "invalid_config",
            "memry",
        ),
        (
            json!({"sandbox": {"memory": "lots"}}),
            400,
            "invalid_config",
            "sandbox.memory",
        ),
        (json!("[network"), 400, "invalid_config", "config.toml"),
        (
            json!(5),
            400,
            "invalid_config",
            "TOML text or a JSON object",
        ),
        (
            json!("[environment]\npass = [\"JWT_SECRET\"]\n"),
            400,
            "server_owned_keys",
            "environment",
        ),
        (
            json!({"backup": {"url": "file:///var/tmp/x"}}),
            400,
            "server_owned_keys",
            "backup",
        ),
        (
            json!({"network": {"allow-external": true}}),
            400,
            "server_owned_keys",
            "network.allow-external",
        ),
        (
            json!({"sandbox": {"ports": ["80"]}}),
            400,
            "server_owned_keys",
            "sandbox.ports",
        ),
        (json!({"agent": {}}), 400, "server_owned_keys", "agent"),
        (
            json!({"sandbox": {"cpus": 64}}),
            409,
            "resource_limit",
            "sandbox.cpus",
        ),
        (
            json!({"sandbox": {"memory": "64g"}}),
            409,
            "resource_limit",
            "sandbox.memory",
        ),
    ] {
        let r = s.call(
            "POST",
            "/projects",
            Some(&t),
            Some(json!({"name": "c", "config": config})),
        );
        assert_eq!((r.status, r.code()), (status, code), "{config}: {r:?}");
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains(names), "{config}: {m}");
    }
    let r = s.call("GET", "/projects", Some(&t), None);
    assert_eq!(r.body, json!([]), "a refused config made a project: {r:?}");
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "c", "config": {
            "sandbox": {"cpus": 1.5, "memory": "1g"},
            "network": {"allow-domains": ["api.example.com"]},
        }})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    // The server's default file is checked the same way, at start.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("default.toml");
    std::fs::write(&f, "[environment]\nallow = [\"*\"]\n").unwrap();
    let out = common::server_command()
        .env("JWT_SECRET", SECRET)
        .arg("serve")
        .arg("--project-config")
        .arg(&f)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("environment") && err.contains("default.toml"),
        "{err}"
    );
}

#[test]
fn projects_per_user_are_limited() {
    let s = shared();
    let (t, _) = s.session();
    for i in 0..3 {
        let r = s.call(
            "POST",
            "/projects",
            Some(&t),
            Some(json!({"name": format!("p{i}")})),
        );
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "one too many"})),
    );
    assert_eq!((r.status, r.code()), (409, "project_limit"), "{r:?}");
    let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": "p0"})));
    assert_eq!(r.status, 409, "{r:?}");
    // Another user has a limit of their own.
    let (u, _) = s.session();
    let r = s.call("POST", "/projects", Some(&u), Some(json!({"name": "p0"})));
    assert_eq!(r.status, 201, "{r:?}");
}

#[test]
fn the_openapi_document_has_every_route_and_only_real_ones() {
    let s = shared();
    let doc = s.call("GET", "/openapi.json", None, None);
    assert_eq!(doc.status, 200);
    let paths = doc.body["paths"].as_object().unwrap();
    let mut listed = Vec::new();
    for (path, item) in paths {
        for m in item.as_object().unwrap().keys() {
            listed.push(format!("{} {path}", m.to_uppercase()));
        }
    }
    listed.sort();
    let want = [
        "DELETE /projects/{id}",
        "GET /healthz",
        "GET /projects",
        "GET /projects/{id}",
        "GET /projects/{id}/backup-status",
        "GET /projects/{id}/sessions",
        "GET /terminal/{project_id}",
        "POST /auth/login",
        "POST /auth/logout",
        "POST /auth/refresh",
        "POST /auth/register",
        "POST /projects",
        "POST /projects/{id}/restore",
        "POST /projects/{id}/snapshot",
        "POST /projects/{id}/ssh-key",
        "POST /projects/{id}/start",
        "POST /projects/{id}/stop",
    ];
    assert_eq!(listed, want);
    // Each documented route is served: neither the 404 fallback nor a 405.
    for l in &listed {
        let (m, p) = l.split_once(' ').unwrap();
        let p = p
            .replace("{id}", &Uuid::new_v4().to_string())
            .replace("{project_id}", &Uuid::new_v4().to_string());
        let r = s.raw(m, &p, None, None);
        assert!(
            r.status != 405 && r.body["error"]["code"] != "no_route",
            "{l}: {r:?}"
        );
    }
}

#[test]
fn every_action_is_an_audit_record_in_the_sbx_format() {
    let s = shared();
    let (t, _) = s.session();
    let user = user_of(&t);
    let other = Uuid::new_v4();
    s.call("GET", &format!("/projects/{other}"), Some(&t), None);
    let text = std::fs::read_to_string(s.audit_log()).unwrap();
    let mine: Vec<sbx_core::audit::Entry> = text
        .lines()
        .map(|l| sbx_core::audit::Entry::parse(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .filter(|e| e.agent == user)
        .collect();
    let ops: Vec<(&str, &str)> = mine
        .iter()
        .map(|e| (e.operation.as_str(), e.tool.as_str()))
        .collect();
    assert!(
        ops.contains(&("POST /auth/register", "sbx-server")),
        "{ops:?}"
    );
    assert!(ops.contains(&("POST /auth/login", "sbx-server")), "{ops:?}");
    let miss = mine
        .iter()
        .find(|e| e.target == format!("/projects/{other}"))
        .expect("the 404 is audited");
    assert_eq!(miss.result, sbx_core::audit::Outcome::Blocked);
    assert!(
        miss.reason
            .as_deref()
            .unwrap_or("")
            .starts_with("not_found"),
        "{miss:?}"
    );
}

#[test]
fn healthz_answers() {
    let s = shared();
    let r = s.call("GET", "/healthz", None, None);
    assert_eq!((r.status, &r.body), (200, &json!({"status": "ok"})));
}

#[test]
fn start_is_refused_without_a_usable_secret_or_database() {
    let out = common::server_command().args(["serve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("JWT_SECRET"), "{err}");
    let out = common::server_command()
        .env("JWT_SECRET", "too short")
        .args(["serve"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    // A database that is not there: 69, one line, nothing listening.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = common::server_command()
        .env("JWT_SECRET", SECRET)
        .env(
            "DATABASE_URL",
            format!("host={} user=x dbname=x", dir.path().display()),
        )
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

#[test]
fn sandboxes_running_per_user_are_limited() {
    let s = common::start(&["--max-running", "0"]);
    let (t, _) = s.session();
    let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": "p"})));
    let id = r.body["id"].as_str().unwrap().to_owned();
    let r = s.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
    assert_eq!((r.status, r.code()), (409, "running_limit"), "{r:?}");
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.body["status"], "stopped", "{r:?}");
}

#[test]
fn postgres_going_away_is_a_503_and_the_server_reconnects() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    let pg_dir = dir.path().join("pg");
    let pg = LocalCluster::start(&pg_dir).unwrap();
    let s = common::start_on(pg.url("postgres"), &[]);
    let (t, _) = s.session();
    drop(pg); // stops the cluster under the running server
    for (m, body) in [("GET", None), ("POST", Some(json!({"name": "half"})))] {
        let r = s.call(m, "/projects", Some(&t), body);
        assert_eq!((r.status, r.code()), (503, "unavailable"), "{m}: {r:?}");
    }
    let r = s.call("GET", "/healthz", None, None);
    assert_eq!(r.status, 503, "{r:?}");
    let _pg = LocalCluster::start(&pg_dir).unwrap();
    // The pool makes new connections: no restart of the server.
    let r = s.call("GET", "/projects", Some(&t), None);
    assert_eq!(
        (r.status, &r.body),
        (200, &json!([])),
        "nothing half-written: {r:?}"
    );
}

#[test]
fn docker_down_puts_the_project_in_error_with_the_reason() {
    // The API tests' servers have no Docker engine (common::start).
    let s = shared();
    let (t, _) = s.session();
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "no docker"})),
    );
    let id = r.body["id"].as_str().unwrap().to_owned();
    let r = s.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
    assert_eq!((r.status, r.code()), (503, "backend_unavailable"), "{r:?}");
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.body["status"], "error", "{r:?}");
    let why = r.body["status_reason"].as_str().unwrap_or("");
    assert!(why.contains("Docker engine"), "{r:?}");
    // Nor can it be deleted without the engine: it is kept, not lost.
    let r = s.call("DELETE", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!((r.status, r.code()), (503, "backend_unavailable"), "{r:?}");
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("error")),
        "{r:?}"
    );
}

#[test]
fn a_project_left_mid_transition_without_docker_is_marked_error_at_the_next_start() {
    // No engine to ask (common::start): the reconcile cannot tell, so `error`.
    let s = common::start(&[]);
    let (t, _) = s.session();
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "crashed"})),
    );
    let id = r.body["id"].as_str().unwrap().to_owned();
    // What a server killed during a start leaves behind.
    let out = std::process::Command::new(common::cluster().pg.bin().join("psql"))
        .args(["-At", "-d", &s.db, "-c"])
        .arg(format!(
            "UPDATE projects SET status = 'creating' WHERE id = '{id}'"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = s.db.clone();
    drop(s);
    let s = common::start_on(db, &[]);
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.body["status"], "error", "{r:?}");
    assert!(
        r.body["status_reason"]
            .as_str()
            .unwrap_or("")
            .contains("stopped during a start or creation and Docker did not answer"),
        "{r:?}"
    );
}

#[test]
fn repo_is_cloned_only_from_below_the_repo_root() {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    for (dir, file) in [
        (root.path().join("mine"), "a"),
        (outside.path().join("theirs"), "b"),
    ] {
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(file), "1\n").unwrap();
        common::commit_all(&dir);
    }
    // A link below the root to a repository outside it.
    std::os::unix::fs::symlink(outside.path().join("theirs"), root.path().join("link")).unwrap();
    let root_arg = root.path().to_str().unwrap();
    let s = common::start(&["--repo-root", root_arg]);
    let (t, _) = s.session();
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "cloned", "repo": format!("{root_arg}/mine")})),
    );
    assert_eq!(
        (r.status, &r.body["status"]),
        (201, &json!("stopped")),
        "{r:?}"
    );
    let id = r.body["id"].as_str().unwrap();
    let ws = s
        .state
        .join("projects")
        .join(id)
        .join(format!("project-{}", id.replace('-', "")));
    assert!(
        ws.join("a").is_file(),
        "the clone is not in {}",
        ws.display()
    );
    for bad in [
        outside.path().join("theirs").display().to_string(),
        format!("{root_arg}/link"),
        format!(
            "{root_arg}/mine/../../{}",
            outside.path().file_name().unwrap().to_str().unwrap()
        ),
        "mine".to_owned(),
        root_arg.to_owned(),
    ] {
        let r = s.call(
            "POST",
            "/projects",
            Some(&t),
            Some(json!({"name": "x", "repo": bad})),
        );
        assert_eq!((r.status, r.code()), (422, "invalid_repo"), "{bad}: {r:?}");
    }
}

#[test]
fn another_users_request_does_not_wait_on_a_projects_lock() {
    // Route (issue 41): start, stop and delete took the project's lock
    // before checking its owner, so user B's request on user A's id
    // waited while A's project was mid-transition (its 404 came late:
    // the id exists and is busy), and every made-up id left a lock in
    // the server's map for good (memory growth, one entry a request).
    let s = common::start(&[]);
    // An engine that takes connections and never answers: A's start
    // holds its project's lock for as long as the test likes.
    let engine = std::os::unix::net::UnixListener::bind(s.state.join("no-docker.sock")).unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        engine.set_nonblocking(true).unwrap();
        let mut held = Vec::new();
        while released.try_recv().is_err() {
            match engine.accept() {
                Ok((c, _)) => held.push(c),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    });
    let (a, _) = s.session();
    let (b, _) = s.session();
    let r = s.call("POST", "/projects", Some(&a), Some(json!({"name": "busy"})));
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    let start = {
        let (base, a, id) = (s.base.clone(), a.clone(), id.clone());
        std::thread::spawn(move || {
            common::client()
                .post(format!("{base}/projects/{id}/start"))
                .bearer_auth(a)
                .send()
                .map(|r| r.status().as_u16())
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s
        .call("GET", &format!("/projects/{id}"), Some(&a), None)
        .body["status"]
        != "creating"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "A's start never began"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for route in ["stop", "start"] {
        let (base, b, id, tx) = (s.base.clone(), b.clone(), id.clone(), tx.clone());
        std::thread::spawn(move || {
            let r = common::client()
                .post(format!("{base}/projects/{id}/{route}"))
                .bearer_auth(b)
                .send()
                .map(|r| r.status().as_u16());
            let _ = tx.send((route, r.ok()));
        });
    }
    let answers: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)))
        .collect();
    let _ = release.send(());
    let _ = start.join();
    for a in answers {
        let (route, status) = a.expect("B's request waited on A's project's lock");
        assert_eq!(status, Some(404), "{route}");
    }
}

#[test]
fn concurrent_logins_do_not_each_take_a_hashs_memory() {
    // Route (issue 41): every login ran its argon2 (19 MiB) at once, on
    // up to 512 blocking threads; the limits count failures after the
    // fact, so a burst of logins (right or wrong) took ~19 MiB each: a
    // memory exhaustion lever for any client. Hashes now queue.
    let s = common::start(&["--login-limit-address", "100000"]);
    let (email, pw) = s.user();
    let n: u64 = 64;
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (base, email, pw) = (s.base.clone(), email.clone(), pw.clone());
            std::thread::spawn(move || {
                common::client()
                    .post(format!("{base}/auth/login"))
                    .header("content-type", "application/json")
                    .body(json!({"email": email, "password": pw}).to_string())
                    .send()
                    .map(|r| r.status().as_u16())
                    .ok()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Some(200));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // All at once is ~20 MiB a login (~1.2 GiB here); a few at a time,
    // with what the allocator's arenas keep, is a third of that on 2
    // cores.
    assert!(peak_kib < n * 19 * 1024 / 2, "peak RSS {peak_kib} KiB");
}

#[test]
fn a_body_that_never_ends_is_cut_off() {
    // Route (issue 41): no timeout anywhere, so a body trickled (or
    // never finished) held its connection, and a file descriptor, for
    // good: one anonymous client opening a few hundred of them left the
    // server unable to accept anyone. The body now has 10 s to arrive.
    let s = shared();
    let addr = s.base.strip_prefix("http://").unwrap();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(
        b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{",
    )
    .unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the server still waits for the body: {e}"),
        }
    }
    let head = String::from_utf8_lossy(&got);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

/// Read `c` until the server closes it or sends a response head; how
/// long that took, and what came.
fn until_closed(mut c: std::net::TcpStream) -> (std::time::Duration, String) {
    let t0 = std::time::Instant::now();
    c.set_read_timeout(Some(std::time::Duration::from_secs(45)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("still open after {:?}: {e}", t0.elapsed()),
        }
    }
    (t0.elapsed(), String::from_utf8_lossy(&got).into_owned())
}

#[test]
fn a_request_head_that_never_ends_is_cut_off() {
    // Route (issue 41): axum::serve sets no header-read timeout, so half
    // a request line, or a connection that sends nothing, held a file
    // descriptor for good (slowloris). The head now has 10 s.
    let s = shared();
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    let idle = std::net::TcpStream::connect(&addr).unwrap();
    let mut half = std::net::TcpStream::connect(&addr).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let idle = std::thread::spawn(move || until_closed(idle));
    let (took, got) = until_closed(half);
    assert!(!got.contains(" 200 "), "{got}");
    assert!(took < std::time::Duration::from_secs(40), "{took:?}");
    let (took, got) = idle.join().unwrap();
    assert!(got.is_empty() || !got.contains(" 200 "), "{got}");
    assert!(took < std::time::Duration::from_secs(40), "{took:?}");
}

#[test]
fn connections_over_the_cap_are_closed() {
    // Route (issue 41): every connection was taken, so a client holding
    // hundreds of them (within the head timeout, or sending requests
    // slowly) could use up the server's descriptors. One over
    // --max-connections is closed when accepted; the others go on.
    let s = common::start(&[
        "--max-connections",
        "4",
        "--max-connections-per-address",
        "4",
    ]);
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    let held: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    // The server accepts them in its own time.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let mut over = std::net::TcpStream::connect(&addr).unwrap();
    let _ = over.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (_, got) = until_closed(over);
    assert!(got.is_empty(), "served over the cap: {got}");
    drop(held);
    let t0 = std::time::Instant::now();
    loop {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (_, got) = until_closed(c);
        if got.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "no connection served once the others closed: {got}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn one_address_at_its_cap_does_not_starve_another() {
    // Route (issue 41, a41): the connection cap was one pool for every
    // client, so one address opening (and reopening) connections held
    // all of it and no one else could log in. Now one address holds at
    // most --max-connections-per-address; the rest is the others'.
    let s = common::start(&[
        "--max-connections",
        "8",
        "--max-connections-per-address",
        "2",
    ]);
    let (email, pw) = s.user();
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    // 127.0.0.1 tries to hold every slot (a head takes 10 s to time out).
    let flood: Vec<_> = (0..8)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    // 127.0.0.2, another address of the loopback, logs in and lists.
    let b = reqwest::blocking::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let r = b
        .post(format!("{}/auth/login", s.base))
        .header("content-type", "application/json")
        .body(json!({"email": email, "password": pw}).to_string())
        .send()
        .expect("login from a second address while the first holds its cap");
    assert_eq!(r.status(), 200);
    let t = serde_json::from_slice::<Value>(&r.bytes().unwrap()).unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = b
        .get(format!("{}/projects", s.base))
        .bearer_auth(t)
        .send()
        .expect("list from a second address");
    assert_eq!(r.status(), 200);
    // All but two are closed as soon as accepted.
    let closed = flood
        .iter()
        .filter(|c| {
            c.set_read_timeout(Some(std::time::Duration::from_millis(300)))
                .unwrap();
            matches!((&**c).read(&mut [0u8; 1]), Ok(0) | Err(_))
                && (&**c).read(&mut [0u8; 1]).is_ok_and(|n| n == 0)
        })
        .count();
    assert!(
        closed >= 6,
        "{closed} connections of 127.0.0.1 over its cap closed"
    );
    drop(flood);
}

/// `psql` on database `db` (a connection string) as a child process.
fn psql(db: &str, sql: &str) -> std::process::Command {
    let mut c = std::process::Command::new(common::cluster().pg.bin().join("psql"));
    c.args(["-At", "-q", "-d", db, "-c", sql]);
    c
}

#[test]
fn a_burst_over_the_database_pool_is_a_quick_503_and_the_server_goes_on() {
    // Route (issue 41, a41): a request waited 10 s for a database
    // connection and a stuck statement held its connection for good, so
    // a burst over the pool (or one slow table) hung every client. Now
    // the wait is 2 s, then 503 busy; a statement ends after 10 s.
    let s = common::start(&["--db-connections", "2"]);
    let (t, _) = s.session();
    let (email, pw) = s.user();
    // Another session holds `projects` locked: each list waits on it.
    struct Locker(std::process::Child, String);
    impl Drop for Locker {
        fn drop(&mut self) {
            let _ = psql(
                &self.1,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()",
            )
            .output();
            let _ = self.0.wait();
        }
    }
    let locker = Locker(
        psql(
            &s.db,
            "BEGIN; LOCK TABLE projects IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120);",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap(),
        s.db.clone(),
    );
    let t0 = std::time::Instant::now();
    loop {
        let out = psql(
            &s.db,
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE c.relname = 'projects' AND l.mode = 'AccessExclusiveLock' AND l.granted",
        )
        .output()
        .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "1" {
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "no lock");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let (base, t) = (s.base.clone(), t.clone());
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let r = common::client()
                    .get(format!("{base}/projects"))
                    .bearer_auth(t)
                    .send()
                    .unwrap();
                let status = r.status().as_u16();
                let body: Value = serde_json::from_slice(&r.bytes().unwrap()).unwrap();
                (status, body["error"]["code"].clone(), t0.elapsed())
            })
        })
        .collect();
    let got: Vec<_> = burst.into_iter().map(|h| h.join().unwrap()).collect();
    let quick = got
        .iter()
        .filter(|(st, code, took)| {
            *st == 503 && code == "busy" && *took < std::time::Duration::from_secs(8)
        })
        .count();
    // Two hold the pool's connections, stuck on the lock until their
    // statements time out (10 s); the six others are told at once.
    assert!(quick >= 6, "{got:?}");
    assert!(
        got.iter().all(|(st, code, took)| *st == 503
            && code == "busy"
            && *took < std::time::Duration::from_secs(40)),
        "{got:?}"
    );
    // The lock still held, the pool is free again: another user logs in.
    let r = s.login(&email, &pw);
    assert_eq!(r.status, 200, "{r:?}");
    drop(locker);
    let r = s.call("GET", "/projects", Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn a_client_that_never_reads_its_answers_loses_its_connections() {
    // Route (issue 41, a41): the head timeout is for reads only. A client
    // that pipelined requests and never read the answers filled the
    // socket's buffers; the server's write then waited for good, holding
    // one of --max-connections each: four such clients locked everyone
    // out until they chose to leave. A write with no progress for 30 s
    // now closes the connection. Takes ~35 s (beside the other tests).
    /// Shut down on drop, a failure's too: the writers hold clones, and
    /// a server with stalled connections would not stop.
    struct Held(Vec<std::net::TcpStream>);
    impl Drop for Held {
        fn drop(&mut self) {
            for c in &self.0 {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }
    let s = common::start(&[
        "--max-connections",
        "4",
        "--max-connections-per-address",
        "4",
    ]);
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    let held = Held(
        (0..4)
            .map(|_| {
                let c = std::net::TcpStream::connect(&addr).unwrap();
                let mut w = c.try_clone().unwrap();
                std::thread::spawn(move || {
                    let req = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
                    while w.write_all(&req).is_ok() {}
                });
                c
            })
            .collect(),
    );
    let served = || {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        let _ = c.write_all(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        until_closed(c).1.starts_with("HTTP/1.1 200")
    };
    let t0 = std::time::Instant::now();
    while served() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "the readers that never read did not take the slots"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let stalled = std::time::Instant::now();
    while !served() {
        assert!(
            stalled.elapsed() < std::time::Duration::from_secs(50),
            "clients that never read held every connection for {:?}",
            stalled.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(held);
}

#[test]
fn names_and_emails_with_invisible_characters_are_refused() {
    // Route (issue 41): only C0/C1 controls were refused, so a project
    // name (printed in logs and terminals) could carry a bidi override
    // that reorders the line it is printed on, and an email could carry
    // a zero-width space: a second account that reads as the first.
    let s = shared();
    let (t, _) = s.session();
    for name in [
        "evil\u{202E}txt.exe",
        "a\u{2066}b",
        "zero\u{200B}width",
        "line\u{2028}sep",
    ] {
        let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": name})));
        assert_eq!(
            (r.status, r.code()),
            (422, "invalid_name"),
            "{name:?}: {r:?}"
        );
    }
    for email in ["ad\u{200B}min@example.test", "admin@exa\u{202E}mple.test"] {
        let r = s.call(
            "POST",
            "/auth/register",
            None,
            Some(json!({"email": email, "password": "correct horse battery"})),
        );
        assert_eq!(
            (r.status, r.code()),
            (422, "invalid_email"),
            "{email:?}: {r:?}"
        );
    }
}

#[test]
fn the_page_is_embedded_with_its_security_headers() {
    let s = shared();
    for (path, mime, needle) in [
        ("/", "text/html", "/app.js"),
        ("/app.js", "text/javascript", "bearer."),
        ("/app.css", "text/css", "#terminal"),
        ("/vendor/xterm.js", "text/javascript", "Terminal"),
        ("/vendor/xterm.css", "text/css", ".xterm"),
        ("/vendor/addon-fit.js", "text/javascript", "FitAddon"),
        (
            "/vendor/LICENSE-xterm.txt",
            "text/plain",
            "xterm.js authors",
        ),
    ] {
        let r = common::client()
            .get(format!("{}{path}", s.base))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        let header = |n: &str| h.get(n).map_or("", |v| v.to_str().unwrap()).to_owned();
        assert!(header("content-type").starts_with(mime), "{path}: {h:?}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        let csp = header("content-security-policy");
        // Scripts from the page's own origin only: no inline, no eval, no CDN.
        assert!(csp.contains("script-src 'self';"), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-eval"), "{path}: {csp}");
        assert!(r.text().unwrap().contains(needle), "{path}");
    }
    // The page has no inline script and loads nothing from another host.
    let page = common::client()
        .get(&s.base)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(!page.contains("<script>"), "{page}");
    assert!(!page.contains("://"), "{page}");
}

/// SSH without Docker: the private key is in the create and rotate
/// answers only; the row holds the public key and host key (a query on
/// the real Postgres), GET shows no private key, a rotation of a stopped
/// project changes the stored public key, and a project without SSH has
/// none to rotate (409). The login itself: tests/ssh.rs.
#[test]
fn an_ssh_key_is_answered_once_and_never_stored() {
    if std::process::Command::new("ssh-keygen")
        .arg("-?")
        .output()
        .is_err()
    {
        eprintln!("skipped: no ssh-keygen");
        return;
    }
    let s = common::start(&[]);
    let (t, _) = s.session();
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "ide", "ssh": true})),
    );
    assert_eq!(r.status, 201, "{r:?}\n{}", s.stderr.lock().unwrap());
    let id = r.body["id"].as_str().unwrap().to_owned();
    let key1 = r.body["ssh"]["private_key"].as_str().unwrap().to_owned();
    assert!(key1.contains("OPENSSH PRIVATE KEY"), "{r:?}");
    let row = |sql: &str| {
        let o = psql(&s.db, sql).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let stored = row(&format!(
        "SELECT ssh_public_key, ssh_host_key, ssh_host_key_fingerprint FROM projects WHERE id = '{id}'"
    ));
    assert!(stored.starts_with("ssh-ed25519 "), "{stored}");
    assert!(stored.contains("SHA256:"), "{stored}");
    assert_eq!(
        r.body["ssh"]["public_key"].as_str().unwrap(),
        stored.split('|').next().unwrap()
    );
    let whole = row(&format!("SELECT p::text FROM projects p WHERE id = '{id}'"));
    assert!(!whole.contains("PRIVATE KEY"), "{whole}");
    let g = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert!(g.body["ssh"].get("private_key").is_none(), "{g:?}");
    assert_eq!(g.body["ssh"]["port"], Value::Null, "never started: {g:?}");

    let r = s.call("POST", &format!("/projects/{id}/ssh-key"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}");
    let key2 = r.body["ssh"]["private_key"].as_str().unwrap();
    assert_ne!(key1, key2);
    let now = row(&format!(
        "SELECT ssh_public_key FROM projects WHERE id = '{id}'"
    ));
    assert_eq!(now.trim(), r.body["ssh"]["public_key"].as_str().unwrap());
    assert_ne!(now.split('|').next(), stored.split('|').next());

    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "plain"})),
    );
    let plain = r.body["id"].as_str().unwrap();
    let r = s.call(
        "POST",
        &format!("/projects/{plain}/ssh-key"),
        Some(&t),
        None,
    );
    assert_eq!((r.status, r.code()), (409, "no_ssh"), "{r:?}");
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "x", "ssh": "yes"})),
    );
    assert_eq!(r.status, 422, "{r:?}");
}
