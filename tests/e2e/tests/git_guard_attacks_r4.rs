//! Round-four attacks on the git guard (issue 15), from inside a real
//! sandbox as the agent: a commit holding content the pre-commit hook
//! refuses gets onto `main` and is pushed to a bare remote, and a message
//! the commit-msg hook never saw is committed. Judged by their effect.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use sbx_e2e::{RACER, REFUSE_MARKER, Repo, attack_repo, base_image, sh, started, text};

/// A repository whose pre-commit refuses staged MARKER and whose
/// commit-msg requires a `JIRA-<n>` first line, with a bare remote
/// `origin` inside the workspace (so the sandbox reaches it).
fn repo() -> Repo {
    let repo = attack_repo(
        "gattack4",
        &["-qm", "JIRA-1 one"],
        &["/*.py"],
        &[
            ("pre-commit", REFUSE_MARKER),
            (
                "commit-msg",
                "#!/bin/sh\ngrep -q '^JIRA-[0-9]' \"$1\" || { echo no JIRA id >&2; exit 1; }\n",
            ),
        ],
    );
    std::fs::write(repo.path.join(".race.py"), RACER).unwrap();
    repo.give_to_agent();
    repo
}

struct Sandbox {
    repo: Repo,
}

impl Sandbox {
    fn start() -> Option<Sandbox> {
        started(repo).map(|repo| Sandbox { repo })
    }

    fn agent(&self, script: &str) -> Output {
        self.repo.agent(script)
    }

    /// Neither main nor the remote's main may hold MARKER.
    fn clean(&self, what: &str) {
        let o = self.agent(
            "git grep -q MARKER main -- && echo main; \
             git -C remote.git grep -q MARKER main -- && echo remote; true",
        );
        assert_eq!(text(&o).trim(), "", "{what}: MARKER on a branch");
    }
}

/// A stash made in another repository of the sandbox is recorded there,
/// not in the workspace: fetched in (FETCH_HEAD, no ref moves) and
/// cherry-picked onto main (`-m 1`, an in-process commit without
/// pre-commit), its change reached main and the remote, because the
/// workspace's reference-transaction step, finding no stash of its own,
/// only looked for stash-shaped commits. Every repository's step now adds
/// the stash commits it sees made to one record of the sandbox's (the
/// broker's, root's), which the workspace's steps read too. Same for the
/// stash's index commit (`reset --hard FETCH_HEAD^2`).
#[test]
fn a_stash_from_another_repository_cannot_be_cherry_picked_onto_main() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "git clone -q /workspace/gattack4 /tmp/other && cd /tmp/other && \
         echo MARKER > a && git stash -q && cd - >/dev/null && \
         git fetch -q /tmp/other refs/stash && git cherry-pick -m 1 FETCH_HEAD; \
         git push -q origin main; true",
    );
    assert!(o.status.code().is_some(), "{}", text(&o));
    sb.clean("a foreign stash cherry-picked");
    let o = sb.agent(
        "git reset -q --hard; git cherry-pick --abort 2>/dev/null; \
         git clone -q /workspace/gattack4 /tmp/other2 && cd /tmp/other2 && \
         echo MARKER > a && git add a && git stash -q && cd - >/dev/null && \
         git fetch -q /tmp/other2 refs/stash && git reset -q --hard FETCH_HEAD^2; \
         git push -q origin main; true",
    );
    assert!(o.status.code().is_some(), "{}", text(&o));
    sb.clean("a foreign stash's index commit");
    // Control: an ordinary commit still reaches main and the remote.
    let o = sb.agent(
        "git fetch -q origin && git reset -q --hard origin/main && echo ok > a && git commit -qam 'JIRA-5 ok' && \
         git push -q origin main && git -C remote.git log -1 --format=%s main",
    );
    assert!(text(&o).contains("JIRA-5 ok"), "{}", text(&o));
}

/// git commit re-reads the index after pre-commit and commits that: the
/// agent swapping the index between the hook's own `git diff --cached`
/// and that re-read committed what the hook never saw. The broker now runs
/// the commit on a private copy of the index (sbx-git-guard's index.rs).
#[test]
fn the_index_swapped_after_pre_commit_is_not_committed() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "echo MARKER > a && git add a && cp .git/index .git/B && git reset -q && \
         echo ok > b && git add b && \
         { python3 .race.py .git/B .git/index & } && sleep 0.5 && git commit -qm 'JIRA-2 swapped'; \
         wait; git push -q origin main; true",
    );
    assert!(o.status.code().is_some(), "{}", text(&o));
    sb.clean("the index swapped after pre-commit");
}

/// git commit re-reads `.git/COMMIT_EDITMSG` after commit-msg and commits
/// what it reads: a message renamed over it once the hook had read the good
/// one was committed unseen. Through the broker commit-msg now runs on a
/// private copy, which is written back for git, and the commit's prepared
/// step compares the message git committed with the one the hook passed
/// (sbx-git-guard's msg.rs). The racer renames on the first close of the
/// file after the hook started (the hook's read before; the broker's
/// write-back now), for each cleanup mode.
#[test]
fn the_message_swapped_after_commit_msg_is_not_committed() {
    let Some(sb) = Sandbox::start() else { return };
    for cleanup in ["default", "strip", "whitespace", "verbatim", "scissors"] {
        let o = sb.agent(&format!(
            "printf 'no ticket\\n' > .git/M && \
             {{ python3 .race.py .git/M .git/COMMIT_EDITMSG commit-msg 24 & }}; sleep 0.5; \
             git commit -q --allow-empty --cleanup={cleanup} -m 'JIRA-7 ok'; echo rc=$?; wait; \
             git push -q origin main; git log -1 --format=%s main"
        ));
        let out = text(&o);
        assert!(
            !out.lines().any(|l| l == "no ticket"),
            "{cleanup}: the swapped message was committed: {out}"
        );
        let o = sb.agent("git -C remote.git log -1 --format=%s main");
        assert!(!text(&o).contains("no ticket"), "{cleanup}: {}", text(&o));
    }
    // On a detached HEAD (no branch moves; the step is asked all the same).
    let o = sb.agent(
        "git checkout -q --detach && printf 'no ticket\\n' > .git/M && \
         { python3 .race.py .git/M .git/COMMIT_EDITMSG commit-msg 24 & }; sleep 0.5; \
         git commit -q --allow-empty -m 'JIRA-7 ok'; echo rc=$?; wait; \
         git log -1 --format=%s HEAD; git checkout -q main",
    );
    assert!(
        !text(&o).lines().any(|l| l == "no ticket"),
        "detached: the swapped message was committed: {}",
        text(&o)
    );
    // Control: a good message is still committed, and a rebase that
    // amends one (an `edit` stop, `commit --amend`, `--continue` picking
    // the next) and rewords another goes through.
    let o = sb.agent("git commit -q --allow-empty -m 'JIRA-8 ok' && git log -1 --format=%s");
    assert!(text(&o).contains("JIRA-8 ok"), "{}", text(&o));
    let o = sb.agent(
        "echo 9a > a && git commit -qam 'JIRA-9 a' && echo 9c > a && git commit -qam 'JIRA-9 c' && \
         GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -qi HEAD~2 && \
         git commit -q --amend -m 'JIRA-9 b' && git rebase --continue && \
         GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/reword/' GIT_EDITOR='sed -i s/c/d/' git rebase -qi HEAD~1 && \
         git log -2 --format=%s",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("JIRA-9 d\nJIRA-9 b"), "{}", text(&o));
}

/// The same swap in every place git reads the index from after
/// pre-commit: `commit -a` (git's own `.git/index.lock`), `--amend`, and
/// an index named by `GIT_INDEX_FILE`; a `.git/index` that is a symlink
/// is removed by the guest before git reads it. A partial commit (`commit <paths>`), whose
/// second index git keeps in the git dir, is refused whole.
#[test]
fn the_index_swapped_in_every_form_is_not_committed() {
    let Some(sb) = Sandbox::start() else { return };
    for (n, (what, prep, target, commit, after)) in [
        (
            "-a",
            "true",
            ".git/index.lock",
            "git commit -qam 'JIRA-2 all'",
            // The racer's late rename (git locked its private copy instead).
            "rm -f .git/index.lock",
        ),
        (
            "--amend",
            "true",
            ".git/index",
            "git commit -q --amend -m 'JIRA-3 amend'",
            "true",
        ),
        (
            "GIT_INDEX_FILE",
            "cp .git/index idx",
            "idx",
            "GIT_INDEX_FILE=$PWD/idx git commit -qm 'JIRA-4 env'",
            "rm -f idx",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let o = sb.agent(&format!(
            "rm -f .git/B; echo MARKER > a && git add a && cp .git/index .git/B && git reset -q && \
             git checkout -q -- a && echo {n} > b && git add b && {prep} || exit 1; \
             {{ python3 .race.py .git/B {target} & }}; sleep 0.5; {commit}; echo rc=$?; wait; \
             {after}; git push -q origin main; git log -1 --format=%s"
        ));
        assert!(text(&o).contains("rc=0"), "{what}: {}", text(&o));
        sb.clean(what);
    }
    let o = sb.agent(
        "echo 9 > b && git add b && git commit -qm 'JIRA-6 partial' -- b; echo rc=$?; \
         git log -1 --format=%s",
    );
    let out = text(&o);
    assert!(
        out.contains("rc=1") && out.contains("a partial commit"),
        "{out}"
    );
    assert!(!out.contains("JIRA-6"), "{out}");
    // A `.git/index` that is a symlink is no longer the agent's to make
    // (a37y: the host's git follows links under `.git`): the guest
    // removes it and ends the agent's processes, so nothing is committed.
    let o = sb.agent(
        "mv .git/index idx2 && ln -s ../idx2 .git/index && sleep 1 && \
         git commit -qm 'JIRA-5 link'; echo rc=$?",
    );
    assert!(!text(&o).contains("rc="), "{}", text(&o));
    let index = sb.repo.path.join(".git/index");
    assert!(
        !index.symlink_metadata().is_ok_and(|m| m.is_symlink()),
        "{}",
        text(&o)
    );
    let log = sb
        .repo
        .git(&["-c", "safe.directory=*", "log", "--format=%s", "main"]);
    assert!(!log.contains("JIRA-5 link"), "{log}");
}

/// core.commentChar: git's cleanup drops the lines commit-msg read as
/// the ticket (`-c`, and `git config` stored). Refused now (77).
#[test]
fn a_comment_character_cannot_hide_the_message_commit_msg_saw() {
    let Some(sb) = Sandbox::start() else { return };
    for attack in [
        "git -c core.commentChar=J commit -q --allow-empty --cleanup=strip -m 'JIRA-3 ok' -m 'no ticket'",
        "git config core.commentChar J && \
         git commit -q --allow-empty --cleanup=strip -m 'JIRA-3 ok' -m 'no ticket'",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.commentchar GIT_CONFIG_VALUE_0=J \
         git commit -q --allow-empty --cleanup=strip -m 'JIRA-3 ok' -m 'no ticket'",
    ] {
        let o = sb.agent(attack);
        assert_eq!(o.status.code(), Some(77), "{attack}: {}", text(&o));
        let o = sb.agent("git log -1 --format=%s");
        assert_eq!(text(&o).trim(), "JIRA-1 one", "{attack}");
    }
    // Control: the hook still passes a good message.
    let o = sb.agent("git commit -q --allow-empty --cleanup=strip -m 'JIRA-4 ok' -m body");
    assert!(o.status.success(), "{}", text(&o));
}

/// husky 9's `.husky/_/h`, as `husky` installs it (trimmed of its messages).
const HUSKY_H: &str = r#"#!/usr/bin/env sh
[ "$HUSKY" = "2" ] && set -x
n=$(basename "$0")
s=$(dirname "$(dirname "$0")")/$n

[ ! -f "$s" ] && exit 0

i="${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh"
[ -f "$i" ] && . "$i"

[ "${HUSKY-}" = "0" ] && exit 0

export PATH="node_modules/.bin:$PATH"
sh -e "$s" "$@"
c=$?

[ $c != 0 ] && echo "husky - $n script failed (code $c)"
exit $c
"#;

/// A husky 9 repository: git's hooks are `.husky/_/<name>`, each sourcing
/// `.husky/_/h`, which runs `.husky/<name>` found from `$0`. The broker
/// started the hook as `/proc/self/fd/N/pre-commit`, so `h` looked for
/// `/proc/self/fd/pre-commit`, found nothing and exited 0: in a sandbox
/// every husky hook passed without running. Now the hook runs by its path
/// under the read-only `.husky`, as git runs it, and refuses MARKER.
#[test]
fn husky_hooks_run_in_a_sandbox() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("husky9");
    let path = repo.path.clone();
    let git = |args: &[&str]| repo.git(args);
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "core.hooksPath", ".husky/_"]);
    std::fs::create_dir_all(path.join(".husky/_")).unwrap();
    std::fs::write(path.join(".husky/_/.gitignore"), "*\n").unwrap();
    std::fs::write(path.join(".husky/_/h"), HUSKY_H).unwrap();
    std::fs::write(
        path.join(".husky/_/pre-commit"),
        "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
    )
    .unwrap();
    // husky 9 leaves the user's script as written (not executable).
    std::fs::write(
        path.join(".husky/pre-commit"),
        "echo ran > /tmp/husky-ran\n\
         if git diff --cached | grep -q 'MARK''ER'; then echo refused >&2; exit 1; fi\n",
    )
    .unwrap();
    for f in [".husky/_/h", ".husky/_/pre-commit"] {
        std::fs::set_permissions(path.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(path.join("a"), "1\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    // The host's git runs the hook, which refuses MARKER.
    std::fs::write(path.join("a"), "MARKER\n").unwrap();
    git(&["add", "a"]);
    let host = Command::new("git")
        .args([
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "bad",
        ])
        .current_dir(&path)
        .output()
        .unwrap();
    assert!(!host.status.success(), "host: {}", text(&host));
    git(&["reset", "-q", "--hard"]);
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(repo.root()));
    repo.start();
    let agent = |script: &str| repo.agent(script);
    let o = agent(
        "echo MARKER > a && git add a && git commit -qm bad; echo rc=$?; git reset -q --hard",
    );
    assert!(text(&o).contains("rc=1"), "MARKER committed: {}", text(&o));
    assert!(text(&o).contains("refused"), "{}", text(&o));
    let o = agent("git grep -q MARKER main -- && echo main; true");
    assert_eq!(text(&o).trim(), "", "MARKER on main");
    // husky's init.sh filled while git runs, after the guard looked: an
    // empty one (the image's, root-owned, moved aside with its directory)
    // takes git's stderr, where GIT_TRACE_SETUP prints a git dir path that
    // holds `;exit 0`; or the trace is written there by path. The broker
    // looks again just before it starts the hook.
    for attack in [
        "GIT_TRACE_SETUP=2 GIT_DIR=\"$d\" GIT_WORK_TREE=$PWD git commit -qm bad 2>>\"$i\"",
        "GIT_TRACE_SETUP=\"$i\" GIT_DIR=\"$d\" GIT_WORK_TREE=$PWD git commit -qm bad",
    ] {
        let o = agent(&format!(
            "mv ~/.config/husky ~/.config/h.$$ 2>/dev/null; mkdir -p ~/.config/husky; \
             i=~/.config/husky/init.sh; rm -f \"$i\"; : > \"$i\"; \
             d='/tmp/x;exit 0'; ln -sfn \"$PWD/.git\" \"$d\"; \
             echo MARKER > a && git add a; {attack}; echo rc=$?; git reset -q --hard"
        ));
        assert!(text(&o).contains("rc=1"), "{attack}: {}", text(&o));
        let o = agent("git grep -q MARKER main -- && echo main; true");
        assert_eq!(text(&o).trim(), "", "{attack}: MARKER on main");
    }
    let o = agent("rm -f ~/.config/husky/init.sh");
    assert!(o.status.success(), "{}", text(&o));
    // Control: a clean commit runs the script and commits.
    let o = agent("rm -f /tmp/husky-ran; echo ok > a && git commit -qam ok && cat /tmp/husky-ran");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "ran",
        "{}",
        text(&o)
    );
}

/// The real git's other programs are libgit too: `git-http-fetch -w`
/// writes a ref, `git-http-push --force`/`-D` rewinds and deletes on a
/// remote, all without the broker. Only git run by the broker (group
/// sbx-git) may start them now; git's https transport still works.
#[test]
fn the_real_gits_other_programs_run_only_under_git() {
    let Some(sb) = Sandbox::start() else { return };
    for prog in [
        "/usr/lib/git-core/git-http-fetch",
        "/usr/lib/git-core/git-http-push",
        "/usr/lib/git-core/git-remote-https",
        "/usr/bin/scalar",
        "/usr/bin/git-shell",
        "cat /usr/lib/git-core/git-http-fetch >/tmp/copy; /tmp/copy",
    ] {
        let o = sb.agent(&format!("{prog} --help >/dev/null 2>&1; echo rc=$?"));
        assert!(text(&o).contains("rc=126"), "{prog}: {}", text(&o));
    }
    // git run by the broker still starts its https helper.
    let o = sb.agent("git ls-remote https://127.0.0.1:1/x.git");
    assert!(
        text(&o).contains("unable to access"),
        "git-remote-https: {}",
        text(&o)
    );
}

/// `git push` runs the remote helper (`git remote-https URL`) through the
/// guard and sends it `push` commands only past its pre-push step. The
/// agent running the helper itself and writing `push +main:main` or
/// `push :main` on its stdin force-pushed and deleted the remote's main
/// (its `send-pack --stateless-rpc` was let through as git push's half).
/// The guard now reads the helper's commands first and refuses those.
#[test]
fn a_remote_helper_driven_by_hand_cannot_force_or_delete() {
    let Some(sb) = Sandbox::start() else { return };
    std::fs::write(sb.repo.path.join(".srv.py"), sbx_e2e::GIT_HTTP_SERVER).unwrap();
    let u = "export U=http://127.0.0.1:8765/git/r.git";
    let o = sb.agent(&format!(
        "{u}; mkdir -p /tmp/srv && git init -q --bare /tmp/srv/r.git && \
         git -C /tmp/srv/r.git config http.receivepack true && \
         {{ python3 .srv.py >/tmp/srv.log 2>&1 & }} && \
         for i in $(seq 20); do git ls-remote $U >/dev/null 2>&1 && break; sleep 0.3; done; \
         echo c > c && git add c && git commit -qm 'JIRA-5 c' && git push -q $U main && \
         git reset -q --hard HEAD~1 && echo d > d && git add d && git commit -qm 'JIRA-6 d'"
    ));
    assert!(o.status.success(), "setup: {}", text(&o));
    let remote_main = || {
        let o = sb.agent("git -C /tmp/srv/r.git rev-parse main");
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    let before = remote_main();
    assert_eq!(before.len(), 40, "the remote's main");
    for cmds in [
        "push +refs/heads/main:refs/heads/main\\n\\n",
        "push :refs/heads/main\\n\\n",
        "option force true\\npush refs/heads/main:refs/heads/main\\n\\n",
        "capabilities\\nlist for-push\\npush +HEAD:refs/heads/main\\n\\n",
    ] {
        let o = sb.agent(&format!("{u}; printf '{cmds}' | git remote-http $U $U"));
        assert_eq!(o.status.code(), Some(77), "{cmds}: {}", text(&o));
        assert_eq!(remote_main(), before, "{cmds} moved the remote's main");
    }
    // A program git starts (an editor) has git's group, so it may run the
    // helper binary itself, unfiltered: its `git send-pack --stateless-rpc`
    // (through the guard) reads the refspecs, which are checked there.
    for cmds in [
        "push :refs/heads/main\\n\\n",
        "push +refs/heads/main:refs/heads/main\\n\\n",
    ] {
        let o = sb.agent(&format!(
            "{u}; printf '#!/bin/sh\\nprintf \"{cmds}\" | /usr/lib/git-core/git-remote-http $U $U >/tmp/ed.out 2>&1\\n' > /tmp/ed && \
             chmod +x /tmp/ed && GIT_EDITOR=/tmp/ed git commit -q --allow-empty -m 'JIRA-7 e' -e; \
             cat /tmp/ed.out; git reset -q --hard HEAD@{{1}} 2>/dev/null; true"
        ));
        assert!(o.status.code().is_some(), "{}", text(&o));
        assert_eq!(
            remote_main(),
            before,
            "{cmds} by an editor moved the remote's main: {}",
            text(&o)
        );
    }
    // git push itself still works over the helper: a new branch.
    let o = sb.agent(&format!("{u}; git push -q $U main:side"));
    assert!(o.status.success(), "push: {}", text(&o));
    // And a fetch (protocol v2, a raw stream after stateless-connect).
    let o = sb.agent(&format!(
        "{u}; git fetch -q $U side && git rev-parse FETCH_HEAD"
    ));
    assert!(o.status.success(), "fetch: {}", text(&o));
}
