//! The one side effect that matters, running git, behind a trait so the
//! fail-closed paths can be unit-tested with a recording fake; everything
//! else is tested against the real git (tests/cli.rs).
//!
//! Provisioning runs git on a shelf repository a sandbox can write, often
//! as root (in the provisioning container, or on the host). So every call
//! runs as the shelf's owner (the agent) when this process is root, with a
//! cleared environment, no system or user config, a private exec-path (in
//! the image the exec-path's `git` is the guard) and the command-line
//! overrides below, which beat anything in the repository's config.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::WorktreeError;

/// What one git call returned.
#[derive(Debug, Clone, Default)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub trait Git {
    /// `git [-c safe.directory=S]... -C cwd args...`
    fn run(&self, cwd: &Path, safe: &[PathBuf], args: &[&OsStr]) -> Result<Out, WorktreeError> {
        self.run_env(cwd, safe, &[], args)
    }
    /// The same with `env` added (GIT_DIR and the like).
    fn run_env(
        &self,
        cwd: &Path,
        safe: &[PathBuf],
        env: &[(&str, &OsStr)],
        args: &[&OsStr],
    ) -> Result<Out, WorktreeError>;
    /// Read-only calls that need nothing of each other, at once where the
    /// implementation can; the answers in order.
    fn run_all(&self, calls: &[Call<'_>]) -> Vec<Result<Out, WorktreeError>> {
        calls
            .iter()
            .map(|(cwd, safe, args)| self.run(cwd, safe, args))
            .collect()
    }
}

/// One call of `Git::run_all`: cwd, safe paths, arguments.
pub type Call<'a> = (&'a Path, Vec<PathBuf>, Vec<&'a OsStr>);

/// Where the sandbox image keeps the real git (base-image/Dockerfile).
pub const SANDBOX_REAL_GIT: &str = "/usr/libexec/sbx/git";

/// A directory that root staged with `stage_private_git` (sbx-guest does,
/// before it runs provisioning as the agent, who cannot read the real git).
pub const PRIVATE_GIT_ENV: &str = "SBX_WORKTREE_PRIVATE_GIT";

/// What `GIT_ALLOW_PROTOCOL` allows: every transport provisioning may use,
/// or only `file` (origin's branches from the host's refs), which leaves
/// no remote helper (`remote.*.vcs`, `ext::`) and no ssh to run.
pub const PROTOCOLS: &str = "file:https:http:ssh";
pub const PROTOCOLS_LOCAL: &str = "file";

/// Config keys (git help config, 2.39-2.47) that make git run a program,
/// overridden on the command line (command scope beats the repository's
/// and a worktree's config). `core.hooksPath=/dev/null` turns off every
/// hook (post-checkout, reference-transaction, post-index-change, ...).
pub const OVERRIDES: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.sshCommand", "ssh -o BatchMode=yes"),
    ("core.askPass", "false"),
    ("core.editor", "false"),
    ("core.pager", "cat"),
    ("sequence.editor", "false"),
    // The empty helper empties the list, url-specific ones included.
    ("credential.helper", ""),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    // No `gc --auto` or `maintenance run --auto` after a fetch.
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    // Run when the shelf has alternates (objects/info/alternates is the
    // shelf's): `true` lists no refs of theirs.
    ("core.alternateRefsCommand", "true"),
];

/// The environment every call gets (after clearing the caller's): the
/// variables beat their config keys (GIT_ALLOW_PROTOCOL beats every
/// protocol.*.allow, so no `ext::` URL runs a command).
pub const ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_ATTR_NOSYSTEM", "1"),
    ("GIT_PROTOCOL_FROM_USER", "0"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_ASKPASS", "false"),
    ("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
    ("GIT_EDITOR", "false"),
    ("GIT_SEQUENCE_EDITOR", "false"),
    ("GIT_PAGER", "cat"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("LC_ALL", "C"),
];

/// Config keys that run a program (or point git at other config or
/// another repository) under a name of the repository's choosing, so no
/// override can reach them: a shelf whose config has one is refused
/// (`Shelf::check_config`). Lower-case, `*` for the name.
pub const REFUSED: &[&str] = &[
    "include.*",
    "includeif.*",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "diff.*.textconv",
    "diff.*.command",
    "merge.*.driver",
    "remote.*.vcs",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "url.*.insteadof",
    "url.*.pushinsteadof",
    "core.alternaterefscommand",
    "core.worktree",
];

/// Keys that run a program but that no command provisioning runs ever
/// reaches (documented so the list above is complete, not refused):
/// alias.* (never shadows a builtin; provisioning runs only builtins),
/// pager.*, web.browser, browser.*.cmd, browser.*.path, man.*.cmd,
/// man.*.path, difftool.*.cmd, mergetool.*.cmd, sendemail.*,
/// submodule.*.update (only `git submodule update`), uploadpack.packObjectsHook
/// (protected config only), core.gitProxy (git:// is not allowed).
pub const UNREACHED: &[&str] = &[
    "alias.*",
    "pager.*",
    "web.browser",
    "browser.*.cmd",
    "man.*.cmd",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "sendemail.*",
    "submodule.*.update",
    "uploadpack.packobjectshook",
    "core.gitproxy",
];

/// Whether a config key (as `git config --list --name-only` prints it)
/// matches one of `pats`.
pub fn matches(pats: &[&str], key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    pats.iter().any(|p| {
        let Some((head, tail)) = p.split_once(".*") else {
            return key == *p;
        };
        // "section.*" matches any key of the section; "section.*.var" any
        // subsection's var (the subsection may itself contain dots).
        let Some(rest) = key.strip_prefix(head).and_then(|r| r.strip_prefix('.')) else {
            return false;
        };
        tail.is_empty() || (rest.ends_with(tail) && rest.len() > tail.len())
    })
}

/// The real binary, run as described at the top of this file.
#[derive(Debug)]
pub struct RealGit {
    program: PathBuf,
    exec_path: Option<PathBuf>,
    run_as: Option<(u32, u32)>,
    path: OsString,
    dir: tempfile::TempDir,
    protocols: &'static str,
}

/// Stage a private copy of the real git in `dir` (root's, 0711: whoever
/// runs git can execute it but not read it out) and an exec-path whose
/// `git` is that copy: `dir/git` and `dir/exec`.
pub fn stage_private_git(real: &Path, dir: &Path) -> Result<(PathBuf, PathBuf), WorktreeError> {
    let io = |p: &Path, e| WorktreeError::Io(p.to_owned(), e);
    let no_git = |e| WorktreeError::NoGit(real.display().to_string(), e);
    // Its exec-path asked while the copy is made (each takes milliseconds).
    let ask = Command::new(real)
        .arg("--exec-path")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(no_git)?;
    let copy = dir.join("git");
    let copied = std::fs::copy(real, &copy).map_err(|e| io(&copy, e));
    let o = ask.wait_with_output().map_err(no_git)?;
    copied?;
    set_mode(&copy, 0o711)?;
    let from = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim_end());
    if !o.status.success() || !from.is_absolute() {
        return Err(no_git(std::io::Error::other("no exec-path")));
    }
    let ep = dir.join("exec");
    mirror_exec_path(&from, &ep, &copy)?;
    Ok((copy, ep))
}

impl RealGit {
    /// `owner`: who git runs as when this process is root.
    pub fn new(owner: (u32, u32)) -> Result<Self, WorktreeError> {
        let me = nix::unistd::geteuid().as_raw();
        let run_as = (me == 0 && owner.0 != 0).then_some(owner);
        let dir = tempfile::Builder::new()
            .prefix("sbx-worktree.")
            .tempdir()
            .map_err(|e| WorktreeError::Io(std::env::temp_dir(), e))?;
        let io = |p: &Path, e| WorktreeError::Io(p.to_owned(), e);
        let d = dir.path().to_owned();
        // The owner reads the config and runs the git copy; writes none of it.
        set_mode(&d, 0o755)?;
        std::fs::create_dir(d.join("home")).map_err(|e| io(&d, e))?;
        let real = Path::new(SANDBOX_REAL_GIT);
        let sandbox = nix::unistd::access(real, nix::unistd::AccessFlags::X_OK).is_ok();
        let staged = std::env::var_os(PRIVATE_GIT_ENV)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let mut path = OsString::new();
        let (program, exec_path) = if let Some(s) = staged {
            let ep = s.join("exec");
            path.push(&ep);
            path.push(":");
            (s.join("git"), Some(ep))
        } else if sandbox {
            // In the image: a private copy (execute-only: whoever runs it
            // cannot read it out) and an exec-path whose git is that copy.
            let (copy, ep) = stage_private_git(real, &d)?;
            path.push(&ep);
            path.push(":");
            (copy, Some(ep))
        } else {
            let found = which("git").ok_or_else(|| {
                WorktreeError::NoGit(
                    "git".into(),
                    std::io::Error::new(std::io::ErrorKind::NotFound, "not on PATH"),
                )
            })?;
            if let Some(p) = found.parent() {
                path.push(p);
                path.push(":");
            }
            (found, None)
        };
        path.push("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        Ok(Self {
            program,
            exec_path,
            run_as,
            path,
            dir,
            protocols: PROTOCOLS,
        })
    }

    /// Only `file://` transports (see PROTOCOLS_LOCAL).
    pub fn local_only(mut self, on: bool) -> Self {
        if on {
            self.protocols = PROTOCOLS_LOCAL;
        }
        self
    }

    /// The command for `args`, with the environment and overrides, run as
    /// the owner; `safe` goes into a private global config, so the
    /// upload-pack of a local clone (which git starts without `-c`) has it.
    pub fn command(&self, safe: &[PathBuf]) -> Result<Command, WorktreeError> {
        self.write_global(safe)?;
        Ok(self.build(safe))
    }

    fn write_global(&self, safe: &[PathBuf]) -> Result<(), WorktreeError> {
        let global = self.dir.path().join("gitconfig");
        let mut text = String::from("[safe]\n");
        for s in safe {
            text.push_str(&format!(
                "\tdirectory = {}\n",
                quote_value(&s.to_string_lossy())
            ));
        }
        std::fs::write(&global, text).map_err(|e| WorktreeError::Io(global.clone(), e))?;
        set_mode(&global, 0o644)
    }

    /// The command, with the global config as last written.
    fn build(&self, safe: &[PathBuf]) -> Command {
        let home = self.dir.path().join("home");
        let global = self.dir.path().join("gitconfig");
        let mut c = Command::new(&self.program);
        c.env_clear()
            .env("PATH", &self.path)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("GIT_CONFIG_GLOBAL", &global)
            .env("GIT_ALLOW_PROTOCOL", self.protocols)
            .envs(ENV.iter().copied());
        if let Some(ep) = &self.exec_path {
            c.env("GIT_EXEC_PATH", ep);
        }
        for (k, v) in OVERRIDES {
            c.arg("-c").arg(format!("{k}={v}"));
        }
        for s in safe {
            let mut v = OsString::from("safe.directory=");
            v.push(s);
            c.arg("-c").arg(v);
        }
        if let Some((u, g)) = self.run_as {
            // std drops the supplementary groups with the uid.
            c.uid(u).gid(g);
        }
        c.current_dir("/").stdin(Stdio::null());
        c
    }
}

/// A config value in double quotes (git's syntax: \" and \\ escaped).
fn quote_value(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn set_mode(p: &Path, mode: u32) -> Result<(), WorktreeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| WorktreeError::Io(p.to_owned(), e))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok())
}

/// Builtins a transport runs by their dashed name (through PATH, whose
/// first directory is the exec-path): the mirror keeps a link for these.
const DASHED: &[&str] = &["git-upload-pack", "git-receive-pack", "git-upload-archive"];

/// A copy of the real git's exec-path `from` in which every name that leads to
/// `git` (the guard, in the image) leads to `git_copy`; the rest (scripts,
/// remote helpers) are links to the originals, which find `git` through
/// the exec-path git puts first on PATH.
fn mirror_exec_path(from: &Path, to: &Path, git_copy: &Path) -> Result<(), WorktreeError> {
    let io = |p: &Path, e| WorktreeError::Io(p.to_owned(), e);
    std::fs::create_dir(to).map_err(|e| io(to, e))?;
    let guard = std::fs::canonicalize(from.join("git")).ok();
    std::os::unix::fs::symlink(git_copy, to.join("git")).map_err(|e| io(to, e))?;
    for e in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let e = e.map_err(|e| io(from, e))?;
        let name = e.file_name();
        if name == "git" {
            continue;
        }
        let orig = e.path();
        let dst = to.join(&name);
        let link = std::fs::read_link(&orig).ok();
        let target = match link {
            // `git-add -> git`: a builtin, which git never runs by its
            // dashed name (it runs `git add`), so no link (each is a file
            // made per start: ~130 of them took ~100 ms on a busy disk),
            // but for those a transport runs by name, through PATH.
            Some(l) if l.is_relative() && l.components().count() == 1 && l == Path::new("git") => {
                if !DASHED.iter().any(|d| name == *d) {
                    continue;
                }
                l
            }
            Some(l) if l.is_relative() && l.components().count() == 1 => l,
            Some(_) if guard.is_some() && std::fs::canonicalize(&orig).ok() == guard => {
                git_copy.to_owned()
            }
            _ => orig,
        };
        std::os::unix::fs::symlink(&target, &dst).map_err(|e| io(&dst, e))?;
    }
    Ok(())
}

impl Git for RealGit {
    fn run_env(
        &self,
        cwd: &Path,
        safe: &[PathBuf],
        env: &[(&str, &OsStr)],
        args: &[&OsStr],
    ) -> Result<Out, WorktreeError> {
        let mut c = self.command(safe)?;
        c.envs(env.iter().copied());
        c.arg("-C").arg(cwd).args(args);
        let name = self.program.display().to_string();
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let o = spawn(&mut c)
            .and_then(|c| c.wait_with_output())
            .map_err(|e| WorktreeError::NoGit(name, e))?;
        Ok(out(&o))
    }

    /// Every call started, then each waited for in turn (one that fills
    /// its pipe waits until read: none waits on another). The private
    /// global config names the safe paths of them all (every one ours).
    fn run_all(&self, calls: &[Call<'_>]) -> Vec<Result<Out, WorktreeError>> {
        let mut all: Vec<PathBuf> = calls.iter().flat_map(|(_, s, _)| s.clone()).collect();
        all.sort();
        all.dedup();
        if let Err(e) = self.write_global(&all) {
            return calls.iter().map(|_| Err(clone_err(&e))).collect();
        }
        let name = self.program.display().to_string();
        let started: Vec<_> = calls
            .iter()
            .map(|(cwd, safe, args)| {
                let mut c = self.build(safe);
                c.arg("-C").arg(cwd).args(args);
                spawn(c.stdout(Stdio::piped()).stderr(Stdio::piped()))
            })
            .collect();
        started
            .into_iter()
            .map(|c| {
                c.and_then(|c| c.wait_with_output())
                    .map(|o| out(&o))
                    .map_err(|e| WorktreeError::NoGit(name.clone(), e))
            })
            .collect()
    }
}

/// Starts `c`, again while its program is busy (ETXTBSY). The staged git
/// was written a moment ago by a multi-threaded process (sbx-guest), and a
/// child another of its threads forked during the copy holds the written
/// file open until that child execs: a moment, but an exec meanwhile fails.
fn spawn(c: &mut Command) -> std::io::Result<std::process::Child> {
    let mut wait = std::time::Duration::from_millis(1);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match c.spawn() {
            Err(e)
                if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                    && waited < std::time::Duration::from_secs(2) =>
            {
                std::thread::sleep(wait);
                waited += wait;
                wait = (wait * 2).min(std::time::Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

fn out(o: &std::process::Output) -> Out {
    Out {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn clone_err(e: &WorktreeError) -> WorktreeError {
    match e {
        WorktreeError::Io(p, e) => {
            WorktreeError::Io(p.clone(), std::io::Error::new(e.kind(), e.to_string()))
        }
        other => WorktreeError::Git("config".into(), other.to_string()),
    }
}

#[cfg(test)]
pub mod fake {
    //! A git that records each call and answers from a script.
    use super::*;
    use std::cell::RefCell;

    #[derive(Debug, Default)]
    pub struct FakeGit {
        pub calls: RefCell<Vec<String>>,
        /// (argv prefix, answer): the first match answers; else ok, empty.
        pub script: Vec<(String, Out)>,
    }

    impl Git for FakeGit {
        fn run_env(
            &self,
            _cwd: &Path,
            _safe: &[PathBuf],
            _env: &[(&str, &OsStr)],
            args: &[&OsStr],
        ) -> Result<Out, WorktreeError> {
            let line = args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            self.calls.borrow_mut().push(line.clone());
            Ok(self
                .script
                .iter()
                .find(|(p, _)| line.starts_with(p.as_str()))
                .map(|(_, o)| o.clone())
                .unwrap_or(Out {
                    ok: true,
                    ..Out::default()
                }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program still open for writing somewhere cannot be executed
    /// (ETXTBSY); `spawn` waits until it is closed.
    #[test]
    fn a_program_busy_for_a_moment_still_starts() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let prog = t.path().join("prog");
        let mut w = std::fs::File::create(&prog).unwrap();
        w.write_all(b"#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let busy = Command::new(&prog).spawn().map(|mut c| c.wait());
        assert_eq!(
            busy.err().and_then(|e| e.raw_os_error()),
            Some(nix::errno::Errno::ETXTBSY as i32),
            "the program was not busy while open for writing"
        );
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(w);
        });
        let st = spawn(&mut Command::new(&prog)).unwrap().wait().unwrap();
        closer.join().unwrap();
        assert!(st.success());
    }

    #[test]
    fn patterns() {
        assert!(matches(REFUSED, "filter.lfs.smudge"));
        assert!(matches(REFUSED, "filter.a.b.process"));
        assert!(matches(REFUSED, "includeIf.gitdir:/x/.path"));
        assert!(matches(REFUSED, "include.path"));
        assert!(matches(REFUSED, "url.ext::sh -c x.insteadOf"));
        assert!(matches(REFUSED, "Core.AlternateRefsCommand"));
        assert!(!matches(REFUSED, "filter.lfs.required"));
        assert!(!matches(REFUSED, "remote.origin.url"));
        assert!(!matches(REFUSED, "branch.x.remote"));
        assert!(!matches(REFUSED, "diff.textconv"));
        assert!(matches(UNREACHED, "alias.fetch"));
    }

    /// `run_all` answers each call as `run` would, in order, whatever
    /// their sizes (a first answer of 200 kB, beyond a pipe's buffer, and
    /// a failing one among them).
    #[test]
    fn run_all_answers_as_run_does() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let git = |args: &[&str], input: Option<String>| {
            use std::io::Write;
            let mut c = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(r)
                .args(args)
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            if let Some(i) = input {
                c.stdin.take().unwrap().write_all(i.as_bytes()).unwrap();
            }
            assert!(c.wait().unwrap().success());
        };
        git(&["init", "-q", "-b", "main"], None);
        git(&["commit", "-q", "--allow-empty", "-m", "one"], None);
        let head = String::from_utf8(
            Command::new("git")
                .arg("-C")
                .arg(r)
                .args(["rev-parse", "HEAD"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let refs: String = (0..3000)
            .map(|i| {
                format!(
                    "create refs/heads/branch-with-a-long-name-{i:05} {}",
                    head.trim()
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        git(&["update-ref", "--stdin"], Some(refs + "\n"));
        let me = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        let g = RealGit::new(me).unwrap();
        let safe = vec![r.to_owned(), r.join(".git")];
        fn os(a: &[&'static str]) -> Vec<&'static OsStr> {
            a.iter().map(|s| OsStr::new(*s)).collect()
        }
        let calls: Vec<Call<'_>> = vec![
            (r, safe.clone(), os(&["for-each-ref"])),
            (
                r,
                safe.clone(),
                os(&["rev-parse", "--verify", "-q", "nope"]),
            ),
            (r, safe.clone(), os(&["rev-parse", "HEAD"])),
        ];
        let all = g.run_all(&calls);
        assert_eq!(all.len(), 3);
        for ((cwd, safe, args), got) in calls.iter().zip(all) {
            let got = got.unwrap();
            let want = g.run(cwd, safe, args).unwrap();
            assert_eq!((got.ok, &got.stdout), (want.ok, &want.stdout), "{args:?}");
        }
        let big = g.run(r, &safe, &os(&["for-each-ref"])).unwrap();
        assert!(big.stdout.len() > 200_000, "{}", big.stdout.len());
    }

    /// Every key git documents as running a program is overridden,
    /// refused, or listed as never reached: none is forgotten.
    #[test]
    fn every_program_key_is_handled() {
        let overridden: Vec<String> = OVERRIDES
            .iter()
            .map(|(k, _)| k.to_ascii_lowercase())
            .collect();
        for k in [
            "core.hooksPath",
            "core.fsmonitor",
            "core.sshCommand",
            "core.askPass",
            "core.editor",
            "core.pager",
            "sequence.editor",
            "credential.helper",
            "credential.https://x.helper",
            "diff.external",
            "gpg.program",
            "gpg.ssh.program",
            "gpg.ssh.defaultKeyCommand",
            "core.attributesFile",
            "filter.x.clean",
            "filter.x.smudge",
            "filter.x.process",
            "diff.x.textconv",
            "diff.x.command",
            "merge.x.driver",
            "remote.o.vcs",
            "remote.o.uploadpack",
            "remote.o.receivepack",
            "url.x.insteadOf",
            "include.path",
            "includeIf.onbranch:x.path",
            "core.alternateRefsCommand",
            "alias.x",
            "pager.log",
            "web.browser",
            "browser.x.cmd",
            "man.x.cmd",
            "difftool.x.cmd",
            "mergetool.x.cmd",
            "sendemail.toCmd",
            "submodule.x.update",
            "uploadpack.packObjectsHook",
            "core.gitProxy",
            "protocol.ext.allow",
        ] {
            let l = k.to_ascii_lowercase();
            let credential = l.starts_with("credential.") && l.ends_with(".helper");
            let protocol = l.starts_with("protocol.");
            assert!(
                overridden.contains(&l)
                    || matches(REFUSED, k)
                    || matches(UNREACHED, k)
                    || credential
                    || protocol,
                "{k} is not handled"
            );
        }
    }
}
