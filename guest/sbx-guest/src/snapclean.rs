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
//!
//! Where the engine keeps layers as overlay2 directories, sbx-run binds
//! the snapshot's own layers (those above the per-repo image) read-only
//! on [`LAYERS`]`/0..N` (`--snapshot-layers N`). Everything the sandbox
//! changed is a name in one of them, so the sweep of `/` looks only at
//! those names instead of reading every directory of the image (~5,600,
//! 150 ms). What the per-repo image itself holds was never the agent's.
//! The names are held whole (~150 bytes each), so the agent could fill a
//! layer until PID 1 runs out of memory and the snapshot never starts:
//! past a share of the sandbox's memory the guest reads every directory
//! instead (one directory's names at a time).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use sbx_sys::sweep::{Act, Policy, Stat, Swept};

/// Where sbx-run binds the snapshot's layers, one directory each.
pub use sbx_core::guestapi::SNAPSHOT_LAYERS as LAYERS;

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

/// The names the snapshot's layers hold, as a tree (a node per
/// directory, its children by name): a name costs its own bytes, not its
/// whole path, however deep the agent nested it.
#[derive(Debug, Default)]
struct Names {
    nodes: Vec<HashMap<OsString, usize>>,
    /// What they cost, about ([`NAME_COST`] and each name's bytes).
    bytes: u64,
}

/// What one name of [`Names`] costs besides its bytes (a map per node,
/// its entry in its parent's, the allocation), measured: ~150 bytes.
const NAME_COST: u64 = 160;

/// The bytes of names the guest holds at most: an eighth of the
/// sandbox's memory (`limit`, its cgroup's; 4 GiB, sbx-run's default,
/// where none is set).
fn budget(limit: Option<u64>) -> u64 {
    limit.unwrap_or(4 << 30) / 8
}

/// The container's memory limit (cgroup v2, then v1); None if unlimited.
fn memory_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|t| t.trim().parse().ok())
}

impl Names {
    fn new() -> Self {
        Names {
            nodes: vec![HashMap::new()],
            bytes: 0,
        }
    }

    /// The node of `rel` (relative to the root), made if `make`.
    fn node(&mut self, rel: &Path, make: bool) -> Option<usize> {
        let mut n = 0;
        for c in rel.components() {
            let std::path::Component::Normal(c) = c else {
                continue;
            };
            n = match self.nodes[n].get(c) {
                Some(&k) => k,
                None if make => self.child(n, c),
                None => return None,
            };
        }
        Some(n)
    }

    fn child(&mut self, n: usize, name: &OsStr) -> usize {
        if let Some(&k) = self.nodes[n].get(name) {
            return k;
        }
        let k = self.nodes.len();
        self.bytes += NAME_COST + name.len() as u64;
        self.nodes.push(HashMap::new());
        self.nodes[n].insert(name.to_owned(), k);
        k
    }
}

/// Reads one layer into [`Names`]; removes nothing. Past `max` bytes of
/// names it stops taking any and enters nothing more.
struct Collect<'a> {
    root: &'a Path,
    names: &'a mut Names,
    max: u64,
}

impl Collect<'_> {
    fn full(&self) -> bool {
        self.names.bytes > self.max
    }
}

impl Policy for Collect<'_> {
    type Dir = usize;

    fn enter(&mut self, dir: &Path, _: &Stat) -> (usize, bool) {
        let rel = dir.strip_prefix(self.root).unwrap_or(Path::new(""));
        (self.names.node(rel, true).unwrap_or(0), false)
    }

    fn decide(&mut self, _: &Path, n: &usize, name: &OsStr, _: Option<&Stat>) -> Act {
        if self.full() {
            return Act::Keep;
        }
        self.names.child(*n, name);
        Act::Enter
    }
}

/// The names the layers `dirs` hold, and the directories read; None past
/// `max` bytes of names (read every directory instead).
fn collect(dirs: &[PathBuf], max: u64) -> Result<Option<(Names, u64)>, String> {
    let mut names = Names::new();
    let mut read = 0;
    for dir in dirs {
        let mut c = Collect {
            root: dir,
            names: &mut names,
            max,
        };
        read += sbx_sys::sweep::sweep(dir, &mut c)
            .map_err(|e| e.to_string())?
            .dirs;
        if c.full() {
            return Ok(None);
        }
    }
    Ok(Some((names, read)))
}

/// The rules, asked only about the names a snapshot layer holds.
struct Changed<'a> {
    root: &'a Path,
    rules: Rules,
    names: Names,
}

impl Policy for Changed<'_> {
    type Dir = (DirRules, Option<usize>);

    fn enter(&mut self, dir: &Path, st: &Stat) -> (Self::Dir, bool) {
        let (d, asks) = self.rules.enter(dir, st);
        let node = match dir.strip_prefix(self.root) {
            Ok(rel) => self.names.node(rel, false),
            Err(_) => None,
        };
        ((d, node), asks)
    }

    fn decide(&mut self, dir: &Path, d: &Self::Dir, name: &OsStr, st: Option<&Stat>) -> Act {
        match d.1 {
            Some(n) if self.names.nodes[n].contains_key(name) => {
                self.rules.decide(dir, &d.0, name, st)
            }
            _ => Act::Keep,
        }
    }
}

/// What a cleanup did.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub swept: Swept,
    /// Layers that guided it (0: every directory of `/` was read).
    pub layers: usize,
    /// Directories read in them.
    pub layer_dirs: u64,
    /// The layers' names took more than this many bytes to hold: every
    /// directory was read instead.
    pub too_many: Option<u64>,
}

/// Sweep `/` for the agent; with `layers`, only the names the mounts
/// [`LAYERS`]`/0..layers` hold, which are detached first, whatever else
/// happens (a layer the agent filled past [`budget`]: every directory is
/// read). Any error stops it: the caller fails the start (fail closed),
/// naming where.
pub fn run(agent: &crate::config::Agent, layers: usize) -> Result<Cleaned, String> {
    let mounts = sbx_sys::idmap::mounts().map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let points: Vec<PathBuf> = mounts.into_iter().map(|m| m.point).collect();
    let dirs: Vec<PathBuf> = (0..layers)
        .map(|i| Path::new(LAYERS).join(i.to_string()))
        .collect();
    // Only mounts sbx-run made: never a directory the image holds.
    let missing = dirs.iter().position(|d| !points.contains(d));
    let max = budget(memory_limit());
    let collected = match missing {
        Some(i) => Err(format!(
            "{}: not mounted: the snapshot's layer {i} is missing",
            dirs[i].display()
        )),
        None => collect(&dirs, max),
    };
    // Gone before anything else runs, read or not.
    for d in dirs.iter().filter(|d| points.contains(d)) {
        sbx_sys::idmap::detach(d).map_err(|e| format!("{}: unmount: {e}", d.display()))?;
        let _ = std::fs::remove_dir(d);
    }
    if layers > 0 {
        let _ = std::fs::remove_dir(LAYERS);
    }
    let rules = Rules::new(agent.uid, agent.gid, &agent.home, points);
    let root = Path::new("/");
    clean(root, rules, collected?, (layers, max))
}

/// The sweep of `root`, guided by the `names` of `layers` layers when
/// [`collect`] kept them (at most `max` bytes).
fn clean(
    root: &Path,
    rules: Rules,
    names: Option<(Names, u64)>,
    (layers, max): (usize, u64),
) -> Result<Cleaned, String> {
    let too_many = (layers > 0 && names.is_none()).then_some(max);
    let (swept, layers, layer_dirs) = match names {
        Some((names, read)) if layers > 0 => {
            let mut changed = Changed { root, rules, names };
            (sbx_sys::sweep::sweep(root, &mut changed), layers, read)
        }
        _ => {
            let mut rules = rules;
            (sbx_sys::sweep::sweep(root, &mut rules), 0, 0)
        }
    };
    Ok(Cleaned {
        swept: swept.map_err(|e| e.to_string())?,
        layers,
        layer_dirs,
        too_many,
    })
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

    /// Only what a layer names is looked at: the agent's files the
    /// per-repo image holds stay, those the layer holds go, at any depth.
    #[test]
    fn the_layers_names_guide_the_sweep() {
        use std::os::unix::fs::{PermissionsExt, chown};
        if !nix::unistd::getuid().is_root() {
            eprintln!("skipped: needs root (files of another uid)");
            return;
        }
        const AGENT: u32 = 4242;
        // Not under /tmp, whose every file goes.
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let (root, layer) = (t.path().join("root"), t.path().join("layer"));
        let deep: PathBuf = std::iter::repeat_n("d", 40).collect();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        std::fs::create_dir_all(root.join("w").join(&deep)).unwrap();
        std::fs::create_dir_all(root.join("x")).unwrap();
        std::fs::create_dir_all(root.join("w/sub")).unwrap();
        mode(&root.join("w"), 0o1777);
        mode(&root.join("w").join(&deep), 0o1777);
        chown(root.join("w/sub"), Some(AGENT), Some(AGENT)).unwrap();
        let files = ["w/image", "w/planted", "w/sub/planted", "x/kept"];
        let deep_f = Path::new("w").join(&deep).join("f");
        for f in files.iter().map(Path::new).chain([deep_f.as_path()]) {
            std::fs::write(root.join(f), "x").unwrap();
            chown(root.join(f), Some(AGENT), Some(AGENT)).unwrap();
            // The layer: the names the sandbox changed (content is not read).
            if f != Path::new("w/image") {
                let p = layer.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, "").unwrap();
            }
        }
        let mut names = Names::new();
        let mut collect = Collect {
            root: &layer,
            names: &mut names,
            max: u64::MAX,
        };
        sbx_sys::sweep::sweep(&layer, &mut collect).unwrap();
        let rules = Rules::new(AGENT, AGENT, Path::new("/nonexistent"), []);
        let mut changed = Changed {
            root: &root,
            rules,
            names,
        };
        sbx_sys::sweep::sweep(&root, &mut changed).unwrap();
        // The image's stays; where the agent cannot write, its file stays.
        assert!(root.join("w/image").exists());
        assert!(root.join("x/kept").exists());
        assert!(!root.join("w/planted").exists());
        // Its directory goes whole; the deep file goes.
        assert!(!root.join("w/sub").exists());
        assert!(!root.join(&deep_f).exists());
        assert!(root.join("w").join(&deep).exists());
    }

    /// A layer naming more than the guest may hold (the agent
    /// filled it to run PID 1 out of memory): the names stop being taken
    /// at the budget and every directory is read instead, so what the
    /// agent planted still goes and the start still finishes.
    #[test]
    fn a_layer_past_the_budget_is_not_held() {
        use std::os::unix::fs::{PermissionsExt, chown};
        if !nix::unistd::getuid().is_root() {
            eprintln!("skipped: needs root (files of another uid)");
            return;
        }
        const AGENT: u32 = 4243;
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let (root, layer) = (t.path().join("root"), t.path().join("layer"));
        std::fs::create_dir_all(root.join("w")).unwrap();
        std::fs::set_permissions(root.join("w"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        // The agent's file the layer names, past its filler.
        std::fs::create_dir_all(layer.join("fill")).unwrap();
        for i in 0..50 {
            std::fs::write(layer.join("fill").join(i.to_string()), "").unwrap();
        }
        std::fs::create_dir_all(layer.join("w")).unwrap();
        std::fs::write(layer.join("w/planted"), "").unwrap();
        std::fs::write(root.join("w/planted"), "x").unwrap();
        chown(root.join("w/planted"), Some(AGENT), Some(AGENT)).unwrap();
        let rules = || Rules::new(AGENT, AGENT, Path::new("/nonexistent"), []);

        // Within the budget: guided by the layer.
        let got = collect(std::slice::from_ref(&layer), 1000 * NAME_COST).unwrap();
        assert_eq!(got.as_ref().map(|(n, _)| n.nodes.len()), Some(54));

        // Past it: not held, and no more than the budget was taken.
        let mut names = Names::new();
        let mut c = Collect {
            root: &layer,
            names: &mut names,
            max: 10 * NAME_COST,
        };
        sbx_sys::sweep::sweep(&layer, &mut c).unwrap();
        // It stopped at the name that went past.
        let max = 10 * NAME_COST;
        assert!(
            names.bytes > max && names.bytes <= max + NAME_COST + 255,
            "{}",
            names.bytes
        );
        assert!(names.nodes.len() < 13, "{}", names.nodes.len());
        let got = collect(std::slice::from_ref(&layer), 10 * NAME_COST).unwrap();
        assert!(got.is_none(), "held past the budget");
        let c = clean(&root, rules(), got, (1, 10 * NAME_COST)).unwrap();
        assert_eq!((c.layers, c.too_many), (0, Some(10 * NAME_COST)), "{c:?}");
        assert!(!root.join("w/planted").exists());
        assert!(root.join("w").exists());
    }

    /// An eighth of the sandbox's memory, sbx-run's 4 GiB where unset.
    #[test]
    fn the_budget_follows_the_memory_limit() {
        assert_eq!(budget(None), budget(Some(4 << 30)));
        assert_eq!(budget(Some(4 << 30)), 512 << 20);
        assert_eq!(budget(Some(64 << 20)), 8 << 20);
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
