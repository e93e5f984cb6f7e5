//! The real git's back door, tried from inside a real sandbox as the agent:
//! the binary cannot be run, read or copied; the broker runs git only as
//! the guard allows, whatever a forged request says; a running git's
//! /proc/PID/exe stays closed; hooks run, as the agent.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, bin, sbx, sh, started, text};

/// A repository whose pre-commit hook records who ran it (and that its
/// own git call works), and fails when a file named `bad` is staged.
fn repo() -> Repo {
    let repo = Repo::new("broker");
    let path = repo.path.clone();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    repo.hook(
        "pre-commit",
        "#!/bin/sh\n\
         id -u > /tmp/hook-ran\n\
         git rev-parse --git-dir >> /tmp/hook-ran\n\
         if git diff --cached --name-only | grep -qx bad; then echo 'bad file' >&2; exit 1; fi\n",
    );
    repo.give_to_agent();
    repo
}

#[test]
fn the_real_git_is_reachable_only_through_the_broker() {
    if !base_image() {
        return;
    }
    let repo = repo();
    repo.start();
    let name = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None).container;

    let agent = |script: &str| {
        sbx()
            .args(["exec", "-C"])
            .arg(&repo.path)
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let root = |script: &str| {
        Command::new("docker")
            .args(["exec", "-u", "0", &name, "sh", "-c", script])
            .output()
            .unwrap()
    };
    // The layout, as root sees it.
    let o = root("stat -c '%a %U' /usr/libexec/sbx /usr/libexec/sbx/git");
    assert_eq!(text(&o).trim(), "700 root\n711 root", "{}", text(&o));
    // The broker's per-commit files (private indexes, views, pins,
    // approved messages) on a tmpfs the guest mounted, with the image's
    // owner, group and mode: no journal wait per entry (issue 46).
    let o = root(
        "for d in /run/sbx-git/index /run/sbx-git/approved; do \
         stat -f -c %T $d; stat -c '%a %U %G' $d; done",
    );
    assert_eq!(
        text(&o).trim(),
        "tmpfs\n1730 root sbx-git\ntmpfs\n755 root root",
        "{}",
        text(&o)
    );

    // Running, reading, copying or listing the real binary: all refused.
    for attack in [
        "/usr/libexec/sbx/git --version",
        "cat /usr/libexec/sbx/git > /tmp/g",
        "cp /usr/libexec/sbx/git /tmp/g2",
        "ls /usr/libexec/sbx",
        "SBX_REAL_GIT=/usr/libexec/sbx/git git -c alias.x='!true' --version >/dev/null && /usr/libexec/sbx/git --version",
    ] {
        let o = agent(attack);
        assert!(!o.status.success(), "{attack}: {}", text(&o));
    }
    // No readable copy of the binary anywhere else in the image.
    let o = root(
        "s=$(stat -c %s /usr/libexec/sbx/git); h=$(sha256sum < /usr/libexec/sbx/git); \
         find / -xdev -type f -size \"${s}c\" ! -path /usr/libexec/sbx/git -perm -o+r 2>/dev/null \
         | while read -r f; do [ \"$(sha256sum < \"$f\")\" = \"$h\" ] && echo \"$f\"; done; true",
    );
    assert_eq!(text(&o).trim(), "", "a readable copy of the real git");

    // Through the guard git works, as the agent.
    let o = agent("git --version");
    assert!(
        o.status.success() && text(&o).starts_with("git version"),
        "{}",
        text(&o)
    );
    // Skipping the hook is refused (77) by the broker's decision.
    let o = agent(
        "echo x > f && git add f && git -c user.name=a -c user.email=a@b commit --no-verify -qm skip",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("block-no-verify"), "{}", text(&o));
    // A normal commit runs the real hook, as the agent, and the hook's own
    // git calls go through the broker too.
    let o = agent("git -c user.name=a -c user.email=a@b commit -qm good && cat /tmp/hook-ran");
    assert!(o.status.success(), "commit: {}", text(&o));
    // pre-commit's git dir is the commit's private view (issue 46,
    // route 2), under the broker's private-index directory.
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.trim().lines().collect();
    assert!(
        lines.len() == 2
            && lines[0] == "1000"
            && lines[1].starts_with("/run/sbx-git/index/")
            && lines[1].ends_with(".view/g"),
        "the hook ran as the agent, on the private view: {}",
        text(&o)
    );
    // The broker's worker made that view (no guard started for the step)
    // and its session removes it once the hook has ended: none is left.
    let o = root(
        "for _ in $(seq 100); do ls /run/sbx-git/index | grep -q '[.]view$' || exit 0; sleep 0.05; done; \
         ls /run/sbx-git/index; exit 1",
    );
    assert!(o.status.success(), "a view left behind: {}", text(&o));
    // The hook still rejects what it must.
    let o =
        agent("echo b > bad && git add bad && git -c user.name=a -c user.email=a@b commit -qm bad");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let head = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let before = head(&agent("git rev-parse HEAD"));

    // Forged requests straight to the socket, refused on the broker's side.
    let forge = bin("sbx-broker-forge");
    let o = Command::new("docker")
        .args(["cp"])
        .arg(&forge)
        .arg(format!("{name}:/usr/local/bin/sbx-broker-forge"))
        .output()
        .unwrap();
    assert!(o.status.success(), "docker cp: {}", text(&o));
    let o =
        agent("sbx-broker-forge --pass-through -- commit --no-verify -qm forged -c user.name=a");
    assert_eq!(
        o.status.code(),
        Some(77),
        "pass-through commit: {}",
        text(&o)
    );
    let o =
        agent("sbx-broker-forge -- -c user.name=a -c user.email=a@b commit --no-verify -qm forged");
    assert_eq!(
        o.status.code(),
        Some(77),
        "raw commit --no-verify: {}",
        text(&o)
    );
    // A planted SBX_REAL_GIT is not what runs: the broker's fd is.
    let o = agent(
        "printf '#!/bin/sh\\necho planted > /tmp/planted\\n' > /tmp/fakegit && chmod +x /tmp/fakegit && \
         sbx-broker-forge --env SBX_REAL_GIT=/tmp/fakegit -- --version; test ! -e /tmp/planted",
    );
    assert!(
        o.status.success() && text(&o).contains("git version"),
        "{}",
        text(&o)
    );
    let o = agent("sbx-broker-forge --garbage");
    assert_eq!(o.status.code(), Some(100), "garbage: {}", text(&o));
    assert!(text(&o).contains("over the limit"), "{}", text(&o));
    assert_eq!(
        head(&agent("git rev-parse HEAD")),
        before,
        "a forged request committed"
    );

    // A running git: its /proc/PID/exe and fds are closed to the agent's
    // other processes (not dumpable: the binary is unreadable).
    let o = agent(
        "sleep 3 | git hash-object --stdin >/dev/null & sleep 0.5; \
         p=$(pgrep -u 1000 -f '^git -c .*core.hooksPath=.* hash-object' | head -1); \
         test -n \"$p\" || { echo no-git-process; exit 9; }; \
         if cat /proc/$p/exe > /tmp/g3 2>/dev/null; then echo exe-readable; fi; \
         if ls /proc/$p/fd >/dev/null 2>&1; then echo fd-listable; fi; \
         if readlink /proc/$p/exe; then echo exe-linkable; fi; wait; echo done",
    );
    assert_eq!(head(&o), "done", "{}", text(&o));

    // Ctrl-C reaches git through the client; the client exits as git did.
    // (--foreground: only the guard is signalled, not `sleep`, whose exit
    // would end git's input first.)
    let o = agent(
        "sleep 5 | timeout --foreground --preserve-status -s INT 0.5 git hash-object --stdin; \
         echo \"rc=$?\"; sleep 0.3; pgrep -u 1000 -f '^git -c .*core.hooksPath' || echo gone",
    );
    assert_eq!(head(&o), "rc=130\ngone", "{}", text(&o));

    // Audit: the refusals are logged.
    let o = root("cat /run/sbx/host/audit.jsonl");
    assert!(
        text(&o).contains(r#""policy":"block-no-verify""#),
        "{}",
        text(&o)
    );
    // No zombies and no growth of the broker's fds after all that.
    let o = root(
        "ps -eo stat= | grep -c '^Z' || true; ls /proc/$(pgrep -o -x sbx-git-guard)/fd | wc -l",
    );
    let lines: Vec<String> = head(&o).lines().map(str::to_owned).collect();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("0"),
        "zombies: {}",
        text(&o)
    );
    let fds: usize = lines
        .get(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(99);
    // Its own 8 at most, and a channel to each of the 2 idle spares.
    assert!(fds <= 10, "the broker holds {fds} fds");
}

/// Every class of bypass the guard refuses, and its hook steps, through the
/// sandbox's `git` (the guard, then the broker), as the agent: one case of
/// each class refused; the pre-push and reference-transaction steps
/// active; a normal commit and push to a local bare remote running the
/// repository's hooks; and the steps refusing when the broker is down.
#[test]
fn the_guards_rules_and_hook_steps_hold_through_the_broker() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("classes");
    let path = repo.path.clone();
    sh(Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(&path));
    let hooks = path.join(".git/hooks");
    // bash, so BASH_ENV would end it before its body (class 4).
    for (name, body) in [
        (
            "pre-commit",
            "#!/bin/bash\necho pre-commit >> /tmp/hooks-ran\n\
             if git diff --cached --name-only | grep -qx bad; then echo 'bad file' >&2; exit 1; fi\n",
        ),
        (
            "pre-push",
            "#!/bin/sh\necho pre-push >> /tmp/hooks-ran\ncat > /dev/null\n",
        ),
    ] {
        std::fs::write(hooks.join(name), body).unwrap();
        std::fs::set_permissions(hooks.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(repo.root()));
    repo.start();
    let name = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None).container;
    let agent = |script: &str| repo.agent(script);
    let root = |script: &str| {
        Command::new("docker")
            .args(["exec", "-u", "0", &name, "sh", "-c", script])
            .output()
            .unwrap()
    };
    let head = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_owned();
    // The guard's hooks directory: reachable by the agent, not writable.
    let o = root("stat -c '%a %U' /usr/lib/sbx/hooks; readlink /usr/lib/sbx/hooks/pre-push");
    assert_eq!(
        head(&o),
        "755 root\n/usr/local/bin/sbx-git-client",
        "{}",
        text(&o)
    );
    let o = agent("touch /usr/lib/sbx/hooks/x || ln -sf /bin/true /usr/lib/sbx/hooks/pre-push");
    assert!(!o.status.success(), "hooks dir writable: {}", text(&o));

    // A normal commit and push to a local bare remote: the repository's
    // hooks run (through the guard's directory for the push).
    let o = agent(
        "rm -f /tmp/hooks-ran; echo a > a && git add a && git commit -qm one && \
         git init -q --bare /tmp/remote.git && \
         printf '[remote \"origin\"]\\n\\turl = /tmp/remote.git\\n' >> ~/.gitconfig && \
         git push -q origin main && git --git-dir=/tmp/remote.git rev-parse main && cat /tmp/hooks-ran",
    );
    assert!(o.status.success(), "commit and push: {}", text(&o));
    let out = head(&o);
    let lines: Vec<&str> = out.lines().collect();
    // The receiving repository's step runs pre-commit once more on the
    // commit the push brings: a tip the pushing side's pre-push let go
    // is checked, not taken on its word (a46g).
    assert_eq!(
        lines.get(1..),
        Some(&["pre-commit", "pre-push", "pre-commit"][..]),
        "{}",
        text(&o)
    );
    let pushed = lines[0].to_owned();
    // git ran them from root-made directories of the sets it needed (the
    // commit: the two hooks and pre-commit's chained steps; the push: the
    // reference-transaction check too),
    // which the agent can read and not write.
    let o = root("cd /run/sbx-git/hooks && stat -c '%a %U %n' . * && ls 00081a 01081a");
    assert_eq!(
        head(&o),
        "755 root .\n755 root 00081a\n755 root 01081a\n00081a:\npre-applypatch\npre-commit\npre-merge-commit\npre-push\n\n\
         01081a:\npre-applypatch\npre-commit\npre-merge-commit\npre-push\nreference-transaction",
        "{}",
        text(&o)
    );
    let o = agent(
        "touch /run/sbx-git/hooks/x || ln -sf /bin/true /run/sbx-git/hooks/00081a/pre-commit",
    );
    assert!(!o.status.success(), "hook sets writable: {}", text(&o));
    let remote_main = || head(&agent("git --git-dir=/tmp/remote.git rev-parse main"));
    let local_head = || head(&agent("git rev-parse HEAD"));
    let before = local_head();

    // One case per class, each through the sandbox's git.
    for (class, script) in [
        // 1: a decoy .git with an empty HEAD; git commits to the outer repo.
        (
            "1 decoy .git",
            "mkdir -p sub/.git && : > sub/.git/HEAD && echo b > bad && git add bad && \
             cd sub && git commit -qm decoy",
        ),
        // 2: the alias name is everything after `alias.`.
        (
            "2 dotted alias",
            // In the agent's own ~/.gitconfig: the repository's is read-only.
            "touch ~/.gitconfig && cp ~/.gitconfig /tmp/gc.orig && printf '[alias \"x\"]\\n\\ty = commit --no-verify\\n' >> ~/.gitconfig && \
             echo b > bad && git add bad && git x.y -qm m",
        ),
        // 3: a mirror remote chosen by an inline pushDefault.
        (
            "3 mirror push",
            "git push -q origin main:refs/heads/other && \
             touch ~/.gitconfig && cp ~/.gitconfig /tmp/gc.orig && \
             printf '[remote \"evil\"]\\n\\turl = /tmp/remote.git\\n\\tmirror = true\\n' >> ~/.gitconfig && \
             git -c remote.pushDefault=evil push -q",
        ),
        // 4: BASH_ENV that ends a bash hook before its body.
        (
            "4 BASH_ENV",
            "printf 'exit 0\\n' > /tmp/x && echo b > bad && git add bad && BASH_ENV=/tmp/x git commit -qm m",
        ),
        // 5: a stash commit moved onto the branch (reference-transaction).
        (
            "5 stash onto branch",
            "echo b > bad && git add bad && git stash push -q && git reset -q --hard 'stash@{0}'",
        ),
        // 6: an output option that writes a hook.
        (
            "6 --output",
            "git log -1 --format='tformat:exit 0' --output=.git/hooks/pre-commit",
        ),
    ] {
        let o = agent(script);
        assert!(
            !o.status.success(),
            "class {class} let through: {}",
            text(&o)
        );
        assert_eq!(
            local_head(),
            before,
            "class {class} moved HEAD: {}",
            text(&o)
        );
        assert_eq!(
            remote_main(),
            pushed,
            "class {class} moved the remote: {}",
            text(&o)
        );
        // Put the tree back for the next case.
        let _ = agent(
            "git reset -q --hard HEAD; git stash clear; rm -rf sub bad; \
             if [ -f /tmp/gc.orig ]; then cp /tmp/gc.orig ~/.gitconfig && rm /tmp/gc.orig; fi; true",
        );
    }

    let o = agent("git --git-dir=/tmp/remote.git rev-parse -q --verify other");
    assert!(
        o.status.success(),
        "the mirror push deleted a branch: {}",
        text(&o)
    );

    // Class 5, the sequencer: new staged content at `rebase --continue` runs
    // the repository's pre-commit first (in the broker's git process).
    let o = agent(
        "GIT_SEQUENCE_EDITOR='sed -i s/^pick/edit/' git rebase -q -i --root && \
         echo b > bad && git add bad && git rebase --continue",
    );
    assert_eq!(o.status.code(), Some(77), "rebase --continue: {}", text(&o));
    assert!(
        text(&o).contains("fail the pre-commit hook"),
        "{}",
        text(&o)
    );
    assert_eq!(local_head(), before, "{}", text(&o));
    let o = agent("git rebase --abort && git rev-parse --abbrev-ref HEAD");
    assert_eq!(head(&o), "main", "{}", text(&o));

    // The pre-push step asks git, through the broker, what an update is:
    // a fast-forward passes (and runs the repository's pre-push), a rewind
    // is refused.
    let o = agent(
        "echo c > c && git add c && git commit -qm two && \
         git rev-parse HEAD HEAD~1 | tr '\\n' ' ' > /tmp/oids && cat /tmp/oids",
    );
    assert!(o.status.success(), "{}", text(&o));
    let step = |new_old: &str| {
        agent(&format!(
            "read -r new old < /tmp/oids; printf 'refs/heads/main %s refs/heads/main %s\\n' {new_old} | \
             SBX_GUARD_TRUSTED_HOOKS=$PWD/.git/hooks /usr/lib/sbx/hooks/pre-push origin /tmp/remote.git"
        ))
    };
    let o = step("$new $old");
    assert!(o.status.success(), "a fast-forward refused: {}", text(&o));
    let o = step("$old $new");
    assert_eq!(o.status.code(), Some(1), "a rewind passed: {}", text(&o));
    assert!(text(&o).contains("not a fast-forward"), "{}", text(&o));
    // A broker of the agent's own is not asked (git passes the variable on).
    let o = agent(
        "read -r new old < /tmp/oids; printf 'refs/heads/main %s refs/heads/main %s\\n' $new $old | \
         SBX_GIT_BROKER=/tmp/none.sock SBX_GUARD_TRUSTED_HOOKS=$PWD/.git/hooks \
         /usr/lib/sbx/hooks/pre-push origin /tmp/remote.git",
    );
    assert!(o.status.success(), "SBX_GIT_BROKER was used: {}", text(&o));
    // The reference-transaction step refused the stash case (class 5).
    let o = root("grep -c 'a stash commit' /run/sbx/host/audit.jsonl");
    assert_ne!(
        head(&o),
        "0",
        "the reference-transaction step: {}",
        text(&o)
    );

    // With the broker unreachable, git does not run and the steps cannot
    // pass. (Killing it is no test: sbx-guest restarts it within a second.)
    let o = root("mv /run/sbx-git/broker.sock /run/sbx-git/away.sock");
    assert!(o.status.success(), "{}", text(&o));
    let o = agent("git push -q origin main");
    assert!(!o.status.success(), "pushed without a broker: {}", text(&o));
    let o = step("$new $old");
    assert!(
        !o.status.success(),
        "pre-push step without a broker: {}",
        text(&o)
    );
}

/// The sandbox's stash record outlives the container (`serve --keep` on
/// the workspace's git record volume): a stash made, dropped and its
/// repository record deleted, then the sandbox made again (`rm`, `start`),
/// is still refused when cherry-picked onto a branch; and the agent can
/// neither write nor remove the kept record.
#[test]
fn a_stash_recorded_before_the_sandbox_was_made_again_is_still_refused() {
    let Some(repo) = started(repo) else { return };
    let name = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None).container;
    let root = |script: &str| {
        Command::new("docker")
            .args(["exec", "-u", "0", &name, "sh", "-c", script])
            .output()
            .unwrap()
    };
    let o = repo.agent(
        "echo 1 > f && git add f && git commit -qm one && \
         echo b > bad && git add bad && git stash push -q && git rev-parse 'stash@{0}' && \
         git stash drop -q && rm .git/sbx-stash-seen && test ! -e .git/refs/stash",
    );
    assert!(o.status.success(), "{}", text(&o));
    let w = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert_eq!(w.len(), 40, "{}", text(&o));
    let o = root(
        "stat -c '%a %U' /var/lib/sbx-git /var/lib/sbx-git/stash-seen; cat /var/lib/sbx-git/stash-seen",
    );
    let out = text(&o);
    assert!(
        out.starts_with("755 root\n644 root\n") && out.contains(&w),
        "{out}"
    );
    let o = repo.agent(
        "echo > /var/lib/sbx-git/stash-seen; echo x >> /var/lib/sbx-git/stash-seen; \
         rm -f /var/lib/sbx-git/stash-seen; mv /var/lib/sbx-git/stash-seen /tmp/x; \
         cat /var/lib/sbx-git/stash-seen",
    );
    assert!(text(&o).contains(&w), "{}", text(&o));

    // Made again: a new container, the same workspace volumes.
    for args in [&["-q", "rm"][..], &["-q", "start"][..]] {
        let o = sbx().args(args).arg(&repo.path).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = repo.agent(&format!(
        "git cherry-pick -m 1 {w}; echo picked=$?; git ls-tree -r --name-only HEAD"
    ));
    let out = text(&o);
    assert!(
        !out.contains("picked=0") && !out.lines().any(|l| l == "bad"),
        "the stash's change reached the branch: {out}"
    );
    assert!(out.contains("a stash commit"), "{out}");
}

/// Hooks are the workspace's in every repository the agent makes: a
/// scratch clone, a fake git dir or common dir with the workspace's refs
/// and objects linked in, each has a hooks directory the agent can write,
/// so git run there skipped the workspace's pre-commit and pre-push (a
/// commit that reached the remote and then the workspace's main).
#[test]
fn repositories_the_agent_makes_run_the_workspaces_hooks() {
    if !base_image() {
        return;
    }
    let repo = repo();
    // pre-push refuses everything; the bare remote lives in the workspace.
    let hook = repo.path.join(".git/hooks/pre-push");
    std::fs::write(&hook, "#!/bin/sh\necho PRE-PUSH-RAN >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook = repo.path.join(".git/hooks/prepare-commit-msg");
    std::fs::write(&hook, "#!/bin/sh\necho \"$0\" > /tmp/hook0\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let setup = "git -c user.name=a -c user.email=a@b commit -q --allow-empty --no-verify -m one \
         && git init -q --bare remote.git && echo remote.git > .git/info/exclude \
         && git -c core.hooksPath=/dev/null push -q remote.git HEAD:refs/heads/main";
    sh(Command::new("sh")
        .args(["-c", setup])
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .current_dir(&repo.path));
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&repo.path));
    repo.start();
    let agent = |script: &str| {
        sbx()
            .args(["exec", "-C"])
            .arg(&repo.path)
            .args([
                "--",
                "sh",
                "-c",
                &format!("export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; {script}"),
            ])
            .output()
            .unwrap()
    };
    let state = "git rev-parse main; git --git-dir=remote.git rev-parse main";
    let o = agent(state);
    let before = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        !before.is_empty(),
        "state before: {:?} {}",
        o.status,
        text(&o)
    );
    for (what, attack) in [
        (
            "a scratch clone's commit",
            "rm -rf /tmp/c && git clone -q . /tmp/c && cd /tmp/c && echo x > bad && git add bad && git commit -qm c",
        ),
        (
            "a scratch clone's push",
            "rm -rf /tmp/c && git clone -q . /tmp/c && cd /tmp/c && git push -q \"$OLDPWD/remote.git\" HEAD:refs/heads/side",
        ),
        (
            "a fake common dir",
            "rm -rf /tmp/f && mkdir -p /tmp/f/hooks && ln -s \"$PWD/.git/refs\" /tmp/f/refs \
             && ln -s \"$PWD/.git/objects\" /tmp/f/objects && cp .git/config .git/HEAD /tmp/f/ \
             && echo x > bad && git add bad && GIT_COMMON_DIR=/tmp/f git commit -qm f",
        ),
        (
            "a fake git dir",
            "rm -rf /tmp/g && mkdir -p /tmp/g/hooks && ln -s \"$PWD/.git/refs\" /tmp/g/refs \
             && ln -s \"$PWD/.git/objects\" /tmp/g/objects && cp .git/config .git/HEAD .git/index /tmp/g/ \
             && echo x > bad && git --git-dir=/tmp/g add bad && git --git-dir=/tmp/g --work-tree=. commit -qm g",
        ),
        (
            // The read-only hooks mount moves with its renamed parent.
            "a moved .git",
            // (sbx-run pins .git itself now: the move is refused, EBUSY.)
            "mv .git .gitold || exit 97; mkdir .git && cp .gitold/HEAD .gitold/config .gitold/index .git/ \
             && ln -s ../.gitold/objects .git/objects && ln -s ../.gitold/refs .git/refs \
             && echo x > bad && git add bad && git commit -qm moved; rc=$?; \
             rm -rf .git; mv .gitold .git; exit $rc",
        ),
    ] {
        let o = agent(attack);
        assert!(!o.status.success(), "{what}: {}", text(&o));
        assert_eq!(
            String::from_utf8_lossy(&agent(state).stdout),
            before,
            "{what} moved a branch"
        );
        let _ = agent("git reset -q; rm -f bad");
    }
    let o = agent("cd /tmp/c && git push -q \"$OLDPWD/remote.git\" HEAD:refs/heads/side");
    assert!(text(&o).contains("PRE-PUSH-RAN"), "{}", text(&o));
    // Where the guard sees no repository, git is pinned to the workspace's
    // hooks all the same (one renamed into place before git looks runs no
    // hooks of its own).
    let o = agent("cd /tmp && sbx-git-guard check -- status");
    assert!(
        o.status.success() && text(&o).contains("core.hooksPath=/workspace/broker/.git/hooks"),
        "{}",
        text(&o)
    );
    // git finds the hooks through a directory fd it inherited, not a path
    // that a rename of .git could point elsewhere while it runs.
    let o = agent("git commit -q --allow-empty -m honest && cat /tmp/hook0");
    assert!(
        o.status.success() && text(&o).starts_with("/proc/self/fd/"),
        "{}",
        text(&o)
    );
    // Fetching from a local non-bare clone works (its upload-pack runs
    // pack-objects inside that clone's git dir).
    let o = agent("git fetch -q /tmp/c HEAD");
    assert!(o.status.success(), "fetch from a clone: {}", text(&o));
}

/// Further attacks on the guard, each run as the
/// agent in a real sandbox; every script ends by checking whether it
/// landed (exit 0 = it got through). A pre-commit and a pre-merge-commit
/// refuse a file named `bad`; the workspace holds a bare remote with
/// `main` and a diverged `other`. After each case, from the host with the
/// real git (replace refs and grafts off): no local branch or remote ref
/// holds `bad`, and the remote's `other` is where it was.
#[test]
fn fresh_attacks_on_the_guard_are_refused() {
    if !base_image() {
        return;
    }
    let repo = repo();
    let p = repo.path.clone();
    let hooks = p.join(".git/hooks");
    let check = "#!/bin/sh\nif git diff --cached --name-only HEAD 2>/dev/null | grep -qx bad; then echo BAD >&2; exit 1; fi\n";
    for h in ["pre-commit", "pre-merge-commit"] {
        std::fs::write(hooks.join(h), check).unwrap();
        std::fs::set_permissions(hooks.join(h), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // pre-merge-commit also refuses merging a file named `nomerge`.
    std::fs::write(
        hooks.join("pre-merge-commit"),
        format!(
            "{check}if git diff --cached --name-only HEAD | grep -qx nomerge; then exit 1; fi\n"
        ),
    )
    .unwrap();
    let host = |args: &[&str]| {
        let o = Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "user.name=h",
                "-c",
                "user.email=h@h",
                "--no-replace-objects",
            ])
            .args(args)
            .env("GIT_GRAFT_FILE", "/nonexistent")
            .current_dir(&p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    sh(Command::new("sh").current_dir(&p).arg("-c").arg(
        "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; \
         git checkout -q -b main && echo 1 > one && git add one && git -c user.name=h -c user.email=h@h commit -qm one && \
         echo 2 > two && git add two && git -c user.name=h -c user.email=h@h commit -qm two && \
         git init -q --bare remote.git && printf 'remote.git\\n' >> .git/info/exclude && \
         git remote add origin ./remote.git && git -c core.hooksPath=/dev/null push -q origin main && \
         git -c core.hooksPath=/dev/null push -q origin main~1:refs/heads/other && \
         git -C remote.git -c user.name=h -c user.email=h@h commit-tree -p other -m diverged other^{tree} > /tmp/sbx-div && \
         git -C remote.git update-ref refs/heads/other $(cat /tmp/sbx-div) && rm /tmp/sbx-div && \
         git branch -q -D master 2>/dev/null; git fetch -q origin",
    ));
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&p));
    let base = host(&["rev-parse", "main"]);
    let other = host(&["--git-dir=remote.git", "rev-parse", "other"]);
    let out = sbx().args(["-q", "init"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "init: {}", text(&out));
    let start = sbx().arg("start").arg(&p).output().unwrap();
    assert!(start.status.success(), "start: {}", text(&start));
    let agent = |script: &str| {
        sbx()
            .args(["exec", "-C"])
            .arg(&p)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; \
                 mkdir -p /tmp/h && printf '#!/bin/sh\\nexit 0\\n' > /tmp/h/pre-commit && chmod +x /tmp/h/pre-commit; {script}"
            ))
            .output()
            .unwrap()
    };
    // The remote, relative, so the sandbox reaches it too (its .git/config
    // is the host's and read-only there).
    let o = agent("git fetch -q origin && git rev-parse origin/other");
    assert!(
        o.status.success() && text(&o).trim() == other,
        "the remote: {}",
        text(&o)
    );
    // Host-side reset between cases (in place: .git is a mount point).
    let reset = || {
        let script = format!(
            "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; \
             git rebase --abort 2>/dev/null; git merge --abort 2>/dev/null; git cherry-pick --abort 2>/dev/null; \
             git revert --abort 2>/dev/null; git checkout -qf main; git reset -q --hard {base}; \
             git clean -qffdx -e remote.git; git stash clear; \
             for r in $(git for-each-ref --format='%(refname)' refs/heads refs/tags refs/replace refs/notes); do \
               [ $r = refs/heads/main ] || git update-ref -d $r; done; \
             rm -f .git/info/grafts .gitmodules .git/sbx-stash-seen; rm -rf .git/modules; git worktree prune; \
             git config --unset-all include.path; git config --unset-all remote.origin.push; \
             git config --unset-all remote.origin.mirror; \
             for r in $(git -C remote.git for-each-ref --format='%(refname)'); do \
               case $r in refs/heads/main|refs/heads/other) ;; *) git -C remote.git update-ref -d $r;; esac; done; \
             git -C remote.git update-ref refs/heads/main {base}; git -C remote.git update-ref refs/heads/other {other}; \
             find . \\( -path ./.git/config -o -path ./.git/config.worktree \\) -prune -o -exec chown 1000:1000 {{}} +"
        );
        sh(Command::new("sh").arg("-c").arg(script).current_dir(&p));
    };
    // Fresh cases: (name, script that exits 0 only if the attack landed).
    // On a branch (a rebase refused mid-way leaves HEAD detached on it).
    let landed_bad = "for r in $(git for-each-ref --format='%(refname)' refs/heads); do \
                      git --no-replace-objects ls-tree -r --name-only $r; done | grep -qx bad";
    let stage_bad = "echo b > bad && git add bad";
    let stash_bad_moved = "echo b > bad && git add bad && git stash push -q && echo z > z && git add z && git commit -qm z";
    let cases: Vec<(&str, String)> = vec![
        ("-C", format!("{stage_bad}; git -C \"$PWD\" commit -qm c; {landed_bad}")),
        (
            "--git-dir + --work-tree",
            format!("{stage_bad}; W=$PWD; cd /tmp && git --git-dir=\"$W/.git\" --work-tree=\"$W\" commit -qm c; cd \"$W\"; {landed_bad}"),
        ),
        (
            "worktree add, commit there",
            format!("git worktree add -q /tmp/wt -b wtb && cd /tmp/wt && {stage_bad} && git commit -qm c; {landed_bad}"),
        ),
        (
            "submodule",
            "rm -rf /tmp/sub && git init -q /tmp/sub && git -C /tmp/sub commit -q --allow-empty -m s && \
             git -c protocol.file.allow=always submodule add -q /tmp/sub sm && cd sm && echo b > bad && git add bad && \
             git commit -qm c && git ls-tree -r --name-only HEAD | grep -qx bad".into(),
        ),
        ("-c core.hooksPath", format!("{stage_bad}; git -c core.hooksPath=/tmp/h commit -qm c; {landed_bad}")),
        (
            "--config-env core.hooksPath",
            format!("{stage_bad}; HP=/tmp/h git --config-env=core.hooksPath=HP commit -qm c; {landed_bad}"),
        ),
        (
            "GIT_CONFIG_PARAMETERS and GIT_DIR twice",
            format!(
                "{stage_bad}; python3 -c '\nimport ctypes, os\nlibc = ctypes.CDLL(None)\n\
                 a = [b\"git\", b\"commit\", b\"-qm\", b\"c\"]\n\
                 e = [b\"GIT_CONFIG_PARAMETERS=\\x27core.hookspath\\x27=\\x27/tmp/h\\x27\", b\"GIT_CONFIG_PARAMETERS=\\x27core.hookspath\\x27=\\x27/tmp/h\\x27\", \
                 b\"GIT_DIR=.git\", b\"GIT_DIR=/nonexistent\"] + [(k + \"=\" + v).encode() for k, v in os.environ.items()]\n\
                 A = (ctypes.c_char_p * (len(a) + 1))(*a, None)\nE = (ctypes.c_char_p * (len(e) + 1))(*e, None)\n\
                 pid = os.fork()\nif pid == 0:\n    libc.execve(b\"/usr/bin/git\", A, E)\n    os._exit(127)\nos.waitpid(pid, 0)\n'; {landed_bad}"
            ),
        ),
        (
            "rebase --exec amend --no-verify",
            format!("git rebase -q --exec '{stage_bad} && git commit -q --amend --no-edit --no-verify' HEAD~1; {landed_bad}"),
        ),
        (
            "rebase --exec amend with -c core.hooksPath",
            format!("git rebase -q --exec '{stage_bad} && git -c core.hooksPath=/tmp/h commit -q --amend --no-edit' HEAD~1; {landed_bad}"),
        ),
        (
            "merge --no-verify (pre-merge-commit)",
            "git checkout -q -b side && echo n > nomerge && git add nomerge && git commit -qm n && git checkout -q main && \
             echo m > m && git add m && git commit -qm m && git merge -q --no-verify --no-ff -m x side; \
             git ls-tree -r --name-only HEAD | grep -qx nomerge".into(),
        ),
        (
            "merge --no-commit, stage, --continue",
            format!(
                "git checkout -q -b side && echo s > s && git add s && git commit -qm s && git checkout -q main && \
                 git merge -q --no-ff --no-commit side; {stage_bad}; GIT_EDITOR=true git merge --continue; {landed_bad}"
            ),
        ),
        (
            "cherry-pick -m 1 of a stash on a moved branch",
            format!("{stash_bad_moved} && git cherry-pick -m 1 'stash@{{0}}'; {landed_bad}"),
        ),
        (
            "cherry-pick of a stash's index commit on a moved branch",
            format!("{stash_bad_moved} && git cherry-pick 'stash@{{0}}^2'; {landed_bad}"),
        ),
        (
            "cherry-pick by object id after a tag",
            format!("{stash_bad_moved} && git tag t 'stash@{{0}}^2' && git stash clear && git cherry-pick $(git rev-parse t); {landed_bad}"),
        ),
        (
            "cherry-pick by object id after the stash is dropped",
            format!("{stash_bad_moved} && I=$(git rev-parse 'stash@{{0}}^2') && git stash drop -q && git cherry-pick $I; {landed_bad}"),
        ),
        (
            "revert -m 2 of a stash that deleted a staged file",
            format!("{stage_bad} && rm bad && git stash push -q && echo z > z && git add z && git commit -qm z && \
                     git revert --no-edit -m 2 'stash@{{0}}'; {landed_bad}"),
        ),
        (
            "rebase -i picking a stash's index commit",
            format!("{stash_bad_moved} && I=$(git rev-parse 'stash@{{0}}^2') && \
                     GIT_SEQUENCE_EDITOR=\"sed -i '1i pick $I'\" git rebase -q -i HEAD; {landed_bad}"),
        ),
        (
            "notes onto a branch",
            "B=$(git rev-parse main); git notes --ref=refs/heads/main add -m x HEAD; \
             GIT_NOTES_REF=refs/heads/main git notes add -f -m y HEAD; \
             git -c core.notesRef=refs/heads/main notes add -f -m z HEAD; test \"$(git rev-parse main)\" != \"$B\"".into(),
        ),
        (
            // `git replace` is refused (plumbing), but update-ref writes a
            // replace ref all the same: HEAD then reads as the stash's
            // index commit, and pre-commit diffs against its tree.
            "replace ref by update-ref fools pre-commit",
            format!("{stage_bad} && git stash push -q && \
                     git update-ref refs/replace/$(git rev-parse HEAD) $(git rev-parse 'stash@{{0}}^2') && \
                     git stash drop -q && git reset -q --hard && echo z > z && git add z && git commit -qm z; {landed_bad}"),
        ),
        (
            "grafts fake a fast-forward",
            "git fetch -q origin && git checkout -q -b g && echo g > g && git add g && git commit -qm g && \
             echo \"$(git rev-parse HEAD) $(git rev-parse origin/other)\" > .git/info/grafts && \
             git push -q origin g:other; test \"$(git ls-remote origin refs/heads/other | cut -f1)\" = \"$(git rev-parse g)\"".into(),
        ),
        (
            "replace --graft fakes a fast-forward",
            "git fetch -q origin && git checkout -q -b g && echo g > g && git add g && git commit -qm g && \
             git replace --graft HEAD origin/other && \
             git push -q origin g:other; test \"$(git ls-remote origin refs/heads/other | cut -f1)\" = \"$(git rev-parse g)\"".into(),
        ),
        (
            "push a stash's index commit to a new branch",
            "echo b > bad && git add bad && git stash push -q && git push -q origin 'stash@{0}^2:refs/heads/newb'; \
             git --git-dir=remote.git ls-tree -r --name-only newb | grep -qx bad".into(),
        ),
        (
            "update-ref of a remote-tracking ref, then push it",
            "echo b > bad && git add bad && git stash push -q && \
             git update-ref refs/remotes/origin/x 'stash@{0}^2' && git push -q origin refs/remotes/origin/x:refs/heads/main; \
             git --git-dir=remote.git ls-tree -r --name-only main | grep -qx bad".into(),
        ),
        (
            "push --atomic with a deletion",
            "git push -q --atomic origin main :other; ! git --git-dir=remote.git rev-parse -q --verify other".into(),
        ),
        (
            "push --force-with-lease --force-if-includes",
            "git fetch -q origin && git push -q --force-with-lease --force-if-includes origin main:other; \
             test \"$(git ls-remote origin refs/heads/other | cut -f1)\" = \"$(git rev-parse main)\"".into(),
        ),
        (
            "+refspec from an included config",
            "printf '[remote \"origin\"]\\n\\tpush = +refs/heads/main:refs/heads/other\\n' > /tmp/inc && \
             git config include.path /tmp/inc && git push -q origin; \
             test \"$(git ls-remote origin refs/heads/other | cut -f1)\" = \"$(git rev-parse main)\"".into(),
        ),
        (
            "mirror set inline",
            "git -c remote.origin.mirror=true push -q origin; ! git --git-dir=remote.git rev-parse -q --verify other".into(),
        ),
    ];
    let mut through = Vec::new();
    for (name, script) in &cases {
        reset();
        let o = agent(script);
        let mut why = Vec::new();
        if o.status.success() {
            why.push("landed".to_owned());
        }
        for r in host(&["for-each-ref", "--format=%(refname)", "refs/heads"]).lines() {
            if host(&["ls-tree", "-r", "--name-only", r])
                .lines()
                .any(|f| f == "bad")
            {
                why.push(format!("local {r} holds bad"));
            }
        }
        for r in host(&[
            "--git-dir=remote.git",
            "for-each-ref",
            "--format=%(refname)",
        ])
        .lines()
        {
            if host(&["--git-dir=remote.git", "ls-tree", "-r", "--name-only", r])
                .lines()
                .any(|f| f == "bad")
            {
                why.push(format!("remote {r} holds bad"));
            }
        }
        if host(&[
            "--git-dir=remote.git",
            "rev-parse",
            "-q",
            "--verify",
            "refs/heads/other",
        ]) != other
        {
            why.push("the remote's other moved".into());
        }
        if !why.is_empty() {
            through.push(format!("{name}: {}\n{}", why.join(", "), text(&o)));
        }
    }
    assert!(
        through.is_empty(),
        "got through:\n{}",
        through.join("\n---\n")
    );
    // Control: content a dropped stash once held, committed for real, can
    // still be rebased (it is on a branch already), and commits go on.
    reset();
    let o = agent(
        "echo g > good && git add good && git stash push -q && git stash drop -q && \
         echo g > good && git add good && git commit -qm good && \
         git checkout -q -b feat HEAD~1 && echo f > f && git add f && git commit -qm f && \
         git checkout -q main && git rebase -q feat && git ls-tree -r --name-only main | grep -qx f",
    );
    assert!(o.status.success(), "a legitimate rebase: {}", text(&o));
}
