//! `sbx-run fetch`: the return path of clone mode (and branch mode). The
//! sandbox's commits come back as data only: the guest runs `git bundle
//! create` as the agent in the sandbox's clone, the host streams the
//! bundle into a private file under a size cap, checks its header and
//! every ref name, and fetches it with the host's git, hooks and every
//! program-running key pinned off, into `refs/remotes/sbx/<branch>`:
//! never the checked-out branch, never the work tree, never a submodule.
//! Nothing of the clone's `.git` (its config, hooks, index, nested
//! repositories) reaches the host; the user reviews and merges with their
//! own git.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::guestapi::{ExecReq, User};
use sbx_core::{Exit, SbxError, output, sanitize};
use serde_json::json;

use crate::guestexec::{self, GuestError};
use crate::workspace::Workspace;
use crate::{BranchArg, RunError};

/// Where fetched branches land: remote-tracking refs of a remote that
/// does not exist, so no `git pull`, push or checkout moves them by itself.
pub const NAMESPACE: &str = "refs/remotes/sbx/";

/// Where a fetch lands until its heads are checked: `NAMESPACE` moves
/// only when every head passes.
const QUARANTINE: &str = "refs/sbx-fetch/";

/// The most branches one bundle may bring (each is checked by a git call).
const MAX_HEADS: usize = 1000;

/// The bundle formats git writes (`# v2 git bundle`, `# v3 git bundle`).
const HEADERS: [&[u8]; 2] = [b"# v2 git bundle\n", b"# v3 git bundle\n"];

#[derive(Debug, Args)]
pub struct FetchOpts {
    /// Workspace (default: the current directory).
    #[arg(long = "path", short = 'C', value_name = "PATH")]
    pub path: Option<PathBuf>,
    #[command(flatten)]
    pub branch: BranchArg,
    /// The largest bundle taken from the sandbox (b, k, m or g); a bigger
    /// one is refused and nothing is fetched.
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = sbx_core::config::Size::parse)]
    pub max_size: sbx_core::config::Size,
    /// The largest object (a file's content, as git inflates it) the
    /// bundle may hold; checked from the bundle's own sizes before your
    /// git reads it.
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = sbx_core::config::Size::parse)]
    pub max_object_size: sbx_core::config::Size,
    /// The most the bundle's objects may inflate to, all together.
    #[arg(long, value_name = "SIZE", default_value = "64g", value_parser = sbx_core::config::Size::parse)]
    pub max_inflated: sbx_core::config::Size,
    /// The most objects the bundle may hold (your git's index of them
    /// takes about 140 bytes of memory each).
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub max_objects: u32,
    /// Take branches that change what your git runs on a merge or
    /// checkout (a hooks directory in the work tree, `.husky`, a config
    /// file your `.git/config` includes from the work tree) or what your
    /// Claude Code or codex runs (`.claude/`, `.mcp.json`, `.codex/`),
    /// after you have read the change in the sandbox.
    #[arg(long)]
    pub allow_hook_changes: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "{0}: `sbx-run fetch` takes a sandbox's own clone: set [sandbox] workspace = \"clone\", or give --branch B"
    )]
    NotAClone(String),
    #[error("{0}: not running: start it (`sbx-run start`), then fetch")]
    NotRunning(String),
    #[error("the sandbox's bundle is larger than --max-size {0}: nothing was fetched")]
    TooBig(String),
    #[error("the sandbox sent {0}: nothing was fetched")]
    Bad(String),
    #[error(
        "the sandbox's bundle inflates to {0} (a small bundle git would inflate on the host): nothing was fetched"
    )]
    Inflates(String),
    #[error("the sandbox's `git bundle create` failed ({0}): {1}")]
    Guest(i32, String),
    #[error("git {0}: {1}")]
    Git(&'static str, String),
    #[error(transparent)]
    Proto(#[from] GuestError),
    #[error(
        "sbx/{0} changes {1}, which your git or AI CLI runs or reads on the host ({2}): nothing was fetched; read the change in the sandbox (`sbx-run exec -- git log -p -- {1}`), then fetch with --allow-hook-changes"
    )]
    HookChange(String, String, &'static str),
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, io::Error),
}

impl SbxError for FetchError {
    fn exit(&self) -> Exit {
        match self {
            Self::NotAClone(_) => Exit::Usage,
            Self::NotRunning(_) => Exit::Unavailable,
            Self::TooBig(_) | Self::Bad(_) | Self::Inflates(_) | Self::Guest(..) => Exit::DataErr,
            Self::HookChange(..) => Exit::Denied,
            Self::Git(..) | Self::Proto(_) => Exit::Software,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
        }
    }
}

/// A writer that refuses to grow past `cap` bytes.
struct Capped<W> {
    inner: W,
    left: u64,
    over: bool,
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.over = true;
            return Err(io::Error::other("over the size cap"));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// One fetched branch: its name in the sandbox and the commit.
struct Head {
    id: String,
    branch: String,
}

pub fn fetch(common: &CommonArgs, opts: &FetchOpts) -> Result<ExitCode, BoxError> {
    let ws = Workspace::open(common, opts.path.clone())?.with_branch(opts.branch.branch.as_deref());
    let Some(branch) = ws.branch.clone() else {
        // Clone mode on a detached HEAD: precheck's line says which.
        crate::branch::precheck(&ws)?;
        return Err(FetchError::NotAClone(ws.path.display().to_string()).into());
    };
    let dir = tempfile::Builder::new()
        .prefix("sbx-fetch-")
        .tempdir()
        .map_err(|e| FetchError::Io(std::env::temp_dir(), e))?;
    let file = dir.path().join("sandbox.bundle");
    receive(&ws, &file, opts.max_size.bytes)?;
    let heads = check(&ws, &file)?;
    // Before the host's git inflates a byte: a delta of a few bytes makes
    // 64 KiB, so a bundle under --max-size can ask git for any memory.
    inflation(
        &file,
        opts.max_object_size.bytes,
        opts.max_inflated.bytes,
        opts.max_objects,
    )?;
    // git before 2.46 skips fetch.fsckObjects for a bundle: check its
    // objects with git's fsck first (a tree holding `.GIT`, a bad
    // `.gitmodules`), as a later git does in the fetch itself.
    if !fetch_checks_bundles(&git_version()) {
        fsck(&ws.path, &file)?;
    }
    // One transaction: every branch or none, with the host's git reading
    // the bundle as data (verify.rs's pins) and running nothing.
    let mut c = crate::verify::git(&ws.path);
    for kv in [
        "protocol.file.allow=always",
        "fetch.fsckObjects=true",
        "fetch.recurseSubmodules=false",
        "submodule.recurse=false",
        "gc.auto=0",
        "maintenance.auto=false",
    ] {
        c.args(["-c", kv]);
    }
    c.args([
        "fetch",
        "--quiet",
        "--atomic",
        "--no-tags",
        "--no-recurse-submodules",
        "--no-write-fetch-head",
        "--no-auto-gc",
        "--refmap=",
    ])
    .arg(&file);
    for h in &heads {
        c.arg(format!("+refs/heads/{0}:{QUARANTINE}{0}", h.branch));
    }
    crate::verify::run(c, "fetch").map_err(|e| FetchError::Git("fetch", escaped(&e)))?;
    let checked = admit(&ws.path, &heads, opts.allow_hook_changes);
    // One transaction: NAMESPACE moves for every head or none, and the
    // quarantine goes either way.
    let mut tx = String::new();
    for h in &heads {
        if checked.is_ok() {
            tx.push_str(&format!("update {NAMESPACE}{} {}\n", h.branch, h.id));
        }
        tx.push_str(&format!("delete {QUARANTINE}{}\n", h.branch));
    }
    let mut c = crate::verify::git(&ws.path);
    c.args(["update-ref", "--stdin"])
        .stdout(std::process::Stdio::null());
    crate::verify::feed(c, tx.as_bytes(), "update-ref")
        .map_err(|e| FetchError::Git("update-ref", escaped(&e)))?;
    checked?;
    let mut out = io::stdout().lock();
    for h in &heads {
        let r = if common.quiet {
            Ok(())
        } else if common.json {
            output::json_line(
                &mut out,
                "fetched",
                &json!({"branch": h.branch, "ref": format!("{NAMESPACE}{}", h.branch), "id": h.id}),
            )
        } else {
            writeln!(
                out,
                "sbx/{} {}",
                sanitize::field(&h.branch),
                &h.id[..h.id.len().min(12)]
            )
        };
        r.map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    output::info(&format!(
        "review with `git log -p HEAD..sbx/{0}`, check with `sbx-run verify-commits --since HEAD --head sbx/{0}`, then `git merge sbx/{0}`",
        sanitize::field(&branch)
    ));
    Ok(Exit::Ok.into())
}

/// The guest runs `git bundle create - --branches` as the agent in the
/// branch's worktree; its stdout goes into `file`, at most `cap` bytes.
fn receive(ws: &Workspace, file: &std::path::Path, cap: u64) -> Result<(), FetchError> {
    let sock = guestexec::socket_for(ws);
    let client = match guestexec::connect(&sock) {
        Ok(c) => c,
        Err(GuestError::NoGuest(..)) => {
            return Err(FetchError::NotRunning(ws.names.container.clone()));
        }
        Err(e) => return Err(e.into()),
    };
    let req = ExecReq {
        argv: ["git", "bundle", "create", "--quiet", "-", "--branches"]
            .map(String::from)
            .to_vec(),
        env: [("SBX_AGENT".to_owned(), "sbx-run-fetch".to_owned())].into(),
        cwd: Some(ws.workdir()),
        user: User::Agent,
        tty: None,
        timeout_ms: None,
        hangup: false,
    };
    let f = std::fs::File::create(file).map_err(|e| FetchError::Io(file.to_owned(), e))?;
    let mut out = Capped {
        inner: io::BufWriter::new(f),
        left: cap,
        over: false,
    };
    let mut err = Capped {
        inner: Vec::new(),
        left: 4096,
        over: false,
    };
    let r = guestexec::run_with(client, req, None, &mut out, &mut err, false);
    if out.over {
        return Err(FetchError::TooBig(cap.to_string()));
    }
    let x = r?;
    out.flush()
        .map_err(|e| FetchError::Io(file.to_owned(), e))?;
    if x.status != 0 {
        let text = String::from_utf8_lossy(&err.inner);
        let line = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(FetchError::Guest(
            x.status,
            sanitize::field(line).into_owned(),
        ));
    }
    Ok(())
}

/// The bundle's header and refs, checked before git fetches anything:
/// a bundle git wrote, branches only, each a name git accepts.
fn check(ws: &Workspace, file: &std::path::Path) -> Result<Vec<Head>, FetchError> {
    use std::io::Read;
    let mut head = [0u8; 16];
    let n = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| FetchError::Io(file.to_owned(), e))?;
    if !HEADERS.contains(&&head[..n]) {
        return Err(FetchError::Bad(format!(
            "no git bundle (it starts {:?})",
            sanitize::field(&String::from_utf8_lossy(&head[..n]))
        )));
    }
    let mut c = crate::verify::git(&ws.path);
    c.args(["bundle", "verify", "--quiet"]).arg(file);
    crate::verify::run(c, "bundle verify")
        .map_err(|e| FetchError::Bad(format!("a bundle git refuses ({})", escaped(&e))))?;
    let mut c = crate::verify::git(&ws.path);
    c.args(["bundle", "list-heads"]).arg(file);
    let list = crate::verify::run(c, "bundle list-heads")
        .map_err(|e| FetchError::Bad(format!("a bundle git cannot list ({})", escaped(&e))))?;
    let mut heads = Vec::new();
    for line in list.lines() {
        let (id, name) = line.split_once(' ').unwrap_or((line, ""));
        let branch = name.strip_prefix("refs/heads/").unwrap_or("");
        let id_ok = matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit());
        if !id_ok || branch.is_empty() || branch == "HEAD" || !crate::branch::ref_ok(&[name], name)
        {
            return Err(FetchError::Bad(format!(
                "a ref sbx does not take ({})",
                sanitize::field(line)
            )));
        }
        heads.push(Head {
            id: id.to_owned(),
            branch: branch.to_owned(),
        });
    }
    if heads.is_empty() {
        return Err(FetchError::Bad("a bundle without branches".into()));
    }
    if heads.len() > MAX_HEADS {
        return Err(FetchError::Bad(format!(
            "{} branches (at most {MAX_HEADS})",
            heads.len()
        )));
    }
    Ok(heads)
}

/// What the bundle's objects inflate to, from the sizes its pack declares,
/// checked before the host's git reads it: at most `max_count` objects,
/// every object (a delta's result,
/// which git makes whole in memory, and every object a delta may take as
/// its base) at most `max_object` bytes, all of them together (and the
/// deltas' own data) at most `max_total`. Each entry's data is inflated
/// here only up to the size its header declares, which is counted before
/// it is read, so this check's own work stays under the same caps.
fn inflation(
    file: &std::path::Path,
    max_object: u64,
    max_total: u64,
    max_count: u32,
) -> Result<(), FetchError> {
    use std::io::{BufRead, BufReader, Read};
    let io_err = |e: io::Error| FetchError::Io(file.to_owned(), e);
    let bad = |what: &str| FetchError::Bad(format!("a bundle whose pack is {what}"));
    let mut r = BufReader::with_capacity(1 << 16, std::fs::File::open(file).map_err(io_err)?);
    // The header git has already read: lines up to an empty one.
    let mut oid_len = 20;
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line).map_err(io_err)? == 0 {
            return Err(bad("missing"));
        }
        if line == b"\n" {
            break;
        }
        if line == b"@object-format=sha256\n" {
            oid_len = 32;
        }
    }
    let mut hdr = [0u8; 12];
    r.read_exact(&mut hdr).map_err(|_| bad("truncated"))?;
    if &hdr[..4] != b"PACK" || !matches!(hdr[4..8], [0, 0, 0, 2 | 3]) {
        return Err(bad("not a git pack"));
    }
    let count = u32::from_be_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
    // A tiny object is a dozen bytes of pack, and your git's index of it
    // about 140 bytes of memory: a 1 GiB bundle of them, 10 GiB.
    if count > max_count {
        return Err(FetchError::Inflates(format!(
            "{count} objects, over --max-objects {max_count}"
        )));
    }
    let byte = |r: &mut BufReader<std::fs::File>| -> Result<u8, FetchError> {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).map_err(|_| bad("truncated"))?;
        Ok(b[0])
    };
    let mut total: u64 = 0;
    let add = |n: u64, total: &mut u64| -> Result<(), FetchError> {
        *total = total.saturating_add(n);
        if *total > max_total {
            return Err(FetchError::Inflates(format!(
                "more than --max-inflated {max_total} bytes"
            )));
        }
        Ok(())
    };
    let one = |n: u64| -> Result<(), FetchError> {
        if n > max_object {
            return Err(FetchError::Inflates(format!(
                "an object of {n} bytes, over --max-object-size {max_object}"
            )));
        }
        Ok(())
    };
    for _ in 0..count {
        let mut c = byte(&mut r)?;
        let kind = (c >> 4) & 7;
        let mut size = u64::from(c & 15);
        let mut shift = 4;
        while c & 0x80 != 0 {
            c = byte(&mut r)?;
            if shift > 57 {
                return Err(bad("an entry too large to name"));
            }
            size |= u64::from(c & 0x7f) << shift;
            shift += 7;
        }
        let delta = match kind {
            1..=4 => false,
            6 => {
                for _ in 0..10 {
                    if byte(&mut r)? & 0x80 == 0 {
                        break;
                    }
                }
                true
            }
            7 => {
                let mut id = [0u8; 32];
                r.read_exact(&mut id[..oid_len])
                    .map_err(|_| bad("truncated"))?;
                true
            }
            _ => return Err(bad("an entry of no known type")),
        };
        if !delta {
            one(size)?;
        }
        add(size, &mut total)?;
        let head = inflate_entry(&mut r, size).map_err(|e| match e {
            Some(e) => io_err(e),
            None => bad("an entry whose data is not what it declares"),
        })?;
        if delta {
            // A delta starts with its base's size and its result's.
            let mut at = 0;
            let mut varint = || {
                let (mut n, mut s) = (0u64, 0);
                while let Some(&b) = head.get(at) {
                    at += 1;
                    n |= u64::from(b & 0x7f) << s;
                    s += 7;
                    if b & 0x80 == 0 {
                        return Some(n);
                    }
                    if s > 63 {
                        break;
                    }
                }
                None
            };
            let (Some(base), Some(made)) = (varint(), varint()) else {
                return Err(bad("a delta without sizes"));
            };
            one(base)?;
            one(made)?;
            add(made, &mut total)?;
        }
    }
    Ok(())
}

/// The host git's version, `(major, minor)`; (0, 0) when unknown.
fn git_version() -> (u32, u32) {
    let out = std::process::Command::new("git")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    parse_version(&out)
}

fn parse_version(s: &str) -> (u32, u32) {
    let v = s.trim().strip_prefix("git version ").unwrap_or("");
    let mut n = v.split('.').map(|x| x.parse::<u32>().ok());
    match (n.next().flatten(), n.next().flatten()) {
        (Some(a), Some(b)) => (a, b),
        _ => (0, 0),
    }
}

/// git 2.46 made `git fetch` of a bundle honour `fetch.fsckObjects`.
fn fetch_checks_bundles(v: &(u32, u32)) -> bool {
    *v >= (2, 46)
}

/// Where the pack starts in a bundle: after the header's empty line.
fn pack_start(file: &std::path::Path) -> Result<u64, FetchError> {
    use std::io::BufRead;
    let io_err = |e: io::Error| FetchError::Io(file.to_owned(), e);
    let mut r = io::BufReader::new(std::fs::File::open(file).map_err(io_err)?);
    let mut at = 0u64;
    loop {
        let mut line = Vec::new();
        let n = r.read_until(b'\n', &mut line).map_err(io_err)?;
        if n == 0 {
            return Err(FetchError::Bad("a bundle whose pack is missing".into()));
        }
        at += n as u64;
        if line == b"\n" {
            return Ok(at);
        }
    }
}

/// The bundle's pack indexed by the host's git with every object checked
/// (`index-pack --strict`: fsck and connectivity), in a throwaway
/// repository that borrows the workspace's objects (a bundle's
/// prerequisites) and is removed after: nothing lands in `.git`.
pub fn fsck(top: &std::path::Path, file: &std::path::Path) -> Result<(), FetchError> {
    use std::io::{Seek, SeekFrom};
    let io_err = |p: &std::path::Path, e| FetchError::Io(p.to_owned(), e);
    let mut c = crate::verify::git(top);
    c.args(["rev-parse", "--path-format=absolute", "--git-common-dir"]);
    let common = crate::verify::run(c, "rev-parse")
        .map_err(|e| FetchError::Git("rev-parse", escaped(&e)))?;
    let tmp = tempfile::Builder::new()
        .prefix("sbx-fsck-")
        .tempdir()
        .map_err(|e| io_err(&std::env::temp_dir(), e))?;
    let repo = tmp.path().join("r.git");
    for d in ["objects/pack", "objects/info", "refs"] {
        std::fs::create_dir_all(repo.join(d)).map_err(|e| io_err(&repo, e))?;
    }
    std::fs::write(repo.join("HEAD"), "ref: refs/heads/main\n").map_err(|e| io_err(&repo, e))?;
    std::fs::write(
        repo.join("objects/info/alternates"),
        format!("{common}/objects\n"),
    )
    .map_err(|e| io_err(&repo, e))?;
    let mut f = std::fs::File::open(file).map_err(|e| io_err(file, e))?;
    f.seek(SeekFrom::Start(pack_start(file)?))
        .map_err(|e| io_err(file, e))?;
    let mut c = crate::verify::git(&repo);
    c.args(["index-pack", "--stdin", "--fix-thin", "--strict"])
        .stdin(f)
        .stdout(std::process::Stdio::null());
    crate::verify::run(c, "index-pack")
        .map_err(|e| FetchError::Bad(format!("objects git's fsck refuses ({})", escaped(&e))))?;
    Ok(())
}

/// Inflate one zlib stream from `r`, which must make exactly `size`
/// bytes; its first bytes (a delta's header) are kept. `None`: a stream
/// that makes more or less, or is broken.
fn inflate_entry(r: &mut impl io::BufRead, size: u64) -> Result<Vec<u8>, Option<io::Error>> {
    use miniz_oxide::inflate::stream::{InflateState, inflate};
    use miniz_oxide::{DataFormat, MZFlush, MZStatus};
    let mut st = InflateState::new_boxed(DataFormat::Zlib);
    let mut out = vec![0u8; 1 << 16];
    let mut head = Vec::new();
    let mut made: u64 = 0;
    loop {
        let input = r.fill_buf().map_err(Some)?;
        let empty = input.is_empty();
        let res = inflate(&mut st, input, &mut out, MZFlush::None);
        let used = res.bytes_consumed;
        let wrote = res.bytes_written;
        r.consume(used);
        let keep = wrote.min(20usize.saturating_sub(head.len()));
        head.extend_from_slice(&out[..keep]);
        made += wrote as u64;
        if made > size {
            return Err(None);
        }
        match res.status {
            Ok(MZStatus::StreamEnd) => break,
            Ok(_) if !(empty && used == 0 && wrote == 0) => {}
            _ => return Err(None),
        }
    }
    if made != size {
        return Err(None);
    }
    Ok(head)
}

/// Each quarantined head is a commit, and (unless allowed) changes
/// nothing the host's git runs or reads as configuration on a merge or
/// checkout: a post-merge or post-checkout hook in a hooks directory
/// inside the work tree runs as the user the moment the merge lands.
fn admit(top: &std::path::Path, heads: &[Head], allow: bool) -> Result<(), FetchError> {
    for h in heads {
        let mut c = crate::verify::git(top);
        c.args(["cat-file", "-t", &h.id]);
        if crate::verify::run(c, "cat-file").ok().as_deref() != Some("commit") {
            return Err(FetchError::Bad(format!(
                "branch {} whose tip is no commit",
                sanitize::field(&h.branch)
            )));
        }
    }
    if allow {
        return Ok(());
    }
    let guarded = guarded_paths(top);
    for h in heads {
        let mut c = crate::verify::git(top);
        c.args(["merge-base", "HEAD", &h.id]);
        let base = crate::verify::run(c, "merge-base").ok();
        let mut c = crate::verify::git(top);
        match &base {
            Some(b) => c.args([
                "diff-tree",
                "-r",
                "-z",
                "--name-only",
                "--no-renames",
                b,
                &h.id,
            ]),
            None => c.args(["ls-tree", "-r", "-z", "--name-only", &h.id]),
        };
        let changed = crate::verify::run(c, "diff-tree")
            .map_err(|e| FetchError::Git("diff-tree", escaped(&e)))?;
        for p in changed.split('\0').filter(|p| !p.is_empty()) {
            let why = guarded
                .iter()
                .find(|(g, _)| touches(p, g))
                .map(|(_, why)| *why)
                .or_else(|| agent_settings(p));
            if let Some(why) = why {
                return Err(FetchError::HookChange(
                    sanitize::field(&h.branch).into_owned(),
                    sanitize::field(p).into_owned(),
                    why,
                ));
            }
        }
    }
    Ok(())
}

/// Why `p` is what an AI CLI on the host runs commands from, at any depth
/// (the CLI started in a subdirectory reads that directory's): Claude
/// Code's project settings, hooks, commands, agents and skills
/// (`.claude/`), its MCP servers (`.mcp.json`), codex's project config
/// (`.codex/`). The sandbox holds the top-level ones read-only; a commit
/// carries them past that.
fn agent_settings(p: &str) -> Option<&'static str> {
    let mut parts = p.split('/');
    let last = p.rsplit('/').next().unwrap_or(p);
    if parts.any(|c| c == ".claude") {
        Some("Claude Code's project settings and hooks")
    } else if last == ".mcp.json" {
        Some("Claude Code's MCP servers")
    } else if p.split('/').any(|c| c == ".codex") {
        Some("codex's project config")
    } else {
        None
    }
}

/// A changed path `p` touches the guarded `g` when it is `g`, inside it,
/// or one of its parents (a directory made a link).
fn touches(p: &str, g: &str) -> bool {
    p == g
        || p.strip_prefix(g).is_some_and(|r| r.starts_with('/'))
        || g.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
}

/// The work-tree paths the host's git runs or reads as its own: `.husky`,
/// `core.hooksPath` when it points into the work tree, the files the
/// hooks directory's links lead to there, and every file an
/// `include`/`includeIf` of the repository's config names there.
fn guarded_paths(top: &std::path::Path) -> Vec<(String, &'static str)> {
    let mut v = vec![(".husky".to_owned(), "husky's hooks")];
    let top_abs = std::fs::canonicalize(top).unwrap_or_else(|_| top.to_owned());
    let read = |args: &[&str]| {
        let mut c = crate::verify::git_reading_hooks_path(top);
        c.args(args);
        crate::verify::run(c, "config").unwrap_or_default()
    };
    let hooks = read(&["config", "--get", "core.hooksPath"]);
    if let Some(r) = in_tree(&top_abs, &top_abs, &hooks) {
        v.push((r, "core.hooksPath"));
    }
    // A hook that is a link into the work tree (`.git/hooks/post-merge ->
    // ../../scripts/post-merge`) runs the merged tree's file.
    let dir = read(&["rev-parse", "--path-format=absolute", "--git-path", "hooks"]);
    if !dir.is_empty() {
        let dir = std::path::Path::new(&dir);
        for r in crate::verify::record::links_into(dir, dir, &top_abs) {
            if !r.starts_with(".git/") {
                v.push((r, "a hook links to it"));
            }
        }
    }
    let gitdir = top_abs.join(".git");
    for line in read(&[
        "config",
        "--local",
        "--get-regexp",
        r"^include(if\..*)?\.path$",
    ])
    .lines()
    {
        let value = line.split_once(' ').map_or("", |(_, x)| x);
        if let Some(r) = in_tree(&top_abs, &gitdir, value) {
            v.push((r, "a file .git/config includes"));
        }
    }
    v
}

/// `value`, a path relative to `base` (or absolute), as a path relative
/// to the work tree `top` when it lies inside it; `..` resolved lexically.
fn in_tree(top: &std::path::Path, base: &std::path::Path, value: &str) -> Option<String> {
    use std::path::Component;
    if value.is_empty() || value.starts_with('~') {
        return None;
    }
    let mut out = PathBuf::new();
    for c in base.join(value).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    let rel = out.strip_prefix(top).ok()?;
    let s = rel.to_str()?.trim_end_matches('/').to_owned();
    (!s.is_empty() && !s.starts_with(".git/") && s != ".git").then_some(s)
}

/// git's message about agent data, for one line on a terminal.
fn escaped(e: &impl std::fmt::Display) -> String {
    sanitize::field(&e.to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap holds at the byte: up to it is written, one more is an
    /// error and marks the stream as over.
    #[test]
    fn a_guarded_path_is_touched_by_itself_its_insides_and_its_parents() {
        assert!(touches(".githooks", ".githooks"));
        assert!(touches(".githooks/post-merge", ".githooks"));
        assert!(touches("tools", "tools/hooks"));
        assert!(!touches(".githooksx", ".githooks"));
        assert!(!touches("tools/hooksx/a", "tools/hooks"));
        let top = std::path::Path::new("/r");
        let git = top.join(".git");
        assert_eq!(
            in_tree(top, &git, "../.gitconfig").as_deref(),
            Some(".gitconfig")
        );
        assert_eq!(in_tree(top, top, ".husky/_/").as_deref(), Some(".husky/_"));
        assert_eq!(
            in_tree(top, top, "/r/ci/hooks").as_deref(),
            Some("ci/hooks")
        );
        assert_eq!(in_tree(top, top, "/etc/hooks"), None);
        assert_eq!(in_tree(top, &git, "hooks"), None);
        for p in [
            ".claude",
            ".claude/settings.json",
            "web/.claude/settings.local.json",
            ".mcp.json",
            "web/.mcp.json",
            ".codex/config.toml",
        ] {
            assert!(agent_settings(p).is_some(), "{p}");
        }
        for p in ["claude", "src/.claudex", "x.mcp.json", ".mcp.json.d/a"] {
            assert!(agent_settings(p).is_none(), "{p}");
        }
    }

    /// A real bundle of history with deltas passes with room to spare and
    /// is refused by each cap just under what it holds.
    #[test]
    fn a_bundles_inflated_sizes_are_counted_from_its_pack() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(dir.path())
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
        };
        git(&["init", "-q", "-b", "main"]);
        let mut text = String::new();
        for i in 0..30 {
            text.push_str(&format!("line {i} of a file that grows by deltas\n").repeat(50));
            std::fs::write(dir.path().join("f"), &text).unwrap();
            git(&["add", "f"]);
            git(&["commit", "-qm", &format!("c{i}")]);
        }
        git(&["repack", "-adq"]);
        let b = dir.path().join("b.bundle");
        git(&["bundle", "create", "-q", b.to_str().unwrap(), "--branches"]);
        let largest = text.len() as u64;
        inflation(&b, largest, u64::MAX, u32::MAX).unwrap();
        let e = inflation(&b, u64::MAX, u64::MAX, 10).unwrap_err();
        assert!(matches!(e, FetchError::Inflates(_)), "{e}");
        let e = inflation(&b, largest - 1, u64::MAX, u32::MAX).unwrap_err();
        assert!(matches!(e, FetchError::Inflates(_)), "{e}");
        let e = inflation(&b, u64::MAX, largest * 10, u32::MAX).unwrap_err();
        assert!(matches!(e, FetchError::Inflates(_)), "{e}");
        // Cut short: refused.
        let raw = std::fs::read(&b).unwrap();
        std::fs::write(&b, &raw[..raw.len() - 200]).unwrap();
        assert!(matches!(
            inflation(&b, u64::MAX, u64::MAX, u32::MAX),
            Err(FetchError::Bad(_))
        ));
    }

    /// What git before 2.46 fetched from a bundle unchecked (a tree that
    /// holds `.GIT`) is refused; a good bundle, and a thin one whose
    /// prerequisite the workspace holds, pass; nothing lands in `.git`.
    #[test]
    fn a_bundles_objects_are_checked_by_gits_fsck() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path();
        let git = |args: &[&str], input: Option<&str>| {
            use std::io::Write as _;
            let mut c = std::process::Command::new("git");
            c.args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(top)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let mut ch = c.spawn().unwrap();
            ch.stdin
                .take()
                .unwrap()
                .write_all(input.unwrap_or("").as_bytes())
                .unwrap();
            let o = ch.wait_with_output().unwrap();
            assert!(o.status.success(), "{args:?}");
            String::from_utf8(o.stdout).unwrap().trim().to_owned()
        };
        git(&["init", "-q", "-b", "main"], None);
        for i in 0..2 {
            std::fs::write(top.join("f"), format!("{i}\n")).unwrap();
            git(&["add", "f"], None);
            git(&["commit", "-qm", "c"], None);
        }
        let good = top.join("good.bundle");
        git(
            &["bundle", "create", "-q", good.to_str().unwrap(), "main"],
            None,
        );
        fsck(top, &good).unwrap();
        let thin = top.join("thin.bundle");
        git(
            &[
                "bundle",
                "create",
                "-q",
                thin.to_str().unwrap(),
                "main~1..main",
            ],
            None,
        );
        fsck(top, &thin).unwrap();
        let blob = git(&["hash-object", "-w", "--stdin"], Some("x\n"));
        let tree = git(&["mktree"], Some(&format!("100644 blob {blob}\t.GIT\n")));
        let commit = git(&["commit-tree", "-m", "bad", &tree], None);
        git(&["update-ref", "refs/heads/bad", &commit], None);
        let bad = top.join("bad.bundle");
        git(
            &["bundle", "create", "-q", bad.to_str().unwrap(), "main..bad"],
            None,
        );
        git(&["update-ref", "-d", "refs/heads/bad"], None);
        let packs = || {
            std::fs::read_dir(top.join(".git/objects/pack"))
                .unwrap()
                .count()
        };
        let before = packs();
        let e = fsck(top, &bad).unwrap_err();
        assert!(
            matches!(&e, FetchError::Bad(m) if m.contains("hasDotgit")),
            "{e}"
        );
        assert_eq!(packs(), before);
    }

    #[test]
    fn only_git_246_and_later_check_a_bundles_objects_in_the_fetch() {
        assert_eq!(parse_version("git version 2.39.5\n"), (2, 39));
        assert_eq!(parse_version("git version 2.47.3"), (2, 47));
        assert_eq!(parse_version("git version 2.46.0.windows.1"), (2, 46));
        assert_eq!(parse_version("nonsense"), (0, 0));
        assert!(!fetch_checks_bundles(&(2, 39)));
        assert!(!fetch_checks_bundles(&(0, 0)));
        assert!(fetch_checks_bundles(&(2, 46)));
        assert!(fetch_checks_bundles(&(3, 0)));
    }

    #[test]
    fn the_cap_refuses_the_first_byte_over() {
        let mut w = Capped {
            inner: Vec::new(),
            left: 5,
            over: false,
        };
        w.write_all(b"abc").unwrap();
        w.write_all(b"de").unwrap();
        assert!(!w.over);
        assert!(w.write_all(b"f").is_err());
        assert!(w.over);
        assert_eq!(w.inner, b"abcde");
    }
}
