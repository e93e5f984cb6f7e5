//! Round-seven attacks on the git guard (issue 15), from inside a real
//! sandbox as the agent: what a hook's own git prints (an environment
//! variable that turns colour on, configuration that changes `git grep`'s
//! pattern type or turns a new file into a copy), configuration keys naming
//! programs that `-c` could still set, an agent's `git-<cmd>` on PATH run
//! with git's group (which drove a remote helper past pre-push), and the
//! message `git merge` and `git am` re-read after commit-msg. Judged by
//! their effect: no branch (local, or the remote's) holds MARKER,
//! PLUSMARK, GREP.MARK, a file `cred` or a BADMSG message, and no program
//! ran or push landed that the guard should have refused.

use std::process::Output;

use sbx_e2e::{GIT_HTTP_SERVER, RACER, REFUSE_MARKER, Repo, attack_repo, started, text};

/// More of pre-commit: an added line with PLUSMARK (matched with its
/// `+`), a new file `cred` (its `+++ b/` line), and GREP.MARK found by the
/// hook's own `git grep` (a basic regular expression, as hooks write them).
const REFUSE_PATCH: &str = "\
    if git diff --cached | grep -q '^+.*PLUSMARK'; then echo PLUSMARK refused >&2; exit 1; fi\n\
    if git diff --cached | grep -q '^+++ b/cred'; then echo cred refused >&2; exit 1; fi\n\
    if git grep --cached -q 'GREP\\.MARK'; then echo GREP.MARK refused >&2; exit 1; fi\n";

/// pre-push: refuses every push to a URL naming `nopush`.
const REFUSE_NOPUSH: &str =
    "#!/bin/sh\ncase \"$2\" in *nopush*) echo nopush refused >&2; exit 1;; esac\n";

/// commit-msg: no BADMSG.
const REFUSE_BADMSG: &str =
    "#!/bin/sh\nif grep -q BADMSG \"$1\"; then echo BADMSG refused >&2; exit 1; fi\n";

/// A repository whose pre-commit refuses staged MARKER (and the above),
/// with a bare remote `origin` inside the workspace.
fn repo() -> Repo {
    let pre_commit = format!("{REFUSE_MARKER}{REFUSE_PATCH}");
    let repo = attack_repo(
        "gattack7",
        &["-qsm", "one"],
        &["/.srv.py", "/.race.py"],
        &[
            ("pre-commit", &pre_commit),
            ("pre-push", REFUSE_NOPUSH),
            ("commit-msg", REFUSE_BADMSG),
        ],
    );
    std::fs::write(repo.path.join(".race.py"), RACER).unwrap();
    std::fs::write(repo.path.join(".srv.py"), GIT_HTTP_SERVER).unwrap();
    repo.give_to_agent();
    repo
}

struct Sandbox {
    repo: Repo,
}

impl Sandbox {
    fn start() -> Option<Sandbox> {
        let sb = started(repo).map(|repo| Sandbox { repo })?;
        Some(sb)
    }

    fn agent(&self, script: &str) -> Output {
        self.repo.agent(script)
    }

    /// Branches (local, or the remote's) holding what pre-commit refuses.
    fn landed(&self) -> String {
        let o = self.agent(
            "for r in . remote.git; do \
               for b in $(git -C $r for-each-ref --format='%(refname)' refs/heads); do \
                 git -C $r grep -q -F -e MARKER -e PLUSMARK -e GREP.MARK $b -- 2>/dev/null && echo $r:$b; \
                 git -C $r cat-file -e $b:cred 2>/dev/null && echo $r:$b:cred; \
                 git -C $r log --format=%B $b | grep -q BADMSG && echo $r:$b:BADMSG; \
               done; done; true",
        );
        text(&o).trim().to_string()
    }

    /// Back to a clean start: main at the remote's main, no other branch.
    fn reset(&self) {
        self.agent(
            "git merge --abort 2>/dev/null; git am --abort 2>/dev/null; git checkout -q -f main 2>/dev/null; \
             for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do \
               [ $b = main ] || git branch -q -D $b; done; \
             git reset -q --hard $(git -C remote.git rev-parse main); git clean -qfd -e .race.py -e .srv.py; \
             sed -i '/^\\[grep\\]$/d; /atternType = /d; /xtendedRegexp = /d; /^\\[diff\\]$/d; /renames = /d; /^\\[log\\]$/d; /iffMerges = /d; /^\\[i18n\\]$/d; /ogOutputEncoding = /d' ~/.gitconfig; \
             rm -rf ~/.gitconfig /tmp/ran; true",
        );
    }

    /// Runs each attack from a clean start; those that landed, with output.
    fn run_all(&self, attacks: &[&str]) -> Vec<String> {
        let mut landed = Vec::new();
        for attack in attacks {
            let o = self.agent(attack);
            let m = self.landed();
            if std::env::var_os("R7_DEBUG").is_some() {
                eprintln!("=== {attack}\n{:?} [{m}]\n{}", o.status.code(), text(&o));
            }
            if !m.is_empty() {
                landed.push(format!("{attack}\n  -> {m}\n{}", text(&o)));
            }
            self.reset();
        }
        landed
    }
}

/// `GIT_PAGER_IN_USE` is git's own word that its stdout is a pager; with
/// it set, the `--color=auto` the guard gives every `git diff` (so a
/// hand-written `color.diff = always` does not colour) turned colour on in
/// the hook's own `git diff --cached | grep '^+.*X'`, which then matched
/// nothing: PLUSMARK and a new `cred` were committed and pushed. The guard
/// now removes it from git's and the hooks' environment. A config that
/// makes `git grep` read patterns as fixed strings (`grep.patternType`,
/// by `-c` or written by hand) made the hook's `git grep --cached -q
/// 'GREP\.MARK'` find nothing; `git grep` now gets `--basic-regexp` (git's
/// default) first among its options. A `diff.renames = copies` turned a
/// new file copied from one the commit also changed into "copy to cred",
/// with no `+++ b/cred`; diff, log, show and whatchanged now get `-c
/// diff.renames=true` (git's default).
#[test]
fn a_hooks_own_git_prints_what_it_would_without_the_agents_settings() {
    let Some(sb) = Sandbox::start() else { return };
    let landed = sb.run_all(&[
        "echo PLUSMARK > a && git add a && GIT_PAGER_IN_USE=1 git commit -qm x",
        "echo s > cred && git add cred && GIT_PAGER_IN_USE=true git commit -qm x && git push -q origin main",
        "echo PLUSMARK > a && git add a && GIT_PAGER_IN_USE=1 GIT_PAGER_IN_USE=1 git commit -qm x",
        "echo GREP.MARK > a && git add a && git -c grep.patternType=fixed commit -qm x",
        "echo GREP.MARK > a && git add a && \
         GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=grep.patternType GIT_CONFIG_VALUE_0=fixed git commit -qm x",
        "printf '[grep]\\n\\tpatternType = fixed\\n' >> ~/.gitconfig && \
         echo GREP.MARK > a && git add a && git commit -qm x",
        "printf '[grep]\\n\\tpatternType = fixed\\n' >> ~/.gitconfig && \
         echo GREP.MARK > a && git add a && git commit -qm x",
        // A copy of a file the commit also changes: "copy to cred", no `+++`.
        "printf 'l1\\nl2\\nl3\\nl4\\n' > a && git commit -qam four && cp a cred && echo t >> a && \
         git add a cred && git -c diff.renames=copies commit -qm x",
        "printf 'l1\\nl2\\nl3\\nl4\\n' > a && git commit -qam four && cp a cred && echo t >> a && \
         printf '[diff]\\n\\trenames = copies\\n' >> ~/.gitconfig && git add a cred && git commit -qm x",
    ]);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Controls: the hook still passes clean content, and `git grep` still
    // takes its own pattern-type options over the pinned default.
    let o = sb.agent(
        "echo 'x.y' > c && git add c && git commit -qm c && \
         git grep -q 'x\\.y' c && git grep -qF 'x.y' c && git grep -qE 'x\\.y' c && \
         ! git grep -qF 'x\\.y' c && git -c grep.patternType=fixed grep -qF x.y c && echo OK",
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("OK"),
        "control: {}",
        text(&o)
    );
}

/// Keys naming programs git runs that `-c` (and `git config`) could still
/// set, while `rules` says config-inline refuses every such key: a
/// trailer's command (`commit --trailer`, `interpret-trailers`), the ssh
/// signing key command, `imap-send`'s tunnel and a remote's helper
/// (`remote.<name>.vcs`, a `git-remote-<vcs>` from PATH). Such a program
/// runs as git's child with git's group (which the broker trusts: a remote
/// helper pushes only for git's own processes). Judged by the program not
/// having run.
#[test]
fn inline_keys_naming_programs_are_refused() {
    let Some(sb) = Sandbox::start() else { return };
    let ran = "printf '#!/bin/sh\\nid -g > /tmp/ran\\necho x\\n' > /tmp/prog && chmod +x /tmp/prog && \
               mkdir -p /tmp/bin && cp /tmp/prog /tmp/bin/git-remote-ev";
    let mut missed = Vec::new();
    for attack in [
        "git -c trailer.s.key=Signed-off-by -c trailer.s.cmd=/tmp/prog commit -q --allow-empty --trailer s -m ok",
        "git -c trailer.s.key=Signed-off-by -c trailer.s.command=/tmp/prog commit -q --allow-empty --trailer s -m ok",
        "echo ok | git -c trailer.s.cmd=/tmp/prog interpret-trailers --trailer s",
        "git config trailer.s.cmd /tmp/prog && git commit -q --allow-empty --trailer s -m ok",
        "git -c gpg.format=ssh -c gpg.ssh.defaultKeyCommand=/tmp/prog commit -q -S --allow-empty -m ok",
        "PATH=/tmp/bin:$PATH git -c remote.x.url=x -c remote.x.vcs=ev fetch x",
    ] {
        let o = sb.agent(&format!(
            "{ran} && {{ {attack}; }}; test -e /tmp/ran && echo RAN"
        ));
        if String::from_utf8_lossy(&o.stdout).contains("RAN") {
            missed.push(format!("{attack}\n{}", text(&o)));
        }
        sb.reset();
        sb.agent("git config --unset trailer.s.cmd; true");
    }
    assert!(missed.is_empty(), "ran:\n{}", missed.join("\n"));
    // Control: a trailer given as text still works.
    let o = sb.agent(
        "git commit -q --allow-empty -m ok --trailer 'Signed-off-by: a <a@b>' && git log -1 --format=%B",
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Signed-off-by: a <a@b>"),
        "control: {}",
        text(&o)
    );
}

/// `git x` runs `git-x` from PATH as git's child, with git's group, which
/// the broker trusts as git's own (round six let a remote helper take
/// `push` only from such a process): an agent's `/tmp/bin/git-x` piping
/// `push refs/stash:refs/heads/s` into `git remote-http` pushed a stash
/// (MARKER) to an HTTP remote whose pre-push refuses every push. In a
/// sandbox the guard now runs `git <cmd>` for a program not in git's
/// exec-path only when it and every PATH directory searched up to it are
/// root's alone. Controls: `git push` still runs pre-push, git's own
/// scripts (`git submodule`) still run, an unknown command still fails as
/// git says.
#[test]
fn an_agents_git_program_on_path_does_not_get_gits_group() {
    let Some(sb) = Sandbox::start() else { return };
    let u = "export U=http://127.0.0.1:8765/git/nopush.git";
    let o = sb.agent(&format!(
        "{u}; mkdir -p /tmp/srv && git init -q --bare /tmp/srv/nopush.git && \
         git -C /tmp/srv/nopush.git config http.receivepack true && \
         {{ python3 .srv.py >/tmp/srv.log 2>&1 & }} && \
         for i in $(seq 20); do git ls-remote $U >/dev/null 2>&1 && break; sleep 0.3; done; \
         git push -q $U main"
    ));
    assert!(text(&o).contains("nopush refused"), "control: {}", text(&o));
    let helper = "printf '#!/bin/sh\\nid -g >&2\\nprintf \"push refs/stash:refs/heads/s\\\\n\\\\n\" | git remote-http $U $U\\n'";
    let mut landed = Vec::new();
    for run in [
        "PATH=/tmp/bin:$PATH git x",
        "PATH=$PATH:/tmp/bin git x",
        "cp /tmp/bin/git-x . && PATH=:$PATH git x; rm -f git-x",
        "git config alias.y x && PATH=/tmp/bin:$PATH git y",
        "ln -s /tmp/bin/git-x /tmp/bin/git-z && PATH=/usr/bin/../../tmp/bin:$PATH git z",
    ] {
        let o = sb.agent(&format!(
            "{u}; echo MARKER > a && git stash -q && mkdir -p /tmp/bin && {helper} > /tmp/bin/git-x && \
             chmod +x /tmp/bin/git-x && ( {run} ); git stash drop -q; git config --unset alias.y; rm -rf /tmp/bin; \
             git -C /tmp/srv/nopush.git rev-parse -q --verify s && echo LANDED"
        ));
        if String::from_utf8_lossy(&o.stdout).contains("LANDED") {
            landed.push(format!("{run}: {}", text(&o)));
        }
        sb.agent("git -C /tmp/srv/nopush.git update-ref -d refs/heads/s; true");
    }
    assert!(
        landed.is_empty(),
        "pushed without pre-push:\n{}",
        landed.join("\n")
    );
    let o = sb.agent("git submodule status && echo SUB; git nosuchcmd; echo rc=$?");
    let t = text(&o);
    assert!(t.contains("SUB") && t.contains("rc=1"), "controls: {t}");
    assert!(t.contains("is not a git command"), "controls: {t}");
}

/// `git merge` re-reads `.git/MERGE_MSG` by path after commit-msg (as
/// `git commit` did COMMIT_EDITMSG, closed in round four): a message
/// renamed over it once the hook had read it was committed unseen. `git
/// merge` now runs on a private index too, so its commit-msg runs on a
/// private copy and its prepared step compares the message git committed
/// with the one the hook passed (msg.rs). The racer renames at the first,
/// or the second, close of the file after commit-msg started.
#[test]
fn the_merge_message_swapped_after_commit_msg_is_not_committed() {
    let Some(sb) = Sandbox::start() else { return };
    let side = "git switch -q -c side && echo x > b && git add b && git commit -qm b && \
                git switch -q main && echo y > c && git add c && git commit -qm c && \
                printf 'BADMSG\\n' > .git/M";
    let attacks: Vec<String> = ["0", "1", "0", "1"]
        .iter()
        .map(|skip| {
            format!(
                "{side} && {{ python3 .race.py .git/M .git/MERGE_MSG commit-msg 24 {skip} & }}; sleep 0.5; \
                 git merge -q --no-ff -m ok side; echo rc=$?; wait"
            )
        })
        .collect();
    let attacks: Vec<&str> = attacks.iter().map(String::as_str).collect();
    let landed = sb.run_all(&attacks);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Controls: a merge commits its message; a conflicted one is finished
    // by `git commit`; a pull merges.
    let o = sb.agent(&format!(
        "{side} && git merge -q --no-ff -m 'merged ok' side && git log -1 --format=%s && \
         git switch -q -c s2 HEAD~1 && echo z > b && git add b && git commit -qm z && \
         ! git merge -q -m m2 main && echo z > b && git add b && git commit -qm 'conflict done' && git log -1 --format=%s && \
         git clone -q . /tmp/cl && git -C /tmp/cl commit -q --allow-empty -m up && \
         git pull -q --no-rebase --no-edit /tmp/cl s2 && git log -1 --format=%s"
    ));
    let t = text(&o);
    for want in ["merged ok\n", "conflict done\n", "up\n"] {
        assert!(t.contains(want), "{want}: {t}");
    }
}

/// `git am` re-reads `.git/rebase-apply/final-commit` after its
/// applypatch-msg step (which runs commit-msg) the same way: a message
/// renamed over it was committed unseen. `am` now runs on a private index
/// too (not `--abort`, `--quit`, `--show-current-patch`), so commit-msg
/// runs on a private copy and the prepared step compares.
#[test]
fn the_am_message_swapped_after_commit_msg_is_not_committed() {
    let Some(sb) = Sandbox::start() else { return };
    let patch = "git switch -q -c side && echo x > b && git add b && git commit -qm b && \
                 git format-patch -q -1 -o /tmp/p && git switch -q main && printf 'BADMSG\\n' > .git/M";
    let attacks: Vec<String> = ["0", "1", "0", "1", "1"]
        .iter()
        .map(|skip| {
            format!(
                "{patch} && {{ python3 .race.py .git/M .git/rebase-apply/final-commit commit-msg 24 {skip} late & }}; \
                 sleep 0.5; git am -q /tmp/p/*.patch; echo rc=$?; wait; rm -rf /tmp/p"
            )
        })
        .collect();
    let attacks: Vec<&str> = attacks.iter().map(String::as_str).collect();
    let landed = sb.run_all(&attacks);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Controls: am applies a series; a conflicting patch stops, and
    // `--skip` and `--abort` still work.
    let o = sb.agent(
        "git switch -q -c s3 && echo 1 > d && git add d && git commit -qm d1 && echo 2 > d && \
         git commit -qam d2 && git format-patch -q -2 -o /tmp/q && git switch -q main && \
         git am -q /tmp/q/*.patch && git log -2 --format=%s && git reset -q --hard HEAD~2 && \
         echo 9 > d && git add d && git commit -qm d9 && ! git am -q /tmp/q/*.patch 2>/dev/null && \
         git am --skip 2>/dev/null; git am --abort; git log -1 --format=%s",
    );
    let t = text(&o);
    assert!(
        t.contains("d2\nd1\n") && t.ends_with("d9\n"),
        "controls: {t}"
    );
}

/// A false refusal round seven found: `git worktree add --detach` (or at
/// a commit) runs `git update-ref HEAD <oid>` in the new worktree, whose
/// HEAD git wrote detached, and the plumbing rule refused it, so no
/// detached worktree could be added in a sandbox. A detached HEAD may now
/// move that way (with `--no-deref` pinned); a branch still may not
/// (tools/sbx-git-guard/tests/cli.rs).
#[test]
fn a_detached_worktree_can_be_added() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "git worktree add -q --detach /tmp/w1 && git worktree add -q /tmp/w2 main~0 && \
         git -C /tmp/w1 rev-parse HEAD && git -C /tmp/w2 rev-parse HEAD && git rev-parse main",
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let ids: Vec<&str> = out.lines().filter(|l| l.len() == 40).collect();
    assert!(ids.len() == 3 && ids.iter().all(|i| *i == ids[0]), "{out}");
    let o = sb.agent("git -C /tmp/w1 symbolic-ref -q HEAD; echo detached=$?");
    assert!(text(&o).contains("detached=1"), "{}", text(&o));
}

/// Configuration that changes what the stash checks' own `git log` prints
/// (attack15k): `log.diffMerges=off` left a stash's worktree commit with
/// no diff, so its tree (counted only where it changes something) and its
/// blobs and lines were unknown, and `cherry-pick -m 1 stash@{0}` put
/// MARKER on main past pre-commit; `i18n.logOutputEncoding` re-encoded the
/// ids the checks match. The checks now pin `--diff-merges=first-parent`
/// and `--encoding=UTF-8`.
#[test]
fn the_agents_log_settings_do_not_hide_a_stash() {
    let Some(sb) = Sandbox::start() else { return };
    let landed = sb.run_all(&[
        "echo MARKER > a && git stash -q && git config log.diffMerges off && \
         git cherry-pick -m 1 'stash@{0}'; git push -q origin main",
        "echo MARKER > a && git stash -q && \
         git -c log.diffMerges=none cherry-pick -m 1 'stash@{0}'; git push -q origin main",
        "echo MARKER > a && git stash -q && git config log.diffMerges off && \
         git checkout -q -b side && git cherry-pick -m 1 'stash@{0}'; git push -q origin side:main",
        "echo MARKER > a && git add a && git stash -q && git config i18n.logOutputEncoding UTF-16 && \
         git reset -q --hard 'stash@{0}'; git push -q origin main",
    ]);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
}
