//! The decision: given git's argv, the working directory and the
//! environment, either the exact argv and environment to exec the real git
//! with (hooks pinned), or a refusal naming the rule.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::argv::{self, Args, Global, ParseError};
use crate::keys::{self, Via};
use crate::options_gen::{BUILTINS_ALL, BUILTINS_ANY, TABLES};
use crate::repo::{self, Repo, SetupEnv};

pub use crate::rules::{R, RULES};

/// Hook-manager kill switches and the rest of what hooks must not inherit.
pub use crate::hookenv::STRIPPED as STRIPPED_ENV;

/// A rule's name, for callers outside the policy (hook steps, the broker).
pub fn rule(r: R) -> &'static str {
    r.name()
}

/// What the `[git]` table of the sbx config switches.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub block_no_verify: bool,
    pub block_force_push: bool,
    pub block_global_config: bool,
    pub push_non_commits: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            block_no_verify: true,
            block_force_push: true,
            block_global_config: true,
            push_non_commits: false,
        }
    }
}

/// A refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub rule: &'static str,
    pub reason: String,
}

const ASK: &str = "ask the user to run it outside the sandbox";

fn block(rule: R, reason: impl Into<String>) -> Block {
    Block {
        rule: rule.name(),
        reason: reason.into(),
    }
}

/// What to exec.
#[derive(Debug, Clone)]
pub struct Allow {
    /// Arguments after `git`, with `-c core.hooksPath=…` as the last global.
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// The subcommand, for logs.
    pub command: String,
    /// Where `args` pins the hooks: the index of the `core.hooksPath=` value
    /// and the repository's trusted hooks directory.
    pub pin: Option<(usize, PathBuf)>,
    /// The command (after aliases) can move refs: route hooks through the
    /// guard's own directory (`Allow::route_hooks`) so its pre-push and
    /// reference-transaction steps run.
    pub moves_refs: bool,
    /// A sequencer `--continue`: run the repository's pre-commit on the
    /// index first when it differs from HEAD (`lib::precommit_first`).
    pub precommit_first: bool,
    /// `git stash create`: run git as a child and record the commit it
    /// prints in `<common dir>/sbx-stash-seen` before the caller sees its id
    /// (`lib::run_recording_stash`). git merge runs it for itself.
    pub records_stash: bool,
    /// A remote helper (`git remote-https`): its command stream is read
    /// before the helper gets it (`lib::run_filtering_helper`), since a
    /// caller other than `git push` can ask it to force or delete.
    pub filters_helper: bool,
    /// `send-pack --stateless-rpc`: the refspecs it reads on stdin are
    /// read by the guard first (`lib::run_filtering_helper`).
    pub filters_send_pack: bool,
    /// The repository git will act on, as the guard found it.
    pub repo: Option<Repo>,
    /// The command (after aliases) is one `moves_refs` routes when the
    /// repository has a stash: in a sandbox it is routed whatever the
    /// guard saw, since the repository can be swapped after its look.
    pub routable: bool,
    /// `commit`, and a sequencer `--continue` that runs
    /// pre-commit first: git builds the commit's tree from the index it
    /// reads after the pre-commit hook; a broker runs it on a private index
    /// (`index::run_private`).
    pub builds_tree: bool,
}

impl Allow {
    /// Point the pin at the guard's hooks directory, which runs the trusted
    /// hooks and tells them apart by `SBX_GUARD_TRUSTED_HOOKS`.
    pub fn route_hooks(&mut self, guard_dir: &Path) {
        if self.moves_refs {
            self.pin_to(guard_dir);
        }
    }

    /// Point the pin at the guard's hooks directory only so that its steps
    /// start the repository's hooks through the broker: without the
    /// pre-push and reference-transaction checks, which this command does
    /// not need.
    pub fn route_hooks_only(&mut self, guard_dir: &Path) {
        if self.pin_to(guard_dir) {
            self.env
                .push((crate::hooks::HOOKS_ONLY_ENV.into(), "1".into()));
        }
    }

    /// The pinned hooks path becomes `guard_dir`, the trusted one passed on
    /// in the environment; false when nothing is pinned.
    fn pin_to(&mut self, guard_dir: &Path) -> bool {
        let Some((i, trusted)) = &self.pin else {
            return false;
        };
        let mut v = OsString::from("core.hooksPath=");
        v.push(guard_dir);
        self.args[*i] = v;
        self.env
            .push((crate::hooks::TRUSTED_ENV.into(), trusted.clone().into()));
        true
    }
}

/// Builtins that can move a branch (or push) other than by a commit that
/// runs pre-commit: their hooks are routed through the guard's directory.
/// `commit` too: a `MERGE_HEAD` written by hand makes any commit a parent
/// (its step then judges the parents: `hooks::COMMIT_ENV`).
/// Every other builtin keeps the repository's hooks directly, sparing the
/// hook steps (one process per hook run) on the hot path; an unknown
/// (external) command is routed.
const ROUTED: &[&str] = &[
    "am",
    "bisect",
    "branch",
    "checkout",
    "cherry-pick",
    "commit",
    "fetch",
    "merge",
    "pull",
    "push",
    "rebase",
    // Run by hand with a request the agent wrote, it updates refs no
    // pushing side's pre-push step saw (ledger.rs RECEIVE_ENV).
    "receive-pack",
    "replay",
    "reset",
    "revert",
    "stash",
    "switch",
    "symbolic-ref",
    "update-ref",
    "worktree",
];

/// Does a `fetch` or `pull` (`args`, after the command, parsed with
/// `cmd`'s options) bring only the remote's commits? Its repository
/// operand: `.`, a path or a `file:` URL is local (`git fetch . C:refs/heads/x`
/// would make any local commit "fetched"); none (the configured remote) or
/// a name or a network URL is a remote. Read as parse-options reads it (an
/// option's separate value, `--depth 1 .`, is no operand), and a refspec
/// whose source is an object id is not fetched either: git copies nothing
/// for an id it already has and moves the ref (`git fetch origin
/// C:refs/heads/x`, `git pull origin C`), nor are refspecs read from
/// `--stdin`. Unparsable: not fetched (the ledger check then applies). A remote whose configured URL is local is
/// not told apart here (the boundary check's).
fn fetches_from_remote(cmd: &str, args: &[OsString]) -> bool {
    let Ok(parsed) = argv::parse(args, table(cmd), false) else {
        return false;
    };
    // `fetch --stdin` reads more refspecs from its input, which the guard
    // does not see.
    if parsed.has("stdin") {
        return false;
    }
    let mut operands = parsed.positional.iter().map(|a| a.to_string_lossy());
    let Some(first) = operands.next() else {
        return true;
    };
    let local = first == "."
        || first.starts_with('/')
        || first.starts_with("./")
        || first.starts_with("../")
        || first.starts_with("~")
        || first.starts_with("file:")
        || std::path::Path::new(first.as_ref()).exists();
    !local && !operands.any(|spec| crate::keys::refspec_by_id(&spec))
}

/// The inputs of one decision.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub args: &'a [OsString],
    pub cwd: &'a Path,
    pub env: &'a [(OsString, OsString)],
    pub settings: Settings,
}

impl Call<'_> {
    /// git's `getenv`: the FIRST entry of a duplicated name wins.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }
}

fn s(o: &OsStr) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(o.as_bytes())
}

/// The state built up while reading globals (and alias globals).
struct Ctx<'a> {
    call: &'a Call<'a>,
    cwd: PathBuf,
    git_dir: Option<OsString>,
    work_tree: Option<OsString>,
    bare: bool,
    repo: Option<Repo>,
    hooks: Option<PathBuf>,
    /// Configuration from the command line (`-c`, `--config-env`, alias
    /// `-c`), in order; git reads it after the environment's.
    inline: Vec<(String, Option<String>)>,
    /// Configuration from GIT_CONFIG_COUNT, then GIT_CONFIG_PARAMETERS.
    env_inline: Vec<(String, Option<String>)>,
}

impl Ctx<'_> {
    fn hooks_ok(&self, v: &str) -> bool {
        let (Some(h), Some(r)) = (&self.hooks, &self.repo) else {
            return false;
        };
        let base = r.work_tree.as_deref().unwrap_or(&r.git_dir);
        let target = repo::resolve(base, Path::new(v));
        &target == h
            // husky's own install writes `.husky/_` before the directory exists.
            || r.work_tree.as_ref().is_some_and(|wt| {
                wt.join(".husky").is_dir() && target == wt.join(".husky/_")
            })
    }

    fn check_key(&self, key: &str, value: Option<&str>, via: Via, rule: R) -> Result<(), Block> {
        match keys::refused(key, value, via, &|v| self.hooks_ok(v)) {
            None => Ok(()),
            Some(why) => Err(block(rule, format!("{key}: {why}"))),
        }
    }

    /// `-c name[=value]` and `--config-env=name=VAR` seen on a command line.
    fn check_global(&mut self, g: &Global) -> Result<(), Block> {
        match g {
            Global::Config(kv) => {
                let kv = s(kv);
                let (k, v) = match kv.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (&*kv, None),
                };
                self.check_key(k, v, Via::Inline, R::ConfigInline)?;
                self.inline.push((k.to_owned(), v.map(str::to_owned)));
                Ok(())
            }
            Global::ConfigEnv(kv) => {
                let kv = s(kv);
                let Some((k, var)) = kv.rsplit_once('=') else {
                    return Err(block(
                        R::ParseError,
                        format!("--config-env={kv}: expected NAME=ENVVAR"),
                    ));
                };
                let Some(v) = self.call.var(var) else {
                    return Err(block(
                        R::ParseError,
                        format!("--config-env: {var} is not set"),
                    ));
                };
                let v = s(v).into_owned();
                self.check_key(k, Some(&v), Via::Inline, R::ConfigInline)?;
                self.inline.push((k.to_owned(), Some(v)));
                Ok(())
            }
            Global::ExecPath(_) => Err(block(
                R::ConfigEnv,
                "--exec-path= makes git run its helpers and hooks' `git` from another directory",
            )),
            Global::Chdir(d) => {
                if !d.is_empty() {
                    self.cwd = repo::resolve(&self.cwd, Path::new(d));
                }
                Ok(())
            }
            Global::GitDir(d) => {
                self.git_dir = Some(d.clone());
                Ok(())
            }
            Global::WorkTree(d) => {
                self.work_tree = Some(d.clone());
                Ok(())
            }
            Global::Bare => {
                self.bare = true;
                Ok(())
            }
            Global::Query | Global::Other => Ok(()),
        }
    }

    /// Whether the repository's configuration is held read-only (bind
    /// mode: the host's, pinned by sbx-run).
    fn config_held(&self) -> bool {
        self.repo
            .as_ref()
            .is_some_and(|r| sbx_sys::on_readonly_mount(&r.common_dir.join("config")))
    }

    fn inside_common_dir(&self, p: &Path) -> bool {
        self.repo
            .as_ref()
            .is_some_and(|r| repo::resolve(&self.cwd, p).starts_with(&r.common_dir))
    }
}

fn parse_error(e: ParseError) -> Block {
    block(R::ParseError, e.to_string())
}

/// Variables refused by name: configuration files the guard does not
/// read, and programs git would run with its own rights.
fn env_name_refused(k: &OsStr) -> Option<Block> {
    let r = |why: String| Some(block(R::ConfigEnv, why));
    match k.as_bytes() {
        b"GIT_CONFIG_GLOBAL" | b"GIT_CONFIG_SYSTEM" | b"GIT_CONFIG" | b"GIT_TEMPLATE_DIR" => {
            r(format!(
                "{} points git at configuration the guard does not check",
                s(k)
            ))
        }
        // What `-c core.sshCommand`/`core.gitProxy`/`core.askPass` would
        // name: a program git runs as its child, with git's group in a
        // sandbox (round eight: `GIT_SSH_COMMAND=/tmp/prog git ls-remote
        // ssh://x/y` ran it so).
        b"GIT_SSH" | b"GIT_SSH_COMMAND" | b"GIT_PROXY_COMMAND" | b"GIT_ASKPASS"
        | b"SSH_ASKPASS" => r(format!(
            "{} names a program git would run with its own rights",
            s(k)
        )),
        b"GIT_EXEC_PATH" => r(
            "GIT_EXEC_PATH makes git run its helpers and hooks' `git` from another directory"
                .into(),
        ),
        _ => None,
    }
}

/// The pairs `GIT_CONFIG_COUNT=v` names (`GIT_CONFIG_KEY_<i>`,
/// `GIT_CONFIG_VALUE_<i>`, read with `var`), in order.
fn config_count<'a>(
    v: &OsStr,
    var: impl Fn(&str) -> Option<&'a OsStr>,
) -> Result<Vec<(String, Option<String>)>, Block> {
    let n: usize = s(v).trim().parse().map_err(|_| {
        block(
            R::ParseError,
            format!("GIT_CONFIG_COUNT={} is not a number", s(v)),
        )
    })?;
    (0..n)
        .map(|i| {
            let key = var(&format!("GIT_CONFIG_KEY_{i}"))
                .ok_or_else(|| block(R::ParseError, format!("GIT_CONFIG_KEY_{i} is missing")))?;
            let val = var(&format!("GIT_CONFIG_VALUE_{i}")).map(|v| s(v).into_owned());
            Ok((s(key).into_owned(), val))
        })
        .collect()
}

/// The environment of a pass-through helper (`git-upload-pack`,
/// `git-receive-pack`, `git-upload-archive`), judged like every other
/// call's: `GIT_CONFIG_PARAMETERS` with `uploadpack.packObjectsHook` ran
/// an agent program with git's group (issue 46). `core.hooksPath` is
/// passed over as [`check_env`] does: receive-pack's is pinned on its
/// command line, which wins. `GIT_EXEC_PATH` is git's own when it runs
/// the helper (a local push or fetch): allowed when it is `exec_path`,
/// the real git's.
pub fn check_pass_through_env(
    env: &[(OsString, OsString)],
    exec_path: Option<&OsStr>,
) -> Result<(), Block> {
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v);
    let check = |key: &str, val: Option<&str>| -> Result<(), Block> {
        if key.eq_ignore_ascii_case("core.hookspath") {
            return Ok(());
        }
        match keys::refused(key, val, Via::Inline, &|_| false) {
            None => Ok(()),
            Some(why) => Err(block(R::ConfigInline, format!("{key}: {why}"))),
        }
    };
    for (k, v) in env {
        let gits = k == "GIT_EXEC_PATH" && exec_path == Some(v.as_os_str());
        if let Some(b) = env_name_refused(k).filter(|_| !gits) {
            return Err(b);
        }
        match k.as_bytes() {
            b"GIT_CONFIG_PARAMETERS" => {
                let pairs = argv::config_parameters(v.as_bytes())
                    .ok_or_else(|| block(R::ParseError, "GIT_CONFIG_PARAMETERS is malformed"))?;
                for (key, val) in pairs {
                    let val = val.map(|v| String::from_utf8_lossy(&v).into_owned());
                    check(&String::from_utf8_lossy(&key), val.as_deref())?;
                }
            }
            b"GIT_CONFIG_COUNT" => {
                for (key, val) in config_count(v, |n| var(n).map(OsString::as_os_str))? {
                    check(&key, val.as_deref())?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The environment checks, and the environment git will get.
fn check_env(ctx: &mut Ctx<'_>) -> Result<Vec<(OsString, OsString)>, Block> {
    let env = ctx.call.env;
    let mut count_pairs = Vec::new();
    let mut param_pairs = Vec::new();
    for (k, v) in env {
        let name = k.as_bytes();
        if let Some(b) = env_name_refused(k) {
            return Err(b);
        }
        match name {
            b"GIT_CONFIG_PARAMETERS" => {
                let pairs = argv::config_parameters(v.as_bytes())
                    .ok_or_else(|| block(R::ParseError, "GIT_CONFIG_PARAMETERS is malformed"))?;
                for (key, val) in pairs {
                    let key = String::from_utf8_lossy(&key);
                    // git itself exports our pin to every child (hooks included);
                    // our own `-c` comes later on the command line and wins.
                    if key.eq_ignore_ascii_case("core.hookspath") {
                        continue;
                    }
                    let val = val.map(|v| String::from_utf8_lossy(&v).into_owned());
                    ctx.check_key(&key, val.as_deref(), Via::Inline, R::ConfigInline)?;
                    param_pairs.push((key.into_owned(), val));
                }
            }
            b"GIT_CONFIG_COUNT" => {
                for (key, val) in config_count(v, |n| ctx.call.var(n))? {
                    ctx.check_key(&key, val.as_deref(), Via::Inline, R::ConfigInline)?;
                    count_pairs.push((key, val));
                }
            }
            _ => {}
        }
    }
    count_pairs.extend(param_pairs);
    ctx.env_inline = count_pairs;
    Ok(crate::hookenv::clean(env))
}

fn table(key: &str) -> &'static [argv::Opt] {
    TABLES
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, t)| *t)
        .expect("every table the policy uses is generated")
}

/// Is the repository's HEAD a commit id rather than a symbolic ref? No
/// repository, or a HEAD that cannot be read: no.
fn head_detached(ctx: &Ctx<'_>) -> bool {
    ctx.repo.as_ref().is_some_and(|r| {
        std::fs::read(r.git_dir.join("HEAD"))
            .is_ok_and(|h| !h.is_empty() && !h.starts_with(b"ref:"))
    })
}

/// `git update-ref [options] HEAD ...` that is let through (not `-d`):
/// `--no-deref` goes first, so HEAD itself moves whatever it names by
/// then (see `check_command`).
fn update_ref_pins(words: &[OsString]) -> bool {
    parse("update-ref", &words[1..])
        .is_ok_and(|a| !a.help && !a.has("-d") && a.positional.first().is_some_and(|r| r == "HEAD"))
}

/// `git symbolic-ref NAME TARGET`: a branch made a symbolic ref names what
/// its target does, and git 2.39 writes it with no transaction the hook
/// steps see, nor do the target's later moves list the branch. Only HEAD
/// and a remote's HEAD may be one, and any other only to a branch.
fn symbolic_ref(args: &[OsString]) -> Result<(), String> {
    let mut pos: Vec<&[u8]> = Vec::new();
    let mut value_next = false;
    let mut words_only = false;
    for a in args.iter().map(|a| a.as_bytes()) {
        if value_next {
            value_next = false;
        } else if words_only || a == b"-" || !a.starts_with(b"-") {
            pos.push(a);
        } else if a == b"--" {
            words_only = true;
        } else if !a.starts_with(b"--") {
            // A short bundle whose `m` is last takes the next word (`-qm r`).
            value_next = a.iter().position(|b| *b == b'm') == Some(a.len() - 1);
        }
    }
    let [name, target] = pos[..] else {
        return Ok(());
    };
    let plain = |r: &[u8]| !r.windows(2).any(|w| w == b".." || w == b"//");
    if plain(name)
        && plain(target)
        && (name == b"HEAD"
            || name.starts_with(b"refs/remotes/")
            || target.starts_with(b"refs/heads/"))
    {
        return Ok(());
    }
    Err(format!(
        "git symbolic-ref {} {} makes a ref that names a non-branch without any hook seeing it; only HEAD, a remote's HEAD, or a ref naming a branch",
        String::from_utf8_lossy(name),
        String::from_utf8_lossy(target)
    ))
}

fn parse(key: &str, args: &[OsString]) -> Result<Args, Block> {
    argv::parse(args, table(key), false).map_err(parse_error)
}

/// Does this parse skip hooks? `--no-verify` for most; pull spells its
/// option `verify`, so `--no-verify` is its negation.
pub(crate) fn skips_hooks(a: &Args) -> bool {
    for o in a.opts.iter().rev() {
        match o.name.as_str() {
            "no-verify" => return !o.negated,
            "verify" => return o.negated,
            _ => {}
        }
    }
    false
}

/// Whether `git commit ARGS` may open an editor, read loosely: false only
/// when a message is given (-m/-F/-C, spelled on its own) and no -e. The
/// stored configuration is read for commit only then (see below).
fn may_edit(args: &[OsString]) -> bool {
    let given = args.iter().any(|a| {
        let a = a.as_bytes();
        (a.starts_with(b"-m") || a.starts_with(b"-F") || a.starts_with(b"-C"))
            || [&b"--message"[..], b"--file", b"--reuse-message"]
                .iter()
                .any(|o| a.starts_with(o))
    });
    !given || args.iter().any(|a| a == "-e" || a == "--edit")
}

/// A `commit.cleanup = scissors` in a config file (written by hand: `git
/// config` of it is refused) cuts an edited message at the scissors line
/// after commit-msg read it. Read only when the commit may open an editor,
/// the one case where scissors mode applies.
fn refuse_stored_scissors(cfg: &gix_config::File) -> Result<(), Block> {
    let stored = cfg
        .strings_by("commit", None, "cleanup")
        .unwrap_or_default()
        .last()
        .is_some_and(|v| v.to_string().trim().eq_ignore_ascii_case("scissors"));
    if stored {
        return Err(block(
            R::NoVerify,
            "commit.cleanup = scissors cuts the message at the scissors line after the commit-msg hook read it; remove it from the config",
        ));
    }
    Ok(())
}

/// A merge driver (`merge.NAME.driver`, picked by a `merge=NAME`
/// attribute) writes the merged file, and the sequencer (cherry-pick,
/// revert, rebase) commits it in-process without pre-commit, as it does a
/// strategy program's index. `git config merge.NAME.driver` is refused,
/// but one written into .git/config or ~/.gitconfig by hand put MARKER on
/// main through `git cherry-pick`; so these commands read the stored
/// configuration and refuse while any driver but `true` (keep ours) is
/// set. `git merge` runs pre-commit on its result (pre-merge-commit step).
///
/// Likewise a clean filter (`filter.NAME.clean`/`process`) when the merge
/// renormalizes (`-X renormalize`, `merge.renormalize`): git runs it on
/// the three sides and merges its output, so a filter that adds MARKER to
/// one side's text put it on main through `git cherry-pick`.
fn refuse_merge_drivers(cmd: &str, cfg: &gix_config::File, a: &Args) -> Result<(), Block> {
    let renormalize = a.values("strategy-option").any(|v| v == "renormalize")
        || !matches!(
            cfg.boolean_by("merge", None, "renormalize"),
            Ok(None | Some(false))
        );
    if renormalize {
        for sec in cfg.sections_by_name("filter").into_iter().flatten() {
            let Some(name) = sec.header().subsection_name() else {
                continue;
            };
            if !sec.values("clean").is_empty() || !sec.values("process").is_empty() {
                return Err(block(
                    R::ExecOption,
                    format!(
                        "a renormalizing git {cmd} runs filter.{name}'s clean program on every side and commits its output without pre-commit; leave out renormalize, or use git merge"
                    ),
                ));
            }
        }
    }
    for sec in cfg.sections_by_name("merge").into_iter().flatten() {
        let Some(name) = sec.header().subsection_name() else {
            continue;
        };
        if sec
            .values("driver")
            .iter()
            .any(|v| v.to_string().trim() != "true")
        {
            return Err(block(
                R::ExecOption,
                format!(
                    "merge.{name}.driver is a program whose output git {cmd} commits without pre-commit; use git merge, or remove the driver"
                ),
            ));
        }
    }
    Ok(())
}

/// git cuts a commit's message at the scissors line (`# --- >8 ---`)
/// after commit-msg has read the whole file: `commit -v` always, and
/// `--cleanup=scissors` with an editor (commit, merge, pull, and the
/// sequencer's commit). A sign-off or ticket below the line passed the
/// hook and was not committed. (A stored `commit.verbose` is overridden:
/// `decide` puts `--no-verbose` first among commit's options.)
fn refuse_scissors(cmd: &str, a: &Args) -> Result<(), Block> {
    let scissors = a.values("cleanup").last().is_some_and(|v| v == "scissors");
    if scissors || (cmd == "commit" && a.flag("verbose") == Some(true)) {
        return Err(block(
            R::NoVerify,
            format!(
                "git {cmd} {} cuts the message at the scissors line after the commit-msg hook read it; leave it out",
                if scissors {
                    "--cleanup=scissors"
                } else {
                    "--verbose"
                }
            ),
        ));
    }
    Ok(())
}

/// Options whose value is a program git would run (`--upload-pack`,
/// `--exec`, `-x`, …): the first one given is refused.
fn refuse_exec_options(cmd: &str, a: &Args, opts: &[&str]) -> Result<(), Block> {
    match opts.iter().find(|o| a.has(o)) {
        Some(o) => Err(block(
            R::ExecOption,
            format!("git {cmd} --{o} runs a program of the caller's choosing"),
        )),
        None => Ok(()),
    }
}

/// A stored `remote.NAME.uploadpack` (written by hand: `git config` of it
/// is refused) is the program a fetch from a local remote runs, as git's
/// child: `git fetch x` and `git ls-remote x` ran the agent's with git's
/// group (round eight), as a stored receivepack would for push (refused in
/// `check_push`). Any remote's, since `fetch --all` and `remote update`
/// reach them all.
fn refuse_stored_upload_pack(cmd: &str, cfg: &gix_config::File) -> Result<(), Block> {
    for sec in cfg.sections_by_name("remote").into_iter().flatten() {
        let Some(name) = sec.header().subsection_name() else {
            continue;
        };
        if !sec.values("uploadpack").is_empty() {
            return Err(block(
                R::ExecOption,
                format!("remote.{name}.uploadpack is a program git {cmd} would run; remove it"),
            ));
        }
    }
    Ok(())
}

/// `-s`/`--strategy NAME` of merge, pull, rebase, cherry-pick and revert:
/// only git's own strategies (`keys::STRATEGIES`).
fn refuse_strategies(cmd: &str, a: &Args) -> Result<(), Block> {
    for v in a.values("strategy") {
        let v = s(v);
        if !keys::STRATEGIES.contains(&&*v) {
            return Err(block(
                R::ExecOption,
                format!(
                    "git {cmd} --strategy={v} runs git-merge-{v}, a program of the caller's choosing, and commits its result without pre-commit"
                ),
            ));
        }
    }
    Ok(())
}

/// The stored `branch.<current>.mergeOptions`, which git merge (and pull's
/// merge) parses as if typed: the same test as writing it.
fn check_merge_options(ctx: &Ctx<'_>, cfg: &gix_config::File) -> Result<(), Block> {
    let Some(b) = ctx
        .repo
        .as_ref()
        .and_then(|r| repo::current_branch(&r.git_dir))
    else {
        return Ok(());
    };
    let b = b.trim_start_matches("refs/heads/");
    for v in cfg
        .strings_by("branch", Some(b.as_bytes().into()), "mergeOptions")
        .unwrap_or_default()
    {
        let v = v.to_string();
        ctx.check_key(
            &format!("branch.{b}.mergeOptions"),
            Some(&v),
            Via::Write,
            R::NoVerify,
        )?;
    }
    Ok(())
}

/// A `git commit` the sequencer runs (it exports GIT_REFLOG_ACTION) that
/// skips hooks, with no `--` or `--end-of-options` after which `--verify`
/// would be a path (a file named `--verify` made that commit skip them). Set
/// by anyone else, the result is the same: the hooks run.
fn sequencer_commit(call: &Call<'_>, args: &[OsString]) -> bool {
    call.settings.block_no_verify
        && call.var("GIT_REFLOG_ACTION").is_some()
        && !args.iter().any(|a| a == "--" || a == "--end-of-options")
        && argv::parse(args, table("commit"), false).is_ok_and(|a| skips_hooks(&a))
}

/// The first word that is not an option (for `stash`, `submodule`, `bisect`,
/// `worktree`, whose subcommands come first).
fn first_word(args: &[OsString], with_value: &[&str]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_bytes();
        if a == b"--" {
            return (i + 1 < args.len()).then_some(i + 1);
        }
        if a.first() != Some(&b'-') {
            return Some(i);
        }
        if with_value.iter().any(|w| a == w.as_bytes()) {
            i += 1;
        }
        i += 1;
    }
    None
}

fn remote_for_push(ctx: &Ctx<'_>, cfg: &gix_config::File, a: &Args) -> Option<String> {
    if let Some(r) = a.positional.first() {
        return Some(s(r).into_owned());
    }
    if let Some(r) = a.values("repo").last() {
        return Some(s(r).into_owned());
    }
    let branch = ctx
        .repo
        .as_ref()
        .and_then(|r| repo::current_branch(&r.git_dir))
        .map(|b| b.trim_start_matches("refs/heads/").to_owned());
    let get = |sec: &str, sub: Option<&str>, name: &str| {
        cfg.string_by(sec, sub.map(|s| s.as_bytes().into()), name)
            .map(|v| v.to_string())
    };
    if let Some(b) = &branch {
        if let Some(r) = get("branch", Some(b), "pushRemote") {
            return Some(r);
        }
    }
    if let Some(r) = get("remote", None, "pushDefault") {
        return Some(r);
    }
    if let Some(b) = &branch {
        if let Some(r) = get("branch", Some(b), "remote") {
            return Some(r);
        }
    }
    Some("origin".into())
}

fn check_push(ctx: &Ctx<'_>, cfg: &gix_config::File, args: &[OsString]) -> Result<(), Block> {
    let a = parse("push", args)?;
    if a.help {
        return Ok(());
    }
    let st = ctx.call.settings;
    if st.block_no_verify && skips_hooks(&a) {
        return Err(block(
            R::NoVerify,
            "git push --no-verify skips the pre-push hook",
        ));
    }
    refuse_exec_options("push", &a, &["receive-pack", "exec"])?;
    if !st.block_force_push {
        return Ok(());
    }
    for (opt, why) in [
        ("force", "--force overwrites the remote branch"),
        (
            "force-with-lease",
            "--force-with-lease overwrites the remote branch",
        ),
        (
            "force-if-includes",
            "--force-if-includes is part of a forced push",
        ),
        (
            "mirror",
            "--mirror force-updates and deletes every remote ref",
        ),
        ("delete", "--delete removes remote refs"),
        ("prune", "--prune deletes remote branches"),
    ] {
        if a.has(opt) {
            return Err(block(R::ForcePush, format!("git push {why}")));
        }
    }
    for r in a.positional.iter().skip(1) {
        let r = r.as_bytes();
        if r.starts_with(b"+") {
            return Err(block(
                R::ForcePush,
                format!("refspec `{}` forces the update", argv::lossy(r)),
            ));
        }
        if r.len() > 1 && r.starts_with(b":") {
            return Err(block(
                R::ForcePush,
                format!("refspec `{}` deletes a remote ref", argv::lossy(r)),
            ));
        }
    }
    // Stored settings of the remote being pushed to.
    if let Some(remote) = remote_for_push(ctx, cfg, &a) {
        let sub = Some(remote.as_bytes().into());
        if cfg.boolean_by("remote", sub, "mirror").ok().flatten() == Some(true) {
            return Err(block(
                R::ForcePush,
                format!("remote `{remote}` is configured as a mirror (remote.{remote}.mirror)"),
            ));
        }
        if cfg.string_by("remote", sub, "receivepack").is_some() {
            return Err(block(
                R::ExecOption,
                format!("remote.{remote}.receivepack runs a program on the remote side"),
            ));
        }
        // remote.c reads a legacy `remotes/<name>` file for a remote that has
        // no configured URL; its `Push:` lines are refspecs like remote.*.push.
        if let Some(r) = &ctx.repo {
            if !remote.contains('/') && cfg.string_by("remote", sub, "url").is_none() {
                if let Ok(text) = std::fs::read(r.common_dir.join("remotes").join(&remote)) {
                    for line in text.split(|b| *b == b'\n') {
                        let v = line.strip_prefix(b"Push:").map(<[u8]>::trim_ascii);
                        if v.is_some_and(|v| v.starts_with(b"+")) {
                            return Err(block(
                                R::ForcePush,
                                format!(
                                    "remotes/{remote} has a `+` Push line: it forces the update"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        if a.positional.len() <= 1 && !a.has("all") && !a.has("branches") && !a.has("tags") {
            for spec in cfg.strings_by("remote", sub, "push").unwrap_or_default() {
                if spec.starts_with(b"+") {
                    return Err(block(
                        R::ForcePush,
                        format!("remote.{remote}.push `{spec}` forces the update"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `git config`, both the old option syntax and the 2.46+ subcommands.
fn check_config(ctx: &Ctx<'_>, args: &[OsString]) -> Result<(), Block> {
    let sub = args.first().map(|a| a.as_bytes());
    let new_syntax = matches!(
        sub,
        Some(
            b"set" | b"unset" | b"rename-section" | b"remove-section" | b"edit" | b"get" | b"list"
        )
    );
    // git config stops at the first operand (PARSE_OPT_STOP_AT_NON_OPTION):
    // in `git config KEY -tVALUE` the value is not `-t VALUE`.
    let parse =
        |key: &str, args: &[OsString]| argv::parse(args, table(key), true).map_err(parse_error);
    let (a, action) = if new_syntax {
        let name = s(&args[0]).into_owned();
        (parse(&format!("config {name}"), &args[1..])?, name)
    } else {
        let a = parse("config", args)?;
        let actions = [
            "get",
            "get-all",
            "get-regexp",
            "get-urlmatch",
            "replace-all",
            "add",
            "unset",
            "unset-all",
            "rename-section",
            "remove-section",
            "list",
            "edit",
            "get-color",
            "get-colorbool",
        ];
        let action = actions
            .iter()
            .rev()
            .find(|n| a.has(n))
            .map(|n| n.to_string())
            .unwrap_or_else(|| {
                if a.positional.len() >= 2 {
                    "set".into()
                } else {
                    "get".into()
                }
            });
        (a, action)
    };
    if a.help {
        return Ok(());
    }
    let writes = matches!(
        action.as_str(),
        "set"
            | "replace-all"
            | "add"
            | "unset"
            | "unset-all"
            | "rename-section"
            | "remove-section"
            | "edit"
    );
    if !writes {
        return Ok(());
    }
    if ctx.call.settings.block_global_config && (a.has("global") || a.has("system")) {
        return Err(block(
            R::GlobalConfig,
            "git config --global/--system changes every repository's configuration",
        ));
    }
    let p = &a.positional;
    let arg = |i: usize| p.get(i).map(|v| s(v).into_owned());
    match action.as_str() {
        "edit" => Err(block(
            R::ConfigWrite,
            "git config --edit cannot be checked key by key; use `git config NAME VALUE`",
        )),
        "rename-section" | "remove-section" => {
            for sec in p {
                if keys::guarded_section(&s(sec)) {
                    return Err(block(
                        R::ConfigWrite,
                        format!(
                            "section `{}` holds settings that guard hooks and pushes",
                            s(sec)
                        ),
                    ));
                }
            }
            Ok(())
        }
        "unset" | "unset-all" => {
            let Some(k) = arg(0) else { return Ok(()) };
            // Removing the pin or a receive.* protection is a write too.
            match keys::refused(&k, Some("\u{0}"), Via::Write, &|_| false) {
                Some(why) if !k.eq_ignore_ascii_case("core.hooksPath") => {
                    Err(block(R::ConfigWrite, format!("{k}: {why}")))
                }
                _ => Ok(()),
            }
        }
        _ => {
            let Some(k) = arg(0) else { return Ok(()) };
            let v = arg(1);
            ctx.check_key(&k, v.as_deref(), Via::Write, R::ConfigWrite)
        }
    }
}

/// Paths a command's options would write to: `--output[=]`,
/// `--output-directory[=]` and their unique prefixes, `-o` where it means
/// an output file or directory, `bundle create FILE`, `config -f FILE`,
/// fast-export's `--export-marks=`.
fn output_paths(cmd: &str, args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let short_o = matches!(cmd, "format-patch" | "archive" | "bugreport" | "diagnose");
    let mut i = 0;
    while i < args.len() {
        let w = args[i].as_bytes();
        if w == b"--" {
            break;
        }
        let next = args.get(i + 1).cloned();
        if let Some(long) = w.strip_prefix(b"--") {
            let (name, val) = match long.iter().position(|b| *b == b'=') {
                Some(p) => (
                    &long[..p],
                    Some(OsStr::from_bytes(&long[p + 1..]).to_owned()),
                ),
                None => (long, None),
            };
            let is_out = name.len() >= 2
                && (b"output".starts_with(name)
                    || b"output-directory".starts_with(name)
                    || name.starts_with(b"output-directory"));
            let marks = cmd == "fast-export" && name.starts_with(b"export-marks");
            let file = cmd == "config" && name.len() >= 2 && b"file".starts_with(name);
            if (is_out || marks || file) && name != b"output-indicator" {
                match val {
                    Some(v) => out.push(v),
                    None => {
                        out.extend(next);
                        i += 1;
                    }
                }
            }
        } else if (short_o && w.starts_with(b"-o")) || (cmd == "config" && w.starts_with(b"-f")) {
            if w.len() > 2 {
                out.push(OsStr::from_bytes(&w[2..]).to_owned());
            } else {
                out.extend(next);
                i += 1;
            }
        }
        i += 1;
    }
    if cmd == "bundle" && args.first().is_some_and(|a| a == "create") {
        if let Some(f) = args[1..].iter().find(|a| !a.as_bytes().starts_with(b"-")) {
            out.push(f.clone());
        }
    }
    out
}

/// Where a write to `p` lands: like `resolve`, but a dangling symlink is
/// followed too (fopen would create its target).
fn write_target(base: &Path, p: &Path) -> PathBuf {
    let mut cur = repo::resolve(base, p);
    for _ in 0..40 {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&cur) {
                Ok(t) => {
                    let parent = cur.parent().map(Path::to_path_buf).unwrap_or_default();
                    cur = repo::resolve(&parent, &t);
                }
                Err(_) => break,
            },
            _ => break,
        }
    }
    cur
}

/// Output options may not write into the git dir, a hooks directory,
/// .husky or .agent-sandbox.
fn check_outputs(ctx: &Ctx<'_>, cmd: &str, args: &[OsString]) -> Result<(), Block> {
    let paths = output_paths(cmd, args);
    if paths.is_empty() {
        return Ok(());
    }
    let mut protected: Vec<PathBuf> = Vec::new();
    if let Some(r) = &ctx.repo {
        protected.push(r.common_dir.join("hooks"));
        // `git config -f` may write git config files (its keys are checked).
        if cmd != "config" {
            protected.push(r.common_dir.clone());
            protected.push(r.git_dir.clone());
        }
        if let Some(wt) = &r.work_tree {
            protected.push(wt.join(".husky"));
            protected.push(wt.join(".agent-sandbox"));
        }
    }
    protected.extend(ctx.hooks.clone());
    protected.push(PathBuf::from(crate::hooks::IMAGE_DIR));
    for p in paths {
        if p.is_empty() || p == "-" {
            continue;
        }
        let t = write_target(&ctx.cwd, Path::new(&p));
        if let Some(bad) = protected.iter().find(|d| t.starts_with(d)) {
            return Err(block(
                R::OutputPath,
                format!(
                    "git {cmd} would write {} inside {}",
                    t.display(),
                    bad.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The per-command rules. `args` are the arguments after the command name.
fn check_command(
    ctx: &Ctx<'_>,
    cfg: &gix_config::File,
    cmd: &str,
    args: &[OsString],
) -> Result<(), Block> {
    let st = ctx.call.settings;
    // Hook-skipping checks read the parse once; pull and rebase add more.
    let no_verify = |key: &str, what: &str| -> Result<Args, Block> {
        let a = parse(key, args)?;
        if st.block_no_verify && !a.help && skips_hooks(&a) {
            return Err(block(
                R::NoVerify,
                format!("git {key} --no-verify skips {what}"),
            ));
        }
        Ok(a)
    };
    let plumbing = |why: &str| Err(block(R::Plumbing, format!("git {cmd} {why}")));
    check_outputs(ctx, cmd, args)?;
    match cmd {
        // The sequencer's own `git commit -n` (rebase/cherry-pick/revert
        // --continue with staged changes) comes through the guard in a
        // sandbox: it runs with the hooks turned back on (`decide` appends
        // --verify) instead of failing every such --continue.
        "commit" if sequencer_commit(ctx.call, args) => refuse_scissors(cmd, &parse(cmd, args)?),
        "commit" => {
            refuse_scissors(
                cmd,
                &no_verify("commit", "the pre-commit and commit-msg hooks")?,
            )?;
            refuse_stored_scissors(cfg)
        }
        "merge" => {
            let a = no_verify("merge", "the pre-merge-commit and commit-msg hooks")?;
            refuse_scissors(cmd, &a)?;
            refuse_strategies(cmd, &a)?;
            check_merge_options(ctx, cfg)
        }
        "cherry-pick" | "revert" => {
            let a = parse(cmd, args)?;
            refuse_scissors(cmd, &a)?;
            refuse_strategies(cmd, &a)?;
            refuse_merge_drivers(cmd, cfg, &a)
        }
        "am" => no_verify("am", "the applypatch-msg and pre-applypatch hooks").map(drop),
        "pull" => {
            let a = no_verify("pull", "the merge hooks")?;
            refuse_scissors(cmd, &a)?;
            refuse_strategies(cmd, &a)?;
            check_merge_options(ctx, cfg)?;
            refuse_stored_upload_pack(cmd, cfg)?;
            refuse_exec_options(cmd, &a, &["upload-pack"])
        }
        "rebase" => {
            let a = no_verify("rebase", "the pre-rebase hook")?;
            refuse_strategies(cmd, &a)?;
            refuse_merge_drivers(cmd, cfg, &a)?;
            refuse_exec_options(cmd, &a, &["exec"])
        }
        "push" => check_push(ctx, cfg, args),
        "config" => check_config(ctx, args),
        "commit-tree" => plumbing("makes a commit without running any hook"),
        "replay" => plumbing("writes rebased commits without running any hook"),
        "hash-object" => {
            // parse-options: `-wtcommit`, `-wt commit`, `-t commit -w`.
            let a = parse("hash-object", args)?;
            let typed = a
                .values("-t")
                .last()
                .is_some_and(|t| matches!(t.as_bytes(), b"commit" | b"tag"));
            if typed && a.has("-w") {
                return plumbing("-t commit -w writes a commit without running any hook");
            }
            Ok(())
        }
        "grep" => {
            let runs = args.iter().any(|a| {
                let a = a.as_bytes();
                a.starts_with(b"-O")
                    || (a.len() > 3
                        && b"--open-files-in-pager"
                            .starts_with(a.split(|b| *b == b'=').next().unwrap_or(a)))
            });
            if runs {
                return Err(block(
                    R::ExecOption,
                    "git grep -O/--open-files-in-pager runs a program",
                ));
            }
            Ok(())
        }
        "fast-import" => plumbing("writes commits and branches without hooks"),
        // git-remote-http(s) pushes through `send-pack --stateless-rpc`,
        // which only writes the request to its stdout for the helper; the
        // helper's own commands (`push +src:dst`, `push :dst`) are read by
        // the guard first (`lib::run_filtering_helper`), whoever sends them.
        "send-pack"
            if args
                .iter()
                .take_while(|a| *a != "--")
                .any(|a| a == "--stateless-rpc") =>
        {
            // Only what git-remote-http passes; its refspecs come on stdin
            // (read by `lib::run_filtering_helper`). Anyone may run it
            // (a program git started can drive git-remote-http itself).
            const OK: &[&str] = &[
                "--stateless-rpc",
                "--helper-status",
                "--thin",
                "--no-thin",
                "--progress",
                "--no-progress",
                "--quiet",
                "-q",
                "--verbose",
                "-v",
                "--dry-run",
                "--atomic",
                "--stdin",
            ];
            if ctx.call.settings.block_force_push {
                let odd = args.iter().map(|a| a.as_bytes()).find(|a| {
                    if a.starts_with(b"-") {
                        !OK.iter().any(|o| o.as_bytes() == *a)
                            && !a.starts_with(b"--signed")
                            && !a.starts_with(b"--push-option=")
                    } else {
                        a.starts_with(b"+") || a.starts_with(b":")
                    }
                });
                if let Some(a) = odd {
                    return Err(block(
                        R::ForcePush,
                        format!(
                            "git send-pack {}: only the options git-remote-http passes, and no forced or deleting refspec",
                            String::from_utf8_lossy(a)
                        ),
                    ));
                }
            }
            Ok(())
        }
        "send-pack" => plumbing("pushes without the pre-push hook or push checks"),
        // A push to a WebDAV remote (git-remote-http runs it past git push's
        // pre-push step): its own options force (`--force`, a `+` refspec)
        // and delete (`-d`, `-D`, a `:` refspec).
        "http-push" if ctx.call.settings.block_force_push => {
            match args.iter().map(|a| a.as_bytes()).find(|a| {
                matches!(*a, b"--force" | b"-d" | b"-D")
                    || a.starts_with(b"+")
                    || a.starts_with(b":")
            }) {
                Some(a) => Err(block(
                    R::ForcePush,
                    format!(
                        "git http-push {}: forces or deletes on the remote",
                        String::from_utf8_lossy(a)
                    ),
                )),
                None => Ok(()),
            }
        }
        "filter-branch" | "filter-repo" => plumbing("rewrites history without hooks"),
        "replace" => {
            let a = parse("replace", args)?;
            if a.help
                || a.has("list")
                || a.has("delete")
                || (a.positional.is_empty() && a.opts.is_empty())
            {
                return Ok(());
            }
            plumbing("substitutes objects and so rewrites what history shows")
        }
        "update-ref" => {
            let a = parse("update-ref", args)?;
            if a.help || a.has("-d") {
                return Ok(());
            }
            if a.has("stdin") {
                return plumbing("--stdin can move branches without hooks");
            }
            match a.positional.first().map(|r| r.as_bytes()) {
                // `git worktree add` runs `git update-ref HEAD <oid>` in the
                // new worktree, whose HEAD it wrote detached: a detached
                // HEAD may move that way (as `checkout --detach` moves it),
                // and `decide` pins `--no-deref` so that HEAD turned
                // symbolic meanwhile is replaced, not the branch it names.
                // No more: the catalog refuses `--no-deref HEAD` (it
                // detaches a HEAD on a branch), and a `--deref` is refused.
                Some(b"HEAD")
                    if !a.opts.iter().any(|o| o.name == "no-deref") && head_detached(ctx) =>
                {
                    Ok(())
                }
                Some(r) if r == b"HEAD" || r.starts_with(b"refs/heads/") => {
                    plumbing("moves a branch without hooks; use git commit, merge or reset")
                }
                _ => Ok(()),
            }
        }
        "symbolic-ref" => symbolic_ref(args).map_err(|why| block(R::Plumbing, why)),
        "stash" => match first_word(args, &["-m", "--message"]).map(|i| args[i].as_bytes()) {
            // `create` is let through but recorded (git merge runs it).
            Some(b"store") => plumbing("store puts any commit on the stash without hooks"),
            _ => Ok(()),
        },
        "submodule" | "submodule--helper" => match first_word(args, &[]) {
            Some(i) if args[i] == "foreach" => {
                Err(block(R::ExecOption, "git submodule foreach runs a command"))
            }
            // A git dir it would make under .git/modules is one the host
            // does not hold: the guest ends the agent when a gitlink names
            // it (gitindex.rs), and registering it fails anyway. git's
            // `submodule` script calls `submodule--helper SUBCOMMAND`.
            Some(i)
                if ctx.config_held()
                    && (args[i] == "add"
                        || args[i] == "clone"
                        || args[i] == "absorbgitdirs"
                        || (args[i] == "update"
                            && args[i + 1..].iter().any(|a| a == "--init"))) =>
            {
                Err(block(
                    R::GitDir,
                    "a new submodule's git dir would not be the host's (its configuration is held read-only in bind mode)",
                ))
            }
            _ => Ok(()),
        },
        "bisect" => match first_word(args, &[]).map(|i| args[i].as_bytes()) {
            Some(b"run") => Err(block(R::ExecOption, "git bisect run runs a command")),
            _ => Ok(()),
        },
        "difftool" => refuse_exec_options(cmd, &parse("difftool", args)?, &["extcmd"]),
        // Round eight: programs these run come from their arguments, their
        // own configuration or PATH, as git's child (with git's group in a
        // sandbox): remote-ext's URL is a command line (`printf 'connect
        // git-upload-pack\n' | git remote-ext x /tmp/prog`), instaweb runs
        // the httpd and browser `--httpd`/`instaweb.httpd` name, web--browse
        // a browser, daemon its `--access-hook`.
        "remote-ext" => Err(block(
            R::ExecOption,
            "git remote-ext runs its URL as a command",
        )),
        "instaweb" | "web--browse" => Err(block(
            R::ExecOption,
            format!("git {cmd} runs an httpd or browser of the caller's choosing"),
        )),
        "daemon"
            if args
                .iter()
                .take_while(|a| *a != "--")
                .any(|a| a.as_bytes().starts_with(b"--access-hook")) =>
        {
            Err(block(
                R::ExecOption,
                "git daemon --access-hook runs a program",
            ))
        }
        "fetch" | "ls-remote" | "clone" | "archive" => {
            let a = parse(cmd, args)?;
            refuse_exec_options(cmd, &a, &["upload-pack", "exec"])?;
            refuse_stored_upload_pack(cmd, cfg)?;
            if cmd == "clone" {
                for kv in a.values("config") {
                    let kv = s(kv);
                    let (k, v) = kv
                        .split_once('=')
                        .map_or((&*kv, None), |(k, v)| (k, Some(v)));
                    ctx.check_key(k, v, Via::Inline, R::ConfigInline)?;
                }
                if a.values("template").next().is_some() {
                    return Err(block(
                        R::ConfigEnv,
                        "git clone --template can install other hooks",
                    ));
                }
                if let Some(d) = a.positional.get(1) {
                    if ctx.inside_common_dir(Path::new(d)) {
                        return Err(block(R::GitDir, "git clone into the git directory"));
                    }
                }
            }
            Ok(())
        }
        "init" => {
            let a = parse("init", args)?;
            if a.values("template").next().is_some() {
                return Err(block(
                    R::ConfigEnv,
                    "git init --template can install other hooks",
                ));
            }
            if let Some(d) = a.positional.first() {
                if ctx.inside_common_dir(Path::new(d)) {
                    return Err(block(R::GitDir, "git init inside the git directory"));
                }
            }
            Ok(())
        }
        "worktree" => {
            let Some(i) = first_word(args, &[]) else {
                return Ok(());
            };
            if args[i] != "add" {
                return Ok(());
            }
            let a = parse("worktree add", &args[i + 1..])?;
            match a.positional.first() {
                Some(p) if ctx.inside_common_dir(Path::new(p)) => Err(block(
                    R::GitDir,
                    "git worktree add inside the git directory",
                )),
                _ => Ok(()),
            }
        }
        "remote" => {
            refuse_stored_upload_pack(cmd, cfg)?;
            let Some(i) = first_word(args, &[]) else {
                return Ok(());
            };
            if args[i] != "add" {
                return Ok(());
            }
            let a = parse("remote add", &args[i + 1..])?;
            // A push mirror makes every `git push` a `--mirror` (a fetch
            // mirror only changes fetches).
            // A bare `--mirror` is both (builtin/remote.c: MIRROR_BOTH).
            let push_mirror = a.opts.iter().any(|o| {
                o.name == "mirror" && !o.negated && o.value.as_deref() != Some(OsStr::new("fetch"))
            });
            if st.block_force_push && push_mirror {
                return Err(block(
                    R::ForcePush,
                    "a mirror remote force-pushes and deletes on every push",
                ));
            }
            Ok(())
        }
        "read-tree" | "checkout-index" => {
            let a = parse(cmd, args)?;
            if let Some(p) = a.values("prefix").last() {
                // The prefix is glued to each path: test a name under it.
                let mut probe = p.to_owned();
                probe.push("x");
                let base = if cmd == "read-tree" {
                    ctx.repo
                        .as_ref()
                        .and_then(|r| r.work_tree.clone())
                        .unwrap_or(ctx.cwd.clone())
                } else {
                    ctx.cwd.clone()
                };
                if ctx.inside_common_dir(&base.join(probe)) {
                    return Err(block(
                        R::GitDir,
                        format!("git {cmd} --prefix into the git directory"),
                    ));
                }
            }
            Ok(())
        }
        // The strategy program itself, as git runs it (`git merge-NAME`):
        // whatever spelling or config chose it, in the sandbox it comes here.
        c if c.starts_with("merge-")
            && BUILTINS_ANY.binary_search(&c).is_err()
            && !keys::STRATEGIES.contains(&&c["merge-".len()..])
            && c != "merge-one-file" =>
        {
            Err(block(
                R::ExecOption,
                format!(
                    "git {c} is a merge strategy of the caller's choosing: git would commit what it leaves in the index without pre-commit"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Why husky's `init.sh` or `~/.huskyrc` at `f` could switch its hooks off
/// as the hook reads it, though this process reads it empty or absent:
/// content; a relative path (the hook resolves it from the work tree's top,
/// the guard from the caller's directory); a way through `/proc` or `/dev`
/// (per-process views: `/proc/self/environ` is the hook's own environment
/// as text, `/proc/self/cwd` another directory for each process), literal
/// or by a symlink; anything but a plain file.
fn husky_file_risk(f: &Path) -> Option<&'static str> {
    use crate::repo::Walk;
    const OFF: &str = "can switch husky's hooks off; empty or remove it";
    if !f.is_absolute() {
        return Some(
            "is a relative path, which husky's hook reads from another directory; use an absolute HOME and XDG_CONFIG_HOME",
        );
    }
    match crate::repo::walk(f) {
        Walk::PerProcess => Some(
            "leads through /proc or /dev, which husky's hook reads as its own process; use a plain path",
        ),
        Walk::Missing => None,
        Walk::BadLink | Walk::Failed => Some(OFF),
        Walk::At(at) => match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_file() && m.len() == 0 => None,
            _ => Some(OFF),
        },
    }
}

/// husky's own off switches as an environment names them (`var`: first
/// values, as getenv reads them): why one could switch husky's hooks off,
/// naming the file. The guard asks before git runs; the broker again just
/// before it starts a husky hook, since the files can be written while git
/// runs (its stderr redirected into one, with `GIT_TRACE=2` printing a path
/// that holds `;exit 0`).
pub(crate) fn husky_off_switch(var: &dyn Fn(&str) -> Option<OsString>) -> Option<String> {
    let env = |n: &str| var(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = env("HOME");
    let xdg = env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    let files = [
        xdg.map(|x| x.join("husky/init.sh")),
        home.map(|h| h.join(".huskyrc")),
    ];
    files
        .into_iter()
        .flatten()
        .find_map(|f| husky_file_risk(&f).map(|why| format!("{} {why}", f.display())))
}

/// husky sources these before every hook; either can export HUSKY=0.
fn husky_checks(ctx: &Ctx<'_>, real_git: &dyn Fn(&Path) -> Option<bool>) -> Result<(), Block> {
    if let Some(why) = husky_off_switch(&|n| ctx.call.var(n).map(OsStr::to_owned)) {
        return Err(block(R::Husky, why));
    }
    if let Some(wt) = ctx.repo.as_ref().and_then(|r| r.work_tree.as_ref()) {
        if wt.join(".husky").is_dir() && real_git(wt) == Some(true) {
            return Err(block(
                R::Husky,
                ".husky has uncommitted changes; commit or restore them first",
            ));
        }
    }
    Ok(())
}

/// Decide. `husky_dirty` answers "does .husky differ from HEAD in this work
/// tree" (it runs the real git; only asked in husky repositories).
pub fn decide(
    call: &Call<'_>,
    husky_dirty: &dyn Fn(&Path) -> Option<bool>,
) -> Result<Allow, Block> {
    let mut ctx = Ctx {
        call,
        cwd: call.cwd.to_owned(),
        git_dir: None,
        work_tree: None,
        bare: false,
        repo: None,
        hooks: None,
        inline: Vec::new(),
        env_inline: Vec::new(),
    };
    let (globals, idx) = argv::globals(call.args).map_err(parse_error)?;
    for g in &globals {
        if !matches!(g, Global::Config(_) | Global::ConfigEnv(_)) {
            ctx.check_global(g)?;
        }
    }
    let setup = SetupEnv {
        git_dir: call.var("GIT_DIR").map(ToOwned::to_owned),
        work_tree: call.var("GIT_WORK_TREE").map(ToOwned::to_owned),
        home: call.var("HOME").map(ToOwned::to_owned),
        xdg_config_home: call.var("XDG_CONFIG_HOME").map(ToOwned::to_owned),
        config_nosystem: call
            .var("GIT_CONFIG_NOSYSTEM")
            .is_some_and(|v| !matches!(v.as_bytes(), b"" | b"0" | b"false" | b"no" | b"off")),
        common_dir: call.var("GIT_COMMON_DIR").map(ToOwned::to_owned),
        object_dir: call.var("GIT_OBJECT_DIRECTORY").map(ToOwned::to_owned),
    };
    ctx.repo = repo::discover(
        &ctx.cwd,
        ctx.git_dir.as_deref(),
        ctx.work_tree.as_deref(),
        ctx.bare,
        &setup,
    )
    .map_err(|e| block(R::ConfigUnreadable, e.to_string()))?;
    // In a sandbox git is pinned to the workspace's hooks even where the
    // guard found no repository: a repository that appears between its look
    // and git's (renamed into place) would otherwise run hooks of its own.
    ctx.hooks = ctx
        .repo
        .as_ref()
        .map(repo::trusted_hooks)
        .or_else(repo::sandbox_hooks);
    // Inline config is judged once the trusted hooks dir is known.
    for g in &globals {
        if matches!(g, Global::Config(_) | Global::ConfigEnv(_)) {
            ctx.check_global(g)?;
        }
    }
    let env = check_env(&mut ctx)?;
    // git runs these inside a git dir itself (upload-pack's pack-objects,
    // receive-pack's unpack-objects); none touches a work tree.
    let no_work_tree = call.args.get(idx).is_some_and(|c| {
        matches!(
            c.as_bytes(),
            b"pack-objects" | b"unpack-objects" | b"index-pack" | b"rev-list"
        )
    });
    if let Some(r) = ctx.repo.as_ref().filter(|_| !no_work_tree) {
        if r.inside_git_dir {
            return Err(block(
                R::GitDir,
                format!("the working directory is inside {}", r.git_dir.display()),
            ));
        }
        if let Some(wt) = &r.work_tree {
            if wt.starts_with(&r.common_dir) {
                return Err(block(
                    R::GitDir,
                    format!("the work tree {} is inside the git directory", wt.display()),
                ));
            }
        }
    }
    let mut out_args: Vec<OsString> = call.args[..idx].to_vec();
    let mut pin = None;
    if let Some(h) = &ctx.hooks {
        let mut v = OsString::from("core.hooksPath=");
        v.push(h);
        out_args.push("-c".into());
        pin = Some((out_args.len(), h.clone()));
        out_args.push(v);
    }
    out_args.extend_from_slice(&call.args[idx..]);
    let found = ctx.repo.clone();
    let allow = |command: String, moves_refs: bool, precommit_first: bool| Allow {
        args: out_args.clone(),
        env: env.clone(),
        command,
        pin: pin.clone(),
        moves_refs,
        precommit_first,
        records_stash: false,
        filters_helper: false,
        filters_send_pack: false,
        repo: found.clone(),
        routable: false,
        builds_tree: false,
    };
    let Some(first) = call.args.get(idx) else {
        return Ok(allow(String::new(), false, false));
    };
    if globals.iter().any(|g| matches!(g, Global::Query)) {
        return Ok(allow(s(first).into_owned(), false, false));
    }
    // Stored configuration matters for aliases (only a name that is not a
    // builtin of every git can be one) and for push; reading it is skipped
    // otherwise, as it is most of the guard's own work.
    let command = s(first).into_owned();
    let needs_config = matches!(
        command.as_str(),
        "push"
            | "merge"
            | "pull"
            | "cherry-pick"
            | "revert"
            | "rebase"
            | "fetch"
            | "ls-remote"
            | "remote"
            | "clone"
    ) || (command == "commit" && may_edit(&call.args[idx + 1..]))
        || BUILTINS_ALL.binary_search(&command.as_str()).is_err();
    let cfg = if needs_config {
        let mut cfg = repo::config(ctx.repo.as_ref(), &setup)
            .map_err(|e| block(R::ConfigUnreadable, e.to_string()))?;
        let pairs = ctx.env_inline.iter().chain(ctx.inline.iter());
        cfg.append(repo::inline_file(pairs))
            .map_err(|e| block(R::ConfigUnreadable, format!("inline configuration: {e}")))?;
        repo::hasconfig_as_git_reads_it(&cfg, setup.home_dir())
            .map_err(|e| block(R::ConfigUnreadable, e.to_string()))?;
        cfg
    } else {
        gix_config::File::default()
    };

    // Resolve aliases the way git's run_argv does, checking every step.
    let mut words: Vec<OsString> = call.args[idx..].to_vec();
    let mut alias_globals: Vec<OsString> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let cmd = s(&words[0]).into_owned();
        let builtin_everywhere = BUILTINS_ALL.binary_search(&cmd.as_str()).is_ok();
        let builtin_somewhere = BUILTINS_ANY.binary_search(&cmd.as_str()).is_ok();
        if builtin_somewhere {
            check_command(&ctx, &cfg, &cmd, &words[1..])?;
        }
        if builtin_everywhere {
            break;
        }
        let alias = repo::alias(&cfg, &cmd);
        let Some(alias) = alias else {
            if !builtin_somewhere {
                // An external `git-<cmd>`.
                check_command(&ctx, &cfg, &cmd, &words[1..])?;
            }
            if crate::in_sandbox() {
                external_program(call, &cmd)?;
            }
            break;
        };
        if seen.contains(&cmd.to_ascii_lowercase()) || seen.len() > 32 {
            return Err(block(R::ParseError, format!("alias loop at `{cmd}`")));
        }
        seen.push(cmd.to_ascii_lowercase());
        if alias.starts_with(b"!") {
            return Err(block(
                R::ExecOption,
                format!("alias.{cmd} is a shell alias (`!`); run the command directly instead"),
            ));
        }
        let split = argv::split_cmdline(&alias)
            .ok_or_else(|| parse_error(ParseError::BadAlias(cmd.clone())))?;
        let (ag, aidx) = argv::globals(&split).map_err(parse_error)?;
        for g in &ag {
            if matches!(
                g,
                Global::Config(_) | Global::ConfigEnv(_) | Global::ExecPath(_)
            ) {
                ctx.check_global(g)?;
            }
        }
        if aidx >= split.len() {
            return Err(block(R::ParseError, format!("alias.{cmd} is empty")));
        }
        alias_globals.extend_from_slice(&split[..aidx]);
        let mut next = split[aidx..].to_vec();
        next.extend_from_slice(&words[1..]);
        words = next;
    }
    let makes_commits = |c: &str| matches!(c, "commit" | "merge" | "pull" | "rebase" | "am");
    if call.settings.block_no_verify && (makes_commits(&command) || makes_commits(&s(&words[0]))) {
        husky_checks(&ctx, husky_dirty)?;
    }
    let last = s(&words[0]).into_owned();
    // The guard's hook steps judge pushes (pre-push) and branch moves onto
    // stash commits (reference-transaction): without a stash only a push
    // needs them, and every hook run through them costs a process.
    // `am` always: its hook steps run pre-commit and commit-msg.
    // `stash` and `notes` always: the step records the commits they make.
    // `merge` and `pull` always: their pre-merge-commit step runs pre-commit.
    let moves_refs = last == "push"
        || last == "receive-pack"
        || last == "am"
        || last == "stash"
        || last == "notes"
        || last == "merge"
        || last == "pull"
        || ((ROUTED.contains(&last.as_str())
            || BUILTINS_ANY.binary_search(&last.as_str()).is_err())
            && (ctx
                .repo
                .as_ref()
                .is_some_and(|r| crate::hooks::stash_exists(&r.common_dir))
                || crate::hooks::shared_stash_seen(call.env)));
    let precommit_first = call.settings.block_no_verify
        && matches!(last.as_str(), "rebase" | "cherry-pick" | "revert" | "am")
        && words[1..].iter().any(|w| {
            // parse-options takes unique prefixes: `--cont` is --continue.
            let w = w.as_bytes();
            (w.len() >= 5 && b"--continue".starts_with(w))
                || (last == "am" && (w == b"-r" || (w.len() >= 4 && b"--resolved".starts_with(w))))
        });
    let mut out = allow(command, moves_refs, precommit_first);
    // Every commit: routed later in a sandbox whatever its stash, its
    // prepared step compares the message with what commit-msg passed.
    if last == "commit" {
        out.env.push((crate::hooks::COMMIT_ENV.into(), "1".into()));
    }
    // The ledger (ledger.rs): commands whose commits no commit-msg saw one
    // by one have their step run the hooks on each; a fetch from a remote
    // brings fetched commits.
    if matches!(
        last.as_str(),
        "rebase" | "cherry-pick" | "revert" | "am" | "pull"
    ) {
        out.env.push((crate::ledger::VERIFY_ENV.into(), "1".into()));
    }
    // A push into a repository of the sandbox: a branch moves onto what
    // a pre-push step sent, else as the repository's own moves do.
    if last == "receive-pack" {
        out.env
            .push((crate::ledger::RECEIVE_ENV.into(), "1".into()));
    }
    // A clone takes the source's refs (no commit by id): fetched.
    if last == "clone"
        || (matches!(last.as_str(), "fetch" | "pull") && fetches_from_remote(&last, &words[1..]))
    {
        out.env.push((crate::ledger::FETCH_ENV.into(), "1".into()));
    }
    // `--abort`, `--quit` and `--continue` take no other argument.
    let bare_action = words[1..].iter().any(|w| {
        let w = w.as_bytes();
        w.len() >= 3
            && [&b"--abort"[..], b"--quit", b"--continue"]
                .iter()
                .any(|a| a.starts_with(w))
    });
    // `merge` too: it re-reads .git/MERGE_MSG by path after commit-msg, so
    // one renamed over it once the hook had read it was committed unseen
    // (round seven); on a private index its commit-msg runs on a copy and
    // its prepared step compares the message (msg.rs), as for commit.
    // `am` likewise re-reads .git/rebase-apply/final-commit after its
    // applypatch-msg step (which runs commit-msg).
    let am_commits = last == "am"
        && !words[1..].iter().any(|w| {
            let w = w.as_bytes();
            w.len() >= 3
                && [&b"--abort"[..], b"--quit", b"--show-current-patch"]
                    .iter()
                    .any(|a| a.starts_with(w))
        });
    out.builds_tree = call.settings.block_no_verify
        && (precommit_first || last == "commit" || (last == "merge" && !bare_action) || am_commits);
    out.routable =
        ROUTED.contains(&last.as_str()) || BUILTINS_ANY.binary_search(&last.as_str()).is_err();
    pin_expansion(&mut out, &call.args[..idx], &alias_globals, &words);
    if call.settings.block_no_verify && last == "merge" && !bare_action {
        // Stored branch.<name>.mergeOptions are parsed before the command
        // line, so a `--verify` first among its options wins over one read
        // from a config the guard did not see (swapped in after its look).
        let at = out.args.len() - words.len() + 1;
        out.args.insert(at, "--verify".into());
    }
    if matches!(
        last.as_str(),
        "commit" | "merge" | "pull" | "rebase" | "cherry-pick" | "revert" | "am"
    ) {
        // git's cleanup drops comment lines after commit-msg read them; the
        // guard refuses another comment character only through git, and a
        // `commentChar = S` written into .git/config by hand dropped the
        // `Signed-off-by:` line the hook had read. Before the hooks pin,
        // which stays the last global option.
        pin_config(&mut out, words.len(), "core.commentChar=#");
    }
    // git turns `git CMD --help` into `git help CMD` only when --help comes
    // first; an option put before it would make it an unknown option.
    let help = words.get(1).is_some_and(|w| w == "--help");
    if !help && matches!(last.as_str(), "diff" | "log" | "show" | "whatchanged") {
        // A hook's own `git diff --cached` prints git's usual patch whatever
        // a config file says: the guard refuses diff.external, color=always
        // and diff.noprefix/mnemonicPrefix only through git, and the same
        // lines written into .git/config or ~/.gitconfig by hand ran a
        // program that printed nothing, put an escape before each `+`, or
        // took the `b/` off `+++ b/path`, and pre-commit passed. First, so
        // options on the command line still win.
        pin_options(&mut out, words.len(), DIFF_PINS);
        // git's default: `diff.renames = copies` turned a new file copied
        // from one the commit also changed into "copy to cred", with no
        // `+++ b/cred` line for the hook to find (round seven).
        pin_config(&mut out, words.len(), "diff.renames=true");
    }
    if last == "update-ref" && update_ref_pins(&words) {
        pin_options(&mut out, words.len(), &["--no-deref"]);
    }
    if !help && last == "grep" {
        // git's default pattern type, so a hook's own `git grep --cached
        // 'console\.log('` matches whatever `grep.patternType` or
        // `grep.extendedRegexp` a config says (`fixed` matched nothing,
        // round seven); a -E/-F/-P on the command line still wins.
        pin_options(&mut out, words.len(), &["--basic-regexp"]);
    }
    if matches!(
        last.as_str(),
        "diff" | "log" | "show" | "whatchanged" | "diff-index" | "diff-files" | "diff-tree"
    ) {
        // Git's default: a lower threshold written by hand made every
        // staged file "Binary files differ", to plumbing as well.
        pin_config(&mut out, words.len(), "core.bigFileThreshold=512m");
    }
    // A commit-graph is a cache git trusts over the objects, and the agent
    // can write one: it gave HEAD another tree (a hook's `git diff-index
    // --cached HEAD` printed nothing) and a rewound branch a parent that
    // made it a fast-forward to the pre-push check (round eight). git
    // exports `-c` to its hooks, so their own git reads the objects too.
    pin_config(&mut out, words.len(), "core.commitGraph=false");
    if last == "commit" && !help {
        // First, so a `-v` on the command line (refused) would win, but a
        // stored commit.verbose, which the guard does not read, does not.
        pin_options(&mut out, words.len(), &["--no-verbose"]);
    }
    if last == "commit" && sequencer_commit(call, &words[1..]) {
        // The last of -n/--no-verify/--verify wins: hooks run.
        out.args.push("--verify".into());
    }
    out.filters_helper = call.settings.block_force_push && last.starts_with("remote-");
    out.filters_send_pack = call.settings.block_force_push && last == "send-pack";
    out.records_stash = last == "stash"
        && first_word(&words[1..], &["-m", "--message"]).is_some_and(|i| words[1 + i] == "create");
    Ok(out)
}

/// The real git's exec-path in the image (Debian's), which git searches
/// for `git-<cmd>` before PATH.
const GIT_CORE: &str = "/usr/lib/git-core";

/// In a sandbox, `git <cmd>` for a command git has no builtin for runs
/// `git-<cmd>` from its exec-path or PATH as git's child, with git's group,
/// which the broker trusts (a remote helper takes `push` only from git's
/// processes): an agent's `/tmp/bin/git-x` that piped `push` into `git
/// remote-http` pushed a stash past the pre-push step (round seven). So
/// only a program the agent cannot have put there runs: it, and every
/// PATH directory searched up to it, root's and writable by no one else.
fn external_program(call: &Call<'_>, cmd: &str) -> Result<(), Block> {
    let name = format!("git-{cmd}");
    if cmd.contains('/') {
        return Err(block(R::ExecOption, format!("`git {cmd}` names a path")));
    }
    if Path::new(GIT_CORE).join(&name).exists() {
        return Ok(());
    }
    let path = call.var("PATH").map_or_else(
        || OsString::from("/usr/local/bin:/usr/bin:/bin"),
        OsStr::to_owned,
    );
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        let file = dir.join(&name);
        let found = std::fs::metadata(&file).is_ok_and(|m| m.is_file());
        if !root_only(dir) || found && !root_only(&file) {
            return Err(block(
                R::ExecOption,
                format!(
                    "`git {cmd}` runs a `{name}` looked up in {}, which is not root's alone, with git's own rights; run `{name}` directly instead",
                    dir.display()
                ),
            ));
        }
        if found {
            return Ok(());
        }
    }
    Ok(())
}

/// `p` (absolute) and every directory above it are root's and writable by
/// no one else; a symlink on the way must be root's, and so must be where
/// it leads.
fn root_only(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    use std::path::Component;
    let sound = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
    if !p.is_absolute() || !std::fs::metadata("/").is_ok_and(|m| sound(&m)) {
        return false;
    }
    let mut at = PathBuf::from("/");
    for c in p.components().skip(1) {
        let Component::Normal(n) = c else {
            return false;
        };
        at.push(n);
        let Ok(m) = std::fs::symlink_metadata(&at) else {
            return false;
        };
        if m.file_type().is_symlink() {
            match std::fs::canonicalize(&at) {
                Ok(t) if m.uid() == 0 && root_only(&t) => at = t,
                _ => return false,
            }
        } else if !sound(&m) {
            return false;
        }
    }
    true
}

/// `opts` first among the command's options (right after its name, the
/// first of `words`), so options on the command line still win.
fn pin_options(out: &mut Allow, words: usize, opts: &[&str]) {
    let at = out.args.len() - words + 1;
    out.args
        .splice(at..at, opts.iter().map(|o| OsString::from(*o)));
}

/// `-c key=value` for git, ahead of the hooks pin (which stays the last
/// global option) or else of the command's `words`.
fn pin_config(out: &mut Allow, words: usize, kv: &str) {
    let at = match &out.pin {
        Some((i, _)) => i - 1,
        None => out.args.len() - words,
    };
    out.args.splice(at..at, ["-c".into(), kv.into()]);
    if let Some((i, _)) = &mut out.pin {
        *i += 2;
    }
}

/// Options the porcelain diff commands get first (see `decide`).
pub const DIFF_PINS: &[&str] = &[
    "--no-ext-diff",
    "--color=auto",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

/// git runs what the guard judged, not its own reading of the aliases: the
/// configuration may be another repository's by the time git reads it (a
/// `GIT_DIR` symlink or a `.git` swapped after the guard's look). The
/// expansion replaces the alias, the aliases' own globals go before the
/// pin, and a last word that is no builtin of every git gets an empty
/// `alias.<word>` (git tries `git-<word>` first; with none, an alias of
/// the guard's unseen config would have run, the empty one fails).
fn pin_expansion(
    out: &mut Allow,
    globals: &[OsString],
    alias_globals: &[OsString],
    words: &[OsString],
) {
    let Some(last) = words.first() else { return };
    let builtin = BUILTINS_ALL.binary_search(&s(last).as_ref()).is_ok();
    if builtin && alias_globals.is_empty() && out.args.ends_with(words) {
        return;
    }
    let mut args: Vec<OsString> = globals.to_vec();
    args.extend_from_slice(alias_globals);
    if !builtin {
        args.push("-c".into());
        let mut v = OsString::from("alias.");
        v.push(last);
        v.push("=");
        args.push(v);
    }
    if let Some((_, h)) = &out.pin {
        let mut v = OsString::from("core.hooksPath=");
        v.push(h);
        args.push("-c".into());
        out.pin = Some((args.len(), h.clone()));
        args.push(v);
    }
    args.extend_from_slice(words);
    out.args = args;
}

impl Block {
    /// The one line for stderr.
    pub fn message(&self) -> String {
        format!("blocked ({}): {}; {ASK}", self.rule, self.reason)
    }
}

#[cfg(test)]
mod tests;
