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
