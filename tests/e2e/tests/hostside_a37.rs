//! A fresh attack on the host side (issue 37's follow-up, a37): what a
//! running sandbox's agent can do to another sandbox of the same
//! workspace as the user starts it. A `--branch` sandbox mounts the same
//! workspace, so while the bind-mode sandbox runs, its agent races the
//! host's checks in `sbx-run start --branch`.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use sbx_e2e::{Repo, attack_repo, base_image, sbx, sh, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

/// As the agent, in `dir`: run `setup`, then exchange `name` with
/// `name.l` (renameat2 RENAME_EXCHANGE) every 2 ms in the background
/// until /tmp/stop-swap exists.
fn swap_in_a_loop(repo: &Repo, dir: &str, name: &str, setup: &str) {
    swap_in_a_loop_by(|script| repo.exec(script), dir, name, setup);
}

/// [`swap_in_a_loop`] through `exec`, a `sbx-run exec -- sh -c SCRIPT` of
/// whoever started the sandbox (its guest socket is in their state dir).
fn swap_in_a_loop_by(exec: impl Fn(&str) -> Output, dir: &str, name: &str, setup: &str) {
    let race = format!(
        r#"set -e
mkdir -p {dir}; cd {dir}; {setup}
cat > /tmp/swap.py <<'PY'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = b"{dir}/{name}", b"{dir}/{name}.l"
while not os.path.exists("/tmp/stop-swap"):
    libc.renameat2(-100, a, -100, b, 2)
    time.sleep(0.002)
PY
setsid python3 /tmp/swap.py </dev/null >/dev/null 2>&1 &
"#
    );
    let o = exec(&race);
    assert!(o.status.success(), "race: {}", text(&o));
}

/// The attack workspace `ws`, the agent's, whose branch sandboxes start
/// from origin's default branch as the host knows it; and the user's
/// secret directory outside it, theirs (uid 1000, as on a developer's
/// machine where the agent's uid is the user's).
fn branch_repo_and_secret() -> (Repo, std::path::PathBuf) {
    let repo = attack_repo("ws", &["-qm", "a"], &[], &[]);
    repo.git(&["update-ref", "refs/remotes/origin/main", "HEAD"]);
    repo.git(&[
        "symbolic-ref",
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
    ]);
    repo.give_to_agent();
    let secret = repo.root().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("id_ed25519"), "SECRET-KEY\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&secret));
    (repo, secret)
}

/// Route a37-2: a linked worktree's admin dir (`.git/worktrees/<name>`)
/// is held read-only in every sandbox of the workspace; `start` found it
/// as a real directory, then gave docker its *name* to bind. The agent of
/// the running sandbox swaps that name with a link to a host directory
/// (renameat2 RENAME_EXCHANGE, in a loop): docker followed the link, and
/// the new branch sandbox saw the host directory, the user's files in it
/// readable by the agent's uid.
#[test]
#[ignore = "unreachable since a37y: the guest removes every link the agent makes under .git and kills the agent, so no swap runs; kept for the bind check beneath"]
fn a_running_agent_cannot_swap_a_git_pin_for_a_link_under_a_branch_start() {
    if !base_image() {
        return;
    }
    let (repo, secret) = branch_repo_and_secret();
    repo.start();

    swap_in_a_loop(
        &repo,
        "/workspace/ws/.git/worktrees",
        "x",
        &format!("mkdir -p x; ln -sfn {} x.l", secret.display()),
    );

    let mut leaked = Vec::new();
    let mut started = 0;
    for i in 0..10 {
        let b = format!("--branch=b{i}");
        let o = run(&repo, &["-q", "start", &b]);
        if !o.status.success() {
            eprintln!("start {b}: {}", text(&o));
        } else {
            started += 1;
            let o = sbx()
                .args(["exec", "-C"])
                .arg(&repo.path)
                .arg(&b)
                // Where docker put the host directory: at the pin, or (the
                // target followed inside the container) at its own path.
                .args(["--", "sh", "-c"])
                .arg(format!(
                    "cat /workspace/ws/.git/worktrees/*/id_ed25519 {}/id_ed25519 2>/dev/null || true",
                    secret.display()
                ))
                .output()
                .unwrap();
            if text(&o).contains("SECRET-KEY") {
                leaked.push(i);
            }
        }
        let _ = run(&repo, &["-q", "rm", "--volumes", &b]);
    }
    let _ = repo.exec("touch /tmp/stop-swap");
    assert!(
        leaked.is_empty(),
        "branch sandboxes {leaked:?} read the host's secret through the agent's link"
    );
    eprintln!("{started} of 10 branch sandboxes started during the race");
}

/// Issue 37, `sbx-run checkout`: the provisioning container reads the
/// host's `.git`, which checkout checked to be a directory and then bound
/// by name. The agent of the running sandbox tries to swap `.git` with a
/// link to another project's `.git` on the host (renameat2
/// RENAME_EXCHANGE in a loop, and a plain `mv`) while the user checks out
/// branches: no checkout may provision the other project. `.git` is now
/// opened beneath the workspace with no link followed and bound by fd;
/// the swap itself is refused today because `.git` is a pinned parent
/// (a mount point) in the sandbox, so this test guards the pin, and the
/// fd bind holds should the pin go.
#[test]
fn a_running_agent_cannot_swap_git_for_a_link_under_checkout() {
    if !base_image() {
        return;
    }
    let repo = attack_repo("ws", &["-qm", "a"], &[], &[]);
    let origin = |r: &dyn Fn(&[&str]) -> String| {
        r(&["update-ref", "refs/remotes/origin/main", "HEAD"]);
        r(&[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ]);
    };
    origin(&|a| repo.git(a));
    // Another project on the host, outside the workspace, whose files
    // the agent must never see.
    let other = repo.root().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let og = |args: &[&str]| {
        sh(Command::new("git")
            .args(["-c", "user.name=a", "-c", "user.email=a@b"])
            .args(args)
            .current_dir(&other))
    };
    og(&["init", "-q", "-b", "main"]);
    std::fs::write(other.join("secret"), "OTHER-PROJECT-SECRET\n").unwrap();
    og(&["add", "secret"]);
    og(&["commit", "-qm", "other"]);
    origin(&og);
    repo.give_to_agent();
    repo.start();

    swap_in_a_loop(
        &repo,
        "/workspace/ws",
        ".git",
        &format!("ln -sfn {}/.git .git.l", other.display()),
    );
    // `.git` is a pinned parent, a mount point in the sandbox: neither a
    // rename nor the exchange moves it (EBUSY), which is what keeps this
    // race closed today; the fd bind holds should that pin ever go.
    let o = repo.exec(
        "for i in $(seq 200); do test -L /workspace/ws/.git && echo SWAPPED && break; sleep 0.01; done; \
         mv /workspace/ws/.git /workspace/ws/.git2 2>&1 || echo MV-REFUSED",
    );
    assert!(
        !text(&o).contains("SWAPPED") && text(&o).contains("MV-REFUSED"),
        "the agent moved .git: {}",
        text(&o)
    );

    let (mut leaked, mut done) = (Vec::new(), 0);
    for i in 0..10 {
        let b = format!("b{i}");
        let o = run(&repo, &["-q", "checkout", &b]);
        if o.status.success() {
            done += 1;
        } else {
            eprintln!("checkout {b}: {}", text(&o));
        }
        let seen = repo.exec(&format!(
            "cat /repo-shelf/worktrees/{b}/secret 2>/dev/null || true"
        ));
        if text(&seen).contains("OTHER-PROJECT-SECRET") {
            leaked.push(i);
        }
    }
    let _ = repo.exec("touch /tmp/stop-swap");
    // The swap may leave `.git` as the link: put the repository back.
    std::thread::sleep(std::time::Duration::from_millis(200));
    if std::fs::symlink_metadata(repo.path.join(".git")).is_ok_and(|m| m.is_symlink()) {
        let _ = std::fs::remove_file(repo.path.join(".git"));
        let _ = std::fs::rename(repo.path.join(".git.l"), repo.path.join(".git"));
    }
    assert!(
        leaked.is_empty(),
        "checkouts {leaked:?} provisioned the other project through the agent's link"
    );
    eprintln!("{done} of 10 checkouts provisioned during the race");
}

/// `sbx-run` as the user (uid 1000, the workspace's owner; setpriv, so
/// no account is added to the host) with the docker group's gid and
/// nothing else, HOME in `home`; `-C` and the
/// workspace follow `args` (before any `--`).
fn as_user(home: &std::path::Path, repo: &Repo, args: &[&str], cmd: &[&str]) -> Output {
    // The docker group: the one the engine's socket grants access to.
    let gid = std::os::unix::fs::MetadataExt::gid(
        &std::fs::metadata("/var/run/docker.sock").expect("the engine's socket"),
    );
    Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000"])
        .arg(format!("--groups={gid}"))
        .arg("--")
        .arg(sbx_e2e::bin("sbx-run"))
        .args(args)
        .arg("-C")
        .arg(&repo.path)
        .args(cmd)
        .env("HOME", home)
        .env("SBX_BIN_DIR", sbx_e2e::bin_dir())
        .env_remove("XDG_STATE_HOME")
        .output()
        .unwrap()
}

/// [`branch_repo_and_secret`], with a home of the user's (uid 1000) and
/// `sbx-run init` run as them.
fn initialised_by_the_user() -> (Repo, std::path::PathBuf, std::path::PathBuf) {
    let (repo, secret) = branch_repo_and_secret();
    let home = repo.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    sh(Command::new("chown").args(["1000:1000"]).arg(&home));
    let o = as_user(&home, &repo, &["-q", "init"], &[]);
    assert!(o.status.success(), "init: {}", text(&o));
    (repo, secret, home)
}

/// Without root sbx-run cannot mount a bind source by fd: docker gets its
/// name. The agent of the running sandbox swaps a pin's name
/// (`.git/worktrees/x`, which it made, so it is no mount point in its own
/// sandbox) with a link to the user's secret, in a loop, while the user
/// starts branch sandboxes as themself. `start` opened each source
/// through no link and asks the new sandbox's guest what is at each
/// target: a mismatch is refused (77) and the container removed; no
/// sandbox that started may read the secret. A normal start as the user
/// passes the same check.
#[test]
#[ignore = "unreachable since a37y: the guest removes every link the agent makes under .git and kills the agent, so no swap runs; kept for the bind check beneath"]
fn without_root_a_swapped_bind_source_is_caught_after_start() {
    if !base_image() {
        return;
    }
    let (repo, secret, home) = initialised_by_the_user();
    let user = |args: &[&str]| as_user(&home, &repo, args, &[]);
    let user_exec = |args: &[&str], cmd: &[&str]| as_user(&home, &repo, args, cmd);
    // (a) The plain start as the user passes the check.
    let o = user(&["start"]);
    assert!(o.status.success(), "start as the user: {}", text(&o));

    swap_in_a_loop_by(
        |script| user_exec(&["exec"], &["--", "sh", "-c", script]),
        "/workspace/ws/.git/worktrees",
        "x",
        &format!("mkdir -p x; ln -sfn {} x.l", secret.display()),
    );
    let (mut leaked, mut refused, mut started) = (Vec::new(), 0, 0);
    for i in 0..16 {
        let b = format!("--branch=b{i}");
        let o = user(&["-q", "start", &b]);
        let name = sbx_run::names::Names::new(&repo.path, Some(&format!("b{i}"))).container;
        match o.status.code() {
            Some(0) => {
                started += 1;
                let o = as_user(
                    &home,
                    &repo,
                    &["exec", &b],
                    &[
                        "--",
                        "sh",
                        "-c",
                        &format!(
                            "cat /workspace/ws/.git/worktrees/*/id_ed25519 {}/id_ed25519 2>/dev/null || true",
                            secret.display()
                        ),
                    ],
                );
                if text(&o).contains("SECRET-KEY") {
                    leaked.push(i);
                }
            }
            Some(77) => {
                refused += 1;
                let t = text(&o);
                assert!(
                    t.contains("worktrees/x") && t.lines().count() == 1,
                    "one line naming the path: {t}"
                );
                let gone = Command::new("docker")
                    .args(["container", "inspect", &name])
                    .output()
                    .unwrap();
                assert!(!gone.status.success(), "{name} was left after the refusal");
            }
            _ => eprintln!("start {b}: {}", text(&o)),
        }
        let _ = user(&["-q", "rm", "--volumes", &b]);
        if refused > 0 && started > 0 {
            break;
        }
    }
    let _ = user_exec(&["exec"], &["--", "touch", "/tmp/stop-swap"]);
    let _ = user(&["-q", "rm", "--volumes"]);
    assert!(
        leaked.is_empty(),
        "branch sandboxes {leaked:?} read the user's secret through the agent's link"
    );
    assert!(refused > 0, "no start saw the swap ({started} started)");
}

/// The window between the container's start and that check (issue 37,
/// h37z item 4): nothing of the agent's may run in it. A
/// `[guest.services]` command (what a user configures to run the
/// repository's code, `npm run dev`) reads through the pin the running
/// agent swaps, as above, and writes what it saw to /scratch, a host
/// directory every sandbox of the workspace shares. The guest holds the
/// services, the main command and execs until `start`'s check passes and
/// the host releases it: a refused start ran none of them, so no file
/// anywhere under the user's state holds the secret and the service's
/// file count is one per sandbox that passed; the started ones ran it.
#[test]
#[ignore = "unreachable since a37y: the guest removes every link the agent makes under .git and kills the agent, so no swap runs; kept for the bind check beneath"]
fn nothing_of_the_agents_runs_before_the_bind_check() {
    if !base_image() {
        return;
    }
    let (repo, secret, home) = initialised_by_the_user();
    let user = |args: &[&str]| as_user(&home, &repo, args, &[]);
    let user_exec = |args: &[&str], cmd: &[&str]| as_user(&home, &repo, args, cmd);
    let cfg = repo.path.join(".agent-sandbox/config.toml");
    let mut c = std::fs::read_to_string(&cfg).unwrap();
    c.push_str(
        "\n[guest.services.peek]\ncommand = [\"sh\", \"-c\", \"cat /workspace/ws/.git/worktrees/*/id_ed25519 > $(mktemp /scratch/peek-XXXXXXXX) 2>&1; exec sleep infinity\"]\n",
    );
    std::fs::write(&cfg, c).unwrap();
    let o = user(&["start"]);
    assert!(o.status.success(), "start as the user: {}", text(&o));

    swap_in_a_loop_by(
        |script| user_exec(&["exec"], &["--", "sh", "-c", script]),
        "/workspace/ws/.git/worktrees",
        "x",
        &format!("mkdir -p x; ln -sfn {} x.l", secret.display()),
    );
    let (mut refused, mut started) = (0, 0);
    for i in 0..16 {
        let b = format!("--branch=b{i}");
        // 77: the container was made and its check failed (65: the
        // swap was seen before, and nothing was made).
        match user(&["-q", "start", &b]).status.code() {
            Some(0) => started += 1,
            Some(77) => refused += 1,
            _ => {}
        }
        let _ = user(&["-q", "rm", "--volumes", &b]);
        if refused > 0 && started > 0 {
            break;
        }
    }
    let _ = user_exec(&["exec"], &["--", "touch", "/tmp/stop-swap"]);
    let _ = user(&["-q", "rm", "--volumes"]);
    let (leaked, peeks) = peeks_and_leaks(&home);
    assert!(
        leaked.is_empty(),
        "a service read the user's secret before the check: {leaked:?}"
    );
    assert!(refused > 0, "no start saw the swap ({started} started)");
    // One file from each sandbox that passed its check (the first one's
    // included), none from those whose check failed.
    assert_eq!(
        peeks,
        1 + started,
        "the agent's service ran in a sandbox whose bind check failed"
    );
}

/// The hold (h37z) where a37y's link check cannot reach: a protected
/// path of the work tree (`conf`, outside `.git`) swapped with a link to
/// the user's secret in a loop, as uid 1000 on the host (the agent's uid;
/// inside its own sandbox `conf` is a mount point it cannot rename),
/// while the user makes the sandbox anew again and again. A start that
/// docker made through the link is refused after the bind check, and
/// its service, which reads `conf`, must not have run before it: no file
/// anywhere under the user's state holds the secret, and the service's
/// files are one per start that passed.
#[test]
fn nothing_of_the_agents_runs_before_the_bind_check_of_a_protected_path() {
    if !base_image() {
        return;
    }
    let (repo, secret, home) = initialised_by_the_user();
    let user = |args: &[&str]| as_user(&home, &repo, args, &[]);
    let cfg = repo.path.join(".agent-sandbox/config.toml");
    let c = std::fs::read_to_string(&cfg).unwrap();
    assert!(c.contains("\n[sandbox]\n"), "{c}");
    let c = c.replacen("\n[sandbox]\n", "\n[sandbox]\nprotected = [\"conf\"]\n", 1)
        + "\n[guest.services.peek]\ncommand = [\"sh\", \"-c\", \"cat /workspace/ws/conf/id_ed25519 > $(mktemp /scratch/peek-XXXXXXXX) 2>&1; exec sleep infinity\"]\n";
    std::fs::write(&cfg, c).unwrap();
    let conf = repo.path.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::os::unix::fs::symlink(&secret, repo.path.join("conf.l")).unwrap();
    sh(Command::new("chown")
        .args(["-h", "1000:1000"])
        .arg(&conf)
        .arg(repo.path.join("conf.l")));
    let stop = repo.root().join("stop-swap");
    let swap = format!(
        "import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         while not os.path.exists({stop:?}):\n    \
         libc.renameat2(-100, {a:?}.encode(), -100, {b:?}.encode(), 2)\n    time.sleep(0.002)\n",
        stop = stop.display().to_string(),
        a = conf.display().to_string(),
        b = repo.path.join("conf.l").display().to_string(),
    );
    let mut swapper = Command::new("setpriv")
        .args([
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "--",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(&swap)
        .spawn()
        .unwrap();
    let (mut refused, mut started) = (0, 0);
    for _ in 0..48 {
        // 77: the container was made and its check failed (65: the
        // swap was seen before, and nothing was made).
        match user(&["-q", "start"]).status.code() {
            Some(0) => started += 1,
            Some(77) => refused += 1,
            _ => {}
        }
        let _ = user(&["-q", "rm"]);
        if refused > 0 && started > 0 {
            break;
        }
    }
    std::fs::write(&stop, "").unwrap();
    let _ = swapper.kill();
    let _ = swapper.wait();
    let _ = user(&["-q", "rm", "--volumes"]);
    let (leaked, peeks) = peeks_and_leaks(&home);
    assert!(
        leaked.is_empty(),
        "a service read the user's secret before the check: {leaked:?}"
    );
    assert!(refused > 0, "no start saw the swap ({started} started)");
    assert_eq!(
        peeks, started,
        "the agent's service ran in a sandbox whose bind check failed"
    );
}

/// Under the user's `home`: every file holding the secret, and how many
/// files the `peek` service made (one per sandbox it ran in).
fn peeks_and_leaks(home: &std::path::Path) -> (Vec<std::path::PathBuf>, usize) {
    let (mut leaked, mut peeks) = (Vec::new(), 0);
    let mut dirs = vec![home.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let (p, t) = (e.path(), e.file_type().unwrap());
            if t.is_dir() {
                dirs.push(p);
            } else if t.is_file() {
                peeks += usize::from(e.file_name().to_string_lossy().starts_with("peek-"));
                if std::fs::read(&p)
                    .is_ok_and(|b| String::from_utf8_lossy(&b).contains("SECRET-KEY"))
                {
                    leaked.push(p);
                }
            }
        }
    }
    (leaked, peeks)
}
