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
        let ws: PathBuf = s
            .state
            .join("projects")
            .join(&id)
            .join(format!("project-{}", id.replace('-', "")));
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
        cleanup.0.push(
            s.state
                .join("projects")
                .join(&id)
                .join(format!("project-{}", id.replace('-', ""))),
        );
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
