//! Snapshots of a whole sandbox (issue 43), on one shared sandbox: the
//! user's root (`exec --root`) installs a package, the agent writes in its
//! home and tampers with what else it can reach; the sandbox made anew
//! from the snapshot (or from its export, imported elsewhere) has the
//! package and the home, none of the agent's tampering (the guest removes
//! it at start: `sbx-guest init --from-snapshot`), and every guard of a
//! fresh start.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, sbx, sh, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

/// `sbx-run exec --root -C REPO -- sh -c SCRIPT`.
fn as_root(repo: &Repo, script: &str) -> Output {
    sbx()
        .args(["exec", "--root", "-C"])
        .arg(&repo.path)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A one-file Debian package (no network): /usr/local/bin/hello-sbx.
fn tiny_deb(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let root = dir.join("pkg");
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: hello-sbx\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n",
    )
    .unwrap();
    let bin = root.join("usr/local/bin/hello-sbx");
    std::fs::write(&bin, "#!/bin/sh\necho hello-sbx\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deb = dir.join("hello.deb");
    sh(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb));
    deb
}

#[test]
fn a_snapshot_keeps_root_s_packages_and_the_home_and_nothing_the_agent_planted() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("snap");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n.env\n").unwrap();
    std::fs::write(repo.path.join(".env"), "API_KEY=hunter2\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.hook("pre-commit", "#!/bin/sh\nexit 1\n");
    let o = sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[environment]\npass = [\"PASSED_TOKEN\"]\n",
    )
    .unwrap();
    let o = sbx()
        .arg("start")
        .arg(&repo.path)
        .env("PASSED_TOKEN", "passed-value")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));

    // The user's root, recorded with its command; the agent's is not root
    // and cannot reach the socket that gives it.
    let o = as_root(&repo, "id -u");
    assert_eq!(
        (o.status.code(), out(&o)),
        (Some(0), "0".into()),
        "{}",
        text(&o)
    );
    let o = repo.exec(
        "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"/run/sbx/host/guest.sock\")' 2>&1; id -u; sudo -n id -u 2>&1",
    );
    let t = text(&o);
    assert!(t.contains("PermissionError") && t.contains("1000"), "{t}");
    assert!(
        !t.lines().any(|l| l.trim() == "0"),
        "the agent got root: {t}"
    );
    let log = as_root(&repo, "cat /run/sbx/host/audit.jsonl");
    assert!(
        out(&log)
            .lines()
            .any(|l| l.contains(r#""operation":"exec-root""#)
                && l.contains(r#""target":"sh -c id -u""#)),
        "{}",
        text(&log)
    );
    // A socket someone else owns is not the user's sandbox: refused.
    let host_dir = sbx_run::spec::host_dir(&repo_container(&repo));
    let sock = sbx_core::guestapi::socket_in(&host_dir);
    sh(Command::new("chown").arg("65534").arg(&sock));
    let o = as_root(&repo, "id -u");
    sh(Command::new("chown").arg("0").arg(&sock));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("not to you"), "{}", text(&o));

    // The user installs a package; the agent writes in its home and plants
    // what it can outside it.
    let deb = tiny_deb(repo.root());
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&deb)
        .arg(":/tmp/hello.deb")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = as_root(
        &repo,
        "apt-get install -y /tmp/hello.deb >/dev/null 2>&1; hello-sbx",
    );
    assert_eq!(out(&o), "hello-sbx", "{}", text(&o));
    // What it plants is in the snapshot's image (one commit of the
    // container); the start from it removes it, following nothing: links
    // to root's files and to the guards' state, a FIFO (a reader would
    // hang), a tree nearly as deep as PATH_MAX (docker's commit keeps no
    // deeper path), a name with a newline, a directory it locked (mode
    // 000), and a file in a world-writable directory root made outside /tmp.
    let o = as_root(
        &repo,
        "mkdir -m 1777 /opt/shared && echo root > /opt/shared/roots && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    let o = repo.exec(
        "echo mine > ~/note && echo evil > /var/tmp/.bashrc && echo evil > /tmp/evil \
         && mkdir -p /var/tmp/d && ln -s /etc/shadow /var/tmp/d/link \
         && ln -s /run/sbx-fw/state.json /opt/shared/fw-state && ln -s /run/sbx-audit /tmp/audit \
         && ln -s /etc/shadow /opt/shared/shadow && echo evil > /opt/shared/planted \
         && mkfifo /var/tmp/fifo && printf x > \"$(printf '/var/tmp/new\nline')\" \
         && mkdir -p /tmp/locked/in && echo x > /tmp/locked/in/f && chmod 000 /tmp/locked/in /tmp/locked \
         && perl -e 'mkdir q(/var/tmp/deep) or die; chdir q(/var/tmp/deep) or die; \
                     for (1..1950) { mkdir q(d) or die $!; chdir q(d) or die $! } \
                     open(F, q(>f)) or die $!' \
         && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));

    let o = run(&repo, &["snapshot", "--tag", "t1"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = out(&o);
    let o = run(&repo, &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
    assert_eq!(v["data"]["id"], id.as_str(), "{}", text(&o));
    assert_eq!(v["data"]["tag"], "t1");
    assert!(v["data"]["size"].as_u64().unwrap() > 0, "{v}");
    // The image keeps none of the values docker run gave the container.
    let image = v["data"]["image"].as_str().unwrap().to_owned();
    let env = sh(Command::new("docker").args([
        "image",
        "inspect",
        "--format",
        "{{json .Config.Env}}",
        &image,
    ]));
    assert!(!env.contains("passed-value"), "{env}");

    // The container goes; the sandbox comes back from the snapshot.
    let anew_from = |tag: &str| {
        sh(Command::new("docker").args(["rm", "--force", &repo_container(&repo)]));
        let o = sbx()
            .args(["start", "--from-snapshot", tag, "-C"])
            .arg(&repo.path)
            .env("PASSED_TOKEN", "passed-value")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    };
    anew_from("t1");
    let probe = |s: &str| {
        let o = repo.exec(s);
        (o.status.code(), out(&o))
    };
    assert_eq!(probe("hello-sbx").1, "hello-sbx");
    assert_eq!(probe("cat ~/note").1, "mine");
    // The cleanup looked where the snapshot's one layer changed things,
    // not at every directory of the image, and the layer is gone.
    let logs = cleanup_line(&repo);
    assert!(logs.contains("snapshot's 1 layer(s) changed"), "{logs}");
    assert_eq!(
        probe("ls /run/sbx-layers 2>&1; mount | grep -c sbx-layers").1,
        "ls: cannot access '/run/sbx-layers': No such file or directory\n0"
    );
    // As clean as a fresh sandbox: nothing the agent planted is there;
    // root's file in the world-writable directory and what the links
    // pointed at are.
    let clean = |repo: &Repo| {
        let o = repo.exec("ls -A /var/tmp /tmp /opt/shared | grep -v : | grep -v '^$'");
        assert_eq!(out(&o), "roots", "{}", text(&o));
        let o = as_root(
            repo,
            "test -s /etc/shadow && test -s /run/sbx-fw/state.json && test -S /run/sbx-audit/audit.sock && echo ok",
        );
        assert_eq!(out(&o), "ok", "{}", text(&o));
    };
    clean(&repo);
    // A snapshot of a sandbox made from one: both snapshot layers are
    // looked at; what the agent planted in this one goes too.
    let o = repo.exec("echo evil > /var/tmp/second && echo evil > /opt/shared/second && echo ok");
    assert_eq!(out(&o), "ok", "{}", text(&o));
    let o = run(&repo, &["snapshot", "--tag", "t2"]);
    assert!(o.status.success(), "{}", text(&o));
    anew_from("t2");
    let logs = cleanup_line(&repo);
    assert!(logs.contains("snapshot's 2 layer(s) changed"), "{logs}");
    clean(&repo);
    assert_eq!(probe("hello-sbx").1, "hello-sbx");
    // The guards hold as in a fresh start.
    assert_eq!(probe("wc -c < .env").1, "0");
    assert_eq!(probe("echo $PASSED_TOKEN").1, "passed-value");
    assert_eq!(
        probe("git commit --no-verify --allow-empty -m x").0,
        Some(77)
    );
    assert_eq!(probe("sbx-fw status").0, Some(77));
    let o = repo.exec("sbx-fw probe --json tcp:192.0.2.1:443 dns:127.0.0.53/example.org");
    for l in out(&o).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let verdict = v["data"]["verdict"].as_str().unwrap();
        assert!(verdict == "refused" || verdict == "dns-refused", "{l}");
    }
    assert_eq!(
        probe("grep CapEff /proc/self/status").1,
        "CapEff:\t0000000000000000"
    );

    // Bad input: another workspace's snapshot is refused, named; a stopped
    // or missing sandbox has nothing to snapshot.
    let other = Repo::new("other");
    other.git(&["init", "-q", "-b", "main"]);
    let o = run(&other, &["start", "--from-snapshot", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains(&repo.path.display().to_string()),
        "{}",
        text(&o)
    );
    let o = run(&other, &["snapshot"]);
    assert_eq!(o.status.code(), Some(66), "{}", text(&o));

    // Export and import: the archive (`docker save` format, the record
    // first) makes a snapshot of another workspace, which starts from it.
    let arch = repo.root().join("t1.tar");
    let o = run(
        &repo,
        &["snapshot", "export", "t1", "-o", arch.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run(
        &repo,
        &["snapshot", "export", "t1", "-o", arch.to_str().unwrap()],
    );
    assert_ne!(
        o.status.code(),
        Some(0),
        "an export over a file: {}",
        text(&o)
    );
    let o = run(&other, &["snapshot", "import", arch.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(out(&o), id);
    let o = run(&other, &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
    assert_eq!(v["data"]["tag"], "t1", "{v}");
    assert_eq!(
        v["data"]["workspace"],
        other.path.display().to_string(),
        "{v}"
    );
    let imported = v["data"]["image"].as_str().unwrap().to_owned();
    assert_ne!(imported, image);
    let o = run(&other, &["snapshot", "import", arch.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "a second import: {}", text(&o));
    let o = run(&other, &["start", "--from-snapshot", "t1"]);
    assert!(o.status.success(), "{}", text(&o));
    let o =
        other.exec("hello-sbx; git commit --no-verify --allow-empty -m x >/dev/null 2>&1; echo $?");
    assert_eq!(out(&o), "hello-sbx\n77", "{}", text(&o));
    // The archive carried the agent's files; the start removed them.
    clean(&other);
    // Its per-repo image is not the one the snapshot was made on: every
    // directory was read.
    let logs = cleanup_line(&other);
    assert!(logs.contains("(every one)"), "{logs}");

    let _ = run(&other, &["rm", "--volumes"]);
    let o = run(&repo, &["stop"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&repo, &["snapshot"]);
    assert_eq!(o.status.code(), Some(66), "{}", text(&o));
    assert!(text(&o).contains("stopped"), "{}", text(&o));
    let _ = run(&repo, &["rm"]);
    let _ = Command::new("docker")
        .args(["image", "rm", "--force", &image])
        .output();
}

/// A name beginning with `.wh.` is a removal in docker's image layers:
/// the agent, which cannot remove root's file from a world-writable
/// directory (sticky), could have it gone from the next snapshot by
/// making `.wh.` and its name beside it (or `.wh..wh..opq`: all the
/// directory held), wherever root's file is in a layer below: the
/// per-repo image, an earlier snapshot. The snapshot is refused, the
/// sandbox runs on, and once the name is gone the snapshot keeps root's
/// files.
#[test]
fn a_whiteout_name_is_refused_and_root_s_files_stay() {
    if !base_image() {
        return;
    }
    let repo = Repo::initialised("snapwh");
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = as_root(
        &repo,
        "mkdir -m 1777 /opt/shared && echo root > /opt/shared/roots \
         && echo root > /var/tmp/rootfile && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    // Root's files in a layer below: a snapshot, and a sandbox made from it.
    let o = run(&repo, &["snapshot", "--tag", "roots"]);
    assert!(o.status.success(), "{}", text(&o));
    sh(Command::new("docker").args(["rm", "--force", &repo_container(&repo)]));
    let o = run(&repo, &["start", "--from-snapshot", "roots"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = repo.exec(
        "rm -f /opt/shared/roots 2>/dev/null; touch /opt/shared/.wh.roots /var/tmp/.wh..wh..opq \
         && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    // Found in the container's layer read from the host (root, the
    // engine's data root in sight), and through the engine's list where
    // it is not (sbx-run in a mount namespace with a tmpfs over it).
    let refused = |o: &Output, what: &str| {
        assert_eq!(o.status.code(), Some(65), "{}", text(o));
        assert!(text(o).contains(what), "{}", text(o));
        let o = run(&repo, &["--json", "snapshots"]);
        assert!(!out(&o).contains("\"tag\":\"wh\""), "{}", text(&o));
        // Not left paused.
        assert_eq!(out(&repo.exec("echo alive")), "alive");
    };
    let root = sh(Command::new("docker").args(["info", "--format", "{{.DockerRootDir}}"]));
    let unseen = |args: &str| {
        Command::new("unshare")
            .args(["--mount", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs none {} && exec \"$0\" {args} -C \"$1\"",
                root.trim()
            ))
            .arg(sbx_e2e::bin("sbx-run"))
            .arg(&repo.path)
            .output()
            .unwrap()
    };
    refused(&run(&repo, &["snapshot", "--tag", "wh"]), ".wh.");
    refused(&unseen("snapshot --tag wh"), ".wh.");
    // A .wh. name past PATH_MAX: found by the walk by fd; docker cannot
    // list such a path, which is then refused unchecked.
    let o = repo.exec(
        "rm /opt/shared/.wh.roots /var/tmp/.wh..wh..opq && \
         perl -e 'mkdir q(/tmp/deep) or die; chdir q(/tmp/deep) or die; \
         for (1..2100) { mkdir q(d) or die $!; chdir q(d) or die $! } \
         open(F, q(>.wh.x)) or die $!' && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    refused(&run(&repo, &["snapshot", "--tag", "wh"]), "/d/d/.wh.x");
    refused(&unseen("snapshot --tag wh"), "cannot list");
    let o = repo.exec("rm -r /tmp/deep && echo ok");
    assert_eq!(out(&o), "ok", "{}", text(&o));
    let o = run(&repo, &["snapshot", "--tag", "wh"]);
    assert!(o.status.success(), "{}", text(&o));
    sh(Command::new("docker").args(["rm", "--force", &repo_container(&repo)]));
    let o = run(&repo, &["start", "--from-snapshot", "wh"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = repo.exec("cat /opt/shared/roots /var/tmp/rootfile");
    assert_eq!(out(&o), "root\nroot", "{}", text(&o));

    let o = run(&repo, &["--json", "snapshots"]);
    let images: Vec<String> = out(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["data"]["image"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(images.len(), 2, "{}", text(&o));
    let _ = run(&repo, &["rm", "--volumes"]);
    for image in images.iter().rev() {
        let _ = Command::new("docker")
            .args(["image", "rm", "--force", "--no-prune", image])
            .output();
    }
}

/// The agent fills a layer with more names than PID 1 may hold (long
/// ones, cheap to make): a sandbox made from the snapshot still starts,
/// reading every directory instead of holding the layer's names, and
/// what the agent planted is gone. Held whole, the names ran the guest
/// out of the sandbox's memory and the snapshot never started.
#[test]
fn a_layer_filled_with_names_still_starts() {
    if !base_image() {
        return;
    }
    let repo = Repo::initialised("snapfill");
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[sandbox]\nmemory = \"64m\"\n",
    )
    .unwrap();
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    // 250,000 names of 200 bytes: ~90 MB held whole, 8 MiB allowed.
    let o = repo.exec(
        "python3 -c 'import os; [open(\"/var/tmp/fill/%d/%0200d\" % (d, f), \"w\").close() \
         for d in range(250) if os.makedirs(\"/var/tmp/fill/%d\" % d) is None \
         for f in range(1000)]' && echo evil > /var/tmp/planted && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    let o = run(&repo, &["snapshot", "--tag", "full"]);
    assert!(o.status.success(), "{}", text(&o));
    let image = {
        let o = run(&repo, &["--json", "snapshots"]);
        let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
        v["data"]["image"].as_str().unwrap().to_owned()
    };
    sh(Command::new("docker").args(["rm", "--force", &repo_container(&repo)]));
    let o = run(&repo, &["start", "--from-snapshot", "full"]);
    let logs = cleanup_line(&repo);
    assert!(o.status.success(), "{}\n{logs}", text(&o));
    assert!(
        logs.contains("every one: the snapshot's layers name more than 8 MiB hold"),
        "{logs}"
    );
    let o = repo.exec("ls /var/tmp/fill /var/tmp/planted 2>&1 | wc -l; mount | grep -c sbx-layers");
    assert_eq!(out(&o), "2\n0", "{}", text(&o));

    let _ = run(&repo, &["rm", "--volumes"]);
    let _ = Command::new("docker")
        .args(["image", "rm", "--force", "--no-prune", &image])
        .output();
}

/// The guest's line about the start-time cleanup (docker logs).
fn cleanup_line(repo: &Repo) -> String {
    let o = Command::new("docker")
        .args(["logs", &repo_container(repo)])
        .output()
        .unwrap();
    text(&o)
        .lines()
        .filter(|l| l.contains("snapshot cleanup"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn repo_container(repo: &Repo) -> String {
    let o = sh(Command::new("docker").args([
        "ps",
        "-a",
        "--filter",
        &format!("label=sbx.workspace={}", repo.path.display()),
        "--format",
        "{{.Names}}",
    ]));
    o.lines()
        .find(|l| !l.contains("holder") && !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// A sandbox whose image has as many layers as the engine allows (125:
/// a chain of starts from snapshots of snapshots ends there) cannot be
/// snapshotted: one line naming the limit and what to do, exit 69, no
/// new snapshot listed, the sandbox running on.
#[test]
fn a_snapshot_past_the_engines_layer_limit_is_refused_and_named() {
    if !base_image() {
        return;
    }
    // The layer count is the base's: no other suite may rebuild the tag
    // (delta_pager's adds a layer) while this test counts on it.
    let _lock = sbx_e2e::base_image_lock();
    let base = format!("agent-sandbox-base:{}", sbx_e2e::base_tag());
    let n: usize = sh(Command::new("docker").args([
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &base,
    ]))
    .trim()
    .parse()
    .unwrap();
    let repo = Repo::new("deep");
    repo.git(&["init", "-q", "-b", "main"]);
    let o = sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // One COPY, one layer: 124 in all.
    let dir = repo.path.join(".agent-sandbox");
    std::fs::write(dir.join("layer"), "x\n").unwrap();
    let copies: String = (n..124)
        .map(|i| format!("COPY layer /opt/l{i}\n"))
        .collect();
    std::fs::write(dir.join("Dockerfile"), format!("FROM {base}\n{copies}")).unwrap();
    let o = run(&repo, &["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&repo, &["snapshot"]);
    assert!(o.status.success(), "{}", text(&o));
    // The snapshot has 125 layers: it starts, and cannot take another.
    let o = run(&repo, &["start", "--from-snapshot"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&repo, &["snapshot"]);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("limit of 125") && t.contains("sbx-run rm"),
        "{t}"
    );
    assert_eq!(t.trim().lines().count(), 1, "{t}");
    let o = run(&repo, &["--json", "snapshots"]);
    assert_eq!(out(&o).lines().count(), 1, "{}", text(&o));
    assert_eq!(out(&repo.exec("echo alive")), "alive");
    let _ = run(&repo, &["rm", "--volumes"]);
}

/// Removing a snapshot's image takes that image only: docker's own
/// pruning would also delete untagged parents further down (an older
/// per-repository image, layers a concurrent build uses), which
/// `--no-prune` keeps. Needs no sandbox: an empty imported image with a
/// committed child stands for a snapshot on an untagged parent.
#[test]
fn removing_a_snapshot_leaves_untagged_parents_alone() {
    if !sbx_e2e::prerequisite(sbx_e2e::docker_ready(), "a Docker engine") {
        return;
    }
    let tag = format!("{}", std::process::id());
    let parent = format!("sbx-e2e-noprune-parent:{tag}");
    let child = format!("sbx-e2e-noprune-child:{tag}");
    let name = format!("sbx-e2e-noprune-{tag}");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("tar cf - -T /dev/null | docker import - {parent}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let id = sh(Command::new("docker").args(["image", "inspect", "-f", "{{.Id}}", &parent]));
    let id = id.trim().to_owned();
    struct Gone(String, String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rm", "-f", &self.1]).output();
            let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
        }
    }
    let _gone = Gone(id.clone(), name.clone());
    sh(Command::new("docker").args(["create", "--name", &name, &parent, "/none"]));
    sh(Command::new("docker").args(["commit", &name, &child]));
    sh(Command::new("docker").args(["rm", "-f", &name]));
    // The parent's tag goes; the child keeps it as its untagged parent.
    sh(Command::new("docker").args(["rmi", &parent]));
    let p = sh(Command::new("docker").args(["image", "inspect", "-f", "{{.Parent}}", &child]));
    assert_eq!(p.trim(), id, "the child is not on the parent");
    sbx_run::snapshot::remove_image(&child).unwrap();
    let c = Command::new("docker")
        .args(["image", "inspect", &child])
        .output()
        .unwrap();
    assert!(!c.status.success(), "the snapshot's image is still there");
    let p = Command::new("docker")
        .args(["image", "inspect", &id])
        .output()
        .unwrap();
    assert!(
        p.status.success(),
        "the untagged parent went with the snapshot"
    );
}
