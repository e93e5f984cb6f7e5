//! `sbx-run verify-commits`: the check at the boundary. Whatever happened
//! inside the sandbox (a git the agent brought along, objects written by
//! its own code), each commit it added is checked against the
//! repository's pre-commit and commit-msg hooks, as `git commit` would
//! have run them: in a clean room, never on the host.
//!
//! The host only reads data from the agent's repository (the commit list
//! and a pack of the commits' objects, with git's program-running keys
//! pinned off), and the hooks come from the trusted side (`record`: the
//! state `sbx-run start` recorded before the agent ran). One throwaway
//! container per run (`room`) rebuilds each commit in a fresh repository,
//! runs the hooks there as an unprivileged uid with no network, and hands
//! back one size-capped JSON verdict per commit (`plan`), which the host
//! checks before printing anything, escaped.

pub mod plan;
pub mod record;
pub mod room;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Args;
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::sanitize;
use sbx_core::{Exit, output};
use serde::Serialize;

use crate::names::{BASE_IMAGE, LABEL_ROLE, LABEL_WORKSPACE};
use crate::workspace::{AGENT_ID, Workspace};
use crate::{RunError, docker, image};
use plan::{Outcome, Plan};

/// Seconds one hook may run in the clean room before it fails the commit.
const HOOK_TIMEOUT: u64 = 600;

#[derive(Debug, Args)]
pub struct VerifyOpts {
    /// The repository (default: the current directory).
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Check the commits after REF up to HEAD (default: the current
    /// branch's upstream, `@{upstream}`, which is where the sandbox's work
    /// starts in both bind and branch mode).
    #[arg(long, value_name = "REF")]
    pub since: Option<String>,
    /// The last commit to check (default: HEAD); e.g. `--since HEAD --head
    /// sbx/main` checks what `sbx-run fetch` brought back before a merge.
    #[arg(long, value_name = "REF", default_value = "HEAD")]
    pub head: String,
    /// Inside the clean room: the directory the host prepared.
    #[arg(long, value_name = "DIR", hide = true)]
    pub clean_room: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{}: not a git repository (give the path of one)", .0.display())]
    NotARepo(PathBuf),
    #[error(
        "{0}: no such commit (the current branch has no upstream? give --since REF, e.g. --since origin/main)"
    )]
    NoBase(String),
    #[error("git {0}: {1}")]
    Git(String, String),
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    #[error("{0}")]
    Config(String),
    #[error("the clean room: {0}")]
    Room(String),
    #[error("the clean room returned {0}: nothing is reported (run again with -v)")]
    BadVerdict(String),
}

impl sbx_core::SbxError for VerifyError {
    fn exit(&self) -> Exit {
        match self {
            Self::NotARepo(_) | Self::NoBase(_) => Exit::Usage,
            Self::Git(..) | Self::Room(_) => Exit::Software,
            Self::Spawn(_) => Exit::Unavailable,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
            Self::Config(_) => Exit::Config,
            Self::BadVerdict(_) => Exit::DataErr,
        }
    }
}

/// One commit's line of `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub commit: String,
    pub subject: String,
    pub ok: bool,
    pub result: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub flags: Vec<String>,
}

/// A path that cannot exist: git skips a graft or shallow file it
/// cannot open, silently.
const NO_FILE: &str = "/proc/self/sbx-no-such-file";

/// The host's git in the agent's repository, for reading only: the
/// caller's repository variables removed, so `-C` decides; history from
/// the objects alone (replace refs, `info/grafts`, `shallow` and the
/// commit-graph are files the sandbox writes, and each hid a commit that
/// skipped the hooks, round eight); and every key through which a read
/// could run a program pinned off, whatever `.git/config` says.
pub(crate) fn git(dir: &Path) -> Command {
    let mut c = git_reading_hooks_path(dir);
    c.args(["-c", "core.hooksPath=/dev/null"]);
    c
}

/// `git` without the `core.hooksPath` pin, for reading that key (as data)
/// into the record.
pub(crate) fn git_reading_hooks_path(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir);
    for kv in [
        "core.commitGraph=false",
        "core.fsmonitor=false",
        "core.pager=cat",
        "core.sshCommand=false",
        "core.alternateRefsCommand=",
        "diff.external=",
        "protocol.allow=never",
    ] {
        c.args(["-c", kv]);
    }
    // The repository may be the agent's (uid 1000): read it anyway, since
    // nothing above runs what it configures.
    c.arg("-c")
        .arg(format!("safe.directory={}", dir.to_string_lossy()));
    for v in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_REPLACE_REF_BASE",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "PAGER",
    ] {
        c.env_remove(v);
    }
    c.env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_GRAFT_FILE", NO_FILE)
        .env("GIT_SHALLOW_FILE", NO_FILE)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    c
}

pub(crate) fn run(mut c: Command, what: &str) -> Result<String, VerifyError> {
    let out = c.output().map_err(VerifyError::Spawn)?;
    if !out.status.success() {
        return Err(VerifyError::Git(
            what.into(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

/// A commit in the range: id, parent ids, subject.
struct Listed {
    id: String,
    parents: Vec<String>,
    subject: String,
}

fn list(top: &Path, since: &str, head: &str) -> Result<Vec<Listed>, VerifyError> {
    let commit = |r: &str| {
        let mut c = git(top);
        c.args(["rev-parse", "-q", "--verify", "--end-of-options"])
            .arg(format!("{r}^{{commit}}"));
        run(c, "rev-parse").map_err(|_| VerifyError::NoBase(r.into()))
    };
    let base = commit(since)?;
    let head = commit(head)?;
    let mut c = git(top);
    c.args([
        "log",
        "-z",
        "--reverse",
        "--topo-order",
        "--no-show-signature",
        "--format=%H %P%n%s",
    ])
    .arg(format!("{base}..{head}"))
    .arg("--");
    let text = run(c, "log")?;
    Ok(text
        .split('\0')
        .filter(|r| !r.is_empty())
        .map(|r| {
            let (ids, subject) = r.split_once('\n').unwrap_or((r, ""));
            let mut ids = ids.split(' ').filter(|s| !s.is_empty()).map(String::from);
            Listed {
                id: ids.next().unwrap_or_default(),
                parents: ids.collect(),
                subject: subject.to_owned(),
            }
        })
        .collect())
}

/// The commits' objects and their boundary parents' trees, packed by the
/// host's git into `dest` (objects read as data, nothing run).
fn pack(
    top: &Path,
    commits: &[Listed],
    boundary: &[String],
    dest: &Path,
) -> Result<(), VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let mut want = String::new();
    let mut c = git(top);
    c.args(["rev-list", "--objects", "--no-walk=unsorted", "--stdin"])
        .stdout(Stdio::piped());
    let ids: String = commits
        .iter()
        .map(|c| format!("{}\n", c.id))
        .chain(boundary.iter().map(|b| format!("{b}\n")))
        .collect();
    // Every listed commit with its whole tree: each is checked out whole.
    want.push_str(&feed(c, ids.as_bytes(), "rev-list")?);
    let file = std::fs::File::create(dest).map_err(|e| io(dest, e))?;
    let mut c = git(top);
    c.args(["pack-objects", "--stdout", "-q"])
        .stdout(file)
        .stderr(Stdio::piped());
    feed(c, want.as_bytes(), "pack-objects")?;
    Ok(())
}

/// Run `c` with `input` on its stdin; its stdout when the caller piped it.
pub(crate) fn feed(mut c: Command, input: &[u8], what: &str) -> Result<String, VerifyError> {
    c.stdin(Stdio::piped());
    let mut child = c
        .stderr(Stdio::piped())
        .spawn()
        .map_err(VerifyError::Spawn)?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(VerifyError::Spawn)?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(VerifyError::Git(
            what.into(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn verify_commits(common: &CommonArgs, opts: &VerifyOpts) -> Result<ExitCode, BoxError> {
    if let Some(dir) = &opts.clean_room {
        return room::main(dir);
    }
    let dir = match &opts.path {
        Some(p) => p.clone(),
        None => std::env::current_dir().map_err(|e| VerifyError::Io(".".into(), e))?,
    };
    let mut c = git(&dir);
    c.args(["rev-parse", "--show-toplevel"]);
    let top = PathBuf::from(run(c, "rev-parse").map_err(|_| VerifyError::NotARepo(dir.clone()))?);
    let ws = Workspace::open(common, Some(top.clone()))?;
    let since = opts.since.clone().unwrap_or_else(|| "@{upstream}".into());
    let commits = list(&top, &since, &opts.head)?;
    if commits.is_empty() {
        output::info("no commits to check");
        return Ok(Exit::Ok.into());
    }
    docker::require_engine()?;
    let inputs = tempfile::Builder::new()
        .prefix("sbx-verify-")
        .tempdir()
        .map_err(|e| VerifyError::Io(std::env::temp_dir(), e))?;
    let trusted = inputs.path().join(plan::TRUSTED_DIR);
    let rec_dir = record::dir(&ws.names.hash);
    let rec = match record::load(&rec_dir) {
        Some(rec) => {
            copy_dir(&rec_dir, &trusted)?;
            output::debug(&format!(
                "hooks as recorded by sbx-run start in {}",
                rec_dir.display()
            ));
            rec
        }
        None => {
            output::warn(
                "no hooks recorded for this workspace (its sandbox was not started by this sbx-run): \
                 using the host's current hooks directory and core.hooksPath, read with git's parser, not run",
            );
            std::fs::create_dir_all(&trusted).map_err(|e| VerifyError::Io(trusted.clone(), e))?;
            record::snapshot(&top, &trusted, "host-now")?
        }
    };
    let ids: std::collections::HashSet<&str> = commits.iter().map(|c| c.id.as_str()).collect();
    let mut boundary: Vec<String> = Vec::new();
    for p in commits.iter().flat_map(|c| &c.parents) {
        if !ids.contains(p.as_str()) && !boundary.contains(p) {
            boundary.push(p.clone());
        }
    }
    pack(
        &top,
        &commits,
        &boundary,
        &inputs.path().join(plan::PACK_FILE),
    )?;
    let plan = Plan {
        commits: commits
            .iter()
            .map(|c| plan::Commit {
                id: c.id.clone(),
                parent: c.parents.first().cloned(),
            })
            .collect(),
        boundary,
        record: rec,
        hook_uid: AGENT_ID,
        hook_timeout: HOOK_TIMEOUT,
    };
    let p = inputs.path().join(plan::PLAN_FILE);
    std::fs::write(&p, serde_json::to_vec(&plan).expect("a plan serialises"))
        .map_err(|e| VerifyError::Io(p.clone(), e))?;
    let image = room_image(&ws)?;
    let verdicts = run_room(&ws, &image, inputs.path(), &plan)?;
    report(common, &commits, verdicts)
}

/// The repository's image (built when missing or stale, as `start` does),
/// or the base image for a repository without `.agent-sandbox/`.
fn room_image(ws: &Workspace) -> Result<String, BoxError> {
    if ws.config_dir().is_dir() {
        if let Some((opts, _)) = image::repo_rebuild(ws)? {
            image::build_repo(ws, &opts)?;
        }
        return Ok(ws.names.image.clone());
    }
    let base = format!("{BASE_IMAGE}:{}", image::default_base_tag());
    if !docker::exists("image", &base)? {
        return Err(RunError::Build(format!(
            "{base} is missing: build it with `sbx-run build-base`"
        ))
        .into());
    }
    Ok(base)
}

/// The `docker run` of the clean room: no network, no home, no host path
/// but sbx-run itself and its input (both read-only), root without the
/// capabilities that reach outside the container, a read-only image and a
/// fresh /tmp.
pub fn room_argv(
    ws: &Workspace,
    image: &str,
    exe: &Path,
    inputs: &Path,
    name: &str,
) -> Vec<String> {
    let cfg = &ws.loaded.config;
    let mem = cfg.sandbox.memory.bytes.to_string();
    let mut a: Vec<String> = ["run", "--rm", "--name", name].map(String::from).to_vec();
    a.extend([
        "--label".into(),
        format!("{LABEL_WORKSPACE}={}", ws.path.to_string_lossy()),
        "--label".into(),
        format!("{LABEL_ROLE}=verify"),
    ]);
    // --network none: no interface but loopback. Nothing in the room needs
    // the firewall's allowlist, and nothing the code in it does can open one.
    a.extend(["--network", "none", "--cap-drop", "ALL"].map(String::from));
    // Root to set up each commit's repository and hand it to the hooks' uid;
    // nothing that reaches outside the container (no NET_*, no SYS_*).
    for cap in [
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "SETUID",
        "SETGID",
        "KILL",
    ] {
        a.extend(["--cap-add".into(), cap.into()]);
    }
    a.extend(
        [
            "--security-opt",
            "no-new-privileges",
            "--user",
            "0:0",
            "--read-only",
            "--tmpfs",
            "/tmp:exec,mode=1777",
            "--no-healthcheck",
            "--workdir",
            "/",
        ]
        .map(String::from),
    );
    a.extend(["--memory".into(), mem.clone(), "--memory-swap".into(), mem]);
    a.extend(["--cpus".into(), cfg.sandbox.cpus.0.to_string()]);
    a.extend(["--pids-limit".into(), cfg.sandbox.pids.0.to_string()]);
    let ro = |src: &Path, dst: &str| {
        format!(
            "type=bind,source={},target={dst},readonly",
            src.to_string_lossy()
        )
    };
    a.extend(["--mount".into(), ro(exe, "/sbx-verify/sbx-run")]);
    a.extend(["--mount".into(), ro(inputs, plan::IN_DIR)]);
    a.extend(["--entrypoint".into(), "/sbx-verify/sbx-run".into()]);
    a.push(image.into());
    a.extend(["-q", "verify-commits", "--clean-room", plan::IN_DIR].map(String::from));
    a
}

/// Run the clean room; read at most a capped amount of its stdout, then
/// check each verdict against the plan.
fn run_room(
    ws: &Workspace,
    image: &str,
    inputs: &Path,
    plan: &Plan,
) -> Result<Vec<plan::Verdict>, BoxError> {
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe().map_err(|e| VerifyError::Io("/proc/self/exe".into(), e))?;
    // The host's copy, not a path in the workspace: the one file of sbx
    // the room runs.
    let name = format!("sbx-verify-{}-{}", ws.names.hash, std::process::id());
    for p in [&exe.to_string_lossy(), &inputs.to_string_lossy()] {
        if p.contains([',', '"', '\n']) {
            return Err(
                VerifyError::Room(format!("{p}: a path docker's --mount cannot take")).into(),
            );
        }
    }
    let argv = room_argv(ws, image, &exe, inputs, &name);
    output::debug(&crate::spec::shell_line(&argv));
    let mut child = docker::cmd()
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| RunError::Docker {
            command: "docker run".into(),
            message: e.to_string(),
        })?;
    let cap = plan::LINE_CAP * (plan.commits.len() + 1);
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut b);
        // Drain the rest unread.
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        b
    });
    let mut out = Vec::new();
    let _ = (&mut stdout).take(cap as u64 + 1).read_to_end(&mut out);
    let over = out.len() > cap;
    if over {
        let _ = docker::probe(&["rm", "--force", &name]);
    }
    let _ = std::io::copy(&mut stdout, &mut std::io::sink());
    let status = child.wait().map_err(|e| RunError::Docker {
        command: "docker run".into(),
        message: e.to_string(),
    })?;
    let err = err_reader.join().unwrap_or_default();
    if crate::tools::interrupted() {
        let _ = docker::probe(&["rm", "--force", &name]);
        return Err(RunError::Interrupted.into());
    }
    if over {
        return Err(VerifyError::BadVerdict(format!("more than {cap} bytes")).into());
    }
    if !status.success() {
        let last = sanitize::bytes(&err);
        let last = last.lines().last().unwrap_or("").to_owned();
        return Err(
            VerifyError::Room(format!("the container failed ({status}): {}", last.trim())).into(),
        );
    }
    let lines: Vec<&[u8]> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() != plan.commits.len() {
        return Err(VerifyError::BadVerdict(format!(
            "{} verdicts for {} commits",
            lines.len(),
            plan.commits.len()
        ))
        .into());
    }
    lines
        .iter()
        .zip(&plan.commits)
        .map(|(l, c)| {
            plan::check(l, &c.id)
                .map_err(|e| VerifyError::BadVerdict(sanitize::field(&e).into_owned()).into())
        })
        .collect()
}

/// Print the verdicts: text escaped through `sanitize`, JSON as is.
fn report(
    common: &CommonArgs,
    commits: &[Listed],
    verdicts: Vec<plan::Verdict>,
) -> Result<ExitCode, BoxError> {
    let mut failed = 0usize;
    let mut stdout = std::io::stdout().lock();
    let io = |e| VerifyError::Io("-".into(), e);
    for (c, v) in commits.iter().zip(verdicts) {
        let r = Report {
            commit: v.id,
            subject: c.subject.clone(),
            ok: v.result == Outcome::Pass,
            result: v.result,
            hook: v.hook.map(plan::Hook::name),
            reason: v.reason,
            exit_code: v.exit_code,
            output: v.output,
            flags: v.flags,
        };
        if !r.ok {
            failed += 1;
        }
        if common.json {
            output::json_line(&mut stdout, "commit", &r).map_err(io)?;
            continue;
        }
        if output::is_quiet() {
            continue;
        }
        let short = &r.commit[..r.commit.len().min(12)];
        let subject = sanitize::field(&r.subject);
        let mut text = String::new();
        if !r.ok {
            text.push_str(&format!(
                "FAIL {short} {subject}: {} {}\n",
                r.hook.unwrap_or("?"),
                sanitize::field(r.reason.as_deref().unwrap_or("failed"))
            ));
            for line in sanitize::text(r.output.as_deref().unwrap_or("")).lines() {
                text.push_str("    ");
                text.push_str(line);
                text.push('\n');
            }
        }
        for f in &r.flags {
            text.push_str(&format!("FLAG {short} {subject}: {}\n", sanitize::field(f)));
        }
        stdout.write_all(text.as_bytes()).map_err(io)?;
        if r.ok && r.flags.is_empty() && output::is_verbose() {
            output::info(&format!("ok {short} {subject}"));
        }
    }
    if !common.json && !output::is_quiet() && failed == 0 {
        output::info("every commit passes the repository's pre-commit and commit-msg hooks");
    }
    Ok(if failed == 0 { Exit::Ok } else { Exit::No }.into())
}

/// The record directory, copied (files and links, one level below).
fn copy_dir(from: &Path, to: &Path) -> Result<(), VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for e in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let e = e.map_err(|e| io(from, e))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let m = std::fs::symlink_metadata(&src).map_err(|e| io(&src, e))?;
        if m.is_dir() {
            copy_dir(&src, &dst)?;
        } else if m.file_type().is_symlink() {
            let t = std::fs::read_link(&src).map_err(|e| io(&src, e))?;
            std::os::unix::fs::symlink(t, &dst).map_err(|e| io(&dst, e))?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| io(&dst, e))?;
        }
    }
    Ok(())
}
