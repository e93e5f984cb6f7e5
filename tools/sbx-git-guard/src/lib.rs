//! sbx-git-guard: installed as `git` ahead of the real one. Parses argv as
//! git does, refuses what would skip the repository's quality gates, pins
//! the hooks directory, and execs the real git.
#![forbid(unsafe_code)]

pub mod argv;
pub mod broker;
pub mod copied;
pub mod hookenv;
pub mod hooks;
pub mod index;
pub mod keys;
pub mod ledger;
pub mod msg;
pub mod options_gen;
pub mod policy;
pub mod repo;
pub mod rules;
pub mod viewrefs;

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

use policy::{Allow, Block, Call, Settings};
use rules::R;

pub const TOOL: &str = "sbx-git-guard";

/// sbx-git-client: the libc-free `git` that forwards to the broker and
/// execs this binary (found beside it) for everything else.
pub const CLIENT: &str = "sbx-git-client";

/// Where the image keeps the real git, off the agent's PATH.
pub const FALLBACK_REAL_GIT: &str = "/usr/libexec/sbx/git";

/// git's exec-path helpers that serve the other end of a local transport;
/// they run no hooks the guard cares about and pass straight through.
const PASS_THROUGH: &[&str] = &["receive-pack", "upload-pack", "upload-archive"];

const HELP_INTRO: &str = "\
Installed as `git` (a link named git, or git-<command> in git's exec-path),
it reads argv as git does and either refuses with exit 77 and one line on
stderr naming the rule, or execs the real git with
`-c core.hooksPath=<dir>` as the last global option. The repository's
trusted hooks are the common dir's `hooks`, or `.husky/_` (husky 9) or
`.husky` (husky 4-8) in a husky repository. For push, and, while the
repository has (or had) a stash, for commands that can move a branch (am, bisect,
branch, checkout, cherry-pick, fetch, merge, pull, rebase, replay, reset,
revert, stash, switch, symbolic-ref, update-ref, worktree, external
git-<cmd>), <dir> is a directory of the guard's hook steps, one for each
trusted hook plus pre-push and reference-transaction, so git starts no step
for a hook the repository lacks (/run/sbx-git/hooks/<set> in the image, made
by the broker's root process; .sbx-git-hooks.d/<set> next to this binary
elsewhere; the directory of every name, /usr/lib/sbx/hooks, when it cannot
be made): each step runs the trusted hook of the same name, and two check
first what git itself computed: pre-push refuses every
deletion and non-fast-forward among the ref updates git is about to send,
and any stash commit among the commits it sends; reference-transaction
refuses moving a branch onto a stash or `git notes` commit or a copy of
one's change (the same file contents, unless already on a branch), for
every one the guard saw made (recorded in <common dir>/sbx-stash-seen, so a
dropped stash's or deleted notes ref's commits stay refused) and every one
a refs/notes/* ref reaches. `stash`, `notes`, `merge`, `pull` and `am` are
always routed; for `am`, pre-applypatch runs the trusted pre-commit after
itself and applypatch-msg the trusted commit-msg, and for an automatic
merge pre-merge-commit runs the trusted pre-commit after itself. In a sandbox every
repository (a scratch clone, a git or common dir the agent made, a .git
made after renaming the real one) and no repository runs the workspace's
hooks: the read-only mount at /workspace/<name>/.git/hooks, wherever a
rename has moved it (from mountinfo), passed to git as /proc/self/fd/N, a
directory fd git and its hooks inherit, so no rename while git runs can
swap it.

The real git and its hooks run in a cleaned environment: one value per
variable (the first, as git's getenv reads it); BASH_ENV, ENV, SHELLOPTS,
BASHOPTS, PS4, CDPATH, IFS, exported bash functions, LD_*, NODE_OPTIONS,
PYTHONPATH, PERL5LIB/PERL5OPT, RUBYOPT, GIT_EXTERNAL_DIFF,
GIT_REPLACE_REF_BASE, GIT_PAGER_IN_USE, GIT_TEST_*, GIT_*_PATHSPECS and the hook managers'
kill switches removed; replace refs and info/grafts off (GIT_NO_REPLACE_OBJECTS=1,
GIT_GRAFT_FILE at a path that cannot exist), and so is the commit-graph
(every call gets -c core.commitGraph=false, which git exports to its hooks:
a graph the agent wrote named other parents and trees); /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin first
on PATH. diff, log, show and whatchanged get --no-ext-diff --color=auto
--src-prefix=a/ --dst-prefix=b/ first among their options (and
-c diff.renames=true, and -c core.bigFileThreshold=512m, for diff-index/-files/-tree too), so
diff.external, color.*=always, diff.renames=copies,
diff.noprefix/mnemonicPrefix or a low core.bigFileThreshold written into a
config file by hand do not change what a hook's own `git diff --cached` prints; grep
gets --basic-regexp first, so grep.patternType does not change what its pattern means; commit, merge,
pull, rebase, cherry-pick, revert and am run with -c core.commentChar=#, so
git's cleanup drops no line commit-msg read as text.

";

const HELP_TAIL: &str = "
Every refusal is one audit record (policy = the rule). Options are matched
with tables generated from git 2.39 and 2.47 (`cargo xtask git-options`):
short clusters (-anm msg), attached values (-mmsg, --opt=v), unique long
prefixes (--no-veri), --no- negation and `--` are read the way
parse-options reads them, so `git commit -m -n` commits with the message
\"-n\" and `git push -n` is a dry run. Repository discovery follows setup.c
(HEAD validated, so a decoy .git with a bad HEAD is skipped; gitdir: files
with CR/LF; GIT_DIR, GIT_COMMON_DIR, GIT_WORK_TREE, GIT_OBJECT_DIRECTORY);
aliases as alias.c (the name is everything after `alias.`, any case);
configuration natively (system, global, local, worktree, includes and
includeIf, then GIT_CONFIG_COUNT, GIT_CONFIG_PARAMETERS and -c).

The real git is the first `git` on PATH that is not this program, else
/usr/libexec/sbx/git. $SBX_REAL_GIT names it instead only OUTSIDE the
sandbox (when /.agent-sandbox is absent): inside, the agent controls the
environment.

Limits: the guard is one of three layers. (1) The guard refuses what it can
see on git's command line and in git's own ref updates; it cannot see an
agent that writes objects and refs with its own code (other content
stored under a staged blob's id, as a loose object or in a pack, while
pre-commit runs: git checks no blob's hash on reading it), a hook that calls a
script the agent can edit, or attributes (`* -diff` in .gitattributes or
.git/info/attributes) that make a hook's `git diff --cached` print `Binary
files differ` (hooks: use --text, or --name-only and read the files), or
the agent killing a hook's child (a hook runs as the agent's uid, with the
broker's group and a Landlock domain per call, so the agent cannot ptrace it
or write its memory; killing the hook itself fails the command, but a hook
that reads a child's failure as success passes: write hooks that fail
closed; a program git starts for the agent in the same call, such as
core.fsmonitor, may kill them too, but no longer trace them: the broker
starts each repository hook in a Landlock domain of its own, beside git's,
and the guard's hook step is not dumpable), or git acting
on two repositories when one is swapped in by path while it runs (the
guard's decisions hold either way: hooks pinned by fd, aliases expanded
for git, routed steps that ask git). (2) The OS layer (sbx-run) mounts
.git/hooks, .husky, .agent-sandbox and the configured protected paths
read-only; it does not stop writes to .git/config, refs or objects. (3) The boundary
check, `sbx-run verify-commits`, runs the repository's pre-commit and
commit-msg hooks on the host against every commit the sandbox added; it
sees commits, not pushes the sandbox made to other remotes. Protect the
remote as well (receive.denyNonFastForwards, receive.denyDeletes, branch
protection) and run the same checks in CI.

In the sandbox the real binary is execute-only in a root-only directory
and runs only through `sbx-git-guard serve`, a root broker that takes the
caller's uid from SO_PEERCRED and makes this same decision as the caller
before it execs git; the hook steps reach git through it too, and refuse
when it is down.

Exit status: the real git's; 77 when refused; 78 for a bad sbx config;
125-127 when the real git cannot be run. `check` exits 0 (allowed) or 1
(would be refused).";

/// The `--help`/man page text after the options: rendered from the rules
/// table, so the two cannot disagree.
pub fn after_help() -> String {
    format!("{HELP_INTRO}{}{HELP_TAIL}", rules::help_section())
}

#[derive(Debug, Parser)]
#[command(
    name = "sbx-git-guard",
    version,
    about = "A git that cannot be talked out of running the repository's hooks",
    long_about = "A git that cannot be talked out of running the repository's hooks.\n\n\
Install it as `git` ahead of the real one on PATH (and at git's exec-path); \
invoked under its own name it explains its verdicts."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Print the verdict for a git command line without running anything
    Check(GitArgs),
    /// Run a git command line through the guard (what `git ARGS` does)
    Exec(GitArgs),
    /// List every rule and what it blocks
    Rules,
    /// Create the guard's hooks directory at DIR (a link per hook to the
    /// sbx-git-client beside this binary, else to this binary); the image
    /// runs it for /usr/lib/sbx/hooks
    InstallHooks {
        /// The directory to create
        dir: PathBuf,
    },
    /// Run the real git for other users' guards (root, inside the sandbox)
    Serve(ServeArgs),
}

#[derive(Debug, ClapArgs)]
pub struct ServeArgs {
    /// The unix socket to listen on (made 0666; callers are told apart by
    /// their kernel-attested uid)
    #[arg(long, value_name = "PATH", default_value = broker::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// The real git: execute-only (0711) in a directory only root can enter
    #[arg(long, value_name = "PATH", default_value = FALLBACK_REAL_GIT)]
    pub git: PathBuf,
    /// The group (name or gid) git and its hooks run with, instead of the
    /// caller's: one no agent process has, so the agent cannot ptrace them
    #[arg(long, value_name = "GROUP", default_value = broker::DEFAULT_GROUP)]
    pub group: String,
    /// Also keep the record of stash and notes commits in PATH, a file in
    /// a directory only root can write (a volume that outlives the
    /// container): read into the run's record at start, appended to with
    /// it, so a stash made before the sandbox was made again is still
    /// refused on a branch
    #[arg(long, value_name = "PATH")]
    pub keep: Option<PathBuf>,
}

#[derive(Debug, ClapArgs)]
pub struct GitArgs {
    /// The arguments after `git`
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "GIT_ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The tool's own failures (guard mode reports refusals itself).
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

impl sbx_core::SbxError for GuardError {
    fn exit(&self) -> Exit {
        Exit::IoErr
    }
}

pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_long_help(after_help())
}

/// Inside the sandbox (sbx_core::config's test): the agent's environment
/// may not name the real git or the config there.
/// Asked once a process (a call's decision asks it a dozen times; the
/// image's root-owned paths do not come and go under a running guard).
pub fn in_sandbox() -> bool {
    static IN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IN.get_or_init(|| {
        Path::new(sbx_core::config::SANDBOX_DIR).is_dir()
            && Path::new(sbx_core::audit::SANDBOX_MARKER).exists()
    })
}

/// The `[git]` settings from `--config FILE` (explicit), else SBX_CONFIG,
/// else discovery, exactly as every sbx tool reads them.
pub fn settings_for(explicit: Option<&Path>) -> Result<Settings, BoxError> {
    let loaded = sbx_core::config::discover_from_env(explicit)?;
    let g = &loaded.config.git;
    Ok(Settings {
        block_no_verify: g.block_no_verify,
        block_force_push: g.block_force_push,
        block_global_config: g.block_global_config,
        push_non_commits: g.push_non_commits,
    })
}

fn env_vec() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// `git status --porcelain -- .husky` with the real git: the one place the
/// guard runs git, and only in husky repositories. It gets the caller's
/// environment (as judged), not this process's: in the broker's git process
/// that is the broker's own.
pub(crate) fn husky_dirty<'a>(
    real: &'a Path,
    env: &'a [(OsString, OsString)],
) -> impl Fn(&Path) -> Option<bool> + 'a {
    move |wt: &Path| {
        let out = std::process::Command::new(real)
            .arg("-C")
            .arg(wt)
            .args([
                "-c",
                "core.fsmonitor=false",
                "status",
                "--porcelain",
                "--",
                ".husky",
            ])
            .env_clear()
            .envs(broker::loader_free(hookenv::clean(env)))
            .env_remove("GIT_CONFIG_PARAMETERS")
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        Some(!out.status.success() || !out.stdout.is_empty())
    }
}

/// The real git: `$SBX_REAL_GIT` outside the sandbox only, else the first
/// `git` on PATH that is not this file (same inode, or a copy of the same
/// size), else the image's.
pub fn real_git(env: &[(OsString, OsString)], in_sandbox: bool) -> Option<PathBuf> {
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    if !in_sandbox {
        if let Some(p) = var("SBX_REAL_GIT").filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
    }
    let me = std::fs::metadata("/proc/self/exe").ok();
    // The forwarding client beside this binary is `git` too (the image's
    // /usr/bin/git): never the real one, or each would exec the other.
    let client = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| std::fs::metadata(p.with_file_name(CLIENT)).ok());
    let is_me = |m: &std::fs::Metadata| {
        let same = |o: &std::fs::Metadata| (o.dev(), o.ino()) == (m.dev(), m.ino());
        me.as_ref()
            .is_some_and(|me| same(me) || me.len() == m.len())
            || client.as_ref().is_some_and(same)
    };
    let path = var("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let cand = dir.join("git");
        if let Ok(m) = std::fs::metadata(&cand) {
            if m.is_file() && m.mode() & 0o111 != 0 && !is_me(&m) {
                return Some(cand);
            }
        }
    }
    Path::new(FALLBACK_REAL_GIT)
        .is_file()
        .then(|| PathBuf::from(FALLBACK_REAL_GIT))
}

fn shell_join(args: &[OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_bytes()).into_owned())
        .collect();
    let mut s = String::from("git");
    for w in words {
        s.push(' ');
        s.push_str(&shlex::try_quote(&w).map(|c| c.into_owned()).unwrap_or(w));
    }
    s
}

fn operation(args: &[OsString]) -> String {
    argv::globals(args)
        .ok()
        .and_then(|(_, i)| args.get(i))
        .map(|c| String::from_utf8_lossy(c.as_bytes()).into_owned())
        .unwrap_or_else(|| "git".into())
}

pub(crate) fn record_block(args: &[OsString], b: &Block) {
    record_block_for(args, b, None);
}

/// `agent`: whom a broker acted for (else this process's `SBX_AGENT`).
pub(crate) fn record_block_for(args: &[OsString], b: &Block, agent: Option<&str>) {
    let target = shell_join(args);
    let op = operation(args);
    let mut r = Record::new(TOOL, &op, &target, Outcome::Blocked, b.rule).reason(&b.reason);
    if let Some(a) = agent {
        r = r.agent(a);
    }
    // Verified by the guest and acknowledged; a failure is on stderr.
    let _ = audit::append_verified(&r);
}

fn refuse(args: &[OsString], b: &Block) -> ExitCode {
    record_block(args, b);
    output::set_tool_if_unset(TOOL);
    output::error(&b.message());
    Exit::Denied.into()
}

/// Guard mode: `git ARGS` (argv[0] is git or git-<cmd>). Never returns on
/// success: the process becomes the real git.
pub fn guard(args: Vec<OsString>) -> ExitCode {
    guard_with(args, None)
}

/// Guard mode with the tool's `--config FILE`.
pub fn guard_with(args: Vec<OsString>, config: Option<PathBuf>) -> ExitCode {
    output::set_tool_if_unset(TOOL);
    // In the sandbox the broker decides and runs git (see broker.rs).
    if let Some(code) = broker::forward(&args, None) {
        return code;
    }
    let result = std::panic::catch_unwind(|| guard_inner(&args, config.as_deref()));
    match result {
        Ok(code) => code,
        Err(_) => refuse(
            &args,
            &Block {
                rule: R::Internal.name(),
                reason: "the guard crashed; nothing was run".into(),
            },
        ),
    }
}

fn guard_inner(args: &[OsString], config: Option<&Path>) -> ExitCode {
    let settings = match settings_for(config) {
        Ok(s) => s,
        Err(e) => {
            output::error(&sbx_core::entry::chain(e.as_ref()));
            return e.exit().into();
        }
    };
    let env = env_vec();
    let sandboxed = in_sandbox();
    let Some(real) = real_git(&env, sandboxed) else {
        output::error(
            "the real git was not found (install git; outside the sandbox SBX_REAL_GIT names it)",
        );
        return Exit::NotFound.into();
    };
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => {
            output::error(&format!("cannot read the working directory: {e}"));
            return Exit::WrapperFailed.into();
        }
    };
    let found = || git_exec_path(&real);
    match decide_and_prepare(args, &env, &cwd, settings, &real, found, sandboxed, config) {
        Ok(allow) if allow.records_stash => run_recording_stash(&real, &allow).into(),
        // No broker: no group tells git's processes from the agent's.
        Ok(allow) if allow.filters_helper || allow.filters_send_pack => {
            run_filtering_helper(&real, &allow, true).into()
        }
        Ok(allow) => exec(&real, allow),
        Err(b) => refuse(args, &b),
    }
}

/// The one decision and exec setup, shared by the direct path and the
/// broker's git process so the two cannot differ: the policy's verdict, the
/// hooks routed through the guard's directory, the settings the hook steps
/// read, a loader-free environment, and pre-commit first for `--continue`.
/// `real` runs the real git from this process (a path, or the broker's fd);
/// `exec_path` is its compiled-in exec-path, asked only when needed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decide_and_prepare(
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    settings: Settings,
    real: &Path,
    exec_path: impl FnOnce() -> Option<OsString>,
    sandboxed: bool,
    config: Option<&Path>,
) -> Result<Allow, Block> {
    let env = judged_env(env, exec_path);
    let call = Call {
        args,
        cwd,
        env: &env,
        settings,
    };
    let mut allow = policy::decide(&call, &husky_dirty(real, &env))?;
    if sandboxed {
        pin_by_fd(&mut allow)?;
        if allow
            .env
            .iter()
            .any(|(k, v)| k == crate::ledger::FETCH_ENV && v == "1")
        {
            pin_global_config(&mut allow)?;
        }
        allow.moves_refs |= allow.routable;
        crate::hookenv::git_only_path(&mut allow.env);
    }
    // Looked up only when used: it costs a readlink per hook name.
    if let (true, Some((_, trusted))) = (allow.moves_refs, allow.pin.clone()) {
        match hooks::routed_dir(sandboxed, hooks::needed(&trusted, true)) {
            Some(d) => allow.route_hooks(&d),
            // In the sandbox the pre-push and reference-transaction steps
            // are not optional.
            None if sandboxed => {
                return Err(Block {
                    rule: R::Internal.name(),
                    reason: format!(
                        "the guard's hooks directory {} is missing or stale; nothing was run",
                        hooks::IMAGE_DIR
                    ),
                });
            }
            None => {}
        }
    }
    // The hook steps read the same settings the guard did.
    if let (Some(c), false) = (config, sandboxed) {
        allow.env.retain(|(k, _)| k != "SBX_CONFIG");
        allow.env.push(("SBX_CONFIG".into(), c.into()));
    }
    allow.env = broker::loader_free(allow.env);
    // In a broker's runner on a private index, pre-commit runs on the copy
    // git will commit from (`index::run_private`), not here.
    if !(broker::in_session() && index::needed(&allow)) {
        precommit_first(real, &allow)?;
    }
    Ok(allow)
}

/// A push into a repository of the sandbox (a clone pushing back into the
/// workspace) updates refs in receive-pack, where the pushing side's steps
/// do not look: the receiving repository's stash commits are recorded
/// there, not in the clone. receive-pack runs the workspace's hooks
/// through the guard's directory too, so its reference-transaction step
/// refuses a branch moved onto one of them.
pub(crate) fn route_receive_pack(allow: &mut Allow) -> Result<(), Block> {
    let fail = |reason: String| Block {
        rule: R::Internal.name(),
        reason,
    };
    let hooks = repo::sandbox_hooks()
        .ok_or_else(|| fail("the workspace's hooks mount is missing; nothing was run".into()))?;
    let mut v = OsString::from("core.hooksPath=");
    v.push(&hooks);
    allow.args.splice(0..0, [OsString::from("-c"), v]);
    allow.pin = Some((1, hooks));
    allow.moves_refs = true;
    // Not fetched: the agent can run receive-pack itself with a request it
    // wrote (a command and an empty pack, the commit already here), which
    // no pre-push step saw (a46x). A branch may move onto a tip a pushing
    // side's pre-push step let go, else only as our own moves may (pushes
    // from outside the sandbox do not reach this repository's git).
    allow
        .env
        .push((crate::ledger::RECEIVE_ENV.into(), "1".into()));
    pin_by_fd(allow)?;
    let trusted = allow
        .pin
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let dir = hooks::routed_dir(true, hooks::needed(&trusted, true)).ok_or_else(|| {
        fail(format!(
            "the guard's hooks directory {} is missing or stale; nothing was run",
            hooks::IMAGE_DIR
        ))
    })?;
    allow.route_hooks(&dir);
    Ok(())
}

/// In a sandbox the hooks mount's path can change under git (renaming
/// `.git` takes the mount along, and a fresh `.git` can take its place):
/// git gets `/proc/self/fd/N` instead, a directory fd that it, its hooks
/// and the guard's hook steps inherit, opened here and checked to be that
/// mount. husky's `.husky` is a mount point itself and cannot move.
fn pin_by_fd(allow: &mut Allow) -> Result<(), Block> {
    use std::os::fd::{AsRawFd as _, IntoRawFd as _};
    let Some((i, trusted)) = allow.pin.clone() else {
        return Ok(());
    };
    let Some(ws) = repo::sandbox_mounts() else {
        return Ok(());
    };
    if trusted != ws.hooks {
        return Ok(());
    }
    let fail = |why: String| Block {
        rule: R::Internal.name(),
        reason: format!(
            "the workspace's hooks {}: {why}; nothing was run",
            ws.hooks.display()
        ),
    };
    let fd = sbx_sys::privsep::open_dir_inherited(&ws.hooks).map_err(|e| fail(e.to_string()))?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .map_err(|e| fail(e.to_string()))?;
    let mnt = info
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse::<u64>().ok());
    if mnt != Some(ws.mount_id) {
        return Err(fail("moved while the guard looked".into()));
    }
    // Open until git (and this process) exits: exec keeps it.
    let p = PathBuf::from(format!("/proc/self/fd/{}", fd.into_raw_fd()));
    let mut v = OsString::from("core.hooksPath=");
    v.push(&p);
    allow.args[i] = v;
    allow.pin = Some((i, p));
    Ok(())
}

/// The environment as the policy judges it. Every git exports
/// GIT_EXEC_PATH to its children (setup_path), so a hook's own `git`
/// arrives with it: at the real git's own value it moves nothing and is
/// dropped; any other value stays for the policy to refuse.
pub(crate) fn judged_env(
    env: &[(OsString, OsString)],
    exec_path: impl FnOnce() -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let env = without_pinned_global(env);
    if !env.iter().any(|(k, _)| k == "GIT_EXEC_PATH") {
        return env;
    }
    let own = exec_path();
    env.into_iter()
        .filter(|(k, v)| !(k == "GIT_EXEC_PATH" && Some(v) == own.as_ref()))
        .collect()
}

/// A fetch's git reads the per-user configuration from the copy the guard
/// checked ([`pin_global_config`]), `GIT_CONFIG_GLOBAL=/proc/self/fd/N`,
/// and passes the variable on to its children, whose own git calls come
/// back here without that fd. Dropped, the variable leaves git reading the
/// default files, which is what it would do without it: nothing moves.
pub(crate) fn without_pinned_global(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    env.iter()
        .filter(|(k, v)| {
            !(k == "GIT_CONFIG_GLOBAL"
                && v.as_bytes()
                    .strip_prefix(b"/proc/self/fd/")
                    .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit)))
        })
        .cloned()
        .collect()
}

/// A fetch or pull from a remote counts as fetched for the ledger
/// (ledger.rs FETCH_ENV), so its refspecs must not name a local commit by
/// id. Those on its command line and inline are checked; those in the
/// per-user files (`$XDG_CONFIG_HOME/git/config`, `~/.gitconfig`) are the
/// agent's to rewrite between a check and git's own read (a46x). So git
/// reads them from a sealed copy of what the guard checked, by
/// `GIT_CONFIG_GLOBAL=/proc/self/fd/N`; an include there, which git would
/// read later, is refused. The repository's and the system's files are
/// read-only in the sandbox.
fn pin_global_config(allow: &mut Allow) -> Result<(), Block> {
    use gix_config::file::Metadata;
    use std::io::Write as _;
    use std::os::fd::IntoRawFd as _;
    let var = |n: &str| {
        allow
            .env
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|v| !v.as_os_str().is_empty())
    };
    let fail = |why: String| Block {
        rule: R::ConfigUnreadable.name(),
        reason: why,
    };
    let home = var("HOME").unwrap_or_else(|| PathBuf::from("/"));
    let xdg = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let mut bytes = Vec::new();
    for path in [xdg.join("git/config"), home.join(".gitconfig")] {
        let content = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(fail(format!("{}: {e}", path.display()))),
        };
        let cfg = gix_config::File::from_bytes_no_includes(
            &content,
            Metadata::from(gix_config::Source::User),
            Default::default(),
        )
        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        let at = path.display();
        for sec in cfg.sections() {
            let name = sec.header().name().to_string().to_ascii_lowercase();
            if name == "include" || name == "includeif" {
                return Err(Block {
                    rule: R::ConfigInline.name(),
                    reason: format!(
                        "{at} includes another file, which git would read after the guard checked this one; copy what it holds into {at}"
                    ),
                });
            }
            if name != "remote" {
                continue;
            }
            for v in sec.values("fetch") {
                let v = v.to_string();
                if crate::keys::refspec_by_id(&v) {
                    let r = sec.header().subsection_name().map(|n| n.to_string());
                    return Err(Block {
                        rule: R::ConfigInline.name(),
                        reason: format!(
                            "remote.{}.fetch = {v} in {at}: a fetch refspec whose source is an object id makes a local commit look fetched; remove it",
                            r.unwrap_or_default()
                        ),
                    });
                }
            }
        }
        bytes.extend_from_slice(&content);
        bytes.push(b'\n');
    }
    let sealed = || -> std::io::Result<std::os::fd::OwnedFd> {
        use nix::fcntl::{FcntlArg, SealFlag, fcntl};
        use nix::sys::memfd::{MFdFlags, memfd_create};
        // Not close-on-exec: git inherits it.
        let fd = memfd_create(c"sbx-global-config", MFdFlags::MFD_ALLOW_SEALING)?;
        let mut f = std::fs::File::from(fd);
        f.write_all(&bytes)?;
        let fd = std::os::fd::OwnedFd::from(f);
        fcntl(
            &fd,
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_WRITE
                    | SealFlag::F_SEAL_GROW
                    | SealFlag::F_SEAL_SHRINK
                    | SealFlag::F_SEAL_SEAL,
            ),
        )?;
        Ok(fd)
    };
    let fd = sealed().map_err(|e| fail(format!("the per-user configuration's copy: {e}")))?;
    // Open until git (and this process) exits: exec keeps it.
    let p = format!("/proc/self/fd/{}", fd.into_raw_fd());
    allow.env.retain(|(k, _)| k != "GIT_CONFIG_GLOBAL");
    allow.env.push(("GIT_CONFIG_GLOBAL".into(), p.into()));
    Ok(())
}

/// The real git's compiled-in exec-path, asked of the binary itself.
pub(crate) fn git_exec_path(real: &Path) -> Option<OsString> {
    let out = std::process::Command::new(real)
        .arg("--exec-path")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let mut v = out.stdout;
    while v.last() == Some(&b'\n') {
        v.pop();
    }
    (out.status.success() && !v.is_empty()).then(|| OsString::from_vec(v))
}

/// A sequencer `--continue` commits whatever is staged without pre-commit:
/// when the index differs from HEAD, run the repository's pre-commit on it
/// first (as `git commit` would) and refuse if it fails.
pub fn precommit_first(real: &Path, allow: &Allow) -> Result<(), Block> {
    if !allow.precommit_first {
        return Ok(());
    }
    let Some((_, trusted)) = &allow.pin else {
        return Ok(());
    };
    let mut pin = OsString::from("core.hooksPath=");
    pin.push(trusted);
    let idx = allow.pin.as_ref().map_or(0, |(i, _)| i + 1);
    // The caller's globals (-C, --git-dir, ...) up to and including the pin.
    let globals = &allow.args[..idx.min(allow.args.len())];
    // The hook runs with the caller's PATH, as the broker starts hooks.
    let env = crate::hookenv::for_hooks(allow.env.clone());
    let run = |extra: &[&str]| {
        std::process::Command::new(real)
            .args(globals)
            .arg("-c")
            .arg(&pin)
            .args(extra)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .status()
    };
    let same = run(&["diff", "--cached", "--quiet", "HEAD", "--"]);
    if same.is_ok_and(|s| s.success()) {
        return Ok(());
    }
    match run(&["hook", "run", "--ignore-missing", "pre-commit"]) {
        Ok(s) if s.success() => Ok(()),
        _ => Err(Block {
            rule: rules::R::UnverifiedCommit.name(),
            reason: format!(
                "the staged changes `git {} --continue` would commit fail the pre-commit hook",
                allow.command
            ),
        }),
    }
}

/// `git stash create` makes a commit no hook saw and prints its id: run
/// git as a child, record each id in `<common dir>/sbx-stash-seen` (where
/// the reference-transaction and pre-push steps look), and only then pass
/// the output on. Nothing recorded, nothing printed: the caller never
/// learns an id the steps do not know. The common dir is held by fd and
/// given to git as `GIT_COMMON_DIR=/proc/self/fd/N`: the commit's object
/// lands in the one whose list records it, even if the repository's path
/// is swapped (a `GIT_DIR` symlink, a renamed `.git`) while git runs.
pub(crate) fn run_recording_stash(real: &Path, allow: &Allow) -> u8 {
    use std::os::fd::AsRawFd as _;
    let Some(common) = allow.repo.as_ref().map(|r| r.common_dir.clone()) else {
        output::error("git stash create outside a repository: nothing to record it in");
        return Exit::Denied.code();
    };
    let pinned = match sbx_sys::privsep::open_dir_inherited(&common) {
        Ok(fd) => fd,
        Err(e) => {
            output::error(&format!("{}: {e}; nothing was run", common.display()));
            return Exit::Denied.code();
        }
    };
    let common = PathBuf::from(format!("/proc/self/fd/{}", pinned.as_raw_fd()));
    let mut argv = allow.args.iter();
    let out = std::process::Command::new(real)
        .args(argv.by_ref())
        .env_clear()
        .envs(
            allow
                .env
                .iter()
                .filter(|(k, _)| k != "GIT_COMMON_DIR")
                .map(|(k, v)| (k, v)),
        )
        .env("GIT_COMMON_DIR", &common)
        .stdout(std::process::Stdio::piped())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            output::error(&format!("cannot run the real git: {e}"));
            return Exit::CannotInvoke.code();
        }
    };
    let ids: Vec<u8> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| l.len() >= 40 && l.iter().all(u8::is_ascii_hexdigit))
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    if !ids.is_empty() {
        let rec = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(common.join(hooks::SEEN_FILE))
            .and_then(|mut f| f.write_all(&ids));
        if let Err(e) = rec {
            output::error(&format!(
                "cannot record the stash commit in {}: {e}; its id is withheld",
                hooks::SEEN_FILE
            ));
            return Exit::Denied.code();
        }
        if let Err(e) = hooks::record_shared(&allow.env, &ids) {
            output::error(&format!("{e}; its id is withheld"));
            return Exit::Denied.code();
        }
    }
    if std::io::stdout().write_all(&out.stdout).is_err() {
        return Exit::IoErr.code();
    }
    match out.status.code() {
        Some(c) => u8::try_from(c).unwrap_or(1),
        None => 128u8.saturating_add(
            std::os::unix::process::ExitStatusExt::signal(&out.status)
                .and_then(|s| u8::try_from(s).ok())
                .unwrap_or(0),
        ),
    }
}

/// Why a remote helper may not get this command line: a forced push
/// (`push +src:dst`, or `option force`/`option cas` before it), a deletion
/// (`push :dst`), an `export` stream, or a raw connection to the remote's
/// receive-pack. `git push` sends these only past its pre-push step, which
/// refuses them; a caller that drives the helper itself skips that step.
/// `by_git`: the caller is one of git's own processes (the broker's word);
/// any other may not push through a helper at all, since neither the
/// repository's pre-push nor the guard's step would see what it sends.
fn helper_line_refused(line: &[u8], by_git: bool) -> Option<&'static str> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let word = |w: &[u8]| line == w || line.starts_with(&[w, b" "].concat());
    if let Some(spec) = line.strip_prefix(b"push ") {
        if !by_git {
            return Some("a push that is not `git push`'s (no pre-push step saw it)");
        }
        if spec.starts_with(b"+") {
            return Some("a forced push");
        }
        if spec.starts_with(b":") {
            return Some("a deletion on the remote");
        }
        return None;
    }
    if line.starts_with(b"option force ") || line.starts_with(b"option cas ") {
        return Some("a forced push");
    }
    if word(b"export") {
        return Some("an export stream, which can force or delete");
    }
    if (line.starts_with(b"connect ") || line.starts_with(b"stateless-connect "))
        && line.ends_with(b"receive-pack")
    {
        return Some("a raw connection to the remote's receive-pack");
    }
    None
}

/// A remote helper, run as a child with its command stream passed through
/// here line by line (until a `connect`/`stateless-connect` to fetch turns it
/// into a raw stream): a line [`helper_line_refused`] names stops the helper
/// before it gets the line (a batch is only acted on at its blank line).
/// A forcing or deleting request read on its way to git: git is stopped,
/// and the refusal recorded and printed as the guard's own.
fn refuse_forcing(child: &mut std::process::Child, allow: &Allow, reason: String) -> u8 {
    let _ = child.kill();
    let _ = child.wait();
    let b = policy::Block {
        rule: R::ForcePush.name(),
        reason,
    };
    let mut words = vec![OsString::from("git")];
    words.extend(allow.args.iter().cloned());
    record_block(&words, &b);
    output::error(&b.message());
    Exit::Denied.code()
}

pub(crate) fn run_filtering_helper(real: &Path, allow: &Allow, by_git: bool) -> u8 {
    use std::io::BufRead as _;
    let child = std::process::Command::new(real)
        .args(&allow.args)
        .env_clear()
        .envs(allow.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            output::error(&format!("cannot run the real git: {e}"));
            return Exit::CannotInvoke.code();
        }
    };
    let Some(mut to) = child.stdin.take() else {
        return Exit::CannotInvoke.code();
    };
    // Only the helper holds its stdout: git reads it to EOF (a helper that
    // died) before it closes the helper's stdin, which this loop waits on.
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
    if null
        .and_then(|n| Ok(nix::unistd::dup2_stdout(&n)?))
        .is_err()
    {
        let _ = child.kill();
        let _ = child.wait();
        return Exit::CannotInvoke.code();
    }
    let mut from = std::io::BufReader::new(std::io::stdin().lock());
    let mut raw = false;
    // The client that handed git's pipes to the broker holds them until the
    // broker answers: once the helper is gone, stop waiting for git's input.
    let pidfd = i32::try_from(child.id())
        .ok()
        .and_then(|p| sbx_sys::privsep::pidfd_open(nix::unistd::Pid::from_raw(p)).ok());
    if allow.filters_send_pack {
        // pkt-lines, each a refspec, up to a flush; then the remote's
        // advertisement and the rest, passed on as they come.
        loop {
            let mut len = [0u8; 4];
            if std::io::Read::read_exact(&mut from, &mut len).is_err() {
                break;
            }
            let n = std::str::from_utf8(&len)
                .ok()
                .and_then(|h| usize::from_str_radix(h, 16).ok());
            let mut payload = Vec::new();
            match n {
                Some(0) => {
                    let _ = to.write_all(&len);
                    break;
                }
                Some(n) if n >= 4 => {
                    payload.resize(n - 4, 0);
                    if std::io::Read::read_exact(&mut from, &mut payload).is_err() {
                        break;
                    }
                }
                _ => payload.clear(),
            }
            let spec = payload.strip_suffix(b"\n").unwrap_or(&payload);
            if n.is_none_or(|n| n < 4) || spec.starts_with(b"+") || spec.starts_with(b":") {
                return refuse_forcing(
                    &mut child,
                    allow,
                    format!(
                        "git send-pack was given the refspec `{}`, which forces or deletes",
                        String::from_utf8_lossy(spec)
                    ),
                );
            }
            if !by_git {
                return refuse_forcing(
                    &mut child,
                    allow,
                    format!(
                        "git send-pack was given the refspec `{}` by a caller that is not `git push` (no pre-push step saw it)",
                        String::from_utf8_lossy(spec)
                    ),
                );
            }
            if to
                .write_all(&len)
                .and_then(|()| to.write_all(&payload))
                .is_err()
            {
                break;
            }
        }
        raw = true;
    }
    loop {
        if from.buffer().is_empty() {
            if let Some(pf) = &pidfd {
                use std::os::fd::AsFd as _;
                let stdin = std::io::stdin();
                match sbx_sys::privsep::poll_readable(&[stdin.as_fd(), pf.as_fd()]) {
                    Ok(r) if r.get(1) == Some(&true) => break,
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        if raw {
            let n = match from.fill_buf() {
                Ok([]) | Err(_) => break,
                Ok(b) => {
                    if to.write_all(b).is_err() {
                        break;
                    }
                    b.len()
                }
            };
            from.consume(n);
            continue;
        }
        let mut line = Vec::new();
        match from.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Some(why) = helper_line_refused(&line, by_git) {
            return refuse_forcing(
                &mut child,
                allow,
                format!(
                    "the remote helper was asked for {why} (`{}`), which the pre-push checks refuse",
                    String::from_utf8_lossy(line.trim_ascii_end())
                ),
            );
        }
        raw = line.starts_with(b"connect ") || line.starts_with(b"stateless-connect ");
        if to.write_all(&line).is_err() {
            break;
        }
    }
    drop(to);
    match child.wait() {
        Ok(st) => match st.code() {
            Some(c) => u8::try_from(c).unwrap_or(1),
            None => 128u8.saturating_add(
                std::os::unix::process::ExitStatusExt::signal(&st)
                    .and_then(|s| u8::try_from(s).ok())
                    .unwrap_or(0),
            ),
        },
        Err(_) => Exit::CannotInvoke.code(),
    }
}

fn exec(real: &Path, allow: Allow) -> ExitCode {
    let mut argv: Vec<OsString> = Vec::with_capacity(allow.args.len() + 1);
    argv.push("git".into());
    argv.extend(allow.args);
    let err = sbx_sys::exec(real, &argv, &allow.env);
    output::error(&format!("cannot run {}: {err}", real.display()));
    if err.kind() == std::io::ErrorKind::NotFound {
        Exit::NotFound.into()
    } else {
        Exit::CannotInvoke.into()
    }
}

/// Pass-through for git-receive-pack and friends.
pub fn pass_through(cmd: &str, args: Vec<OsString>) -> ExitCode {
    if let Some(code) = broker::forward(&args, Some(cmd)) {
        return code;
    }
    let env = env_vec();
    let Some(real) = real_git(&env, in_sandbox()) else {
        output::error("the real git was not found");
        return Exit::NotFound.into();
    };
    // Outside a sandbox no group is at stake: git's own GIT_EXEC_PATH
    // (a local push) is taken as is.
    let own = env
        .iter()
        .find(|(k, _)| k == "GIT_EXEC_PATH" && !in_sandbox())
        .map(|(_, v)| v.as_os_str());
    if let Err(b) = policy::check_pass_through_env(&env, own) {
        let mut words = vec![OsString::from(cmd)];
        words.extend(args);
        record_block(&words, &b);
        output::error(&b.message());
        return Exit::Denied.into();
    }
    let mut all = vec![OsString::from(cmd)];
    all.extend(args);
    exec(
        &real,
        Allow {
            args: all,
            env: hookenv::pass_through(hookenv::clean(&env), in_sandbox()),
            command: cmd.into(),
            pin: None,
            moves_refs: false,
            precommit_first: false,
            records_stash: false,
            filters_helper: false,
            filters_send_pack: false,
            repo: None,
            routable: false,
            builds_tree: false,
        },
    )
}

/// How this binary was invoked: argv[0]'s basename.
pub enum Mode {
    Tool,
    Git,
    Dashed(String),
    PassThrough(String),
    /// A link in the guard's hooks directory (`pre-push`, ...).
    Hook(String),
}

pub fn mode(argv0: &OsStr) -> Mode {
    let base = Path::new(argv0).file_name().unwrap_or(argv0).as_bytes();
    let base = String::from_utf8_lossy(base);
    if base == "git" {
        return Mode::Git;
    }
    if hooks::is_hook_name(&base) {
        return Mode::Hook(base.into_owned());
    }
    match base.strip_prefix("git-") {
        Some(cmd) if PASS_THROUGH.contains(&cmd) => Mode::PassThrough(cmd.to_owned()),
        Some(cmd) => Mode::Dashed(cmd.to_owned()),
        None => Mode::Tool,
    }
}

/// The tool's own CLI (`sbx-git-guard check|exec|rules`).
pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    output::init(TOOL, &cli.common);
    let json = cli.common.json;
    let mut stdout = std::io::stdout().lock();
    match cli.cmd {
        Cmd::Exec(a) => Ok(guard_with(a.args, cli.common.config.clone())),
        Cmd::InstallHooks { dir } => {
            let exe = std::fs::canonicalize("/proc/self/exe").map_err(GuardError::from)?;
            hooks::install(&dir, &exe).map_err(GuardError::from)?;
            Ok(Exit::Ok.into())
        }
        Cmd::Serve(a) => Ok(broker::serve(
            &a.socket,
            &a.git,
            &a.group,
            a.keep.as_deref(),
        )?),
        Cmd::Rules => {
            for r in policy::RULES {
                let (name, what) = (r.name, r.blocks);
                if json {
                    output::json_line(
                        &mut stdout,
                        "rule",
                        &serde_json::json!({"name": name, "blocks": what}),
                    )
                    .map_err(GuardError::from)?;
                } else {
                    writeln!(stdout, "{name:<20} {what}").map_err(GuardError::from)?;
                }
            }
            Ok(Exit::Ok.into())
        }
        Cmd::Check(a) => {
            let env = env_vec();
            let cwd = std::env::current_dir().map_err(GuardError::from)?;
            let call = Call {
                args: &a.args,
                cwd: &cwd,
                env: &env,
                settings: settings_for(cli.common.config.as_deref())?,
            };
            let real = real_git(&env, in_sandbox()).unwrap_or_else(|| PathBuf::from("git"));
            let verdict = policy::decide(&call, &husky_dirty(&real, &env));
            if json {
                let data = match &verdict {
                    Ok(allow) => serde_json::json!({
                        "verdict": "allow",
                        "command": allow.command,
                        "exec": allow.args.iter().map(|a| String::from_utf8_lossy(a.as_bytes())).collect::<Vec<_>>(),
                        "git_dir": allow.repo.as_ref().map(|r| r.git_dir.to_string_lossy().into_owned()),
                        "common_dir": allow.repo.as_ref().map(|r| r.common_dir.to_string_lossy().into_owned()),
                        "work_tree": allow.repo.as_ref().and_then(|r| r.work_tree.as_ref()).map(|w| w.to_string_lossy().into_owned()),
                    }),
                    Err(b) => serde_json::json!({
                        "verdict": "block", "rule": b.rule, "reason": b.reason,
                    }),
                };
                output::json_line(&mut stdout, "verdict", &data).map_err(GuardError::from)?;
            } else if !output::is_quiet() {
                match &verdict {
                    Ok(allow) => {
                        let mut words = vec![OsString::from("git")];
                        words.extend(allow.args.iter().cloned());
                        writeln!(stdout, "allow: {}", shell_join(&words[1..]))
                            .map_err(GuardError::from)?;
                    }
                    Err(b) => writeln!(stdout, "block {}: {}", b.rule, b.reason)
                        .map_err(GuardError::from)?,
                }
            }
            Ok(if verdict.is_ok() { Exit::Ok } else { Exit::No }.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::helper_line_refused;

    /// Only the guard's own pin is dropped (git then reads the default
    /// files); any other GIT_CONFIG_GLOBAL stays for the policy to refuse.
    #[test]
    fn only_a_pinned_global_config_is_dropped() {
        for (v, dropped) in [
            ("/proc/self/fd/7", true),
            ("/proc/self/fd/12", true),
            ("/proc/self/fd/", false),
            ("/proc/self/fd/7/x", false),
            ("/proc/1/fd/7", false),
            ("/home/agent/.evil", false),
        ] {
            let env = vec![
                ("GIT_CONFIG_GLOBAL".into(), v.into()),
                ("A".into(), "b".into()),
            ];
            let kept = super::without_pinned_global(&env);
            assert_eq!(kept.len(), if dropped { 1 } else { 2 }, "{v}");
        }
    }

    #[test]
    fn helper_commands_that_force_or_delete_are_refused() {
        for l in [
            "push +refs/heads/main:refs/heads/main\n",
            "push :refs/heads/main\n",
            "option force true\n",
            "option cas refs/heads/main:abc\n",
            "export\n",
            "connect git-receive-pack\n",
            "stateless-connect git-receive-pack\n",
        ] {
            assert!(helper_line_refused(l.as_bytes(), true).is_some(), "{l}");
        }
        for l in [
            "capabilities\n",
            "list for-push\n",
            "push refs/heads/main:refs/heads/main\n",
            "option progress false\n",
            "stateless-connect git-upload-pack\n",
            "fetch 0123 refs/heads/main\n",
            "\n",
        ] {
            assert!(helper_line_refused(l.as_bytes(), true).is_none(), "{l}");
        }
        // From a caller that is not git: no push at all, fetches still.
        assert!(helper_line_refused(b"push refs/heads/main:refs/heads/main\n", false).is_some());
        for l in [
            "capabilities\n",
            "list\n",
            "fetch 0123 refs/heads/main\n",
            "\n",
        ] {
            assert!(helper_line_refused(l.as_bytes(), false).is_none(), "{l}");
        }
    }
}
