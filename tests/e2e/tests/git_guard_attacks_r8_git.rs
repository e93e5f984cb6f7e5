//! Round-eight attacks on the git guard (issue 15), git semantics, from
//! inside a real sandbox as the agent: configuration that git reads and
//! the guard did not (an include section spelt in another case, an
//! include or a HOME whose path means another file to git than to the
//! guard). Judged by their effect: no branch holds MARKER.

use std::process::Output;

use sbx_e2e::{REFUSE_MARKER, Repo, attack_repo, started, text};

/// commit-msg: writes the PATH it runs with to /tmp/hookpath.
const HOOK_PATH: &str = "#!/bin/sh\necho \"$PATH\" > /tmp/hookpath\n";

fn repo() -> Repo {
    let repo = attack_repo(
        "gattack8",
        &["-qsm", "one"],
        &[],
        &[("pre-commit", REFUSE_MARKER), ("commit-msg", HOOK_PATH)],
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

    /// Local branches holding MARKER.
    fn landed(&self) -> String {
        let o = self.agent(
            "for b in $(git for-each-ref --format='%(refname)' refs/heads); do \
               git grep -q -F MARKER $b -- 2>/dev/null && echo $b; done; true",
        );
        text(&o).trim().to_string()
    }

    /// Back to a clean start: main at the remote's main, no other branch,
    /// the configuration as it came.
    fn reset(&self) {
        self.agent(
            "printf 'ref: refs/heads/main\\n' > .git/HEAD; git cherry-pick --abort 2>/dev/null; git checkout -q -f main 2>/dev/null; \
             for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do \
               [ $b = main ] || git branch -q -D $b; done; \
             git reset -q --hard $(git -C remote.git rev-parse main); git clean -qfd; \
             rm -f .gitattributes ~/.gitconfig ~/.config/git/config; true",
        );
    }
}

/// Two branches that change different lines of `a`, a merge driver that
/// writes MARKER as the merged file (`/tmp/drv`), picked for `a` by
/// `.gitattributes` (`.git/info` is the host's, read-only in a sandbox); its
/// configuration in `/tmp/ev.inc`, in `.inc`,
/// `.gitconfig` and `git/config` at the top of the work tree, and a
/// symlink `lnk` to `/proc/self/cwd/.inc`.
const SETUP: &str = r#"printf '1\n2\n3\n' > a && git commit -qam three && git switch -q -c side && \
    sed -i 1s/.*/one/ a && git commit -qam s1 && git switch -q main && sed -i 3s/.*/three/ a && \
    git commit -qam m1 && printf '#!/bin/sh\necho MARKER from a driver > "$1"\n' > /tmp/drv && \
    chmod +x /tmp/drv && printf '[merge "ev"]\n\tdriver = /tmp/drv %%A\n[user]\n\tname = a\n\temail = a@b\n' > /tmp/ev.inc && \
    cp /tmp/ev.inc .inc && cp /tmp/ev.inc .gitconfig && mkdir -p git sub && cp /tmp/ev.inc git/config && \
    ln -sf /proc/self/cwd/.inc lnk && echo 'a merge=ev' > .gitattributes"#;

/// The guard read includes only as `[include]` and `[includeIf "…"]`
/// (gix's spelling), git in any case; and it read an include through
/// `/proc/self/cwd`, or a `.gitconfig` under a relative HOME, from the
/// caller's directory, git from the top of the work tree. Either way the
/// merge driver (refused for the sequencer since round six) was hidden
/// from the guard, and `git cherry-pick` committed its MARKER unseen.
#[test]
fn configuration_git_reads_is_the_configuration_the_guard_reads() {
    let Some(sb) = Sandbox::start() else { return };
    let attacks: Vec<String> = [
        "printf '[INCLUDE]\\n\\tpath = /tmp/ev.inc\\n' >> ~/.gitconfig && git cherry-pick side",
        "printf '[includeif \"gitdir:/workspace/\"]\\n\\tpath = /tmp/ev.inc\\n' >> ~/.gitconfig && git cherry-pick side",
        "printf '[IncludeIf \"onbranch:main\"]\\n\\tpath = /tmp/ev.inc\\n' >> ~/.gitconfig && git cherry-pick side",
        "printf '[include]\\n\\tpath = /proc/self/cwd/.inc\\n' >> ~/.gitconfig && cd sub && git cherry-pick side",
        "printf '[include]\\n\\tpath = ../../workspace/gattack8/lnk\\n' >> ~/.gitconfig && cd sub && git cherry-pick side",
        "cd sub && HOME=. git cherry-pick side",
        "cd sub && XDG_CONFIG_HOME=. git cherry-pick side",
        // HEAD by hand, as git reads it too: main for onbranch:main.
        "printf 'ref:refs/heads/main\\n' > .git/HEAD && \
         printf '[includeIf \"onbranch:main\"]\\n\\tpath = /tmp/ev.inc\\n' >> ~/.gitconfig && git cherry-pick side",
        // The feature's own use: a global include for repositories whose
        // remote matches, the remote in the agent's ~/.gitconfig.
        "mkdir -p ~/.config/git && \
         printf '[includeIf \"hasconfig:remote.*.url:/workspace/**\"]\\n\\tpath = /tmp/ev.inc\\n' > ~/.config/git/config && \
         printf '[remote \"origin\"]\\n\\turl = /workspace/gattack8/remote.git\\n' >> ~/.gitconfig && git cherry-pick side",
    ]
    .iter()
    .map(|a| format!("{SETUP} && {a}"))
    .collect();
    let mut landed = Vec::new();
    for attack in &attacks {
        let o = sb.agent(attack);
        let m = sb.landed();
        if !m.is_empty() {
            landed.push(format!("{attack}\n  -> {m}\n{}", text(&o)));
        }
        sb.reset();
    }
    assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
    // Control: an include spelt as documented is followed, and its
    // harmless setting lets the same cherry-pick through.
    let o = sb.agent(&format!(
        "{SETUP} && rm .gitattributes && printf '[core]\\n\\tabbrev = 12\\n' > /tmp/ok.inc && \
         printf '[include]\\n\\tpath = /tmp/ok.inc\\n' >> ~/.gitconfig && cd sub && git cherry-pick side && \
         git rev-parse --short HEAD"
    ));
    assert!(
        o.status.success() && text(&o).lines().any(|l| l.trim().len() == 12),
        "control: {}",
        text(&o)
    );
}

/// Programs git runs for an option, a command's own configuration, a
/// variable or a name it looks up on PATH, which ran as git's child with
/// git's group (which the broker trusts: a remote helper takes `push` only
/// from git's processes, and so does the sandbox's stash record): a
/// `remote-ext` URL, `instaweb --httpd`/`instaweb.httpd`, `daemon
/// --access-hook`, `GIT_SSH`/`GIT_SSH_COMMAND` (whose `-c core.sshCommand`
/// is refused), and `info`, `w3m`, `ssh` and `ssh-keygen`, which the image
/// lacks, found in the agent's directory on PATH. Judged by the program
/// not having run.
#[test]
fn programs_git_runs_for_the_agent_are_refused() {
    let Some(sb) = Sandbox::start() else { return };
    let prog = "printf '#!/bin/sh\\nid -g > /tmp/ran\\necho x\\n' > /tmp/prog && chmod +x /tmp/prog && \
                mkdir -p /tmp/bin && for p in info w3m ssh ssh-keygen evilhttpd; do cp /tmp/prog /tmp/bin/$p; done";
    let mut missed = Vec::new();
    for attack in [
        "printf '002fgit-upload-pack /workspace/gattack8\\0host=x\\0' | \
         git daemon --inetd --export-all --access-hook=/tmp/prog",
        "git instaweb --local --httpd=/tmp/bin/evilhttpd",
        "git -c instaweb.httpd=/tmp/bin/evilhttpd instaweb --local",
        "printf 'capabilities\\nconnect git-upload-pack\\n' | timeout 20 git remote-ext x /tmp/prog",
        "PATH=/tmp/bin:$PATH git help -i commit",
        "PATH=/tmp/bin:$PATH git web--browse -b w3m http://x",
        "PATH=/tmp/bin:$PATH git ls-remote ssh://x/y",
        "PATH=/tmp/bin:$PATH git ls-remote x:y",
        "GIT_SSH_COMMAND=/tmp/prog git ls-remote ssh://x/y",
        "GIT_SSH=/tmp/prog git ls-remote ssh://x/y",
        "PATH=/tmp/bin:$PATH git -c gpg.format=ssh -c user.signingKey=/tmp/prog commit -q -S --allow-empty -m ok",
        // Written by hand (`git config` of it is refused), in the agent's
        // own ~/.gitconfig (the repository's is read-only): what a fetch
        // from a local remote runs.
        "printf '[remote \"x\"]\\n\\turl = /workspace/gattack8/remote.git\\n\\tuploadpack = /tmp/prog\\n' >> ~/.gitconfig && \
         git fetch x",
    ] {
        let o = sb.agent(&format!(
            "rm -f /tmp/ran; {prog} && {{ {attack}; }}; test -e /tmp/ran && echo RAN $(cat /tmp/ran)"
        ));
        if std::env::var_os("R8_DEBUG").is_some() {
            eprintln!("=== {attack}\n{:?}\n{}", o.status.code(), text(&o));
        }
        if String::from_utf8_lossy(&o.stdout).contains("RAN") {
            missed.push(format!("{attack}\n{}", text(&o)));
        }
        sb.reset();
    }
    assert!(missed.is_empty(), "ran:\n{}", missed.join("\n"));
    // Control: the hooks still get the caller's PATH (system directories
    // first), so a hook's own tools resolve.
    let o = sb.agent(
        "mkdir -p /tmp/bin && PATH=/tmp/bin:$PATH git commit -q --allow-empty -m ok && cat /tmp/hookpath",
    );
    assert!(
        o.status.success() && text(&o).contains(":/tmp/bin"),
        "control: {}",
        text(&o)
    );
}
