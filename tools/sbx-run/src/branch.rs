//! Branch mode: one sandbox per
//! branch, each working in its own worktree of one shared clone on the
//! repo-shelf volume, which every sandbox of the workspace mounts at
//! /repo-shelf. A start's guest provisions the branch (sbx-guest's
//! branch.rs, SBX_BRANCH); `sbx-run checkout` runs sbx-worktree in a
//! short-lived container instead. sbx-worktree runs every git call as
//! the agent, with a private copy of the real git (the agent never gets a
//! way around the git guard) and a config environment in which nothing the
//! shelf repository says can run a program (sbx-worktree's git.rs). The
//! container sees only the host's `.git`, through the same idmapped view
//! the sandbox gets, never its work tree (secrets the sandbox masks). The
//! agent's pushes to the `host` remote go through the guard like any other.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, SbxError, output};
use serde_json::Value;

use crate::image::{self, BuildOpts};
use crate::names::{LABEL_HASH, LABEL_ROLE, LABEL_WORKSPACE};
use crate::workspace::{AGENT_ID, Workspace};
use crate::{RunError, docker};
use sbx_core::sanitize_branch;

/// Where every sandbox mounts the workspace's repo-shelf volume.
pub const SHELF: &str = "/repo-shelf";
/// The tool in the image that does the provisioning.
pub const WORKTREE_TOOL: &str = "/usr/local/bin/sbx-worktree";

/// A branch's worktree inside a sandbox.
pub fn worktree_dir(branch: &str) -> String {
    format!("{SHELF}/worktrees/{}", sanitize_branch(branch))
}

/// sbx-worktree's refusal, passed on with its own line and exit status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ProvisionError {
    pub message: String,
    pub exit: Exit,
}

impl SbxError for ProvisionError {
    fn exit(&self) -> Exit {
        self.exit
    }
}

/// The provisioning container: root with only what handing the shelf to
/// the agent needs (chown; git itself runs as the agent), no new
/// privileges, no network (origin's branches come from the host's
/// remote-tracking refs), only the host's `.git` (`git_dir`: the idmapped
/// view when the agent needs one), read-only, gone when done.
pub fn provision_args(ws: &Workspace, branch: &str, git_dir: &Path) -> Vec<String> {
    let n = &ws.names;
    let target = ws.target();
    let mut a: Vec<String> = vec!["run".into(), "--rm".into()];
    a.extend([
        "--name".into(),
        format!("{}-provision-{}", n.container, std::process::id()),
    ]);
    a.extend([
        "--label".into(),
        format!("{LABEL_WORKSPACE}={}", ws.path.to_string_lossy()),
        "--label".into(),
        format!("{LABEL_HASH}={}", n.hash),
        "--label".into(),
        format!("{LABEL_ROLE}=provision"),
    ]);
    a.extend([
        "--user".into(),
        "0:0".into(),
        "--cap-drop".into(),
        "ALL".into(),
    ]);
    // SETUID and SETGID: sbx-worktree runs git as the agent.
    for c in ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"] {
        a.extend(["--cap-add".into(), c.into()]);
    }
    a.extend(["--security-opt".into(), "no-new-privileges".into()]);
    a.extend(["--network".into(), "none".into()]);
    a.extend([
        "--mount".into(),
        format!("type=volume,source={},target={SHELF}", n.repo_shelf),
    ]);
    let src = git_dir.to_string_lossy();
    let target = format!("{target}/.git");
    let bind = format!("type=bind,source={src},target={target},readonly");
    // Same quoting as spec.rs for paths with commas or quotes.
    let bind = if src.contains([',', '"', '\n', '\r']) || target.contains([',', '"']) {
        format!(
            "type=bind,\"source={}\",\"target={}\",readonly",
            src.replace('"', "\"\""),
            target.replace('"', "\"\"")
        )
    } else {
        bind
    };
    a.extend(["--mount".into(), bind]);
    a.extend(["--entrypoint".into(), WORKTREE_TOOL.into()]);
    a.push(n.image.clone());
    a.extend([
        "--json".into(),
        "provision".into(),
        "--shelf".into(),
        SHELF.into(),
        "--host-repo".into(),
        ws.target(),
        format!("--branch={branch}"),
        "--owner".into(),
        format!("{AGENT_ID}:{AGENT_ID}"),
        "--origin-from-host".into(),
    ]);
    a
}

/// Before a start builds or creates anything: the host's `.git` is a
/// directory and git takes the name. The sandbox's guest provisions the
/// worktree itself (sbx-guest's branch.rs), and sbx-worktree checks all
/// of it again there; these two are the one-line refusals before any
/// container exists.
pub fn precheck(ws: &Workspace) -> Result<(), BoxError> {
    let Some(branch) = ws.branch.as_deref() else {
        if ws.clone_mode() {
            return Err(ProvisionError {
                message: format!(
                    "{}: the checkout is on no branch (a detached HEAD), and clone mode works on the host's current branch: `git switch` to one, or give --branch B",
                    sbx_core::sanitize::field(&ws.path.to_string_lossy())
                ),
                exit: Exit::DataErr,
            }
            .into());
        }
        return Ok(());
    };
    git_dir(ws)?;
    if ref_ok(&["--branch", branch], branch) {
        return Ok(());
    }
    Err(ProvisionError {
        message: format!(
            "branch {branch:?}: git refuses this name (git check-ref-format --branch): pick another"
        ),
        exit: Exit::Usage,
    }
    .into())
}

/// `git check-ref-format ARGS` accepts the name (and with `--branch`,
/// prints it unchanged). No git on the host: true, the sandbox's
/// sbx-worktree decides.
pub fn ref_ok(args: &[&str], name: &str) -> bool {
    // No repository, no config: the name alone (`@{-1}` expands to nothing).
    let o = std::process::Command::new("git")
        .arg("check-ref-format")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", "/")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .output();
    match o {
        Ok(o) => {
            o.status.success()
                && (args[0] != "--branch"
                    || String::from_utf8_lossy(&o.stdout).trim_end_matches('\n') == name)
                && !name.starts_with('-')
        }
        // A name nothing checked is not taken.
        Err(_) => false,
    }
}

/// A start that did not get ready: a branch whose provisioning failed is
/// sbx-worktree's line and exit status (the guest's status has both).
pub fn start_failure(container: &str, e: RunError) -> BoxError {
    let st = crate::lifecycle::read_status(container);
    let exit = st.as_ref().and_then(|s| s["exit"].as_i64());
    match (exit, st) {
        (Some(code), Some(st)) => ProvisionError {
            message: st["reason"]
                .as_str()
                .unwrap_or("provisioning failed")
                .to_owned(),
            exit: exit_of(code as i32),
        }
        .into(),
        _ => e.into(),
    }
}

/// sbx-worktree's status as sbx's (64 bad name, 75 lock, 77 refused, …).
fn exit_of(code: i32) -> Exit {
    match code {
        64 => Exit::Usage,
        65 => Exit::DataErr,
        66 => Exit::NoInput,
        69 => Exit::Unavailable,
        71 => Exit::OsErr,
        75 => Exit::TempFail,
        77 => Exit::Denied,
        _ => Exit::Software,
    }
}

/// Provision the workspace's branch on its shelf (idempotent): builds the
/// image and makes the volume when missing, then runs sbx-worktree.
pub fn provision(ws: &Workspace) -> Result<Value, BoxError> {
    let Some(branch) = ws.branch.as_deref() else {
        return Ok(Value::Null);
    };
    // Before anything is built or created.
    git_dir(ws)?;
    let n = &ws.names;
    if !docker::exists("image", &n.image)? {
        image::build_repo(ws, &BuildOpts::default())?;
    }
    if !docker::exists("volume", &n.repo_shelf)? {
        let w = format!("{LABEL_WORKSPACE}={}", ws.path.to_string_lossy());
        let h = format!("{LABEL_HASH}={}", n.hash);
        docker::output(&[
            "volume",
            "create",
            "--label",
            &w,
            "--label",
            &h,
            &n.repo_shelf,
        ])?;
    }
    let view = GitView::new(ws)?;
    let args = provision_args(ws, branch, &view.dir);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = docker::probe(&argv);
    drop(view);
    let out = out?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // sbx-worktree's own line and status (64 bad name, 75 lock, …);
        // docker's 125-127 are the run itself failing.
        let code = out.status.code().unwrap_or(70);
        let line = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message")
            .trim_start_matches("sbx-worktree: error: ")
            .to_owned();
        let exit = exit_of(code);
        return Err(ProvisionError {
            message: format!("branch {branch:?}: provisioning failed: {line}"),
            exit,
        }
        .into());
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| ProvisionError {
        message: format!("branch {branch:?}: sbx-worktree printed no JSON ({e}); is it in the image? rebuild the base image"),
        exit: Exit::Software,
    })?;
    Ok(v["data"].clone())
}

/// The host's `.git` as the provisioning container binds it: the
/// directory itself when the agent owns the workspace, else an idmapped
/// view of it (owner <-> agent, as workspace.rs makes for the sandbox)
/// in a root-only directory, detached when dropped.
struct GitView {
    dir: PathBuf,
    mount: Option<PathBuf>,
}

/// The host's `.git`, which must be a directory: the provisioning
/// container binds only it, so a `gitdir:` file would point nowhere.
fn git_dir(ws: &Workspace) -> Result<PathBuf, ProvisionError> {
    let git = ws.path.join(".git");
    if std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        return Ok(git);
    }
    Err(git_dir_error(ws))
}

fn git_dir_error(ws: &Workspace) -> ProvisionError {
    ProvisionError {
        message: format!(
            "{}: .git is not a directory (a linked worktree or a submodule): branch mode needs the repository's main checkout",
            ws.path.display()
        ),
        exit: Exit::DataErr,
    }
}

impl GitView {
    /// `.git` is opened once, beneath the workspace with no link followed
    /// (sbx_sys::beneath), and what is bound is that open directory: the
    /// agent of a running sandbox swapping `.git` for a link to another
    /// repository between the check and the bind gets nothing (issue 37).
    fn new(ws: &Workspace) -> Result<Self, BoxError> {
        use sbx_sys::beneath::{Kind, Root};
        git_dir(ws)?;
        let by_fd = ws.idmapped() || nix::unistd::geteuid().is_root();
        if !by_fd {
            // Not root, the agent's own workspace: only docker can bind,
            // by name (docs/security.md, "Without root").
            return Ok(Self {
                dir: ws.path.join(".git"),
                mount: None,
            });
        }
        let root = Root::open(&ws.path).map_err(|e| RunError::Io(ws.path.clone(), e))?;
        let (fd, kind) = match root.open_mount_source(Path::new(".git")) {
            Ok(o) => o,
            Err(e) => {
                return Err(ProvisionError {
                    message: format!(
                        "{}: .git: {e}: sbx-run checkout follows no link in the workspace; make .git the repository's own directory again",
                        sbx_core::sanitize::field(&ws.path.to_string_lossy())
                    ),
                    exit: Exit::DataErr,
                }
                .into());
            }
        };
        if kind != Kind::Dir {
            return Err(git_dir_error(ws).into());
        }
        let parent = crate::workspace::run_dir(&format!(
            "{}.provision.{}",
            ws.names.container,
            std::process::id()
        ));
        let dir = parent.join("git");
        crate::workspace::private_dir(&dir)?;
        let (u, g) = ws.owner;
        let r = if ws.idmapped() {
            sbx_sys::idmap::bind_fd(
                &fd,
                &dir,
                &sbx_sys::idmap::swap(AGENT_ID, u),
                &sbx_sys::idmap::swap(AGENT_ID, g),
            )
        } else {
            sbx_sys::beneath::clone_to(&fd, &dir, true)
        };
        if let Err(e) = r {
            let _ = std::fs::remove_dir(&dir);
            let _ = std::fs::remove_dir(&parent);
            return Err(ProvisionError {
                message: format!(
                    "{}: owned by {u}:{g}: cannot make the view of .git provisioning reads it through ({e}): run sbx-run as root, or `chown -R {AGENT_ID}:{AGENT_ID} {}`",
                    ws.path.display(),
                    ws.path.display()
                ),
                exit: Exit::OsErr,
            }
            .into());
        }
        Ok(Self {
            dir: dir.clone(),
            mount: Some(parent),
        })
    }
}

impl Drop for GitView {
    fn drop(&mut self) {
        if let Some(parent) = &self.mount {
            let _ = sbx_sys::idmap::detach(&self.dir);
            let _ = std::fs::remove_dir(&self.dir);
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// `sbx-run checkout BRANCH`: provision only, print what was done.
pub fn checkout(
    common: &CommonArgs,
    path: Option<PathBuf>,
    branch: &str,
) -> Result<ExitCode, BoxError> {
    let ws = Workspace::open(common, path)?.with_branch(Some(branch));
    let d = provision(&ws)?;
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        output::json_line(&mut out, "provisioned", &d)
    } else if common.quiet {
        Ok(())
    } else {
        use std::io::Write;
        writeln!(
            out,
            "{} {} ({}; pushes to {})",
            sbx_core::sanitize::field(d["worktree"].as_str().unwrap_or("?")),
            sbx_core::sanitize::field(d["path"].as_str().unwrap_or("?")),
            sbx_core::sanitize::field(branch),
            sbx_core::sanitize::field(d["upstream"].as_str().unwrap_or("?"))
        )
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))?;
    Ok(Exit::Ok.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(branch: Option<&str>) -> Workspace {
        let t = std::env::temp_dir().join("sbx-branch-test/my-app");
        Workspace::with_config(
            t,
            sbx_core::config::Loaded {
                config: Default::default(),
                source: sbx_core::config::Source::Default,
            },
        )
        .with_branch(branch)
    }

    #[test]
    fn workdir_and_names() {
        let w = ws(Some("feature/x y"));
        assert_eq!(w.workdir(), "/repo-shelf/worktrees/feature__x__y");
        assert!(w.names.container.contains("-feature__x__y-"));
        assert_eq!(ws(None).workdir(), "/workspace/my-app");
        // One shelf per workspace, whatever the branch.
        assert_eq!(w.names.repo_shelf, ws(None).names.repo_shelf);
    }

    #[test]
    fn provisioning_container_is_narrow() {
        let w = ws(Some("b"));
        let a = provision_args(&w, "b", Path::new("/v/git")).join(" ");
        for want in [
            "--rm",
            "--cap-drop ALL",
            "--cap-add CHOWN",
            "--cap-add SETUID",
            "--security-opt no-new-privileges",
            "--network none",
            "source=/v/git,target=/workspace/my-app/.git,readonly",
            "--host-repo /workspace/my-app ",
            "--entrypoint /usr/local/bin/sbx-worktree",
            "--branch=b --owner 1000:1000 --origin-from-host",
        ] {
            assert!(a.contains(want), "{want} in {a}");
        }
        assert!(!a.contains("SYS_ADMIN") && !a.contains("--privileged"));
    }
}
