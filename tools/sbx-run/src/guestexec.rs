//! exec, shell and cp through the guest's host API (sbx_core::guestapi):
//! the socket is found from the workspace's names alone, so the fast path
//! runs no docker command at all. `run` is the library entry point other
//! commands (sbx-run agent) build on.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, IsTerminal, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sbx_core::guestapi::{
    self as proto, Client, Control, ErrorMsg, ExecReq, ExitMsg, Kind, ProtoError, Reply, Request,
    User, Winsize,
};

use crate::spec;
use crate::workspace::Workspace;

/// The guest's socket of a workspace's sandbox, on the host.
pub fn socket_for(ws: &Workspace) -> PathBuf {
    proto::socket_in(&spec::host_dir(&ws.names.container))
}

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// No guest listening (no socket, a stale one, an old image).
    #[error("no guest API at {}: {}", .0.display(), .1)]
    NoGuest(PathBuf, io::Error),
    /// The command could not start: 127 not found, 126 not runnable.
    #[error("{}", .0.message)]
    Spawn(ErrorMsg, i32),
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// Refused by sbx's own rule before anything was sent (exit 77).
    #[error("{0}")]
    Refused(String),
}

impl GuestError {
    /// The exit status a wrapper reports for this failure.
    pub fn status(&self) -> i32 {
        match self {
            GuestError::Spawn(_, s) => *s,
            // An idle stop won the race: retry once it has stopped.
            GuestError::Proto(ProtoError::Remote(e)) if e.kind == "stopping" => 75,
            _ => 125,
        }
    }
}

/// Connect, treating "nothing there" as `NoGuest` so callers can fall back.
pub fn connect(socket: &Path) -> Result<Client<UnixStream>, GuestError> {
    no_guest(
        socket,
        proto::connect_timeout(socket, Duration::from_secs(5)),
    )
}

fn no_guest(
    socket: &Path,
    r: Result<Client<UnixStream>, ProtoError>,
) -> Result<Client<UnixStream>, GuestError> {
    match r {
        Ok(c) => Ok(c),
        Err(ProtoError::Io(e))
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            Err(GuestError::NoGuest(socket.to_owned(), e))
        }
        Err(e) => Err(e.into()),
    }
}

/// The request `sbx-run exec` sends: the agent, in the workspace, with
/// the host variables the config lets through (as `docker exec --env`).
pub fn exec_request(ws: &Workspace, argv: &[OsString], agent: &str, tty: bool) -> ExecReq {
    let mut env = BTreeMap::new();
    env.insert("SBX_AGENT".to_owned(), agent.to_owned());
    for name in spec::env_names(ws, std::env::vars_os()) {
        if let Ok(v) = std::env::var(&name) {
            env.insert(name, v);
        }
    }
    ExecReq {
        argv: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env,
        cwd: Some(ws.workdir()),
        user: User::Agent,
        tty: if tty { Some(term_size()) } else { None },
        timeout_ms: None,
        hangup: false,
    }
}

fn term_size() -> Winsize {
    let (rows, cols) = sbx_sys::winsize(io::stdout().as_fd_borrowed())
        .or_else(|| sbx_sys::winsize(io::stdin().as_fd_borrowed()))
        .unwrap_or((24, 80));
    Winsize { rows, cols }
}

trait FdOf {
    fn as_fd_borrowed(&self) -> std::os::fd::BorrowedFd<'_>;
}
impl<T: std::os::fd::AsFd> FdOf for T {
    fn as_fd_borrowed(&self) -> std::os::fd::BorrowedFd<'_> {
        self.as_fd()
    }
}

/// Run `req` on the guest with this process's stdin/stdout/stderr: raw
/// terminal and SIGWINCH resizes for a tty; SIGINT/SIGTERM/SIGHUP go to
/// the remote process group otherwise. Returns how it ended.
pub fn run(socket: &Path, req: ExecReq) -> Result<ExitMsg, GuestError> {
    let tty = req.tty.is_some();
    // The request rides with the hello: one round trip less.
    let client = no_guest(socket, proto::connect_send(socket, &Request::Exec(req)))?;
    let _raw = if tty {
        sbx_sys::raw_terminal(io::stdin().as_fd_borrowed()).ok()
    } else {
        None
    };
    let stdin: Box<dyn Read + Send> = Box::new(io::stdin());
    let mut out = io::stdout().lock();
    let mut err = io::stderr().lock();
    stream(client, tty, Some(stdin), &mut out, &mut err, true)
}

/// The same over an open client with any streams. `forward_signals`
/// installs the terminal/signal forwarding (a CLI's, not a library's).
pub fn run_with(
    mut client: Client<UnixStream>,
    req: ExecReq,
    stdin: Option<Box<dyn Read + Send>>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    forward_signals: bool,
) -> Result<ExitMsg, GuestError> {
    let tty = req.tty.is_some();
    client.send(&Request::Exec(req))?;
    stream(client, tty, stdin, out, err, forward_signals)
}

/// An exec whose request is sent: started, then the streams to the end.
fn stream(
    mut client: Client<UnixStream>,
    tty: bool,
    stdin: Option<Box<dyn Read + Send>>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    forward_signals: bool,
) -> Result<ExitMsg, GuestError> {
    match client.frame() {
        Ok((Kind::Reply, _)) => {}
        Ok((got, _)) => {
            return Err(ProtoError::Unexpected {
                expected: Kind::Reply,
                got,
            }
            .into());
        }
        Err(ProtoError::Remote(e)) if e.kind == "spawn" => {
            let s = e.status.unwrap_or(126);
            return Err(GuestError::Spawn(e, s));
        }
        Err(e) => return Err(e.into()),
    }
    let writer = Arc::new(Mutex::new(
        client.stream.try_clone().map_err(ProtoError::from)?,
    ));
    if let Some(input) = stdin {
        proto::forward_stdin(input, Arc::clone(&writer));
    } else {
        // Best effort: a command that already ended has closed the stream.
        let mut s = writer.lock().unwrap_or_else(|e| e.into_inner());
        let _ = proto::write_frame(&mut *s, Kind::Eof, &[]);
    }
    if forward_signals {
        forward(Arc::clone(&writer), tty);
    }
    loop {
        match client.frame()? {
            (Kind::Stdout, d) => {
                out.write_all(&d).map_err(ProtoError::from)?;
                out.flush().map_err(ProtoError::from)?;
            }
            (Kind::Stderr, d) => {
                err.write_all(&d).map_err(ProtoError::from)?;
                err.flush().map_err(ProtoError::from)?;
            }
            (Kind::Exit, p) => return Ok(proto::parse("exit", &p)?),
            (got, _) => {
                return Err(ProtoError::Unexpected {
                    expected: Kind::Exit,
                    got,
                }
                .into());
            }
        }
    }
}

/// SIGWINCH becomes a resize; SIGINT/SIGTERM/SIGHUP/SIGQUIT a signal to
/// the remote group (with a tty, ^C is a byte the remote terminal turns
/// into SIGINT itself).
fn forward(w: Arc<Mutex<UnixStream>>, tty: bool) {
    use signal_hook::consts::*;
    let mut sigs = vec![SIGWINCH, SIGTERM, SIGHUP];
    if !tty {
        sigs.extend([SIGINT, SIGQUIT]);
    }
    let Ok(mut it) = signal_hook::iterator::Signals::new(&sigs) else {
        return;
    };
    std::thread::spawn(move || {
        for sig in it.forever() {
            let ctl = if sig == SIGWINCH {
                if !tty {
                    continue;
                }
                Control::Resize(term_size())
            } else {
                Control::Signal { signal: sig }
            };
            let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
            if proto::write_json(&mut *s, Kind::Control, &ctl).is_err() {
                return;
            }
        }
    });
}

/// The shell's exit number of an ended exec.
pub fn status_of(x: &ExitMsg) -> u8 {
    x.status.clamp(0, 255) as u8
}

/// One side of `sbx-run cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `-`: a tar stream on stdin or stdout.
    Stream,
    Host(PathBuf),
    /// `:PATH` in the sandbox.
    Sandbox(String),
}

impl Place {
    pub fn parse(s: &std::ffi::OsStr) -> Place {
        let t = s.to_string_lossy();
        if t == "-" {
            Place::Stream
        } else if let Some(p) = t.strip_prefix(':') {
            Place::Sandbox(p.to_owned())
        } else {
            Place::Host(PathBuf::from(s))
        }
    }
}

fn stat(socket: &Path, path: &str) -> Result<Option<proto::StatInfo>, GuestError> {
    match connect(socket)?.call(&Request::Stat { path: path.into() }) {
        Ok(Reply::Stat(s)) => Ok(Some(s)),
        Ok(_) => Ok(None),
        Err(ProtoError::Remote(e)) if e.kind == "not-found" => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn tar_exec(argv: &[&str]) -> ExecReq {
    ExecReq {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecReq::default()
    }
}

fn split(path: &str) -> (String, String) {
    let p = Path::new(path.trim_end_matches('/'));
    let parent = p
        .parent()
        .map(|d| d.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/".into());
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    (parent, name)
}

fn check(x: ExitMsg, what: &str) -> Result<(), GuestError> {
    if x.status == 0 {
        Ok(())
    } else {
        Err(ProtoError::Remote(ErrorMsg::new(
            "io",
            format!("{what} in the sandbox ended with status {}", x.status),
        ))
        .into())
    }
}

/// `sbx-run cp SRC DEST`, like `docker cp`: single files into the
/// sandbox through the API's write (atomic replace, as the agent); trees
/// both ways and `:PATH -` as the guest's entry stream (crate::copy); a
/// tar stream on stdin through tar -x in the sandbox, as the agent.
pub fn cp(
    socket: &Path,
    src: &Place,
    dest: &Place,
    follow: bool,
) -> Result<crate::copy::Outcome, GuestError> {
    use crate::copy::{self, HostSource, Outcome};
    let io_err = |e: io::Error| GuestError::Proto(ProtoError::Io(e));
    match (src, dest) {
        (Place::Stream, Place::Sandbox(d)) => {
            let x = run_with(
                connect(socket)?,
                tar_exec(&["tar", "-x", "-f", "-", "-C", d]),
                Some(Box::new(io::stdin())),
                &mut io::sink(),
                &mut io::stderr(),
                false,
            )?;
            check(x, "tar -x").map(|_| Outcome::default())
        }
        // The stream holds the agent's names and bytes as they are: on a
        // terminal its escapes would be the terminal's (as tar refuses).
        (Place::Sandbox(_), Place::Stream) if io::stdout().is_terminal() => {
            Err(GuestError::Refused(
                "a tar stream is not written to a terminal: redirect it to a file or a pipe (`sbx-run cp :DIR - | tar -t`)".into(),
            ))
        }
        (Place::Sandbox(s), Place::Stream) => copy::pull_tar(socket, s, &mut io::stdout().lock()),
        (Place::Host(h), Place::Sandbox(d)) => {
            let top = copy::open_host(h, follow)?;
            let target = stat(socket, d)?;
            let into_dir = target.as_ref().is_some_and(|t| t.kind == "dir");
            let top = match top {
                HostSource::Link(t) => {
                    let (dir, name) = landing(h, d, into_dir)?;
                    return copy::push_link(socket, &dir, &name, &t);
                }
                HostSource::Open(f) => f,
            };
            let meta = top.metadata().map_err(io_err)?;
            if meta.is_dir() {
                let (dir, name) = landing(h, d, into_dir)?;
                copy::push(socket, h, top, &dir, &name)
            } else {
                let path = if into_dir {
                    let name = h.file_name().map(|n| n.to_string_lossy().into_owned());
                    format!("{}/{}", d.trim_end_matches('/'), name.unwrap_or_default())
                } else {
                    d.clone()
                };
                use std::os::unix::fs::PermissionsExt;
                // The same clamp as a tree's files: no set-uid/set-gid/sticky.
                let mode = sbx_core::tree::clamp_mode(meta.permissions().mode(), false);
                if !meta.is_file() {
                    return Err(io_err(io::Error::other(format!(
                        "{}: not a regular file or directory (not copied)",
                        h.display()
                    ))));
                }
                let mut f = top;
                let n = connect(socket)?.write_from(&path, Some(mode), User::Agent, &mut f)?;
                Ok(Outcome {
                    files: 1,
                    bytes: n,
                    refused: Vec::new(),
                })
            }
        }
        (Place::Sandbox(s), Place::Host(h)) => copy::pull(socket, s, h),
        _ => Err(GuestError::Proto(ProtoError::Remote(ErrorMsg::new(
            "bad-request",
            "cp: one side must be in the sandbox (:PATH), the other on the host (a path, or - for a tar stream)",
        )))),
    }
}

/// Where a host source `h` lands for `cp h :d`: in `d` under its own
/// name when `d` is a directory there, else in `d`'s parent as `d`'s last
/// name.
fn landing(h: &Path, d: &str, into_dir: bool) -> Result<(String, std::ffi::OsString), GuestError> {
    if !into_dir {
        let (p, n) = split(d);
        return Ok((p, n.into()));
    }
    // `..` and `/` have no name of their own: the directory's real one.
    let full = match h.file_name() {
        Some(_) => Some(h.to_owned()),
        None => std::fs::canonicalize(h).ok(),
    };
    match full.as_deref().and_then(crate::copy::top_name) {
        Some(n) => Ok((d.to_owned(), n.to_owned())),
        None => Err(GuestError::Proto(ProtoError::Io(io::Error::other(
            format!(
                "{}: cannot name the copy after it: give the sandbox path its name (:DIR/NAME)",
                h.display()
            ),
        )))),
    }
}

/// Why `dir` (a sandbox's host directory) and its guest socket are not
/// this user's alone, if they are not: `exec --root` acts only through a
/// socket the caller owns, as the user who started the sandbox.
pub fn owned_by_me(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    for p in [dir.to_owned(), proto::socket_in(dir)] {
        let m = std::fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if m.uid() != me {
            return Err(format!(
                "{} belongs to uid {}, not to you (uid {me})",
                p.display(),
                m.uid()
            ));
        }
    }
    Ok(())
}

/// Is this process on a terminal both ways (shell, exec)?
pub fn on_tty() -> bool {
    io::stdin().is_terminal() && io::stdout().is_terminal()
}
