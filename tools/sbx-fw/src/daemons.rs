//! The two helpers init leaves running, the DNS filter and the proxy:
//! started as daemons of the state directory, found again by pid file,
//! and told apart from a stale pid or one in another network namespace.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use sbx_core::error::IoContext;
use sbx_core::output;

use crate::error::FwError;
use crate::netfilter::Netfilter;
use crate::proxy;

/// The running DNS filter's pid, if it is ours.
pub fn filter_pid(dir: &Path) -> Option<u32> {
    daemon_pid(dir, "dns").ok()
}

/// The pid in `SUB.pid`, or why it is not a running `sbx-fw SUB` of this
/// network namespace: gone, another program, or one in another namespace
/// (a state directory shared with another sandbox), which serves its own
/// loopback, not ours.
fn daemon_pid(dir: &Path, sub: &str) -> Result<u32, String> {
    let file = format!("{sub}.pid");
    let pid: u32 = std::fs::read_to_string(dir.join(&file))
        .map_err(|_| format!("no {file}"))?
        .trim()
        .parse()
        .map_err(|_| format!("{file} holds no pid"))?;
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|_| format!("pid {pid} is gone"))?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let is_ours =
        args.first().is_some_and(|a| a.ends_with(b"sbx-fw")) && args.contains(&sub.as_bytes());
    if !is_ours {
        return Err(format!("pid {pid} is not an sbx-fw {sub}"));
    }
    let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let (theirs, ours) = (netns(&pid.to_string()), netns("self"));
    if theirs.is_none() || theirs != ours {
        let what = if sub == "dns" {
            "a DNS filter"
        } else {
            "a proxy"
        };
        return Err(format!(
            "pid {pid} is {what} in another network namespace ({})",
            theirs.map_or("unknown".into(), |t| t.display().to_string())
        ));
    }
    Ok(pid)
}

/// Start the DNS filter unless it runs; it re-reads the state file itself.
pub fn start_filter(dir: &Path) -> Result<(), FwError> {
    match daemon_pid(dir, "dns") {
        Ok(_) => return Ok(()),
        Err(why) if dir.join("dns.pid").exists() => {
            output::warn(&format!(
                "{}: {why}; starting a DNS filter for this namespace",
                dir.join("dns.pid").display()
            ));
        }
        Err(_) => {}
    }
    spawn(dir, "dns", "the DNS filter", |_| {
        "the DNS filter did not start (is 127.0.0.53:53 taken?); the firewall is installed and DNS is closed".into()
    })
}

/// Start the proxy unless it runs (it follows the state file itself). If
/// it cannot start, the redirect leads nowhere: blocked, never open.
pub fn start_proxy(dir: &Path) -> Result<(), FwError> {
    if daemon_pid(dir, "proxy").is_ok() {
        return Ok(());
    }
    spawn(dir, "proxy", "the proxy", |log| {
        format!(
            "the proxy did not start (see {}); the firewall is installed and TCP 80/443 stay blocked",
            log.display()
        )
    })
}

/// Start `sbx-fw SUB` as a daemon of this state directory: its diagnostics
/// go to SUB.log beside the state (an inherited stderr would keep our
/// caller's pipe open for as long as it lives); it is up once it prints
/// "ready", and its pid goes to SUB.pid. `refusal(log)` says what is left
/// blocked when it does not start.
fn spawn(
    dir: &Path,
    sub: &str,
    what: &'static str,
    refusal: impl Fn(&Path) -> String,
) -> Result<(), FwError> {
    let exe = std::env::current_exe().with_path("/proc/self/exe")?;
    let log_path = dir.join(format!("{sub}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_path(&log_path)?;
    let mut child = Command::new(exe)
        .arg(sub)
        .env("SBX_FW_STATE_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|source| FwError::Spawn { what, source })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(FwError::NotReady(refusal(&log_path)));
    }
    let pid_file = dir.join(format!("{sub}.pid"));
    std::fs::write(&pid_file, format!("{}\n", child.id())).with_path(&pid_file)?;
    Ok(())
}

/// Tell the daemon `sub` of this namespace to stop, if it runs.
pub fn stop(dir: &Path, sub: &str) {
    if let Ok(pid) = daemon_pid(dir, sub)
        && let Ok(pid) = i32::try_from(pid)
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// Out of proxy mode (reset, allow-external): our nat chain and its jump
/// go, in both families, then the proxy is stopped. The rest of the nat
/// table is not ours (Docker's DNS lives there) and stays as it is.
pub fn leave_proxy_mode(nf: &dyn Netfilter, dir: &Path) -> Result<(), FwError> {
    for fam in nf.families() {
        nf.nat_remove(fam)?;
    }
    stop(dir, "proxy");
    let _ = std::fs::remove_file(dir.join("proxy.pid"));
    Ok(())
}

/// Serve a daemon in the foreground: "ready" on stdout once it listens.
pub fn ready() {
    println!("ready");
    let _ = std::io::stdout().flush();
}

/// `sbx-fw proxy`: as root it drops to its own uid first. It records its
/// pid itself (while still root): a supervisor may restart it without init.
pub fn serve_proxy(dir: &Path) -> Result<(), FwError> {
    if nix::unistd::getuid().is_root() {
        let pid_file = dir.join("proxy.pid");
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).with_path(&pid_file)?;
    }
    proxy::serve(dir, ready).map_err(|source| FwError::Serve {
        what: "proxy",
        listen: format!(
            "ports {} and {}",
            proxy::CONNECT_PORT,
            proxy::TRANSPARENT_PORT
        ),
        source,
    })
}
