//! The real-Docker path: a container from the bootstrap image, with the
//! freshly built sbx-envfilter mounted in, must not pass secrets to its child.

use std::process::Command;

use sbx_e2e::{bin, docker_ready, prerequisite, sh, test_image};

#[test]
fn envfilter_in_a_real_container_drops_secrets() {
    if !prerequisite(docker_ready(), "a running Docker engine") {
        return;
    }
    let image = test_image();
    let envfilter = bin("sbx-envfilter");
    let token = format!("ghp_{}", "Q7x".repeat(12));
    let run = |args: &[&str]| {
        let mut c = Command::new("docker");
        c.args(["run", "--rm", "--label", "sbx.test=1", "--network", "none"])
            .args(["-e", &format!("GITHUB_TOKEN={token}")])
            .args(["-e", &format!("INNOCENT={token}")])
            .args(["-e", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI"])
            .args(["-e", "SAFE=kept"])
            .args(["-e", "SBX_AUDIT_LOG=/tmp/audit.jsonl"])
            .arg("-v")
            .arg(format!(
                "{}:/usr/local/bin/sbx-envfilter:ro",
                envfilter.display()
            ))
            .arg(&image)
            .args(args);
        c
    };

    // The container's own environment has the secrets; the child must not.
    let before = sh(&mut run(&["env"]));
    assert!(
        before.contains("GITHUB_TOKEN="),
        "the test must start with the secret present"
    );
    let after = sh(&mut run(&["sbx-envfilter", "--", "env"]));
    assert!(after.contains("SAFE=kept\n"), "{after}");
    for leaked in [
        "GITHUB_TOKEN",
        "INNOCENT",
        "AWS_SECRET_ACCESS_KEY",
        &token,
        "wJalrXUtnFEMI",
    ] {
        assert!(
            !after.contains(leaked),
            "{leaked} reached the child:\n{after}"
        );
    }

    // The child's status comes back through docker run unchanged, and the
    // audit log inside the container names what was dropped, not values.
    let out = run(&[
        "sh",
        "-c",
        "sbx-envfilter -- sh -c 'exit 7'; s=$?; cat /tmp/audit.jsonl; exit $s",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let audit = String::from_utf8_lossy(&out.stdout);
    assert_eq!(audit.lines().count(), 3, "{audit}");
    assert!(!audit.contains(&token) && !audit.contains("wJalrXUtnFEMI"));
}
