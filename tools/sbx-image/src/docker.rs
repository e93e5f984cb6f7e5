//! Driving docker. Every command is a docker CLI argv, which is what
//! `show-run` prints and a user could paste; when the CLI would talk to the
//! local socket anyway, inspections, `run --detach` (see api.rs) and the
//! readiness wait go straight to the engine instead.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
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

/// A short docker call, in its own process group: a Ctrl-C at the terminal
/// reaches sbx-run only, which lets the call finish and then cleans up
/// (a CLI killed mid-request leaves the engine finishing it unseen: two
/// networks of one name, a container nobody removes).
fn short(args: &[&str]) -> Result<Output, RunError> {
    use std::os::unix::process::CommandExt;
    cmd()
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .map_err(spawn_error)
}

/// Run and capture; a non-zero exit is an error carrying docker's stderr.
pub fn output(args: &[&str]) -> Result<String, RunError> {
    let out = short(args)?;
    check(args, &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Remove an object (`rm --force`, `network rm`, `volume rm`): false when
/// docker says it was already gone (`rm --force` itself never does).
/// Removals race other removers (a second `rm`, a parallel `prune`), and
/// gone is the goal.
pub fn remove(args: &[&str]) -> Result<bool, RunError> {
    let out = short(args)?;
    if !out.status.success() && only_missing(&out.stderr) {
        return Ok(false);
    }
    check(args, &out)?;
    Ok(true)
}

/// `docker <kind> inspect ID...` for objects that may vanish between the
/// listing and the inspection: those that did are left out.
pub fn inspect_all(kind: &str, ids: &[&str]) -> Result<Vec<serde_json::Value>, RunError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![kind, "inspect"];
    args.extend(ids);
    let out = short(&args)?;
    if !out.status.success() && !only_missing(&out.stderr) {
        check(&args, &out)?;
    }
    serde_json::from_slice(&out.stdout).map_err(|e| RunError::Docker {
        command: describe(&args),
        message: format!("unreadable output: {e}"),
    })
}

/// docker's stderr says only that objects do not exist ("No such
/// container: x", "network x not found", "no such volume"), and nothing else
/// but the CLI's "exit status 1" trailer.
fn only_missing(stderr: &[u8]) -> bool {
    let s = String::from_utf8_lossy(stderr).to_ascii_lowercase();
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let missing = |l: &&str| {
        l.contains("no such ") || (l.contains(": network ") && l.ends_with(" not found"))
    };
    lines.iter().any(missing)
        && lines
            .iter()
            .all(|l| missing(l) || l.starts_with("exit status "))
}

/// Run and capture, returning success or failure without an error.
pub fn probe(args: &[&str]) -> Result<Output, RunError> {
    short(args)
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

/// The engine's unix socket when the CLI would use it too (no other host,
/// context or client configured). Then inspections go straight to the API:
/// one docker CLI start costs ~30 ms, a local request well under 1 ms.
fn fast_socket() -> Option<PathBuf> {
    if std::env::var_os("SBX_DOCKER").is_some() || std::env::var_os("DOCKER_CONTEXT").is_some() {
        return None;
    }
    let sock = match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => PathBuf::from(h.strip_prefix("unix://")?),
        _ => PathBuf::from("/var/run/docker.sock"),
    };
    let cfg = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?
        .join("config.json");
    if let Ok(text) = std::fs::read_to_string(cfg) {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if v.get("currentContext")
            .and_then(|c| c.as_str())
            .is_some_and(|c| c != "default")
        {
            return None;
        }
    }
    Some(sock)
}

/// One engine API request over the unix socket: (status, body).
fn api_request(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> std::io::Result<(u16, Vec<u8>)> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: docker\r\n");
    if let Some(b) = body {
        req += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        );
    }
    req += "\r\n";
    let mut msg = req.into_bytes();
    msg.extend_from_slice(body.unwrap_or_default());
    s.write_all(&msg)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(buf.len());
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf.get(split + 4..).unwrap_or_default().to_vec();
    Ok((status, body))
}

fn api_get(sock: &Path, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    api_request(sock, "GET", path, None)
}

/// `docker run --detach …`: through the API when the socket is ours to use
/// and the argv translates, else the CLI. A container that was created but
/// did not start is left for the caller's cleanup, as with the CLI.
pub fn run_detached(argv: &[&str]) -> Result<(), RunError> {
    let owned: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
    let (Some(sock), Some((name, body))) = (
        fast_socket(),
        crate::api::create_body(&owned, |k| std::env::var_os(k)),
    ) else {
        return output(argv).map(drop);
    };
    let body = serde_json::to_vec(&body).expect("json");
    let create = format!("/containers/create?name={}", path_escape(&name));
    api_post(&sock, &create, Some(&body), argv)?;
    api_post(
        &sock,
        &format!("/containers/{}/start", path_escape(&name)),
        None,
        argv,
    )
}

/// `docker volume create --label K=V… NAME`, through the API when the
/// socket is ours to use (the CLI is a process of ~10 ms in the start of
/// a branch never seen before, whose home volume is new), else the CLI.
pub fn create_volume(argv: &[&str]) -> Result<(), RunError> {
    match (fast_socket(), volume_create_body(argv)) {
        (Some(sock), Some(body)) => {
            let body = serde_json::to_vec(&body).expect("json");
            api_post(&sock, "/volumes/create", Some(&body), argv)
        }
        _ => output(argv).map(drop),
    }
}

/// The engine's body for `volume create --label K=V… NAME` (None: any
/// other argv, left to the CLI).
pub fn volume_create_body(argv: &[&str]) -> Option<serde_json::Value> {
    let rest = argv.strip_prefix(&["volume", "create"][..])?;
    let (name, opts) = rest.split_last()?;
    if name.starts_with('-') {
        return None;
    }
    let mut labels = serde_json::Map::new();
    for pair in opts.chunks(2) {
        let ["--label", kv] = pair else { return None };
        let (k, v) = kv.split_once('=')?;
        labels.insert(k.to_string(), v.into());
    }
    Some(serde_json::json!({ "Name": name, "Labels": labels }))
}

/// `docker start NAME`, through the API when the socket is ours to use.
pub fn start(name: &str) -> Result<(), RunError> {
    let argv = ["start", name];
    match fast_socket() {
        Some(sock) => api_post(
            &sock,
            &format!("/containers/{}/start", path_escape(name)),
            None,
            &argv,
        ),
        None => output(&argv).map(drop),
    }
}

/// `docker commit --pause --change C… CONTAINER IMAGE`, through the API
/// when the socket is ours to use (one CLI process less), else the CLI.
pub fn commit(container: &str, image: &str, changes: &[String]) -> Result<(), RunError> {
    let mut argv = vec!["commit", "--pause=true"];
    for c in changes {
        argv.extend(["--change", c.as_str()]);
    }
    argv.extend([container, image]);
    let Some(sock) = fast_socket() else {
        return output(&argv).map(drop);
    };
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, "latest"),
    };
    let mut path = format!(
        "/commit?container={}&repo={}&tag={}&pause=1",
        path_escape(container),
        path_escape(repo),
        path_escape(tag)
    );
    for c in changes {
        path += &format!("&changes={}", path_escape(c));
    }
    api_post(&sock, &path, None, &argv)
}

/// `docker pause` / `docker unpause` (`what`), through the API when the
/// socket is ours to use, else the CLI.
pub fn pause(container: &str, what: &str) -> Result<(), RunError> {
    let argv = [what, container];
    match fast_socket() {
        Some(sock) => api_post(
            &sock,
            &format!("/containers/{}/{what}", path_escape(container)),
            None,
            &argv,
        ),
        None => output(&argv).map(drop),
    }
}

/// `docker diff CONTAINER`: the paths its layer added, changed or removed,
/// exact from the API (a name may hold a newline), else the CLI's lines
/// without their kind (a name with a newline is then two).
pub fn changes(container: &str) -> Result<Vec<String>, RunError> {
    let argv = ["diff", container];
    if let Some(sock) = fast_socket() {
        let path = format!("/containers/{}/changes", path_escape(container));
        match api_get(&sock, &path) {
            Ok((200, body)) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                return Ok(v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["Path"].as_str().map(str::to_owned))
                    .collect());
            }
            Ok(_) => {} // anything unexpected: ask the CLI
            Err(e) => return Err(RunError::EngineDown(format!("{}: {e}", sock.display()))),
        }
    }
    Ok(output(&argv)?
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, p)| p).to_owned())
        .collect())
}

/// POST to the engine; a failure reads like the CLI's, naming `argv`.
fn api_post(sock: &Path, path: &str, body: Option<&[u8]>, argv: &[&str]) -> Result<(), RunError> {
    let (code, resp) = api_request(sock, "POST", path, body)
        .map_err(|e| RunError::EngineDown(format!("{}: {e}", sock.display())))?;
    // 201 created, 204 done, 304 already started.
    if matches!(code, 201 | 204 | 304) {
        return Ok(());
    }
    let message = serde_json::from_slice::<serde_json::Value>(&resp)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| first_line(&String::from_utf8_lossy(&resp)));
    Err(RunError::Docker {
        command: describe(argv),
        message,
    })
}

/// Follow a container's stderr from `since` (Unix seconds) until `needle`
/// appears: Ok(true) found, Ok(false) the stream ended first. None when no
/// direct socket is usable (the caller then follows `docker logs`). Ctrl-C
/// and the timeout end the wait with an error.
pub fn follow_logs_for(
    name: &str,
    since: &str,
    needles: &[&str],
    timeout: std::time::Duration,
) -> Option<std::io::Result<Option<usize>>> {
    use std::io::{ErrorKind, Read, Write};
    let sock = fast_socket()?;
    let run = || -> std::io::Result<Option<usize>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut s = std::os::unix::net::UnixStream::connect(&sock)?;
        // Short reads, so an interrupt is seen while the log is quiet.
        s.set_read_timeout(Some(std::time::Duration::from_millis(100)))?;
        write!(
            s,
            "GET /containers/{}/logs?follow=1&stdout=0&stderr=1&since={since} HTTP/1.0\r\nHost: docker\r\n\r\n",
            path_escape(name)
        )?;
        // The multiplexed frames need no parsing to find a line in them.
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if crate::interrupted() {
                return Err(std::io::Error::new(ErrorKind::Interrupted, "interrupted"));
            }
            if std::time::Instant::now() > deadline {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("no \"{}\" in its log after {timeout:?}", needles[0]),
                ));
            }
            let n = match s.read(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Ok(None);
            }
            seen.extend_from_slice(&buf[..n]);
            if let Some(i) = needles
                .iter()
                .position(|nd| seen.windows(nd.len()).any(|w| w == nd.as_bytes()))
            {
                return Ok(Some(i));
            }
        }
    };
    Some(run())
}

/// Names of our objects are `[a-z0-9_.:-]`; anything else is escaped.
fn path_escape(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Inspect one object (`container`, `image`, `network`, `volume`): its JSON,
/// or None when it does not exist.
pub fn inspect(kind: &str, name: &str) -> Result<Option<serde_json::Value>, RunError> {
    if let Some(sock) = fast_socket() {
        let base = match kind {
            "container" => "containers",
            "image" => "images",
            "network" => "networks",
            _ => "volumes",
        };
        match api_get(
            &sock,
            &format!(
                "/{base}/{}{}",
                path_escape(name),
                if kind == "volume" || kind == "network" {
                    ""
                } else {
                    "/json"
                }
            ),
        ) {
            Ok((200, body)) => return Ok(serde_json::from_slice(&body).ok()),
            Ok((404, _)) => return Ok(None),
            Ok(_) => {} // anything unexpected: ask the CLI
            Err(e) => return Err(RunError::EngineDown(format!("{}: {e}", sock.display()))),
        }
    }
    let out = probe(&[kind, "inspect", name])?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if engine_down(&err) {
            return Err(RunError::EngineDown(first_line(&err)));
        }
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    Ok(v.as_array().and_then(|a| a.first()).cloned())
}

pub fn exists(kind: &str, name: &str) -> Result<bool, RunError> {
    Ok(inspect(kind, name)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::{only_missing, volume_create_body};

    /// The labels and the name, as the CLI would send them; anything else
    /// is the CLI's.
    #[test]
    fn a_volume_create_translates() {
        let b = volume_create_body(&[
            "volume",
            "create",
            "--label",
            "sbx.workspace=/w/a b",
            "--label",
            "sbx.branch=",
            "v1",
        ])
        .unwrap();
        assert_eq!(
            b,
            serde_json::json!({"Name": "v1", "Labels": {"sbx.workspace": "/w/a b", "sbx.branch": ""}})
        );
        for other in [
            &["volume", "create", "--driver", "x", "v"][..],
            &["volume", "create", "--label", "v"],
            &["volume", "create"],
            &["volume", "create", "--label", "a=b", "--x"],
            &["network", "create", "v"],
        ] {
            assert!(volume_create_body(other).is_none(), "{other:?}");
        }
    }

    #[test]
    fn gone_objects_are_told_apart_from_failures() {
        for gone in [
            "Error response from daemon: No such container: x\n",
            "Error response from daemon: network x not found\nexit status 1\n",
            "Error response from daemon: get x: no such volume\n",
            "Error: No such object: a\nError: No such object: b\n",
        ] {
            assert!(only_missing(gone.as_bytes()), "{gone}");
        }
        for failure in [
            "",
            "exit status 1\n",
            "Error response from daemon: remove x: volume is in use - [abc]\n",
            "Error response from daemon: plugin not found\n",
            "Error response from daemon: No such container: x\nError response from daemon: error while removing network: network y has active endpoints\n",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
        ] {
            assert!(!only_missing(failure.as_bytes()), "{failure}");
        }
    }
}
