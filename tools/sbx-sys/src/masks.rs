//! A child that sees the workspace's masks as the sandbox does, on the
//! host: in a mount namespace of its own, each masked file under
//! `/dev/null` and each masked directory under an empty read-only tmpfs.
//! sbx-run runs the agent's host tools this way, so a program that reads
//! its working directory without being told to (`rg PATTERN`, `git grep`,
//! `make`) reads no secret (issue 38). The mounts are the child's alone:
//! nothing changes for any other process on the host.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// Run `cmd` with every path of `masks` (absolute; `true` for a
/// directory) masked. As root, in a new mount namespace; otherwise in a
/// new user namespace that maps only the caller's own uid and gid, so the
/// program keeps its identity. Fails closed: a mask that cannot be put in
/// place (a namespace refused, a path gone) fails the spawn, and the
/// program never runs.
pub fn masked_view(cmd: &mut Command, masks: &[(PathBuf, bool)]) -> io::Result<()> {
    let bad = |_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a masked path");
    let masks: Vec<(CString, bool)> = masks
        .iter()
        .map(|(p, d)| CString::new(p.as_os_str().as_bytes()).map(|c| (c, *d)))
        .collect::<Result<_, _>>()
        .map_err(bad)?;
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let uid_map = format!("{uid} {uid} 1\n").into_bytes();
    let gid_map = format!("{gid} {gid} 1\n").into_bytes();
    let write = |path: &std::ffi::CStr, data: &[u8]| -> io::Result<()> {
        // SAFETY: open/write/close on a NUL-terminated path and a live
        // buffer; the fd is closed on every path.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, data.as_ptr().cast(), data.len());
            let err = io::Error::last_os_error();
            libc::close(fd);
            if n != data.len() as isize {
                return Err(err);
            }
        }
        Ok(())
    };
    let child = move || -> io::Result<()> {
        let check = |r: libc::c_int| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: raw syscalls on NUL-terminated strings built before the
        // fork; nothing here allocates or takes a lock.
        unsafe {
            if uid == 0 {
                check(libc::unshare(libc::CLONE_NEWNS))?;
            } else {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write(c"/proc/self/setgroups", b"deny")?;
                write(c"/proc/self/uid_map", &uid_map)?;
                write(c"/proc/self/gid_map", &gid_map)?;
            }
            // Our mounts stay ours: none propagates back to the host's.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for (p, dir) in &masks {
                if *dir {
                    check(libc::mount(
                        c"tmpfs".as_ptr(),
                        p.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        c"size=4k,mode=0555".as_ptr().cast(),
                    ))?;
                } else {
                    check(libc::mount(
                        c"/dev/null".as_ptr(),
                        p.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?;
                }
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes only
    // the raw syscalls above on data built before the fork.
    unsafe { cmd.pre_exec(child) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root (the e2e and CI run so), or wherever user namespaces are
    /// allowed: the child reads the mask, the parent the file.
    #[test]
    fn the_child_reads_the_mask_and_nobody_else_does() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "SECRET=1\n").unwrap();
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/a"), "KEY\n").unwrap();
        std::fs::write(dir.path().join("plain"), "plain\n").unwrap();
        let mut c = Command::new("sh");
        c.args(["-c", "cat .env keys/a plain 2>&1; ls keys"])
            .current_dir(dir.path());
        masked_view(
            &mut c,
            &[
                (dir.path().join(".env"), false),
                (dir.path().join("keys"), true),
            ],
        )
        .unwrap();
        let o = match c.output() {
            Ok(o) => o,
            // No user namespaces for this uid here: the spawn fails closed.
            Err(e) if nix::unistd::geteuid().as_raw() != 0 => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("plain") && !out.contains("SECRET") && !out.contains("KEY"),
            "{out}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".env")).unwrap(),
            "SECRET=1\n"
        );
        // A mask that cannot be put in place: the program does not run.
        let mut c = Command::new("sh");
        c.args(["-c", "echo RAN"]);
        masked_view(&mut c, &[(dir.path().join("gone"), false)]).unwrap();
        assert!(c.output().is_err());
    }
}
