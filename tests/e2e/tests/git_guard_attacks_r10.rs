//! Round ten on the git guard (issue 46): the ledger of approved commits.
//! A branch moves, and a push sends, only commits whose pre-commit and
//! commit-msg passed on their own tree and message (or that were there
//! already, or fetched). From inside a real sandbox as the agent, judged
//! by their effect: what main and the remote hold afterwards.

use sbx_e2e::{PLUMBED, REFUSE_MARKER, Repo, SUBJECT_OK, attack_repo, started, text};

fn sandbox() -> Option<Repo> {
    sandbox_with(
        "gattack10",
        &[("pre-commit", REFUSE_MARKER), ("commit-msg", SUBJECT_OK)],
    )
}

/// The attack repository `name` with `hooks`, the agent's, started.
fn sandbox_with(name: &str, hooks: &[(&str, &str)]) -> Option<Repo> {
    started(|| {
        let repo = attack_repo(name, &["-qm", "one OK"], &[], hooks);
        repo.give_to_agent();
        repo
    })
}

fn agent(repo: &Repo, script: &str) -> String {
    text(&repo.agent(script))
}

/// The documented gap: a commit written by other means, then moved onto
/// a branch with `merge --ff-only` (or `update-ref`, `reset`, `branch`),
/// or pushed by its id. The ledger refuses each: the commit is in no
/// ledger, on no branch, and was not fetched.
#[test]
fn a_commit_no_hook_saw_reaches_no_branch_and_no_remote() {
    let Some(repo) = sandbox() else {
        return;
    };
    // Control: commits the hooks passed move and push as ever, a detached
    // one included (the ledger has it).
    let o = agent(
        &repo,
        "git checkout -qb side && echo 2 > a && git commit -qam 'two OK' && \
         git checkout -q --detach && echo 3 > a && git commit -qam 'three OK' && D=$(git rev-parse HEAD) && \
         git checkout -q main && git merge -q --ff-only side && git merge -q --ff-only $D && \
         git push -q origin main && echo MOVED",
    );
    assert!(o.contains("MOVED"), "control: {o}");
    for (how, check) in [
        ("git merge --ff-only $C", "git grep -q MARKER main --"),
        ("git reset -q --hard $C", "git grep -q MARKER main --"),
        ("git branch evil $C", "git rev-parse -q --verify evil"),
        (
            "git push -q origin $C:refs/heads/evil",
            "git -C remote.git rev-parse -q --verify evil",
        ),
        (
            "git tag t $C && git push -q origin t",
            "git -C remote.git rev-parse -q --verify t",
        ),
        (
            "git update-ref refs/remotes/origin/main $C && git merge --ff-only origin/main",
            "git grep -q MARKER main --",
        ),
        (
            "git fetch -q . $C:refs/heads/evil",
            "git rev-parse -q --verify evil",
        ),
    ] {
        let o = agent(
            &repo,
            &format!(
                "{PLUMBED} && {how}; {check} >/dev/null && echo LANDED; git reset -q --hard main"
            ),
        );
        eprintln!("{how}: {o}");
        assert!(!o.contains("LANDED"), "{how}: {o}");
        assert!(
            o.contains("no pre-commit and commit-msg passed") || o.contains("blocked ("),
            "{how}: one clear line: {o}"
        );
    }
}

/// Route 6: `git am` stops on a patch that does not apply; the agent
/// rewrites `.git/rebase-apply/final-commit` and `--continue` commits it
/// without commit-msg. The step now runs commit-msg (and pre-commit) on
/// the commit itself before main may move onto it.
#[test]
fn am_continue_does_not_commit_a_message_commit_msg_refuses() {
    let Some(repo) = sandbox() else {
        return;
    };
    let set_up = "git checkout -qb p && echo patched > a && git commit -qam 'patch OK' && \
        git format-patch -q -1 -o /tmp/p && git checkout -q main && echo other > a && \
        git commit -qam 'other OK' && git am -q /tmp/p/*.patch; echo resolved > a && git add a";
    // Control: the same with the message as it was.
    let o = agent(
        &repo,
        &format!(
            "{set_up} && git am -q --continue; git log -1 --format=%s main; git am --abort 2>/dev/null; \
             git reset -q --hard main~2; git branch -qD p; rm -rf /tmp/p"
        ),
    );
    assert!(o.contains("patch OK"), "control: {o}");
    let o = agent(
        &repo,
        &format!(
            "{set_up} && printf 'no ticket\\n' > .git/rebase-apply/final-commit && git am -q --continue; \
             git log --format=%s main | grep -q '^no ticket' && echo LANDED; git am --abort 2>/dev/null"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "committed past commit-msg: {o}");
    assert!(o.contains("commit-msg"), "says which hook: {o}");
}

/// Route 7: `git commit -m 'amend! A OK' -m 'no ticket'` passes
/// commit-msg on its subject; `rebase -i --autosquash` then gives A the
/// body alone as its message, with no commit-msg. The step runs
/// commit-msg on the rebased commits before the branch moves.
#[test]
fn autosquash_does_not_commit_a_message_commit_msg_refuses() {
    let Some(repo) = sandbox() else {
        return;
    };
    // Control: a fixup! keeps A's message, and the rebase moves main.
    let o = agent(
        &repo,
        "echo 2 > a && git commit -qam 'A OK' && echo 3 > a && git commit -qam 'fixup! A OK' && \
         GIT_SEQUENCE_EDITOR=: git rebase -qi --autosquash HEAD~2 && git log -1 --format=%s main",
    );
    assert!(o.contains("A OK"), "control: {o}");
    let o = agent(
        &repo,
        "echo 4 > a && git commit -qam 'B OK' && echo 5 > a && git commit -qam 'amend! B OK' -m 'no ticket' && \
         GIT_SEQUENCE_EDITOR=: git rebase -qi --autosquash HEAD~2; \
         git log --format=%s main | grep -q '^no ticket' && echo LANDED; git rebase --abort 2>/dev/null",
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "committed past commit-msg: {o}");
    assert!(o.contains("commit-msg"), "says which hook: {o}");
}

/// pre-commit that looks late (a slow hook): the window route 2 needs.
const SLOW_REFUSE_MARKER: &str = "#!/bin/sh\nsleep 2\n\
    if git diff --cached | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\nsleep 2\n";

/// Route 2: git reads HEAD once, before pre-commit; the hook read
/// `.git/HEAD` again, so HEAD pointed for a while at a commit whose tree
/// already holds the staged MARKER made the hook see no change, and git
/// committed MARKER onto main. The hook now runs on a private git
/// directory whose HEAD is detached at the commit HEAD named when the
/// step started it.
#[test]
fn head_flipped_while_pre_commit_runs_does_not_hide_the_change() {
    let Some(repo) = sandbox_with("gattack10h", &[("pre-commit", SLOW_REFUSE_MARKER)]) else {
        return;
    };
    // The flip: HEAD detached at a commit holding MARKER from 1 s to 3 s
    // into the commit (the hook looks at 2 s), then back on main before
    // git moves it.
    let attack = format!(
        "{PLUMBED} && echo MARKER > a && git add a || exit 1; \
         (sleep 1; echo $C > .git/HEAD.new && mv .git/HEAD.new .git/HEAD; sleep 2; \
          echo 'ref: refs/heads/main' > .git/HEAD.new && mv .git/HEAD.new .git/HEAD) & \
         git commit -qm x; wait; git grep -q MARKER main -- && echo LANDED; git reset -q --hard main"
    );
    let o = agent(&repo, &attack);
    eprintln!("{o}");
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
    assert!(o.contains("MARKER refused"), "the hook saw the change: {o}");
    // Control: an honest commit still passes the hook on its view.
    let o = agent(
        &repo,
        "echo 2 > a && git commit -qam two && git log -1 --format=%s main",
    );
    assert!(o.contains("two"), "control: {o}");
}

/// pre-commit that sources husky's per-user `init.sh` first, as husky 9's
/// `.husky/_/h` does, then refuses MARKER.
const SOURCES_INIT_SH: &str = "#!/bin/sh\nsleep 2\n\
    i=\"${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh\"\n\
    [ -f \"$i\" ] && . \"$i\"\n\
    if git diff --cached | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\n";

/// Route 4: with `XDG_CONFIG_HOME` set by the agent, husky's `init.sh` was
/// empty when the guard checked it and `exit 0` when husky's runner read
/// it. Round nine's hook home closes it: the hook reads `init.sh` under
/// an environment the agent does not choose (no `XDG_CONFIG_HOME` of the
/// agent's, a root-owned `HOME`), so an `exit 0` there, raced or not, is
/// never sourced. The race made certain: the hook (a slow one) sources
/// `init.sh` a second after the agent filled it, two after the guard
/// found it empty.
#[test]
fn husky_init_sh_of_the_agents_choosing_is_not_sourced() {
    let Some(repo) = sandbox_with("gattack10i", &[("pre-commit", SOURCES_INIT_SH)]) else {
        return;
    };
    let o = agent(
        &repo,
        "mkdir -p ~/x/husky && : > ~/x/husky/init.sh && export XDG_CONFIG_HOME=~/x && \
         echo MARKER > a && git add a || exit 1; \
         (sleep 1; echo 'exit 0' > ~/x/husky/init.sh) & git commit -qm x; wait; \
         git grep -q MARKER main -- && echo LANDED; git reset -q --hard main",
    );
    eprintln!("{o}");
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
    assert!(o.contains("MARKER refused"), "the hook ran whole: {o}");
}

/// Route 3's verify-then-admit, raced: while the step runs pre-commit on
/// a cherry-picked commit of MARKER (a slow hook), a second call of the
/// agent's rewrites the index the hook reads with a clean one, wherever
/// it can find a view (`*.view` under the temporary directory, and the
/// broker's private directory), so the hook would see no change and the
/// commit be admitted. The view lives in the broker's private-index
/// directory, which the agent's processes cannot list or enter.
#[test]
fn a_view_rewritten_while_its_hook_runs_admits_nothing() {
    let Some(repo) = sandbox_with(
        "gattack10v",
        &[
            ("pre-commit", SLOW_REFUSE_MARKER),
            ("commit-msg", SUBJECT_OK),
        ],
    ) else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && cp .git/index /tmp/clean-index || exit 1; \
             (end=$(($(date +%s) + 8)); while [ $(date +%s) -lt $end ]; do \
                for d in /tmp/*.view /run/sbx-git/*/*.view; do \
                  [ -d \"$d/g\" ] && cp /tmp/clean-index \"$d/g/index.new\" 2>/dev/null && \
                    mv -f \"$d/g/index.new\" \"$d/g/index\" 2>/dev/null && echo REWROTE; \
                done; done) > /tmp/racer.out & \
             git cherry-pick $C; wait; sort -u /tmp/racer.out; \
             git grep -q MARKER main -- && echo LANDED; \
             git cherry-pick --abort 2>/dev/null; git reset -q --hard main"
        ),
    );
    eprintln!("{o}");
    assert!(
        !o.contains("LANDED"),
        "MARKER admitted past pre-commit: {o}"
    );
    assert!(!o.contains("REWROTE"), "the agent reached the view: {o}");
    assert!(
        o.contains("MARKER refused"),
        "the hook ran on the commit: {o}"
    );
}
