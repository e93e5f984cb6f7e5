//! A file tree as it crosses the host/sandbox boundary for `sbx-run cp`:
//! the guest's own framing (one JSON entry per file, directory or link,
//! then the file's bytes), and the rules the receiving side applies to
//! every entry before it touches its disk. The sender is hostile: the
//! receiver takes one name at a time (never a path), checks it, clamps
//! the mode and keeps a link only when it stays inside the copied tree.
//!
//! Stream: the `pack` request's `Reply::Ok`, then per entry a Reply frame
//! holding a [`Entry`]; a file's entry is followed by exactly `size` bytes
//! in Data frames; `Up` closes the last open directory; Eof ends the tree.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use sbx_sys::beneath::{Dir, Kind, Meta};
use serde::{Deserialize, Serialize};

/// The longest name either side accepts (NAME_MAX on Linux).
pub const NAME_MAX: usize = 255;
/// How deep a tree may nest; deeper is refused (each level holds an fd).
pub const MAX_DEPTH: usize = 256;

/// One item of a packed tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "lowercase", deny_unknown_fields)]
pub enum Entry {
    /// A directory: the entries that follow are inside it until its `Up`.
    Dir {
        name: Vec<u8>,
        mode: u32,
        mtime: i64,
    },
    /// A regular file: exactly `size` bytes of Data follow.
    File {
        name: Vec<u8>,
        mode: u32,
        size: u64,
        mtime: i64,
    },
    Symlink {
        name: Vec<u8>,
        target: Vec<u8>,
        mtime: i64,
    },
    /// Something the sender would not send (a FIFO, a device, a file
    /// swapped for a link mid-walk), with the reason.
    Skip { name: Vec<u8>, why: String },
    /// The end of the innermost open directory.
    Up,
}

/// Why a name is refused, or None when it is one plain path component.
pub fn bad_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("an empty name")
    } else if name == b"." || name == b".." {
        Some("`.` or `..`")
    } else if name.contains(&b'/') {
        Some("a name with `/`")
    } else if name.contains(&0) {
        Some("a name with a NUL byte")
    } else if name.len() > NAME_MAX {
        Some("a name longer than 255 bytes")
    } else {
        None
    }
}

/// A symlink at `depth` directories below the copied tree's top may be
/// kept when its target cannot leave the tree: relative, its `..` only
/// leading and no more of them than `depth`, then plain names. A `..`
/// after a name is refused: the name may be a link itself, and `..` from
/// its target is not the lexical parent.
pub fn link_stays_inside(target: &[u8], depth: usize) -> bool {
    if target.is_empty() || target.starts_with(b"/") || target.contains(&0) {
        return false;
    }
    let mut ups = 0usize;
    let mut named = false;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." if named => return false,
            b".." => ups += 1,
            _ => named = true,
        }
    }
    ups <= depth
}

/// The mode a copied file or directory gets: permission bits only (no
/// set-uid, set-gid or sticky); directories stay enterable by their owner.
pub fn clamp_mode(mode: u32, dir: bool) -> u32 {
    let m = mode & 0o777;
    if dir { m | 0o700 } else { m | 0o600 }
}

/// The ustar header block(s) of one entry: a GNU long-name block first
/// when `path` (or a link's target) does not fit ustar's fields.
/// `kind` is b'0' (file), b'5' (directory) or b'2' (symlink).
pub fn ustar_header(
    path: &[u8],
    kind: u8,
    mode: u32,
    size: u64,
    link: &[u8],
    mtime: i64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    if link.len() > 100 {
        out.extend(long_name(b'K', link));
    }
    if path.len() > 100 {
        out.extend(long_name(b'L', path));
    }
    out.extend(block(path, kind, mode, size, link, mtime));
    out
}

/// GNU's ././@LongLink: a header then the name in 512-byte blocks.
fn long_name(kind: u8, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::from(block(
        b"././@LongLink",
        kind,
        0o644,
        name.len() as u64 + 1,
        b"",
        0,
    ));
    v.extend_from_slice(name);
    v.push(0);
    v.resize(v.len().div_ceil(512) * 512, 0);
    v
}

fn block(path: &[u8], kind: u8, mode: u32, size: u64, link: &[u8], mtime: i64) -> [u8; 512] {
    let mut h = [0u8; 512];
    let cut = |b: &[u8], n: usize| b[..b.len().min(n)].to_vec();
    h[..path.len().min(100)].copy_from_slice(&cut(path, 100));
    let oct = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{v:0w$o}", w = len - 1);
        let s = s.as_bytes();
        let s = &s[s.len().saturating_sub(len - 1)..];
        h[at..at + s.len()].copy_from_slice(s);
    };
    oct(&mut h, 100, 8, u64::from(mode & 0o7777));
    oct(&mut h, 108, 8, 0);
    oct(&mut h, 116, 8, 0);
    oct(&mut h, 124, 12, size);
    oct(&mut h, 136, 12, mtime.max(0) as u64);
    h[156] = kind;
    h[157..157 + link.len().min(100)].copy_from_slice(&cut(link, 100));
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// Walk what the sender opened: `top` (a directory or a file, already
/// open) under the name `name`, then below it nothing but names relative
/// to directories it holds, none followed. Each entry goes to `emit`,
/// with the open file for a file; the receiver must get exactly `size`
/// bytes, so `emit` sends [`send_exact`].
pub fn walk(
    top: File,
    name: &OsStr,
    emit: &mut dyn FnMut(Entry, Option<&mut File>) -> io::Result<()>,
) -> io::Result<()> {
    let m = sbx_sys::beneath::fmeta(&top)?;
    let n = name.as_bytes().to_vec();
    match m.kind {
        Kind::Dir => {
            emit(
                Entry::Dir {
                    name: n,
                    mode: m.mode,
                    mtime: m.mtime,
                },
                None,
            )?;
            walk_dir(&Dir::from(std::os::fd::OwnedFd::from(top)), 1, emit)?;
            emit(Entry::Up, None)
        }
        Kind::File => {
            let mut f = top;
            emit(file_entry(n, &m), Some(&mut f))
        }
        _ => emit(
            Entry::Skip {
                name: n,
                why: "not a regular file or directory".into(),
            },
            None,
        ),
    }
}

fn file_entry(name: Vec<u8>, m: &Meta) -> Entry {
    Entry::File {
        name,
        mode: m.mode,
        size: m.size,
        mtime: m.mtime,
    }
}

fn walk_dir(
    dir: &Dir,
    depth: usize,
    emit: &mut dyn FnMut(Entry, Option<&mut File>) -> io::Result<()>,
) -> io::Result<()> {
    let skip = |name: &OsStr, why: String| Entry::Skip {
        name: name.as_bytes().to_vec(),
        why,
    };
    let mut names = dir.names()?;
    names.sort();
    for name in names {
        let Some(m) = dir.stat(&name)? else { continue };
        let n = name.as_bytes().to_vec();
        match m.kind {
            Kind::Dir if depth >= MAX_DEPTH => {
                emit(skip(&name, format!("nested deeper than {MAX_DEPTH}")), None)?
            }
            Kind::Dir => match dir.sub(&name) {
                Ok(sub) => {
                    let mm = sbx_sys::beneath::fmeta(&sub)?;
                    emit(
                        Entry::Dir {
                            name: n,
                            mode: mm.mode,
                            mtime: mm.mtime,
                        },
                        None,
                    )?;
                    walk_dir(&sub, depth + 1, emit)?;
                    emit(Entry::Up, None)?;
                }
                Err(e) => emit(skip(&name, format!("not opened ({e})")), None)?,
            },
            Kind::File => match dir.open_file(&name) {
                // What was opened is what is sent: a file swapped for a
                // link or a FIFO since the stat fails here or is skipped.
                Ok(mut f) => match sbx_sys::beneath::fmeta(&f)? {
                    fm if fm.kind == Kind::File => emit(file_entry(n, &fm), Some(&mut f))?,
                    _ => emit(skip(&name, "no longer a regular file".into()), None)?,
                },
                Err(e) => emit(skip(&name, format!("not opened ({e})")), None)?,
            },
            Kind::Symlink => {
                let target = dir.readlink(&name)?.into_vec();
                emit(
                    Entry::Symlink {
                        name: n,
                        target,
                        mtime: m.mtime,
                    },
                    None,
                )?
            }
            Kind::Other => emit(
                skip(&name, "a FIFO, socket or device node (not copied)".into()),
                None,
            )?,
        }
    }
    Ok(())
}

/// Copy exactly `size` bytes of `f` to `out` in `chunk`-sized pieces: a
/// file that shrank since its stat is padded with zeros, one that grew is
/// cut, so the stream stays framed whatever the file's owner does.
pub fn send_exact(
    f: &mut File,
    size: u64,
    chunk: usize,
    out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; chunk.min(size as usize).max(1)];
    let mut left = size;
    let mut eof = false;
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = if eof {
            buf[..want].fill(0);
            want
        } else {
            match f.read(&mut buf[..want]) {
                Ok(0) => {
                    eof = true;
                    continue;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    eof = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        out(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Where a file's bytes go while it is received.
#[derive(Debug)]
pub enum Sink {
    /// A refused entry: its bytes are read and dropped.
    Discard,
    File {
        file: File,
        tmp: OsString,
        name: OsString,
        mode: u32,
        mtime: i64,
    },
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Discard => Ok(b.len()),
            Sink::File { file, .. } => file.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The receiving side: applies entries beneath `base` with the rules of
/// this module. Refusals are collected (raw; sanitise them to print),
/// never fatal; an I/O error on the destination is.
#[derive(Debug)]
pub struct Writer {
    base: Dir,
    /// The top entry's name here instead of its own (`cp :dir newname`).
    rename_top: Option<OsString>,
    /// chown every entry made to this (a root caller: the destination's owner).
    owner: Option<(u32, u32)>,
    /// A link may be the top entry: only when the sender is trusted (the
    /// host's `cp LINK :DIR`), never on the host, where the agent sends.
    top_link: bool,
    stack: Vec<(Dir, OsString)>,
    /// Open directories that were refused (their content is dropped).
    dropped: usize,
    pub refused: Vec<String>,
    pub files: u64,
    pub bytes: u64,
}

impl Writer {
    pub fn new(base: Dir, rename_top: Option<OsString>, owner: Option<(u32, u32)>) -> Self {
        Writer {
            base,
            rename_top,
            owner,
            top_link: false,
            stack: Vec::new(),
            dropped: 0,
            refused: Vec::new(),
            files: 0,
            bytes: 0,
        }
    }

    /// Take a symlink as the top entry, kept as the link it is.
    pub fn keep_top_link(mut self) -> Self {
        self.top_link = true;
        self
    }

    fn here(&self) -> &Dir {
        self.stack.last().map(|(d, _)| d).unwrap_or(&self.base)
    }

    /// The entry's path in the copied tree, for messages.
    fn path(&self, name: &[u8]) -> String {
        let mut p: Vec<String> = self
            .stack
            .iter()
            .map(|(_, n)| n.to_string_lossy().into_owned())
            .collect();
        p.push(String::from_utf8_lossy(name).into_owned());
        p.join("/")
    }

    fn refuse(&mut self, name: &[u8], why: &str) {
        let p = self.path(name);
        self.refused.push(format!("{p}: {why}"));
    }

    /// The name this entry gets, or None (refused and recorded).
    fn name(&mut self, name: &[u8]) -> Option<OsString> {
        if let Some(why) = bad_name(name) {
            self.refuse(name, &format!("{why} (not copied)"));
            return None;
        }
        if self.stack.is_empty() {
            if let Some(n) = self.rename_top.take() {
                return Some(n);
            }
        }
        Some(OsString::from_vec(name.to_vec()))
    }

    fn chown(&self, dir: &Dir, name: &OsStr) -> io::Result<()> {
        match self.owner {
            Some((u, g)) => dir.chown(name, u, g),
            None => Ok(()),
        }
    }

    /// Apply one entry. For a file, fill the returned sink with exactly its
    /// size, then hand it to [`Writer::finish`].
    pub fn entry(&mut self, e: Entry) -> io::Result<Sink> {
        if self.dropped > 0 {
            match e {
                Entry::Dir { .. } => self.dropped += 1,
                Entry::Up => self.dropped -= 1,
                _ => {}
            }
            return Ok(Sink::Discard);
        }
        match e {
            Entry::Up => {
                self.stack.pop();
            }
            Entry::Dir { name, mode, .. } => match self.name(&name) {
                None => self.dropped = 1,
                Some(n) => {
                    let made = self.here().kind(&n)?.is_none();
                    match self.here().make_dir(&n, clamp_mode(mode, true)) {
                        Ok(d) => {
                            if made {
                                self.chown(self.here(), &n)?;
                            }
                            self.stack.push((d, n));
                        }
                        Err(err) => {
                            self.refuse(&name, &format!("not made ({err})"));
                            self.dropped = 1;
                        }
                    }
                }
            },
            Entry::File {
                name, mode, mtime, ..
            } => {
                if let Some(n) = self.name(&name) {
                    let (file, tmp) = self.here().temp_file()?;
                    return Ok(Sink::File {
                        file,
                        tmp,
                        name: n,
                        mode: clamp_mode(mode, false),
                        mtime,
                    });
                }
            }
            Entry::Symlink { name, target, .. } => {
                let depth = self.stack.len().saturating_sub(1);
                let kept = if self.stack.is_empty() {
                    self.top_link && !target.is_empty() && !target.contains(&0)
                } else {
                    link_stays_inside(&target, depth)
                };
                if !kept {
                    let t = String::from_utf8_lossy(&target).into_owned();
                    self.refuse(
                        &name,
                        &format!("a symlink to {t}, which leaves the copied tree (not copied)"),
                    );
                } else if let Some(n) = self.name(&name) {
                    let tmp = self.here().temp_symlink(OsStr::from_bytes(&target))?;
                    self.chown(self.here(), &tmp)?;
                    if let Err(err) = self.here().replace(&tmp, &n) {
                        self.refuse(&name, &format!("not written ({err})"));
                    }
                }
            }
            Entry::Skip { name, why } => self.refuse(&name, &why),
        }
        Ok(Sink::Discard)
    }

    /// Put a received file in place: mode and owner on the new file, then
    /// renamed over the name (replacing a link there, never following it).
    pub fn finish(&mut self, sink: Sink, size: u64) -> io::Result<()> {
        let Sink::File {
            file,
            tmp,
            name,
            mode,
            mtime,
        } = sink
        else {
            return Ok(());
        };
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        if let Some((u, g)) = self.owner {
            std::os::unix::fs::fchown(&file, Some(u), Some(g))?;
        }
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime.max(0) as u64);
        let _ = file.set_modified(t);
        drop(file);
        if let Err(err) = self.here().replace(&tmp, &name) {
            let n = name.as_bytes().to_vec();
            self.refuse(&n, &format!("not written ({err})"));
            return Ok(());
        }
        self.files += 1;
        self.bytes += size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_plain_components() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b", &[b'x'; 256]] {
            assert!(bad_name(bad).is_some(), "{bad:?}");
        }
        for good in [&b"a"[..], b"...", b"\x1b[2K\n", b".hidden", &[b'x'; 255]] {
            assert_eq!(bad_name(good), None, "{good:?}");
        }
    }

    #[test]
    fn links_stay_inside_only_when_they_cannot_climb_out() {
        let cases: [(&[u8], usize, bool); 12] = [
            (b"x", 0, true),
            (b"./sub/x", 0, true),
            (b"../x", 1, true),
            (b"../../x", 1, false),
            (b"../x", 0, false),
            (b"/etc", 5, false),
            (b"sub/../..", 3, false),
            (b"sub/..", 3, false),
            (b"", 0, false),
            (b"..", 1, true),
            (b"a\0b", 1, false),
            (b"../../a/b", 2, true),
        ];
        for (t, d, ok) in cases {
            assert_eq!(
                link_stays_inside(t, d),
                ok,
                "{:?} at {d}",
                String::from_utf8_lossy(t)
            );
        }
    }

    #[test]
    fn modes_lose_special_bits() {
        assert_eq!(clamp_mode(0o4755, false), 0o755);
        assert_eq!(clamp_mode(0o2000, false), 0o600);
        assert_eq!(clamp_mode(0o1777, true), 0o777);
        assert_eq!(clamp_mode(0o000, true), 0o700);
    }

    #[test]
    fn ustar_headers_have_a_valid_checksum_and_long_names() {
        let h = ustar_header(b"a/b.txt", b'0', 0o644, 5, b"", 1);
        assert_eq!(h.len(), 512);
        let stored = std::str::from_utf8(&h[148..154]).unwrap();
        let mut c = h.clone();
        c[148..156].copy_from_slice(b"        ");
        let sum: u64 = c.iter().map(|b| u64::from(*b)).sum();
        assert_eq!(u64::from_str_radix(stored, 8).unwrap(), sum);
        let long = vec![b'n'; 300];
        assert_eq!(ustar_header(&long, b'0', 0o644, 0, b"", 0).len(), 512 * 3);
    }
}
