//! The sandbox's `git`: hands the call to sbx-git-guard's broker, which
//! decides and runs the real git, and exits with git's status. Nothing
//! else: no libc, no allocator, no decision of its own, so a call pays one
//! small process start (glibc's start-up alone is ~0.3 ms on a VM, where
//! its CPUID instructions trap). Whatever it does not handle (no broker,
//! a broker it cannot reach, an argv[0] that is not git or git-<cmd>) it
//! hands to the full guard beside it, by exec with the same argv and
//! environment, before anything was sent: behaviour never differs.
//!
//! The request is the bytes sbx-git-guard's broker/proto.rs encodes;
//! tools/sbx-git-guard/tests/client.rs checks the two byte for byte.
#![no_std]
#![no_main]

mod commit;
mod sys;

use core::fmt::Write as _;
use sys::{Errno, Fd, Proc};

/// Messages are the guard's own, word for word.
const TOOL: &str = "sbx-git-guard";
const GUARD: &[u8] = b"sbx-git-guard";
const DEFAULT_SOCKET: &[u8] = b"/run/sbx-git/broker.sock";
const DEFAULT_SOCKET_Z: &[u8] = b"/run/sbx-git/broker.sock\0";
const SOCKET_VAR: &[u8] = b"SBX_GIT_BROKER";
const REAL_GIT_VAR: &[u8] = b"SBX_REAL_GIT";
/// sbx_core's SANDBOX_DIR and SANDBOX_MARKER (the same path).
const SANDBOX_DIR: &[u8] = b"/.agent-sandbox\0";
const PASS_THROUGH: [&[u8]; 3] = [b"receive-pack", b"upload-pack", b"upload-archive"];
/// broker::RELAYED: HUP INT QUIT TERM USR1 USR2 WINCH.
const RELAYED: [u32; 7] = [1, 2, 3, 15, 10, 12, 28];
const MAGIC: &[u8; 4] = b"SBXG";
const VERSION: u8 = 1;
const KIND_GIT: u8 = 0;
const KIND_PASS_THROUGH: u8 = 1;
const KIND_HOOK: u8 = 2;
const MAX_SMALL: usize = 4096;
/// sbx_core::Exit::WrapperFailed.
const WRAPPER_FAILED: i32 = 125;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sys::exit(WRAPPER_FAILED)
}

enum Kind<'a> {
    Git,
    Dashed(&'a [u8]),
    PassThrough(&'a [u8]),
    /// A repository hook, by name, for the broker to start (hooks.rs
    /// `via_broker`).
    Hook(&'a [u8]),
}

/// sbx-git-guard's `mode(argv[0])`, for the cases that forward; None for
/// the rest (hooks, the tool's own CLI, anything unusual), which the guard
/// itself handles.
fn kind(argv0: &'static [u8]) -> Option<Kind<'static>> {
    if argv0.is_empty() || argv0.ends_with(b"/") {
        return None;
    }
    let base = match argv0.iter().rposition(|&b| b == b'/') {
        Some(i) => &argv0[i + 1..],
        None => argv0,
    };
    core::str::from_utf8(base).ok()?;
    if base == b"git" {
        return Some(Kind::Git);
    }
    let cmd = base.strip_prefix(b"git-")?;
    Some(if PASS_THROUGH.contains(&cmd) {
        Kind::PassThrough(cmd)
    } else {
        Kind::Dashed(cmd)
    })
}

/// One environment entry split as Rust's std splits it (the guard reads
/// its environment with `vars_os`): the name may start with '=', an entry
/// without '=' after the first byte is skipped.
fn split_env(e: &[u8]) -> Option<(&[u8], &[u8])> {
    let p = e.get(1..)?.iter().position(|&b| b == b'=')? + 1;
    Some((&e[..p], &e[p + 1..]))
}

fn env(p: &Proc) -> impl Iterator<Item = (&'static [u8], &'static [u8])> {
    p.env().filter_map(split_env)
}

/// broker::socket_path: `$SBX_GIT_BROKER` outside the sandbox, the image's
/// socket inside (as the agent), or when it exists. None: no broker.
fn socket_path(p: &Proc) -> Option<&'static [u8]> {
    let sandboxed = sys::file_type(SANDBOX_DIR, false) == Ok(sys::S_IFDIR);
    if !sandboxed {
        let var = env(p).find(|(k, _)| *k == SOCKET_VAR).map(|(_, v)| v);
        if let Some(v) = var.filter(|v| !v.is_empty()) {
            return Some(v);
        }
    }
    if (sandboxed && sys::geteuid() != 0) || sys::file_type(DEFAULT_SOCKET_Z, true).is_ok() {
        Some(DEFAULT_SOCKET)
    } else {
        None
    }
}

/// The request frame, exactly as proto.rs's `Request::encode` writes it.
struct Frame {
    buf: &'static mut [u8],
    at: usize,
}

impl Frame {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u32(&mut self, n: u32) {
        self.put(&n.to_le_bytes());
    }
    fn string(&mut self, s: &[u8]) {
        self.u32(s.len() as u32);
        self.put(s);
    }
}

fn encode(p: &Proc, kind: &Kind<'static>, umask: u32) -> Option<&'static [u8]> {
    let (k, first) = match kind {
        Kind::Git => (KIND_GIT, None),
        Kind::Dashed(c) => (KIND_GIT, Some(*c)),
        Kind::PassThrough(c) => (KIND_PASS_THROUGH, Some(*c)),
        Kind::Hook(n) => (KIND_HOOK, Some(*n)),
    };
    let args = || first.into_iter().chain(p.args().skip(1));
    let nargs = args().count();
    let nenv = env(p).count();
    let len = 4
        + 4
        + 1
        + 1
        + 4
        + 4
        + args().map(|a| 4 + a.len()).sum::<usize>()
        + 4
        + env(p).map(|(k, v)| 8 + k.len() + v.len()).sum::<usize>();
    let body = u32::try_from(len - 4).ok()?;
    let mut f = Frame {
        buf: sys::alloc(len).ok()?,
        at: 0,
    };
    debug_assert!(f.buf.len() == len);
    f.u32(body);
    f.put(MAGIC);
    f.put(&[VERSION, k]);
    f.u32(umask);
    f.u32(nargs as u32);
    for a in args() {
        f.string(a);
    }
    f.u32(nenv as u32);
    for (k, v) in env(p) {
        f.string(k);
        f.string(v);
    }
    Some(f.buf)
}

/// The full guard's path: beside this program, NUL-terminated in `buf`.
fn guard_path(buf: &mut [u8; 4096 + 32]) -> &[u8] {
    let n = sys::readlink(b"/proc/self/exe\0", &mut buf[..4096]).unwrap_or(0);
    let dir = buf[..n]
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    buf[dir..dir + GUARD.len()].copy_from_slice(GUARD);
    buf[dir + GUARD.len()] = 0;
    &buf[..dir + GUARD.len() + 1]
}

/// The guard, exec'd with this process's argv and environment.
fn fallback(p: &Proc) -> i32 {
    let mut path = [0u8; 4096 + 32];
    let guard = guard_path(&mut path);
    let e = p.exec(guard);
    let mut m = Msg::new();
    let _ = write!(
        m,
        "sbx-git-client: error: cannot run the git guard {} (installed beside this program): ",
        Lossy(&guard[..guard.len() - 1])
    );
    let _ = write!(m, "{}", OsError(e));
    m.emit();
    if e == sys::ENOENT { 127 } else { 126 }
}

/// hooks.rs's HOOK_NAMES (tests/client.rs runs the client as each).
const HOOK_NAMES: [&[u8]; 21] = [
    b"applypatch-msg",
    b"pre-applypatch",
    b"post-applypatch",
    b"pre-commit",
    b"pre-merge-commit",
    b"prepare-commit-msg",
    b"commit-msg",
    b"post-commit",
    b"pre-rebase",
    b"post-checkout",
    b"post-merge",
    b"pre-push",
    b"pre-receive",
    b"update",
    b"post-receive",
    b"post-update",
    b"reference-transaction",
    b"pre-auto-gc",
    b"post-rewrite",
    b"sendemail-validate",
    b"post-index-change",
];
/// hooks.rs's TRUSTED_ENV and HOOKS_ONLY_ENV.
const TRUSTED_VAR: &[u8] = b"SBX_GUARD_TRUSTED_HOOKS";
const HOOKS_ONLY_VAR: &[u8] = b"SBX_GUARD_HOOKS_ONLY";
/// hooks.rs's COMMIT_ENV.
const COMMIT_VAR: &[u8] = b"SBX_GUARD_COMMIT";
/// index.rs's PRIVATE_VAR, and msg.rs's APPROVED in `<its value>.msg/`.
const PRIVATE_VAR: &[u8] = b"SBX_GUARD_PRIVATE_INDEX";
/// ledger.rs's FETCH_ENV: a fetch from a remote, whose remote-tracking
/// refs may move onto what it brought.
const FETCH_VAR: &[u8] = b"SBX_GUARD_FETCH";
const APPROVED: &[u8] = b".msg/commit-msg.approved\0";
/// ledger.rs's PINNED_HEAD in `<PRIVATE_VAR>.msg/`.
const PINNED: &[u8] = b".msg/pre-commit.head\0";
/// Steps that run a second hook after their own (hooks.rs `run`).
const CHAINED: [&[u8]; 3] = [b"pre-applypatch", b"pre-merge-commit", b"applypatch-msg"];

/// A hook step as hooks.rs `run` sees one: the hook's name, the trusted
/// directory, whether the repository has the hook, and whether the step
/// checks git's input first (a checked routing's pre-push and
/// reference-transaction `prepared`). A step that only starts the hook
/// (every step of the hooks-only routing, the rest of a checked one)
/// answers a hook the repository lacks here (success) without starting
/// the guard (~1 ms), and sends one it has to the broker as the guard's
/// step would. A checking step does so too when git's input needs no
/// check ([`needs_no_check`]); else the guard decides.
struct HookStep {
    name: &'static [u8],
    trusted: &'static [u8],
    present: bool,
    check: Option<Check>,
    /// `git commit` (hooks.rs COMMIT_ENV) in a repository with commit-msg,
    /// or any call with a message commit-msg passed in its private
    /// directory (a merge, an am): its HEAD moving is checked too (msg.rs
    /// compares a detached HEAD's new commit's message).
    commit: bool,
    /// `git commit` with no message to compare (no commit-msg, nothing
    /// it passed in the call's private directory): its branch's move may
    /// be answered here ([`commit::Repo`]).
    plain_commit: bool,
    /// A fetch from a remote (FETCH_VAR): remote-tracking refs move
    /// without the ledger's check.
    fetched: bool,
}

/// The two steps that check git's input before starting the hook.
#[derive(Clone, Copy)]
enum Check {
    /// hooks.rs `check_push` and `check_push_commits`.
    PrePush,
    /// hooks.rs `check_transaction`.
    Prepared,
}

fn hook_step(p: &Proc) -> Option<HookStep> {
    let argv0 = p.args().next()?;
    let name = match argv0.iter().rposition(|&b| b == b'/') {
        Some(i) => &argv0[i + 1..],
        None => argv0,
    };
    if !HOOK_NAMES.contains(&name) || CHAINED.contains(&name) {
        return None;
    }
    // std's var_os is getenv: the first entry of a name.
    let var = |k: &[u8]| env(p).find(|(n, _)| *n == k).map(|(_, v)| v);
    let check = if var(HOOKS_ONLY_VAR).is_some() {
        None
    } else if name == b"pre-push" {
        Some(Check::PrePush)
    } else if name == b"reference-transaction" && p.args().nth(1) == Some(b"prepared") {
        Some(Check::Prepared)
    } else {
        None
    };
    // The guard's step fails any input when it has no git to ask
    // (`Git::for_env`): it has one where a broker runs git (the guard
    // beside this program, as `git`) and, outside the sandbox, where
    // `SBX_REAL_GIT` names one. Elsewhere (git looked up on PATH) it
    // decides.
    if check.is_some() {
        let mut buf = [0u8; 4096 + 32];
        let named = || {
            sys::file_type(SANDBOX_DIR, false) != Ok(sys::S_IFDIR)
                && var(REAL_GIT_VAR).is_some_and(|v| !v.is_empty())
        };
        if !((socket_path(p).is_some() || named()) && sys::executable(guard_path(&mut buf))) {
            return None;
        }
    }
    let trusted = var(TRUSTED_VAR).filter(|t| !t.is_empty())?;
    let mut path = [0u8; 4096];
    // A path too long for this buffer: the guard decides.
    let present = sys::executable(join_z(&mut path, trusted, name)?);
    // Only where the repository has commit-msg (one stat, for a commit's
    // prepared step): without it there is no message to compare.
    let committing =
        matches!(check, Some(Check::Prepared)) && var(COMMIT_VAR).is_some_and(|v| v == b"1");
    let commit = committing && sys::executable(join_z(&mut path, trusted, b"commit-msg")?);
    // msg.rs `check_commit` compares a message commit-msg passed, where
    // one was kept (a path it cannot tell absent: the guard decides).
    let absent = |file: &[u8]| match var(PRIVATE_VAR) {
        Some(copy) if copy.first() == Some(&b'/') => {
            let mut buf = [0u8; 4096];
            let n = copy.len() + file.len();
            n <= buf.len() && !copy.contains(&0) && {
                buf[..copy.len()].copy_from_slice(copy);
                buf[copy.len()..n].copy_from_slice(file);
                sys::file_type(&buf[..n], false) == Err(sys::ENOENT)
            }
        }
        _ => true,
    };
    let approved = matches!(check, Some(Check::Prepared)) && !absent(APPROVED);
    // pre-commit ran on a pinned HEAD (ledger.rs): the guard compares
    // git's parent with it.
    // broker.rs `pin_path`: the pin the root process keeps, beside the
    // socket (the copy above is anyone's with git's group to remove).
    let kept_pin = || {
        let (Some(sock), Some(copy)) = (socket_path(p), var(PRIVATE_VAR)) else {
            return false;
        };
        let (Some(d), Some(n)) = (
            sock.iter().rposition(|&b| b == b'/'),
            copy.iter().rposition(|&b| b == b'/'),
        ) else {
            return false;
        };
        let mut buf = [0u8; 4096];
        let parts: [&[u8]; 4] = [&sock[..d], b"/approved", &copy[n..], b".pin\0"];
        let len: usize = parts.iter().map(|x| x.len()).sum();
        if len > buf.len() || copy.contains(&0) {
            return true;
        }
        let mut at = 0;
        for x in parts {
            buf[at..at + x.len()].copy_from_slice(x);
            at += x.len();
        }
        sys::file_type(&buf[..len], false) != Err(sys::ENOENT)
    };
    // With pre-commit, a commit always has a pin to check: none (the hook
    // ran without a view) is the guard's to refuse (ledger.rs `check_pinned`).
    // Asked last (a hooked commit has its pin); a path too long: the guard.
    let mut has_pre_commit =
        || join_z(&mut path, trusted, b"pre-commit").is_none_or(sys::executable);
    let approved = approved || (committing && (!absent(PINNED) || kept_pin() || has_pre_commit()));
    // `git merge` and `git am` keep what commit-msg passed too (round
    // seven), without COMMIT_ENV: wherever a message was kept, a HEAD that
    // moves goes to the guard, which compares it (a detached HEAD's).
    let commit = commit || approved;
    let plain_commit = committing && !commit;
    let fetched = var(FETCH_VAR).is_some_and(|v| v == b"1");
    Some(HookStep {
        name,
        trusted,
        present,
        check,
        commit,
        plain_commit,
        fetched,
    })
}

/// Does the guard's check pass `input` without asking git or recording
/// anything? Exactly the inputs its loops skip, so the answer is the
/// guard's own; anything else goes to the guard. pre-push: no update at
/// all (git lists none for a push with nothing to send, up-to-date
/// branches included). `prepared`: no line naming `refs/stash` or a
/// notes ref (recorded, as made without a pre-commit) and no branch
/// whose old and new values differ (a move, checked against the stash),
/// nor, for `git commit`, a HEAD that moves (its message is compared).
/// A branch's move passes where `moved(old, new)` says the guard's
/// check would find nothing to list ([`commit::Repo`], a plain commit).
/// The ledger (ledger.rs): a plain commit's detached HEAD that moves
/// (`plain`; git lists a branch's HEAD with a zero old id) goes to the
/// guard, which adds the commit, and so does a remote-tracking ref that
/// moves outside a fetch from a remote.
fn needs_no_check(
    check: Check,
    input: &[u8],
    commit: bool,
    plain: bool,
    fetched: bool,
    moved: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> bool {
    match check {
        Check::PrePush => input.iter().all(|&b| b == b'\n'),
        Check::Prepared => input.split(|&b| b == b'\n').all(|line| {
            let mut f = line.splitn(3, |&b| b == b' ');
            // Fewer than three fields: the guard skips the line.
            let (Some(old), Some(new), Some(name)) = (f.next(), f.next(), f.next()) else {
                return true;
            };
            !(name == b"refs/stash"
                || name.starts_with(b"refs/notes/")
                || (name.starts_with(b"refs/heads/") && old != new && !moved(old, new))
                || (commit && name == b"HEAD" && old != new)
                || (plain && name == b"HEAD" && old != new && !old.iter().all(|&b| b == b'0'))
                || (!fetched && name.starts_with(b"refs/remotes/") && old != new))
        }),
    }
}

/// Over this, the input goes to the guard whole (a fetch's thousands of
/// refs); the mapping costs only the pages read into.
const INPUT_MAX: usize = 1 << 24;

/// git's input to a checking step, read whole into a memory file that
/// becomes stdin (fd 0): the hook, or the guard this falls back to, reads
/// it from there, as the guard's step hands its hook a copy. The bytes
/// read, and whether that is all of it; None: it could not be read or
/// kept, and the step refuses.
fn take_input() -> Option<(&'static [u8], bool)> {
    let buf = sys::alloc(INPUT_MAX).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match sys::read(0, &mut buf[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    let whole = len < buf.len();
    let fd = sys::memfd(b"sbx-hook-input\0").ok()?;
    let kept = (|| {
        write_all(fd, &buf[..len])?;
        if !whole {
            let mut chunk = [0u8; 1 << 16];
            loop {
                match sys::read(0, &mut chunk)? {
                    0 => break,
                    n => write_all(fd, &chunk[..n])?,
                }
            }
        }
        sys::rewind(fd)?;
        sys::dup2(fd, 0)
    })();
    sys::close(fd);
    kept.ok()?;
    Some((&buf[..len], whole))
}

fn write_all(fd: Fd, mut data: &[u8]) -> Result<(), Errno> {
    while !data.is_empty() {
        match sys::write(fd, data)? {
            0 => return Err(sys::EINVAL),
            n => data = &data[n..],
        }
    }
    Ok(())
}

/// `dir/name` with a trailing NUL in `buf`; None when it does not fit.
fn join_z<'b>(buf: &'b mut [u8; 4096], dir: &[u8], name: &[u8]) -> Option<&'b [u8]> {
    let n = dir.len() + 1 + name.len();
    if n >= buf.len() {
        return None;
    }
    buf[..dir.len()].copy_from_slice(dir);
    buf[dir.len()] = b'/';
    buf[dir.len() + 1..n].copy_from_slice(name);
    buf[n] = 0;
    Some(&buf[..=n])
}

/// hooks.rs `hook_broker`: the socket a hook step sends its hook to, when
/// it runs as git's process under the broker (not root; the image's group
/// `sbx-git`, where /etc/group has one). None: the guard decides.
fn hook_socket(p: &Proc) -> Option<&'static [u8]> {
    if sys::geteuid() == 0 {
        return None;
    }
    match group_gid(b"sbx-git") {
        Group::Gid(g) if g != sys::getegid() => return None,
        Group::Unknown => return None,
        Group::Gid(_) | Group::Absent => {}
    }
    socket_path(p)
}

enum Group {
    Gid(u32),
    Absent,
    /// Anything the guard might read otherwise: it decides.
    Unknown,
}

/// broker::group_gid: `name`'s gid in /etc/group (the first line of that
/// name with a plain decimal gid; any other shape is Unknown).
fn group_gid(name: &[u8]) -> Group {
    let Ok(fd) = sys::openat(b"/etc/group\0", sys::O_RDONLY | sys::O_CLOEXEC) else {
        return Group::Unknown;
    };
    let Ok(buf) = sys::alloc(1 << 16) else {
        sys::close(fd);
        return Group::Unknown;
    };
    let mut len = 0;
    let full = loop {
        match sys::read(fd, &mut buf[len..]) {
            Ok(0) => break false,
            Ok(n) => len += n,
            Err(_) => {
                sys::close(fd);
                return Group::Unknown;
            }
        }
        if len == buf.len() {
            break true;
        }
    };
    sys::close(fd);
    let text = &buf[..len];
    if full || core::str::from_utf8(text).is_err() {
        return Group::Unknown;
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut f = line.split(|&b| b == b':');
        if f.next() != Some(name) {
            continue;
        }
        let gid = f.nth(1).unwrap_or(b"");
        if gid.is_empty() || gid.len() > 9 || !gid.iter().all(u8::is_ascii_digit) {
            return Group::Unknown;
        }
        return Group::Gid(gid.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')));
    }
    Group::Absent
}

/// Rust's runtime opens /dev/null on a closed stdin, stdout or stderr
/// before the guard's main; so does this, so both see the same.
fn open_std() {
    for fd in 0..3 {
        if !sys::is_open(fd) {
            let _ = sys::openat(b"/dev/null\0", sys::O_RDWR);
        }
    }
}

pub fn main(p: &Proc) -> i32 {
    let step = hook_step(p);
    if let Some(HookStep {
        name,
        check: Some(check),
        commit,
        plain_commit,
        fetched,
        ..
    }) = &step
    {
        open_std();
        let mut repo = None;
        let mut moved = |old: &[u8], new: &[u8]| {
            *plain_commit
                && repo
                    .get_or_insert_with(|| {
                        commit::Repo::find(&|k| env(p).find(|(n, _)| *n == k).map(|(_, v)| v))
                    })
                    .commit_moves_from(old, new)
        };
        match take_input() {
            Some((input, true))
                if needs_no_check(*check, input, *commit, *plain_commit, *fetched, &mut moved) => {}
            Some(_) => return fallback(p),
            None => {
                let mut m = Msg::new();
                let _ = write!(
                    m,
                    "{TOOL}: {}: cannot read git's input; refusing",
                    Lossy(name)
                );
                m.emit();
                return 1;
            }
        }
    }
    // `git commit`'s pre-commit runs on a private view: the broker's
    // worker makes it (broker.rs `pre_commit_view`), as the guard's step
    // did, without a guard's start for it.
    let kind = match &step {
        Some(h) if !h.present => return 0,
        Some(h) => Kind::Hook(h.name),
        None => match p.args().next().and_then(kind) {
            Some(k) => k,
            None => return fallback(p),
        },
    };
    open_std();
    let socket = match &step {
        Some(_) => hook_socket(p),
        None => socket_path(p),
    };
    // Non-UTF-8 would print differently in an error (`Path::display`).
    let Some(socket) = socket.filter(|s| core::str::from_utf8(s).is_ok()) else {
        return fallback(p);
    };
    // The hooks directory the step names, by fd as the guard passes it.
    let dir = match &step {
        Some(h) => match open_dir(h.trusted) {
            Some(d) => Some(d),
            None => return fallback(p),
        },
        None => None,
    };
    let old = sys::umask(0o077);
    sys::umask(old);
    let mut body = [0u8; MAX_SMALL];
    match forward(p, &kind, old, socket, dir, &mut body) {
        Ok(code) => code,
        Err(Sent::No) => fallback(p),
        Err(Sent::Failed(why)) => {
            let mut m = Msg::new();
            if let Some(h) = &step {
                let _ = write!(
                    m,
                    "{TOOL}: {}: git broker {}: {why}; refusing",
                    Lossy(h.name),
                    Lossy(socket)
                );
                m.emit();
                return 1;
            }
            let _ = write!(m, "{TOOL}: error: git broker {}: {why}", Lossy(socket));
            m.emit();
            WRAPPER_FAILED
        }
    }
}

/// privsep::open_path: O_PATH, following links.
fn open_dir(dir: &[u8]) -> Option<Fd> {
    let mut buf = [0u8; 4096];
    if dir.len() >= buf.len() || dir.contains(&0) {
        return None;
    }
    buf[..dir.len()].copy_from_slice(dir);
    sys::openat(&buf[..=dir.len()], sys::O_PATH | sys::O_CLOEXEC).ok()
}

enum Sent<'a> {
    /// Nothing reached the broker whole: the guard can start over.
    No,
    /// After the request: the guard's `call` error, as it words it.
    Failed(Why<'a>),
}

enum Why<'a> {
    Broker(&'a [u8]),
    HungUp,
    Truncated,
    TooLarge(usize),
    Malformed(&'static str),
    Io(Errno),
    /// poll(2) failed: the guard prints the OS error alone.
    Poll(Errno),
}

impl core::fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Why::Broker(m) => write!(f, "{}", Lossy(m)),
            Why::HungUp => f.write_str("the broker hung up without an exit status"),
            Why::Truncated => f.write_str("the connection closed mid-frame"),
            Why::TooLarge(n) => write!(f, "frame of {n} bytes is over the limit of {MAX_SMALL}"),
            Why::Malformed(m) => write!(f, "malformed request: {m}"),
            Why::Io(e) => write!(f, "connection: {}", OsError(*e)),
            Why::Poll(e) => write!(f, "{}", OsError(*e)),
        }
    }
}

/// broker::call: send argv, environment, stdio and cwd; relay signals
/// until the reply.
fn forward<'a>(
    p: &Proc,
    kind: &Kind<'static>,
    umask: u32,
    socket: &[u8],
    dir: Option<Fd>,
    body: &'a mut [u8; MAX_SMALL],
) -> Result<i32, Sent<'a>> {
    let dirs = dir.as_slice();
    let Some(req) = encode(p, kind, umask) else {
        dirs.iter().for_each(|&f| sys::close(f));
        return Err(Sent::No);
    };
    let Ok(cwd) = sys::openat(b".\0", sys::O_PATH | sys::O_DIRECTORY | sys::O_CLOEXEC) else {
        dirs.iter().for_each(|&f| sys::close(f));
        return Err(Sent::No);
    };
    let mask = RELAYED.iter().fold(0u64, |m, s| m | 1 << (s - 1));
    // Blocked before connecting, so none arrives between send and poll;
    // unblocked again before a fallback exec, which would inherit it.
    let old = sys::block(mask).map_err(|_| Sent::No)?;
    let undo = |fds: &[Fd]| {
        fds.iter().chain(dirs).for_each(|&f| sys::close(f));
        sys::set_mask(old);
        Sent::No
    };
    let sigfd = sys::signalfd(mask).map_err(|_| undo(&[cwd]))?;
    let conn = sys::connect_unix(socket).map_err(|_| undo(&[cwd, sigfd]))?;
    let all = [0, 1, 2, cwd, dir.unwrap_or(cwd)];
    let fds = if dir.is_some() { &all[..] } else { &all[..4] };
    // A request cut short is never run (the broker reads it whole first).
    send_all(conn, req, fds).map_err(|_| undo(&[cwd, sigfd, conn]))?;
    sys::close(cwd);
    dirs.iter().for_each(|&f| sys::close(f));
    loop {
        let [reply, signal] =
            sys::poll_in([conn, sigfd]).map_err(|e| Sent::Failed(Why::Poll(e)))?;
        if signal {
            let mut info = [0u8; 128];
            if sys::read(sigfd, &mut info) == Ok(128) {
                let mut k = [5, 0, 0, 0, b'K', 0, 0, 0, 0];
                k[5..].copy_from_slice(&info[..4]);
                let _ = send_all(conn, &k, &[]);
            }
        }
        if reply {
            return read_reply(conn, body).map_err(Sent::Failed);
        }
    }
}

fn send_all(fd: Fd, mut data: &[u8], mut fds: &[Fd]) -> Result<(), Errno> {
    while !data.is_empty() {
        let n = sys::send(fd, data, fds)?;
        fds = &[];
        data = &data[n..];
    }
    Ok(())
}

/// Fill `buf`; Ok(false) on EOF before its first byte.
fn read_exact(fd: Fd, buf: &mut [u8]) -> Result<bool, Why<'static>> {
    let mut got = 0;
    while got < buf.len() {
        match sys::read(fd, &mut buf[got..]).map_err(Why::Io)? {
            0 if got == 0 => return Ok(false),
            0 => return Err(Why::Truncated),
            n => got += n,
        }
    }
    Ok(true)
}

/// proto::read_reply, and the exit status `call` makes of it.
fn read_reply(conn: Fd, body: &mut [u8; MAX_SMALL]) -> Result<i32, Why<'_>> {
    let mut len = [0u8; 4];
    if !read_exact(conn, &mut len)? {
        return Err(Why::HungUp);
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_SMALL {
        return Err(Why::TooLarge(len));
    }
    let body = &mut body[..len];
    if !read_exact(conn, body)? && len > 0 {
        return Err(Why::Truncated);
    }
    let int = |b: &[u8]| -> Result<i32, Why<'static>> {
        let a: [u8; 4] = b
            .try_into()
            .map_err(|_| Why::Malformed("bad integer field"))?;
        Ok(i32::from_le_bytes(a))
    };
    match body.split_first() {
        None => Err(Why::Malformed("empty reply")),
        Some((b'E', c)) => Ok(int(c)?.clamp(0, 255)),
        Some((b'S', s)) => Ok(int(s)?.saturating_add(128).clamp(0, 255)),
        Some((b'X', m)) => Err(Why::Broker(m)),
        Some(_) => Err(Why::Malformed("unknown reply")),
    }
}

/// `String::from_utf8_lossy`, as Display.
struct Lossy<'a>(&'a [u8]);

impl core::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for c in self.0.utf8_chunks() {
            f.write_str(c.valid())?;
            if !c.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

/// io::Error's Display for an OS error: strerror, then the number.
struct OsError(Errno);

impl core::fmt::Display for OsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let n = self.0.0;
        let s = match n {
            2 => "No such file or directory",
            5 => "Input/output error",
            9 => "Bad file descriptor",
            11 => "Resource temporarily unavailable",
            12 => "Cannot allocate memory",
            13 => "Permission denied",
            22 => "Invalid argument",
            32 => "Broken pipe",
            104 => "Connection reset by peer",
            110 => "Connection timed out",
            111 => "Connection refused",
            _ => return write!(f, "Unknown error {n} (os error {n})"),
        };
        write!(f, "{s} (os error {n})")
    }
}

/// One stderr line, built on the stack and written at once.
struct Msg {
    buf: [u8; 8192],
    len: usize,
}

impl Msg {
    fn new() -> Self {
        Msg {
            buf: [0; 8192],
            len: 0,
        }
    }
    fn emit(mut self) {
        let _ = self.write_str("\n");
        sys::ignore_sigpipe();
        let mut out = &self.buf[..self.len];
        while let Ok(n @ 1..) = sys::write(2, out) {
            out = &out[n..];
        }
    }
}

impl core::fmt::Write for Msg {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
