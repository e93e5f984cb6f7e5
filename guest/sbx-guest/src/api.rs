//! The host API server: exec with streams, PTY, signals,
//! timeouts and re-attach, and file operations confined to the allowed
//! roots, over any `Transport`. Frames and messages are `sbx_core::guestapi`.
//!
//! One thread per connection (plus a reader thread while an exec is
//! attached) and one pump thread per exec, so a slow or vanished client
//! never stalls another. An exec belongs to the server, not the
//! connection: a dropped client leaves it running (its output waits in a
//! bounded buffer, then back-pressures the process) until someone attaches.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::Pid;
use sbx_core::guestapi::{
    self as proto, Control, ErrorMsg, ExecReq, ExitMsg, Hello, Kind, ProtoError, Reply, Request,
    StatInfo, Transport, User,
};

use crate::init::Ended;

/// Output held for a detached exec before its process is made to wait.
const BUF_CAP: usize = 1 << 20;
/// Live execs at once; more is refused (`busy`), never queued.
const MAX_SESSIONS: usize = 512;
/// How long a client may take for its hello and request.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a reused connection may sit between requests.
const IDLE: Duration = Duration::from_secs(60);
/// After the process ended, output still in the pipes is read for this
/// long; a background child holding them open does not hold the exit.
const DRAIN: Duration = Duration::from_millis(100);
/// An ended exec nobody attached to is forgotten after this.
const UNCLAIMED: Duration = Duration::from_secs(600);
/// A `hangup` exec whose client left has this long after its SIGTERM
/// before its process tree is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(5);

/// How exit statuses reach the server.
#[derive(Debug)]
pub enum Reaper {
    /// Not PID 1 (tests, a nested guest): each exec waits for its own pid.
    Own,
    /// PID 1 reaps everything with waitpid(-1); it hands API children's
    /// statuses over through this registry.
    Pid1(Arc<Registry>),
}

/// Pids of API children and where their status goes. The lock is held from
/// spawn until the pid is in the map, and PID 1 reaps only under it, so no
/// status is taken before it has somewhere to go.
#[derive(Debug, Default)]
pub struct Registry {
    waiting: Mutex<HashMap<i32, File>>,
}

impl Registry {
    /// PID 1's reaper runs `reap` (its waitpid(-1) loop) under the lock:
    /// while an API spawn holds it, nothing is reaped, so std's own wait
    /// for a child whose exec failed cannot find it gone. API children's
    /// statuses are handed over; the rest is returned.
    pub fn reap_with(
        &self,
        reap: impl FnOnce() -> (Vec<(i32, Ended)>, bool),
    ) -> (Vec<(i32, Ended)>, bool) {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let (mut out, none_left) = reap();
        out.retain(|(pid, how)| match w.remove(pid) {
            Some(mut f) => {
                let _ = f.write_all(&encode(*how));
                false
            }
            None => true,
        });
        (out, none_left)
    }
}

/// Where a `Release` sends its answer channel: the main thread starts the
/// agent's processes, then answers through it.
pub type Go = std::sync::mpsc::SyncSender<Result<(), String>>;

/// The hold (`guestapi::HOLD_ENV`): while set, the API answers only
/// `Identify`, `Health` and `Release`; nothing of the agent's runs before
/// the host has checked the mounts (issue 37).
static GATE: Mutex<Option<std::sync::mpsc::Sender<Go>>> = Mutex::new(None);

fn gate() -> std::sync::MutexGuard<'static, Option<std::sync::mpsc::Sender<Go>>> {
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hold: the returned receiver gets one `Go` when the host releases.
pub fn hold() -> std::sync::mpsc::Receiver<Go> {
    let (tx, rx) = std::sync::mpsc::channel();
    *gate() = Some(tx);
    rx
}

fn held() -> bool {
    gate().is_some()
}

/// The host's `Release`: hand the main thread its go and answer once the
/// agent's processes run (or why they do not). Not held: nothing to do.
fn release() -> Res<Reply> {
    let Some(tx) = gate().take() else {
        return Ok(Reply::Ok);
    };
    let (go, done) = std::sync::mpsc::sync_channel(1);
    let fail = |m: String| ErrorMsg::new("failed", m);
    tx.send(go)
        .map_err(|_| fail("the guest's main thread is gone".into()))?;
    // The services' sockets are waited for at most a minute (init.rs).
    match done.recv_timeout(Duration::from_secs(300)) {
        Ok(Ok(())) => Ok(Reply::Ok),
        Ok(Err(e)) => Err(fail(e)),
        Err(_) => Err(fail("the agent's processes did not start".into())),
    }
}

fn encode(how: Ended) -> [u8; 8] {
    let (t, v) = match how {
        Ended::Code(c) => (0i32, c),
        Ended::Signal(s) => (1, s),
    };
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&t.to_le_bytes());
    b[4..].copy_from_slice(&v.to_le_bytes());
    b
}

fn decode(b: [u8; 8]) -> Ended {
    let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let v = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    if t == 0 {
        Ended::Code(v)
    } else {
        Ended::Signal(v)
    }
}

/// What the server needs to know about the sandbox.
#[derive(Debug)]
pub struct Config {
    /// File operations stay beneath these directories.
    pub roots: Vec<PathBuf>,
    /// The agent's identity; None when the guest's own config was bad
    /// (agent requests are then refused).
    pub agent: Option<sbx_sys::Creds>,
    pub agent_home: PathBuf,
    /// Base environments of an exec, before the request's own variables.
    pub agent_env: Vec<(OsString, OsString)>,
    pub root_env: Vec<(OsString, OsString)>,
    /// The guest's status.json, for `health`.
    pub status: PathBuf,
    pub reaper: Reaper,
    /// Where a root exec is recorded before it runs (`sbx-run exec
    /// --root`); None: no record is required (tests, a nested guest).
    pub audit_log: Option<PathBuf>,
}

#[derive(Debug)]
pub struct Server {
    cfg: Config,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Session {
    id: u64,
    pid: i32,
    /// The pty master (for resize), None for pipes.
    tty: Option<File>,
    stdin: Mutex<Option<File>>,
    inner: Mutex<Inner>,
    cv: Condvar,
    /// Ends when its client leaves (`ExecReq::hangup`).
    hangup: bool,
}

#[derive(Debug, Default)]
struct Inner {
    out: VecDeque<(Kind, Vec<u8>)>,
    buffered: usize,
    exit: Option<ExitMsg>,
    ended_at: Option<Instant>,
    /// Bumped by every attach; an older attachment sees it and leaves.
    owner: u64,
}

type Res<T> = Result<T, ErrorMsg>;

fn io_err(what: &str, e: impl std::fmt::Display) -> ErrorMsg {
    ErrorMsg::new("io", format!("{what}: {e}"))
}

fn errno_msg(path: &str, e: Errno) -> ErrorMsg {
    match e {
        Errno::EXDEV => ErrorMsg::new(
            "escape",
            format!("{path}: resolves outside the allowed roots (a symlink leads out)"),
        ),
        Errno::ENOENT => ErrorMsg::new("not-found", format!("{path}: no such file or directory")),
        Errno::EACCES | Errno::EPERM => {
            ErrorMsg::new("denied", format!("{path}: permission denied"))
        }
        Errno::ELOOP => ErrorMsg::new(
            "escape",
            format!("{path}: a symlink where none is followed"),
        ),
        e => ErrorMsg::new("io", format!("{path}: {}", e.desc())),
    }
}

impl Server {
    pub fn new(cfg: Config) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            sessions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock is released before the caller streams (a guard living
    /// through a `match` would hold it for the whole attach).
    fn session(&self, id: u64) -> Option<Arc<Session>> {
        let m = self.sessions();
        m.get(&id).cloned()
    }

    /// Execs still known (running, or ended and not yet reported).
    pub fn session_count(&self) -> usize {
        self.sessions().len()
    }

    /// Serve one connection to its end. Never panics on what the client
    /// sends; every refusal is an error frame.
    pub fn handle<S: Transport>(self: &Arc<Self>, s: S) {
        let mut s = Conn::new(s);
        let _ = s.s.set_read_timeout(Some(HANDSHAKE));
        let (mut req, reuse) = match self.open(&mut s) {
            Ok(r) => {
                s.reuse = r.1;
                r
            }
            Err(Some(e)) => {
                let _ = proto::write_json(&mut s, Kind::Error, &e);
                let _ = s.flush();
                return;
            }
            Err(None) => return,
        };
        loop {
            let _ = s.s.set_read_timeout(None);
            self.sweep();
            let more = self.one(&mut s, req);
            if !reuse || !more {
                let _ = s.flush();
                return;
            }
            // The next request, sent whenever the client likes (within IDLE).
            let _ = s.s.set_read_timeout(Some(IDLE));
            // Err(None): the client went away, nothing to tell it.
            let next = match proto::read_frame(&mut s) {
                Ok((Kind::Request, p)) => {
                    proto::parse("request", &p).map_err(|e| Some(e.to_string()))
                }
                Ok((k, _)) => Err(Some(format!("expected a request frame, got {k:?}"))),
                Err(e) if e.is_closed() => Err(None),
                Err(e) => Err(Some(e.to_string())),
            };
            req = match next {
                Ok(r) => r,
                Err(why) => {
                    if let Some(why) = why {
                        let _ = proto::write_json(
                            &mut s,
                            Kind::Error,
                            &ErrorMsg::new("bad-request", why),
                        );
                        let _ = s.flush();
                    }
                    return;
                }
            };
        }
    }

    /// One request to its last frame. False when the connection cannot
    /// carry another (a client gone, a stream cut, an exec not ended by
    /// `Control::Done`).
    fn one<S: Transport>(self: &Arc<Self>, s: &mut Conn<S>, req: Request) -> bool {
        if held()
            && !matches!(
                req,
                Request::Identify { .. } | Request::Health | Request::Release
            )
        {
            let e = ErrorMsg::new(
                "held",
                "the sandbox waits for sbx-run's check of its mounts: `sbx-run restart` it",
            );
            return proto::write_json(s, Kind::Error, &e).is_ok();
        }
        // Every request but a health check is activity; after an idle stop
        // began, the client is told to retry (its start brings it back).
        if !matches!(req, Request::Health) && !crate::idle::touch() {
            let e = ErrorMsg::new(
                "stopping",
                "the sandbox is stopping (idle): retry once it has stopped (`sbx-run start` brings it back)",
            );
            return proto::write_json(s, Kind::Error, &e).is_ok();
        }
        let r = match req {
            Request::Exec(x) => self.exec(s, x),
            Request::Attach { id } => match self.session(id) {
                Some(sess) => {
                    let _ =
                        proto::write_json(s, Kind::Reply, &Reply::Started { id, pid: sess.pid });
                    return s.flush().is_ok() && self.attach_conn(&sess, s);
                }
                None => Err(ErrorMsg::new("not-found", format!("no exec with id {id}"))),
            },
            Request::Signal { id, signal } => self.signal(id, signal).map(|_| Reply::Ok),
            Request::Read { path, user } => self.read(s, &path, user),
            Request::Write { path, mode, user } => self.write(s, &path, mode, user),
            Request::Stat { path } => self.as_user(User::Agent, || stat(&self.cfg, &path)),
            Request::List { path, depth } => {
                self.as_user(User::Agent, || list(&self.cfg, &path, depth))
            }
            Request::Mkdir { path, mode, user } => {
                self.as_user(user, || mkdir_p(&self.cfg, &path, mode.unwrap_or(0o755)))
            }
            Request::Remove {
                path,
                recursive,
                user,
            } => self.as_user(user, || remove(&self.cfg, &path, recursive)),
            Request::Rename { from, to, user } => {
                self.as_user(user, || rename(&self.cfg, &from, &to))
            }
            Request::Health => health(&self.cfg),
            Request::Pack { path, user } => self.pack(s, &path, user),
            Request::Unpack { path, user } => self.unpack(s, &path, user),
            // As the guest's root: the targets may be anywhere, and what is
            // mounted there may be unreadable to the agent.
            Request::Identify { paths } => identify(&paths),
            Request::Release => release(),
        };
        // Exec, read and write have streamed their own frames when Ok(Ok).
        match r {
            Err(e) if e.kind == "done" => true,
            Err(e) if e.kind == "closed" => false,
            Ok(reply) => proto::write_json(s, Kind::Reply, &reply).is_ok(),
            Err(e) => proto::write_json(s, Kind::Error, &e).is_ok(),
        }
    }

    /// Hello both ways, then the request. Err(None): the client left.
    fn open<S: Transport>(&self, s: &mut Conn<S>) -> Result<(Request, bool), Option<ErrorMsg>> {
        let bad = |e: ProtoError| {
            if e.is_closed() {
                None
            } else {
                Some(ErrorMsg::new("bad-request", e.to_string()))
            }
        };
        let (k, p) = proto::read_frame(s).map_err(bad)?;
        if k != Kind::Hello {
            return Err(Some(ErrorMsg::new(
                "bad-request",
                format!("the first frame must be a hello, got {k:?}"),
            )));
        }
        let h: Hello = proto::parse("hello", &p).map_err(bad)?;
        if h.version != proto::VERSION {
            return Err(Some(ErrorMsg::new(
                "version",
                format!(
                    "the guest speaks protocol version {}, this client {}: use an sbx-run and a base image of the same release",
                    proto::VERSION,
                    h.version
                ),
            )));
        }
        let ours = if h.reuse {
            Hello::reusable()
        } else {
            Hello::ours()
        };
        proto::write_json(s, Kind::Hello, &ours).map_err(|_| None)?;
        let (k, p) = proto::read_frame(s).map_err(bad)?;
        if k != Kind::Request {
            return Err(Some(ErrorMsg::new(
                "bad-request",
                format!("expected a request frame, got {k:?}"),
            )));
        }
        proto::parse("request", &p)
            .map_err(bad)
            .map(|r| (r, h.reuse))
    }

    /// Forget ended execs nobody came back for.
    fn sweep(&self) {
        let now = Instant::now();
        self.sessions().retain(|_, s| {
            let i = s.inner.lock().unwrap_or_else(|e| e.into_inner());
            i.ended_at
                .is_none_or(|t| now.duration_since(t) <= UNCLAIMED)
        });
    }

    /// Run `f` with this thread's filesystem identity set to `user`, so
    /// files are created with its ownership and checked with its rights.
    fn as_user<T>(&self, user: User, f: impl FnOnce() -> Res<T>) -> Res<T> {
        let creds = match user {
            User::Root => return f(),
            User::Agent => self.agent()?,
        };
        let _g = FsId::set(creds.uid, creds.gid);
        f()
    }

    fn agent(&self) -> Res<&sbx_sys::Creds> {
        self.cfg.agent.as_ref().ok_or_else(|| {
            ErrorMsg::new(
                "denied",
                "the guest has no valid agent user (see the sandbox's status)",
            )
        })
    }

    fn signal(&self, id: u64, sig: i32) -> Res<()> {
        let sess = self
            .sessions()
            .get(&id)
            .cloned()
            .ok_or_else(|| ErrorMsg::new("not-found", format!("no exec with id {id}")))?;
        sess.signal(sig)
    }

    fn exec<S: Transport>(self: &Arc<Self>, s: &mut Conn<S>, req: ExecReq) -> Res<Reply> {
        if self.session_count() >= MAX_SESSIONS {
            return Err(ErrorMsg::new(
                "busy",
                format!("{MAX_SESSIONS} execs are running: try again later"),
            ));
        }
        if req.user == User::Root {
            self.audit_root(&req.argv)?;
        }
        let sess = self.spawn(&req)?;
        let id = sess.id;
        self.sessions().insert(id, Arc::clone(&sess));
        let reply = Reply::Started { id, pid: sess.pid };
        if proto::write_json(s, Kind::Reply, &reply).is_err() || s.flush().is_err() {
            return Err(ErrorMsg::new("closed", "")); // the client left; the exec runs on
        }
        if self.attach_conn(&sess, s) {
            Err(ErrorMsg::new("done", ""))
        } else {
            Err(ErrorMsg::new("closed", ""))
        }
    }

    /// A root exec is the user acting as root in the sandbox: recorded
    /// with its command before it runs, and refused when the record
    /// cannot be written (fail closed).
    fn audit_root(&self, argv: &[String]) -> Res<()> {
        let Some(path) = &self.cfg.audit_log else {
            return Ok(());
        };
        // JSON escapes whatever the command holds; `sbx-run log` shows it escaped.
        let target = argv.join(" ");
        let entry = crate::sink::own(
            "exec-root",
            &target,
            sbx_core::audit::Outcome::Allowed,
            "exec-root",
            Some("sbx-run exec --root".into()),
            "sbx-run",
        );
        crate::sink::LogFile::open(path)
            .and_then(|l| l.append(&entry))
            .map_err(|e| {
                ErrorMsg::new(
                    "io",
                    format!(
                        "{}: cannot record the root exec, so it did not run: {e}",
                        path.display()
                    ),
                )
            })
    }

    fn spawn(self: &Arc<Self>, req: &ExecReq) -> Res<Arc<Session>> {
        let spawn_err = |status: i32, msg: String| ErrorMsg {
            kind: "spawn".into(),
            message: msg,
            status: Some(status),
        };
        let (prog, args) = req
            .argv
            .split_first()
            .ok_or_else(|| ErrorMsg::new("bad-request", "exec: empty argv"))?;
        let (mut env, creds) = match req.user {
            User::Agent => (self.cfg.agent_env.clone(), Some(self.agent()?.clone())),
            User::Root => (self.cfg.root_env.clone(), None),
        };
        for (k, v) in &req.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(ErrorMsg::new(
                    "bad-request",
                    format!("exec: bad environment variable name {k:?}"),
                ));
            }
            env.retain(|(ek, _)| ek != k.as_str());
            env.push((k.into(), v.into()));
        }
        let cwd = match &req.cwd {
            Some(c) => PathBuf::from(c),
            None if creds.is_some() => self.cfg.agent_home.clone(),
            None => PathBuf::from("/"),
        };
        if !cwd.is_dir() {
            return Err(spawn_err(
                126,
                format!("{}: no such directory (the exec's cwd)", cwd.display()),
            ));
        }
        let path_var = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let resolved = sbx_sys::resolve_program(prog.as_ref(), path_var, &cwd)
            .map_err(|_| spawn_err(127, format!("{prog}: command not found")))?;
        let argv: Vec<OsString> = std::iter::once(prog)
            .chain(args.iter())
            .map(OsString::from)
            .collect();
        // The child's ends of its pipes or its pty slave, closed here once
        // it runs; ours, and the master.
        let (child_ends, tty, stdin, outs) = match req.tty {
            Some(ws) => {
                let (master, slave) = open_pty(ws).map_err(|e| io_err("openpty", e))?;
                let dup = |f: &File| f.try_clone().map_err(|e| io_err("pty", e));
                let (w, r) = (dup(&master)?, dup(&master)?);
                (
                    [dup(&slave)?, dup(&slave)?, slave],
                    Some(master),
                    Some(w),
                    vec![(Kind::Stdout, r)],
                )
            }
            None => {
                let pipe = || {
                    nix::unistd::pipe2(OFlag::O_CLOEXEC)
                        .map(|(r, w)| (File::from(r), File::from(w)))
                        .map_err(|e| io_err("pipe", e))
                };
                let (in_r, in_w) = pipe()?;
                let (out_r, out_w) = pipe()?;
                let (err_r, err_w) = pipe()?;
                (
                    [in_r, out_w, err_w],
                    None,
                    Some(in_w),
                    vec![(Kind::Stdout, out_r), (Kind::Stderr, err_r)],
                )
            }
        };
        let spec = sbx_sys::spawn::Spawn {
            program: &resolved,
            argv: &argv,
            env: &env,
            cwd: &cwd,
            stdio: [
                child_ends[0].as_fd(),
                child_ends[1].as_fd(),
                child_ends[2].as_fd(),
            ],
            pgroup: tty.is_none(),
            session_tty: tty.is_some(),
            creds: creds.as_ref(),
        };
        let (status_rx, status_tx) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| io_err("pipe", e))?;
        let status_tx = File::from(status_tx);
        let to_status = |e: std::io::Error| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            };
            spawn_err(code, format!("{prog}: {e}"))
        };
        let (child, reg) = match &self.cfg.reaper {
            Reaper::Pid1(reg) => {
                let mut w = reg.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let child = sbx_sys::spawn::spawn(&spec).map_err(to_status)?;
                w.insert(child.pid, status_tx);
                (child, Some(Arc::clone(reg)))
            }
            Reaper::Own => {
                let child = sbx_sys::spawn::spawn(&spec).map_err(to_status)?;
                if child.pidfd.is_none() {
                    // No pidfd to poll: a thread waits instead.
                    let pid = Pid::from_raw(child.pid);
                    let mut tx = status_tx;
                    std::thread::spawn(move || {
                        let how = match sbx_sys::privsep::wait(pid) {
                            Ok(sbx_sys::privsep::Status::Exited(c)) => Ended::Code(c),
                            Ok(sbx_sys::privsep::Status::Signaled(s)) => Ended::Signal(s),
                            Err(_) => Ended::Code(125),
                        };
                        let _ = tx.write_all(&encode(how));
                    });
                }
                (child, None)
            }
        };
        let pid = child.pid;
        drop(child_ends);
        let sess = Arc::new(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            pid,
            tty,
            stdin: Mutex::new(stdin),
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
            hangup: req.hangup,
        });
        let deadline = req
            .timeout_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        let s2 = Arc::clone(&sess);
        // Not PID 1 and a pidfd: nothing is ever written to the pipe.
        let own_pidfd = reg.is_none() && child.pidfd.is_some();
        let ended = Exited {
            pidfd: child.pidfd,
            registry: reg,
            status: (!own_pidfd).then(|| File::from(status_rx)),
        };
        // A running exec (an agent run, a terminal) keeps the sandbox up.
        let live = crate::idle::Live::new();
        std::thread::spawn(move || {
            pump(&s2, outs, ended, deadline);
            drop(live);
        });
        Ok(sess)
    }

    /// Stream a session to `s` until it ends, the client leaves, or another
    /// client attaches. Input frames are read on a second thread.
    /// Attach `s`'s connection; true when it can carry another request.
    fn attach_conn<S: Transport>(&self, sess: &Arc<Session>, s: &mut Conn<S>) -> bool {
        let more = match s.s.try_clone() {
            Ok(stream) => self.attach(sess, stream, s.reuse),
            Err(_) => false,
        };
        if !more {
            s.s.shutdown();
        }
        more
    }

    /// Stream a session to `s` until it ends, the client leaves, or another
    /// client attaches. Input frames are read on a second thread. True when
    /// the client ended the streams with `Control::Done` (`reuse` only);
    /// otherwise the connection is shut down.
    fn attach<S: Transport>(&self, sess: &Arc<Session>, mut s: S, reuse: bool) -> bool {
        let generation = {
            let mut i = sess.inner();
            i.owner += 1;
            i.owner
        };
        sess.cv.notify_all();
        let gone = Arc::new(AtomicBool::new(false));
        let reader = match s.try_clone() {
            Ok(mut r) => {
                let sess = Arc::clone(sess);
                let gone = Arc::clone(&gone);
                Some(std::thread::spawn(move || {
                    let done = sess.read_input(&mut r);
                    gone.store(true, Ordering::SeqCst);
                    let _g = sess.inner();
                    sess.cv.notify_all();
                    done
                }))
            }
            Err(_) => None,
        };
        let mut clean = false;
        let mut taken_over = false;
        let mut buf = Vec::new();
        loop {
            let (chunks, exit, taken) = {
                let mut i = sess.inner();
                while i.out.is_empty()
                    && i.exit.is_none()
                    && i.owner == generation
                    && !gone.load(Ordering::SeqCst)
                {
                    i = sess.cv.wait(i).unwrap_or_else(|e| e.into_inner());
                }
                let taken = i.owner != generation;
                let chunks: Vec<_> = i.out.drain(..).collect();
                i.buffered = 0;
                (chunks, i.exit.clone(), taken)
            };
            if taken {
                taken_over = true;
                let _ = proto::write_json(
                    &mut s,
                    Kind::Error,
                    &ErrorMsg::new("detached", "another client attached to this exec"),
                );
                break;
            }
            // What is there, and the exit, in one write.
            buf.clear();
            for (k, d) in &chunks {
                let _ = proto::write_frame(&mut buf, *k, d);
            }
            if let Some(x) = &exit {
                let _ = proto::write_json(&mut buf, Kind::Exit, x);
            }
            if s.write_all(&buf).is_err() {
                break;
            }
            if exit.is_some() {
                self.sessions().remove(&sess.id);
                clean = true;
                break;
            }
            if gone.load(Ordering::SeqCst) {
                break;
            }
        }
        if !(clean && reuse) {
            s.shutdown();
        }
        if !clean && !taken_over && sess.hangup {
            hang_up(sess);
        }
        // With reuse, the reader ends at the client's Done (or its leaving).
        let done = reader.map(|r| r.join().unwrap_or(false)).unwrap_or(false);
        reuse && done
    }

    fn read<S: Transport>(&self, s: &mut Conn<S>, path: &str, user: User) -> Res<Reply> {
        let mut f = self.as_user(user, || {
            let (root, rel) = beneath(&self.cfg, path)?;
            let fd = open2(&root, &rel, OFlag::O_RDONLY, 0).map_err(|e| errno_msg(path, e))?;
            let f = File::from(fd);
            let m = f.metadata().map_err(|e| io_err(path, e))?;
            if !m.is_file() {
                return Err(ErrorMsg::new(
                    "bad-request",
                    format!("{path}: not a regular file"),
                ));
            }
            Ok(f)
        })?;
        if proto::write_json(s, Kind::Reply, &Reply::Ok).is_err() {
            return Err(ErrorMsg::new("done", ""));
        }
        let mut buf = vec![0u8; proto::CHUNK];
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(path, e)),
            };
            if proto::write_frame(s, Kind::Data, &buf[..n]).is_err() {
                return Err(ErrorMsg::new("done", ""));
            }
        }
        let _ = proto::write_frame(s, Kind::Eof, &[]);
        Err(ErrorMsg::new("done", ""))
    }

    /// `cp` out: the tree at `path`, read by this process (root's
    /// credentials, filesystem identity `user`; never a child the agent
    /// could trace), entry by entry, no link below `path` followed.
    fn pack<S: Transport>(&self, s: &mut Conn<S>, path: &str, user: User) -> Res<Reply> {
        let top = self.as_user(user, || {
            let (root, rel) = beneath(&self.cfg, path)?;
            open2(
                &root,
                &rel,
                OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
                0,
            )
            .map_err(|e| errno_msg(path, e))
        })?;
        let name = Path::new(path)
            .file_name()
            .map(|n| n.to_owned())
            .unwrap_or_else(|| "root".into());
        if proto::write_json(s, Kind::Reply, &Reply::Ok).is_err() {
            return Err(ErrorMsg::new("closed", ""));
        }
        let to_io = |e: ProtoError| std::io::Error::other(e.to_string());
        let r = self.as_user(user, || {
            sbx_core::tree::walk(File::from(top), &name, &mut |e, f| {
                let size = match &e {
                    sbx_core::tree::Entry::File { size, .. } => *size,
                    _ => 0,
                };
                proto::write_json(s, Kind::Reply, &Reply::Entry(e)).map_err(to_io)?;
                if let Some(f) = f {
                    sbx_core::tree::send_exact(f, size, proto::CHUNK, &mut |b| {
                        proto::write_frame(s, Kind::Data, b).map_err(to_io)
                    })?;
                }
                Ok(())
            })
            .map_err(|e| io_err(path, e))
        });
        match r {
            Ok(()) => {
                let _ = proto::write_frame(s, Kind::Eof, &[]);
                Err(ErrorMsg::new("done", ""))
            }
            Err(e) => {
                let _ = proto::write_json(s, Kind::Error, &e);
                Err(ErrorMsg::new("closed", ""))
            }
        }
    }

    /// `cp` in: entries and bytes from the client, written as `user`
    /// inside the existing directory `path` by the same rules as the host
    /// applies to a copy out (tree::Writer).
    fn unpack<S: Transport>(&self, s: &mut Conn<S>, path: &str, user: User) -> Res<Reply> {
        let r = self.as_user(user, || {
            let (root, rel) = beneath(&self.cfg, path)?;
            let fd = open2(&root, &rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0)
                .map_err(|e| errno_msg(path, e))?;
            // The host sends here (`cp HOSTPATH :DIR`): a link it names is
            // copied as a link, as cp and docker cp do.
            let mut w = sbx_core::tree::Writer::new(sbx_sys::beneath::Dir::from(fd), None, None)
                .keep_top_link();
            // Many small frames: read them in large gulps. The client sends
            // nothing after its Eof until it has our reply, so the buffer
            // holds nothing of a next request when it is dropped.
            let s = &mut std::io::BufReader::with_capacity(proto::CHUNK, &mut *s);
            let bad = |m: String| ErrorMsg::new("bad-request", m);
            loop {
                match proto::read_frame(s) {
                    Ok((Kind::Reply, p)) => {
                        let Reply::Entry(e) =
                            proto::parse("entry", &p).map_err(|e| bad(e.to_string()))?
                        else {
                            return Err(bad("unpack: expected an entry".into()));
                        };
                        let size = match &e {
                            sbx_core::tree::Entry::File { size, .. } => *size,
                            _ => 0,
                        };
                        let mut sink = w.entry(e).map_err(|e| io_err(path, e))?;
                        let mut got = 0u64;
                        while got < size {
                            match proto::read_frame(s) {
                                Ok((Kind::Data, d)) if got + d.len() as u64 <= size => {
                                    got += d.len() as u64;
                                    sink.write_all(&d).map_err(|e| io_err(path, e))?;
                                }
                                _ => {
                                    return Err(bad(
                                        "unpack: a file's data is short or long".into()
                                    ));
                                }
                            }
                        }
                        w.finish(sink, size).map_err(|e| io_err(path, e))?;
                    }
                    Ok((Kind::Eof, _)) => break,
                    Ok((k, _)) => return Err(bad(format!("unpack: unexpected {k:?} frame"))),
                    Err(e) => return Err(bad(e.to_string())),
                }
            }
            Ok(Reply::Unpacked { refused: w.refused })
        });
        if r.is_err() {
            // Let the client finish sending, so it reads our reason.
            loop {
                match proto::read_frame(s) {
                    Ok((Kind::Eof, _)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        r
    }

    fn write<S: Transport>(
        &self,
        s: &mut Conn<S>,
        path: &str,
        mode: Option<u32>,
        user: User,
    ) -> Res<Reply> {
        let r = self.as_user(user, || write_file(&self.cfg, s, path, mode));
        if r.is_err() {
            // Let the client finish sending, so it reads our reason
            // instead of a broken pipe.
            while let Ok((Kind::Data, _)) = proto::read_frame(s) {}
        }
        r
    }
}

impl Session {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn signal(&self, sig: i32) -> Res<()> {
        let sig = nix::sys::signal::Signal::try_from(sig)
            .map_err(|_| ErrorMsg::new("bad-request", format!("no signal number {sig}")))?;
        if self.inner().exit.is_some() {
            return Ok(());
        }
        // The pty's session and the pipes' group both have the child's pid.
        nix::sys::signal::killpg(Pid::from_raw(self.pid), sig).map_err(|e| io_err("kill", e.desc()))
    }

    /// Client frames while attached: stdin, its end, resize, signal. True
    /// when the client ended them with `Control::Done`.
    fn read_input<S: Transport>(&self, r: &mut S) -> bool {
        loop {
            let (k, p) = match proto::read_frame(r) {
                Ok(f) => f,
                Err(_) => return false,
            };
            match k {
                Kind::Stdin => {
                    crate::idle::touch();
                    let mut g = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(f) = g.as_mut() {
                        if f.write_all(&p).is_err() {
                            *g = None;
                        }
                    }
                }
                Kind::Eof => {
                    if self.tty.is_some() {
                        // A terminal has no close: ^D at a line start.
                        let mut g = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
                        if let Some(f) = g.as_mut() {
                            let _ = f.write_all(b"\x04");
                        }
                    } else {
                        *self.stdin.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    }
                }
                Kind::Control => match proto::parse::<Control>("control", &p) {
                    Ok(Control::Resize(ws)) => {
                        if let Some(m) = &self.tty {
                            let _ = sbx_sys::set_winsize(m.as_fd(), ws.rows, ws.cols);
                        }
                    }
                    Ok(Control::Signal { signal }) => {
                        let _ = self.signal(signal);
                    }
                    Ok(Control::Done) => return true,
                    Err(_) => return false,
                },
                _ => return false,
            }
        }
    }

    fn push(&self, kind: Kind, data: Vec<u8>) {
        let mut i = self.inner();
        i.buffered += data.len();
        // Consecutive small chunks of one stream become one frame.
        match i.out.back_mut() {
            Some((k, d)) if *k == kind && d.len() + data.len() <= 64 * 1024 => {
                d.extend_from_slice(&data)
            }
            _ => i.out.push_back((kind, data)),
        }
        self.cv.notify_all();
    }
}

/// A `hangup` exec's client left: SIGTERM to its group now (a graceful
/// stop), its whole tree SIGKILLed if it has not ended after the grace.
fn hang_up(sess: &Arc<Session>) {
    if sess.inner().exit.is_some() {
        return;
    }
    let _ = nix::sys::signal::killpg(Pid::from_raw(sess.pid), nix::sys::signal::Signal::SIGTERM);
    let sess = Arc::clone(sess);
    std::thread::spawn(move || {
        let until = Instant::now() + HANGUP_GRACE;
        let mut i = sess.inner();
        while i.exit.is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(i);
                crate::tree::kill_tree(sess.pid, true);
                return;
            }
            i = sess
                .cv
                .wait_timeout(i, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    });
}

/// The exec's own thread: output into the buffer, the exit status, the
/// timeout.
/// How the pump learns the exit status. The pidfd turns readable the
/// moment the child ends; the pump then reaps it itself (under the
/// registry's lock, so PID 1 cannot take it at the same time) instead of
/// waiting for PID 1's SIGCHLD pass to hand it over through `status`.
/// Without a pidfd, or when PID 1 was first, the status comes on `status`.
struct Exited {
    pidfd: Option<OwnedFd>,
    registry: Option<Arc<Registry>>,
    status: Option<File>,
}

impl Exited {
    /// After the pidfd turned readable: the status, if ours to take.
    fn reap(&mut self, pid: i32) -> Option<Ended> {
        use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
        let mut guard = self
            .registry
            .as_ref()
            .map(|r| r.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(w) = &guard {
            if !w.contains_key(&pid) {
                return None; // PID 1 reaped it and wrote to `status`
            }
        }
        let how = loop {
            match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, c)) => break Ended::Code(c),
                Ok(WaitStatus::Signaled(_, sig, _)) => break Ended::Signal(sig as i32),
                Err(Errno::EINTR) => continue,
                Ok(WaitStatus::StillAlive) => return None,
                Ok(_) => continue,
                Err(_) => break Ended::Code(125),
            }
        };
        if let Some(w) = guard.as_mut() {
            w.remove(&pid);
        }
        Some(how)
    }
}

fn pump(sess: &Session, mut outs: Vec<(Kind, File)>, mut ex: Exited, deadline: Option<Instant>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut ended: Option<(Ended, Instant)> = None;
    let mut timed_out = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if let Some(d) = deadline {
            if now >= d && !timed_out && ended.is_none() {
                timed_out = true;
                let _ = nix::sys::signal::killpg(
                    Pid::from_raw(sess.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if let Some((_, t)) = ended {
            if outs.is_empty() || now.duration_since(t) >= DRAIN {
                break;
            }
        }
        let full = sess.inner().buffered >= BUF_CAP;
        let mut wait = if full {
            Duration::from_millis(20)
        } else {
            Duration::from_secs(3600)
        };
        if let Some((_, t)) = ended {
            wait = wait.min(DRAIN.saturating_sub(now.duration_since(t)));
        }
        if let (Some(d), false) = (deadline, timed_out) {
            wait = wait.min(d.saturating_duration_since(now));
        }
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        if !full {
            for (_, f) in &outs {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
            }
        }
        let n_out = fds.len();
        let (mut at_status, mut at_pidfd) = (None, None);
        if ended.is_none() {
            if let Some(st) = &ex.status {
                at_status = Some(fds.len());
                fds.push(PollFd::new(st.as_fd(), PollFlags::POLLIN));
            }
            if let Some(p) = &ex.pidfd {
                at_pidfd = Some(fds.len());
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
        }
        let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break,
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if at_pidfd.is_some_and(|i| ready[i]) {
            // Ended: reap it here, or PID 1 did and the status is on its way.
            match ex.reap(sess.pid) {
                Some(how) => ended = Some((how, Instant::now())),
                None if ex.status.is_some() => ex.pidfd = None,
                None => {}
            }
        }
        if ended.is_none() && at_status.is_some_and(|i| ready[i]) {
            let mut b = [0u8; 8];
            let got = ex.status.as_mut().map(|st| st.read_exact(&mut b));
            if got.is_some_and(|r| r.is_ok()) {
                ended = Some((decode(b), Instant::now()));
            } else {
                ended = Some((Ended::Code(125), Instant::now()));
            }
        }
        let mut closed = Vec::new();
        for (i, (k, f)) in outs.iter_mut().enumerate() {
            if i >= n_out || !ready[i] {
                continue;
            }
            match f.read(&mut buf) {
                Ok(0) => closed.push(i),
                Ok(n) => sess.push(*k, buf[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // EIO: the pty's last slave closed.
                Err(_) => closed.push(i),
            }
        }
        for i in closed.into_iter().rev() {
            outs.remove(i);
        }
    }
    let (how, _) = ended.unwrap_or((Ended::Code(125), Instant::now()));
    let exit = match how {
        _ if timed_out => ExitMsg {
            status: 124,
            code: None,
            signal: Some(9),
            timed_out: true,
        },
        Ended::Code(c) => ExitMsg {
            status: c,
            code: Some(c),
            signal: None,
            timed_out: false,
        },
        Ended::Signal(s) => ExitMsg {
            status: 128 + s,
            code: None,
            signal: Some(s),
            timed_out: false,
        },
    };
    *sess.stdin.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let mut i = sess.inner();
    i.exit = Some(exit);
    i.ended_at = Some(Instant::now());
    sess.cv.notify_all();
}

/// A connection whose writes wait in `out` while more input is already
/// there: the hello and the answer to the request that came with it, or a
/// reply, a small file and its end, leave in one write and wake the client
/// once. Any read that would block sends what waits first.
struct Conn<S: Transport> {
    s: S,
    out: Vec<u8>,
    /// The client asked for more than one request (and got it).
    reuse: bool,
}

impl<S: Transport> Conn<S> {
    fn new(s: S) -> Self {
        Self {
            s,
            out: Vec::new(),
            reuse: false,
        }
    }

    fn input_waiting(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let Some(fd) = self.s.poll_fd() else {
            return false;
        };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }
}

impl<S: Transport> Read for Conn<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.out.is_empty() && !self.input_waiting() {
            self.flush()?;
        }
        self.s.read(buf)
    }
}

impl<S: Transport> Write for Conn<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.extend_from_slice(buf);
        if self.out.len() >= proto::CHUNK {
            self.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            let r = self.s.write_all(&self.out);
            self.out.clear();
            r?;
        }
        self.s.flush()
    }
}

/// A pty pair whose descriptors are close-on-exec from the start (openpty(3)
/// leaves both inheritable: every later child would hold this terminal).
fn open_pty(ws: sbx_core::guestapi::Winsize) -> std::io::Result<(File, File)> {
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    let m = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&m)?;
    unlockpt(&m)?;
    let name = ptsname_r(&m)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let master = File::from(OwnedFd::from(m));
    sbx_sys::set_winsize(master.as_fd(), ws.rows, ws.cols)?;
    Ok((master, File::from(slave)))
}

/// Sets this thread's fsuid/fsgid, and back to root on drop.
pub(crate) struct FsId;

impl FsId {
    pub(crate) fn set(uid: u32, gid: u32) -> Self {
        use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
        setfsgid(Gid::from_raw(gid));
        setfsuid(Uid::from_raw(uid));
        FsId
    }
}

impl Drop for FsId {
    fn drop(&mut self) {
        use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
        setfsuid(Uid::from_raw(0));
        setfsgid(Gid::from_raw(0));
    }
}

/// The root directory holding `path` (opened O_PATH) and the rest of the
/// path. `..` anywhere is refused before anything is opened.
fn beneath(cfg: &Config, path: &str) -> Res<(OwnedFd, PathBuf)> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(ErrorMsg::new(
            "bad-request",
            format!("{path}: give an absolute path"),
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(ErrorMsg::new(
            "escape",
            format!("{path}: `..` is not allowed in API paths"),
        ));
    }
    let root = cfg
        .roots
        .iter()
        .filter(|r| p.starts_with(r))
        .max_by_key(|r| r.components().count())
        .ok_or_else(|| {
            ErrorMsg::new(
                "escape",
                format!(
                    "{path}: outside the allowed roots ({})",
                    cfg.roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
    let rel = p.strip_prefix(root).unwrap_or(Path::new("")).to_path_buf();
    let fd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| errno_msg(&root.display().to_string(), e))?;
    let rel = if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    };
    Ok((fd, rel))
}

/// openat2 beneath `dir`: symlinks are followed only while they stay
/// inside (an absolute one, or one climbing out, is EXDEV).
fn open2(dir: &OwnedFd, rel: &Path, flags: OFlag, mode: u32) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(dir, rel, how)
}

/// The parent directory (O_PATH, beneath a root) and the last name.
fn parent_of(cfg: &Config, path: &str) -> Res<(OwnedFd, OsString)> {
    let (root, rel) = beneath(cfg, path)?;
    let name = rel
        .file_name()
        .filter(|_| rel != Path::new("."))
        .ok_or_else(|| {
            ErrorMsg::new(
                "bad-request",
                format!("{path}: names a root, not something in it"),
            )
        })?
        .to_owned();
    let parent = rel.parent().unwrap_or(Path::new(""));
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let fd = open2(&root, parent, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)
        .map_err(|e| errno_msg(path, e))?;
    Ok((fd, name))
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn write_file(cfg: &Config, s: &mut impl Read, path: &str, mode: Option<u32>) -> Res<Reply> {
    use nix::fcntl::{AtFlags, openat, renameat};
    let (dir, name) = parent_of(cfg, path)?;
    // A replaced file keeps its mode unless one is given.
    let old = nix::sys::stat::fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok();
    if old.is_some_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
    {
        return Err(ErrorMsg::new(
            "bad-request",
            format!("{path}: is a directory"),
        ));
    }
    let mode = mode.unwrap_or_else(|| old.map(|st| st.st_mode & 0o7777).unwrap_or(0o644));
    let tmp = format!(
        ".{}.sbx-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let fd = openat(
        &dir,
        tmp.as_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| errno_msg(path, e))?;
    let mut f = File::from(fd);
    let cleanup = |e: ErrorMsg| {
        let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        e
    };
    loop {
        match proto::read_frame(s) {
            Ok((Kind::Data, d)) => f.write_all(&d).map_err(|e| cleanup(io_err(path, e)))?,
            Ok((Kind::Eof, _)) => break,
            Ok((k, _)) => {
                return Err(cleanup(ErrorMsg::new(
                    "bad-request",
                    format!("write: expected data, got a {k:?} frame"),
                )));
            }
            Err(e) => return Err(cleanup(ErrorMsg::new("bad-request", e.to_string()))),
        }
    }
    nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(mode))
        .map_err(|e| cleanup(errno_msg(path, e)))?;
    drop(f);
    renameat(&dir, tmp.as_str(), &dir, name.as_os_str())
        .map_err(|e| cleanup(errno_msg(path, e)))?;
    Ok(Reply::Ok)
}

fn info(path: String, st: &nix::sys::stat::FileStat) -> StatInfo {
    let kind = match st.st_mode & 0o170000 {
        0o100000 => "file",
        0o040000 => "dir",
        0o120000 => "symlink",
        _ => "other",
    };
    StatInfo {
        path,
        kind: kind.into(),
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime: st.st_mtime,
    }
}

fn stat(cfg: &Config, path: &str) -> Res<Reply> {
    let (root, rel) = beneath(cfg, path)?;
    let fd =
        open2(&root, &rel, OFlag::O_PATH | OFlag::O_NOFOLLOW, 0).map_err(|e| errno_msg(path, e))?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| errno_msg(path, e))?;
    Ok(Reply::Stat(info(path.into(), &st)))
}

/// (dev, ino) of what is mounted at each absolute path, resolved from `/`
/// with no link followed anywhere; None when there is a link on the way
/// or no mount right there, so neither can match what the host opened.
fn identify(paths: &[String]) -> Res<Reply> {
    if paths.len() > proto::IDENTIFY_MAX {
        return Err(ErrorMsg::new(
            "bad-request",
            format!("identify: more than {} paths", proto::IDENTIFY_MAX),
        ));
    }
    let root = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_msg("/", e))?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let mut ids = Vec::with_capacity(paths.len());
    for p in paths {
        let Some(rel) = p.strip_prefix('/').filter(|r| !r.is_empty()) else {
            return Err(ErrorMsg::new(
                "bad-request",
                format!("{p}: not an absolute path below /"),
            ));
        };
        let parent = Path::new(rel)
            .parent()
            .filter(|p| !p.as_os_str().is_empty());
        let parent = parent.unwrap_or(Path::new("."));
        let id = (|| {
            let fd = nix::fcntl::openat2(&root, rel, how).ok()?;
            let up = nix::fcntl::openat2(&root, parent, how).ok()?;
            // Something must be mounted right there: docker may have
            // followed a link at the target and mounted elsewhere, leaving
            // the unmounted source itself at this name.
            if mnt_id(&fd)? == mnt_id(&up)? {
                return None;
            }
            let st = nix::sys::stat::fstat(&fd).ok()?;
            (SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFLNK).then_some(
                proto::FileId {
                    dev: st.st_dev,
                    ino: st.st_ino,
                },
            )
        })();
        ids.push(id);
    }
    Ok(Reply::Ids { ids })
}

/// The mount an open fd is on (`mnt_id` in /proc/self/fdinfo).
fn mnt_id(fd: &OwnedFd) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// At most this many entries per list, so one request stays bounded.
const LIST_MAX: usize = 100_000;

fn list(cfg: &Config, path: &str, depth: u32) -> Res<Reply> {
    let (root, rel) = beneath(cfg, path)?;
    let fd = open2(&root, &rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0)
        .map_err(|e| errno_msg(path, e))?;
    let mut entries = Vec::new();
    walk(fd, path.trim_end_matches('/'), depth, &mut entries)?;
    Ok(Reply::List { entries })
}

fn walk(fd: OwnedFd, prefix: &str, depth: u32, out: &mut Vec<StatInfo>) -> Res<()> {
    use nix::fcntl::AtFlags;
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| errno_msg(prefix, e))?;
    let mut subdirs = Vec::new();
    let dfd = dir
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| io_err(prefix, e))?;
    for ent in dir.iter() {
        let ent = ent.map_err(|e| errno_msg(prefix, e))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if out.len() >= LIST_MAX {
            return Err(ErrorMsg::new(
                "bad-request",
                format!("{prefix}: more than {LIST_MAX} entries; list a smaller tree"),
            ));
        }
        let Ok(st) = nix::sys::stat::fstatat(&dfd, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let p = format!("{prefix}/{name}");
        let i = info(p.clone(), &st);
        if depth > 0 && i.kind == "dir" {
            subdirs.push((name, p));
        }
        out.push(i);
    }
    for (name, p) in subdirs {
        if let Ok(sub) = nix::fcntl::openat(
            &dfd,
            name.as_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            walk(sub, &p, depth - 1, out)?;
        }
    }
    Ok(())
}

fn mkdir_p(cfg: &Config, path: &str, mode: u32) -> Res<Reply> {
    let (root, rel) = beneath(cfg, path)?;
    let mut cur = root;
    for c in rel.components() {
        let Component::Normal(name) = c else { continue };
        match nix::sys::stat::mkdirat(&cur, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(errno_msg(path, e)),
        }
        // Each step refuses a symlink: a directory made here is ours.
        cur = nix::fcntl::openat(
            &cur,
            name,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno_msg(path, e))?;
    }
    Ok(Reply::Ok)
}

fn remove(cfg: &Config, path: &str, recursive: bool) -> Res<Reply> {
    use nix::unistd::{UnlinkatFlags, unlinkat};
    let (dir, name) = parent_of(cfg, path)?;
    match unlinkat(&dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
        Ok(()) => return Ok(Reply::Ok),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(errno_msg(path, e)),
    }
    if recursive {
        let sub = nix::fcntl::openat(
            &dir,
            name.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno_msg(path, e))?;
        empty_dir(sub, path)?;
    }
    unlinkat(&dir, name.as_os_str(), UnlinkatFlags::RemoveDir).map_err(|e| errno_msg(path, e))?;
    Ok(Reply::Ok)
}

fn empty_dir(fd: OwnedFd, path: &str) -> Res<()> {
    use nix::unistd::{UnlinkatFlags, unlinkat};
    let dfd = fd.try_clone().map_err(|e| io_err(path, e))?;
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| errno_msg(path, e))?;
    let names: Vec<OsString> = dir
        .iter()
        .filter_map(|e| e.ok())
        .map(|e| {
            use std::os::unix::ffi::OsStrExt;
            std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned()
        })
        .filter(|n| n != "." && n != "..")
        .collect();
    for n in names {
        match unlinkat(&dfd, n.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) => continue,
            Err(Errno::EISDIR) => {}
            Err(e) => return Err(errno_msg(path, e)),
        }
        let sub = nix::fcntl::openat(
            &dfd,
            n.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno_msg(path, e))?;
        empty_dir(sub, path)?;
        unlinkat(&dfd, n.as_os_str(), UnlinkatFlags::RemoveDir).map_err(|e| errno_msg(path, e))?;
    }
    Ok(())
}

fn rename(cfg: &Config, from: &str, to: &str) -> Res<Reply> {
    let (fd, fname) = parent_of(cfg, from)?;
    let (td, tname) = parent_of(cfg, to)?;
    nix::fcntl::renameat(&fd, fname.as_os_str(), &td, tname.as_os_str())
        .map_err(|e| errno_msg(from, e))?;
    Ok(Reply::Ok)
}

fn health(cfg: &Config) -> Res<Reply> {
    let text = std::fs::read_to_string(&cfg.status)
        .map_err(|e| io_err(&cfg.status.display().to_string(), e))?;
    let status =
        serde_json::from_str(&text).map_err(|e| io_err(&cfg.status.display().to_string(), e))?;
    Ok(Reply::Health { status })
}

/// Bind the socket as the owner of its directory (the host user who runs
/// sbx-run, who must be able to connect), mode 0600. Inside the sandbox
/// the socket sits under root's 0700 /run/sbx, out of the agent's reach.
pub fn bind(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let meta = std::fs::metadata(dir)?;
    let name = PathBuf::from(path.file_name().unwrap_or_default());
    // Opened as root: a non-root owner's fsuid drops the capabilities
    // that let the guest pass root's 0700 /run/sbx on the way.
    let dirfd = nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // A thread of its own, with its own cwd (CLONE_FS): the fsuid switch
    // and the chdir must not touch any other.
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)?;
        nix::unistd::fchdir(&dirfd)?;
        let _g = FsId::set(meta.uid(), meta.gid());
        let _ = std::fs::remove_file(&name);
        let l = std::os::unix::net::UnixListener::bind(&name)?;
        std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600))?;
        Ok(l)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("bind thread panicked")))
}

/// Threads that wait in accept(2) themselves, so a connection needs no
/// thread start and no hand-over: the kernel wakes one waiting thread, which
/// serves the connection to its end. `KEEP` of them stay for good; when the
/// last idle one takes a connection it starts another first (100 clients at
/// once get 100 threads), and an extra one that sat idle for
/// `ACCEPT_IDLE` ends.
struct Acceptors {
    listener: std::os::unix::net::UnixListener,
    idle: std::sync::atomic::AtomicUsize,
}

const KEEP: usize = 2;
const ACCEPT_IDLE: Duration = Duration::from_millis(100);

/// Accept forever (this thread is one of the acceptors).
pub fn serve(listener: std::os::unix::net::UnixListener, server: Arc<Server>) {
    use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
    use nix::sys::time::{TimeVal, TimeValLike};
    // accept(2) honours SO_RCVTIMEO: that is how an extra acceptor notices
    // it has been idle.
    let tv = TimeVal::microseconds(ACCEPT_IDLE.as_micros() as i64);
    // Without it (it does not fail on a unix socket) extras would stay.
    let _ = setsockopt(&listener, ReceiveTimeout, &tv);
    let pool = Arc::new(Acceptors {
        listener,
        idle: std::sync::atomic::AtomicUsize::new(0),
    });
    for _ in 1..KEEP {
        let (p, s) = (Arc::clone(&pool), Arc::clone(&server));
        std::thread::spawn(move || accept_loop(&p, &s));
    }
    accept_loop(&pool, &server);
}

fn accept_loop(pool: &Arc<Acceptors>, server: &Arc<Server>) {
    pool.idle.fetch_add(1, Ordering::SeqCst);
    loop {
        match pool.listener.accept() {
            Ok((s, _)) => {
                if pool.idle.fetch_sub(1, Ordering::SeqCst) == 1 {
                    // Nobody else is waiting: one more, before this one is busy.
                    let (p, sv) = (Arc::clone(pool), Arc::clone(server));
                    std::thread::spawn(move || accept_loop(&p, &sv));
                }
                server.handle(s);
                pool.idle.fetch_add(1, Ordering::SeqCst);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // Idle: an extra acceptor ends, the first KEEP stay.
                let gone = pool
                    .idle
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                        (n > KEEP).then(|| n - 1)
                    })
                    .is_ok();
                if gone {
                    return;
                }
            }
            Err(e) if e.raw_os_error() == Some(libc_emfile()) => {
                // Out of descriptors: wait for connections to end.
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => {}
        }
    }
}

fn libc_emfile() -> i32 {
    Errno::EMFILE as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what is mounted right at a path, reached through no link, is
    /// identified: /proc is a mount, /proc/self a link, /proc/1 a plain
    /// directory of the /proc mount; a relative path is refused.
    #[test]
    fn identify_answers_only_for_a_mount_reached_without_links() {
        let paths = ["/proc", "/proc/self", "/proc/1", "/nonexistent-h37"].map(String::from);
        let Ok(Reply::Ids { ids }) = identify(&paths) else {
            panic!("no ids");
        };
        let st = nix::sys::stat::stat("/proc").unwrap();
        assert_eq!(
            ids[0],
            Some(proto::FileId {
                dev: st.st_dev,
                ino: st.st_ino
            })
        );
        assert_eq!(ids[1..], [None, None, None]);
        assert!(identify(&["proc".to_owned()]).is_err());
    }
}
