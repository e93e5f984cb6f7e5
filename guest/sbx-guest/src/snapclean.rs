//! The start of a sandbox made from a snapshot (`init --from-snapshot`):
//! a snapshot is one `docker commit` of the running sandbox, so its image
//! holds what the agent wrote outside its home and the guest's runtime
//! state. Before any service starts or anything runs as the agent, PID 1
//! removes it, so the sandbox starts as clean as a fresh one:
//!
//! - in every directory the agent can write (it owns it, anyone may write
//!   it, or its group may), every entry the agent owns, whole;
//! - every non-directory under the guest's runtime directories, /tmp and
//!   /scratch (directories stay, as the image made them).
//!
//! Mount points (the home and the other volumes, binds, tmpfs) are left
//! alone: none is in a commit. Root's changes (packages, /opt, /usr/local)
//! stay. The walk is sbx-sys's sweep: by fd, no link followed, only
//! directories stat'ed outside the directories above.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use sbx_sys::sweep::{Act, Policy, Stat, Swept};

/// Where every file goes: the guest's runtime state, /tmp, scratch space.
pub const WIPED: [&str; 10] = [
    "/run/sbx",
    "/run/sbx-audit",
    "/run/sbx-git",
    "/run/sbx-fw",
    "/run/sbx-ssh",
    "/run/sbx-secrets",
    "/run/xtables.lock",
    "/run/lock",
    "/tmp",
    "/scratch",
];

/// The rules, for an agent `uid`/`gid`.
#[derive(Debug)]
pub struct Rules {
    pub uid: u32,
    pub gid: u32,
    /// Never walked nor removed: the kernel's trees, the agent's home,
    /// every mount point.
    pub skip: HashSet<PathBuf>,
    pub wiped: Vec<PathBuf>,
    /// The parents of those: the directories whose entries are looked at
    /// by path.
    near: HashSet<PathBuf>,
}

impl Rules {
    /// For the agent whose home is `home`, with the mount points `mounts`.
    pub fn new(uid: u32, gid: u32, home: &Path, mounts: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut skip: HashSet<PathBuf> = ["/proc", "/sys", "/dev"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        skip.insert(home.to_path_buf());
        // "/" is a mount point too: the root of the walk, not an entry.
        skip.extend(mounts.into_iter().filter(|m| m != Path::new("/")));
        let wiped: Vec<PathBuf> = WIPED.iter().map(PathBuf::from).collect();
        let near = skip
            .iter()
            .chain(&wiped)
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        Self {
            uid,
            gid,
            skip,
            wiped,
            near,
        }
    }

    /// Whether the agent can make or remove names in a directory.
    fn writable(&self, st: &Stat) -> bool {
        st.uid == self.uid || st.mode & 0o002 != 0 || (st.gid == self.gid && st.mode & 0o020 != 0)
    }

    fn wiped(&self, p: &Path) -> bool {
        self.wiped.iter().any(|w| p.starts_with(w))
    }
}

/// What the rules keep of one directory: the few whose entries need
/// their paths looked at are told apart once, so the ~45,000 files of an
/// image cost no path joins.
#[derive(Debug)]
pub struct DirRules {
    writable: bool,
    /// Under a wiped directory: every file goes.
    wiped: bool,
    /// A skipped or wiped path, or a mount point, may be one of its entries.
    near: bool,
}

impl Policy for Rules {
    type Dir = DirRules;

    fn enter(&mut self, dir: &Path, st: &Stat) -> (DirRules, bool) {
        let writable = self.writable(st);
        let d = DirRules {
            writable,
            wiped: self.wiped(dir),
            near: self.near.contains(dir),
        };
        (d, writable)
    }

    fn decide(&mut self, dir: &Path, d: &DirRules, name: &OsStr, st: Option<&Stat>) -> Act {
        let is_dir = st.is_some_and(|s| s.dir);
        if !d.writable && !d.wiped && !d.near {
            // Every directory is read: root may have made one anyone can
            // write anywhere (`exec --root mkdir -m 1777 /opt/x`).
            return if is_dir { Act::Enter } else { Act::Keep };
        }
        let p = dir.join(name);
        if self.skip.contains(&p) {
            return Act::Keep;
        }
        if d.writable && st.is_some_and(|s| s.uid == self.uid) {
            return Act::Remove;
        }
        if is_dir {
            Act::Enter
        } else if d.wiped || self.wiped(&p) {
            Act::Remove
        } else {
            Act::Keep
        }
    }
}

/// Sweep `/` for the agent. Any error stops it: the caller fails the
/// start (fail closed), naming where.
pub fn run(agent: &crate::config::Agent) -> Result<Swept, String> {
    let mounts = sbx_sys::idmap::mounts().map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mut rules = Rules::new(
        agent.uid,
        agent.gid,
        &agent.home,
        mounts.into_iter().map(|m| m.point),
    );
    sbx_sys::sweep::sweep(Path::new("/"), &mut rules).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(uid: u32, gid: u32, mode: u32, dir: bool) -> Stat {
        Stat {
            uid,
            gid,
            mode,
            dev: 1,
            ino: 1,
            dir,
        }
    }

    /// Each row: directory, its owner/group/mode, entry name, entry's
    /// owner and whether it is a directory (None: not stat'ed), and
    /// what becomes of it.
    #[test]
    fn what_goes_and_what_stays() {
        let mut r = Rules::new(
            1000,
            1000,
            Path::new("/home/agent"),
            [
                PathBuf::from("/"),
                PathBuf::from("/workspace"),
                PathBuf::from("/tmp/bound"),
            ],
        );
        // (owner, group, mode) of the directory; (owner, is a dir) of the entry.
        type Row<'a> = (&'a str, (u32, u32, u32), &'a str, Option<(u32, bool)>, Act);
        let rows: &[Row] = &[
            // World-writable: the agent's entries go, root's stay.
            (
                "/var/tmp",
                (0, 0, 0o1777),
                "mine",
                Some((1000, false)),
                Act::Remove,
            ),
            (
                "/var/tmp",
                (0, 0, 0o1777),
                "d",
                Some((1000, true)),
                Act::Remove,
            ),
            (
                "/var/tmp",
                (0, 0, 0o1777),
                "roots",
                Some((0, false)),
                Act::Keep,
            ),
            (
                "/var/tmp",
                (0, 0, 0o1777),
                "rootd",
                Some((0, true)),
                Act::Enter,
            ),
            // Its own directory that root made: emptied, kept.
            (
                "/opt/app",
                (1000, 0, 0o755),
                "f",
                Some((1000, false)),
                Act::Remove,
            ),
            ("/opt", (0, 0, 0o755), "app", Some((1000, true)), Act::Enter),
            // Its group's, writable by the group; not writable by it.
            (
                "/srv/g",
                (0, 1000, 0o775),
                "f",
                Some((1000, false)),
                Act::Remove,
            ),
            ("/srv/r", (0, 1000, 0o755), "f", None, Act::Keep),
            // A file root gave it where it cannot write: stays.
            ("/etc", (0, 0, 0o755), "given", None, Act::Keep),
            // Runtime state and /tmp: every file, any owner.
            (
                "/run/sbx-fw",
                (0, 0, 0o755),
                "state.json",
                None,
                Act::Remove,
            ),
            ("/run", (0, 0, 0o755), "xtables.lock", None, Act::Remove),
            ("/run", (0, 0, 0o755), "sbx-fw", Some((0, true)), Act::Enter),
            (
                "/tmp",
                (0, 0, 0o1777),
                "roots",
                Some((0, false)),
                Act::Remove,
            ),
            ("/tmp/rootd", (0, 0, 0o700), "f", None, Act::Remove),
            // Mount points and the home: never.
            (
                "/tmp",
                (0, 0, 0o1777),
                "bound",
                Some((1000, true)),
                Act::Keep,
            ),
            (
                "/",
                (0, 0, 0o755),
                "workspace",
                Some((1000, true)),
                Act::Keep,
            ),
            (
                "/home",
                (0, 0, 0o755),
                "agent",
                Some((1000, true)),
                Act::Keep,
            ),
            ("/", (0, 0, 0o755), "proc", Some((0, true)), Act::Keep),
        ];
        for (dir, (u, g, m), name, e, want) in rows {
            let ds = st(*u, *g, *m, true);
            let es = e.map(|(uid, d)| st(uid, 1000, 0o644, d));
            let (d, asks) = r.enter(Path::new(dir), &ds);
            let got = r.decide(Path::new(dir), &d, OsStr::new(name), es.as_ref());
            assert_eq!(got, *want, "{dir}/{name}");
            assert_eq!(asks, r.writable(&ds), "{dir}");
        }
    }
}
