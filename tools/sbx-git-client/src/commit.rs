//! A `git commit`'s reference-transaction `prepared` step, answered here
//! where the guard's check would ask git only to hear "nothing": the
//! branch moves from `old` to `new`, and `new`'s one parent is `old`. The
//! guard lists `new^@ --not --branches old` (hooks.rs
//! `refuse_stash_copies`, COMMIT_ENV), which is then empty, or, with no
//! stash, reads `new`'s parents and subject (`no_stash_shapes`), which
//! then pass. The commit is read from its loose object, which git has just
//! written, and its SHA-1 is checked against its name: a file swapped in
//! cannot make this read another commit than git moves the branch to.
//! Any doubt (another layout, replace refs, grafts, a commit-graph that
//! could name other parents, a packed or oversized object, a header or
//! subject this does not read as git does) answers None: the guard
//! decides, as before.

use crate::sys;

/// Over this the object goes to the guard (a commit is a few hundred
/// bytes; its message could be anything).
const OBJECT_MAX: usize = 1 << 20;
const HEX: usize = 40;

fn is_hex(s: &[u8]) -> bool {
    s.len() == HEX
        && s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A NUL-terminated path in a fixed buffer.
struct PathBuf {
    buf: [u8; 4096],
    len: usize,
}

impl PathBuf {
    fn new() -> Self {
        PathBuf {
            buf: [0; 4096],
            len: 0,
        }
    }
    fn from(parts: &[&[u8]]) -> Option<Self> {
        let mut p = PathBuf::new();
        for s in parts {
            p.push(s)?;
        }
        Some(p)
    }
    fn push(&mut self, s: &[u8]) -> Option<()> {
        if s.contains(&0) || self.len + s.len() >= self.buf.len() {
            return None;
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
        Some(())
    }
    /// `self` joined with `s`, NUL-terminated.
    fn z(&self, s: &[u8]) -> Option<PathBuf> {
        let mut p = PathBuf::from(&[&self.buf[..self.len], s])?;
        p.buf[p.len] = 0;
        Some(p)
    }
    /// With its NUL (after [`PathBuf::z`]).
    fn c(&self) -> &[u8] {
        &self.buf[..=self.len]
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn exists(&self, s: &[u8]) -> Option<bool> {
        let p = self.z(s)?;
        Some(sys::file_type(p.c(), true).is_ok())
    }
}

/// A small file's whole content into `buf` (None: unreadable, or it
/// fills `buf`). Non-blocking: a FIFO put in a file's place ends it.
fn read_small<'b>(path: &PathBuf, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let fd = sys::openat(path.c(), sys::O_RDONLY | sys::O_CLOEXEC | sys::O_NONBLOCK).ok()?;
    let mut len = 0;
    let ok = loop {
        match sys::read(fd, &mut buf[len..]) {
            Ok(0) => break true,
            Ok(n) => len += n,
            Err(_) => break false,
        }
        if len == buf.len() {
            break false;
        }
    };
    sys::close(fd);
    ok.then_some(&buf[..len])
}

/// The repository's common directory as git finds it from a hook's
/// working directory (git 2.39 and later export no GIT_DIR to it: the
/// work tree's top, or a bare repository's directory), with a trailing
/// '/'. None for what this does not read: a variable that changes where
/// objects or parents come from, a `gitdir:` file it cannot read.
fn common_dir(var: &dyn Fn(&[u8]) -> Option<&'static [u8]>) -> Option<PathBuf> {
    for v in [
        &b"GIT_OBJECT_DIRECTORY"[..],
        b"GIT_ALTERNATE_OBJECT_DIRECTORIES",
        b"GIT_COMMON_DIR",
        b"GIT_REPLACE_REF_BASE",
        b"GIT_QUARANTINE_PATH",
    ] {
        if var(v).is_some() {
            return None;
        }
    }
    let mut git = match var(b"GIT_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(&[d, b"/"])?,
        Some(_) => return None,
        None => {
            let dot = PathBuf::from(&[b".git"])?.z(b"")?;
            match sys::file_type(dot.c(), true) {
                Ok(sys::S_IFDIR) => PathBuf::from(&[b".git/"])?,
                Ok(sys::S_IFREG) => {
                    let mut buf = [0u8; 4096];
                    let text = read_small(&dot, &mut buf)?;
                    let d = text.strip_prefix(b"gitdir: ")?.strip_suffix(b"\n")?;
                    if d.is_empty() || d.contains(&b'\n') || d.contains(&b'\r') {
                        return None;
                    }
                    PathBuf::from(&[d, b"/"])?
                }
                // A bare repository: the hook runs in it.
                Err(_) if PathBuf::from(&[b"./"])?.exists(b"objects")? => PathBuf::from(&[b"./"])?,
                _ => return None,
            }
        }
    };
    // A linked work tree's git dir names the common one.
    if git.exists(b"commondir")? {
        let mut buf = [0u8; 4096];
        let text = read_small(&git.z(b"commondir")?, &mut buf)?;
        let c = text.strip_suffix(b"\n").unwrap_or(text);
        if c.is_empty() || c.contains(&b'\n') || c.contains(&b'\r') {
            return None;
        }
        git = if c.first() == Some(&b'/') {
            PathBuf::from(&[c, b"/"])?
        } else {
            PathBuf::from(&[git.bytes(), c, b"/"])?
        };
    }
    Some(git)
}

/// Could git's log take a commit's parents from anywhere but its object?
/// Replace refs and grafts rewrite them, unless switched off as the guard
/// switches them off for git and its hooks (hookenv.rs FORCED:
/// `GIT_NO_REPLACE_OBJECTS=1`, `GIT_GRAFT_FILE` at a path that cannot
/// exist); reftable refs are not read here; a commit-graph may too, for a
/// commit it lists ([`in_commit_graph`]); alternates lend theirs.
fn parents_elsewhere(common: &PathBuf, forced: (bool, Option<bool>)) -> Option<bool> {
    let (no_replace, grafts_off) = forced;
    if !grafts_off? && common.exists(b"info/grafts")? {
        return Some(true);
    }
    for p in [&b"reftable"[..], b"objects/info/alternates"] {
        if common.exists(p)? {
            return Some(true);
        }
    }
    if no_replace {
        return Some(false);
    }
    // An empty refs/replace stays after pack-refs and `replace -d`.
    match sys::has_entries(common.z(b"refs/replace")?.c()) {
        Ok(false) | Err(sys::ENOENT) => {}
        _ => return Some(true),
    }
    packed_replace(&common.z(b"packed-refs")?)
}

/// Is `id` in a commit-graph git would read (the repository's file, or a
/// chain's)? A commit git has just written is not, unless one was written
/// ahead for its predictable id, with other parents. Some(false) only
/// where every graph was read and none lists it.
fn in_commit_graph(common: &PathBuf, id: &[u8; 20]) -> Option<bool> {
    let single = common.z(b"objects/info/commit-graph")?;
    match sys::file_type(single.c(), false) {
        Ok(_) => {
            if graph_has(&single, id)? {
                return Some(true);
            }
        }
        Err(sys::ENOENT) => {}
        Err(_) => return None,
    }
    let chain = common.z(b"objects/info/commit-graphs/commit-graph-chain")?;
    if sys::file_type(chain.c(), false) == Err(sys::ENOENT) {
        return Some(false);
    }
    let mut buf = [0u8; 4096];
    let text = read_small(&chain, &mut buf)?;
    for h in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if !is_hex(h) {
            return None;
        }
        let g = PathBuf::from(&[
            common.bytes(),
            b"objects/info/commit-graphs/graph-",
            h,
            b".graph",
        ])?
        .z(b"")?;
        if graph_has(&g, id)? {
            return Some(true);
        }
    }
    Some(false)
}

/// Does the commit-graph file at `path` list `id`? Its OID fanout and
/// lookup chunks, read with a binary search (git's format, version 1,
/// SHA-1); anything else: None.
fn graph_has(path: &PathBuf, id: &[u8; 20]) -> Option<bool> {
    let fd = sys::openat(path.c(), sys::O_RDONLY | sys::O_CLOEXEC | sys::O_NONBLOCK).ok()?;
    let found = graph_lookup(fd, id);
    sys::close(fd);
    found
}

fn graph_lookup(fd: sys::Fd, id: &[u8; 20]) -> Option<bool> {
    let at = |buf: &mut [u8], off: u64| -> Option<()> {
        (sys::pread(fd, buf, off).ok()? == buf.len()).then_some(())
    };
    let mut head = [0u8; 8];
    at(&mut head, 0)?;
    if &head[..4] != b"CGPH" || head[4] != 1 || head[5] != 1 {
        return None;
    }
    let chunks = u64::from(head[6]);
    let (mut oidf, mut oidl) = (None, None);
    for i in 0..chunks {
        let mut e = [0u8; 12];
        at(&mut e, 8 + 12 * i)?;
        let off = u64::from_be_bytes(e[4..].try_into().ok()?);
        match &e[..4] {
            b"OIDF" => oidf = Some(off),
            b"OIDL" => oidl = Some(off),
            _ => {}
        }
    }
    let (oidf, oidl) = (oidf?, oidl?);
    let fan = |i: u64| -> Option<u64> {
        let mut n = [0u8; 4];
        at(&mut n, oidf + 4 * i)?;
        Some(u64::from(u32::from_be_bytes(n)))
    };
    let first = u64::from(id[0]);
    let (mut lo, mut hi) = (if first == 0 { 0 } else { fan(first - 1)? }, fan(first)?);
    if lo > hi {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let mut oid = [0u8; 20];
        at(&mut oid, oidl + 20 * mid)?;
        match oid.cmp(id) {
            core::cmp::Ordering::Equal => return Some(true),
            core::cmp::Ordering::Less => lo = mid + 1,
            core::cmp::Ordering::Greater => hi = mid,
        }
    }
    Some(false)
}

/// Does packed-refs name a replace ref? Read in chunks (it can be large).
fn packed_replace(path: &PathBuf) -> Option<bool> {
    const NEEDLE: &[u8] = b" refs/replace/";
    let Ok(fd) = sys::openat(path.c(), sys::O_RDONLY | sys::O_CLOEXEC | sys::O_NONBLOCK) else {
        // None there: only a file that exists but cannot be read is doubt.
        return Some(sys::file_type(path.c(), true).is_ok());
    };
    let mut buf = [0u8; 1 << 14];
    let mut keep = 0;
    let found = loop {
        match sys::read(fd, &mut buf[keep..]) {
            Ok(0) => break Some(false),
            Ok(n) => {
                let have = keep + n;
                if buf[..have].windows(NEEDLE.len()).any(|w| w == NEEDLE) {
                    break Some(true);
                }
                keep = (NEEDLE.len() - 1).min(have);
                buf.copy_within(have - keep..have, 0);
            }
            Err(_) => break None,
        }
    };
    sys::close(fd);
    found
}

fn unhex(s: &[u8]) -> Option<[u8; 20]> {
    let mut out = [0u8; 20];
    for (i, o) in out.iter_mut().enumerate() {
        let d = |c: u8| (c as char).to_digit(16);
        *o = (d(s[2 * i])? * 16 + d(s[2 * i + 1])?) as u8;
    }
    Some(out)
}

/// The commit object `new` (40 lowercase hex), inflated and checked
/// against its name: its body after `commit <len>\0`.
fn read_commit<'b>(objects: &PathBuf, new: &[u8], out: &'b mut [u8]) -> Option<&'b [u8]> {
    use miniz_oxide::inflate::TINFLStatus;
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
    let path =
        PathBuf::from(&[objects.bytes(), b"objects/", &new[..2], b"/", &new[2..]])?.z(b"")?;
    let raw = sys::alloc(OBJECT_MAX).ok()?;
    let raw = read_small(&path, raw)?;
    let mut d = DecompressorOxide::new();
    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
        | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, _, len) = decompress(&mut d, raw, out, 0, flags);
    if status != TINFLStatus::Done {
        return None;
    }
    let data = &out[..len];
    if sha1_smol::Sha1::from(data).digest().bytes() != unhex(new)? {
        return None;
    }
    let body = data.strip_prefix(b"commit ")?;
    let nul = body.iter().position(|&b| b == 0)?;
    let size = core::str::from_utf8(&body[..nul])
        .ok()?
        .parse::<usize>()
        .ok()?;
    let body = &body[nul + 1..];
    (size == body.len()).then_some(body)
}

/// Is `body` (a commit's, after its object header) a commit whose only
/// parent is `old`, with headers git reads as this does and a subject
/// that cannot be a stash's ("index on ...", "untracked files on ...",
/// which the guard refuses where the repository holds no stash)?
fn only_parent(body: &[u8], old: &[u8]) -> bool {
    let Some(end) = body.windows(2).position(|w| w == b"\n\n") else {
        return false;
    };
    let mut lines = body[..end].split(|&b| b == b'\n');
    if !lines
        .next()
        .and_then(|l| l.strip_prefix(b"tree "))
        .is_some_and(is_hex)
    {
        return false;
    }
    let mut parents = 0;
    let mut first: &[u8] = b"";
    let mut in_parents = true;
    for l in lines {
        if let Some(p) = l.strip_prefix(b"parent ") {
            // git reads parents only right after the tree.
            if !in_parents || !is_hex(p) {
                return false;
            }
            parents += 1;
            first = p;
            continue;
        }
        in_parents = false;
        // A message in another encoding is re-encoded for the subject.
        if l.starts_with(b"encoding ") {
            return false;
        }
    }
    // The subject starts at the first line that is not blank, and joins
    // the lines of its paragraph: a first line starting "index" or
    // "untracked" (or blank) goes to the guard.
    let subject = body[end + 2..].split(|&b| b == b'\n').next().unwrap_or(b"");
    if subject.iter().all(u8::is_ascii_whitespace)
        || subject.starts_with(b"index")
        || subject.starts_with(b"untracked")
    {
        return false;
    }
    parents == 1 && first == old
}

/// The repository git runs this step in, found once.
pub struct Repo {
    common: Option<PathBuf>,
}

impl Repo {
    pub fn find(var: &dyn Fn(&[u8]) -> Option<&'static [u8]>) -> Repo {
        // git reads the variables as the guard sets them (hookenv.rs
        // FORCED); any other graft file: the guard decides.
        let no_replace = var(b"GIT_NO_REPLACE_OBJECTS") == Some(b"1");
        let grafts_off = match var(b"GIT_GRAFT_FILE") {
            None => Some(false),
            Some(f) => (f == b"/proc/self/sbx-no-grafts").then_some(true),
        };
        let common = common_dir(var)
            .filter(|c| parents_elsewhere(c, (no_replace, grafts_off)) == Some(false));
        Repo { common }
    }

    /// Does the guard's check of a `git commit` moving a branch from
    /// `old` to `new` pass without asking git anything it would not
    /// answer "nothing" to?
    pub fn commit_moves_from(&self, old: &[u8], new: &[u8]) -> bool {
        let Some(common) = &self.common else {
            return false;
        };
        if !is_hex(old) || !is_hex(new) || old.iter().all(|&b| b == b'0') {
            return false;
        }
        let Ok(out) = sys::alloc(OBJECT_MAX) else {
            return false;
        };
        let Some(id) = unhex(new) else { return false };
        in_commit_graph(common, &id) == Some(false)
            && read_commit(common, new, out).is_some_and(|body| only_parent(body, old))
    }
}
