//! `sbx-run verify-commits`: the check at the boundary. Whatever happened
//! inside the sandbox (a git the agent brought along, objects written by
//! its own code), on the host each commit it added is checked out on top
//! of its parent in a throwaway worktree and the repository's own
//! pre-commit and commit-msg hooks run against it, as `git commit` would
//! have run them.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use clap::Args;
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};
use serde::Serialize;

/// Lines of a failing hook's output kept in the report.
const TAIL: usize = 20;

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
}

impl sbx_core::SbxError for VerifyError {
    fn exit(&self) -> Exit {
        match self {
            Self::NotARepo(_) | Self::NoBase(_) => Exit::Usage,
            Self::Git(..) => Exit::Software,
            Self::Spawn(_) => Exit::Unavailable,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
        }
    }
}

/// One commit's verdict.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub commit: String,
    pub subject: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// A path that cannot exist: git skips a graft or shallow file it
/// cannot open, silently.
const NO_FILE: &str = "/proc/self/sbx-no-such-file";

/// git with the caller's repository variables removed, so `-C` decides,
/// reading history from the objects alone (for the hooks it runs too):
/// replace refs, `info/grafts`, `shallow` and the commit-graph are files
/// in the repository that the sandbox writes, and each made a commit that
/// skipped the hooks read as a root (checked with nothing staged) or hid
/// the commits beneath it from the list (round eight).
fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir).args(["-c", "core.commitGraph=false"]);
    for v in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_REPLACE_REF_BASE",
    ] {
        c.env_remove(v);
    }
    c.env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_GRAFT_FILE", NO_FILE)
        .env("GIT_SHALLOW_FILE", NO_FILE);
    c
}

fn run(mut c: Command, what: &str) -> Result<String, VerifyError> {
    let out = c.output().map_err(VerifyError::Spawn)?;
    if !out.status.success() {
        return Err(VerifyError::Git(
            what.into(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

pub fn verify_commits(common: &CommonArgs, opts: &VerifyOpts) -> Result<ExitCode, BoxError> {
    let dir = match &opts.path {
        Some(p) => p.clone(),
        None => std::env::current_dir().map_err(|e| VerifyError::Io(".".into(), e))?,
    };
    let mut c = git(&dir);
    c.args(["rev-parse", "--show-toplevel"]);
    let top = PathBuf::from(run(c, "rev-parse").map_err(|_| VerifyError::NotARepo(dir.clone()))?);
    let since = opts.since.clone().unwrap_or_else(|| "@{upstream}".into());
    let mut c = git(&top);
    c.args(["rev-parse", "-q", "--verify", "--end-of-options"])
        .arg(format!("{since}^{{commit}}"));
    let base = run(c, "rev-parse").map_err(|_| VerifyError::NoBase(since.clone()))?;
    let mut c = git(&top);
    c.args(["rev-list", "--reverse", "--topo-order"])
        .arg(format!("{base}..HEAD"));
    let list = run(c, "rev-list")?;
    let tmp = tempfile::Builder::new()
        .prefix("sbx-verify-")
        .tempdir()
        .map_err(|e| VerifyError::Io(std::env::temp_dir(), e))?;
    let mut failed = 0usize;
    let mut stdout = std::io::stdout().lock();
    for commit in list.lines().filter(|l| !l.is_empty()) {
        let v = check(&top, commit, tmp.path())?;
        if !v.ok {
            failed += 1;
        }
        if common.json {
            output::json_line(&mut stdout, "commit", &v)
                .map_err(|e| VerifyError::Io("-".into(), e))?;
        } else if !v.ok && !output::is_quiet() {
            let mut text = format!(
                "FAIL {} {}: {} exited {}\n",
                &v.commit[..v.commit.len().min(12)],
                v.subject,
                v.hook.unwrap_or("?"),
                v.exit_code.map_or("by a signal".into(), |c| c.to_string())
            );
            for line in v.output.as_deref().unwrap_or("").lines() {
                text.push_str("    ");
                text.push_str(line);
                text.push('\n');
            }
            stdout
                .write_all(text.as_bytes())
                .map_err(|e| VerifyError::Io("-".into(), e))?;
        } else if output::is_verbose() {
            output::info(&format!(
                "ok {} {}",
                &v.commit[..12.min(v.commit.len())],
                v.subject
            ));
        }
    }
    if !common.json && !output::is_quiet() && failed == 0 {
        output::info("every commit passes the repository's pre-commit and commit-msg hooks");
    }
    Ok(if failed == 0 { Exit::Ok } else { Exit::No }.into())
}

fn tail(out: &Output) -> String {
    let mut all = String::from_utf8_lossy(&out.stdout).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = all.lines().collect();
    lines[lines.len().saturating_sub(TAIL)..].join("\n")
}

/// Check one commit: a detached worktree at its parent (HEAD, as when it
/// was being committed), its tree read into that worktree's index and
/// files, then `git hook run` for pre-commit and commit-msg, so the hooks
/// directory is found exactly as git finds it (core.hooksPath included).
fn check(top: &Path, commit: &str, tmp: &Path) -> Result<Verdict, VerifyError> {
    let mut c = git(top);
    c.args(["log", "-1", "--format=%s", commit]);
    let subject = run(c, "log")?;
    let mut c = git(top);
    c.args(["rev-parse", "-q", "--verify"])
        .arg(format!("{commit}^1^{{commit}}"));
    let parent = run(c, "rev-parse").ok();
    let wt = tmp.join(commit);
    let mut c = git(top);
    c.args(["worktree", "add", "-q", "--detach", "-f"])
        .arg(&wt)
        .arg(parent.as_deref().unwrap_or(commit));
    run(c, "worktree add")?;
    let result = hooks(top, commit, &wt, tmp, parent.is_some());
    // Always put the repository's worktree list back.
    let mut c = git(top);
    c.args(["worktree", "remove", "--force"]).arg(&wt);
    let _ = c.output();
    let mut c = git(top);
    c.args(["worktree", "prune"]);
    let _ = c.output();
    let (hook, out) = match result? {
        None => {
            return Ok(Verdict {
                commit: commit.into(),
                subject,
                ok: true,
                hook: None,
                exit_code: None,
                output: None,
            });
        }
        Some(f) => f,
    };
    Ok(Verdict {
        commit: commit.into(),
        subject,
        ok: false,
        hook: Some(hook),
        exit_code: out.status.code(),
        output: Some(tail(&out)),
    })
}

type Failure = (&'static str, Output);

fn hooks(
    top: &Path,
    commit: &str,
    wt: &Path,
    tmp: &Path,
    has_parent: bool,
) -> Result<Option<Failure>, VerifyError> {
    if has_parent {
        // Index and files become the commit's tree; HEAD stays the parent,
        // so `git diff --cached` in the hook shows what the commit added.
        let mut c = git(wt);
        c.args(["read-tree", "--reset", "-u", commit]);
        run(c, "read-tree")?;
    }
    let mut c = git(wt);
    c.args(["hook", "run", "--ignore-missing", "pre-commit"]);
    let out = c.output().map_err(VerifyError::Spawn)?;
    if !out.status.success() {
        return Ok(Some(("pre-commit", out)));
    }
    let msg = tmp.join(format!("{commit}.msg"));
    let mut c = git(top);
    c.args(["log", "-1", "--format=%B", commit]);
    let body = run(c, "log")?;
    std::fs::write(&msg, body + "\n").map_err(|e| VerifyError::Io(msg.clone(), e))?;
    let mut c = git(wt);
    c.args(["hook", "run", "--ignore-missing", "commit-msg", "--"])
        .arg(OsStr::new(&msg));
    let out = c.output().map_err(VerifyError::Spawn)?;
    if !out.status.success() {
        return Ok(Some(("commit-msg", out)));
    }
    Ok(None)
}
