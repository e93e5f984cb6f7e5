//! `sbx-run cp` of directories, both ways, and `cp :PATH -`: the tree
//! travels as the guest's own entry stream (sbx_core::tree), never as a
//! tar stream from a process the agent can trace, and the host extracts
//! nothing: it takes one checked name at a time and writes it beneath a
//! directory it holds open (sbx_sys::beneath), as the calling user (as
//! root: as the destination directory's owner), modes clamped, links
//! kept only inside the copied tree, nothing written through a link.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use sbx_core::guestapi::{self as proto, Kind, ProtoError, Reply, Request, User};
use sbx_core::tree::{self, Entry};
use sbx_sys::beneath::Dir;

use crate::guestexec::{GuestError, connect};

/// What a copy did: counts, and what it refused (raw agent text: print
/// through sbx_core::sanitize).
#[derive(Debug, Default)]
pub struct Outcome {
    pub files: u64,
    pub bytes: u64,
    pub refused: Vec<String>,
}

fn io_err(e: io::Error) -> GuestError {
    GuestError::Proto(ProtoError::Io(e))
}

fn io_at(p: &Path, e: io::Error) -> GuestError {
    io_err(io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// "N files, M MB" on stderr while a long copy runs, only on a terminal
/// and not with -q; the line is cleared at the end.
struct Progress {
    on: bool,
    last: Instant,
    shown: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            on: io::stderr().is_terminal() && !sbx_core::output::is_quiet(),
            last: Instant::now(),
            shown: false,
        }
    }

    fn tick(&mut self, files: u64, bytes: u64) {
        if self.on && self.last.elapsed() > Duration::from_millis(500) {
            self.last = Instant::now();
            self.shown = true;
            eprint!("\r\x1b[2Kcp: {files} files, {:.1} MB", bytes as f64 / 1e6);
        }
    }

    fn end(&self) {
        if self.shown {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Where a copy out lands: an existing directory (not a link) takes the
/// tree under its own name; otherwise the tree takes `dest`'s name in its
/// parent. A link at `dest` is refused rather than followed. The last
/// name is looked up in its parent, never as a path: a trailing `/` or
/// `/.` makes the kernel follow a link there, O_NOFOLLOW or not.
fn destination(dest: &Path) -> Result<(Dir, Option<OsString>), GuestError> {
    let Some(name) = dest.file_name() else {
        // `/`, `.`, `..`: the caller's own directories.
        return Ok((Dir::open(dest).map_err(|e| io_at(dest, e))?, None));
    };
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let d = Dir::open(parent).map_err(|e| io_at(parent, e))?;
    match d.kind(name).map_err(|e| io_at(dest, e))? {
        Some(sbx_sys::beneath::Kind::Symlink) => Err(io_at(
            dest,
            io::Error::other(
                "is a symlink; sbx-run cp writes through none: name the directory itself",
            ),
        )),
        Some(sbx_sys::beneath::Kind::Dir) => Ok((d.sub(name).map_err(|e| io_at(dest, e))?, None)),
        _ => Ok((d, Some(name.to_owned()))),
    }
}

/// What takes a packed tree apart: a directory on disk or a tar stream.
trait Receiver {
    fn entry(&mut self, e: Entry) -> Result<(), GuestError>;
    /// Bytes of the file the last entry announced.
    fn data(&mut self, b: &[u8]) -> Result<(), GuestError>;
    /// That file's bytes are all there.
    fn file_end(&mut self, size: u64) -> Result<(), GuestError>;
}

/// A pack request answered: the guest's entries, one at a time.
fn receive(socket: &Path, path: &str, r: &mut dyn Receiver) -> Result<(), GuestError> {
    let mut c = connect(socket)?;
    c.send(&Request::Pack {
        path: path.into(),
        user: User::Agent,
    })?;
    c.reply()?;
    loop {
        match c.frame()? {
            (Kind::Reply, p) => {
                let Reply::Entry(e) = proto::parse("entry", &p)? else {
                    return Err(ProtoError::Json {
                        what: "entry",
                        err: "not an entry".into(),
                    }
                    .into());
                };
                let size = match &e {
                    Entry::File { size, .. } => Some(*size),
                    _ => None,
                };
                r.entry(e)?;
                let Some(size) = size else { continue };
                let mut got = 0u64;
                while got < size {
                    match c.frame()? {
                        (Kind::Data, d) if got + d.len() as u64 <= size => {
                            got += d.len() as u64;
                            r.data(&d)?;
                        }
                        (got, _) => {
                            return Err(ProtoError::Unexpected {
                                expected: Kind::Data,
                                got,
                            }
                            .into());
                        }
                    }
                }
                r.file_end(size)?;
            }
            (Kind::Eof, _) => return Ok(()),
            (got, _) => {
                return Err(ProtoError::Unexpected {
                    expected: Kind::Reply,
                    got,
                }
                .into());
            }
        }
    }
}

/// Into a directory on the host.
struct ToDisk {
    w: tree::Writer,
    sink: tree::Sink,
    at: std::path::PathBuf,
    progress: Progress,
}

impl Receiver for ToDisk {
    fn entry(&mut self, e: Entry) -> Result<(), GuestError> {
        self.sink = self.w.entry(e).map_err(|e| io_at(&self.at, e))?;
        Ok(())
    }
    fn data(&mut self, b: &[u8]) -> Result<(), GuestError> {
        self.sink.write_all(b).map_err(|e| io_at(&self.at, e))
    }
    fn file_end(&mut self, size: u64) -> Result<(), GuestError> {
        let sink = std::mem::replace(&mut self.sink, tree::Sink::Discard);
        self.w.finish(sink, size).map_err(|e| io_at(&self.at, e))?;
        self.progress.tick(self.w.files, self.w.bytes);
        Ok(())
    }
}

/// `cp :PATH HOSTPATH`.
pub fn pull(socket: &Path, src: &str, dest: &Path) -> Result<Outcome, GuestError> {
    let (base, rename) = destination(dest)?;
    // As root, what is made belongs to whoever owns the directory it
    // lands in (the user copying into their checkout), never to root.
    let owner = if nix::unistd::geteuid().is_root() {
        Some(base.owner().map_err(|e| io_at(dest, e))?)
    } else {
        None
    };
    let mut r = ToDisk {
        w: tree::Writer::new(base, rename, owner),
        sink: tree::Sink::Discard,
        at: dest.to_owned(),
        progress: Progress::new(),
    };
    let res = receive(socket, src, &mut r);
    r.progress.end();
    res?;
    Ok(Outcome {
        files: r.w.files,
        bytes: r.w.bytes,
        refused: r.w.refused,
    })
}

/// Into a ustar stream, by the same rules as a copy to disk (names
/// checked, modes clamped, links only inside the tree).
struct ToTar<'a> {
    out: &'a mut dyn Write,
    stack: Vec<Vec<u8>>,
    /// Depth of a refused directory whose content is dropped.
    dropped: usize,
    /// The current file is written (not refused).
    writing: bool,
    o: Outcome,
}

impl ToTar<'_> {
    fn path(&self, name: &[u8]) -> Vec<u8> {
        let mut p = self.stack.join(&b'/');
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    fn refuse(&mut self, name: &[u8], why: &str) {
        let p = String::from_utf8_lossy(&self.path(name)).into_owned();
        self.o.refused.push(format!("{p}: {why}"));
    }

    fn put(&mut self, b: &[u8]) -> Result<(), GuestError> {
        self.out.write_all(b).map_err(io_err)
    }
}

impl Receiver for ToTar<'_> {
    fn entry(&mut self, e: Entry) -> Result<(), GuestError> {
        self.writing = false;
        if self.dropped > 0 {
            match e {
                Entry::Dir { .. } => self.dropped += 1,
                Entry::Up => self.dropped -= 1,
                _ => {}
            }
            return Ok(());
        }
        match e {
            Entry::Up => {
                self.stack.pop();
            }
            Entry::Dir { name, mode, mtime } => match tree::bad_name(&name) {
                Some(why) => {
                    self.refuse(&name, &format!("{why} (not copied)"));
                    self.dropped = 1;
                }
                None => {
                    let mut p = self.path(&name);
                    p.push(b'/');
                    let m = tree::clamp_mode(mode, true);
                    self.put(&tree::ustar_header(&p, b'5', m, 0, b"", mtime))?;
                    self.stack.push(name);
                }
            },
            Entry::File {
                name,
                mode,
                size,
                mtime,
            } => match tree::bad_name(&name) {
                Some(why) => self.refuse(&name, &format!("{why} (not copied)")),
                None => {
                    let p = self.path(&name);
                    let m = tree::clamp_mode(mode, false);
                    self.put(&tree::ustar_header(&p, b'0', m, size, b"", mtime))?;
                    self.writing = true;
                }
            },
            Entry::Symlink {
                name,
                target,
                mtime,
            } => {
                let depth = self.stack.len().saturating_sub(1);
                if let Some(why) = tree::bad_name(&name) {
                    self.refuse(&name, &format!("{why} (not copied)"));
                } else if self.stack.is_empty() || !tree::link_stays_inside(&target, depth) {
                    let t = String::from_utf8_lossy(&target).into_owned();
                    self.refuse(
                        &name,
                        &format!("a symlink to {t}, which leaves the copied tree (not copied)"),
                    );
                } else {
                    let p = self.path(&name);
                    self.put(&tree::ustar_header(&p, b'2', 0o777, 0, &target, mtime))?;
                }
            }
            Entry::Skip { name, why } => self.refuse(&name, &why),
        }
        Ok(())
    }
    fn data(&mut self, b: &[u8]) -> Result<(), GuestError> {
        if self.writing { self.put(b) } else { Ok(()) }
    }
    fn file_end(&mut self, size: u64) -> Result<(), GuestError> {
        if self.writing {
            let pad = (512 - (size % 512) as usize) % 512;
            self.put(&vec![0u8; pad])?;
            self.o.files += 1;
            self.o.bytes += size;
        }
        Ok(())
    }
}

/// `cp :PATH -`.
pub fn pull_tar(socket: &Path, src: &str, out: &mut dyn Write) -> Result<Outcome, GuestError> {
    let mut r = ToTar {
        out,
        stack: Vec::new(),
        dropped: 0,
        writing: false,
        o: Outcome::default(),
    };
    receive(socket, src, &mut r)?;
    r.put(&[0u8; 1024])?;
    r.out.flush().map_err(io_err)?;
    Ok(r.o)
}

/// What `cp HOSTPATH :DIR` sends: what the host path is open on, or the
/// link it is (copied as a link).
#[derive(Debug)]
pub enum HostSource {
    Open(File),
    Link(OsString),
}

/// Open `cp`'s host source by the rule in `sbx-run cp --help`:
///
/// - inside a git work tree (every workspace is one; the outermost on the
///   way, found from `/` down, so no name the agent made is looked up),
///   the rest of the path is resolved beneath it with no link followed:
///   the agent's `./out -> ~/.ssh` copies nothing (issue 37). `-L` does
///   not change that.
/// - elsewhere, a link named as the source is copied as a link unless
///   `follow` (`-L`, as cp and docker cp do); links above it are the
///   user's own and followed.
pub fn open_host(h: &Path, follow: bool) -> Result<HostSource, GuestError> {
    use nix::fcntl::OFlag;
    let abs = std::path::absolute(h).map_err(|e| io_at(h, e))?;
    let comps: Vec<_> = abs.components().collect();
    let mut prefix = std::path::PathBuf::new();
    for (i, c) in comps.iter().enumerate() {
        prefix.push(c);
        if i + 1 == comps.len() || std::fs::symlink_metadata(prefix.join(".git")).is_err() {
            continue;
        }
        let rest: std::path::PathBuf = comps[i + 1..].iter().collect();
        let root = sbx_sys::beneath::Root::open(&prefix).map_err(|e| io_at(&prefix, e))?;
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        return match root.open_with(&rest, flags, 0) {
            Ok(fd) => Ok(HostSource::Open(File::from(fd))),
            // A link on the way (ELOOP) or a `..` out (EXDEV), named by
            // the resolver.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(GuestError::Refused(format!(
                "cp: {e} (sbx-run cp follows no link inside a repository: the agent may have made it; name what it points to by its own path)"
            ))),
            Err(e) => Err(io_at(h, e)),
        };
    }
    let m = std::fs::symlink_metadata(&abs).map_err(|e| io_at(h, e))?;
    if m.file_type().is_symlink() && !follow {
        let t = std::fs::read_link(&abs).map_err(|e| io_at(h, e))?;
        return Ok(HostSource::Link(t.into_os_string()));
    }
    Ok(HostSource::Open(File::open(&abs).map_err(|e| io_at(h, e))?))
}

/// An unpack into the sandbox's directory `dir`, as the agent, asked.
fn unpack(
    socket: &Path,
    dir: &str,
) -> Result<sbx_core::guestapi::Client<std::os::unix::net::UnixStream>, GuestError> {
    let mut c = connect(socket)?;
    c.send(&Request::Unpack {
        path: dir.into(),
        user: User::Agent,
    })?;
    Ok(c)
}

/// `cp HOSTLINK :DIR`: the link itself, one entry, as the agent.
pub fn push_link(
    socket: &Path,
    dir: &str,
    name: &OsStr,
    target: &OsStr,
) -> Result<Outcome, GuestError> {
    let mut c = unpack(socket, dir)?;
    let e = Entry::Symlink {
        name: name.as_bytes().to_vec(),
        target: target.as_bytes().to_vec(),
        mtime: 0,
    };
    let mut tx = c.stream.try_clone().map_err(io_err)?;
    proto::write_json(&mut tx, Kind::Reply, &Reply::Entry(e))?;
    proto::write_frame(&mut tx, Kind::Eof, &[])?;
    let mut o = Outcome::default();
    if let Reply::Unpacked { refused } = c.reply()? {
        o.refused = refused;
    }
    Ok(o)
}

/// `cp HOSTDIR :PATH`: the host walks its own directory (no link below
/// it followed) and the guest writes the entries as the agent, beneath
/// `dir`, on the same rules; `name` is the top's name there. `top` is
/// `src` as [`open_host`] opened it.
pub fn push(
    socket: &Path,
    src: &Path,
    top: File,
    dir: &str,
    name: &OsStr,
) -> Result<Outcome, GuestError> {
    let mut c = unpack(socket, dir)?;
    let mut o = Outcome::default();
    let mut progress = Progress::new();
    let to_io = |e: ProtoError| io::Error::other(e.to_string());
    // One write per many small entries, not two per file.
    let mut tx = io::BufWriter::with_capacity(proto::CHUNK, c.stream.try_clone().map_err(io_err)?);
    let sent = tree::walk(top, name, &mut |e, f| {
        let size = match &e {
            Entry::File { size, .. } => *size,
            _ => 0,
        };
        proto::write_json(&mut tx, Kind::Reply, &Reply::Entry(e)).map_err(to_io)?;
        if let Some(f) = f {
            tree::send_exact(f, size, proto::CHUNK, &mut |b| {
                proto::write_frame(&mut tx, Kind::Data, b).map_err(to_io)
            })?;
            o.files += 1;
            o.bytes += size;
            progress.tick(o.files, o.bytes);
        }
        Ok(())
    });
    progress.end();
    // A refusal from the guest ends the stream early: its reason wins.
    let end = proto::write_frame(&mut tx, Kind::Eof, &[])
        .and_then(|_| tx.flush().map_err(ProtoError::from));
    drop(tx);
    match c.reply() {
        Ok(Reply::Unpacked { refused }) => o.refused = refused,
        Ok(_) => {}
        Err(e) => return Err(e.into()),
    }
    sent.map_err(|e| io_at(src, e))?;
    end?;
    Ok(o)
}

/// Is `name` (a file name from the host's own command line) usable as the
/// top entry's name?
pub fn top_name(p: &Path) -> Option<&OsStr> {
    p.file_name()
        .filter(|n| tree::bad_name(n.as_bytes()).is_none())
}
