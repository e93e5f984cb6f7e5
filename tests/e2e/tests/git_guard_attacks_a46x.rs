//! A fresh attack on round ten's ledger (issue 46), from inside a real
//! sandbox as the agent, judged by what the agent's branches hold.

use sbx_e2e::{PLUMBED, REFUSE_MARKER, Repo, SUBJECT_OK, attack_repo, started, text};

fn sandbox(name: &str) -> Option<Repo> {
    started(|| {
        let repo = attack_repo(
            name,
            &["-qm", "one OK"],
            &[],
            &[("pre-commit", REFUSE_MARKER), ("commit-msg", SUBJECT_OK)],
        );
        repo.give_to_agent();
        repo
    })
}

fn agent(repo: &Repo, script: &str) -> String {
    text(&repo.agent(script))
}

/// A fetch "from a remote" moved refs with no ledger check at all: the
/// guard judged the source by the command line's first word that does not
/// start with `-`, and then let every ref the call moved, local branches
/// included, through as fetched. But a fetch names any commit it already
/// has by id (`origin C:refs/heads/x` copies nothing and moves the ref),
/// `pull origin C` fast-forwards the branch onto it, and an option's
/// separate value (`--depth 1 .`) hid a local source.
#[test]
fn a_fetch_or_pull_does_not_move_a_branch_onto_a_commit_no_hook_saw() {
    let Some(repo) = sandbox("ga46xfetch") else {
        return;
    };
    // Control: fetching and pulling the remote's own commits still work.
    let o = agent(
        &repo,
        "git fetch -q origin && git pull -q --ff-only origin main && \
         git fetch -q origin main:refs/heads/copy && echo FETCHED",
    );
    assert!(o.contains("FETCHED"), "control: {o}");
    for (how, check) in [
        (
            "git fetch -q origin $C:refs/heads/evil",
            "git grep -q MARKER evil --",
        ),
        (
            "git pull -q --ff-only origin $C",
            "git grep -q MARKER main --",
        ),
        (
            "echo $C:refs/heads/evil | git fetch -q --stdin origin",
            "git grep -q MARKER evil --",
        ),
        (
            "git fetch -q --depth 1 . $C:refs/heads/evil",
            "git grep -q MARKER evil --",
        ),
    ] {
        let o = agent(
            &repo,
            &format!(
                "{PLUMBED} && {how}; {check} 2>/dev/null && echo LANDED; \
                 git reset -q --hard origin/main; git branch -qD evil 2>/dev/null; true"
            ),
        );
        eprintln!("{how}: {o}");
        assert!(!o.contains("LANDED"), "{how}: {o}");
    }
}

/// The same move with the id in a configured refspec: `-c` (and
/// `GIT_CONFIG_PARAMETERS`, `git config`) are read by the guard before
/// git runs, and refused like other keys that change what the hooks'
/// checks rest on.
#[test]
fn an_inline_refspec_by_id_does_not_move_a_branch() {
    let Some(repo) = sandbox("ga46xrefspec") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && git -c remote.origin.fetch=$C:refs/heads/evil fetch -q origin; \
             git grep -q MARKER evil -- 2>/dev/null && echo LANDED; \
             git config --global remote.origin.fetch $C:refs/heads/evil; \
             git grep -q MARKER evil -- 2>/dev/null && echo LANDED"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains("object id"), "one clear line: {o}");
}

/// The refspec written into `~/.gitconfig` by hand: a check the guard
/// made on the file could be raced by git's own read, so a fetch's git
/// reads the per-user configuration from a sealed copy of what the guard
/// checked, and the refspec by id is refused in it.
#[test]
fn a_stored_refspec_by_id_does_not_move_a_branch() {
    let Some(repo) = sandbox("ga46xstored") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && printf '[remote \"origin\"]\\n\\tfetch = %s:refs/heads/evil\\n' $C >> ~/.gitconfig && \
             git fetch -q origin; git grep -q MARKER evil -- 2>/dev/null && echo LANDED"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains(".gitconfig"), "names the file: {o}");
    // Raced: the refspec is written while the fetch runs (after any check
    // of the file), and taken out again.
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && sed -i '/refs\\/heads\\/evil/d' ~/.gitconfig && \
             (for i in $(seq 200); do printf '[remote \"origin\"]\\n\\tfetch = %s:refs/heads/evil\\n' $C >> ~/.gitconfig; \
              sed -i '/refs\\/heads\\/evil/d' ~/.gitconfig; done) & \
             for i in $(seq 20); do git fetch -q origin 2>/dev/null; done; wait; \
             git grep -q MARKER evil -- 2>/dev/null && echo LANDED"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "raced: {o}");
}

/// A clone outside the workspace has no hooks, so no ledger is in force
/// there and its pre-push passes anything; the workspace's receive-pack
/// then took what it pushed as fetched: a commit no hook saw lands on a
/// branch of the workspace.
#[test]
fn a_push_from_a_hookless_clone_lands_no_commit_no_hook_saw() {
    let Some(repo) = sandbox("ga46xpush") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "W=$PWD; rm -rf /tmp/x; git clone -q . /tmp/x && cd /tmp/x && {PLUMBED} && \
             git push -q $W $C:refs/heads/evil; cd $W; git grep -q MARKER evil -- 2>/dev/null && echo LANDED"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// `git receive-pack` in the workspace took what it was sent as fetched
/// (the pushing side's pre-push checked it). Run by the agent with a
/// hand-written request (a command and an empty pack: the commit is
/// already there), no pushing side checked anything. Now a branch moves
/// there only onto a tip a pre-push step let go, or as the repository's
/// own moves may.
#[test]
fn a_hand_written_receive_pack_request_lands_no_commit_no_hook_saw() {
    let Some(repo) = sandbox("ga46xrecv") else {
        return;
    };
    // Control: a clone in the sandbox pushes an honest commit back.
    let o = agent(
        &repo,
        "W=$PWD; rm -rf /tmp/y; git clone -q . /tmp/y && cd /tmp/y && echo 2 > a && \
         git commit -qam 'two OK' && git push -q $W HEAD:refs/heads/side && cd $W && \
         git log -1 --format=%s side",
    );
    assert!(o.contains("two OK"), "control: {o}");
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && python3 -c \"
import hashlib, sys
z = '0' * 40
line = ('%s %s refs/heads/evil' % (z, sys.argv[1])).encode() + b'\\0report-status\\n'
pkt = b'%04x' % (len(line) + 4) + line + b'0000'
pack = b'PACK' + (2).to_bytes(4, 'big') + (0).to_bytes(4, 'big')
sys.stdout.buffer.write(pkt + pack + hashlib.sha1(pack).digest())
\" $C > /tmp/req || exit 1; \
             for rp in 'git receive-pack' git-receive-pack; do $rp . < /tmp/req | tr -d '\\0'; echo; \
             git grep -q MARKER evil -- 2>/dev/null && echo \"$rp LANDED\"; \
             git branch -qD evil 2>/dev/null; done"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// `pull --rebase=interactive` from a remote counted as fetched for the
/// whole call, its rebase included: a sequence editor that writes
/// `pick C` (a commit no hook saw) into the todo had the rebase commit
/// C's change onto main with no step looking.
#[test]
fn pull_rebase_interactive_does_not_pick_a_commit_no_hook_saw() {
    let Some(repo) = sandbox("ga46xpullri") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && echo 2 > a && git commit -qam 'two OK' && \
             GIT_SEQUENCE_EDITOR=\"echo pick $C >\" git pull --rebase=interactive origin main; \
             git log --oneline main; git grep -q MARKER main -- && echo LANDED; git rebase --abort 2>/dev/null; true"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// The verify step runs the hooks on each commit its walk lists, comparing
/// with the commit's parent as written in the object. A `.git/shallow`
/// line (written by the agent's own code) makes the walk stop at C, so
/// C's parent P (MARKER, no hook saw it) is never listed: the hooks saw C
/// change nothing against P, and `git rebase C` fast-forwarded main onto
/// C, whose tree holds MARKER.
#[test]
fn a_shallow_line_does_not_hide_the_parent_the_hooks_compared_with() {
    let Some(repo) = sandbox("ga46xshallow") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && P=$C && \
             C=$(printf 'tree %s\\nparent %s\\nauthor a <a@b> 2 +0000\\ncommitter a <a@b> 2 +0000\\n\\nchild OK\\n' \
                 $(git rev-parse $P^{{tree}}) $P | python3 -c \"
import hashlib, os, sys, zlib
b = sys.stdin.buffer.read(); o = b'commit %d\\0' % len(b) + b; h = hashlib.sha1(o).hexdigest()
os.makedirs('.git/objects/' + h[:2], exist_ok=True)
open('.git/objects/' + h[:2] + '/' + h[2:], 'wb').write(zlib.compress(o)); print(h)\") && \
             echo $C > .git/shallow && git rebase -q --onto $C main; rm -f .git/shallow; \
             git grep -q MARKER main -- && echo LANDED; true"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains("its parent"), "one clear line: {o}");
}

/// A replace ref (`.git/refs/replace/C`, written by the agent's own code)
/// makes git read another commit's object for C: the walk and the verify
/// step saw an approved commit's tree and message, and `rebase --onto C
/// main` moved main onto C, whose real tree holds MARKER.
#[test]
fn a_replace_ref_does_not_dress_a_commit_as_an_approved_one() {
    let Some(repo) = sandbox("ga46xreplace") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "{PLUMBED} && mkdir -p .git/refs/replace && git rev-parse main > .git/refs/replace/$C && \
             git rebase -q --onto $C main; git push -q origin main; rm -rf .git/refs/replace; \
             GIT_NO_REPLACE_OBJECTS=1 git grep -q MARKER main -- && echo LANDED; \
             git -C remote.git grep -q MARKER main -- && echo PUSHED; true"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(!o.contains("PUSHED"), "{o}");
}
