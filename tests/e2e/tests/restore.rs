//! Restore in seed 001's order (issue 43), on one workspace: `restore
//! --snapshot` brings back a snapshot's system state and the home backup
//! taken with it, `restore --backup` a home backup, a start with no
//! container takes the system state from the newest snapshot, every step
//! audited, and `rm --volumes` removes the snapshots with the rest.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, sbx, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn as_root(repo: &Repo, script: &str) -> String {
    ok(sbx()
        .args(["exec", "--root", "-C"])
        .arg(&repo.path)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap())
}

#[test]
fn restore_brings_back_a_snapshot_or_a_backup_and_start_follows_the_seeds_order() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("restore");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    ok(sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap());
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[backup]\nurl = \"file:///commandhistory/restore-store\"\ninterval = \"1h\"\n",
    )
    .unwrap();
    ok(run(&repo, &["start"]));
    let state = |repo: &Repo| ok(repo.exec("cat ~/v; ls /opt | grep '^m' | tr '\\n' ' '; echo"));

    // Point a: /opt/m1 (root's) and ~/v = one (the agent's).
    as_root(&repo, "echo 1 > /opt/m1");
    ok(repo.exec("echo one > ~/v"));
    let id = ok(run(&repo, &["snapshot", "--tag", "a"]));
    let v: serde_json::Value = serde_json::from_str(
        ok(run(&repo, &["--json", "snapshots"]))
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    let home_backup = v["data"]["home_backup"].as_str().unwrap().to_owned();
    // Later: /opt/m2, ~/v = two.
    as_root(&repo, "echo 2 > /opt/m2");
    ok(repo.exec("echo two > ~/v"));

    ok(run(&repo, &["restore", "--snapshot", "a"]));
    assert_eq!(state(&repo), "one\nm1");
    ok(repo.exec("echo three > ~/v"));
    ok(run(&repo, &["restore", "--backup", &home_backup]));
    assert_eq!(state(&repo), "one\nm1");
    let log = ok(sbx().args(["--json", "log"]).output().unwrap());
    for target in [&id, &home_backup] {
        assert!(
            log.lines().any(|l| l.contains(r#""operation":"restore""#)
                && l.contains(&format!(r#""target":"{target}""#))),
            "no restore of {target} audited"
        );
    }

    // No container: the home volume is used, the system state comes from
    // the newest snapshot (m1 is there, though root wrote it after the
    // per-repo image was built), and the choice is audited.
    ok(run(&repo, &["rm"]));
    ok(run(&repo, &["start"]));
    assert_eq!(state(&repo), "one\nm1");
    let log = ok(sbx().args(["--json", "log"]).output().unwrap());
    assert!(
        log.lines()
            .any(|l| l.contains(r#""policy":"restore-order""#)
                && l.contains("home: the home volume")
                && l.contains(&format!("system state: snapshot {id}"))),
        "{log}"
    );

    // rm --volumes takes the snapshots along: records and images.
    let image = v["data"]["image"].as_str().unwrap().to_owned();
    ok(run(&repo, &["rm", "--volumes"]));
    assert_eq!(ok(run(&repo, &["snapshots"])), "");
    let o = Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{image} is still there");
}
