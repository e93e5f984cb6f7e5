//! The seed's flow against a real Postgres and real Docker: two users
//! each create and start a project, neither can see, start, stop or
//! delete the other's, each sandbox is an sbx sandbox the agent runs in,
//! and stop and delete leave no container or volume behind.
//! Run with SBX_BASE_TAG and SBX_BIN_DIR set (scripts/test does).

mod common;

use std::path::PathBuf;
use std::process::Command;

use sbx_run::names::LABEL_WORKSPACE;
use serde_json::json;

/// Containers (`ps -a`) or volumes labelled with workspace `ws`.
fn labelled(kind: &str, ws: &std::path::Path) -> Vec<String> {
    let filter = format!("label={LABEL_WORKSPACE}={}", ws.display());
    let args: &[&str] = if kind == "container" {
        &["ps", "-a", "-q", "--filter", &filter]
    } else {
        &["volume", "ls", "-q", "--filter", &filter]
    };
    let out = sbx_e2e::sh(Command::new("docker").args(args));
    out.lines().map(str::to_owned).collect()
}

fn running(container: &str) -> bool {
    let out = Command::new("docker")
        .args(["inspect", "--format", "{{.State.Running}}", container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// Root (workspaces go to uid 1000), Docker and the base image.
fn docker_bed() -> bool {
    sbx_e2e::prerequisite(sbx_e2e::is_root(), "root (workspaces go to uid 1000)")
        && sbx_e2e::base_image()
}

#[test]
fn two_users_each_get_a_sandbox_the_other_cannot_touch() {
    if !docker_bed() {
        return;
    }
    let s = common::start_with_docker(&[]);
    let mut projects = Vec::new();
    let mut cleanup = common::Cleanup(Vec::new());
    for name in ["alice", "bob"] {
        let (t, _) = s.session();
        let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": name})));
        assert_eq!(r.status, 201, "{r:?}");
        let id = r.body["id"].as_str().unwrap().to_owned();
        let ws: PathBuf = common::workspace(&s, &id);
        cleanup.0.push(ws.clone());
        let r = s.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
        assert_eq!(
            r.status,
            200,
            "{name}'s start: {r:?}\n{}",
            s.stderr.lock().unwrap()
        );
        assert_eq!(r.body["status"], "running", "{r:?}");
        let container = r.body["container"].as_str().unwrap().to_owned();
        assert!(running(&container), "{container} is not running");
        projects.push((t, id, container, ws));
    }
    let ((alice, a_id, a_box, a_ws), (bob, b_id, b_box, b_ws)) =
        (projects[0].clone(), projects[1].clone());

    // An sbx sandbox: sbx-run reaches it by its workspace, the agent runs as uid 1000.
    let out = sbx_e2e::sbx()
        .args(["exec", "-C"])
        .arg(&a_ws)
        .args(["--", "id", "-u"])
        .output()
        .unwrap();
    assert_eq!(
        sbx_e2e::text(&out).trim(),
        "1000",
        "{}",
        sbx_e2e::text(&out)
    );

    // Bob, on every route of alice's project: a 404, and nothing moves.
    for (m, p) in [
        ("GET", format!("/projects/{a_id}")),
        ("POST", format!("/projects/{a_id}/stop")),
        ("POST", format!("/projects/{a_id}/start")),
        ("DELETE", format!("/projects/{a_id}")),
    ] {
        let r = s.call(m, &p, Some(&bob), None);
        assert_eq!(r.status, 404, "bob {m} {p}: {r:?}");
    }
    let r = s.call("GET", "/projects", Some(&bob), None);
    assert_eq!(r.body.as_array().unwrap().len(), 1, "{r:?}");
    assert!(running(&a_box), "bob's requests stopped alice's sandbox");

    // Stop: the container stays, stopped; delete: nothing stays.
    let r = s.call(
        "POST",
        &format!("/projects/{a_id}/stop"),
        Some(&alice),
        None,
    );
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("stopped")),
        "{r:?}"
    );
    assert!(!running(&a_box));
    assert!(running(&b_box), "alice's stop reached bob's sandbox");
    for (t, id, ws) in [(&alice, &a_id, &a_ws), (&bob, &b_id, &b_ws)] {
        let r = s.call("DELETE", &format!("/projects/{id}"), Some(t), None);
        assert_eq!(r.status, 204, "{r:?}");
        assert_eq!(
            labelled("container", ws),
            Vec::<String>::new(),
            "containers left"
        );
        assert_eq!(labelled("volume", ws), Vec::<String>::new(), "volumes left");
        assert!(!ws.exists(), "{} left", ws.display());
        let r = s.call("GET", &format!("/projects/{id}"), Some(t), None);
        assert_eq!(r.status, 404);
    }
    // The server's audit records read as sbx's: `sbx-run log` shows them.
    let out = sbx_e2e::sbx()
        .arg("log")
        .env("SBX_AUDIT_LOG", s.audit_log())
        .output()
        .unwrap();
    let log = sbx_e2e::text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("sbx-server") && l.contains(&format!("/projects/{a_id}/start"))),
        "{log}"
    );
}

/// Set project `id`'s status in `db` behind the server's back.
fn set_status(db: &str, id: &str, status: &str) {
    let out = Command::new(common::cluster().pg.bin().join("psql"))
        .args(["-At", "-d", db, "-c"])
        .arg(format!(
            "UPDATE projects SET status = '{status}' WHERE id = '{id}'"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", sbx_e2e::text(&out));
}

/// A server that stopped mid-transition: at its next start each project
/// left `creating` (or `stopping`, `deleting`) is checked against Docker, not blindly failed. The
/// one whose sandbox came up is `running`, its container untouched; the
/// one with no sandbox is `error`, saying so.
#[test]
fn a_project_left_creating_is_reconciled_against_docker() {
    if !docker_bed() {
        return;
    }
    let s = common::start_with_docker(&[]);
    let (t, _) = s.session();
    let mut cleanup = common::Cleanup(Vec::new());
    let mut ids = Vec::new();
    for name in ["up", "never started"] {
        let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": name})));
        assert_eq!(r.status, 201, "{r:?}");
        let id = r.body["id"].as_str().unwrap().to_owned();
        cleanup.0.push(common::workspace(&s, &id));
        ids.push(id);
    }
    let (up, never) = (&ids[0], &ids[1]);
    let r = s.call("POST", &format!("/projects/{up}/start"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    let container = r.body["container"].as_str().unwrap().to_owned();
    // What a server killed during a start and during a delete leaves.
    set_status(&s.db, up, "creating");
    set_status(&s.db, never, "deleting");
    let s = common::restart(s, &[], true);
    let r = s.call("GET", &format!("/projects/{up}"), Some(&t), None);
    assert_eq!(
        (&r.body["status"], &r.body["container"]),
        (&json!("running"), &json!(container)),
        "{r:?}\n{}",
        s.stderr.lock().unwrap()
    );
    assert!(running(&container), "the reconcile stopped {container}");
    let r = s.call("GET", &format!("/projects/{never}"), Some(&t), None);
    assert_eq!(r.body["status"], "error", "{r:?}");
    assert!(
        r.body["status_reason"]
            .as_str()
            .unwrap_or("")
            .contains("sandbox does not exist"),
        "{r:?}"
    );
    // Both are the user's to go on with: stop the one, delete both.
    let r = s.call("POST", &format!("/projects/{up}/stop"), Some(&t), None);
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("stopped")),
        "{r:?}"
    );
    for id in [up, never] {
        let r = s.call("DELETE", &format!("/projects/{id}"), Some(&t), None);
        assert_eq!(r.status, 204, "{r:?}");
    }
}

/// Seed 001's inactivity loop: a project nobody connects to is stopped
/// after `--idle-stop` with a final backup (the last file written is in
/// the store), `stopped` with reason `idle`, and audited.
#[test]
fn a_project_nobody_connects_to_is_backed_up_and_stopped() {
    if !docker_bed() {
        return;
    }
    let s = common::start_with_docker(&[
        "--idle-stop",
        "3s",
        "--backup-url",
        "file:///commandhistory/sbx-store",
    ]);
    let (t, _) = s.session();
    let mut cleanup = common::Cleanup(Vec::new());
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "quiet"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    let ws = common::workspace(&s, &id);
    cleanup.0.push(ws.clone());
    let r = s.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    let container = r.body["container"].as_str().unwrap().to_owned();
    agent_sh(&ws, "echo last > ~/last.txt");
    let t0 = std::time::Instant::now();
    let r = loop {
        let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
        if r.body["status"] == "stopped" || t0.elapsed() > std::time::Duration::from_secs(90) {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(
        (&r.body["status"], &r.body["status_reason"]),
        (&json!("stopped"), &json!("idle")),
        "{r:?}\n{}",
        s.stderr.lock().unwrap()
    );
    assert!(!running(&container));
    let audit = std::fs::read_to_string(s.audit_log()).unwrap();
    assert!(
        audit
            .lines()
            .any(|l| l.contains(r#""operation":"idle-stop""#) && l.contains(&id)),
        "{audit}"
    );
    // Before it stopped, its system state was kept as a snapshot (seed
    // 001), tagged idle, whose image carries the workspace's label.
    assert!(
        audit
            .lines()
            .any(|l| l.contains(r#""operation":"idle-snapshot""#)
                && l.contains(&id)
                && l.contains(r#""result":"allowed""#)),
        "no idle snapshot: {audit}"
    );
    let images = std::process::Command::new("docker")
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .args([
            "--filter",
            &format!(
                "label=sbx.snapshot.workspace={}",
                ws.canonicalize().unwrap().display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        !sbx_e2e::text(&images).trim().is_empty(),
        "no snapshot image of {}: {}",
        ws.display(),
        sbx_e2e::text(&images)
    );
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = format!("/commandhistory/sbx-store/projects/{id}");
    let out = sbx_e2e::restore_from_container(&container, &store, tmp.path());
    assert_eq!(
        std::fs::read_to_string(out.join("last.txt")).unwrap(),
        "last\n"
    );
    let r = s.call("DELETE", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.status, 204, "{r:?}");
}

/// Run `script` as the agent in workspace `ws`'s sandbox; its output.
fn agent_sh(ws: &std::path::Path, script: &str) -> String {
    let out = sbx_e2e::sbx()
        .args(["exec", "-C"])
        .arg(ws)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", sbx_e2e::text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A home's file comes back from a snapshot: written, snapshotted,
/// deleted (the stop's final backup no longer has it), restored from the
/// snapshot on the stopped project, and there at the next start. Another
/// user reaches none of it; a running project is not restored over.
#[test]
fn a_snapshot_brings_a_deleted_home_file_back_after_a_restore() {
    if !docker_bed() {
        return;
    }
    // file:// is a path inside the sandbox: this one is on its history
    // volume, which outlives its containers (the firewall keeps a sandbox
    // from the host's S3 stand-in).
    let s = common::start_with_docker(&["--backup-url", "file:///commandhistory/sbx-store"]);
    let (t, _) = s.session();
    let (bob, _) = s.session();
    let mut cleanup = common::Cleanup(Vec::new());
    let r = s.call("POST", "/projects", Some(&t), Some(json!({"name": "kept"})));
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap().to_owned();
    let ws = common::workspace(&s, &id);
    cleanup.0.push(ws.clone());
    let p = |what: &str| format!("/projects/{id}/{what}");
    let r = s.call("POST", &p("start"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    let container = r.body["container"].as_str().unwrap().to_owned();
    agent_sh(&ws, "echo 'the agent wrote this' > ~/notes.txt");

    // While a snapshot runs the project says so: the sandbox is paused
    // so that the snapshot waits on it until the status has been seen.
    let pause = |how: &str| {
        let o = std::process::Command::new("docker")
            .args([how, &container])
            .output()
            .unwrap();
        assert!(o.status.success(), "docker {how}: {o:?}");
    };
    pause("pause");
    let (url, tok) = (format!("{}{}", s.base, p("snapshot")), t.clone());
    let call = std::thread::spawn(move || {
        let r = common::client().post(url).bearer_auth(tok).send().unwrap();
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_slice::<serde_json::Value>(&r.bytes().unwrap()),
        )
    });
    let seen = statuses_until(&s, &t, &id, |st| st == "snapshotting");
    pause("unpause");
    let (status, body) = call.join().unwrap();
    assert!(seen.contains(&"snapshotting".to_owned()), "{seen:?}");
    assert_eq!(status, 200, "{body:?}");
    let snap = body.unwrap()["snapshot"]
        .as_str()
        .expect("a snapshot id")
        .to_owned();
    // Route (issue 41, a41): a storm of snapshots on one project queued
    // behind its lock, each holding a connection and a worker until its
    // turn. One runs; the others are refused at once (409 busy).
    let storm: Vec<_> = (0..10)
        .map(|_| {
            let (url, t) = (format!("{}{}", s.base, p("snapshot")), t.clone());
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let r = common::client().post(url).bearer_auth(t).send().unwrap();
                let status = r.status().as_u16();
                let body: serde_json::Value =
                    serde_json::from_slice(&r.bytes().unwrap()).unwrap_or_default();
                (status, body["error"]["code"].clone(), t0.elapsed())
            })
        })
        .collect();
    let got: Vec<_> = storm.into_iter().map(|h| h.join().unwrap()).collect();
    let busy = |(st, code, _): &&(u16, serde_json::Value, std::time::Duration)| {
        *st == 409 && code == "busy"
    };
    assert!(
        got.iter().any(|g| g.0 == 200)
            && got.iter().any(|g| busy(&g))
            && got.iter().all(|g| g.0 == 200 || busy(&g))
            && got
                .iter()
                .filter(busy)
                .all(|g| g.2 < std::time::Duration::from_secs(10)),
        "{got:?}"
    );
    let r = s.call("GET", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.body["status"], "running", "{r:?}");
    let r = s.call("GET", &p("backup-status"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}");
    // The daemon may have passed since: the last snapshot, at least ours.
    let last = r.body["status"]["last_snapshot"].as_str().unwrap_or("");
    assert!(last >= snap.as_str(), "{r:?}");
    assert!(
        r.body["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/projects/{id}")),
        "{r:?}"
    );
    for (m, path) in [
        ("POST", p("snapshot")),
        ("POST", p("restore")),
        ("GET", p("backup-status")),
    ] {
        let r = s.call(m, &path, Some(&bob), None);
        assert_eq!(r.status, 404, "bob {m} {path}: {r:?}");
    }
    let r = s.call("POST", &p("restore"), Some(&t), None);
    assert_eq!((r.status, r.code()), (409, "wrong_status"), "{r:?}");

    agent_sh(&ws, "rm ~/notes.txt");
    let r = s.call("POST", &p("stop"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.call(
        "POST",
        &p("restore"),
        Some(&t),
        Some(json!({"snapshot": "99999999999999999999"})),
    );
    assert_eq!((r.status, r.code()), (404, "no_snapshot"), "{r:?}");
    // The restore runs a sandbox for seconds: its status is seen on the
    // way, polled beside it.
    let (url, tok) = (format!("{}{}", s.base, p("restore")), t.clone());
    let body = json!({"snapshot": snap});
    let call = std::thread::spawn(move || {
        let r = common::client()
            .post(url)
            .bearer_auth(tok)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_slice::<serde_json::Value>(&r.bytes().unwrap()),
        )
    });
    let seen = statuses_until(&s, &t, &id, |_| call.is_finished());
    let (status, body) = call.join().unwrap();
    assert!(seen.contains(&"restoring".to_owned()), "{seen:?}");
    assert_eq!(
        (status, body.as_ref().ok().map(|b| &b["status"])),
        (200, Some(&json!("stopped"))),
        "{body:?}\n{}",
        s.stderr.lock().unwrap()
    );
    let r = s.call("POST", &p("start"), Some(&t), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(agent_sh(&ws, "cat ~/notes.txt"), "the agent wrote this\n");

    // Each action is in the audit log, with its outcome.
    let log = std::fs::read_to_string(s.audit_log()).unwrap();
    for op in [
        "POST /projects/{id}/snapshot",
        "POST /projects/{id}/restore",
        "GET /projects/{id}/backup-status",
    ] {
        assert!(log.lines().any(|l| l.contains(op)), "{op} not audited");
    }
    let r = s.call("DELETE", &format!("/projects/{id}"), Some(&t), None);
    assert_eq!(r.status, 204, "{r:?}");
}

/// The project's statuses as `GET /projects/{id}` gives them, polled
/// every 20 ms until `done` says so of the last (or two minutes pass).
fn statuses_until(
    s: &common::Server,
    t: &str,
    id: &str,
    mut done: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::time::Instant::now() < end {
        let r = s.call("GET", &format!("/projects/{id}"), Some(t), None);
        let st = r.body["status"].as_str().unwrap_or("?").to_owned();
        if seen.last() != Some(&st) {
            seen.push(st.clone());
        }
        if done(&st) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    seen
}

/// (NanoCpus, Memory) docker gave `container`.
fn resources(container: &str) -> (u64, u64) {
    let out = sbx_e2e::sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}",
        container,
    ]));
    let mut it = out.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// A project's sandbox gets the CPUs and memory its config asks for,
/// within the server's caps; one that asks for nothing gets the caps, not
/// sbx's larger defaults. A cloned repository's own config is not obeyed:
/// it asked for the server's JWT_SECRET and more CPUs than the cap, and
/// the sandbox has neither.
#[test]
fn a_sandbox_gets_its_configs_resources_within_the_servers_caps() {
    if !docker_bed() {
        return;
    }
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let src = root.path().join("src");
    std::fs::create_dir_all(src.join(".agent-sandbox")).unwrap();
    std::fs::write(
        src.join(".agent-sandbox/config.toml"),
        "[environment]\npass = [\"JWT_SECRET\"]\n[sandbox]\ncpus = 1.8\n",
    )
    .unwrap();
    std::fs::write(
        src.join(".agent-sandbox/Dockerfile"),
        sbx_run::image::REPO_DOCKERFILE,
    )
    .unwrap();
    common::commit_all(&src);
    let s = common::start_with_docker(&[
        "--max-cpus-per-sandbox",
        "1.5",
        "--max-memory-per-sandbox",
        "1g",
        "--repo-root",
        root.path().to_str().unwrap(),
    ]);
    let (t, _) = s.session();
    let mut cleanup = common::Cleanup(Vec::new());
    let r = s.call(
        "POST",
        "/projects",
        Some(&t),
        Some(json!({"name": "big", "config": {"sandbox": {"cpus": 2}}})),
    );
    assert_eq!((r.status, r.code()), (409, "resource_limit"), "{r:?}");
    let mut boxes = Vec::new();
    for (name, body) in [
        (
            "asks",
            json!({"name": "asks", "config": "[sandbox]\ncpus = 1.0\nmemory = \"768m\"\n"}),
        ),
        (
            "cloned",
            json!({"name": "cloned", "repo": src.to_str().unwrap()}),
        ),
    ] {
        let r = s.call("POST", "/projects", Some(&t), Some(body));
        assert_eq!(r.status, 201, "{name}: {r:?}");
        let id = r.body["id"].as_str().unwrap().to_owned();
        let ws = common::workspace(&s, &id);
        cleanup.0.push(ws.clone());
        let r = s.call("POST", &format!("/projects/{id}/start"), Some(&t), None);
        assert_eq!(r.status, 200, "{name}: {r:?}\n{}", s.stderr.lock().unwrap());
        boxes.push((r.body["container"].as_str().unwrap().to_owned(), ws));
    }
    assert_eq!(
        agent_sh(&boxes[1].1, "echo \"${JWT_SECRET:-unset}\""),
        "unset\n"
    );
    assert_eq!(resources(&boxes[0].0), (1_000_000_000, 768 << 20));
    assert_eq!(resources(&boxes[1].0), (1_500_000_000, 1 << 30));
}
