//! Driving the docker CLI. sbx-run never talks to the engine's API itself:
//! what it runs is what `show-run` prints, and what a user could paste.

use std::ffi::OsString;
use std::process::{Command, ExitStatus, Output, Stdio};

use crate::RunError;

/// The docker client to use: `$SBX_DOCKER` (for tests and wrappers), else
/// `docker` on PATH.
pub fn program() -> OsString {
    std::env::var_os("SBX_DOCKER")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "docker".into())
}

pub fn cmd() -> Command {
    Command::new(program())
}

fn describe(args: &[&str]) -> String {
    format!("docker {}", args.join(" "))
}

/// Run and capture; a non-zero exit is an error carrying docker's stderr.
pub fn output(args: &[&str]) -> Result<String, RunError> {
    let out = cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(spawn_error)?;
    check(args, &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run and capture, returning success or failure without an error.
pub fn probe(args: &[&str]) -> Result<Output, RunError> {
    cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(spawn_error)
}

/// Run with the terminal attached (build progress, interactive shells).
pub fn status(args: &[OsString]) -> Result<ExitStatus, RunError> {
    cmd().args(args).status().map_err(spawn_error)
}

fn check(args: &[&str], out: &Output) -> Result<(), RunError> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if engine_down(&stderr) {
        return Err(RunError::EngineDown(first_line(&stderr)));
    }
    Err(RunError::Docker {
        command: describe(args),
        message: first_line(&stderr),
    })
}

pub fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no message)")
        .trim_start_matches("Error response from daemon: ")
        .to_owned()
}

fn engine_down(stderr: &str) -> bool {
    stderr.contains("Cannot connect to the Docker daemon")
        || stderr.contains("Is the docker daemon running")
        || stderr.contains("error during connect")
}

fn spawn_error(e: std::io::Error) -> RunError {
    if e.kind() == std::io::ErrorKind::NotFound {
        RunError::NoDockerClient
    } else {
        RunError::EngineDown(e.to_string())
    }
}

/// Fail early (exit 69) when no engine answers, before any other work.
pub fn require_engine() -> Result<(), RunError> {
    let out = probe(&["version", "--format", "{{.Server.Version}}"])?;
    if out.status.success() {
        Ok(())
    } else {
        Err(RunError::EngineDown(first_line(&String::from_utf8_lossy(
            &out.stderr,
        ))))
    }
}

pub fn exists(kind: &str, name: &str) -> Result<bool, RunError> {
    // No --format: volumes have no .Id, and the default output is enough.
    Ok(probe(&[kind, "inspect", name])?.status.success())
}

/// Labels of a container, or None when there is no such container.
pub fn container_labels(
    name: &str,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, RunError> {
    let out = probe(&[
        "container",
        "inspect",
        "--format",
        "{{json .Config.Labels}}",
        name,
    ])?;
    if !out.status.success() {
        return Ok(None);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    Ok(Some(v.as_object().cloned().unwrap_or_default()))
}

pub fn is_running(name: &str) -> Result<bool, RunError> {
    let out = probe(&[
        "container",
        "inspect",
        "--format",
        "{{.State.Running}}",
        name,
    ])?;
    Ok(out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "true")
}
