//! Round-three attacks on the git guard, from inside a real sandbox as the
//! agent: commits that no pre-commit saw, made by git's own machinery (a
//! merge strategy program on PATH, `git notes`, `hash-object -wtcommit`),
//! and config that blinds the hook's own git. Judged by their effect: no
//! commit on any branch holds the content the pre-commit hook refuses.

use std::process::Output;

use sbx_e2e::{REFUSE_MARKER, Repo, base_image, sbx, text};

/// A repository with a pre-commit hook that refuses staged MARKER, and a
/// branch `side` beside `main`.
fn repo() -> Repo {
    let repo = Repo::new("gattack");
    let path = repo.path.clone();
    let git = |args: &[&str]| repo.git(args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(path.join("a"), "1\n").unwrap();
    git(&["add", "a"]);
    git(&["commit", "-qm", "one"]);
    git(&["branch", "side"]);
    repo.hook("pre-commit", REFUSE_MARKER);
    repo.give_to_agent();
    repo
}

#[test]
fn commits_no_pre_commit_saw_do_not_reach_a_branch_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = repo();
    repo.start();
    let agent = |script: &str| -> Output {
        sbx()
            .args(["exec", "-C"])
            .arg(&repo.path)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "export PATH=/tmp/evil:$PATH GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b \
                 GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; {script}"
            ))
            .output()
            .unwrap()
    };
    // Nothing on any branch may hold MARKER.
    let clean = |what: &str| {
        let o = agent(
            "for b in $(git for-each-ref --format='%(refname)' refs/heads); do \
               git grep -q MARKER \"$b\" -- && echo \"$b\"; done; true",
        );
        assert_eq!(text(&o).trim(), "", "{what}: MARKER on a branch");
    };
    let setup = agent(
        "mkdir -p /tmp/evil && printf '#!/bin/sh\\necho MARKER > a\\ngit add a\\nexit 0\\n' \
           > /tmp/evil/git-merge-evil && chmod +x /tmp/evil/git-merge-evil && \
         git checkout -q side && echo b > b && git add b && git commit -qm side && \
         git checkout -q main && echo c > c && git add c && git commit -qm c && \
         echo MARKER > a && git add a && ! git commit -qm direct && git reset -q --hard",
    );
    assert!(setup.status.success(), "setup: {}", text(&setup));
    clean("setup");

    // 1. A merge strategy program: git commits its index without pre-commit.
    for attack in [
        "git checkout -q side && git cherry-pick --strategy=evil main",
        "git revert --strategy=evil --no-edit HEAD",
        "git -c pull.twohead=evil merge -m m side",
        // git runs the strategy as `git merge-evil`, through the guard.
        "git merge-evil HEAD -- HEAD side",
        // Stored by the shell: the program is still refused as git runs it.
        "printf '[branch \"main\"]\\n\\tmergeoptions = --no-verify\\n' >> ~/.gitconfig; \
         git merge -m m side",
    ] {
        let o = agent(&format!(
            "{attack}; rc=$?; git cherry-pick --abort 2>/dev/null; \
             git merge --abort 2>/dev/null; git revert --abort 2>/dev/null; \
             git checkout -q main 2>/dev/null; git reset -q --hard; exit $rc"
        ));
        assert_eq!(o.status.code(), Some(77), "{attack}: {}", text(&o));
        clean(attack);
    }
    let o = agent("sed -i '/mergeoptions/d' ~/.gitconfig");
    assert!(o.status.success(), "{}", text(&o));

    // 2. git notes: a note's text merged onto a branch (pre-commit, run by
    // the pre-merge-commit step, refuses that), or a branch moved onto the
    // notes commit (the reference-transaction step refuses that).
    let o = agent(
        "git notes add -m MARKER HEAD && \
         git merge --allow-unrelated-histories -m m refs/notes/commits; rc=$?; \
         git merge --abort 2>/dev/null; git reset -q --hard; exit $rc",
    );
    assert!(!o.status.success(), "notes merge: {}", text(&o));
    clean("notes merge");
    let o = agent("git branch -f side refs/notes/commits");
    assert!(!o.status.success(), "notes branch -f: {}", text(&o));
    assert!(text(&o).contains("unverified-commit"), "{}", text(&o));
    clean("notes branch -f");

    // 3. hash-object in a cluster, then the branch moved onto it.
    let o = agent(
        "c=$(printf 'tree %s\\nparent %s\\nauthor a <a@b> 1 +0000\\ncommitter a <a@b> 1 +0000\\n\\nx\\n' \
           $(git rev-parse HEAD^{tree}) $(git rev-parse HEAD) | git hash-object -wtcommit --stdin)",
    );
    assert_eq!(o.status.code(), Some(77), "hash-object: {}", text(&o));

    // 4. Config that blinds the hook's own `git diff --cached`.
    let o = agent(
        "echo '* -diff' > /tmp/attrs && git config core.attributesFile /tmp/attrs; rc=$?; \
         echo MARKER > a && git add a && git commit -qm blind; git reset -q --hard; exit $rc",
    );
    assert_eq!(o.status.code(), Some(77), "attributesFile: {}", text(&o));
    clean("attributesFile");

    // Control: honest work still commits and merges.
    let o = agent("echo ok > a && git commit -qam ok && git merge -q -m m side");
    assert!(o.status.success(), "honest: {}", text(&o));

    // 5. rebase -i `edit`, new staged content, --continue: the sequencer's
    // own `git commit -n` comes through the guard and runs the hooks (it was
    // refused, so every such --continue failed); MARKER is still refused.
    let edit = "GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2 && ";
    let o = agent(&format!(
        "{edit} echo fine >> c && git add c && GIT_EDITOR=true git rebase --continue"
    ));
    assert!(o.status.success(), "honest rebase --continue: {}", text(&o));
    let o = agent(&format!(
        "{edit} echo MARKER > c && git add c && GIT_EDITOR=true git rebase --continue;          rc=$?; git rebase --abort; exit $rc"
    ));
    assert!(
        !o.status.success(),
        "MARKER rebase --continue: {}",
        text(&o)
    );
    clean("rebase --continue");
}

/// A push over smart HTTP goes through git-remote-http, which runs `git
/// send-pack --stateless-rpc` through the guard: it works (it was refused as
/// plumbing, so no HTTP(S) push worked in a sandbox), and a forced update
/// or deletion is still refused. The server is git-http-backend behind
/// python's CGI server on the sandbox's loopback.
#[test]
fn http_pushes_work_and_stay_guarded_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = repo();
    repo.start();
    let server = sbx_e2e::GIT_HTTP_SERVER;
    std::fs::write(repo.path.join(".srv.py"), server).unwrap();
    let agent = |script: &str| -> Output {
        sbx()
            .args(["exec", "-C"])
            .arg(&repo.path)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a \
                 GIT_COMMITTER_EMAIL=a@b U=http://127.0.0.1:8765/git/r.git; {script}"
            ))
            .output()
            .unwrap()
    };
    let o = agent(
        "mkdir -p /tmp/srv && git init -q --bare /tmp/srv/r.git && \
         git -C /tmp/srv/r.git config http.receivepack true && \
         { python3 .srv.py >/tmp/srv.log 2>&1 & } && \
         for i in 1 2 3 4 5 6 7 8 9 10; do git ls-remote $U >/dev/null 2>&1 && break; sleep 0.3; done; \
         echo c > c && git add c && git commit -qm c && git push -q $U main",
    );
    assert!(o.status.success(), "http push: {}", text(&o));
    let remote = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let head = remote(&agent("git rev-parse main"));
    assert_eq!(remote(&agent("git -C /tmp/srv/r.git rev-parse main")), head);
    for attack in [
        "git push --force $U main~1:main",
        "git push $U +main~1:main",
        "git push $U :main",
        "printf '[remote \"x\"]\\n\\turl = %s\\n\\tmirror = true\\n' $U >> ~/.gitconfig; \
         git branch -f gone main~1; git push x",
    ] {
        let o = agent(attack);
        assert!(!o.status.success(), "{attack}: {}", text(&o));
        assert_eq!(
            remote(&agent("git -C /tmp/srv/r.git rev-parse main")),
            head,
            "{attack} moved the remote's main"
        );
    }
}

/// PTRACE_ATTACH, then /proc/PID/mem opened for writing: how an agent
/// would make a running hook exit 0. On success it lets the hook go.
const TRACER: &str = r#"import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
r = libc.ptrace(16, pid, 0, 0)
print("attach=%d errno=%d" % (r, ctypes.get_errno()))
if r == 0:
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, 0, 0)
    os.kill(pid, signal.SIGCONT)
try:
    open("/proc/%d/mem" % pid, "r+b")
    print("mem=open")
except OSError as e:
    print("mem=%d" % e.errno)
"#;

/// The broker's git and its hooks, attacked by the agent's own processes:
/// a running hook cannot be traced or have its memory written (it runs
/// with group sbx-git, which the agent lacks), killing it fails the
/// commit, and a `GIT_DIR` flipped between a repository without a stash
/// and the real one cannot move main onto the stash (the reference-
/// transaction step runs whatever the guard saw).
#[test]
fn hooks_cannot_be_traced_killed_into_passing_or_raced_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = repo();
    std::fs::write(repo.path.join(".tracer.py"), TRACER).unwrap();
    repo.start();
    let agent = |script: &str| repo.agent(script);
    // The hook waits (a file `go` ends the wait), then refuses MARKER.
    let hook = repo.path.join(".git/hooks/pre-commit");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho $$ > /tmp/hook.pid\nwhile [ ! -e /tmp/go ]; do sleep 0.05; done\n\
         if git diff --cached | grep -q MARKER; then exit 1; fi\n",
    )
    .unwrap();
    let o = agent(
        "rm -f /tmp/hook.pid /tmp/go; echo MARKER > a && git add a && \
         { git commit -qm traced & } ; \
         while [ ! -s /tmp/hook.pid ]; do sleep 0.02; done; p=$(cat /tmp/hook.pid); \
         id -g; stat -c 'gid=%g' /proc/$p; python3 .tracer.py $p; touch /tmp/go; wait; \
         git log --oneline | grep -c traced",
    );
    let out = text(&o);
    assert!(out.contains("attach=-1 errno=1"), "{out}");
    assert!(out.contains("mem=13") || out.contains("mem=1\n"), "{out}");
    assert!(!out.contains("gid=1000"), "{out}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.trim_end().ends_with('0'), "{out}");
    // A hook that would pass, killed mid-run: nothing is committed.
    let o = agent(
        "rm -f /tmp/hook.pid /tmp/go; git reset -q --hard; echo fine > a && git add a && \
         { git commit -qm killed & } ; \
         while [ ! -s /tmp/hook.pid ]; do sleep 0.02; done; kill -9 $(cat /tmp/hook.pid); \
         wait; git log --oneline | grep -c killed; git reset -q --hard",
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.trim_end().ends_with('0'), "{}", text(&o));

    // The race: a stash in the real repository, none in a copy; GIT_DIR
    // a symlink flipped between the two while `reset --hard stash@{0}`
    // runs again and again.
    let o = agent(
        "touch /tmp/go; echo MARKER > a && git stash -q && git clone -q --bare . /tmp/decoy.git && \
         (while :; do ln -sfn /tmp/decoy.git /tmp/l.new; mv -T /tmp/l.new /tmp/l; \
                      ln -sfn $PWD/.git /tmp/l.new; mv -T /tmp/l.new /tmp/l; done) & f=$!; \
         for i in $(seq 60); do GIT_DIR=/tmp/l GIT_WORK_TREE=. git reset -q --hard 'stash@{0}' 2>/dev/null; \
           rm -f .git/*.lock .git/refs/heads/*.lock /tmp/decoy.git/*.lock; done; \
         kill $f; git reset -q --hard; git stash list | wc -l",
    );
    assert!(o.status.success(), "race: {}", text(&o));
    let o = agent(
        "for b in $(git for-each-ref --format='%(refname)' refs/heads); do \
           git grep -q MARKER \"$b\" -- && echo \"$b\"; done; true",
    );
    assert_eq!(
        text(&o).trim(),
        "",
        "a raced reset moved a branch onto the stash"
    );
}

/// A clone in the sandbox pushing back into the workspace: the receiving
/// side's receive-pack runs the workspace's hooks through the guard's
/// directory (so a branch cannot be pushed onto the workspace's own stash
/// commit, which the clone's pre-push step cannot know).
#[test]
fn pushes_into_the_workspace_from_a_clone_are_guarded_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = repo();
    repo.start();
    let agent = |script: &str| repo.agent(script);
    let o = agent(
        "echo MARKER > a && git stash -q && git clone -q . /tmp/c && cd /tmp/c && \
         git fetch -q origin refs/stash && git push -q origin FETCH_HEAD:refs/heads/x; echo rc=$?",
    );
    assert!(text(&o).contains("rc=1"), "stash pushed back: {}", text(&o));
    let o = agent("git rev-parse -q --verify refs/heads/x || echo no-x");
    assert!(text(&o).contains("no-x"), "{}", text(&o));
    // Control: an honest branch pushed back lands.
    let o = agent("cd /tmp/c && git push -q origin HEAD:refs/heads/y && echo pushed");
    assert!(text(&o).contains("pushed"), "{}", text(&o));
}

/// Started by git as the `core.fsmonitor` the agent wrote into
/// `.git/config`: in the same call as pre-commit, with git's group and
/// Landlock domain. It tries to trace the repository's hook and the
/// guard's hook step that waits for it (either, traced, could be made to
/// exit 0), then lets the hook go.
const FSMONITOR_TRACER: &str = r#"import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
def attack(what, pid):
    r = libc.ptrace(16, pid, 0, 0)
    e = ctypes.get_errno()
    if r == 0:
        os.waitpid(pid, 0)
        libc.ptrace(17, pid, 0, 0)
        os.kill(pid, signal.SIGCONT)
    try:
        open("/proc/%d/mem" % pid, "r+b")
        m = "open"
    except OSError as x:
        m = str(x.errno)
    st = [l for l in open("/proc/%d/status" % pid) if l[:4] in ("Gid:", "Uid:")]
    return "%s attach=%d errno=%d mem=%s owner=%d %s\n" % (
        what, r, e, m, os.stat("/proc/%d/stat" % pid).st_uid, " ".join(x.strip() for x in st))
gid = [l for l in open("/proc/self/status") if l.startswith("Gid:")][0].split()[1]
for _ in range(400):
    if os.path.exists("/tmp/hook.pid") and open("/tmp/hook.pid").read().strip():
        break
    time.sleep(0.025)
import subprocess
child = subprocess.Popen(["sleep", "5"])
out = "tracer gid=%s\n" % gid + attack("control", child.pid)
child.kill()
out += attack("hook", int(open("/tmp/hook.pid").read()))
for p in os.listdir("/proc"):
    try:
        argv0 = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[0]
    except OSError:
        continue
    if argv0.startswith(b"/run/sbx-git/hooks/") and argv0.endswith(b"/pre-commit"):
        out += attack("step", int(p))
open("/tmp/fsmon.tmp", "w").write(out)
os.rename("/tmp/fsmon.tmp", "/tmp/fsmon.out")
open("/tmp/go", "w").close()
"#;

/// Programs git starts in the same call as a hook share git's group and
/// Landlock domain: a `core.fsmonitor` planted in `.git/config` runs before
/// pre-commit and forks a tracer. Neither the hook (started by the broker
/// in a domain of its own) nor the guard's step (an unreadable binary, so
/// not dumpable) can be traced, and the refusing hook refuses.
#[test]
fn a_program_git_starts_cannot_trace_that_calls_hook_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = repo();
    std::fs::write(repo.path.join(".fsmon.py"), FSMONITOR_TRACER).unwrap();
    repo.start();
    let hook = repo.path.join(".git/hooks/pre-commit");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho $$ > /tmp/hook.pid\ni=0\n\
         while [ ! -e /tmp/go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n\
         if git diff --cached | grep -q MARKER; then exit 1; fi\n",
    )
    .unwrap();
    let o = sbx()
        .args(["exec", "-C"])
        .arg(&repo.path)
        .args(["--", "sh", "-c"])
        .arg(
            "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b \
             GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; \
             printf '#!/bin/sh\\n[ -e /tmp/fsmon.started ] || { : > /tmp/fsmon.started; \
             setsid python3 '$PWD'/.fsmon.py </dev/null >/dev/null 2>&1 & }\\nexit 1\\n' > /tmp/fsmon.sh; \
             chmod +x /tmp/fsmon.sh; echo MARKER > a && git add a; \
             printf '[core]\\n\\tfsmonitor = /tmp/fsmon.sh\\n' >> ~/.gitconfig; \
             git commit -qm traced; echo commit=$?; \
             for i in $(seq 100); do [ -e /tmp/fsmon.out ] && break; sleep 0.05; done; \
             cat /tmp/fsmon.out; git log --oneline | grep -c traced",
        )
        .output()
        .unwrap();
    let out = text(&o);
    // The tracer had git's group: only the domain and dumpability stop it.
    assert!(out.contains("tracer gid=65533"), "{out}");
    // Tracing works here: its own child it may trace.
    assert!(out.contains("control attach=0"), "{out}");
    assert!(out.contains("hook attach=-1 errno=1"), "{out}");
    assert!(out.contains("step attach=-1 errno=1"), "{out}");
    assert!(out.contains("hook attach=-1 errno=1 mem=13"), "{out}");
    assert!(out.contains("step attach=-1 errno=1 mem=13"), "{out}");
    assert!(out.contains("commit=1"), "{out}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.trim_end().ends_with('0'), "{out}");
}
