//! A fresh attack on the git guard's approval path after h46v (the pin
//! asked while pre-commit's view is made) and h46t (the broker's
//! directories on a tmpfs), issue 46, a46: from inside a real sandbox as
//! the agent, judged by what main holds afterwards.

use sbx_e2e::{PLUMBED, Repo, attack_repo, started, text};

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

/// pre-commit that looks late (a slow hook): the window a HEAD flip needs.
const SLOW_REFUSE_MARKER: &str = "#!/bin/sh\nsleep 2\n\
    if git diff --cached | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\nsleep 2\n";

/// `SBX_GUARD_VIEW_MADE` is the guard's own word to the broker that a
/// pre-commit request's private view is made already; it was not among
/// the names the guard strips from the agent's environment. Set by the
/// agent for `git commit`, it reached git, git's pre-commit step and the
/// broker, which then ran the hook on the real `.git` with no view and
/// kept no pin, so the commit's step had no parent to check: round ten's
/// route 2 (HEAD flipped while pre-commit runs) landed MARKER on main.
#[test]
fn the_agent_cannot_say_pre_commits_view_is_made() {
    let Some(repo) = sandbox_with("ga46view", &[("pre-commit", SLOW_REFUSE_MARKER)]) else {
        return;
    };
    let attack = format!(
        "{PLUMBED} && echo MARKER > a && git add a || exit 1; \
         (sleep 1; echo $C > .git/HEAD.new && mv .git/HEAD.new .git/HEAD; sleep 2; \
          echo 'ref: refs/heads/main' > .git/HEAD.new && mv .git/HEAD.new .git/HEAD) & \
         SBX_GUARD_VIEW_MADE=1 git commit -qm x; wait; \
         git grep -q MARKER main -- && echo LANDED; git reset -q --hard main"
    );
    let o = agent(&repo, &attack);
    eprintln!("{o}");
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
    assert!(o.contains("MARKER refused"), "the hook saw the change: {o}");
    // Control: an honest commit with the variable set still passes.
    let o = agent(
        &repo,
        "echo 2 > a && SBX_GUARD_VIEW_MADE=1 git commit -qam two && git log -1 --format=%s main",
    );
    assert!(o.contains("two"), "control: {o}");
}

/// The attack rounds' commit-msg: the subject must say OK.
const SUBJECT_OK: &str = sbx_e2e::SUBJECT_OK;

/// h46t put `/run/sbx-git/approved` on a 16 MiB tmpfs, but what the root
/// process keeps there for a call stays when the call ends without its
/// step taking it back: every hooked commit's pin, and the message
/// commit-msg passed for a commit that then failed (here: its branch
/// locked). A score of 1 MB messages the hook passes filled it, and from
/// then on every commit failed ("the broker did not keep what commit-msg
/// passed") until the sandbox restarted; about 4000 honest commits, one
/// pin page each, would do the same. A keep that finds the tmpfs full now
/// removes what belongs to no live call and tries again.
#[test]
fn a_full_approvals_tmpfs_does_not_stop_commits() {
    let Some(repo) = sandbox_with(
        "ga46full",
        &[
            ("pre-commit", sbx_e2e::REFUSE_MARKER),
            ("commit-msg", SUBJECT_OK),
        ],
    ) else {
        return;
    };
    let o = agent(
        &repo,
        "python3 -c \"print('fill OK'); print('x' * 1000000)\" > /tmp/m && \
         touch .git/refs/heads/main.lock && for i in $(seq 20); do \
           echo $i > b && git add b && git commit -qF /tmp/m >/dev/null 2>&1; done; \
         rm .git/refs/heads/main.lock; df -k /run/sbx-git/approved | tail -1; \
         echo 2 > b && git add b && git commit -qm 'two OK'; git log -1 --format=%s main; \
         echo MARKER > a && git add a && git commit -qm 'three OK'; git log -1 --format=%s main",
    );
    eprintln!("{o}");
    assert!(o.contains("two OK"), "an honest commit after the fill: {o}");
    assert!(o.contains("MARKER refused"), "pre-commit still runs: {o}");
    assert!(!o.contains("three OK"), "MARKER committed: {o}");
}

/// In the sandbox every repository runs the workspace's hooks, on a view
/// of the repository the agent cannot change; but the view took the
/// repository's configuration as it was, and a scratch repository's
/// `.git/config` is the agent's. A `diff.hide.textconv` there, with `*
/// diff=hide` in its attributes, made the workspace's pre-commit (`git
/// diff --cached | grep MARKER`) see nothing: a commit of MARKER was
/// approved, and `git rebase` onto a plumbed commit of MARKER was
/// verified and admitted the same way, ready to push from there. The
/// views now take the configuration without the keys the agent may not
/// set inline (keys.rs `view_config`).
#[test]
fn a_scratch_repositorys_textconv_does_not_hide_a_change_from_the_hooks() {
    let Some(repo) = sandbox_with("ga46conv", &[("pre-commit", sbx_e2e::REFUSE_MARKER)]) else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cd /tmp && rm -rf r && git init -q -b main r && cd r && \
             printf '[diff \"hide\"]\\n\\ttextconv = sh -c true\\n' >> .git/config && \
             echo '* diff=hide' > .gitattributes && git add .gitattributes && \
             git commit -qm 'attributes OK' || exit 1; \
             echo MARKER > a && git add a && git commit -qm 'x OK'; \
             git grep -q MARKER main -- && echo LANDED; git reset -q --hard main; \
             {PLUMBED} && git rebase -q $C; git grep -q MARKER main -- && echo REBASED; true"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "committed past pre-commit: {o}");
    assert!(!o.contains("REBASED"), "admitted past pre-commit: {o}");
    assert!(o.contains("MARKER refused"), "the hook saw MARKER: {o}");
}
