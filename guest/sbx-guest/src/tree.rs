//! A process and everything under it, read from /proc, and ended as one:
//! an exec tied to its client (`ExecReq::hangup`) and `agent-launch`'s CLI
//! end with their whole tree, not just their process group (a child may
//! have made its own group or session).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::agent::parent_of;

/// Every live process whose parent chain reaches `root` (not `root`).
pub fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == p && pid != root && !out.contains(&pid) {
                out.push(pid);
                frontier.push(pid);
            }
        }
    }
    out
}

/// Reap `parent`'s ended children but `except` (a subreaper's orphans,
/// which nobody else waits for).
pub fn reap_children(parent: i32, except: i32) {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if pid != except && parent_of(pid) == Some(parent) && is_zombie(pid) {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            == Some("Z")
    })
}

/// SIGKILL `root`'s descendants (and `root` itself when `with_root`).
/// They are stopped first, until a pass finds no new one, so a process
/// forking meanwhile cannot leave a child behind.
pub fn kill_tree(root: i32, with_root: bool) {
    let mut seen: Vec<i32> = Vec::new();
    if with_root {
        let _ = kill(Pid::from_raw(root), Signal::SIGSTOP);
        seen.push(root);
    }
    for _ in 0..50 {
        let new: Vec<i32> = descendants(root)
            .into_iter()
            .filter(|p| !seen.contains(p))
            .collect();
        if new.is_empty() {
            break;
        }
        for &p in &new {
            let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
        }
        seen.extend(new);
    }
    for &p in &seen {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn a_tree_that_left_its_group_is_found_and_killed() {
        // sh, a setsid'd grandchild (own session and group) and its child.
        let mut sh = Command::new("sh")
            .args(["-c", "setsid sh -c 'sleep 300 & sleep 300' & sleep 300"])
            .spawn()
            .unwrap();
        let root = sh.id() as i32;
        let t = Instant::now();
        while descendants(root).len() < 4 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let all = descendants(root);
        assert!(all.len() >= 4, "{all:?}");
        kill_tree(root, true);
        let _ = sh.wait();
        let t = Instant::now();
        while all.iter().any(|p| alive(*p)) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!all.iter().any(|p| alive(*p)), "left running: {all:?}");
    }

    /// Alive and not a zombie (orphans here go to init, which reaps them).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                .is_some_and(|st| st != "Z")
        })
    }
}
