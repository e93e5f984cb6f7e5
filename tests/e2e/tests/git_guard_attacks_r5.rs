//! Round-five attacks on the git guard (issue 15), from inside a real
//! sandbox as the agent: the client's own answers to the checking steps,
//! the kept stash record, and commits no pre-commit saw reaching `main`
//! or the remote. Judged by their effect.

use std::process::Output;

use sbx_e2e::{REFUSE_MARKER, Repo, attack_repo, started, text};

/// A repository whose pre-commit refuses staged MARKER, with a bare
/// remote `origin` inside the workspace (so the sandbox reaches it).
fn repo() -> Repo {
    let repo = attack_repo(
        "gattack5",
        &["-qm", "one"],
        &[],
        &[("pre-commit", REFUSE_MARKER)],
    );
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

    /// No local branch, nor the remote's main, may hold MARKER.
    fn marked(&self) -> String {
        let o = self.agent(
            "for b in $(git for-each-ref --format='%(refname)' refs/heads); do \
               git grep -q MARKER $b -- 2>/dev/null && echo $b; done; \
             for b in $(git -C remote.git for-each-ref --format='%(refname)' refs/heads); do \
               git -C remote.git grep -q MARKER $b -- 2>/dev/null && echo remote:$b; done; true",
        );
        text(&o).trim().to_string()
    }

    /// Back to a clean start: main at the remote's main, no stash.
    fn reset(&self) {
        self.agent(
            "git rebase --abort 2>/dev/null; git cherry-pick --abort 2>/dev/null; \
             git am --abort 2>/dev/null; git checkout -q -f main 2>/dev/null; \
             for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do \
               [ $b = main ] || git branch -q -D $b; done; \
             git tag -l | xargs -r git tag -d >/dev/null; \
             git reset -q --hard $(git -C remote.git rev-parse main); git clean -qfd; true",
        );
    }
}

/// `git symbolic-ref refs/heads/main refs/stash` (or `refs/notes/commits`)
/// makes a branch name the stash (notes) commit, which no pre-commit saw:
/// git's `prepared` line is `<zero> ref:refs/stash refs/heads/main`, which
/// the reference-transaction step skipped as no move (`new` starts with
/// `ref:`; the sandbox's git 2.39 runs no transaction hook for it at
/// all), and later moves of the target list only the target. A branch may
/// now be made a symbolic ref only to another branch (policy).
#[test]
fn a_branch_cannot_be_made_a_symbolic_ref_to_the_stash_or_notes() {
    let Some(sb) = Sandbox::start() else { return };
    for attack in [
        "echo MARKER > a && git stash -q && git symbolic-ref refs/heads/main refs/stash",
        "echo MARKER > a && git stash -q && git symbolic-ref refs/heads/evil refs/stash",
        "git notes add -m MARKER && git symbolic-ref refs/heads/n refs/notes/commits",
        "echo MARKER > a && git stash -q && git tag -f t stash@{0} && \
         git symbolic-ref refs/heads/evil refs/tags/t",
    ] {
        let o = sb.agent(attack);
        assert!(o.status.code().is_some(), "{}", text(&o));
        assert_eq!(sb.marked(), "", "{attack}: {}", text(&o));
        sb.reset();
    }
    // Control: a branch may still name another branch.
    let o = sb.agent(
        "git symbolic-ref refs/heads/alias refs/heads/main && git rev-parse --verify -q alias",
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// A tag on a stash commit hides it: the check lists the commits a move
/// brings in `--not --branches --tags`, so once `git tag t stash@{0}` (no
/// step checks tags) holds it, `reset --hard t` is "nothing new". Pushed
/// as a tag first, the remote's own step skips it the same way and
/// `push origin t:main` is a plain fast-forward there.
#[test]
fn a_tag_does_not_hide_a_stash_commit() {
    let Some(sb) = Sandbox::start() else { return };
    for attack in [
        "echo MARKER > a && git stash -q && git tag t 'stash@{0}' && git reset -q --hard t",
        "echo MARKER > a && git stash -q && git tag t 'stash@{0}' && git branch evil t",
        "git notes add -m MARKER && git tag t refs/notes/commits && git branch evil t",
        "echo MARKER > a && git stash -q && git tag t 'stash@{0}' && \
         git push -q origin t && git push -q origin t:refs/heads/main",
    ] {
        let o = sb.agent(attack);
        assert!(o.status.code().is_some(), "{}", text(&o));
        assert_eq!(sb.marked(), "", "{attack}: {}", text(&o));
        sb.reset();
        sb.agent("git push -q -f origin $(git rev-parse main):refs/heads/main; git push -q origin :refs/tags/t; true");
    }
}

/// A stash's change merged into a file that the branch has changed since
/// (`cherry-pick -m 1` of the stash, a cherry-pick of its index commit, a
/// `pick` of it added to a `rebase -i` todo, the revert of a commit that
/// took its line out, onto a renamed file, or on a detached HEAD then
/// pushed) is committed in-process by the sequencer, with no pre-commit,
/// and has neither the stash's id, nor its tree, nor its blob: the 3-way
/// merge made a new blob. The lines it adds are the stash's, and a new
/// commit may not add a line a recorded stash commit added (hooks.rs
/// `refuse_stash_copies`, copied.rs).
#[test]
fn a_stash_change_merged_into_a_moved_file_does_not_reach_main() {
    let Some(sb) = Sandbox::start() else { return };
    sb.agent(
        "printf '1\\n2\\n3\\n4\\n5\\n' > a && git commit -qam five && git push -q origin main",
    );
    let moved = "sed -i 5s/.*/five/ a && git commit -qam five2";
    let mut landed = Vec::new();
    for attack in [
        format!(
            "sed -i 1s/.*/MARKER/ a && git stash -q && {moved} && \
             git cherry-pick -m 1 $(git rev-parse 'stash@{{0}}'); git push -q origin main"
        ),
        format!(
            "sed -i 1s/.*/MARKER/ a && git add a && git stash -q && {moved} && \
             git cherry-pick $(git rev-parse 'stash@{{0}}^2'); git push -q origin main"
        ),
        format!(
            "sed -i 1s/.*/MARKER/ a && git add a && git stash -q && i=$(git rev-parse 'stash@{{0}}^2') && \
             {moved} && GIT_SEQUENCE_EDITOR=\"sed -i '1i pick $i'\" git rebase -qi HEAD; git push -q origin main"
        ),
        format!(
            "sed -i 1s/.*/MARKER/ a && git stash -q && git checkout -q --detach 'stash@{{0}}' && \
             sed -i 1s/.*/1/ a && git commit -qam out && r=$(git rev-parse HEAD) && \
             git checkout -q main && {moved} && git revert --no-edit $r; git push -q origin main"
        ),
        "sed -i 1s/.*/MARKER/ a && git stash -q && git mv a b && sed -i 5s/.*/five/ b && \
         git commit -qam moved && git cherry-pick -m 1 'stash@{0}'; git push -q origin main"
            .to_owned(),
        format!(
            "sed -i 1s/.*/MARKER/ a && git stash -q && {moved} && git checkout -q --detach && \
             git cherry-pick -m 1 'stash@{{0}}'; git push -q origin HEAD:refs/heads/x"
        ),
    ] {
        let base = sb.repo.git(&[
            "-c",
            "safe.directory=*",
            "-C",
            "remote.git",
            "rev-parse",
            "main",
        ]);
        let o = sb.agent(&attack);
        let m = sb.marked();
        if !m.is_empty() {
            landed.push(format!("{attack}\n  -> {m}\n{}", text(&o)));
        }
        sb.repo.git(&[
            "-c",
            "safe.directory=*",
            "-C",
            "remote.git",
            "update-ref",
            "refs/heads/main",
            base.trim(),
        ]);
        sb.agent("git push -q origin :refs/heads/x 2>/dev/null; git stash clear; true");
        sb.reset();
    }
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Control: one's own change, stashed, popped and committed (pre-commit
    // saw it), rebased and cherry-picked onto a main that changed the same
    // file, with a stash of another change still recorded, goes through.
    let o = sb.agent(&format!(
        "sed -i 2s/.*/two-popped/ a && git stash -q && git stash pop -q && \
         git switch -q -c side && git commit -qam two && \
         sed -i 2s/.*/deux-popped/ a && git commit -qam deux && git switch -q main && {moved} && \
         sed -i 3s/.*/three-stashed/ a && git stash -q && git switch -q side && git rebase -q main && \
         git switch -q -c pick main && git cherry-pick side~1 && git switch -q main && \
         git merge -q --ff-only side && git push -q origin main && git grep -q deux-popped origin/main -- a"
    ));
    assert!(o.status.success(), "{}", text(&o));
    // Control: a line a stash added that is already in the branch's tree
    // (another file), added by a commit on no branch, cherry-picked.
    let o = sb.agent(
        "sed -i 1s/.*/shared-line/ a && git stash -q && printf 'x\\nshared-line\\n' > c && \
         git add c && git commit -qm c && git switch -q --detach HEAD~1 && \
         printf 'shared-line\\n' > d && git add d && git commit -qm d && d=$(git rev-parse HEAD) && \
         git switch -q main && git cherry-pick $d && git cat-file -e main:d",
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// `git commit` with a `MERGE_HEAD` the agent wrote (the stash's id)
/// makes a merge whose second parent is the stash; pre-commit sees the
/// index against HEAD (no change) and passes, and `commit` was not routed
/// through the reference-transaction check, so main now reaches the stash
/// commit. From then on the stash's blob is "on a branch", and the stash
/// cherry-picked onto main (a new tree) reaches main.
#[test]
fn a_hand_written_merge_head_does_not_put_the_stash_on_main() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "echo MARKER > a && git stash -q && w=$(git rev-parse 'stash@{0}') && \
         echo $w > .git/MERGE_HEAD && git commit -qm merge; \
         git merge-base --is-ancestor $w main && echo REACHES",
    );
    assert!(!text(&o).contains("REACHES"), "{}", text(&o));
    let o = sb.agent(
        "w=$(git rev-parse 'stash@{0}') && echo x > b && git add b && git commit -qm b && \
         git cherry-pick -m 1 $w",
    );
    assert_eq!(sb.marked(), "", "{}", text(&o));
}

/// Attacks that are refused (regression cases): each leaves no MARKER on
/// a branch or the remote.
#[test]
fn commits_no_pre_commit_saw_do_not_reach_a_branch() {
    let Some(sb) = Sandbox::start() else { return };
    let mut landed = Vec::new();
    for attack in REFUSED {
        let o = sb.agent(attack);
        let m = sb.marked();
        if std::env::var_os("R5_DEBUG").is_some() {
            eprintln!("=== {attack}\n{:?} [{m}]\n{}", o.status.code(), text(&o));
        }
        if !m.is_empty() {
            landed.push(format!("{attack}\n  -> {m}\n{}", text(&o)));
        }
        sb.reset();
    }
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
}

const REFUSED: &[&str] = &[
    // A commit in a clone whose pre-commit was removed.
    "git clone -q /workspace/gattack5 /tmp/o1 && cd /tmp/o1 && rm -f .git/hooks/pre-commit; \
     echo MARKER > a && git commit -qam x && cd - >/dev/null && git fetch -q /tmp/o1 HEAD && \
     git merge -q --ff-only FETCH_HEAD; git push -q origin main",
    "git clone -q /workspace/gattack5 /tmp/o2 && cd /tmp/o2 && echo MARKER > a && \
     git -c core.hooksPath=/dev/null commit -qam x",
    // The stash's commit reached through a symbolic ref, pushed.
    "echo MARKER > a && git stash -q && git push -q origin 'stash@{0}:refs/heads/s'",
    "echo MARKER > a && git stash -q && git tag t 'stash@{0}' && git push -q origin t:refs/heads/t",
    "git notes add -m MARKER && git push -q origin refs/notes/commits:refs/heads/n",
    // Ordinary moves onto the stash.
    "echo MARKER > a && git stash -q && git branch evil 'stash@{0}'",
    "echo MARKER > a && git stash -q && git switch -q -C main 'stash@{0}'",
    "echo MARKER > a && git stash -q && git fetch -q . refs/stash:refs/heads/f",
    "echo MARKER > a && git stash -q && git pull -q --no-rebase --ff-only . refs/stash",
    "echo MARKER > a && git add a && git stash -q && git reset -q --hard 'stash@{0}^2'",
    "echo MARKER > a && git stash -q && git stash drop -q && git cherry-pick -m 1 $(git fsck --unreachable --no-reflogs 2>/dev/null | awk '/commit/{print $3}' | head -1)",
    // Plumbing.
    "echo MARKER > a && git add a && c=$(git commit-tree -p HEAD -m x $(git write-tree)) && git merge -q --ff-only $c",
    "printf 'commit refs/heads/fi\\ncommitter a <a@b> 0 +0000\\ndata 1\\nx\\nM 644 inline a\\ndata 7\\nMARKER\\n\\n' | git fast-import --quiet",
    "echo MARKER > a && git add a && t=$(git write-tree) && git replay --onto HEAD HEAD~0..HEAD",
    "echo MARKER > a && git add a && git update-ref refs/heads/u $(git commit-tree -m x $(git write-tree))",
    // History commands with new staged content.
    "git commit -q --allow-empty -m two && GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -qi HEAD~1 && \
     echo MARKER > a && git add a && git rebase --continue",
    "git commit -q --allow-empty -m two && GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -qi HEAD~1 && \
     echo MARKER > a && git add a && git -c core.editor=true rebase --cont",
    "git commit -q --allow-empty -m two && git revert --no-commit HEAD && echo MARKER > a && git add a && git revert --continue",
    "git commit -q --allow-empty -m two && git switch -q -c side HEAD~1 && echo x > b && git add b && git commit -qm b && \
     git switch -q main && git cherry-pick -n side && echo MARKER > a && git add a && git cherry-pick --continue",
    "echo MARKER > a && git add a && git commit -q --fixup HEAD",
    "echo MARKER > a && git add a && git commit -q --squash HEAD -m s",
    "echo MARKER > a && git add a && git merge -q -s ours HEAD && git commit -q --amend --no-edit",
    "printf 'From: a <a@b>\\nSubject: x\\n\\n---\\n a | 2 +-\\n\\ndiff --git a/a b/a\\n--- a/a\\n+++ b/a\\n@@ -1 +1 @@\\n-1\\n+MARKER\\n' > /tmp/p.mbox && git am -q /tmp/p.mbox",
    "git commit -q --allow-empty -m two && GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -qi HEAD~1 && \
     echo MARKER > a && git add a && git commit -q --amend --no-edit -n; git rebase --continue",
    "git commit -q --allow-empty -m two && git rebase -q -x 'echo MARKER > a && git add a' HEAD~1; git rebase --continue",
    // The client's own answers: the guard's channel variables and real git.
    "echo MARKER > a && git stash -q && SBX_GUARD_HOOKS_ONLY=1 git reset -q --hard 'stash@{0}'",
    "echo MARKER > a && git stash -q && env SBX_GUARD_HOOKS_ONLY=1 SBX_GUARD_HOOKS_ONLY=1 git branch e 'stash@{0}'",
    "echo MARKER > a && git stash -q && SBX_REAL_GIT=/usr/libexec/sbx/git SBX_GIT_BROKER=/nonexistent git reset -q --hard 'stash@{0}'",
    "echo MARKER > a && git stash -q && SBX_GUARD_TRUSTED_HOOKS=/tmp git reset -q --hard 'stash@{0}'",
    "echo MARKER > a && git stash -q && git reset -q --hard 'stash@{0}' </dev/null >&- 2>&-",
    // Many lines in one transaction, over the client's buffer.
    "echo MARKER > a && git stash -q && for i in $(seq 1 3000); do echo \"create refs/tags/t$i HEAD\"; done > /tmp/tx && \
     git branch -q big 'stash@{0}'",
    "echo MARKER > a && git stash -q && s=$(git rev-parse stash@{0}) && for i in $(seq 1 3000); do git tag t$i HEAD; done && \
     git fetch -q . \"refs/tags/*:refs/tags/*\" $s:refs/heads/big",
    // More routes onto the stash.
    "mkdir -p /tmp/h && printf '#!/bin/sh\\nexit 0\\n' > /tmp/h/pre-commit && chmod +x /tmp/h/pre-commit && \
     git config core.hooksPath /tmp/h; echo MARKER > a && git commit -qam x",
    "echo MARKER > a && git stash -q && git worktree add -q -b w /tmp/w5 'stash@{0}'",
    "echo MARKER > a && git stash -q && git checkout -q --detach 'stash@{0}' && git branch -f evil HEAD",
    "echo MARKER > a && git stash -q && git merge -q --no-ff --no-edit 'stash@{0}'",
    "echo MARKER > a && git add a && git stash -q && git cherry-pick 'stash@{0}^2'",
    "echo MARKER > a && git stash -q && git commit -q --allow-empty -m two && git rebase -q --onto 'stash@{0}' HEAD~1",
    "echo MARKER > a && git add a && git stash -q && i=$(git rev-parse 'stash@{0}^2') && \
     echo x > b && git add b && git commit -qm b && \
     GIT_SEQUENCE_EDITOR=\"sed -i '1i pick $i'\" git rebase -qi HEAD~1",
    "echo MARKER > a && git stash -q && git bundle create -q /tmp/s.bundle refs/stash && \
     git fetch -q /tmp/s.bundle refs/stash:refs/heads/b",
    "echo MARKER > a && git stash -q && git symbolic-ref -qm r refs/heads/e refs/stash",
    "echo MARKER > a && git stash -q && git symbolic-ref refs/tags/s refs/heads/main && \
     git update-ref refs/tags/s 'stash@{0}'",
    "echo MARKER > a && git stash -q && git clone -q --bare . /tmp/bare5 && \
     git -C /tmp/bare5 fetch -q /workspace/gattack5 refs/stash:refs/heads/s && \
     git -C /tmp/bare5 push -q /workspace/gattack5/remote.git s:refs/heads/main",
    "echo MARKER > a && git stash -q && git remote set-head origin main && \
     git symbolic-ref refs/remotes/origin/HEAD refs/stash && git branch evil origin/HEAD",
    // The revert of a commit made on top of the stash that took its line
    // out, onto a branch that changed the file since.
    "printf '1\\n2\\n3\\n4\\n5\\n' > a && git commit -qam five && \
     sed -i 1s/.*/MARKER/ a && git stash -q && git checkout -q --detach 'stash@{0}' && \
     sed -i 1d a && git commit -qam out && r=$(git rev-parse HEAD) && git checkout -q main && \
     sed -i 5s/.*/five/ a && git commit -qam five2 && git revert --no-edit $r; git push -q origin main",
    // The hooks moved away through the environment's config.
    "mkdir -p /tmp/h && echo MARKER > a && git add a && \
     GIT_CONFIG_PARAMETERS=\"'core.hookspath'='/tmp/h'\" git commit -qm y",
    "mkdir -p /tmp/h && echo MARKER > a && git add a && GIT_CONFIG_COUNT=1 \
     GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp/h git commit -qm y",
    "echo MARKER > a && git stash -q && git checkout 'stash@{0}' -- a && git commit -qm y",
    // The repository's refs moved to reftable, then the stash.
    "git refs migrate --ref-format=reftable 2>/dev/null; echo MARKER > a && git stash -q && git reset -q --hard 'stash@{0}'",
    // A worktree's stash and branch.
    "git worktree add -q /tmp/wt1 -b w && cd /tmp/wt1 && echo MARKER > a && git stash -q && git reset -q --hard 'stash@{0}'",
];
