//! The lock on the real git's back door. Inside the sandbox the real git is
//! execute-only in a root-only directory, so the agent can neither name,
//! run nor copy it. A root broker holds it open (O_PATH) and runs it for
//! the guard: the guard sends argv, environment, stdio and cwd over a unix
//! socket; the broker takes the caller's uid/gid from SO_PEERCRED, and a
//! forked child becomes that user, makes the guard's decision there, and
//! execs the binary by fd. The client is untrusted (the agent can talk to
//! the socket itself), so every decision is made on the broker's side.

pub mod proto;

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use sbx_core::{Exit, output};
use sbx_sys::privsep::{self, Forked, PeerCred, Status};

use crate::policy::{Allow, Block};
use proto::{Kind, ProtoError, Reply, Request, Transport};

/// Where the image's entrypoint puts the broker's socket.
pub const DEFAULT_SOCKET: &str = "/run/sbx-git/broker.sock";
/// The image's group for git and its hooks (base-image/Dockerfile).
pub const DEFAULT_GROUP: &str = "sbx-git";
/// Overrides the socket (tests, and a broker outside the image). The
/// agent may set it: it only chooses whom the guard asks, never what runs.
pub const SOCKET_VAR: &str = "SBX_GIT_BROKER";

/// Signals the client passes on to git's process group, as a terminal
/// would deliver them to a foreground job that git was part of.
pub const RELAYED: &[i32] = &[
    libc_sig::SIGHUP,
    libc_sig::SIGINT,
    libc_sig::SIGQUIT,
    libc_sig::SIGTERM,
    libc_sig::SIGUSR1,
    libc_sig::SIGUSR2,
    libc_sig::SIGWINCH,
];

/// Signal numbers (Linux, every architecture sbx targets).
mod libc_sig {
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGQUIT: i32 = 3;
    pub const SIGKILL: i32 = 9;
    pub const SIGUSR1: i32 = 10;
    pub const SIGUSR2: i32 = 12;
    pub const SIGTERM: i32 = 15;
    pub const SIGWINCH: i32 = 28;
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("the real git {0}: {1}")]
    Git(PathBuf, std::io::Error),
    #[error(
        "the real git {0} is {1}; the agent could run or copy it: install it 0711 in a 0700 root directory"
    )]
    Exposed(PathBuf, String),
    #[error(
        "fs.suid_dumpable is 1, so the agent could read the real git through /proc/PID/exe: set it to 0 or 2"
    )]
    Dumpable,
    #[error("socket {0}: {1}")]
    Socket(PathBuf, std::io::Error),
    #[error(
        "--group {0}: no such group: create it (groupadd -r {0}) or give a numeric gid no user has"
    )]
    Group(String),
    #[error(
        "--keep {0}: {1}: give a file in a root-owned 0755 directory (a volume only root can write)"
    )]
    Keep(PathBuf, String),
    #[error("{0}")]
    Seccomp(String),
}

impl sbx_core::SbxError for BrokerError {
    fn exit(&self) -> Exit {
        match self {
            BrokerError::Git(_, e) if e.kind() == std::io::ErrorKind::NotFound => Exit::NoInput,
            BrokerError::Exposed(..)
            | BrokerError::Dumpable
            | BrokerError::Group(_)
            | BrokerError::Keep(..) => Exit::Config,
            _ => Exit::OsErr,
        }
    }
}

// ---------------------------------------------------------------- client

/// The socket to use, if a broker is configured: `$SBX_GIT_BROKER` outside
/// the sandbox, else the image's socket when it exists. None: exec the real
/// git as before. Inside, the variable is ignored: git passes it on to the
/// hook steps, and a broker of the agent's own could answer their checks.
pub fn socket_path(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    socket_path_in(env, crate::in_sandbox())
}

pub(crate) fn socket_path_in(env: &[(OsString, OsString)], sandboxed: bool) -> Option<PathBuf> {
    let var = env
        .iter()
        .find(|(k, _)| k == SOCKET_VAR && !sandboxed)
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| !p.as_os_str().is_empty());
    match var {
        Some(p) => Some(p),
        // In a sandbox the broker is the agent's only way to git: a socket
        // not made yet (the first call right after start) is waited for in
        // `connect`, not taken for "no broker" (which ran the guard
        // directly and failed, 127). Root (the image build) runs git itself.
        None if sandboxed && !nix::unistd::geteuid().is_root() => {
            Some(PathBuf::from(DEFAULT_SOCKET))
        }
        None => {
            let p = Path::new(DEFAULT_SOCKET);
            std::fs::symlink_metadata(p).is_ok().then(|| p.to_owned())
        }
    }
}

/// Hand `git ARGS` (or a pass-through helper) to the broker when one is
/// configured; None when there is none. The answer is git's exit status.
pub fn forward(args: &[OsString], pass_through: Option<&str>) -> Option<ExitCode> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let socket = socket_path(&env)?;
    output::set_tool_if_unset(crate::TOOL);
    let (kind, args) = match pass_through {
        Some(cmd) => {
            let mut all = vec![OsString::from(cmd)];
            all.extend(args.iter().cloned());
            (Kind::PassThrough, all)
        }
        None => (Kind::Git, args.to_vec()),
    };
    let req = Request {
        kind,
        // The guard runs no threads: set-and-restore is safe here.
        umask: privsep::umask_single_threaded(),
        args,
        env,
    };
    Some(match call(&socket, &req) {
        Ok(code) => code,
        Err(msg) => {
            output::error(&format!("git broker {}: {msg}", socket.display()));
            Exit::WrapperFailed.into()
        }
    })
}

/// The guest starts the agent only once the broker listens (guest.toml's
/// `ready_socket`), so a missing broker here is one being restarted after
/// a crash (at once after a run of 30 s or more), or a stale socket file
/// from the container's last run. Half a second covers the restart; then
/// the call fails and git does not run.
fn connect(socket: &Path) -> Result<UnixStream, String> {
    use std::io::ErrorKind::{ConnectionRefused, NotFound};
    let give_up = std::time::Instant::now() + CONNECT_WAIT;
    loop {
        match UnixStream::connect(socket) {
            Ok(c) => return Ok(c),
            Err(e)
                if matches!(e.kind(), NotFound | ConnectionRefused)
                    && std::time::Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// How long a call waits for a broker that is not listening.
pub const CONNECT_WAIT: Duration = Duration::from_millis(500);

/// One round trip: connect, send, relay signals until the reply.
pub fn call(socket: &Path, req: &Request) -> Result<ExitCode, String> {
    let stdio = stdio_fds().map_err(|e| format!("stdio: {e}"))?;
    call_with(socket, req, stdio, None)
}

/// Run the repository's hook `name` in `dir` (a guard hook step's trusted
/// directory) through the broker, which starts it as this process's uid
/// and group in a Landlock domain of its own, beside git's: programs git
/// started in the same call (a `core.fsmonitor`, an editor, a filter)
/// share git's domain, and from there cannot trace it. `stdin`: what the
/// hook reads instead of this process's stdin. The answer is its status.
pub fn run_hook(
    socket: &Path,
    dir: BorrowedFd<'_>,
    name: &str,
    args: &[OsString],
    stdin: Option<OwnedFd>,
) -> Result<ExitCode, String> {
    run_hook_with_env(
        socket,
        dir,
        name,
        args,
        stdin,
        std::env::vars_os().collect(),
    )
}

/// [`run_hook`] with the hook's environment given (the ledger's check
/// runs hooks on a private view: its own `GIT_DIR` and index).
pub fn run_hook_with_env(
    socket: &Path,
    dir: BorrowedFd<'_>,
    name: &str,
    args: &[OsString],
    stdin: Option<OwnedFd>,
    env: Vec<(OsString, OsString)>,
) -> Result<ExitCode, String> {
    let mut stdio = stdio_fds().map_err(|e| format!("stdio: {e}"))?;
    if let Some(i) = stdin {
        stdio[0] = i;
    }
    let mut all = vec![OsString::from(name)];
    all.extend(args.iter().cloned());
    let req = Request {
        kind: Kind::Hook,
        umask: privsep::umask_single_threaded(),
        args: all,
        env,
    };
    call_with(socket, &req, stdio, Some(dir))
}

/// The sandbox-wide record of stash and notes commits, beside the
/// broker's socket (`/run/sbx-git/stash-seen` in the sandbox): root's,
/// 0644, appended to only by the broker ([`Kind::Record`]). None: no broker.
pub fn shared_record(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    Some(socket_path(env)?.parent()?.join(RECORD_FILE))
}

/// The record's file name, beside the socket.
pub const RECORD_FILE: &str = "stash-seen";

/// The ledger of approved commits, beside the broker's socket
/// (`/run/sbx-git/ledger` in the sandbox): root's, 0644, appended to only
/// by the broker ([`Kind::Ledger`]) and kept across restarts beside the
/// kept stash record. None: no broker.
pub fn ledger_path(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    Some(socket_path(env)?.parent()?.join(LEDGER_FILE))
}

/// The ledger's file name, beside the socket and beside `--keep`'s record.
pub const LEDGER_FILE: &str = "ledger";

/// Tips a `git push`'s pre-push step checked and let go, beside the
/// ledger (`/run/sbx-git/sent`): the receiving side of a push into a
/// repository of the sandbox admits a branch moved onto one, since the
/// pushing side walked its history against the ledger already. Not
/// kept across restarts: a push and its receive-pack run together.
pub const SENT_FILE: &str = "sent";

/// In a [`Kind::Ledger`] request: the ids are tips a pre-push step sent
/// ([`SENT_FILE`]), not commits for the ledger.
const SENT_VAR: &str = "SBX_GUARD_SENT";

/// [`SENT_FILE`]'s path. None: no broker.
pub fn sent_path(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    Some(socket_path(env)?.parent()?.join(SENT_FILE))
}

/// Ask the broker to add the tips a pre-push step let go to
/// [`SENT_FILE`]. Like the ledger, only git's own processes may.
pub fn add_sent(socket: &Path, ids: &[u8]) -> Result<(), String> {
    let env = vec![(SENT_VAR.into(), "1".into())];
    send_ids(socket, Kind::Ledger, ids, env)
        .map_err(|e| e.unwrap_or_else(|| "the broker did not record what the push sent".into()))
}

/// What commit-msg passed, kept by the broker's root process (msg.rs):
/// `<this>/<the private index's name>` beside the socket
/// (`/run/sbx-git/approved`, root's). A copy in the call's private
/// directory could be rewritten by any program git starts during the
/// commit (an editor's daemon): it has git's group and the private
/// index's name, and a message commit-msg refuses was committed (a46g).
pub const APPROVED_DIR: &str = "approved";

/// On a session's channel to the root process ([`ask_for_set`]'s): a
/// message commit-msg passed, for [`APPROVED_DIR`], not a hook set.
const KEEP_APPROVED: u32 = u32::MAX;

/// The root process's [`APPROVED_DIR`] (set by `serve`).
static APPROVED_AT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The name a private index's approval is kept under: its file name.
fn approval_name(private: &OsStr) -> Option<&OsStr> {
    let n = Path::new(private).file_name()?;
    let ok = !n.is_empty()
        && n.len() <= 255
        && !n.as_bytes().starts_with(b".")
        && n.as_bytes()
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(b));
    ok.then_some(n)
}

/// Where the root process keeps what commit-msg passed for the call whose
/// private index is `private`. None: no broker, or not a private index's name.
pub fn approved_path(env: &[(OsString, OsString)], private: &OsStr) -> Option<PathBuf> {
    let dir = socket_path(env)?.parent()?.join(APPROVED_DIR);
    Some(dir.join(approval_name(private)?))
}

/// The broker's hook process, once commit-msg passed `msg` for the call
/// whose private index is `private`: ask the root process, over this
/// session's channel (which no process git starts holds), to keep it.
pub fn keep_approved(private: &OsStr, msg: &[u8]) -> Result<(), String> {
    let name = approval_name(private).ok_or("not a private index's name")?;
    let m = MAKER.get().ok_or("not in a broker's session")?;
    ask_root(m, KEEP_APPROVED, &[name.as_bytes(), msg])?
        .then_some(())
        .ok_or_else(|| "the broker did not keep what commit-msg passed".into())
}

/// On a session's channel to the root process: `what`, then each part
/// with its length; did the root process answer yes?
fn ask_root(m: &UnixStream, what: u32, parts: &[&[u8]]) -> Result<bool, String> {
    Ok(send_to_root(m, what, parts)? && root_said_yes(m))
}

/// The first half of [`ask_root`]: the request sent (false: the channel
/// is gone); [`root_said_yes`] reads its answer.
fn send_to_root(mut m: &UnixStream, what: u32, parts: &[&[u8]]) -> Result<bool, String> {
    let mut buf = what.to_le_bytes().to_vec();
    for part in parts {
        let n = u32::try_from(part.len()).map_err(|e| e.to_string())?;
        buf.extend_from_slice(&n.to_le_bytes());
        buf.extend_from_slice(part);
    }
    Ok(m.write_all(&buf).is_ok())
}

fn root_said_yes(mut m: &UnixStream) -> bool {
    let mut ok = [0u8];
    m.read_exact(&mut ok).is_ok() && ok[0] == 1
}

/// One part of an [`ask_root`] request, at most `max` bytes.
fn read_part(mut m: &UnixStream, max: usize) -> Option<Vec<u8>> {
    let mut n = [0u8; 4];
    m.read_exact(&mut n).ok()?;
    let n = u32::from_le_bytes(n) as usize;
    (n <= max).then_some(())?;
    let mut b = vec![0u8; n];
    m.read_exact(&mut b).ok()?;
    Some(b)
}

/// The root process's side of [`keep_approved`]: the name and the message
/// from the channel, written (as root, by a rename) under [`APPROVED_DIR`].
fn keep_approved_for(mut m: &UnixStream) -> bool {
    const MAX_MSG: usize = 1 << 20;
    let Some(name) = read_part(m, 255) else {
        return false;
    };
    let Some(msg) = read_part(m, MAX_MSG) else {
        return false;
    };
    let kept = APPROVED_AT
        .get()
        .zip(approval_name(OsStr::from_bytes(&name)))
        .is_some_and(|(dir, n)| {
            let path = dir.join(n);
            let mut tmp = path.clone().into_os_string();
            tmp.push(".new");
            with_room(dir, || {
                let _ = std::fs::remove_file(&tmp);
                std::fs::write(&tmp, &msg)
                    .inspect_err(|_| drop(std::fs::remove_file(&tmp)))
                    .and_then(|()| std::fs::rename(&tmp, &path))
            })
            .is_ok()
        });
    m.write_all(&[u8::from(kept)]).is_ok()
}

/// `keep` a file in [`APPROVED_DIR`], and once more after
/// [`sweep_approved`] when its filesystem is full: a tmpfs of 16 MiB
/// (sbx-guest), where the pins and the unused approvals of ended calls
/// stay, and the agent's git can ask for pins under any name.
fn with_room(dir: &Path, keep: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
    match keep() {
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            sweep_approved(dir);
            keep()
        }
        r => r,
    }
}

/// Remove from [`APPROVED_DIR`] (`dir`) what belongs to no live call: an
/// entry `<name>`, `<name>.pin` or `<name>.new` whose private index
/// (`<name>`, its lock or its `.msg` directory beside it) is gone. A call
/// whose entry goes anyway fails closed: its step refuses a commit
/// without its pin or approval.
fn sweep_approved(dir: &Path) {
    let index = dir.with_file_name(crate::index::ROOT_NAME);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let b = name.as_bytes();
        let call = [&b".pin"[..], b".new"]
            .iter()
            .find_map(|s| b.strip_suffix(*s))
            .unwrap_or(b);
        let live = [&b""[..], b".lock", b".msg"].iter().any(|s| {
            let p = index.join(OsStr::from_bytes(&[call, s].concat()));
            std::fs::symlink_metadata(p).is_ok()
        });
        if !live {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A pin's file, made once (`create_new`), removed again if its content
/// could not be written (so a sweep's retry can make it).
fn write_new_pin(path: &Path, head: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(head)
        .inspect_err(|_| drop(std::fs::remove_file(path)))
}

/// Take back what [`keep_approved`] kept for `private` (a commit compared
/// with it used it up). Anyone with git's group may: it only fails a
/// commit of its own call.
pub fn take_approved(socket: &Path, private: &OsStr) -> Result<(), String> {
    let env = vec![
        (TAKE_VAR.into(), "1".into()),
        (crate::index::PRIVATE_VAR.into(), private.to_owned()),
    ];
    send_ids(socket, Kind::Ledger, &[], env).map_err(|e| {
        e.unwrap_or_else(|| "the broker did not take back what commit-msg passed".into())
    })
}

/// `git commit`'s pre-commit step: ask the root process to keep `head`,
/// the commit its view pinned, as the call's pin (`<name>.pin` under
/// [`APPROVED_DIR`]). Kept once: a second request for the call, anyone's
/// with git's group, fails, and the commit with it.
pub fn keep_pin(socket: &Path, private: &OsStr, head: &[u8]) -> Result<(), String> {
    let env = vec![
        (PIN_VAR.into(), OsStr::from_bytes(head).to_owned()),
        (crate::index::PRIVATE_VAR.into(), private.to_owned()),
    ];
    send_ids(socket, Kind::Ledger, &[], env).map_err(|e| {
        e.unwrap_or_else(|| "the broker did not keep the commit pre-commit compares with".into())
    })
}

/// On a session's channel to the root process: a pin, as [`keep_pin`]
/// asks over a connection.
const KEEP_PIN: u32 = u32::MAX - 1;

/// [`keep_pin`] from the broker's own worker (broker.rs `pre_commit_view`),
/// over its session's channel, which no process git starts holds: one
/// connection and one spare fewer on a hooked commit's path. Outside a
/// session, [`keep_pin`]. Two halves: the request goes now and its
/// answer is read by [`PinAsked::answer`], so the view's files are made
/// while the root process wakes up and writes the pin (0.4 to 2 ms on a
/// loaded machine: bench/RESULTS.md).
pub fn ask_pin_from_worker(
    socket: &Path,
    private: &OsStr,
    head: &[u8],
) -> Result<PinAsked, String> {
    let Some(m) = MAKER.get() else {
        keep_pin(socket, private, head)?;
        return Ok(PinAsked(None));
    };
    let name = approval_name(private).ok_or("not a private index's name")?;
    if !send_to_root(m, KEEP_PIN, &[name.as_bytes(), head])? {
        return Err(NOT_PINNED.into());
    }
    Ok(PinAsked(Some(m)))
}

const NOT_PINNED: &str = "the broker did not keep the commit pre-commit compares with";

/// A pin asked of the root process, its answer still to read; read on
/// drop if unread, so the session's channel stays in step.
#[must_use]
pub struct PinAsked(Option<&'static UnixStream>);

impl PinAsked {
    /// Did the root process keep the pin?
    pub fn answer(mut self) -> Result<(), String> {
        match self.0.take() {
            None => Ok(()),
            Some(m) if root_said_yes(m) => Ok(()),
            Some(_) => Err(NOT_PINNED.into()),
        }
    }
}

impl Drop for PinAsked {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            let _ = root_said_yes(m);
        }
    }
}

/// The root process's side of [`ask_pin_from_worker`]: as a [`PIN_VAR`]
/// request's, kept once (`create_new`).
fn keep_pin_for(mut m: &UnixStream) -> bool {
    let (Some(name), Some(head)) = (read_part(m, 255), read_part(m, 64)) else {
        return false;
    };
    let kept = is_commit_id(&head)
        && APPROVED_AT
            .get()
            .zip(approval_name(OsStr::from_bytes(&name)))
            .is_some_and(|(dir, n)| {
                let mut n = n.to_owned();
                n.push(".pin");
                with_room(dir, || write_new_pin(&dir.join(&n), &head)).is_ok()
            });
    m.write_all(&[u8::from(kept)]).is_ok()
}

/// Where [`keep_pin`] keeps the pin for `private`.
pub fn pin_path(env: &[(OsString, OsString)], private: &OsStr) -> Option<PathBuf> {
    let mut p = approved_path(env, private)?.into_os_string();
    p.push(".pin");
    Some(PathBuf::from(p))
}

/// In a [`Kind::Ledger`] request: keep a pin ([`keep_pin`]).
const PIN_VAR: &str = "SBX_GUARD_PIN";

/// In a [`Kind::Ledger`] request: take back a kept approval ([`take_approved`]).
const TAKE_VAR: &str = "SBX_GUARD_TAKE_APPROVED";

/// Ask the broker to add `ids` (one a line) to the ledger. `private` is
/// the call's private index (`$SBX_GUARD_PRIVATE_INDEX`): the broker adds
/// only for a call that has a live one, so only for a call whose
/// pre-commit ran on the index git committed from.
pub fn add_to_ledger(socket: &Path, ids: &[u8], private: &OsStr) -> Result<(), String> {
    let env = vec![(crate::index::PRIVATE_VAR.into(), private.to_owned())];
    send_ids(socket, Kind::Ledger, ids, env)
        .map_err(|e| e.unwrap_or_else(|| "the broker did not add the commit to the ledger".into()))
}

/// A [`Kind::Record`] or [`Kind::Ledger`] request of `ids` (one a line).
/// Err(None): the broker answered with a failure status.
fn send_ids(
    socket: &Path,
    kind: Kind,
    ids: &[u8],
    env: Vec<(OsString, OsString)>,
) -> Result<(), Option<String>> {
    let args = ids
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| OsStr::from_bytes(l).to_owned())
        .collect();
    let req = Request {
        kind,
        umask: 0o022,
        args,
        env,
    };
    let stdio = stdio_fds().map_err(|e| Some(format!("stdio: {e}")))?;
    match call_with(socket, &req, stdio, None).map_err(Some)? {
        c if c == ExitCode::SUCCESS => Ok(()),
        _ => Err(None),
    }
}

/// The broker's side of [`Kind::Ledger`]: the request must name a private
/// index that exists right under `root` (the call is a commit whose
/// pre-commit ran there; the name is secret to git's processes of that
/// call), then the ids are appended like a record's.
fn append_ledger(req: &Request, root: &Path, ledger: &Path) -> Result<(), String> {
    let copy = req
        .env
        .iter()
        .find(|(k, _)| k == crate::index::PRIVATE_VAR)
        .map(|(_, v)| Path::new(v))
        .ok_or("no private index named; nothing was added to the ledger")?;
    let live =
        copy.parent() == Some(root) && std::fs::symlink_metadata(copy).is_ok_and(|m| m.is_file());
    if !live {
        return Err(
            "the call has no live private index (only a commit whose pre-commit ran on one is added); nothing was added to the ledger"
                .into(),
        );
    }
    append_record_to(ledger, &req.args, KEEP_LEDGER.get().map(PathBuf::as_path))
}

/// Ask the broker to append `ids` (one a line) to [`shared_record`].
pub fn record(socket: &Path, ids: &[u8]) -> Result<(), String> {
    send_ids(socket, Kind::Record, ids, Vec::new())
        .map_err(|e| e.unwrap_or_else(|| "the broker did not record the ids".into()))
}

/// The broker's side of [`Kind::Record`], as root: each id (40 or 64 hex
/// digits, else nothing is written) appended in one write to the kept
/// record first (`serve --keep`), when there is one, then to `path`; each
/// must be root's and writable by nobody else.
fn append_record(path: &Path, ids: &[OsString]) -> Result<(), String> {
    append_record_to(path, ids, KEEP.get().map(PathBuf::as_path))
}

fn append_record_to(path: &Path, ids: &[OsString], keep: Option<&Path>) -> Result<(), String> {
    if ids.is_empty() {
        return Err("nothing to record".into());
    }
    let mut buf = Vec::with_capacity(ids.len() * 41);
    for id in ids {
        let b = id.as_bytes();
        if !is_commit_id(b) {
            return Err(format!(
                "`{}` is not a commit id (40 or 64 hex digits); nothing was recorded",
                id.to_string_lossy()
            ));
        }
        buf.extend_from_slice(b);
        buf.push(b'\n');
    }
    if let Some(keep) = keep {
        append_to(keep, &buf)?;
    }
    append_to(path, &buf)
}

fn is_commit_id(b: &[u8]) -> bool {
    matches!(b.len(), 40 | 64) && b.iter().all(u8::is_ascii_hexdigit)
}

/// A record file, opened to append (and read), made 0644 if new: never
/// through a symlink, and only a regular file of ours nobody else may
/// write.
fn open_record(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(err)?;
    let m = f.metadata().map_err(err)?;
    if !m.is_file() || m.uid() != nix_uid() || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a regular file only its owner may write; nothing was recorded",
            path.display()
        ));
    }
    Ok(f)
}

fn append_to(path: &Path, buf: &[u8]) -> Result<(), String> {
    open_record(path)?
        .write_all(buf)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `serve --keep`: the record that outlives the container (a volume).
static KEEP: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The kept ledger: [`LEDGER_FILE`] beside `--keep`'s record.
static KEEP_LEDGER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// At start, with `--keep`: the kept record and the run's (`run`, beside
/// the socket) made each other's union, so stashes recorded before the
/// container was made again are still refused, and ones this run recorded
/// before a restart of the broker are kept. `keep`'s directory must be
/// root's (ours) and writable by nobody else: the agent must not be able
/// to swap or empty it.
fn join_records(keep: &Path, run: &Path) -> Result<(), String> {
    let dir = keep.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.ok_or_else(|| format!("{}: give a file in a directory", keep.display()))?;
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() || m.uid() != nix_uid() || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory only its owner (uid {}) may write",
            dir.display(),
            nix_uid()
        ));
    }
    let read = |path: &Path| -> Result<(std::fs::File, Vec<Vec<u8>>), String> {
        let mut f = open_record(path)?;
        let mut all = Vec::new();
        f.read_to_end(&mut all)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let ids = all
            .split(|b| *b == b'\n')
            .filter(|l| is_commit_id(l))
            .map(<[u8]>::to_vec)
            .collect();
        Ok((f, ids))
    };
    let (mut kf, kept) = read(keep)?;
    let (mut rf, ran) = read(run)?;
    let missing = |from: &[Vec<u8>], to: &[Vec<u8>]| -> Vec<u8> {
        let have: std::collections::HashSet<&[u8]> = to.iter().map(Vec::as_slice).collect();
        let mut seen = std::collections::HashSet::new();
        let mut buf = Vec::new();
        for id in from {
            if !have.contains(id.as_slice()) && seen.insert(id.as_slice()) {
                buf.extend_from_slice(id);
                buf.push(b'\n');
            }
        }
        buf
    };
    kf.write_all(&missing(&ran, &kept))
        .map_err(|e| format!("{}: {e}", keep.display()))?;
    rf.write_all(&missing(&kept, &ran))
        .map_err(|e| format!("{}: {e}", run.display()))?;
    Ok(())
}

fn call_with(
    socket: &Path,
    req: &Request,
    stdio: Vec<OwnedFd>,
    hooks: Option<BorrowedFd<'_>>,
) -> Result<ExitCode, String> {
    let cwd = privsep::open_cwd().map_err(|e| format!("the working directory: {e}"))?;
    // Blocked before connecting, so none arrives between send and poll.
    let sigfd = privsep::signalfd_for(RELAYED).map_err(|e| format!("signals: {e}"))?;
    let conn = connect(socket)?;
    let fds = [
        stdio[0].as_fd(),
        stdio[1].as_fd(),
        stdio[2].as_fd(),
        cwd.as_fd(),
    ];
    match hooks {
        None => proto::send_request(&conn, req, fds),
        Some(h) => proto::send_hook_request(&conn, req, [fds[0], fds[1], fds[2], fds[3], h]),
    }
    .map_err(|e| e.to_string())?;
    drop(stdio);
    drop(cwd);
    loop {
        let ready =
            privsep::poll_readable(&[conn.as_fd(), sigfd.as_fd()]).map_err(|e| e.to_string())?;
        if ready[1] {
            if let Ok(Some(info)) = sigfd.read_signal() {
                let _ = proto::send_signal(&conn, info.ssi_signo as i32);
            }
        }
        if ready[0] {
            return match proto::read_reply(&conn).map_err(|e| e.to_string())? {
                Some(Reply::Exited(c)) => Ok(ExitCode::from(c.clamp(0, 255) as u8)),
                Some(Reply::Signaled(s)) => Ok(ExitCode::from((128 + s).clamp(0, 255) as u8)),
                Some(Reply::Error(m)) => Err(m),
                None => Err("the broker hung up without an exit status".into()),
            };
        }
    }
}

/// Our stdin, stdout and stderr as fds to pass; a closed one is sent as
/// /dev/null (SCM_RIGHTS cannot carry "closed").
fn stdio_fds() -> std::io::Result<Vec<OwnedFd>> {
    (0..3)
        .map(|fd| {
            if privsep::is_open(fd) {
                dup_std(fd)
            } else {
                let f = std::fs::OpenOptions::new()
                    .read(fd == 0)
                    .write(fd != 0)
                    .open("/dev/null")?;
                Ok(OwnedFd::from(f))
            }
        })
        .collect()
}

fn dup_std(fd: i32) -> std::io::Result<OwnedFd> {
    match fd {
        0 => std::io::stdin().as_fd().try_clone_to_owned(),
        1 => std::io::stdout().as_fd().try_clone_to_owned(),
        _ => std::io::stderr().as_fd().try_clone_to_owned(),
    }
}

// ---------------------------------------------------------------- server

/// `sbx-git-guard serve`: check the layout, bind, and serve forever.
/// `group`: the gid git and its hooks run with (see [`git_creds`]).
pub fn serve(
    socket: &Path,
    git: &Path,
    group: &str,
    keep: Option<&Path>,
) -> Result<ExitCode, BrokerError> {
    let gid = resolve_group(group)?;
    // git and its hooks run as the agent under the agent's own seccomp
    // filters (only the socket families the firewall sees), as every
    // process sbx-guest starts for it does: a hook that runs a script the
    // agent edits would otherwise make a vsock socket (Docker 20.10's
    // profile lets it through) or an io_uring, which no rule sees.
    sbx_sys::agent_seccomp::register().map_err(BrokerError::Seccomp)?;
    let git_fd = open_git(git)?;
    // Commits with a pre-commit hook run on a private index there; without
    // it they are refused (`index::run_private`), other calls work.
    if let Err(e) = crate::index::make_root(socket.parent().unwrap_or(Path::new("/")), gid) {
        output::warn(&format!(
            "private indexes: {e}; commits with a pre-commit hook will fail"
        ));
    }
    let exec_path = crate::git_exec_path(&fd_path(git_fd.as_fd()));
    if std::fs::read_to_string("/proc/sys/fs/suid_dumpable").is_ok_and(|s| s.trim() == "1") {
        return Err(BrokerError::Dumpable);
    }
    let sock_err = |e| BrokerError::Socket(socket.to_owned(), e);
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(sock_err(e)),
        _ => {}
    }
    if let Some(keep) = keep {
        join_records(keep, &socket.with_file_name(RECORD_FILE))
            .map_err(|e| BrokerError::Keep(keep.to_owned(), e))?;
        let _ = KEEP.set(keep.to_owned());
        let kept_ledger = keep.with_file_name(LEDGER_FILE);
        join_records(&kept_ledger, &socket.with_file_name(LEDGER_FILE))
            .map_err(|e| BrokerError::Keep(kept_ledger.clone(), e))?;
        let _ = KEEP_LEDGER.set(kept_ledger);
    }
    let approved = socket.with_file_name(APPROVED_DIR);
    match std::fs::create_dir(&approved) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(sock_err(e)),
        _ => {}
    }
    let m = std::fs::symlink_metadata(&approved).map_err(sock_err)?;
    if !m.is_dir() || m.uid() != nix_uid() {
        return Err(sock_err(std::io::Error::other(format!(
            "{} is not a directory of ours",
            approved.display()
        ))));
    }
    std::fs::set_permissions(&approved, std::fs::Permissions::from_mode(0o755))
        .map_err(sock_err)?;
    let _ = APPROVED_AT.set(approved);
    let listener = UnixListener::bind(socket).map_err(sock_err)?;
    // Every local user may ask; the broker decides what each may do.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).map_err(sock_err)?;
    // Signals as a fresh process has them (a shell that started the broker
    // in the background left SIGINT and SIGQUIT ignored), once here: a
    // spare then resets the two the broker itself changes.
    privsep::reset_signals_but_pipe().map_err(sock_err)?;
    privsep::auto_reap_children().map_err(sock_err)?;
    // CPU feature detection (memchr asks on first use) runs CPUID, which
    // traps to the hypervisor in a VM (~12 µs a leaf measured here): done
    // once here, every spare inherits the answer instead of asking per call.
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx2");
    // Spares, made ahead so no fork is on a call's path: each is a session
    // and git's process-to-be, forked and blocked in accept(); it passes
    // the session a copy of the connection. A spare that takes one says so, and a
    // new one is forked while it serves (not when it ends: a hook's own git
    // calls nest, each holding its session).
    let (taken_rx, taken_tx) = UnixStream::pair().map_err(sock_err)?;
    let mut spares = 0usize;
    // One channel a session, on which its git's process (as the peer) asks
    // this root process for a directory of hook steps (`ask_for_set`).
    let mut makers: Vec<UnixStream> = Vec::new();
    let me = std::process::id();
    // A taken spare is replaced once its call no longer needs the CPU
    // (see REFILL_WAIT): by then, or at once when none is left.
    let mut refill: Option<std::time::Instant> = None;
    loop {
        if spares == 0 || refill.is_some_and(|t| std::time::Instant::now() >= t) {
            refill = None;
        }
        while spares < SPARES && refill.is_none() {
            let (mine, theirs) = match UnixStream::pair() {
                Ok(p) => p,
                Err(e) => {
                    output::warn(&format!("cannot make a session's channel: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            };
            match privsep::fork() {
                Ok(Forked::Child) => {
                    drop(taken_rx);
                    drop(mine);
                    makers.clear();
                    if !privsep::die_with_parent(me).unwrap_or(false) {
                        std::process::exit(0);
                    }
                    spare(
                        listener,
                        taken_tx,
                        theirs,
                        git_fd,
                        exec_path.as_deref(),
                        gid,
                    )
                }
                Ok(Forked::Parent(_)) => {
                    spares += 1;
                    makers.push(mine);
                }
                Err(e) => {
                    output::warn(&format!("cannot fork a session: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
        if spares == 0 {
            continue;
        }
        let mut watch = vec![taken_rx.as_fd()];
        watch.extend(makers.iter().map(|m| m.as_fd()));
        let wait = refill.map(|t| t.saturating_duration_since(std::time::Instant::now()));
        let ready = match privsep::poll_readable_for(&watch, wait) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                output::warn(&format!("session pipes: {e}"));
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        drop(watch);
        let mut i = 0;
        let before = makers.len();
        makers.retain(|m| {
            i += 1;
            !ready[i] || make_set_for(m)
        });
        // A runner's channel closes when it execs git or the hook (or
        // exits): its call's own work is done, a new spare is made now.
        let exec_seen = makers.len() < before;
        if exec_seen {
            refill = None;
        }
        if !ready[0] {
            continue;
        }
        let mut taken = [0u8; 64];
        match (&taken_rx).read(&mut taken) {
            Ok(n) => {
                spares = spares.saturating_sub(n);
                if refill.is_none() && n > 0 && !exec_seen {
                    refill = Some(std::time::Instant::now() + REFILL_WAIT);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                output::warn(&format!("session pipe: {e}"));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// One request on a session's channel: a hook set (4 bytes), answered 1
/// when its directory is made. False: the session is gone.
fn make_set_for(mut m: &UnixStream) -> bool {
    let mut set = [0u8; 4];
    if m.read_exact(&mut set).is_err() {
        return false;
    }
    if u32::from_le_bytes(set) == KEEP_APPROVED {
        return keep_approved_for(m);
    }
    if u32::from_le_bytes(set) == KEEP_PIN {
        return keep_pin_for(m);
    }
    let made = crate::hooks::make_set(u32::from_le_bytes(set));
    if let Err(e) = &made {
        output::warn(&format!("hook steps: {e}"));
    }
    m.write_all(&[u8::from(made.is_ok())]).is_ok()
}

/// This session's channel to the root process (set in its git's process).
static MAKER: std::sync::OnceLock<UnixStream> = std::sync::OnceLock::new();

/// Is this a broker's runner (git's process-to-be)?
pub fn in_session() -> bool {
    MAKER.get().is_some()
}

/// Ask the broker's root process to make the directory of hook set `set`:
/// whether it did; None outside a broker's session.
pub fn ask_for_set(set: u32) -> Option<bool> {
    let mut m = MAKER.get()?;
    let mut ok = [0u8];
    Some(m.write_all(&set.to_le_bytes()).is_ok() && m.read_exact(&mut ok).is_ok() && ok[0] == 1)
}

/// Sessions kept waiting in accept().
const SPARES: usize = 2;

/// How long a taken spare may wait to be replaced while its runner has
/// not yet exec'd (two forks beside a call's decision take a CPU from it
/// on a small machine). A call that finds none left waits for the fork;
/// a decision that takes longer (one that runs pre-commit first, whose
/// own git calls need spares) gets one within this.
const REFILL_WAIT: Duration = Duration::from_millis(2);

/// A spare session: fork git's process-to-be, which waits in accept() and
/// hands the connection back once it has read the request; then wait for
/// git and relay.
/// Never returns.
fn spare(
    listener: UnixListener,
    taken: UnixStream,
    maker: UnixStream,
    git: OwnedFd,
    exec_path: Option<&OsStr>,
    gid: u32,
) -> ! {
    let _ = privsep::reset_forked_signals();
    let fail = |what: &str, e: std::io::Error| -> ! {
        output::warn(&format!("session: {what}: {e}"));
        let _ = (&taken).write_all(&[1]);
        std::process::exit(1)
    };
    let (handoff, runner_end) = UnixStream::pair().unwrap_or_else(|e| fail("socketpair", e));
    let me = std::process::id();
    let child = match privsep::fork() {
        Ok(Forked::Child) => {
            drop(handoff);
            // An idle runner dies with its session (and so with the broker).
            if !privsep::die_with_parent(me).unwrap_or(false) {
                std::process::exit(0);
            }
            runner(listener, taken, runner_end, maker, git, exec_path, gid)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => fail("fork", e),
    };
    // The session never runs git, nor accepts: the runner does both, so a
    // call wakes one process to start.
    drop(runner_end);
    drop(maker);
    drop(git);
    drop(listener);
    drop(taken);
    // Both sides set the group, so a signal relayed at once finds it.
    let _ = privsep::set_process_group(child);
    // The runner passes the connection a little before it execs git (or
    // the hook); a session woken by that would take a CPU from it on the
    // call's path. It waits instead for the runner's end to close (at
    // exec, or its exit), or, for a decision taking longer, only so long
    // before taking the connection, so signals are relayed within it.
    let _ = privsep::wait_hangup(handoff.as_fd(), HANDOFF_WAIT);
    let mut b = [0u8; 1];
    let conn = match privsep::recv_with_fds(handoff.as_fd(), &mut b, 1) {
        Ok((1, mut fds)) if fds.len() == 1 => UnixStream::from(fds.remove(0)),
        // The runner ended before a connection came (it said why).
        _ => std::process::exit(0),
    };
    let code = match session_inner(&conn, &handoff, child, gid) {
        Ok(()) => 0,
        Err(msg) => {
            let _ = privsep::kill_group(child, libc_sig::SIGKILL);
            let _ = proto::send_reply(&conn, &Reply::Error(msg));
            1
        }
    };
    std::process::exit(code)
}

/// How long a session leaves its runner's connection waiting (see
/// `spare`): a signal the client relays meanwhile is passed on after it.
const HANDOFF_WAIT: Duration = Duration::from_millis(3);

/// git's process-to-be: accept a connection, read the request, become
/// the peer, pass the session a copy of the connection, decide, exec.
/// Never returns.
fn runner(
    listener: UnixListener,
    taken: UnixStream,
    to_session: UnixStream,
    maker: UnixStream,
    git: OwnedFd,
    exec_path: Option<&OsStr>,
    gid: u32,
) -> ! {
    let _ = MAKER.set(maker);
    crate::index::draw_name();
    let conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                output::warn(&format!("session: accept: {e}"));
                let _ = (&taken).write_all(&[1]);
                std::process::exit(1)
            }
        }
    };
    let _ = (&taken).write_all(&[1]);
    drop(taken);
    // Asked once (a system call on every call's path).
    let socket = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf));
    let record = socket.as_ref().map(|p| p.with_file_name(RECORD_FILE));
    let index_root = socket
        .as_ref()
        .map(|p| p.with_file_name(crate::index::ROOT_NAME));
    drop(listener);
    // The kernel's word, taken before anything the peer sends.
    let peer = match conn.peer() {
        Ok(p) => p,
        Err(e) => {
            let _ = proto::send_reply(&conn, &Reply::Error(format!("peer credentials: {e}")));
            std::process::exit(1)
        }
    };
    let (req, fds) = match read_request_timed(&conn) {
        Ok(r) => r,
        Err(msg) => {
            let _ = proto::send_reply(&conn, &Reply::Error(msg));
            std::process::exit(1)
        }
    };
    // Only git's own processes (a guard hook step) have the group: an
    // agent's process asking for a hook would get the group this way.
    if req.kind == Kind::Hook && (peer.uid == 0 || peer.gid != gid) {
        let _ = proto::send_reply(
            &conn,
            &Reply::Error("a hook is run only for git's own processes".into()),
        );
        std::process::exit(1)
    }
    // A record is appended here, as root (the agent, even with git's
    // group, can only add to it), and nothing runs.
    if req.kind == Kind::Record {
        let reply = if peer.uid == 0 || peer.gid != gid {
            Reply::Error("only git's own processes may add to the stash record".into())
        } else {
            match record.as_deref().map(|p| append_record(p, &req.args)) {
                Some(Ok(())) => Reply::Exited(0),
                Some(Err(msg)) => Reply::Error(msg),
                None => Reply::Error("the broker's socket has no path".into()),
            }
        };
        let _ = proto::send_reply(&conn, &reply);
        std::process::exit(0)
    }
    // The ledger likewise, and only for a call with a live private index.
    if req.kind == Kind::Ledger {
        let reply = if peer.uid == 0 || peer.gid != gid {
            Reply::Error("only git's own processes may add to the ledger".into())
        } else {
            let ledger = socket.as_ref().map(|p| p.with_file_name(LEDGER_FILE));
            let sent = req.env.iter().any(|(k, v)| k == SENT_VAR && v == "1");
            let take = req.env.iter().any(|(k, v)| k == TAKE_VAR && v == "1");
            let private = req
                .env
                .iter()
                .find(|(k, _)| k == crate::index::PRIVATE_VAR)
                .map(|(_, v)| v.as_os_str());
            let pin = req
                .env
                .iter()
                .find(|(k, _)| k == PIN_VAR)
                .map(|(_, v)| v.as_bytes());
            match (index_root.as_deref(), ledger) {
                (_, Some(l)) if pin.is_some() => {
                    let head = pin.unwrap_or_default();
                    let path = private.and_then(|p| {
                        let mut n = approval_name(p)?.to_owned();
                        n.push(".pin");
                        Some(l.with_file_name(APPROVED_DIR).join(n))
                    });
                    let ok = is_commit_id(head);
                    match path.filter(|_| ok) {
                        None => Reply::Error("not a private index's name and a commit id".into()),
                        Some(path) => match with_room(&l.with_file_name(APPROVED_DIR), || {
                            write_new_pin(&path, head)
                        }) {
                            Ok(()) => Reply::Exited(0),
                            Err(e) => Reply::Error(format!("{}: {e}", path.display())),
                        },
                    }
                }
                (_, Some(l)) if take => {
                    let kept = private
                        .and_then(|p| Some(l.with_file_name(APPROVED_DIR).join(approval_name(p)?)));
                    match kept.map(std::fs::remove_file) {
                        Some(Ok(())) => Reply::Exited(0),
                        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                            Reply::Exited(0)
                        }
                        Some(Err(e)) => Reply::Error(format!("what commit-msg passed: {e}")),
                        None => Reply::Error("not a private index's name".into()),
                    }
                }
                // A pre-push step's tips: no private index to show.
                (_, Some(l)) if sent => {
                    match append_record_to(&l.with_file_name(SENT_FILE), &req.args, None) {
                        Ok(()) => Reply::Exited(0),
                        Err(msg) => Reply::Error(msg),
                    }
                }
                (Some(root), Some(l)) => match append_ledger(&req, root, &l) {
                    Ok(()) => Reply::Exited(0),
                    Err(msg) => Reply::Error(msg),
                },
                _ => Reply::Error("the broker's socket has no path".into()),
            }
        };
        let _ = proto::send_reply(&conn, &reply);
        std::process::exit(0)
    }
    // The session gets the connection only now: the request has been read
    // (what follows on it are signal frames) and this process is the peer
    // (so a signal it relays at once reaches it). It wakes once before git
    // ends, not twice.
    let prepared = prepare(&req, &fds, &peer, gid);
    if privsep::send_with_fds(to_session.as_fd(), b"c", &[conn.as_fd()]).is_err() {
        let _ = proto::send_reply(&conn, &Reply::Error("the session is gone".into()));
        std::process::exit(1)
    }
    drop(conn);
    // git's own processes have its group; the agent's never do.
    let by_git = peer.uid != 0 && peer.gid == gid;
    run_as_peer(
        &req,
        fds,
        prepared,
        git.as_fd(),
        exec_path,
        socket.as_deref(),
        index_root.as_deref(),
        &to_session,
        by_git,
    )
}

/// The group git runs with: a name from /etc/group, or a number.
fn resolve_group(group: &str) -> Result<u32, BrokerError> {
    if let Ok(n) = group.parse::<u32>() {
        return Ok(n);
    }
    group_gid(group).ok_or_else(|| BrokerError::Group(group.to_owned()))
}

/// `name`'s gid in /etc/group, read as the file it is: the guard is
/// linked statically, and glibc's getgrnam would load NSS modules into a
/// static program (it crashed there).
pub fn group_gid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    gid_in(&text, name)
}

fn gid_in(group_file: &str, name: &str) -> Option<u32> {
    group_file.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// git, its hooks and everything they start run as the peer's uid but
/// with real, effective and saved gid `group`, which the agent's own
/// processes lack: the kernel lets a process ptrace another (and open its
/// /proc/PID/mem) only when uid AND gid triples match, and exec keeps the
/// gid, so no hook becomes the agent's to trace. The peer's own gid stays
/// a supplementary group (its files stay reachable); files git creates are
/// the peer's, with group `group`. Root (the image build) keeps its own.
pub(crate) fn git_creds(peer: &PeerCred, group: u32) -> (u32, Vec<u32>) {
    if peer.uid == 0 {
        return (peer.gid, peer.groups.clone());
    }
    let mut groups: Vec<u32> = peer
        .groups
        .iter()
        .copied()
        .filter(|g| *g != group)
        .collect();
    if peer.gid != group && !groups.contains(&peer.gid) {
        groups.push(peer.gid);
    }
    (group, groups)
}

/// Open the real git by fd, and refuse a layout that leaves it exposed.
fn open_git(git: &Path) -> Result<OwnedFd, BrokerError> {
    let err = |e| BrokerError::Git(git.to_owned(), e);
    let fd = privsep::open_path(git).map_err(err)?;
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(err)?;
    if !meta.is_file() {
        return Err(BrokerError::Exposed(
            git.to_owned(),
            "not a regular file".into(),
        ));
    }
    if meta.mode() & 0o044 != 0 {
        return Err(BrokerError::Exposed(
            git.to_owned(),
            format!("readable (mode {:o})", meta.mode() & 0o7777),
        ));
    }
    let dir = git.parent().unwrap_or(Path::new("/"));
    let dmeta = std::fs::metadata(dir).map_err(err)?;
    if dmeta.mode() & 0o055 != 0 || dmeta.uid() != 0 && nix_uid() == 0 {
        return Err(BrokerError::Exposed(
            git.to_owned(),
            format!(
                "in {} (mode {:o}, owner {})",
                dir.display(),
                dmeta.mode() & 0o7777,
                dmeta.uid()
            ),
        ));
    }
    Ok(fd)
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// The session, once its runner has read the request and passed it the
/// connection: become the peer, relay signals until git ends, put a
/// private index back (the runner's order on `handoff`), report how.
fn session_inner(
    conn: &UnixStream,
    handoff: &UnixStream,
    child: privsep::Pid,
    gid: u32,
) -> Result<(), String> {
    let peer = conn.peer().map_err(|e| format!("peer credentials: {e}"))?;
    // It lets go of root and becomes the peer too, so it may signal git's
    // group without CAP_KILL (the container has none) and holds nothing more;
    // with git's group, so it can reach a private index (`index::put_back`).
    // Like git, it is not the agent's to trace: never dumpable, no exec.
    let (g, groups) = git_creds(&peer, gid);
    privsep::drop_to(peer.uid, g, &groups).map_err(|e| format!("credentials: {e}"))?;
    let pidfd = privsep::pidfd_open(child).map_err(|e| format!("pidfd: {e}"))?;
    // The runner has read the request before handing the connection over:
    // what arrives now are signal frames.
    let mut client_gone = false;
    loop {
        let watch: Vec<BorrowedFd<'_>> = if client_gone {
            vec![pidfd.as_fd()]
        } else {
            vec![pidfd.as_fd(), conn.poll_fd()]
        };
        let ready = privsep::poll_readable(&watch).map_err(|e| format!("poll: {e}"))?;
        if ready[0] {
            break;
        }
        match proto::read_signal(conn) {
            Ok(Some(sig)) if RELAYED.contains(&sig) => {
                let _ = privsep::kill_group(child, sig);
            }
            // Unknown signals are ignored; a broken or closed connection
            // means the guard died (kill -9): git dies with it, as it
            // would have had the guard exec'd it.
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                client_gone = true;
                let _ = privsep::kill_group(child, libc_sig::SIGKILL);
            }
        }
    }
    let reply = match privsep::wait(child).map_err(|e| format!("wait: {e}"))? {
        Status::Exited(c) => Reply::Exited(c),
        Status::Signaled(s) => Reply::Signaled(s),
    };
    // git (and the runner it was) has ended: the runner's end of `handoff`
    // is closed, so this reads its order, if it gave one, or end of file.
    let leftovers = crate::index::put_back_from(handoff);
    let _ = proto::send_reply(conn, &reply);
    leftovers.remove();
    Ok(())
}

fn read_request_timed<T: Transport>(conn: &T) -> Result<(Request, Vec<OwnedFd>), String> {
    // A client that connects and says nothing ties up only its own
    // session, and only for so long.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let r = proto::read_request(conn).map_err(|e: ProtoError| e.to_string());
    let _ = conn.set_read_timeout(None);
    r
}

/// The forked child: become the peer, settle stdio and cwd, decide, exec.
/// Never returns.
#[allow(clippy::too_many_arguments)]
fn run_as_peer(
    req: &Request,
    fds: Vec<OwnedFd>,
    prepared: Result<(), String>,
    git: BorrowedFd<'_>,
    exec_path: Option<&OsStr>,
    socket: Option<&Path>,
    index_root: Option<&Path>,
    session: &UnixStream,
    by_git: bool,
) -> ! {
    let code = match prepared {
        Ok(()) if req.kind == Kind::Hook => exec_hook(req, fds, socket, session),
        Ok(()) => {
            drop(fds);
            decide_and_exec(req, git, exec_path, index_root, session, by_git)
        }
        Err(msg) => {
            // Stdio may not be set up yet: write to the caller's stderr fd.
            if let Some(f) = fds.get(2).and_then(|f| f.try_clone().ok()) {
                let _ = writeln!(
                    std::fs::File::from(f),
                    "{}: error: git broker: {msg}",
                    crate::TOOL
                );
            }
            Exit::WrapperFailed.code()
        }
    };
    std::process::exit(i32::from(code))
}

fn prepare(req: &Request, fds: &[OwnedFd], peer: &PeerCred, gid: u32) -> Result<(), String> {
    // Signals were reset when the spare was made (`reset_forked_signals`).
    privsep::new_process_group().map_err(|e| format!("process group: {e}"))?;
    let (gid, groups) = git_creds(peer, gid);
    privsep::drop_to(peer.uid, gid, &groups).map_err(|e| format!("credentials: {e}"))?;
    // Each call its own Landlock domain: a process an earlier call left
    // running with the group (a pager's or editor's daemon) cannot trace
    // this call's hooks either. A kernel without Landlock keeps the group.
    if peer.uid != 0 {
        privsep::own_landlock_domain().map_err(|e| format!("landlock: {e}"))?;
        sbx_sys::seccomp::install_agent().map_err(|e| format!("seccomp: {e}"))?;
    }
    privsep::set_umask(req.umask);
    // As the peer: a cwd it cannot enter fails here, as it would for it.
    privsep::fchdir(fds[3].as_fd()).map_err(|e| format!("working directory: {e}"))?;
    privsep::set_stdio(fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd())
        .map_err(|e| format!("stdio: {e}"))?;
    Ok(())
}

/// A hook request, here as the peer in a fresh Landlock domain: the hook
/// by its path under the directory fd passed (kept open across exec), so
/// `$0` is a path under `/proc/self/fd/N/` as when git runs it pinned, and
/// a script's interpreter can open it. Returns only on failure.
fn exec_hook(
    req: &Request,
    mut fds: Vec<OwnedFd>,
    socket: Option<&Path>,
    session: &UnixStream,
) -> u8 {
    output::set_tool_if_unset(crate::TOOL);
    let name = req.args.first().and_then(|n| n.to_str()).unwrap_or("");
    if !crate::hooks::is_hook_name(name) {
        output::error(&format!("git broker: `{name}` is not a hook name"));
        return Exit::Denied.code();
    }
    let Some(dir) = fds.pop() else {
        return Exit::WrapperFailed.code();
    };
    drop(fds);
    let on_view;
    let req = match pre_commit_view(req, socket, session, dir.as_fd()) {
        Ok(None) => req,
        Ok(Some(r)) => {
            on_view = r;
            &on_view
        }
        Err(code) => return code,
    };
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    if let Err(e) = fcntl(&dir, FcntlArg::F_SETFD(FdFlag::empty())) {
        output::error(&format!("git broker: the hooks directory: {e}"));
        return Exit::WrapperFailed.code();
    }
    if let Some(why) = crate::index::partial_commit(name, &req.env) {
        let b = Block {
            rule: crate::rules::R::UnverifiedCommit.name(),
            reason: format!("{why}; the hook was not run"),
        };
        record_for_caller(req, &b);
        output::error(&format!("git broker: {}", b.message()));
        return Exit::Denied.code();
    }
    if let Some(why) = husky_off_switch(&req.env, dir.as_fd()) {
        output::error(&format!("git broker: {name}: {why}; the hook was not run"));
        return Exit::Denied.code();
    }
    let path = hook_path(&req.env, dir.as_fd(), name);
    // Under a private index: commit-msg on a private copy of the message,
    // which the commit's `prepared` step compares with git's (msg.rs).
    if let (true, Some(msg_dir), Some(msg)) = (
        name == "commit-msg",
        crate::msg::private_dir(&req.env),
        req.args.get(1),
    ) {
        // What passes here is kept as the call's approval: only the
        // workspace's own hooks may pass it. A request names its hooks
        // directory by the fd it sends, and anything with git's group
        // may send one (a program git started, with an `exit 0` of its
        // own as commit-msg: a46g).
        if !on_workspace_read_only_mount(dir.as_fd()) {
            output::error(&format!(
                "git broker: {name}: not the workspace's read-only hooks; the hook was not run"
            ));
            return Exit::Denied.code();
        }
        let dir = msg_dir;
        let env = hook_env(req);
        return crate::msg::run_on_copy(&path, path.as_os_str(), msg, &env, &dir).unwrap_or_else(
            |e| {
                output::error(&format!("git broker: commit-msg: {e}; refusing"));
                Exit::Denied.code()
            },
        );
    }
    let mut argv = vec![path.clone().into_os_string()];
    argv.extend(req.args[1..].iter().cloned());
    let env = hook_env(req);
    let err = sbx_sys::exec(&path, &argv, &env);
    output::error(&format!("cannot run the hook {name}: {err}"));
    Exit::CannotInvoke.code()
}

/// `git commit`'s pre-commit, asked by sbx-git-client: the view
/// `ledger::pre_commit_on_view` makes in a guard the step starts, made
/// here as the peer instead, so no process starts for it; the session
/// removes it once the hook has ended (`index::VIEW_ORDER`). Ok(None):
/// not such a request, or its view made already. Where the snapshot is
/// git's to give, the step's guard runs here (exec), as it ran before.
fn pre_commit_view(
    req: &Request,
    socket: Option<&Path>,
    session: &UnixStream,
    dir: BorrowedFd<'_>,
) -> Result<Option<Request>, u8> {
    let var = |k: &str| req.env.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let committing = var(crate::hooks::COMMIT_ENV).is_some_and(|v| v == "1");
    if req.args.first().is_none_or(|n| n != "pre-commit")
        || !committing
        || var(crate::ledger::VIEW_MADE_ENV).is_some()
        || crate::msg::private_dir(&req.env).is_none()
    {
        return Ok(None);
    }
    let refuse = |e: &str| {
        output::error(&format!("pre-commit: {e}; refusing"));
        Err(Exit::Denied.code())
    };
    let Some(sock) = socket else {
        return refuse("the broker's socket has no path");
    };
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return refuse(&format!("the working directory: {e}")),
    };
    let base = crate::ledger::view_base(sock);
    match crate::ledger::view_for_pre_commit(sock, &base, &cwd, &req.env) {
        Ok(Some((view, env))) => {
            let mut order = vec![crate::index::VIEW_ORDER];
            order.extend_from_slice(view.as_os_str().as_bytes());
            if (&*session).write_all(&order).is_err() {
                let _ = std::fs::remove_dir_all(&view);
                return refuse("the session is gone");
            }
            Ok(Some(Request {
                kind: req.kind,
                umask: req.umask,
                args: req.args.clone(),
                env,
            }))
        }
        Ok(None) => {
            // The step's guard, with git's hook arguments and environment,
            // but the hooks directory this request sent: git's may be its
            // own `/proc/self/fd/N`, which names nothing (or another file)
            // here, and a guard's step that finds no hook passes.
            use nix::fcntl::{FcntlArg, FdFlag, fcntl};
            if let Err(e) = fcntl(dir, FcntlArg::F_SETFD(FdFlag::empty())) {
                return refuse(&format!("the hooks directory: {e}"));
            }
            let trusted = format!("/proc/self/fd/{}", dir.as_raw_fd());
            let mut env: Vec<(OsString, OsString)> = req
                .env
                .iter()
                .filter(|(k, _)| k != crate::hooks::TRUSTED_ENV)
                .cloned()
                .collect();
            env.push((crate::hooks::TRUSTED_ENV.into(), trusted.into()));
            let mut argv = vec![OsString::from("pre-commit")];
            argv.extend(req.args[1..].iter().cloned());
            let err = sbx_sys::exec(Path::new("/proc/self/exe"), &argv, &env);
            refuse(&format!("cannot start the guard's step: {err}"))
        }
        Err(e) => refuse(&e),
    }
}

/// Is `dir` on a read-only mount under `/workspace/` (the hooks, or
/// husky's directory, sbx-run mounted; the agent can make no mount)?
/// Outside a sandbox there is no such mount to ask for: yes.
fn on_workspace_read_only_mount(dir: BorrowedFd<'_>) -> bool {
    if crate::repo::sandbox_mounts().is_none() {
        return true;
    }
    let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", dir.as_raw_fd())) else {
        return false;
    };
    let Some(id) = info
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .map(|v| v.trim().as_bytes().to_vec())
    else {
        return false;
    };
    let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    mountinfo.split(|b| *b == b'\n').any(|line| {
        let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        matches!(f[..], [mid, _, _, _, mp, opts, ..]
            if mid == id.as_slice()
                && mp.starts_with(b"/workspace/")
                && opts.split(|b| *b == b',').any(|o| o == b"ro"))
    })
}

/// The hook's environment: an allowlist over git's, with a home the agent
/// does not own ([`crate::hookenv::allowlisted`]). The agent's own home
/// (for the caches hook frameworks write) is the password file's for this
/// uid, not the `HOME` the agent passed.
fn hook_env(req: &Request) -> Vec<(OsString, OsString)> {
    let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
    let home = passwd_home(&passwd, nix::unistd::getuid().as_raw());
    crate::hookenv::allowlisted(loader_free(req.env.clone()), home.as_deref())
}

/// `uid`'s home in a password file (`name:pw:uid:gid:gecos:home:shell`);
/// read directly, not through NSS (the guard is a static binary).
fn passwd_home(passwd: &[u8], uid: u32) -> Option<PathBuf> {
    passwd.split(|b| *b == b'\n').find_map(|line| {
        let f: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        let [_, _, u, _, _, home, _] = f[..] else {
            return None;
        };
        (u == uid.to_string().as_bytes() && home.starts_with(b"/"))
            .then(|| PathBuf::from(OsStr::from_bytes(home)))
    })
}

/// Audit a block under the caller's agent name (its first value, as git's
/// getenv reads it).
fn record_for_caller(req: &Request, b: &Block) {
    let agent = req
        .env
        .iter()
        .find(|(k, _)| k == "SBX_AGENT")
        .map(|(_, v)| v.to_string_lossy().into_owned());
    crate::record_block_for(&req.args, b, Some(agent.as_deref().unwrap_or("unknown")));
}

/// In a husky hooks directory (`h`: husky 9's `.husky/_`; `husky.sh`:
/// husky 4's `.git/hooks`; `_/husky.sh`: husky 5-8's `.husky`), husky's
/// own off switches, checked here (as the hook's uid, in its directory, with
/// its environment) just before it starts: the guard's look came before git
/// ran, and git's own stderr or trace output can fill an empty `init.sh`
/// since. A hook that cannot run this way fails.
fn husky_off_switch(env: &[(OsString, OsString)], dir: BorrowedFd<'_>) -> Option<String> {
    let d = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let husky = ["h", "husky.sh", "_/husky.sh"]
        .iter()
        .any(|f| Path::new(&d).join(f).is_file());
    if !husky {
        return None;
    }
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    crate::policy::husky_off_switch(&var)
}

/// The path a hook runs by. Scripts find their siblings from `$0`, which
/// is this path: husky 9's `.husky/_/pre-commit` sources `$(dirname "$0")/h`,
/// which runs `$(dirname "$(dirname "$0")")/pre-commit` and exits 0 when
/// that is missing, so `/proc/self/fd/N/pre-commit` made every husky hook
/// pass unrun. So where the step's trusted directory is a real path (husky's,
/// a read-only mount point that cannot be renamed) naming the same file as
/// the fd's entry, that path, as git itself would run it; else (the hooks
/// pinned as `/proc/self/fd/N`, which is also git's `$0` for them) the fd's.
fn hook_path(env: &[(OsString, OsString)], dir: BorrowedFd<'_>, name: &str) -> PathBuf {
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()));
    let trusted = env
        .iter()
        .find(|(k, _)| k == crate::hooks::TRUSTED_ENV)
        .map(|(_, v)| Path::new(v))
        .filter(|t| t.is_absolute() && !t.starts_with("/proc"));
    let Some(by_path) = trusted.map(|t| t.join(name)) else {
        return by_fd;
    };
    match (std::fs::metadata(&by_path), std::fs::metadata(&by_fd)) {
        (Ok(a), Ok(b)) if (a.dev(), a.ino()) == (b.dev(), b.ino()) => by_path,
        _ => by_fd,
    }
}

/// The guard's own decision, made here as the peer, then git by fd.
fn decide_and_exec(
    req: &Request,
    git: BorrowedFd<'_>,
    exec_path: Option<&OsStr>,
    index_root: Option<&Path>,
    session: &UnixStream,
    by_git: bool,
) -> u8 {
    output::set_tool_if_unset(crate::TOOL);
    let decided = std::panic::catch_unwind(|| decide(req, git, exec_path)).unwrap_or_else(|_| {
        Err(Block {
            rule: "internal",
            reason: "the guard crashed; nothing was run".into(),
        })
    });
    let allow = match decided {
        Ok(a) => a,
        Err(b) => {
            record_for_caller(req, &b);
            output::error(&b.message());
            return Exit::Denied.code();
        }
    };
    if allow.records_stash {
        return crate::run_recording_stash(&fd_path(git), &allow);
    }
    if allow.filters_helper || allow.filters_send_pack {
        return crate::run_filtering_helper(&fd_path(git), &allow, by_git);
    }
    if crate::index::needed(&allow) {
        let Some(root) = index_root else {
            output::error("the broker's socket has no path for private indexes; nothing was run");
            return Exit::WrapperFailed.code();
        };
        return crate::index::run_private(git, &allow, root, session);
    }
    let mut argv = vec![OsString::from("git")];
    argv.extend(allow.args);
    let err = privsep::execveat_fd(git, &argv, &allow.env);
    output::error(&format!("cannot run the real git: {err}"));
    if err.kind() == std::io::ErrorKind::NotFound {
        Exit::NotFound.code()
    } else {
        Exit::CannotInvoke.code()
    }
}

/// Variables that make the dynamic loader or glibc load code into the
/// process (glibc's own list for secure-exec, UNSECURE_ENVVARS): code of
/// the agent's inside git could read the binary through /proc/self/exe.
/// git and its hooks run without them.
const LOADER_VARS: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
];

pub(crate) fn loader_free(env: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
    env.into_iter()
        .filter(|(k, _)| {
            let k = k.as_encoded_bytes();
            !k.starts_with(b"LD_") && !LOADER_VARS.iter().any(|v| v.as_bytes() == k)
        })
        .collect()
}

/// The real git as a path this process (and its children, until exec) can run.
fn fd_path(git: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", git.as_raw_fd()))
}

fn decide(req: &Request, git: BorrowedFd<'_>, exec_path: Option<&OsStr>) -> Result<Allow, Block> {
    let internal = |reason: String| Block {
        rule: "internal",
        reason,
    };
    match req.kind {
        Kind::PassThrough => {
            let cmd = req.args.first().and_then(|c| c.to_str()).unwrap_or("");
            if !crate::PASS_THROUGH.contains(&cmd) {
                return Err(Block {
                    rule: "parse-error",
                    reason: format!("`{cmd}` is not a pass-through helper"),
                });
            }
            // A fetch's pinned per-user configuration (lib.rs
            // `pin_global_config`) is not this process's fd.
            let env = crate::without_pinned_global(&req.env);
            crate::policy::check_pass_through_env(&env, exec_path)?;
            let mut allow = Allow {
                args: req.args.clone(),
                env: loader_free(crate::hookenv::pass_through(
                    crate::hookenv::clean(&env),
                    crate::in_sandbox(),
                )),
                command: cmd.into(),
                pin: None,
                moves_refs: false,
                precommit_first: false,
                records_stash: false,
                filters_helper: false,
                filters_send_pack: false,
                repo: None,
                routable: false,
                builds_tree: false,
            };
            if cmd == "receive-pack" && crate::in_sandbox() {
                crate::route_receive_pack(&mut allow)?;
            }
            Ok(allow)
        }
        Kind::Git => {
            let settings = crate::settings_for(None).map_err(|e| Block {
                rule: "config-unreadable",
                reason: sbx_core::entry::chain(e.as_ref()),
            })?;
            let cwd = std::env::current_dir()
                .map_err(|e| internal(format!("cannot read the working directory: {e}")))?;
            // The same decision and setup as the direct path; the guard's
            // own git calls run the same binary by fd.
            let mut allow = crate::decide_and_prepare(
                &req.args,
                &req.env,
                &cwd,
                settings,
                &fd_path(git),
                || exec_path.map(OsStr::to_owned),
                crate::in_sandbox(),
                None,
            )?;
            route_repo_hooks(&mut allow, crate::in_sandbox())?;
            Ok(allow)
        }
        Kind::Hook | Kind::Record | Kind::Ledger => Err(internal(
            "a hook or record request reached the git path".into(),
        )),
    }
}

/// Where the repository has hooks, git runs them through the guard's
/// hook steps, which ask this broker to start each beside git's Landlock
/// domain (see [`run_hook`]). Calls the steps already judge are routed.
fn route_repo_hooks(allow: &mut Allow, sandboxed: bool) -> Result<(), Block> {
    let Some((i, trusted)) = allow.pin.clone() else {
        return Ok(());
    };
    let mut pinned = OsString::from("core.hooksPath=");
    pinned.push(&trusted);
    if allow.args.get(i) != Some(&pinned) {
        return Ok(());
    }
    let set = crate::hooks::needed(&trusted, false);
    if set == 0 {
        return Ok(());
    }
    match crate::hooks::routed_dir(sandboxed, set) {
        Some(d) => {
            allow.route_hooks_only(&d);
            Ok(())
        }
        None if sandboxed => Err(Block {
            rule: "internal",
            reason: format!(
                "the guard's hooks directory {} is missing or stale; nothing was run",
                crate::hooks::IMAGE_DIR
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
