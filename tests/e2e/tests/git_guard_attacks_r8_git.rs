//! Round-eight attacks on the git guard (issue 15), git semantics, from
//! inside a real sandbox as the agent: configuration that git reads and
//! the guard did not (an include section spelt in another case, an
//! include or a HOME whose path means another file to git than to the
//! guard). Judged by their effect: no branch holds MARKER.

use std::process::Output;

use sbx_e2e::{REFUSE_MARKER, Repo, attack_repo, started, text};

fn repo() -> Repo {
    let repo = attack_repo(
        "gattack8",
        &["-qsm", "one"],
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
            "git cherry-pick --abort 2>/dev/null; git checkout -q -f main 2>/dev/null; \
             for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do \
               [ $b = main ] || git branch -q -D $b; done; \
             git reset -q --hard $(git -C remote.git rev-parse main); git clean -qfd; \
             cp /tmp/config.orig .git/config; rm -f .git/info/attributes; true",
        );
    }
}

/// Two branches that change different lines of `a`, a merge driver that
/// writes MARKER as the merged file (`/tmp/drv`), picked for `a` by
/// `.git/info/attributes`; its configuration in `/tmp/ev.inc`, in `.inc`,
/// `.gitconfig` and `git/config` at the top of the work tree, and a
/// symlink `lnk` to `/proc/self/cwd/.inc`.
const SETUP: &str = r#"cp -n .git/config /tmp/config.orig; \
    printf '1\n2\n3\n' > a && git commit -qam three && git switch -q -c side && \
    sed -i 1s/.*/one/ a && git commit -qam s1 && git switch -q main && sed -i 3s/.*/three/ a && \
    git commit -qam m1 && printf '#!/bin/sh\necho MARKER from a driver > "$1"\n' > /tmp/drv && \
    chmod +x /tmp/drv && printf '[merge "ev"]\n\tdriver = /tmp/drv %%A\n[user]\n\tname = a\n\temail = a@b\n' > /tmp/ev.inc && \
    cp /tmp/ev.inc .inc && cp /tmp/ev.inc .gitconfig && mkdir -p git sub && cp /tmp/ev.inc git/config && \
    ln -sf /proc/self/cwd/.inc lnk && mkdir -p .git/info && echo 'a merge=ev' > .git/info/attributes"#;

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
        "printf '[INCLUDE]\\n\\tpath = /tmp/ev.inc\\n' >> .git/config && git cherry-pick side",
        "printf '[includeif \"gitdir:/workspace/\"]\\n\\tpath = /tmp/ev.inc\\n' >> .git/config && git cherry-pick side",
        "printf '[IncludeIf \"onbranch:main\"]\\n\\tpath = /tmp/ev.inc\\n' >> .git/config && git cherry-pick side",
        "printf '[include]\\n\\tpath = /proc/self/cwd/.inc\\n' >> .git/config && cd sub && git cherry-pick side",
        "printf '[include]\\n\\tpath = ../lnk\\n' >> .git/config && cd sub && git cherry-pick side",
        "cd sub && HOME=. git cherry-pick side",
        "cd sub && XDG_CONFIG_HOME=. git cherry-pick side",
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
        "{SETUP} && rm .git/info/attributes && printf '[core]\\n\\tabbrev = 12\\n' > /tmp/ok.inc && \
         printf '[include]\\n\\tpath = /tmp/ok.inc\\n' >> .git/config && cd sub && git cherry-pick side && \
         git rev-parse --short HEAD"
    ));
    assert!(
        o.status.success() && text(&o).lines().any(|l| l.trim().len() == 12),
        "control: {}",
        text(&o)
    );
}
