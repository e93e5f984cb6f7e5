//! A disk that fills mid-commit (issue 43): `sbx-run snapshot` against a
//! Docker engine whose data root has room for the sandbox but not for its
//! commit. The engine is a private dockerd (its own data root on a small
//! tmpfs, exec root, pidfile and socket) in a network namespace of its
//! own, so neither the machine's disk nor the shared engine (nor its
//! iptables chains) is touched; it is torn down on every path out.
//!
//! Black-box through the CLI, so it holds whatever a snapshot's commits
//! look like: one clear line naming the disk, exit 74, no snapshot
//! listed, no image or container left of it, and the sandbox runs on.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, base_image, is_root, prerequisite, sbx, sh, text};

/// A private dockerd; dropping it removes its sandboxes (through
/// sbx-run, so their host-side state goes too) and containers, stops it,
/// unmounts its data root and deletes its namespace and directories.
struct Engine {
    ns: String,
    dir: tempfile::TempDir,
    exec_root: PathBuf,
    dockerd: Option<Child>,
    /// Workspaces whose sandboxes live in this engine.
    repos: Vec<PathBuf>,
}

impl Engine {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("sock").display())
    }

    fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.env("DOCKER_HOST", self.host())
            .env_remove("DOCKER_CONTEXT");
        c
    }

    fn sbx(&self) -> Command {
        let mut c = sbx();
        c.env("DOCKER_HOST", self.host())
            .env_remove("DOCKER_CONTEXT");
        c
    }

    /// A dockerd whose data root is a tmpfs of `size` bytes.
    fn start(size: u64) -> Engine {
        let ns = format!("sbx-fill-{}", std::process::id());
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut e = Engine {
            exec_root: PathBuf::from(format!("/run/{ns}")),
            ns,
            dir,
            dockerd: None,
            repos: Vec::new(),
        };
        // Made before anything can fail, so Drop always has them to undo.
        sh(Command::new("ip").args(["netns", "add", &e.ns]));
        sh(Command::new("ip").args(["-n", &e.ns, "link", "set", "lo", "up"]));
        std::fs::create_dir_all(e.data()).unwrap();
        sh(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0711")])
            .arg("sbx-fill")
            .arg(e.data()));
        let d = e.dir.path();
        std::fs::write(d.join("daemon.json"), "{}").unwrap();
        // The image archive `docker load` unpacks goes to the real disk.
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        let log = std::fs::File::create(d.join("log")).unwrap();
        // nsenter --net only: `ip netns exec` would also give dockerd a
        // mount namespace, and sbx-run's binds and mount checks on the
        // host would not match what it sees (bench/fresh-machine).
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", e.ns))
            .arg("dockerd")
            .arg("--config-file")
            .arg(d.join("daemon.json"))
            .arg("--data-root")
            .arg(e.data())
            .arg("--exec-root")
            .arg(&e.exec_root)
            .arg("--pidfile")
            .arg(d.join("pid"))
            .arg("-H")
            .arg(e.host())
            .env("DOCKER_TMPDIR", d.join("tmp"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        e.dockerd = Some(child);
        let until = Instant::now() + Duration::from_secs(120);
        let root = loop {
            let o = e
                .docker()
                .args(["info", "--format", "{{.DockerRootDir}}"])
                .output()
                .unwrap();
            if o.status.success() {
                break String::from_utf8_lossy(&o.stdout).trim().to_owned();
            }
            assert!(
                Instant::now() < until,
                "the private dockerd did not start: {}",
                std::fs::read_to_string(d.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        // Everything below removes what this engine holds: it must be ours.
        assert_eq!(
            Path::new(&root),
            e.data(),
            "DOCKER_HOST reaches another engine"
        );
        e
    }

    /// Image ids in the engine, untagged ones included.
    fn images(&self) -> BTreeSet<String> {
        sh(self.docker().args(["images", "-a", "-q", "--no-trunc"]))
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn containers(&self) -> BTreeSet<String> {
        sh(self.docker().args(["ps", "-a", "--format", "{{.Names}}"]))
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let quiet = |c: &mut Command| {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        if let Some(mut child) = self.dockerd.take() {
            for r in &self.repos {
                quiet(self.sbx().args(["-q", "rm", "--volumes"]).arg(r));
            }
            let ids = self
                .docker()
                .args(["ps", "-a", "-q"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for id in ids.split_whitespace() {
                quiet(self.docker().args(["rm", "-f", "-v", id]));
            }
            // SIGTERM, a generous wait (it stops containerd too), then SIGKILL.
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever it left mounted under its roots, then the tmpfs itself
        // (lazily, should a process still hold it).
        for root in [self.exec_root.clone(), self.data()] {
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let mut under: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|m| Path::new(m).starts_with(&root))
                .collect();
            under.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in under {
                quiet(Command::new("umount").args(["-l", m]));
            }
        }
        let _ = std::fs::remove_dir_all(&self.exec_root);
        quiet(Command::new("ip").args(["netns", "del", &self.ns]));
    }
}

fn bytes_free(p: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(p).unwrap();
    s.blocks_available() as u64 * s.fragment_size() as u64
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}: {}", text(o));
}

#[test]
fn a_disk_that_fills_mid_commit_leaves_no_snapshot_and_the_sandbox_running() {
    if !prerequisite(
        is_root(),
        "root (a private dockerd on a tmpfs, in a network namespace)",
    ) || !base_image()
    {
        return;
    }
    let base = format!("agent-sandbox-base:{}", sbx_e2e::base_tag());
    let size: u64 = sh(Command::new("docker").args(["image", "inspect", "-f", "{{.Size}}", &base]))
        .trim()
        .parse()
        .unwrap();
    // Room for the base image, the repository's image and the sandbox,
    // with some 1 GiB to spare.
    let mut engine = Engine::start(size + (1 << 30));

    // The base image, as `docker save | docker load`.
    let mut save = Command::new("docker")
        .args(["save", &base])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let o = engine
        .docker()
        .arg("load")
        .stdin(save.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(save.wait().unwrap().success(), "docker save {base}");
    ok(&o, "docker load");

    let repo = Repo::new("fill");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    engine.repos.push(repo.path.clone());
    ok(
        &engine
            .sbx()
            .args(["-q", "init"])
            .arg(&repo.path)
            .output()
            .unwrap(),
        "init",
    );
    ok(
        &engine.sbx().arg("start").arg(&repo.path).output().unwrap(),
        "start",
    );

    // The user's root fills /opt with more than half of what is left: the
    // sandbox holds it, a commit of it cannot fit beside it.
    let free = bytes_free(&engine.data());
    let fill = free / 2 + free / 8;
    let o = engine
        .sbx()
        .args(["exec", "--root", "-C"])
        .arg(&repo.path)
        .args([
            "--",
            "sh",
            "-c",
            &format!("head -c {fill} /dev/zero >/opt/fill"),
        ])
        .output()
        .unwrap();
    ok(&o, "filling /opt");
    let images = engine.images();
    let containers = engine.containers();

    let o = engine
        .sbx()
        .args(["snapshot", "-C"])
        .arg(&repo.path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(74), "{}", text(&o));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("{}: no space left", engine.data().display())),
        "the line does not name the disk: {err}"
    );
    assert!(o.stdout.is_empty(), "{}", text(&o));

    // No snapshot listed, no record, no image or container left of it.
    let o = engine
        .sbx()
        .args(["--json", "snapshots", "-C"])
        .arg(&repo.path)
        .output()
        .unwrap();
    ok(&o, "snapshots");
    assert!(o.stdout.is_empty(), "a snapshot is listed: {}", text(&o));
    assert_eq!(engine.images(), images, "images left by the snapshot");
    assert_eq!(
        engine.containers(),
        containers,
        "containers left by the snapshot"
    );

    // The sandbox runs on, and works.
    let o = engine
        .sbx()
        .args(["exec", "-C"])
        .arg(&repo.path)
        .args(["--", "true"])
        .output()
        .unwrap();
    ok(&o, "exec -- true after the failed snapshot");
    let o = engine
        .sbx()
        .args(["exec", "--root", "-C"])
        .arg(&repo.path)
        .args(["--", "rm", "/opt/fill"])
        .output()
        .unwrap();
    ok(&o, "removing /opt/fill");
}
