//! The shell's startup files in the agent's home, held read-only while a
//! `[tools]` policy is in force (a38z).
//!
//! Claude Code's Bash tool snapshots the functions and aliases of
//! `~/.bashrc` when a session starts and runs every command after them:
//! a function `echo` the agent wrote there ran in place of an allowed
//! `echo hi`, so the checker read, and the audit log recorded, one command
//! while another ran. bash and zsh read the others the same way. Each name
//! is bound over, read-only, with the image's `/etc/skel` copy (or an
//! empty file): a mount point can be neither written, renamed nor removed,
//! so nothing the agent does reaches what the next shell reads.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::Path;

use nix::fcntl::OFlag;
use sbx_sys::beneath::{Dir, Kind};

/// The files bash and zsh read at start and Claude Code's snapshot reads.
use sbx_core::SHELL_STARTUP as STARTUP;

/// How a pinned file is mounted (a read-only bind in the real guest).
pub trait Pinner {
    fn pin(&mut self, name: &str, target: &std::os::fd::OwnedFd) -> std::io::Result<()>;
}

/// Bind `skel/NAME` (or `empty` when the image has none) read-only.
pub struct BindPinner<'a> {
    pub skel: &'a Path,
    pub empty: &'a Path,
}

impl Pinner for BindPinner<'_> {
    fn pin(&mut self, name: &str, target: &std::os::fd::OwnedFd) -> std::io::Result<()> {
        let own = self.skel.join(name);
        let src = if std::fs::symlink_metadata(&own).is_ok_and(|m| m.is_file()) {
            own
        } else {
            self.empty.to_path_buf()
        };
        sbx_sys::idmap::bind_readonly_at(&src, target)
    }
}

/// Pin every startup file in `home`, the agent's (`uid`, `gid`): a missing
/// one is made (as the agent, empty), a link, directory or anything but a
/// file is renamed aside first (kept, under a name no shell reads).
pub fn pin_all(
    home: &Path,
    uid: u32,
    gid: u32,
    pinner: &mut (dyn Pinner + Send),
) -> Result<(), String> {
    let dir = Dir::open(home).map_err(|e| format!("{}: {e}", home.display()))?;
    // A thread of its own: the fsuid switch must touch no other.
    std::thread::scope(|s| {
        s.spawn(|| {
            for name in STARTUP {
                let fd = {
                    let _as = crate::api::FsId::set(uid, gid);
                    make_file(&dir, name)
                }
                .map_err(|e| format!("{}: {e}", home.join(name).display()))?;
                pinner
                    .pin(name, &fd)
                    .map_err(|e| format!("{}: {e}", home.join(name).display()))?;
            }
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err("the pinning thread panicked".into()))
    })
}

/// `name` as a regular file, opened O_PATH without following a link.
fn make_file(dir: &Dir, name: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    let n = OsStr::new(name);
    match dir.kind(n)? {
        Some(Kind::File) => {}
        None => drop(dir.create_new(n, 0o644)?),
        Some(_) => {
            let aside = format!("{name}.sbx-moved-{}", sbx_sys::beneath::tmp_name());
            nix::fcntl::renameat(dir.as_fd(), n, dir.as_fd(), aside.as_str())
                .map_err(std::io::Error::from)?;
            drop(dir.create_new(n, 0o644)?);
        }
    }
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        n,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    if sbx_sys::beneath::kind(&fd)? != Kind::File {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Seen(Vec<String>);
    impl Pinner for Seen {
        fn pin(&mut self, name: &str, _: &std::os::fd::OwnedFd) -> std::io::Result<()> {
            self.0.push(name.to_owned());
            Ok(())
        }
    }

    #[test]
    fn every_startup_file_becomes_a_file_and_links_are_moved_aside() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let h = t.path();
        std::fs::write(h.join(".bashrc"), "echo() { :; }\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", h.join(".profile")).unwrap();
        std::fs::create_dir(h.join(".zshrc")).unwrap();
        let me = nix::unistd::getuid().as_raw();
        let mut seen = Seen(Vec::new());
        pin_all(h, me, nix::unistd::getgid().as_raw(), &mut seen).unwrap();
        assert_eq!(seen.0, STARTUP);
        for n in STARTUP {
            assert!(
                std::fs::symlink_metadata(h.join(n)).unwrap().is_file(),
                "{n}"
            );
        }
        let names: Vec<String> = std::fs::read_dir(h)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with(".profile.sbx-moved-")),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n.starts_with(".zshrc.sbx-moved-")),
            "{names:?}"
        );
        assert!(
            std::fs::read_to_string(h.join(".bashrc"))
                .unwrap()
                .contains("echo")
        );
    }
}
