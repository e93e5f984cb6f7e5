//! sbx-git-guard: installed as `git` ahead of the real one. Parses argv as
//! git does, refuses what would skip the repository's quality gates, pins
//! the hooks directory, and execs the real git.
#![forbid(unsafe_code)]

pub mod argv;
pub mod broker;
pub mod keys;
pub mod options_gen;
pub mod policy;
pub mod repo;

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

use policy::{Allow, Block, Call, Settings};

pub const TOOL: &str = "sbx-git-guard";

/// Where the image keeps the real git, off the agent's PATH.
pub const FALLBACK_REAL_GIT: &str = "/usr/libexec/sbx/git";

/// git's exec-path helpers that serve the other end of a local transport;
/// they run no hooks the guard cares about and pass straight through.
const PASS_THROUGH: &[&str] = &["receive-pack", "upload-pack", "upload-archive"];

const AFTER_HELP: &str = "\
Installed as `git` (a link named git, or git-<command> in git's exec-path),
it reads argv as git does and either refuses with exit 77 and one line on
stderr naming the rule, or execs the real git with
`-c core.hooksPath=<trusted hooks dir>` as the last global option. The
trusted dir is the common dir's `hooks`, or `.husky/_` (husky 9) or `.husky`
(husky 4-8) in a husky repository.

Rules:
  block-no-verify      --no-verify/-n where it skips hooks (commit, merge,
                       pull, rebase, am, push); HUSKY, HUSKY_SKIP_HOOKS,
                       LEFTHOOK, LEFTHOOK_EXCLUDE, SKIP and
                       PRE_COMMIT_ALLOW_NO_CONFIG are removed from git's
                       environment
  block-force-push     -f, --force, --force-with-lease, --force-if-includes,
                       --mirror, --delete/-d, --prune, +refspec, :ref, and a
                       remote whose stored push refspec has + or mirror = true
  block-global-config  git config --global/--system writes
  config-inline        -c, --config-env, GIT_CONFIG_COUNT/KEY_n/VALUE_n and
                       GIT_CONFIG_PARAMETERS setting core.hooksPath,
                       include.*, includeIf.*, alias.*, core.fsmonitor,
                       editor/pager/ssh/diff/credential/gpg programs,
                       remote.*.push with +, remote.*.mirror, receive.*,
                       protocol.ext.allow, init.templateDir, hook.*
  config-write         the same keys (but alias.*) written with git config,
                       old or `git config set` syntax; --edit; renaming or
                       removing those sections
  config-env           GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG,
                       GIT_TEMPLATE_DIR, GIT_EXEC_PATH, --exec-path=,
                       clone/init --template
  plumbing             commit-tree, fast-import, send-pack, filter-branch,
                       filter-repo, replace (but --list/--delete),
                       stash create/store, update-ref of HEAD or refs/heads/*
                       (and --stdin)
  exec-option          rebase -x/--exec, submodule foreach, bisect run,
                       difftool -x, --upload-pack/--receive-pack/--exec,
                       remote.*.receivepack, `!` shell aliases
  git-dir              a cwd, work tree, worktree add path, clone/init
                       directory or --prefix inside the git common dir
  husky                commit/merge/pull/rebase/am while .husky has
                       uncommitted changes or a husky init.sh / ~/.huskyrc
                       has content
  parse-error          an unknown global option, an unknown or ambiguous
                       option, a missing value, an alias loop
  config-unreadable    git configuration the guard cannot read
  internal             a bug in the guard

Every refusal is one audit record (policy = the rule). Options are matched
with tables generated from git 2.39 and 2.47 (`cargo xtask git-options`):
short clusters (-anm msg), attached values (-mmsg, --opt=v), unique long
prefixes (--no-veri), --no- negation and `--` are read the way
parse-options reads them, so `git commit -m -n` commits with the message
\"-n\" and `git push -n` is a dry run. Stored aliases are expanded and each
step re-checked; stored push refspecs and mirror settings are checked at
push time; configuration is read natively (system, global, local,
worktree, includes and includeIf followed), never by running git.

The real git is $SBX_REAL_GIT, else the first `git` on PATH that is not
this program, else /usr/libexec/sbx/git.

Residual risks, closed only by a server-side gate: a fresh clone has no
hooks; cherry-pick and am never run pre-commit; a commit made in another
repository can be fetched and fast-forwarded in; an agent that brings its
own git (or writes objects itself) is not stopped here. In the sandbox the
real binary is execute-only in a root-only directory and runs only through
`sbx-git-guard serve`, which decides as the caller (SO_PEERCRED) itself. Protect the remote with
receive.denyNonFastForwards, receive.denyDeletes and branch protection,
and run the same checks in CI.

Exit status: the real git's; 77 when refused; 78 for a bad sbx config;
125-127 when the real git cannot be run. `check` exits 0 (allowed) or 1
(would be refused).";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-git-guard",
    version,
    about = "A git that cannot be talked out of running the repository's hooks",
    long_about = "A git that cannot be talked out of running the repository's hooks.\n\n\
Install it as `git` ahead of the real one on PATH (and at git's exec-path); \
invoked under its own name it explains its verdicts.",
    after_long_help = AFTER_HELP
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
    Cli::command()
}

fn settings() -> Result<Settings, BoxError> {
    let loaded = sbx_core::config::discover_from_env(None)?;
    let g = &loaded.config.git;
    Ok(Settings {
        block_no_verify: g.block_no_verify,
        block_force_push: g.block_force_push,
        block_global_config: g.block_global_config,
    })
}

fn env_vec() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// `git status --porcelain -- .husky` with the real git: the one place the
/// guard runs git, and only in husky repositories.
fn husky_dirty(real: &Path) -> impl Fn(&Path) -> Option<bool> + '_ {
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
            .env_remove("GIT_CONFIG_PARAMETERS")
            .output()
            .ok()?;
        Some(!out.status.success() || !out.stdout.is_empty())
    }
}

/// The real git: `$SBX_REAL_GIT`, else the first `git` on PATH that is not
/// this file (same inode, or a copy of the same size), else the image's.
pub fn real_git(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let var = |n: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    if let Some(p) = var("SBX_REAL_GIT").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let me = std::fs::metadata("/proc/self/exe").ok();
    let is_me = |m: &std::fs::Metadata| {
        me.as_ref()
            .is_some_and(|me| (me.dev(), me.ino()) == (m.dev(), m.ino()) || me.len() == m.len())
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

fn record_block(args: &[OsString], b: &Block) {
    let target = shell_join(args);
    let op = operation(args);
    audit::append(&Record::new(TOOL, &op, &target, Outcome::Blocked, b.rule).reason(&b.reason));
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
    output::set_tool_if_unset(TOOL);
    // In the sandbox the broker decides and runs git (see broker.rs).
    if let Some(code) = broker::forward(&args, None) {
        return code;
    }
    let result = std::panic::catch_unwind(|| guard_inner(&args));
    match result {
        Ok(code) => code,
        Err(_) => refuse(
            &args,
            &Block {
                rule: "internal",
                reason: "the guard crashed; nothing was run".into(),
            },
        ),
    }
}

fn guard_inner(args: &[OsString]) -> ExitCode {
    let settings = match settings() {
        Ok(s) => s,
        Err(e) => {
            output::error(&sbx_core::entry::chain(e.as_ref()));
            return e.exit().into();
        }
    };
    let env = env_vec();
    let Some(real) = real_git(&env) else {
        output::error("the real git was not found (set SBX_REAL_GIT, or install git)");
        return Exit::NotFound.into();
    };
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => {
            output::error(&format!("cannot read the working directory: {e}"));
            return Exit::WrapperFailed.into();
        }
    };
    let call = Call {
        args,
        cwd: &cwd,
        env: &env,
        settings,
    };
    match policy::decide(&call, &husky_dirty(&real)) {
        Ok(allow) => exec(&real, allow),
        Err(b) => refuse(args, &b),
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
    let Some(real) = real_git(&env) else {
        output::error("the real git was not found");
        return Exit::NotFound.into();
    };
    let mut all = vec![OsString::from(cmd)];
    all.extend(args);
    exec(
        &real,
        Allow {
            args: all,
            env,
            command: cmd.into(),
        },
    )
}

/// How this binary was invoked: argv[0]'s basename.
pub enum Mode {
    Tool,
    Git,
    Dashed(String),
    PassThrough(String),
}

pub fn mode(argv0: &OsStr) -> Mode {
    let base = Path::new(argv0).file_name().unwrap_or(argv0).as_bytes();
    let base = String::from_utf8_lossy(base);
    if base == "git" {
        return Mode::Git;
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
        Cmd::Exec(a) => Ok(guard(a.args)),
        Cmd::Serve(a) => Ok(broker::serve(&a.socket, &a.git)?),
        Cmd::Rules => {
            for (name, what) in policy::RULES {
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
                settings: settings()?,
            };
            let real = real_git(&env).unwrap_or_else(|| PathBuf::from("git"));
            let verdict = policy::decide(&call, &husky_dirty(&real));
            if json {
                let data = match &verdict {
                    Ok(allow) => serde_json::json!({
                        "verdict": "allow",
                        "command": allow.command,
                        "exec": allow.args.iter().map(|a| String::from_utf8_lossy(a.as_bytes())).collect::<Vec<_>>(),
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
