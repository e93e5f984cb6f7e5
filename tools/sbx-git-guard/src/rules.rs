//! The one table of rules: the policy refuses by `R`, and `rules`, the
//! audit log, `--help` and the man page are all rendered from `RULES`, so a
//! rule cannot be enforced under one name and listed under another.

/// A rule's identity; `RULES[r as usize]` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum R {
    NoVerify,
    ForcePush,
    GlobalConfig,
    ConfigInline,
    ConfigWrite,
    ConfigEnv,
    Plumbing,
    UnverifiedCommit,
    ExecOption,
    GitDir,
    OutputPath,
    Husky,
    ParseError,
    ConfigUnreadable,
    Internal,
}

impl R {
    pub const ALL: [R; 15] = [
        R::NoVerify,
        R::ForcePush,
        R::GlobalConfig,
        R::ConfigInline,
        R::ConfigWrite,
        R::ConfigEnv,
        R::Plumbing,
        R::UnverifiedCommit,
        R::ExecOption,
        R::GitDir,
        R::OutputPath,
        R::Husky,
        R::ParseError,
        R::ConfigUnreadable,
        R::Internal,
    ];

    pub fn name(self) -> &'static str {
        RULES[self as usize].name
    }
}

pub struct Rule {
    pub id: R,
    pub name: &'static str,
    /// One line, for `rules` and the audit log's readers.
    pub blocks: &'static str,
    /// The `--help`/man page paragraph.
    pub detail: &'static str,
}

pub const RULES: &[Rule] = &[
    Rule {
        id: R::NoVerify,
        name: "block-no-verify",
        blocks: "skipping hooks: --no-verify/-n (where it means that) for commit, merge, pull, rebase, am, push; husky kill switches",
        detail: "--no-verify/-n where it skips hooks (commit, merge, pull, rebase, am, push); HUSKY, HUSKY_SKIP_HOOKS, LEFTHOOK, LEFTHOOK_EXCLUDE, SKIP and PRE_COMMIT_ALLOW_NO_CONFIG are removed from git's environment; a `git commit -n` with GIT_REFLOG_ACTION set (the sequencer's own, at rebase/cherry-pick/revert --continue) runs with --verify appended, so its hooks run, instead of being refused; commit -v/--verbose and --cleanup=scissors (commit, merge, pull, cherry-pick, revert), with which git cuts the message at the scissors line after commit-msg read it (commit gets --no-verbose first, over a stored commit.verbose, and a commit that may open an editor is refused under a stored commit.cleanup=scissors) ([git] block-no-verify)",
    },
    Rule {
        id: R::ForcePush,
        name: "block-force-push",
        blocks: "forced or destructive pushes: -f, --force*, +refspec, --mirror, --delete/-d, :ref, --prune, stored + refspecs, mirror remotes; and any deletion or non-fast-forward git itself is about to push",
        detail: "-f, --force, --force-with-lease, --force-if-includes, --mirror, --delete/-d, --prune, +refspec, :ref, a remote whose stored or inline push refspec has + or mirror = true, `remote add --mirror`, a legacy .git/remotes file with a + Push line; and, whatever the spelling, the guard's pre-push step refuses every deletion and non-fast-forward in the ref updates git computed; a remote helper's own `push +src:dst`/`push :dst`/`option force`, `send-pack --stateless-rpc` with other options than git-remote-http's or a + or : refspec (argv or stdin), and `http-push --force`/`-d`/`-D`/+/: ([git] block-force-push)",
    },
    Rule {
        id: R::GlobalConfig,
        name: "block-global-config",
        blocks: "git config --global/--system writes",
        detail: "git config --global/--system writes ([git] block-global-config)",
    },
    Rule {
        id: R::ConfigInline,
        name: "config-inline",
        blocks: "-c, --config-env, GIT_CONFIG_COUNT/KEY/VALUE and GIT_CONFIG_PARAMETERS that set hooks, includes, aliases or programs",
        detail: "-c, --config-env, GIT_CONFIG_COUNT/KEY_n/VALUE_n and GIT_CONFIG_PARAMETERS setting core.hooksPath, include.*, includeIf.*, alias.*, core.fsmonitor, editor/pager/ssh/diff/credential/gpg programs, remote.*.push with +, remote.*.mirror, remote.*.fetch whose source is an object id, receive.*, protocol.ext.allow, init.templateDir, hook.*; core.attributesFile, core.bigFileThreshold and core.whitespace, which change what a hook's own `git diff --cached` or `--check` reports; color.*=always and diff.noprefix/mnemonicPrefix/srcPrefix/dstPrefix, which change the patch a hook's own `git diff --cached` prints; core.commentChar/commentString other than `#` or `auto`, with which git's cleanup drops message lines the commit-msg hook read; commit.cleanup=scissors, which cuts the message after it",
    },
    Rule {
        id: R::ConfigWrite,
        name: "config-write",
        blocks: "git config writes (old and `git config set` syntax) of keys that move hooks, include files or run programs",
        detail: "the same keys (but alias.*) written with git config, old or `git config set` syntax; --edit; renaming or removing those sections",
    },
    Rule {
        id: R::ConfigEnv,
        name: "config-env",
        blocks: "GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG, GIT_TEMPLATE_DIR, GIT_EXEC_PATH and --exec-path=; GIT_SSH, GIT_SSH_COMMAND, GIT_PROXY_COMMAND, GIT_ASKPASS, SSH_ASKPASS",
        detail: "GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG, GIT_TEMPLATE_DIR, GIT_EXEC_PATH, --exec-path=, clone/init --template; GIT_SSH, GIT_SSH_COMMAND, GIT_PROXY_COMMAND, GIT_ASKPASS and SSH_ASKPASS, programs git would run as its child (the variables of the refused core.sshCommand, core.gitProxy and core.askPass)",
    },
    Rule {
        id: R::Plumbing,
        name: "plumbing",
        blocks: "commands that make commits or move branches without hooks: commit-tree, fast-import, replay, hash-object -t commit -w (any spelling: -wtcommit), send-pack, filter-branch, filter-repo, replace, stash store, update-ref of refs/heads/* or of HEAD while it names a branch, symbolic-ref of a ref other than HEAD or refs/remotes/* to a non-branch",
        detail: "commit-tree, fast-import, replay, hash-object -w -t commit, send-pack (but --stateless-rpc: git-remote-http(s)'s half of a push, after git push's pre-push step; the helper's own `push +src:dst`/`push :dst`/`option force`/`export`/`connect` to receive-pack are refused as it reads them, rule block-force-push), filter-branch, filter-repo, replace (but --list/--delete), stash store (stash create runs, its commit recorded as a stash's before its id is printed: git merge runs it), update-ref of refs/heads/* (and --stdin), and of HEAD unless HEAD is detached and the call says neither --no-deref nor --deref (--no-deref is then pinned first, so a HEAD made symbolic meanwhile is replaced; git worktree add runs `update-ref HEAD <oid>` in its new worktree), symbolic-ref NAME TARGET unless NAME is HEAD or under refs/remotes/ or TARGET is under refs/heads/ (a branch made to name refs/stash holds the stash commit; git 2.39 runs no reference-transaction hook for it)",
    },
    Rule {
        id: R::UnverifiedCommit,
        name: "unverified-commit",
        blocks: "commits no pre-commit hook saw: in a sandbox, a branch, a remote-tracking ref or a push taking a commit that is in no ledger of commits whose pre-commit and commit-msg passed, on no branch, and not fetched (rebase, cherry-pick, revert, am and pull have the hooks run on each such commit first); a branch moved onto a stash or notes commit (or a copy of one, or of its change merged into a file the branch changed since); rebase/cherry-pick/revert/am --continue with staged content the pre-commit hook rejects; through the broker, a partial commit (commit <paths>, --only) in a repository with pre-commit, and a commit whose message is not the one commit-msg passed",
        detail: "in a sandbox where the repository has pre-commit or commit-msg, the ledger: a commit, merge or am made on the call's private index whose message commit-msg passed is added to the broker's root-owned ledger (/run/sbx-git/ledger, kept in the git record volume); a branch or remote-tracking ref (outside a fetch from a remote) may move, and a push may send, only commits in it, on a local branch or remote-tracking ref already, or, for rebase, cherry-pick, revert, am and pull, commits whose pre-commit and commit-msg the step ran and passed on the commit's own tree and message in a private view; git commit's pre-commit runs with a private git directory whose HEAD is pinned, and the commit's parent must be that HEAD; also a branch moved onto a stash or `git notes` commit (every one the guard saw made, and every one a notes ref reaches) or a new commit with such a tree, or one that adds a line a stash or notes commit added that is neither in its first parent's tree nor added by a branch commit outside that parent's history (only lines with a letter or digit; reset, merge, cherry-pick, rebase, revert, checkout -B, branch -f, fetch into a branch, and pushes: the guard's reference-transaction and pre-push steps); rebase/cherry-pick/revert/am --continue while the index differs from HEAD, unless the repository's pre-commit hook passes on it first; git am, whose pre-applypatch and applypatch-msg steps run the repository's pre-commit and commit-msg; an automatic merge (merge, pull), whose pre-merge-commit step runs the repository's pre-commit; through the broker, commit and a --continue run on a private copy of the index (the hook and git's re-read see the copy, not a file renamed over .git/index), and a partial commit, whose second index git keeps in the git dir, is refused; through the broker commit-msg runs on a private copy of the message, and the commit's prepared step refuses a commit whose message is not what git's cleanup makes of the one the hook passed (.git/COMMIT_EDITMSG renamed over after the hook read it; a merge's .git/MERGE_MSG and am's .git/rebase-apply/final-commit too) ([git] block-no-verify)",
    },
    Rule {
        id: R::ExecOption,
        name: "exec-option",
        blocks: "options that run commands: rebase -x/--exec, submodule foreach, bisect run, difftool -x, --upload-pack/--receive-pack/--exec, ! aliases, merge strategies other than git's own, remote-ext, instaweb, web--browse, daemon --access-hook; in a sandbox, a git-<cmd> program the agent could have placed",
        detail: "rebase -x/--exec, submodule foreach, bisect run, difftool -x, --upload-pack/--receive-pack/--exec, remote.*.receivepack (push) and any remote.*.uploadpack (fetch, pull, ls-remote, remote, clone), stored or inline, `!` shell aliases; a merge strategy other than git's own (octopus, ort, ours, recursive, resolve, subtree), which is a git-merge-NAME program whose index git commits without pre-commit: -s/--strategy of merge, pull, rebase, cherry-pick and revert, pull.twohead/pull.octopus, branch.*.mergeOptions (which may not skip hooks either, stored or inline), and `git merge-NAME` itself, as git runs it; cherry-pick, revert and rebase while any config file (one written by hand included) sets a merge.NAME.driver other than `true`, or a clean/process filter while the pick renormalizes (-X renormalize, merge.renormalize), whose output the sequencer commits without pre-commit; in a sandbox, `git <cmd>` for a program outside git's exec-path unless that git-<cmd> and every PATH directory searched up to it are root's and writable by no one else (it would run as git's child, with git's group), and git itself gets only the system directories on PATH (the hooks get the caller's PATH back); remote-ext (its URL is a command), instaweb and web--browse (an httpd and a browser of the caller's choosing), daemon --access-hook",
    },
    Rule {
        id: R::GitDir,
        name: "git-dir",
        blocks: "a work tree, --prefix or cwd inside the git common dir",
        detail: "a cwd, work tree, worktree add path, clone/init directory or --prefix inside the git common dir",
    },
    Rule {
        id: R::OutputPath,
        name: "output-path",
        blocks: "options that write a file (--output, -o, bundle create, archive -o) into the git dir, a hooks directory, .husky or .agent-sandbox",
        detail: "--output=/-o of log, show, diff, format-patch (-o DIR, --output-directory), archive, bundle create, and similar, resolved against -C and cwd as git resolves them, into the git common dir, the pinned hooks directory, .husky or .agent-sandbox",
    },
    Rule {
        id: R::Husky,
        name: "husky",
        blocks: "commits while .husky has uncommitted changes or a husky init.sh/.huskyrc has content",
        detail: "commit/merge/pull/rebase/am while .husky has uncommitted changes or a husky init.sh / ~/.huskyrc has content, is not a plain file, or is reached by a relative path or through /proc or /dev (read as the hook's own process: /proc/self/environ, /proc/self/cwd)",
    },
    Rule {
        id: R::ParseError,
        name: "parse-error",
        blocks: "arguments git itself would reject or the guard cannot read: fail closed",
        detail: "an unknown global option, an unknown or ambiguous option, a missing value, an alias loop",
    },
    Rule {
        id: R::ConfigUnreadable,
        name: "config-unreadable",
        blocks: "git configuration that cannot be read: fail closed",
        detail: "git configuration the guard cannot read",
    },
    Rule {
        id: R::Internal,
        name: "internal",
        blocks: "a bug in the guard: fail closed",
        detail: "a bug in the guard",
    },
];

/// The `Rules:` section of `--help` and the man page.
pub fn help_section() -> String {
    let mut s = String::from("Rules:\n");
    for r in RULES {
        s.push_str(&format!("  {:<20} ", r.name));
        let mut col = 23;
        let mut first = true;
        for w in r.detail.split(' ') {
            if !first && col + 1 + w.len() > 76 {
                s.push_str("\n                       ");
                col = 23;
            } else if !first {
                s.push(' ');
                col += 1;
            }
            s.push_str(w);
            col += w.len();
            first = false;
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_indexed_by_its_ids() {
        assert_eq!(RULES.len(), R::ALL.len());
        for (i, r) in RULES.iter().enumerate() {
            assert_eq!(r.id as usize, i, "{}", r.name);
            assert_eq!(R::ALL[i], r.id);
        }
        let mut names: Vec<_> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len(), "duplicate rule names");
    }

    /// Every refusal in the source names its rule through `R`, never a
    /// string, so the table is the only place names live.
    #[test]
    fn no_rule_is_spelled_as_a_string_in_the_policy() {
        for (file, src) in [
            ("policy.rs", include_str!("policy.rs")),
            ("lib.rs", include_str!("lib.rs")),
            ("hooks.rs", include_str!("hooks.rs")),
        ] {
            for r in RULES {
                let quoted = format!("\"{}\"", r.name);
                assert!(
                    !src.contains(&quoted),
                    "{file} spells rule {} as a string",
                    r.name
                );
            }
        }
    }
}
