//! sbx-worktree: one shared clone per repository (the repo shelf) and one
//! worktree per branch in it, so many branch sandboxes share one object
//! store and `git push` from any of them lands in the host checkout.
//! It drives the real git binary; it never writes git's files itself.
#![forbid(unsafe_code)]

pub mod git;
pub mod lock;
pub mod shelf;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, SbxError, output};

const TOOL: &str = "sbx-worktree";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-worktree",
    version,
    about = "Provision, list and remove branch worktrees on a shared repo shelf",
    long_about = "Provision, list and remove branch worktrees on a shared repo shelf.\n\n\
        A shelf holds one clone of a repository (SHELF/repo, no checkout of its own) and one worktree \
        per branch (SHELF/worktrees/<branch>, `/` and white space in the name becoming `__`). \
        Each branch pushes to the remote `host` (the host's checkout), so a plain `git push` in a \
        worktree lands there; git's refusal to push into the host's checked-out branch stays.",
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Cmd,
}

const AFTER_HELP: &str = "\
provision is idempotent and safe to run from any number of processes at once: they take turns
on SHELF/.lock (waiting up to --lock-timeout, then exit 75). It clones from the host's `origin`
when it has one, else from the host repository itself, fetches with --prune, points `host` at
file://HOST, and creates the branch from origin/BRANCH when that exists, else from the default
branch origin/HEAD names. Run as root, every git call runs as the shelf's owner (--owner for
provision), so the agent owns its worktree and nothing runs as root.

The shelf's repository is writable by every sandbox that mounts it, so git runs with a cleared
environment, no system or user config, a private exec-path, safe.directory for exactly the
shelf's paths and the host's, and command-line overrides for every config key that runs a
program (core.hooksPath=/dev/null, core.fsmonitor=false, core.sshCommand, credential.helper, ...).
A shelf whose config names a program no override reaches (filter.*, diff.*.textconv,
merge.*.driver, remote.*.vcs, url.*.insteadOf, include.*) is refused (77, audited).

Bad input is refused before anything changes: a name git refuses (check-ref-format --branch), two
branches that would share a directory, a host path that is not a repository, a host on a detached
HEAD or without commits, a shelf owned by another user, a dirty worktree on remove without --force.

Exit status: 0 ok; 64 usage or bad branch; 65 the host repository's state (detached, unborn);
66 no such host directory; 71 git failed; 75 the shelf lock is held past --lock-timeout;
77 the shelf belongs to another user, or its config can run a program (audited).

Examples:
  sbx-worktree provision --shelf /repo-shelf --host-repo /workspace/app --branch feature/x
  sbx-worktree list --json
  sbx-worktree remove --branch feature/x --force
  sbx-worktree prune";

#[derive(Debug, Clone, Args)]
pub struct ShelfArg {
    /// The shelf directory (the repo-shelf volume inside a sandbox).
    #[arg(long, value_name = "DIR", default_value = "/repo-shelf")]
    pub shelf: PathBuf,
    /// Seconds to wait for another process's provisioning before giving up (exit 75).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub lock_timeout: u64,
}

impl ShelfArg {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.lock_timeout)
    }
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Clone (once), fetch, and create or reuse the worktree of a branch.
    Provision {
        #[command(flatten)]
        shelf: ShelfArg,
        /// The host's checkout (pushed to as the remote `host`).
        #[arg(long, value_name = "DIR")]
        host_repo: PathBuf,
        /// The branch.
        #[arg(long, value_name = "BRANCH")]
        branch: String,
        /// Hand what is created to UID:GID (when run as root; default: the caller).
        #[arg(long, value_name = "UID:GID", value_parser = parse_owner)]
        owner: Option<(u32, u32)>,
        /// Take origin's branches from the host's remote-tracking refs
        /// (origin/*, as the host last fetched them) instead of fetching
        /// origin: no network needed (sbx-run's provisioning container).
        #[arg(long)]
        origin_from_host: bool,
        /// When the branch's worktree exists (and is this branch's), change nothing:
        /// no fetch, no remote or upstream set (sbx-guest's start of a branch sandbox).
        #[arg(long)]
        keep_existing: bool,
    },
    /// List the shelf's branch worktrees.
    List {
        #[command(flatten)]
        shelf: ShelfArg,
    },
    /// Remove a branch's worktree (the branch itself stays in the clone).
    Remove {
        #[command(flatten)]
        shelf: ShelfArg,
        /// The branch.
        #[arg(long, value_name = "BRANCH")]
        branch: String,
        /// Remove it even with uncommitted changes or untracked files.
        #[arg(long)]
        force: bool,
    },
    /// Forget worktrees whose directory has vanished.
    Prune {
        #[command(flatten)]
        shelf: ShelfArg,
    },
}

fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => Err(format!("{s:?}: give numeric UID:GID, e.g. 1000:1000")),
    }
}

pub fn command() -> clap::Command {
    Cli::command()
}

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("branch {0:?}: git refuses this name (git check-ref-format --branch): pick another")]
    BadBranch(String),
    #[error(
        "branches {0:?} and {1:?} both map to {2}: rename one (`/` and white space become `__`)"
    )]
    Collision(String, String, PathBuf),
    #[error("{}: no such directory (give the host's git checkout)", .0.display())]
    NoHost(PathBuf),
    #[error("{p}: not a git repository for uid {1} (git: {2}): give the host's git checkout, readable by that uid", p = .0.display())]
    NotARepo(PathBuf, u32, String),
    #[error("{}: HEAD is detached: check out a branch on the host first (git switch main)", .0.display())]
    Detached(PathBuf),
    #[error("{}: the repository has no commits yet: commit once on the host first", .0.display())]
    Unborn(PathBuf),
    #[error("{}: no default branch (origin/HEAD is unset and `git remote set-head origin --auto` found none)", .0.display())]
    NoDefault(PathBuf),
    #[error(
        "{shelf}: owned by uid {1}, not by {2}: give a shelf of your own (or chown it)",
        shelf = .0.display()
    )]
    ForeignShelf(PathBuf, u32, u32),
    #[error(
        "{p}: {1}: a sandbox may have planted it; remove it (or the repo-shelf volume) and provision again",
        p = .0.display()
    )]
    Armed(PathBuf, String),
    #[error("{}: has uncommitted changes, untracked files or submodules: commit or stash them, or use --force", .0.display())]
    Dirty(PathBuf),
    #[error("branch {0:?}: no worktree on this shelf (sbx-worktree list shows them)")]
    NoWorktree(String),
    #[error("{p}: another process holds the shelf lock after {1} s: try again later", p = .0.display())]
    Locked(PathBuf, u64),
    #[error("`git {0}` failed: {1}")]
    Git(String, String),
    #[error("cannot run git ({0}): {1}")]
    NoGit(String, std::io::Error),
    #[error("{p}: {1}", p = .0.display())]
    Io(PathBuf, std::io::Error),
}

impl SbxError for WorktreeError {
    fn exit(&self) -> Exit {
        match self {
            Self::BadBranch(_)
            | Self::Collision(..)
            | Self::NotARepo(..)
            | Self::Dirty(_)
            | Self::NoWorktree(_) => Exit::Usage,
            Self::Detached(_) | Self::Unborn(_) | Self::NoDefault(_) => Exit::DataErr,
            Self::NoHost(_) => Exit::NoInput,
            Self::ForeignShelf(..) | Self::Armed(..) => Exit::Denied,
            Self::Locked(..) => Exit::TempFail,
            Self::Git(..) => Exit::OsErr,
            Self::NoGit(..) => Exit::Unavailable,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
        }
    }
}

pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    output::init(TOOL, &cli.common);
    let common = &cli.common;
    let mut out = std::io::stdout().lock();
    match cli.command {
        Cmd::Provision {
            shelf,
            host_repo,
            branch,
            owner,
            origin_from_host,
            keep_existing,
        } => {
            let owner = owner.unwrap_or_else(shelf::caller);
            let git = git::RealGit::new(owner)?.local_only(origin_from_host);
            let s = shelf::Shelf::new(&git, &shelf.shelf, owner)
                .origin_from_host(origin_from_host)
                .keep_existing(keep_existing);
            let r = s.provision(&host_repo, &branch, shelf.timeout())?;
            shelf::print_provisioned(&mut out, common, &r)
        }
        Cmd::List { shelf } => {
            // Root reads another user's shelf as that user.
            let git = git::RealGit::new(shelf::owner_of(&shelf.shelf))?;
            let s = shelf::Shelf::new(&git, &shelf.shelf, shelf::caller());
            s.check_config()?;
            let list = s.list()?;
            shelf::print_list(&mut out, common, &list)
        }
        Cmd::Remove {
            shelf,
            branch,
            force,
        } => {
            let git = git::RealGit::new(shelf::owner_of(&shelf.shelf))?;
            let s = shelf::Shelf::new(&git, &shelf.shelf, shelf::caller());
            let dir = s.remove(&branch, force, shelf.timeout())?;
            shelf::print_event(&mut out, common, "removed", &branch, &dir)
        }
        Cmd::Prune { shelf } => {
            let git = git::RealGit::new(shelf::owner_of(&shelf.shelf))?;
            let s = shelf::Shelf::new(&git, &shelf.shelf, shelf::caller());
            s.prune(shelf.timeout())?
                .iter()
                .try_for_each(|(b, dir)| shelf::print_event(&mut out, common, "pruned", b, dir))
        }
    }
    .map_err(|e| WorktreeError::Io("stdout".into(), e))?;
    Ok(Exit::Ok.into())
}
