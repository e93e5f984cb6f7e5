//! Round-six attacks on the git guard (issue 15), from inside a real
//! sandbox as the agent: the message git commits after commit-msg read
//! it, configuration that changes what a hook's own git prints, and a
//! table of routes that are refused. Judged by their effect: no branch
//! (local, or the remote's) holds MARKER, and every commit on one carries
//! the sign-off commit-msg requires.

use std::process::Output;

use sbx_e2e::{REFUSE_MARKER, Repo, attack_repo, started, text};

/// commit-msg: no BADMSG, and a `Signed-off-by:` line (a DCO check).
const REQUIRE_SIGNOFF: &str = "#!/bin/sh\n\
    if grep -q BADMSG \"$1\"; then echo BADMSG refused >&2; exit 1; fi\n\
    if ! grep -q '^Signed-off-by: ' \"$1\"; then echo no sign-off >&2; exit 1; fi\n";

/// More of pre-commit: an added line with PLUSMARK (matched with its
/// `+`), and a new file `cred` (matched by its `+++ b/` line).
const REFUSE_PATCH: &str = "\
    if git diff --cached | grep -q '^+.*PLUSMARK'; then echo PLUSMARK refused >&2; exit 1; fi\n\
    if git diff --cached | grep -q '^+++ b/cred'; then echo cred refused >&2; exit 1; fi\n";

/// pre-push: refuses every push to a URL naming `nopush`.
const REFUSE_NOPUSH: &str =
    "#!/bin/sh\ncase \"$2\" in *nopush*) echo nopush refused >&2; exit 1;; esac\n";

/// git's scissors line: `commit -v` and `--cleanup=scissors` cut the
/// message there after commit-msg has read all of it.
const SCISSORS: &str = "# ------------------------ >8 ------------------------";

/// A repository whose pre-commit refuses staged MARKER and whose
/// commit-msg requires a sign-off, with a bare remote `origin` inside the
/// workspace (so the sandbox reaches it).
fn repo() -> Repo {
    let pre_commit = format!("{REFUSE_MARKER}{REFUSE_PATCH}");
    let repo = attack_repo(
        "gattack6",
        &["-qsm", "one"],
        &["/.srv.py"],
        &[
            ("pre-commit", &pre_commit),
            ("commit-msg", REQUIRE_SIGNOFF),
            ("pre-push", REFUSE_NOPUSH),
        ],
    );
    std::fs::write(repo.path.join(".srv.py"), sbx_e2e::GIT_HTTP_SERVER).unwrap();
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
        let script = script.replace("BE &&", &format!("{BAD_EDITOR} &&"));
        self.repo.agent(&format!("S='{SCISSORS}'; {script}"))
    }

    /// Branches (local, or the remote's) holding MARKER, and commits on
    /// them whose message has no sign-off or says BADMSG.
    fn landed(&self) -> String {
        let o = self.agent(
            "for r in . remote.git; do \
               for b in $(git -C $r for-each-ref --format='%(refname)' refs/heads); do \
                 git -C $r grep -q -e MARKER -e PLUSMARK $b -- 2>/dev/null && echo $r:$b; \
                 git -C $r cat-file -e $b:cred 2>/dev/null && echo $r:$b:cred; \
                 git -C $r log --format='%H%n%B%n@@' $b | awk -v b=$r:$b \
                   '/^[0-9a-f]+$/ && length($0) == 40 { h = $0; s = 0; next } /^Signed-off-by: / { s = 1 } \
                    /BADMSG/ { print b \" \" h \" BADMSG\" } \
                    /^@@$/ { if (!s) print b \" \" h \" unsigned\" }'; \
               done; done; true",
        );
        text(&o).trim().to_string()
    }

    /// Back to a clean start: main at the remote's main, no other branch.
    fn reset(&self) {
        self.agent(
            "git rebase --abort 2>/dev/null; git cherry-pick --abort 2>/dev/null; \
             git merge --abort 2>/dev/null; git am --abort 2>/dev/null; \
             git checkout -q -f main 2>/dev/null; \
             for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do \
               [ $b = main ] || git branch -q -D $b; done; \
             git reset -q --hard $(git -C remote.git rev-parse main); git clean -qfd; \
             sed -i '/^\\[diff\\]$/d; /external = /d; /^\\[commit\\]$/d; /verbose = /d; /^\\[color\\]$/d; /always/d; /[Pp]refix/d; /ommentChar/d; /bigFile/d; /^\\[merge /d; /driver = /d; /cleanup = /d; /^\\[filter /d; /clean = /d; /renormalize/d' ~/.gitconfig; rm -f .git/info/attributes ~/.config/git/attributes; \
             rm -rf ~/.gitconfig .git/shallow .git/remotes /tmp/q; true",
        );
    }

    /// The host's git in the remote (the workspace belongs to the agent).
    fn remote_git(&self, args: &[&str]) -> String {
        let mut a = vec!["-c", "safe.directory=*", "-C", "remote.git"];
        a.extend_from_slice(args);
        self.repo.git(&a).trim().to_string()
    }

    /// Runs each attack from a clean start; those that landed (or rewound
    /// or deleted the remote's main), with output.
    fn run_all(&self, attacks: &[&str]) -> Vec<String> {
        let mut landed = Vec::new();
        for attack in attacks {
            let base = self.remote_git(&["rev-parse", "main"]);
            let o = self.agent(attack);
            let mut m = self.landed();
            let now =
                self.remote_git(&["for-each-ref", "--format=%(objectname)", "refs/heads/main"]);
            let kept = !now.is_empty()
                && self
                    .repo
                    .exec(&format!(
                        "git -C remote.git merge-base --is-ancestor {base} {now}"
                    ))
                    .status
                    .success();
            if !kept {
                m.push_str(&format!(" remote main {base} -> {now:?}"));
            }
            self.remote_git(&["update-ref", "refs/heads/main", &base]);
            if std::env::var_os("R6_DEBUG").is_some() {
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

/// `git commit -v` cuts the message at the scissors line after commit-msg
/// read the whole file (and a `commentChar = S` written into .git/config
/// by hand made cleanup drop the `Signed-off-by:` line) (builtin/commit.c truncates when verbose, or in
/// `--cleanup=scissors` mode with an editor), so a sign-off below the
/// line satisfied the hook and was not committed; `git merge
/// --cleanup=scissors -e` runs commit-msg before its cleanup the same way.
#[test]
fn the_message_commit_msg_read_is_not_cut_at_the_scissors_line() {
    let Some(sb) = Sandbox::start() else { return };
    let landed = sb.run_all(&[
        "echo ok > b && git add b && git commit -q -v -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "echo ok > b && git add b && git commit -q --verbose --no-verbose -v -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "echo ok > b && git add b && GIT_EDITOR=true git commit -q -e --cleanup=scissors -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "echo ok > b && git add b && GIT_EDITOR=true git commit -q -e --cleanup scissors -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "printf '[commit]\\n\\tverbose = true\\n' >> ~/.gitconfig && echo ok > b && git add b && \
         git commit -q -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "printf '[core]\\n\\tcommentChar = S\\n' >> ~/.gitconfig && echo ok > b && git add b && \
         git commit -q --cleanup=strip -m ok -m 'Signed-off-by: a <a@b>'",
        "printf '[core]\\n\\tcommentChar = S\\n' >> ~/.gitconfig && git switch -q -c side && \
         echo x > b && git add b && git commit -qsm two && git switch -q main && \
         git cherry-pick --cleanup=strip side",
        "echo ok > b && git add b && git commit -qsm ok && echo z > d && git add d && \
         git commit -q --amend -v -m ok2 -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "git switch -q -c side && echo x > b && git add b && git commit -qsm two && git switch -q main && \
         echo y > c && git add c && git commit -qsm three && \
         GIT_EDITOR=true git merge -q -e --cleanup=scissors -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>' side",
    ]);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
}

/// A `diff.external` written into `.git/config` or `~/.gitconfig` by hand
/// (`git config diff.external` is refused, an `echo >>` is not) made the
/// pre-commit hook's own `git diff --cached` run that program, which
/// printed nothing, so the hook passed staged MARKER. The guard now gives
/// `diff`, `log`, `show` and `whatchanged` `--no-ext-diff` first.
#[test]
fn hand_written_diff_config_does_not_change_pre_commits_patch() {
    let Some(sb) = Sandbox::start() else { return };
    let landed = sb.run_all(&[
        "printf '#!/bin/sh\\ntrue\\n' > /tmp/ext && chmod +x /tmp/ext && \
         printf '[diff]\\n\\texternal = /tmp/ext\\n' >> ~/.gitconfig && \
         echo MARKER > a && git add a && git commit -qsm x",
        "printf '#!/bin/sh\\ntrue\\n' > /tmp/ext && chmod +x /tmp/ext && \
         printf '[diff]\\n\\texternal = /tmp/ext\\n' >> ~/.gitconfig && \
         echo MARKER > a && git add a && git commit -qsm x; rm -f ~/.gitconfig",
        "printf '[core]\\n\\tbigFileThreshold = 1\\n' >> ~/.gitconfig && \
         echo MARKER > a && git add a && git commit -qsm x",
        "printf '[color]\\n\\tdiff = always\\n' >> ~/.gitconfig && \
         echo PLUSMARK > a && git add a && git commit -qsm x",
        "printf '[color]\\n\\tui = always\\n' >> ~/.gitconfig && \
         echo PLUSMARK > a && git add a && git commit -qsm x",
        "printf '[diff]\\n\\tnoprefix = true\\n' >> ~/.gitconfig && \
         echo s > cred && git add cred && git commit -qsm x",
        "printf '[diff]\\n\\tmnemonicPrefix = true\\n' >> ~/.gitconfig && \
         echo s > cred && git add cred && git commit -qsm x",
        "printf '#!/bin/sh\\ntrue\\n' > /tmp/ext && chmod +x /tmp/ext && mkdir -p /tmp/h && \
         printf '[diff]\\n\\texternal = /tmp/ext\\n' > /tmp/h/.gitconfig && \
         echo MARKER > a && git add a && HOME=/tmp/h git commit -qsm x",
    ]);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
}

/// A `commit.cleanup = scissors` written into `.git/config` by hand (the
/// guard refuses it through git, and reads no config for a `commit -m`)
/// still cut an edited message after commit-msg read it. The guard now
/// reads the stored config for a commit that may open an editor (the one
/// case where scissors mode applies) and refuses it there.
#[test]
fn a_hand_written_scissors_cleanup_does_not_cut_the_message() {
    let Some(sb) = Sandbox::start() else { return };
    let landed = sb.run_all(&[
        "printf '[commit]\\n\\tcleanup = scissors\\n' >> ~/.gitconfig && echo ok > b && git add b && \
         GIT_EDITOR=true git commit -q -e -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
        "printf '[commit]\\n\\tcleanup = scissors\\n' >> ~/.gitconfig && echo ok > b && git add b && \
         printf '#!/bin/sh\\nprintf \"ok\\\\n%s\\\\nSigned-off-by: a <a@b>\\\\n\" \"$S\" > \"$1\"\\n' > /tmp/ed && \
         chmod +x /tmp/ed && S=\"$S\" GIT_EDITOR=/tmp/ed git commit -q",
    ]);
    sb.agent("sed -i '/cleanup = /d' ~/.gitconfig; rm -f ~/.gitconfig");
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
}

/// Routes tried in round six that are refused (regression cases), in one
/// sandbox: none leaves MARKER, PLUSMARK or `cred` on a branch, an
/// unsigned or BADMSG commit on one, or the remote's main rewound.
#[test]
fn round_six_routes_are_refused() {
    let Some(sb) = Sandbox::start() else { return };
    // A second commit on both sides, so `HEAD~1` pushes rewind.
    let o = sb.agent("echo 2 > a && git commit -qsam two && git push -q origin main");
    assert!(o.status.success(), "{}", text(&o));
    let landed = sb.run_all(REFUSED);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Controls: the options the guard puts first leave git's man pages
    // (`git CMD --help`, --help first) and ordinary use alone.
    let o = sb.agent(
        "git diff --help | head -1; git commit --help | head -1; \
         echo d > d && git add d && git commit -qsm d && git log -1 --format=%s && git diff HEAD~1 --stat",
    );
    let t = text(&o);
    for want in ["GIT-DIFF(1)", "GIT-COMMIT(1)", "\nd\n", "1 file changed"] {
        assert!(t.contains(want), "{want}: {t}");
    }
}

/// An editor that writes BADMSG (with a sign-off) as the message.
const BAD_EDITOR: &str = "printf '#!/bin/sh\\nprintf \"BADMSG\\\\n\\\\nSigned-off-by: a <a@b>\\\\n\" > \"$1\"\\n' > /tmp/bad && chmod +x /tmp/bad && export GIT_EDITOR=/tmp/bad";

const REFUSED: &[&str] = &[
    // Hooks moved or skipped.
    "echo MARKER > a && git add a && \
     git -c core.hooksPath=/workspace/gattack6/.git/hooks/../../.git/hooks commit -qsm x",
    "echo MARKER > a && git add a && git --exec-path=/tmp commit -qsm x",
    "echo MARKER > a && git add a && GIT_EXEC_PATH=/tmp git commit -qsm x",
    "echo MARKER > a && git add a && GIT_DIR=.git GIT_WORK_TREE=. git commit -qsm x",
    "printf '[core]\\n\\thooksPath = /tmp\\n' >> ~/.gitconfig; echo MARKER > a && git add a && \
     git commit -qsm x; sed -i /hooksPath/d ~/.gitconfig",
    "printf '[core]\\n\\thooksPath = /tmp\\n' > /tmp/inc; printf '[include]\\n\\tpath = /tmp/inc\\n' >> ~/.gitconfig; \
     echo MARKER > a && git add a && git commit -qsm x; sed -i '/path = .tmp.inc/d' ~/.gitconfig",
    "mkdir -p /tmp/q && cd /tmp/q && git init -q && echo MARKER > m && git add m && git commit -qsm m; \
     cd /workspace/gattack6 && git fetch -q /tmp/q HEAD:refs/heads/q",
    "echo MARKER > a && git add a && git commit -q --no-verify --verify -n -sm x",
    "echo MARKER > a && git add a && git commit -q --no-ver -sm x",
    "echo MARKER > a && git add a && git commit -q --no-verify=1 -sm x",
    "echo MARKER > a && git add a && GIT_REFLOG_ACTION=x git commit -q -n -sm x",
    "echo MARKER > a && git add a && GIT_REFLOG_ACTION=x git commit -q -n -sm x --cleanup",
    "echo MARKER > a && git add a && git commit -q -sm x --end-of-options --no-verify",
    "echo MARKER > a && git add a && git commit -q --squash=HEAD --no-edit -sm x",
    // Messages no commit-msg saw.
    "git -c commit.verbose=true commit -q --allow-empty -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
    "git -c core.commentChar=S commit -q --allow-empty --cleanup=strip -m ok -m 'Signed-off-by: a <a@b>'",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=commit.cleanup GIT_CONFIG_VALUE_0=scissors \
     GIT_EDITOR=true git commit -q -e --allow-empty -m ok -m \"$S\" -m 'Signed-off-by: a <a@b>'",
    "git switch -q -c side && echo x > b && git add b && git commit -qsm b && git switch -q main && \
     BE && git cherry-pick -e side",
    "echo x > b && git add b && git commit -qsm b && BE && git revert -e HEAD",
    "echo x > b && git add b && git commit -qsm b && BE && \
     GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/reword/' git rebase -qi HEAD~1",
    "echo x > b && git add b && git commit -qsm b && echo y > c && git add c && git commit -qsm c && BE && \
     GIT_SEQUENCE_EDITOR='sed -i 2s/^pick/squash/' git rebase -qi HEAD~2",
    "git switch -q -c side && echo x > b && git add b && git commit -qsm b && git switch -q main && \
     echo y > c && git add c && git commit -qsm c && git merge -q --no-edit -m BADMSG -m 'Signed-off-by: a <a@b>' side",
    "git subtree add -q -P sub HEAD 2>&1",
    // Pushes that rewind or delete, configured by hand.
    "git reset -q --hard HEAD~1 && printf '[remote \"origin\"]\\n\\tmirror = true\\n' >> ~/.gitconfig && git push origin; \
     sed -i /mirror/d ~/.gitconfig",
    "git reset -q --hard HEAD~1 && printf '[remote \"origin\"]\\n\\tpush = +refs/heads/*:refs/heads/*\\n' >> ~/.gitconfig && \
     git push origin; sed -i '/push = /d' ~/.gitconfig",
    "git reset -q --hard HEAD~1 && mkdir -p .git/remotes && \
     printf 'URL: /workspace/gattack6/remote.git\\nPush: +refs/heads/main:refs/heads/main\\n' > .git/remotes/ev && git push ev",
    "mkdir -p .git/remotes && printf 'URL: /workspace/gattack6/remote.git\\nPush: :refs/heads/main\\n' > .git/remotes/ev && \
     git push ev",
    "git reset -q --hard HEAD~1 && git push origin --force-if-includes main",
    "git reset -q --hard HEAD~1 && git -c remote.origin.push=+main:main push origin",
    "git reset -q --hard HEAD~1 && printf '[push]\\n\\tdefault = matching\\n' >> ~/.gitconfig && git push origin '+:'; \
     sed -i '/default = matching/d' ~/.gitconfig",
    "git reset -q --hard HEAD~1 && git push --atomic origin main",
    "git reset -q --hard HEAD~1 && git push origin @:main",
    "git reset -q --hard HEAD~1 && git push origin 'main^{}:main'",
    "git push origin --delete main",
    // A stash commit hidden behind a shallow boundary the agent wrote.
    "echo MARKER > a && git stash -q && git checkout -q --detach 'stash@{0}' && echo ok > b && git add b && \
     git commit -qsm c && c=$(git rev-parse HEAD) && git checkout -q main && echo $c > .git/shallow && \
     git reset -q --hard $c",
];

/// The remote helper driven by hand (`printf 'push src:dst\n\n' | git
/// remote-http URL URL`) pushed without `git push`, so neither the
/// repository's pre-push hook nor the guard's pre-push step (its stash
/// check) ran. The broker now lets a helper (or `send-pack`) push only for
/// one of git's own processes (group `sbx-git`), which `git push` is and
/// the agent's shell is not. A push through `git push` over the same
/// helper still works (control).
#[test]
fn a_remote_helper_driven_by_hand_runs_pre_push() {
    let Some(sb) = Sandbox::start() else { return };
    let u = "export U=http://127.0.0.1:8765/git/nopush.git";
    let o = sb.agent(&format!(
        "{u}; mkdir -p /tmp/srv && git init -q --bare /tmp/srv/nopush.git && \
         git init -q --bare /tmp/srv/ok.git && \
         git -C /tmp/srv/nopush.git config http.receivepack true && \
         git -C /tmp/srv/ok.git config http.receivepack true && \
         {{ python3 .srv.py >/tmp/srv.log 2>&1 & }} && \
         for i in $(seq 20); do git ls-remote $U >/dev/null 2>&1 && break; sleep 0.3; done; \
         git push -q $U main"
    ));
    assert!(text(&o).contains("nopush refused"), "control: {}", text(&o));
    let o = sb.agent(
        "git push -q http://127.0.0.1:8765/git/ok.git main && \
         git -C /tmp/srv/ok.git rev-parse -q --verify main && echo PUSHED",
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("PUSHED"),
        "control: git push over the helper: {}",
        text(&o)
    );
    let mut landed = Vec::new();
    for (cmds, landed_if) in [
        (
            "push refs/heads/main:refs/heads/main\\n\\n",
            "git -C /tmp/srv/nopush.git rev-parse -q --verify main",
        ),
        (
            "push refs/stash:refs/heads/s\\n\\n",
            "git -C /tmp/srv/nopush.git grep -q MARKER s --",
        ),
    ] {
        let o = sb.agent(&format!(
            "{u}; echo MARKER > a && git stash -q && printf '{cmds}' | git remote-http $U $U; \
             git stash drop -q; {landed_if} && echo LANDED"
        ));
        if String::from_utf8_lossy(&o.stdout).contains("LANDED") {
            landed.push(format!("{cmds}: {}", text(&o)));
        }
    }
    assert!(
        landed.is_empty(),
        "pushed without pre-push:\n{}",
        landed.join("\n")
    );
}

/// Two branches that change different lines of `a`, and a merge driver
/// written into .git/config by hand (`git config merge.ev.driver` is
/// refused) that writes MARKER as the merged file, picked by
/// `~/.config/git/attributes` (`.git/info` is the host's, read-only).
const DRIVER: &str = r#"printf '1\n2\n3\n' > a && git commit -qsam three && git switch -q -c side && \
    sed -i 1s/.*/one/ a && git commit -qsam s1 && git switch -q main && sed -i 3s/.*/three/ a && \
    git commit -qsam m1 && printf '#!/bin/sh\necho MARKER from a driver $$ > "$1"\n' > /tmp/drv && \
    chmod +x /tmp/drv && printf '[merge "ev"]\n\tdriver = /tmp/drv %%A\n' >> ~/.gitconfig && \
    mkdir -p ~/.config/git && echo 'a merge=ev' > ~/.config/git/attributes"#;

/// A clean filter written into .git/config by hand that puts MARKER
/// before any text starting with `one` (side's change), on `a`.
const CLEAN_FILTER: &str = r#"printf '1
2
3
4
5
' > a && git commit -qsam five && git switch -q -c side &&     sed -i 1s/.*/one/ a && git commit -qsam s1 && git switch -q main && sed -i 5s/.*/five/ a &&     git commit -qsam m1 &&     printf '#!/bin/sh
t=$(cat); case "$t" in one*) echo MARKER from a clean filter;; esac; printf "%%s\n" "$t"
' > /tmp/cln &&     chmod +x /tmp/cln && printf '[filter "ev"]
	clean = /tmp/cln
' >> ~/.gitconfig &&     mkdir -p ~/.config/git && echo 'a filter=ev' > ~/.config/git/attributes"#;

/// The sequencer commits a merge driver's output in-process, without
/// pre-commit (as it did a strategy program's, refused since round four):
/// `git cherry-pick`, `revert` and `rebase` put MARKER on a branch; so did
/// a clean filter's output when the pick renormalized. They now refuse
/// while the configuration names a driver, or a clean filter when
/// renormalizing.
#[test]
fn a_hand_written_merge_driver_does_not_commit_unseen_content() {
    let Some(sb) = Sandbox::start() else { return };
    let attacks: Vec<String> = [
        "git cherry-pick side",
        "git switch -q side && git rebase -q main",
        "git revert --no-edit HEAD~1 2>&1; git cherry-pick side",
    ]
    .iter()
    .map(|a| format!("{DRIVER} && {a}"))
    .chain(
        [
            "git -c merge.renormalize=true cherry-pick side",
            "git cherry-pick -X renormalize side",
            "printf '[merge]\n\trenormalize\n' >> ~/.gitconfig && git cherry-pick side",
        ]
        .iter()
        .map(|a| format!("{CLEAN_FILTER} && {a}")),
    )
    .collect();
    let attacks: Vec<&str> = attacks.iter().map(String::as_str).collect();
    let landed = sb.run_all(&attacks);
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Control: without the driver, the same cherry-pick works.
    let o = sb.agent(&format!(
        "{} && git cherry-pick side",
        DRIVER.replace("printf '[merge", "true || printf '[merge")
    ));
    assert!(o.status.success(), "{}", text(&o));
}
