//! Shared foundation of the sbx tools: one config schema, one audit log, one
//! exit-code table, one way to start a binary. Every tool links this crate.
#![forbid(unsafe_code)]

pub mod apt;
#[cfg(feature = "full")]
pub mod audit;
#[cfg(feature = "full")]
pub mod backup;
pub mod cli;
#[cfg(feature = "full")]
pub mod config;
pub mod entry;
pub mod error;
pub mod exit;
#[cfg(feature = "full")]
pub mod glob;
#[cfg(feature = "full")]
pub mod guestapi;
#[cfg(feature = "full")]
pub mod hosttools;
#[cfg(feature = "full")]
pub mod netblock;
#[cfg(feature = "full")]
pub mod netrules;
pub mod output;
pub mod sanitize;
#[cfg(feature = "full")]
pub mod secrets;
#[cfg(feature = "full")]
pub mod tree;

pub use entry::main;
pub use error::{IoContext, SbxError};
pub use exit::Exit;

/// A branch name as a path or name part: `/` and white space become `__`.
/// sbx-run names containers and worktree directories with
/// it, and sbx-worktree makes those directories: one function, one spelling.
pub fn sanitize_branch(branch: &str) -> String {
    let mut out = String::new();
    for c in branch.chars() {
        if c == '/' || c.is_whitespace() {
            out.push_str("__");
        } else {
            out.push(c);
        }
    }
    out
}

/// The merge strategies git has itself (merge.c's `all_strategy`). Any
/// other name makes git run `git-merge-NAME` (from PATH, or a path when it
/// holds `/`), a program of the caller's choosing, and commit whatever it
/// leaves in the index without pre-commit (merge, pull, and the
/// sequencer: rebase, cherry-pick, revert).
pub const GIT_MERGE_STRATEGIES: &[&str] =
    &["octopus", "ort", "ours", "recursive", "resolve", "subtree"];

/// The files bash and zsh read at start in a home, which Claude Code's
/// shell snapshot also reads: the guest pins them under `[tools]` and the
/// checker refuses writes to them.
pub const SHELL_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".bash_logout",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
];

#[cfg(test)]
mod tests {
    #[test]
    fn branch_names_lose_slashes_and_white_space() {
        assert_eq!(super::sanitize_branch("a/b c\td"), "a__b__c__d");
    }
}
