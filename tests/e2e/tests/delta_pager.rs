//! git-delta (seed 000) is git's pager inside the sandbox only: the
//! image's root-owned /etc/gitconfig names it, the guard lets git run it,
//! the host's git never sees it, and the agent still cannot name a pager
//! of its own.

use std::process::Command;

use sbx_e2e::{attack_repo, base_image_lock, docker_ready, prerequisite, sbx, sh, text};

/// delta's file header rule: three box-drawing dashes.
const DELTA_RULE: &str = "\u{2500}\u{2500}\u{2500}";

#[test]
fn delta_pages_git_in_the_sandbox_and_the_agent_cannot_pick_a_pager() {
    if !prerequisite(docker_ready(), "a running Docker engine") {
        return;
    }
    // The tests' base image plus delta (built once with cargo, then cached
    // in ~/.cache/sbx); the tag is SBX_BASE_TAG's, so `start` uses it. The
    // lock keeps another suite from rebuilding that tag without delta
    // before this sandbox's image is made from it.
    let lock = base_image_lock();
    let o = sbx()
        .args(["-q", "build-base", "--bootstrap", "--no-ai-clis"])
        .args(["--git-delta-version", "0.18.2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "build-base: {}", text(&o));
    let repo = attack_repo("delta", &["-q", "-m", "one"], &[], &[]);
    repo.give_to_agent();
    repo.start();
    drop(lock);

    // Root's choice, in root's file.
    let o = repo.agent("git var GIT_PAGER; stat -c '%U %a' /etc/gitconfig");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "delta\nroot 644\n",
        "{}",
        text(&o)
    );

    // git, through the guard and its broker, pages a diff through delta on
    // a terminal (DELTA_PAGER=cat: delta's own pager would wait for a key).
    let o = repo.agent("echo 2 > a && DELTA_PAGER=cat script -qec 'git -p diff' /dev/null");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(!out.contains("sbx-git-guard"), "the guard refused: {out}");
    assert!(out.contains(DELTA_RULE), "no delta output: {out}");

    // The attack: the agent names its own pager, stored and inline.
    let o = repo.agent(
        "git config core.pager 'touch /tmp/pwned-stored'; \
         script -qec \"git -c core.pager='touch /tmp/pwned-inline' -p log\" /dev/null; \
         script -qec 'git -p log' /dev/null; \
         for f in /tmp/pwned-stored /tmp/pwned-inline; do [ ! -e $f ] || echo RAN $f; done",
    );
    let out = text(&o);
    assert!(
        out.contains("config-write") && out.contains("config-inline"),
        "not both refused: {out}"
    );
    assert!(!out.contains("RAN"), "the agent's pager ran: {out}");

    // The user's commands on the host: no pager was stored, and the host's
    // git pages with its own (delta is the image's, never the host's).
    let stored = Command::new("git")
        .args(["config", "--get", "core.pager"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        stored.stdout.is_empty(),
        "a pager reached .git/config: {}",
        String::from_utf8_lossy(&stored.stdout)
    );
    let host = sh(Command::new("git")
        .args(["var", "GIT_PAGER"])
        .env_remove("GIT_PAGER")
        .env_remove("PAGER")
        .current_dir(&repo.path));
    assert!(!host.contains("delta"), "the host's git pages with delta");
}
