//! sbx-run against a real Docker engine and real images: init → start →
//! exec, every guarantee checked from inside the container, as an attacker
//! would try it; then stop, rm and prune leave nothing behind.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{base_image, bin, docker_ready, prerequisite, sbx, sh, text};
use serde_json::Value;

struct Repo {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Set on every sbx-run this repo runs (e.g. a test's own login stores).
    env: Vec<(String, String)>,
}

impl Repo {
    /// A git repository owned by the agent's uid (so the agent can write),
    /// with secrets, hooks and a name with a space and non-ASCII letters.
    fn new(name: &str) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
        let files = [
            (".env", "API_KEY=hunter2\n"),
            (".env.local", "DB_PASSWORD=hunter2\n"),
            (".env.example", "API_KEY=\n"),
            ("certs/server.pem", "-----BEGIN PRIVATE KEY-----\n"),
            ("src/main.rs", "fn main() {}\n"),
            (".git/hooks/pre-commit", "#!/bin/sh\nexit 1\n"),
        ];
        for (f, text) in files {
            let p = path.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
        }
        std::fs::set_permissions(
            path.join(".git/hooks/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::create_dir_all(path.join(".ssh")).unwrap();
        std::fs::write(path.join(".ssh/id_ed25519"), "KEY").unwrap();
        sh(Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(dir.path()));
        Self {
            _dir: dir,
            path,
            env: Vec::new(),
        }
    }

    fn sbx(&self) -> Command {
        let mut c = sbx();
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.sbx().args(args).arg(&self.path).output().unwrap()
    }

    fn exec(&self, script: &str) -> Output {
        self.sbx()
            .args(["exec", "-C"])
            .arg(&self.path)
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    }

    fn names(&self) -> sbx_run::names::Names {
        sbx_run::names::Names::new(&self.path.canonicalize().unwrap(), None)
    }

    fn container(&self) -> String {
        self.names().container
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = self
            .sbx()
            .args(["-q", "rm", "--volumes"])
            .arg(&self.path)
            .output();
    }
}

#[test]
fn sandbox_guarantees_hold_from_inside() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("my app ü");
    let out = repo.run(&["-q", "init"]);
    assert!(out.status.success(), "init: {}", text(&out));
    assert!(repo.path.join(".agent-sandbox/config.toml").is_file());
    // The config forwards GITHUB_TOKEN (allow) and a token (pass): the
    // filter must still drop the secret-looking name that only `allow`
    // lists, so this fails if sbx-run forwarded its candidates unfiltered.
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[environment]\nallow = [\"GITHUB_TOKEN\", \"APP_*\"]\npass = [\"PASSED_TOKEN\"]\n",
    )
    .unwrap();
    let start = sbx()
        .args(["start"])
        .arg(&repo.path)
        .env("GITHUB_TOKEN", "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
        .env("PASSED_TOKEN", "passed-value")
        .env("APP_MODE", "dev")
        .env("NODE_ENV", "production")
        .env("DEBUG", "app:*")
        .env("CI", "true")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    assert!(start.status.success(), "start: {}", text(&start));

    let probe = |script: &str| {
        let o = repo.exec(script);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
    };
    assert_eq!(probe("id -u"), (Some(0), "1000".into()));
    assert_eq!(probe("test -d /.agent-sandbox && echo yes").1, "yes");
    // Capabilities: none for the agent's processes, and no way back.
    assert_eq!(
        probe("grep CapEff /proc/self/status").1,
        "CapEff:\t0000000000000000"
    );
    let (code, _) = probe("sudo -n id -u");
    assert_ne!(code, Some(0), "sudo escalated");
    // Masked secrets read as empty; the example file reads normally.
    assert_eq!(probe("wc -c < .env").1, "0");
    assert_eq!(probe("wc -c < .env.local").1, "0");
    assert_eq!(probe("wc -c < certs/server.pem").1, "0");
    assert_eq!(probe("ls -A .ssh | wc -l").1, "0");
    assert_eq!(probe("cat .env.example").1, "API_KEY=");
    // Writes to the workspace work; to protected paths they fail.
    assert_eq!(probe("echo x > src/new.rs && echo ok").1, "ok");
    assert!(repo.path.join("src/new.rs").exists());
    let (code, _) = probe("echo 'exit 0' > .git/hooks/pre-commit");
    assert_ne!(code, Some(0), "hook replaced");
    let (code, _) = probe("echo x > .agent-sandbox/config.toml");
    assert_ne!(code, Some(0), "config replaced");
    // A .husky the agent makes is not trusted (tests/ownership.rs), so none
    // is mounted over a missing one: no empty .husky is left on the host.
    let (code, _) = probe("echo x > .env");
    assert_ne!(code, Some(0), "mask replaced");
    assert_eq!(
        std::fs::read_to_string(repo.path.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 1\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path.join(".env")).unwrap(),
        "API_KEY=hunter2\n"
    );
    // Even root inside the container cannot write through a read-only mount.
    let name = repo.container();
    let root_try = Command::new("docker")
        .args(["exec", "-u", "0", &name, "sh", "-c"])
        .arg("echo pwned > \"$SBX_WORKSPACE/.git/hooks/pre-commit\"")
        .output()
        .unwrap();
    assert!(!root_try.status.success(), "root wrote a hook");
    // The guard's client (which hands each call to the broker, or to the
    // guard) is every `git` the agent (or git itself) can reach by name;
    // the real binary is off PATH.
    let guard = "/usr/local/bin/sbx-git-client";
    let (_, all) = probe(
        "for g in $(which -a git) \"$(git --exec-path)/git\" \"$(git --exec-path)/git-commit\"; do readlink -f \"$g\"; done | sort -u",
    );
    assert_eq!(
        all, guard,
        "a git that is not the guard is reachable by name"
    );
    assert_eq!(probe("git --version").0, Some(0));
    // Skipping the failing pre-commit hook, directly and through git's own
    // exec-path, is refused and logged; the hook runs otherwise.
    assert_eq!(
        probe("echo x > f && git add f && git commit -qnm x").0,
        Some(77)
    );
    assert_eq!(
        probe("\"$(git --exec-path)/git-commit\" --no-verify -m x").0,
        Some(77)
    );
    assert_eq!(
        probe("HUSKY=0 git -c core.hooksPath=/tmp commit -m x").0,
        Some(77)
    );
    let o = repo.exec("git -c user.name=a -c user.email=a@b commit -qm x");
    assert_eq!(
        o.status.code(),
        Some(1),
        "the pre-commit hook must run and fail: {}",
        text(&o)
    );
    assert_ne!(
        probe("git rev-parse -q --verify HEAD").0,
        Some(0),
        "a commit was made"
    );
    // The agent cannot reach the log; read it as root.
    let log = Command::new("docker")
        .args([
            "exec",
            "-u",
            "0",
            &repo.container(),
            "cat",
            "/run/sbx/host/audit.jsonl",
        ])
        .output()
        .unwrap();
    assert!(
        text(&log).contains(r#""policy":"block-no-verify""#),
        "{}",
        text(&log)
    );
    // husky's per-user switch exists, is empty and cannot be filled.
    assert_eq!(
        probe("test -f ~/.config/husky/init.sh && test ! -s ~/.config/husky/init.sh && echo ok").1,
        "ok"
    );
    assert_ne!(
        probe("echo 'export HUSKY=0' > ~/.config/husky/init.sh").0,
        Some(0)
    );
    // Secret host variables are absent even when allowed by name; passed,
    // allowed and the default names (NODE_ENV, DEBUG, CI) are there.
    assert_eq!(probe("env | grep -c GITHUB_TOKEN").1, "0");
    assert_eq!(probe("echo $LANG").1, "C.UTF-8");
    assert_eq!(
        probe("echo \"$PASSED_TOKEN $APP_MODE $NODE_ENV $DEBUG $CI\"").1,
        "passed-value dev production app:* true"
    );
    // Exit status passes through.
    assert_eq!(probe("exit 42").0, Some(42));

    // list --json parses and names this sandbox.
    let out = sbx().args(["list", "--json"]).output().unwrap();
    let found = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .any(|v| v["data"]["name"] == name.as_str() && v["data"]["mode"] == "bind");
    assert!(found, "{}", text(&out));

    // stop, then rm --volumes, leave nothing behind.
    assert!(repo.run(&["stop"]).status.success());
    assert!(!sbx_e2e::container_running(&name));
    assert!(repo.run(&["rm", "--volumes"]).status.success());
    assert_nothing_left(&repo.names(), "rm --volumes");
}

/// None of a workspace's container, network or volumes exists any more.
fn assert_nothing_left(n: &sbx_run::names::Names, after: &str) {
    for (kind, obj) in [
        ("container", &n.container),
        ("container", &n.holder),
        ("network", &n.network),
        ("volume", &n.history),
        ("volume", &n.git_record),
        ("volume", &n.repo_shelf),
        ("volume", &n.claude),
        ("volume", &n.codex),
    ] {
        let exists = Command::new("docker")
            .args([kind, "inspect", obj])
            .output()
            .unwrap()
            .status
            .success();
        assert!(!exists, "{kind} {obj} survived {after}");
    }
}

#[test]
fn sandboxes_cannot_reach_each_other() {
    if !base_image() {
        return;
    }
    let a = Repo::new("alpha");
    let b = Repo::new("beta");
    for r in [&a, &b] {
        let o = r.run(&["start"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    // A listener in B (perl is in every Debian image), reachable from B itself.
    let listener = "perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalPort=>8080,Listen=>5,ReuseAddr=>1) or die; while($c=$s->accept){print $c \"hi\\n\"; close $c}'";
    sh(Command::new("docker").args([
        "exec",
        "-d",
        "-u",
        "agent",
        &b.container(),
        "sh",
        "-c",
        listener,
    ]));
    // B's address is its network holder's (B lives in that namespace).
    let ip = sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &b.names().holder,
    ]));
    let ip = ip.trim();
    let connect = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do perl -MIO::Socket::INET -e '$c=IO::Socket::INET->new(PeerAddr=>\"{ip}:8080\",Timeout=>2) or exit 1; print <$c>' && exit 0; sleep 0.3; done; exit 1"
    );
    let own = b.exec(&connect);
    assert_eq!(
        String::from_utf8_lossy(&own.stdout).trim(),
        "hi",
        "control: B reaches itself"
    );
    let cross = a.exec(&connect.replace("1 2 3 4 5 6 7 8 9 10", "1"));
    assert_ne!(cross.status.code(), Some(0), "A reached B at {ip}");
}

#[test]
fn show_run_pasted_into_a_shell_makes_an_equivalent_container() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("pasted");
    assert!(repo.run(&["-q", "build"]).status.success());
    let name = repo.container();
    // What `docker inspect` says of a container, less what differs by
    // instance (ids, addresses, the short-id alias).
    let config = |name: &str| -> Value {
        let o = Command::new("docker")
            .args(["inspect", name])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let nets: Vec<String> = v[0]["NetworkSettings"]["Networks"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut config = v[0]["Config"].clone();
        // The order of variables means nothing (each name is set once).
        if let Some(env) = config["Env"].as_array_mut() {
            env.sort_by_key(|e| e.to_string());
        }
        sbx_e2e::drop_hold_env(&mut config);
        // Sources differ by design: start binds by-fd copies staged under
        // /run/sbx, which a pasted show-run cannot have (it names the paths).
        let mut host = v[0]["HostConfig"].clone();
        if let Some(ms) = host["Mounts"].as_array_mut() {
            for m in ms {
                if let Some(m) = m.as_object_mut() {
                    m.remove("Source");
                }
            }
        }
        serde_json::json!({"config": config, "host": host, "networks": nets})
    };
    // A first start lets docker create the mount points it needs in the
    // workspace (a missing .husky), so both runs below see the same tree.
    assert!(repo.run(&["-q", "start"]).status.success());
    assert!(repo.run(&["-q", "rm"]).status.success());
    // sbx-run's own start (the engine API when it can) …
    assert!(repo.run(&["-q", "start"]).status.success());
    let started = config(&name);
    // (the holder stays, as its id is in the sandbox's network mode)
    sh(Command::new("docker").args(["rm", "--force", &name]));
    let script = sh(sbx().arg("show-run").arg(&repo.path));
    assert!(script.contains("--cap-drop ALL") && script.contains("no-new-privileges"));
    assert!(
        script.contains("# masked (read as empty): .env .env.local .ssh certs/server.pem"),
        "{script}"
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(
        out.status.success(),
        "pasted show-run failed: {}",
        text(&out)
    );
    // … and the pasted show-run make the same container, field for field.
    assert_eq!(config(&name), started);
    // Equivalent: the same guarantees, checked through docker directly.
    let inspect = sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}} {{.HostConfig.PidsLimit}} {{.HostConfig.Memory}}",
        &name,
    ]));
    assert_eq!(inspect.trim(), "[ALL] [no-new-privileges] 1024 4294967296");
    let mut ready = false;
    for _ in 0..100 {
        let logs = Command::new("docker")
            .args(["logs", &name])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&logs.stderr).contains("sbx-guest: ready") {
            ready = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(ready);
    // sbx-run recognises the pasted container as this workspace's.
    let o = repo.exec("wc -c < .env; id -u");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "0\n1000\n",
        "{}",
        text(&o)
    );
}

/// Ctrl-C (SIGINT to the whole process group, as a terminal sends it) at
/// any moment of a start: afterwards the sandbox is either up and ready, or
/// its container is gone. The network and volumes may stay; they are reused.
#[test]
fn ctrl_c_at_any_moment_of_start_leaves_the_sandbox_up_or_gone() {
    use std::os::unix::process::CommandExt;
    if !base_image() {
        return;
    }
    let repo = Repo::new("ctrl-c");
    assert!(repo.run(&["-q", "build"]).status.success());
    let name = repo.container();
    let since = sh(Command::new("date").arg("+%s")).trim().to_owned();
    let (mut up, mut cut) = (0, 0);
    for delay in [0u64, 30, 80, 130, 180, 230, 280, 330, 400, 500, 700] {
        let mut child = sbx()
            .args(["-q", "start"])
            .arg(&repo.path)
            .process_group(0)
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT);
        let status = child.wait().unwrap();
        let state = Command::new("docker")
            .args(["inspect", "--format", "{{.State.Running}}", &name])
            .output()
            .unwrap();
        match status.code() {
            Some(0) => {
                up += 1;
                assert_eq!(String::from_utf8_lossy(&state.stdout).trim(), "true");
                let logs = Command::new("docker")
                    .args(["logs", &name])
                    .output()
                    .unwrap();
                assert!(String::from_utf8_lossy(&logs.stderr).contains("sbx-guest: ready"));
            }
            // 130, or killed by the signal before sbx-run set its handler.
            Some(130) | None => {
                use std::os::unix::process::ExitStatusExt;
                assert!(status.code().is_some() || status.signal() == Some(2));
                cut += 1;
                assert!(
                    !state.status.success(),
                    "after Ctrl-C at {delay} ms, {name} is left"
                );
            }
            other => panic!("start interrupted at {delay} ms exited {other:?}"),
        }
        assert!(repo.run(&["-q", "rm"]).status.success());
    }
    // Some runs were cut after docker had created the container: the
    // cleanup itself was exercised, not only an early exit.
    let created = sh(Command::new("docker").args([
        "events",
        "--since",
        &since,
        "--until",
        "0s",
        "--filter",
        &format!("container={name}"),
        "--filter",
        "event=create",
        "--format",
        "x",
    ]));
    assert!(
        created.lines().count() > up && cut > 0,
        "created {} times, {up} starts completed, {cut} cut",
        created.lines().count()
    );
}

#[test]
fn bad_input_fails_before_docker() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    // A fake docker that records any call: none may happen.
    let fake = dir.path().join("docker");
    let calls = dir.path().join("calls");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", calls.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |args: &[&str], p: &Path| {
        sbx()
            .env("SBX_DOCKER", &fake)
            .args(args)
            .arg(p)
            .output()
            .unwrap()
    };
    let o = run(&["start"], &plain);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("not a git repository"));
    let o = run(&["start"], &dir.path().join("missing"));
    assert_eq!(o.status.code(), Some(66));
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    assert_eq!(run(&["start"], &file).status.code(), Some(64));
    sh(Command::new("git").args(["init", "-q"]).current_dir(&plain));
    std::fs::create_dir_all(plain.join(".agent-sandbox")).unwrap();
    std::fs::write(
        plain.join(".agent-sandbox/config.toml"),
        "[sandbox]\nmemory = \"lots\"\n",
    )
    .unwrap();
    let o = run(&["start"], &plain);
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("sandbox.memory: invalid size \"lots\""));
    assert!(
        !calls.exists(),
        "docker was called: {:?}",
        std::fs::read_to_string(&calls)
    );
    // A config that parses, but no engine: 69 with the fix.
    std::fs::write(plain.join(".agent-sandbox/config.toml"), "").unwrap();
    let o = sbx()
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .arg("start")
        .arg(&plain)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    assert!(text(&o).contains("start it"));
}

#[test]
fn a_foreign_container_of_our_name_is_refused() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("foreign");
    let name = repo.container();
    let image = sbx_e2e::test_image();
    sh(Command::new("docker").args(["run", "-d", "--name", &name, &image, "sleep", "300"]));
    let o = repo.run(&["start"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("does not belong to"));
    let o = repo.run(&["rm"]);
    assert_eq!(o.status.code(), Some(77));
    assert!(
        sbx_e2e::container_running(&name),
        "sbx-run touched a container that is not its own"
    );
    sh(Command::new("docker").args(["rm", "-f", &name]));
}

#[test]
fn prune_removes_sandboxes_whose_workspace_is_gone() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("gone");
    assert!(repo.run(&["start"]).status.success());
    let n = repo.names();
    std::fs::remove_dir_all(&repo.path).unwrap();
    let o = sbx().args(["prune"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_nothing_left(&n, "prune");

    // Another remover (a second prune, an `rm`) that wins every race: the
    // container vanishes between the listing and the inspection, and the
    // network and volumes just before prune removes them. Gone is the goal,
    // so prune still succeeds, and does not claim what it did not do.
    let repo = Repo::new("gone racing");
    assert!(repo.run(&["start"]).status.success());
    let n = repo.names();
    std::fs::remove_dir_all(&repo.path).unwrap();
    let racer = repo._dir.path().join("racing-docker");
    std::fs::write(
        &racer,
        "#!/bin/sh\n\
         case \"$1 $2\" in\n\
         'container inspect') docker rm --force \"$VICTIM\" >/dev/null 2>&1 ;;\n\
         'network rm'|'volume rm') docker \"$@\" >/dev/null 2>&1 ;;\n\
         esac\n\
         exec docker \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&racer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = sbx()
        .env("SBX_DOCKER", &racer)
        .env("VICTIM", &n.container)
        .args(["prune"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains(&format!("container {} (", n.container))
            && !out.contains(&format!("network {} (", n.network))
            && out.contains(&format!("container {} (", n.holder)),
        "prune claims removals another remover made:\n{out}"
    );
    assert_nothing_left(&n, "prune racing another remover");
}

/// The full image has Claude Code and Codex, installed by the image's npm
/// (npm's pinned release, which the host's npm fetched). Under CI=true an image without them fails the build itself.
/// The host's CA bundle goes in with --ca-cert, for TLS-intercepting networks.
#[test]
fn full_base_image_has_working_ai_clis() {
    if !prerequisite(docker_ready(), "a running Docker engine") {
        return;
    }
    let ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
    // scripts/shell's prefetch (sbx-prefetch, what `build-base --prefetch`
    // does): the package and AI-CLI layers, before any sbx tool is built
    // (an empty tool directory), and no tag for them.
    let no_tools = tempfile::tempdir().unwrap();
    let mut c = Command::new(bin("sbx-prefetch"));
    c.env("SBX_BIN_DIR", no_tools.path())
        .args(["-q", "--bootstrap", "--tag", "e2e-prefetch"]);
    if ca.is_file() {
        c.arg("--ca-cert").arg(ca);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "sbx-prefetch: {}", text(&o));
    let tagged = Command::new("docker")
        .args(["image", "inspect", "agent-sandbox-base:e2e-prefetch"])
        .output()
        .unwrap();
    assert!(!tagged.status.success(), "a prefetch tagged an image");
    let mut c = sbx();
    // git-delta too: built from its crate once, then cached.
    c.args(["-q", "build-base", "--bootstrap", "--tag", "e2e-full"])
        .args(["--git-delta-version", "0.18.2"]);
    if ca.is_file() {
        c.arg("--ca-cert").arg(ca);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "build-base: {}", text(&o));
    let v = sh(Command::new("docker").args([
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        "agent-sandbox-base:e2e-full",
        "-c",
        "claude --version && codex --version && ast-grep --version && command -v sbx-envfilter && delta --version \
         && echo npm=$(npm --version) $(npm config get globalconfig) \
         && grep -c '^registry=' /etc/npmrc && ! dpkg -s npm >/dev/null 2>&1 && echo no-debian-npm \
         && python3 --version",
    ]));
    // npm's own pinned release, not Debian's package; its global config is
    // where sbx-fw reads the registry, and holds it.
    assert!(v.contains("npm=10.9.9 /etc/npmrc\n1\nno-debian-npm"), "{v}");
    // Debian's npm brought python3; the image names it now.
    assert!(v.contains("Python 3."), "{v}");
    assert!(
        v.contains("Claude Code") && v.contains("codex") && v.contains("ast-grep"),
        "{v}"
    );
    assert!(v.contains("delta 0.18.2"), "{v}");
    assert!(v.contains("/usr/local/bin/sbx-envfilter"), "{v}");
}

/// On a machine where the Codex store does not exist yet
/// (Docker then creates it root-owned), codex-init-config works; a
/// workspace gets the defaults and the login at start; logout removes the
/// credentials from the store and from every workspace's copy.
#[test]
fn codex_config_on_a_fresh_store_is_idempotent_and_logout_removes_credentials() {
    if !base_image() {
        return;
    }
    let store = TempVolume::new("codex-fresh");
    let claude_store = TempVolume::new("claude-fresh");
    assert!(!store.exists());
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    std::fs::write(home.path().join(".codex/auth.json"), "{\"token\":\"t\"}").unwrap();
    let env = [
        ("HOME", home.path().to_str().unwrap()),
        ("SBX_CODEX_VOLUME", &store.0),
        ("SBX_CLAUDE_VOLUME", &claude_store.0),
    ];
    let run = |args: &[&str]| sbx().envs(env).args(args).output().unwrap();
    let read = |f: &str| {
        Command::new("docker")
            .args(["run", "--rm", "--entrypoint", "cat", "--mount"])
            .arg(format!("type=volume,source={},target=/codex", store.0))
            .arg(format!(
                "agent-sandbox-base:{}",
                sbx_run::image::default_base_tag()
            ))
            .arg(format!("/codex/{f}"))
            .output()
            .unwrap()
    };
    let o = run(&["codex-init-config", "--auth"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&read("config.toml").stdout).contains("[profiles.high]"));
    assert_eq!(
        String::from_utf8_lossy(&read("auth.json").stdout),
        "{\"token\":\"t\"}"
    );
    let o = run(&["codex-init-config"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("kept config.toml"),
        "{}",
        text(&o)
    );
    // A workspace gets the defaults and the login at start, as the agent's.
    let mut r = Repo::new("codex ws");
    r.env = env
        .iter()
        .skip(1)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let o = r.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = r.exec(
        "cd ~/.codex && cat auth.json && grep -c profiles.high config.toml && touch mine && echo w",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "{\"token\":\"t\"}1\nw\n",
        "{}",
        text(&o)
    );
    let o = run(&["codex-logout"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !read("auth.json").status.success(),
        "auth.json survived logout"
    );
    let o = r.exec("test -e ~/.codex/auth.json && echo still there; true");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "",
        "{}",
        text(&o)
    );
    // And a restart does not bring it back from anywhere.
    assert!(r.run(&["restart"]).status.success());
    let o = r.exec("test -e ~/.codex/auth.json && echo back; true");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "",
        "{}",
        text(&o)
    );
}

#[test]
fn doctor_and_log_answer() {
    if !base_image() {
        return;
    }
    let o = sbx().args(["doctor", "--json"]).output().unwrap();
    let checks: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        checks
            .iter()
            .any(|c| c["data"]["check"] == "Docker engine answers" && c["data"]["ok"] == true)
    );

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(
        &log,
        "{\"timestamp\":\"t\",\"tool\":\"x\",\"agent\":\"a\",\"operation\":\"o\",\"target\":\"A\",\"result\":\"blocked\",\"policy\":\"p\"}\n\
         {\"timestamp\":\"t\",\"tool\":\"x\",\"agent\":\"a\",\"operation\":\"o\",\"target\":\"B\",\"result\":\"passed\",\"policy\":\"p\"}\n",
    )
    .unwrap();
    let o = sbx()
        .args(["log", "--blocked-only", "--json", "--file"])
        .arg(&log)
        .output()
        .unwrap();
    let lines: Vec<_> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("\"target\":\"A\""));
}

#[test]
fn the_firewall_is_up_before_the_agent_runs() {
    if !base_image() {
        return;
    }
    let r = Repo::new("fw");
    let o = r.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let gateway = sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
        &r.names().holder,
    ]));
    assert!(!gateway.trim().is_empty());
    firewall_holds(&r, gateway.trim());
    // A new sandbox container in the kept network namespace (the holder
    // stays when the container goes) gets the same firewall from its own init.
    sh(Command::new("docker").args(["rm", "--force", &r.container()]));
    let o = r.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    firewall_holds(&r, gateway.trim());
    let _ = r.run(&["rm"]);
}

/// The agent CLIs' endpoints named by the host's environment at start
/// (ANTHROPIC_BASE_URL, OPENAI_BASE_URL) are allowlisted like
/// `[agent].base-url`'s; a loopback one needs nothing.
#[test]
fn the_agents_endpoints_the_host_names_are_allowlisted() {
    if !base_image() {
        return;
    }
    let r = Repo::new("agentapi");
    let o = sbx()
        .args(["-q", "start"])
        .arg(&r.path)
        .env("ANTHROPIC_BASE_URL", "https://GW.sbx-e2e.test/v1")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let st =
        sh(Command::new("docker").args(["exec", &r.container(), "sbx-fw", "status", "--json"]));
    let v: Value = serde_json::from_str(&st).unwrap();
    let names = v["data"]["state"]["names"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let api: Vec<&str> = names
        .iter()
        .filter(|n| n["source"] == "agentapi")
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(api, ["gw.sbx-e2e.test"], "{st}");
    let _ = r.run(&["rm"]);
}

fn firewall_holds(r: &Repo, gateway: &str) {
    // As the agent: the host, a TEST-NET address, Docker's resolver directly,
    // a name not on the allowlist through the filter: all refused at once.
    let probes = format!(
        "sbx-fw probe --json tcp:{gateway}:22 tcp:192.0.2.1:443 udp:192.0.2.1:443 dns:127.0.0.11/example.org dns:127.0.0.53/example.org raw"
    );
    let o = r.exec(&probes);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), 6, "{out}");
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let verdict = v["data"]["verdict"].as_str().unwrap();
        assert!(verdict == "refused" || verdict == "dns-refused", "{l}");
    }
    // Allowlisted names resolve through the filter, which forwards to
    // Docker's resolver as root: answered (NXDOMAIN offline), not refused.
    // (This host's resolver drops a query now and then: a lost one is retried.)
    let mut v = Value::Null;
    for _ in 0..3 {
        let o = r.exec("sbx-fw probe --json --timeout 3000 dns:127.0.0.53/api.anthropic.com");
        v = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
        if v["data"]["verdict"] != "timeout" {
            break;
        }
    }
    assert_eq!(v["data"]["verdict"], "open", "{v}");
    // The agent cannot change or read the firewall; root (init) can.
    let o = r.exec("sbx-fw status");
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let resolv = r.exec("cat /etc/resolv.conf");
    assert!(String::from_utf8_lossy(&resolv.stdout).contains("nameserver 127.0.0.53"));
    let st =
        sh(Command::new("docker").args(["exec", &r.container(), "sbx-fw", "status", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(v["data"]["installed"], true, "{st}");
    assert_eq!(v["data"]["dns_filter"]["running"], true, "{st}");
    assert_eq!(
        v["data"]["state"]["upstreams"],
        serde_json::json!(["127.0.0.11"]),
        "{st}"
    );
    assert!(v["data"]["rules"]["ipv6"].as_u64().unwrap_or(0) > 0, "{st}");
}

/// A volume name no one else uses, removed when dropped.
struct TempVolume(String);

impl TempVolume {
    fn new(what: &str) -> Self {
        let name = format!(
            "sbx-e2e-{what}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        Self(name)
    }

    fn exists(&self) -> bool {
        Command::new("docker")
            .args(["volume", "inspect", &self.0])
            .output()
            .unwrap()
            .status
            .success()
    }
}

impl Drop for TempVolume {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "--force", &self.0])
            .output();
    }
}

/// The volumes mounted into a container, by target.
fn volume_mounts(container: &str) -> Vec<(String, String)> {
    let v: Value =
        serde_json::from_str(&sh(Command::new("docker").args(["inspect", container]))).unwrap();
    v[0]["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["Type"] == "volume")
        .map(|m| {
            (
                m["Destination"].as_str().unwrap_or("").to_owned(),
                m["Name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// As an attack: what one sandbox writes to ~/.claude
/// (settings, hooks, a transcript) is invisible to the sandbox of another
/// repository, which cannot plant anything there either; a login (the
/// credentials file) made once in one sandbox works in both, both ways.
#[test]
fn claude_config_is_per_project_and_only_the_login_is_shared() {
    claude_isolation(false);
}

/// The same through the helper container (what a non-root sbx-run or a
/// remote engine uses).
#[test]
fn claude_config_isolation_through_the_helper() {
    claude_isolation(true);
}

fn claude_isolation(via_helper: bool) {
    if !base_image() {
        return;
    }
    let store = TempVolume::new("claude-store");
    let codex_store = TempVolume::new("codex-store");
    let mut env = vec![
        ("SBX_CLAUDE_VOLUME".to_owned(), store.0.clone()),
        ("SBX_CODEX_VOLUME".to_owned(), codex_store.0.clone()),
    ];
    if via_helper {
        env.push(("SBX_LOGIN_VIA_HELPER".to_owned(), "1".to_owned()));
    }
    let tag = if via_helper { " h" } else { "" };
    let mut a = Repo::new(&format!("alpha proj{tag}"));
    let mut b = Repo::new(&format!("beta proj{tag}"));
    a.env = env.clone();
    b.env = env;
    let o = a.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let creds =
        r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-e2e","refreshToken":"r1","expiresAt":1}}"#;
    let plant = format!(
        "set -e; cd ~/.claude; mkdir -p hooks projects/p; \
         echo '{{\"hooks\":{{\"PreToolUse\":[{{\"hooks\":[{{\"type\":\"command\",\"command\":\"~/.claude/hooks/x.sh\"}}]}}]}}}}' > settings.json; \
         printf '#!/bin/sh\\necho pwned\\n' > hooks/x.sh; chmod +x hooks/x.sh; \
         echo alpha-transcript-secret > projects/p/t.jsonl; \
         umask 077; printf '%s' '{creds}' > .credentials.json; echo ok"
    );
    let o = a.exec(&plant);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "ok",
        "{}",
        text(&o)
    );
    // The store is never mounted into a sandbox; ~/.claude is A's own.
    let mounts = volume_mounts(&a.container());
    assert!(mounts.iter().all(|(_, n)| *n != store.0), "{mounts:?}");
    assert!(
        mounts.contains(&("/home/agent/.claude".into(), a.names().claude)),
        "{mounts:?}"
    );
    // A stops; its login reaches the machine's store only on the user's
    // word (`login --share`), never by being copied back at stop.
    let o = a.run(&["stop"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = a.run(&["login", "--share", "-C"]);
    assert!(o.status.success(), "login --share: {}", text(&o));
    assert!(store.exists());

    // B, another repository, starts fresh: A's login works there ...
    let o = b.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = b.exec("cat ~/.claude/.credentials.json");
    assert_eq!(String::from_utf8_lossy(&o.stdout), creds, "{}", text(&o));
    // ... and nothing else of A's ~/.claude is there, anywhere B can look.
    let o = b.exec(
        "ls -A ~/.claude; grep -rls alpha-transcript-secret ~ /tmp /commandhistory /repo-shelf 2>/dev/null; \
         test -e ~/.claude/settings.json && echo SETTINGS; test -e ~/.claude/hooks && echo HOOKS; true",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        ".credentials.json",
        "{}",
        text(&o)
    );
    assert!(
        volume_mounts(&b.container())
            .iter()
            .all(|(_, n)| *n != store.0 && *n != a.names().claude)
    );
    // B tries to plant a hook for A, and refreshes the login.
    let fresher = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-e2e-2","refreshToken":"r2","expiresAt":2}}"#;
    let o = b.exec(&format!(
        "set -e; cd ~/.claude; mkdir -p hooks; echo '{{\"hooks\":{{}}}}' > settings.json; echo beta > hooks/b.sh; \
         sleep 1; printf '%s' '{fresher}' > .credentials.tmp; mv .credentials.tmp .credentials.json; echo ok"
    ));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "ok",
        "{}",
        text(&o)
    );
    assert!(b.run(&["stop"]).status.success());

    // A again: its own settings, hook, transcript and login are kept; B's
    // are not there (a login B changed never flows back to the store).
    let o = a.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = a.exec(
        "cd ~/.claude; ls hooks; cat projects/p/t.jsonl; grep -c PreToolUse settings.json; cat .credentials.json",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("x.sh\nalpha-transcript-secret\n1\n{creds}"),
        "{}",
        text(&o)
    );
    // A link is never followed (sbx-run may copy on the host, as root):
    // pointed at a host file holding a newer JSON object, nothing moves.
    let host_secret = a._dir.path().join("host-secret.json");
    std::fs::write(
        &host_secret,
        r#"{"claudeAiOauth":{"accessToken":"HOST-SECRET"}}"#,
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&host_secret)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(86400))
        .unwrap();
    let o = a.exec(&format!(
        "cd ~/.claude && rm .credentials.json && ln -s '{}' .credentials.json && echo ok",
        host_secret.display()
    ));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok");
    assert!(a.run(&["stop"]).status.success());
    let o = b.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = b.exec("cat ~/.claude/.credentials.json");
    assert_eq!(String::from_utf8_lossy(&o.stdout), fresher, "{}", text(&o));
}

/// The container's id (changes when it is recreated).
fn container_id(name: &str) -> String {
    sh(Command::new("docker").args(["inspect", "--format", "{{.Id}}", name]))
        .trim()
        .to_owned()
}

/// Configured `protected` paths (and the default
/// agent-precommit context) are read-only; `restart` picks up a config
/// change; `list` shows mode, workdir and volumes; `volumes` names what is
/// mounted; `shell` runs non-interactively and under a pty; `start
/// --base-tag` and `shell --build` rebuild and replace the container.
#[test]
fn configured_protection_restart_list_volumes_and_shell() {
    if !base_image() {
        return;
    }
    let store = TempVolume::new("claude-cmds");
    let codex = TempVolume::new("codex-cmds");
    let mut r = Repo::new("guards");
    r.env = vec![
        ("SBX_CLAUDE_VOLUME".into(), store.0.clone()),
        ("SBX_CODEX_VOLUME".into(), codex.0.clone()),
    ];
    for (f, t) in [
        ("docs/readme.md", "docs\n"),
        ("scripts/ci.sh", "#!/bin/sh\n"),
        (".agent-precommit/user-context.json", "{}\n"),
        // A masked name with a line break and a comma (docker's --mount is CSV).
        ("notes/my secret\nfile, v2.txt", "hunter2\n"),
    ] {
        let p = r.path.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, t).unwrap();
    }
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&r.path));
    std::fs::create_dir_all(r.path.join(".agent-sandbox")).unwrap();
    let cfg = r.path.join(".agent-sandbox/config.toml");
    std::fs::write(
        &cfg,
        "[sandbox]\nprotected = [\"docs\", \"scripts/ci.sh\", \"newdir\"]\n",
    )
    .unwrap();
    let o = r.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let code = |script: &str| r.exec(script).status.code();
    assert_eq!(
        code("echo x > src/ok.rs"),
        Some(0),
        "control: the workspace is writable"
    );
    for attack in [
        "echo x > docs/new.md",
        "echo x >> docs/readme.md",
        "rm docs/readme.md",
        "echo x >> scripts/ci.sh",
        "mv scripts/ci.sh scripts/ci.old",
        "mkdir -p newdir/x",
        "touch newdir/f",
        "echo '{\"evil\":1}' > .agent-precommit/user-context.json",
    ] {
        assert_ne!(code(attack), Some(0), "{attack}: a protected path changed");
    }
    assert_eq!(
        std::fs::read_to_string(r.path.join("docs/readme.md")).unwrap(),
        "docs\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.path.join(".agent-precommit/user-context.json")).unwrap(),
        "{}\n"
    );
    assert!(!r.path.join("newdir/f").exists() && !r.path.join("docs/new.md").exists());
    let o = r.exec("wc -c < \"$(printf 'notes/my secret\\nfile, v2.txt')\"; ls -b notes | wc -l");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0\n1\n", "{}", text(&o));
    // The default network config keeps git over SSH to GitHub's ranges.
    let rules = sh(Command::new("docker").args([
        "exec",
        "-u",
        "0",
        &r.container(),
        "iptables-legacy",
        "-S",
        "SBX-OUT",
    ]));
    assert!(rules.contains("--dports 22,443"), "{rules}");

    // restart picks up a config change: src becomes protected.
    let before = container_id(&r.container());
    std::fs::write(
        &cfg,
        "[sandbox]\nprotected = [\"docs\", \"scripts/ci.sh\", \"newdir\", \"src\"]\n",
    )
    .unwrap();
    let o = r.run(&["restart"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(
        container_id(&r.container()),
        before,
        "restart kept the container"
    );
    assert_ne!(
        code("echo y > src/ok.rs"),
        Some(0),
        "restart ignored the new config"
    );
    assert_eq!(code("echo y > other.txt"), Some(0));

    // list: mode, workdir and mapped volumes, in JSON and in text.
    let n = r.names();
    let out = sbx().args(["list", "--json"]).output().unwrap();
    let me: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["data"]["name"] == n.container.as_str())
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert_eq!(me["data"]["mode"], "bind");
    assert_eq!(me["data"]["workdir"], "/workspace/guards");
    let vols = me["data"]["volumes"].as_array().unwrap().clone();
    let want = serde_json::json!([
        {"name": n.history, "target": "/commandhistory"},
        {"name": n.home, "target": "/home/agent"},
        {"name": n.claude, "target": "/home/agent/.claude"},
        {"name": n.codex, "target": "/home/agent/.codex"},
        {"name": n.repo_shelf, "target": "/repo-shelf"},
        {"name": n.git_record, "target": "/var/lib/sbx-git"},
    ]);
    assert_eq!(Value::Array(vols), want);
    let out = sh(sbx().arg("list"));
    assert!(
        out.starts_with("NAME\tSTATUS\tHEALTH\tMODE\tWORKDIR\tVOLUMES\t"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with(&n.container))
        .unwrap_or_default();
    assert!(
        line.contains("\tbind\t/workspace/guards\t")
            && line.contains(&format!("{}:/home/agent/.claude", n.claude)),
        "{out}"
    );
    // volumes: exactly what the container mounts.
    let out = sh(r.sbx().args(["volumes", "--json"]).arg(&r.path));
    let mut listed: Vec<(String, String)> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["data"]["target"].as_str().unwrap().to_owned(),
                v["data"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut mounted = volume_mounts(&r.container());
    listed.sort();
    mounted.sort();
    assert_eq!(listed, mounted);
    assert_eq!(sh(r.sbx().arg("volume")).trim(), store.0);

    // shell: under a pty (script), and with a pipe for stdin.
    let shell_line = format!(
        "{} shell {}",
        bin("sbx-run").display(),
        shlex_quote(&r.path.to_string_lossy())
    );
    let o = Command::new("sh")
        .arg("-c")
        .arg("printf 'test -t 0 && echo tty; echo $((6*7)) $(id -u); exit 3\\n' | script -qec \"$0\" /dev/null")
        .arg(&shell_line)
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .env("SBX_BIN_DIR", bin("sbx-run").parent().unwrap())
        .output()
        .unwrap();
    let s = text(&o);
    assert_eq!(o.status.code(), Some(3), "{s}");
    assert!(s.contains("tty") && s.contains("42 1000"), "{s}");
    let mut child = r
        .sbx()
        .arg("shell")
        .arg(&r.path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        i.write_all(b"test -t 0 || echo no-tty; pwd; exit 4\n")
            .unwrap();
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "no-tty\n/workspace/guards\n"
    );

    // start --base-tag: a missing base is named; an existing one rebuilds
    // the image and replaces the running container. shell --build too.
    let o = r.run(&["start", "--base-tag", "no-such-tag-e2e"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o).contains("no-such-tag-e2e"), "{}", text(&o));
    let before = container_id(&r.container());
    let o = r.run(&["start", "--base-tag", "latest"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(container_id(&r.container()), before);
    let before = container_id(&r.container());
    let o = r
        .sbx()
        .args(["shell", "--build"])
        .arg(&r.path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(container_id(&r.container()), before);
}

fn shlex_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `allow-external = true` really turns the
/// firewall off (a host port on the bridge gateway is reachable, which the
/// default firewall refuses); `github = false` with `allow-git = false`
/// leaves GitHub unresolvable and no rule for port 22.
#[test]
fn network_switches_change_what_the_firewall_does() {
    if !base_image() {
        return;
    }
    let open = Repo::new("open net");
    std::fs::create_dir_all(open.path.join(".agent-sandbox")).unwrap();
    std::fs::write(
        open.path.join(".agent-sandbox/config.toml"),
        "[network]\nallow-external = true\n",
    )
    .unwrap();
    let o = open.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let gateway = sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
        &open.names().holder,
    ]));
    let gateway = gateway.trim().to_owned();
    // A listener on this host, on the sandbox bridge's gateway address only.
    let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!("sbx-fw probe --json tcp:{gateway}:{port}");
    let o = open.exec(&probe);
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())
        .unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(
        v["data"]["verdict"], "open",
        "allow-external left a firewall: {v}"
    );
    let st =
        sh(Command::new("docker").args(["exec", &open.container(), "sbx-fw", "status", "--json"]));
    assert!(
        st.contains("allow-external") || st.contains("\"open\":true"),
        "{st}"
    );

    // The same probe from a default sandbox is refused (control).
    let closed = Repo::new("no github");
    std::fs::create_dir_all(closed.path.join(".agent-sandbox")).unwrap();
    std::fs::write(
        closed.path.join(".agent-sandbox/config.toml"),
        "[network]\ngithub = false\nallow-git = false\n",
    )
    .unwrap();
    let o = closed.run(&["start"]);
    assert!(o.status.success(), "{}", text(&o));
    let gw2 = sh(Command::new("docker").args([
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
        &closed.names().holder,
    ]));
    let l2 = std::net::TcpListener::bind((gw2.trim(), 0)).unwrap();
    let o = closed.exec(&format!(
        "sbx-fw probe --json tcp:{}:{} dns:127.0.0.53/github.com dns:127.0.0.53/api.github.com",
        gw2.trim(),
        l2.local_addr().unwrap().port()
    ));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let verdicts: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["data"]["verdict"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(verdicts, ["refused", "dns-refused", "dns-refused"], "{out}");
    let rules = sh(Command::new("docker").args([
        "exec",
        "-u",
        "0",
        &closed.container(),
        "iptables-legacy",
        "-S",
        "SBX-OUT",
    ]));
    assert!(
        !rules.contains("dports 22") && !rules.contains("dport 22 "),
        "{rules}"
    );
    let st = sh(Command::new("docker").args([
        "exec",
        &closed.container(),
        "sbx-fw",
        "status",
        "--json",
    ]));
    let v: Value = serde_json::from_str(&st).unwrap();
    assert_ne!(v["data"]["state"]["github"]["enabled"], true, "{st}");
    drop(listener);
}
