//! Round-nine attacks on the git guard (issue 46): the hooks' view. From
//! inside a real sandbox as the agent, judged by their effect: main holds
//! no MARKER after the agent's commit, whatever per-user configuration
//! the agent wrote into its home first.

use sbx_e2e::{Repo, attack_repo, started, text};

/// pre-commit as the pre-commit framework asks: the staged patch, as text.
const REFUSE_MARKER_TEXT: &str = "#!/bin/sh\n\
    if git diff --cached --text | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\n";

/// The same, in Python, as many hooks and hook tools are.
const REFUSE_MARKER_PY: &str = "#!/usr/bin/env python3\n\
import subprocess, sys\n\
d = subprocess.run(['git', 'diff', '--cached', '--text'], capture_output=True).stdout\n\
if b'MARKER' in d:\n    sys.stderr.write('MARKER refused\\n')\n    sys.exit(1)\n";

fn sandbox(hook: &str) -> Option<Repo> {
    started(|| {
        let repo = attack_repo(
            "gattack9",
            &["-qm", "one"],
            &["/.gitattributes"],
            &[("pre-commit", hook)],
        );
        repo.give_to_agent();
        repo
    })
}

fn agent(repo: &Repo, script: &str) -> String {
    text(&repo.agent(script))
}

/// The commit attempt every test makes after its set-up: staged MARKER,
/// then whether main holds it.
const COMMIT_MARKER: &str = "echo MARKER > a && git add a && git commit -qm x; \
    git grep -q MARKER main -- && echo LANDED; git reset -q --hard";

/// Route 5: hooks ran with the agent's home, so a `usercustomize.py` in
/// the Python user site (kept in the home volume) ran first in a Python
/// pre-commit and exited 0. Hooks now run with a root-owned home, an
/// allowlisted environment and `PYTHONNOUSERSITE=1`.
#[test]
fn a_python_user_site_does_not_pass_a_python_pre_commit() {
    let Some(repo) = sandbox(REFUSE_MARKER_PY) else {
        return;
    };
    let o = agent(&repo, COMMIT_MARKER);
    assert!(
        o.contains("MARKER refused") && !o.contains("LANDED"),
        "control: {o}"
    );
    let o = agent(
        &repo,
        &format!(
            "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && \
             echo 'import os; os._exit(0)' > \"$d/usercustomize.py\" && \
             mkdir -p ~/.config/python && export PYTHONUSERBASE=$HOME/.local XDG_CONFIG_HOME=$HOME/.config; \
             {COMMIT_MARKER}"
        ),
    );
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
}

/// Route 1: a `diff.hide.textconv` in the agent's `~/.gitconfig` (which
/// the agent writes without `git config --global`) plus `* diff=hide` in
/// the work tree's attributes made the hook's own `git diff --cached
/// --text` print an empty patch. A hook's git now reads no per-user
/// configuration: its home is not the agent's and `XDG_CONFIG_HOME` is
/// not passed.
#[test]
fn a_textconv_in_the_agents_gitconfig_does_not_hide_staged_content() {
    let Some(repo) = sandbox(REFUSE_MARKER_TEXT) else {
        return;
    };
    let o = agent(&repo, COMMIT_MARKER);
    assert!(
        o.contains("MARKER refused") && !o.contains("LANDED"),
        "control: {o}"
    );
    // Both per-user files git reads: ~/.gitconfig and the XDG one.
    let o = agent(
        &repo,
        &format!(
            "printf '[diff \"hide\"]\\n\\ttextconv = true\\n' >> ~/.gitconfig && \
             mkdir -p ~/.config/git && cp ~/.gitconfig ~/.config/git/config && \
             echo '* diff=hide' > .gitattributes && git diff --text HEAD -- a | grep -c MARKER; \
             echo MARKER > a && git diff --text -- a | grep -q MARKER || echo HIDDEN; git checkout -q a; \
             {COMMIT_MARKER}"
        ),
    );
    // The attack's own check: the agent's git no longer shows MARKER.
    assert!(o.contains("HIDDEN"), "set-up: {o}");
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
}

/// Route 8: the pre-push step checked only commits, so a ref on a blob
/// or a tree (a lightweight or an annotated tag) sent MARKER to the
/// remote, no hook having seen it. Such refs are refused now unless
/// `push-non-commits` is set.
#[test]
fn a_tag_on_a_blob_or_a_tree_is_not_pushed() {
    let Some(repo) = sandbox(REFUSE_MARKER_TEXT) else {
        return;
    };
    // Control: a tag on a commit is pushed.
    let o = agent(
        &repo,
        "git tag ok HEAD && git push -q origin ok && git -C remote.git rev-parse -q --verify ok >/dev/null && echo PUSHED",
    );
    assert!(o.contains("PUSHED"), "control: {o}");
    let o = agent(
        &repo,
        "echo MARKER > f && b=$(git hash-object -w f) && rm f && \
         mkdir -p d && echo MARKER > d/m && git add d/m && t=$(git write-tree) && git reset -q && rm -r d && \
         git tag tb $b && git tag -a -m x tab $b && git tag tt $t && git tag -a -m x tat $t; \
         for r in tb tab tt tat; do git push -q origin $r; done; \
         git push -q origin $b:refs/heads/blob $t:refs/heads/tree; \
         for r in tb tab tt tat blob tree; do \
           git -C remote.git rev-parse -q --verify $r >/dev/null && echo LANDED $r; done",
    );
    assert!(!o.contains("LANDED"), "non-commit refs pushed: {o}");
    assert!(o.contains("not a commit"), "refused by the guard: {o}");
}

/// The `git-upload-pack` pass-through ran with the environment as given:
/// `GIT_CONFIG_PARAMETERS` naming `uploadpack.packObjectsHook` (which
/// git reads from the command line's configuration) ran an agent program
/// with git's group when a fetch asked for a pack. Refused now, as for
/// every other call.
#[test]
fn upload_pack_does_not_run_an_agent_pack_objects_hook() {
    let Some(repo) = sandbox(REFUSE_MARKER_TEXT) else {
        return;
    };
    // A v0 fetch of HEAD: one want, then done.
    let fetch = "printf '#!/bin/sh\\nid > /tmp/pwned\\nexec \"$@\"\\n' > /tmp/h && chmod +x /tmp/h; \
         h=$(git rev-parse HEAD); printf '0032want %s\\n00000009done\\n' $h > /tmp/req";
    // Control: the plain pass-through serves a pack.
    let o = agent(
        &repo,
        &format!("{fetch}; echo packs=$(git-upload-pack . < /tmp/req 2>/dev/null | grep -ac PACK)"),
    );
    assert!(o.contains("packs=1"), "control: {o}");
    let o = agent(
        &repo,
        &format!(
            "{fetch}; GIT_CONFIG_PARAMETERS=\"'uploadpack.packobjectshook'='/tmp/h'\" git-upload-pack . < /tmp/req >/dev/null; \
             echo rc=$?; \
             GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=uploadpack.packObjectsHook GIT_CONFIG_VALUE_0=/tmp/h \
               git-upload-pack . < /tmp/req >/dev/null; echo rc=$?; \
             cat /tmp/pwned 2>/dev/null && echo PWNED"
        ),
    );
    assert!(!o.contains("PWNED"), "the agent's hook ran: {o}");
    assert!(o.contains("rc=77"), "refused: {o}");
}
