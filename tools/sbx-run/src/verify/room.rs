//! Inside the clean room: sbx-run itself (mounted read-only from the host)
//! as root in a throwaway container with no network, no home and no host
//! path but its input. It unpacks the commits, works out which of them
//! change what the hooks run (before any hook has run), then checks each
//! commit in a fresh repository of its own, running the trusted hooks as
//! an unprivileged uid, and writes one JSON verdict per commit.
//!
//! The hooks may run the commit's own code, so they run as `hook_uid`,
//! never as the driver: they cannot write its stdout, signal it or trace
//! it, and everything that uid started is killed before the next commit,
//! which gets a fresh repository, home and temporary directory.

use std::io::{Read, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use sbx_core::Exit;
use sbx_core::error::BoxError;

use super::VerifyError;
use super::plan::{self, Commit, Hook, Outcome, Plan, Verdict};
use super::record::{HOOKS_DIR, Location};

const ROOT: &str = "/tmp/sbx-verify";
/// The image's PATH (the hooks' tools: node, make, …).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Lines of a failing hook's output kept.
const TAIL: usize = 20;
/// Bytes of a hook's output read at most per stream (the tail is kept).
const READ_CAP: usize = 1 << 20;

pub fn main(input: &Path) -> Result<ExitCode, BoxError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let plan_path = input.join(plan::PLAN_FILE);
    let text = std::fs::read(&plan_path).map_err(|e| io(&plan_path, e))?;
    let plan: Plan = serde_json::from_slice(&text)
        .map_err(|e| VerifyError::Room(format!("{}: {e}", plan_path.display())))?;
    let root = Path::new(ROOT);
    std::fs::create_dir_all(root).map_err(|e| io(root, e))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| io(root, e))?;
    let git = RoomGit::new(root)?;
    let pristine = root.join("pristine.git");
    git.run(
        Command::new(&git.bin)
            .args(["init", "-q", "--bare", "--template="])
            .arg(&pristine),
        "init",
    )?;
    let pack = input.join(plan::PACK_FILE);
    let pack_file = std::fs::File::open(&pack).map_err(|e| io(&pack, e))?;
    // index-pack checks every object's hash: what is checked is what the
    // objects are, whatever the host's object files said.
    git.run(
        git.cmd(&pristine)
            .args(["index-pack", "--stdin"])
            .stdin(pack_file),
        "index-pack",
    )?;
    let shallow: String = plan.boundary.iter().map(|b| format!("{b}\n")).collect();
    if !shallow.is_empty() {
        let p = pristine.join("shallow");
        std::fs::write(&p, &shallow).map_err(|e| io(&p, e))?;
    }
    let trusted = input.join(plan::TRUSTED_DIR).join(HOOKS_DIR);
    let texts = hook_texts(&trusted);
    // Every flag first, before any of the commits' code has run.
    let flags: Vec<Vec<String>> = plan
        .commits
        .iter()
        .map(|c| flags(&git, &pristine, c, &plan.record.location, &texts))
        .collect::<Result<_, _>>()?;
    let mut out = std::io::stdout().lock();
    for (n, (c, flags)) in plan.commits.iter().zip(flags).enumerate() {
        let dir = root.join(format!("c{n}"));
        let mut v = check_commit(&git, &plan, &pristine, c, &trusted, &dir)?;
        v.flags = flags;
        let _ = std::fs::remove_dir_all(&dir);
        serde_json::to_writer(&mut out, &v).map_err(|e| VerifyError::Room(e.to_string()))?;
        out.write_all(b"\n")
            .and_then(|()| out.flush())
            .map_err(|e| io(Path::new("stdout"), e))?;
    }
    Ok(Exit::Ok.into())
}

/// The image's real git, runnable in the room. Images made by sbx keep it
/// root-only at /usr/libexec/sbx/git behind the git guard (which needs the
/// sandbox's broker): a copy with its own exec-path serves the hooks here.
struct RoomGit {
    bin: PathBuf,
    exec_path: PathBuf,
}

impl RoomGit {
    fn new(root: &Path) -> Result<Self, VerifyError> {
        let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
        let real = ["/usr/libexec/sbx/git", "/usr/bin/git"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| {
                std::fs::canonicalize(p).is_ok_and(|c| {
                    c.file_name().is_some_and(|n| n != "sbx-git-client") && c.is_file()
                })
            })
            .ok_or_else(|| VerifyError::Room("the image has no git".into()))?;
        let out = Command::new(&real)
            .arg("--exec-path")
            .output()
            .map_err(|e| io(&real, e))?;
        let upstream = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let exec_path = root.join("git-core");
        std::fs::create_dir_all(&exec_path).map_err(|e| io(&exec_path, e))?;
        let bin = exec_path.join("git");
        std::fs::copy(&real, &bin).map_err(|e| io(&bin, e))?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io(&bin, e))?;
        // Builtins are links to `git`: to the copy; the rest (git-sh-setup,
        // …) to the original.
        if let Ok(rd) = std::fs::read_dir(&upstream) {
            for e in rd.flatten() {
                let name = e.file_name();
                if name == "git" {
                    continue;
                }
                let to = match std::fs::read_link(e.path()) {
                    Ok(t) if t == Path::new("git") => PathBuf::from("git"),
                    _ => e.path(),
                };
                let _ = std::os::unix::fs::symlink(to, exec_path.join(&name));
            }
        }
        Ok(Self { bin, exec_path })
    }

    /// Root's git in `dir`, reading no config but its own.
    fn cmd(&self, dir: &Path) -> Command {
        let mut c = Command::new(&self.bin);
        c.env_clear()
            .env("PATH", PATH)
            .env("GIT_EXEC_PATH", &self.exec_path)
            .env("HOME", ROOT)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "core.commitGraph=false", "-c", "safe.directory=*"])
            .arg("-C")
            .arg(dir)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, c: &mut Command, what: &str) -> Result<Vec<u8>, VerifyError> {
        let out = c
            .output()
            .map_err(|e| VerifyError::Io(self.bin.clone(), e))?;
        if !out.status.success() {
            return Err(VerifyError::Git(
                what.into(),
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        Ok(out.stdout)
    }
}

/// The trusted hooks' text, for finding the files they name.
pub(super) fn hook_texts(trusted: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(trusted).into_iter().flatten().flatten() {
        if let Ok(b) = std::fs::read(e.path()) {
            out.push(String::from_utf8_lossy(&b).into_owned());
        }
    }
    out
}

/// Whether `text` names `path` as a word (`./scripts/lint.sh`, `make lint`).
fn names(text: &str, path: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    text.match_indices(path).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + path.len()..].chars().next();
        let before_ok = match before {
            None => true,
            Some('/') => {
                text[..i].ends_with("./")
                    || text[..i].ends_with("\"$(git rev-parse --show-toplevel)/")
            }
            Some(c) => !is_word(c),
        };
        before_ok && after.is_none_or(|c| !is_word(c))
    })
}

/// Tools that run what the work tree's package files define.
const PACKAGE_TOOLS: &[&str] = &["npm", "npx", "yarn", "pnpm", "bun", "lint-staged", "husky"];

/// The first tool of the work tree a hook's `text` runs, outside comments:
/// a package tool or make (they run the tree's `package.json`, Makefile),
/// or a script named by a relative path (`./scripts/lint.sh`). The same
/// words make `flags` report a change to those files.
pub(super) fn tree_tool(text: &str) -> Option<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(w) = PACKAGE_TOOLS
        .iter()
        .chain(&["make"])
        .find(|w| names(&code, w))
    {
        return Some((*w).to_owned());
    }
    code.split(|c: char| {
        c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '`' | '"' | '\'')
    })
    .find(|t| (t.starts_with("./") && t.len() > 2) || t.starts_with("../"))
    .map(str::to_owned)
}

/// What a commit changes that the hooks run: a file in a hooks directory
/// in the tree, anything under `.husky/`, a file a hook (or the parent's
/// husky script) names, `package.json` when a hook runs a package script,
/// a Makefile when a hook runs make.
fn flags(
    git: &RoomGit,
    pristine: &Path,
    c: &Commit,
    location: &Location,
    trusted: &[String],
) -> Result<Vec<String>, VerifyError> {
    let mut diff = git.cmd(pristine);
    diff.args(["diff-tree", "-r", "-z", "--name-only", "--no-commit-id"]);
    match &c.parent {
        Some(p) => diff.args([p, &c.id]),
        None => diff.args(["--root", &c.id]),
    };
    let changed = git.run(&mut diff, "diff-tree")?;
    let mut texts: Vec<String> = trusted.to_vec();
    // husky's `_` runs .husky/<hook> from the tree: what it names counts.
    let base = c.parent.as_deref().unwrap_or(&c.id);
    for h in ["pre-commit", "commit-msg"] {
        let mut show = git.cmd(pristine);
        show.args(["cat-file", "blob", &format!("{base}:.husky/{h}")]);
        if let Ok(o) = show.stderr(Stdio::null()).output()
            && o.status.success()
        {
            texts.push(String::from_utf8_lossy(&o.stdout).into_owned());
        }
    }
    let all = texts.join("\n");
    let mentions = |words: &[&str]| words.iter().any(|w| names(&all, w));
    let packages = mentions(PACKAGE_TOOLS);
    let make = mentions(&["make"]);
    let tree_hooks = match location {
        Location::Tree(rel) => Some(format!("{rel}/")),
        _ => None,
    };
    let mut hit = Vec::new();
    for path in changed
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(String::from_utf8_lossy)
    {
        let base_name = path.rsplit('/').next().unwrap_or(&path);
        let why = path.starts_with(".husky/")
            || tree_hooks.as_deref().is_some_and(|t| path.starts_with(t))
            || names(&all, &path)
            || (packages
                && (base_name == "package.json"
                    || base_name.starts_with(".lintstagedrc")
                    || base_name.starts_with("lint-staged.config")))
            || (make && matches!(&*path, "Makefile" | "makefile" | "GNUmakefile"));
        if why && hit.len() < plan::FLAGS_CAP {
            hit.push(path.into_owned());
        }
    }
    Ok(if hit.is_empty() {
        Vec::new()
    } else {
        vec![format!("hook inputs changed: {}", hit.join(", "))]
    })
}

/// One commit in a fresh repository: the commit's tree in the index and
/// the files, HEAD at its parent (as while it was being committed), the
/// trusted hooks where git will look, then pre-commit and commit-msg.
fn check_commit(
    git: &RoomGit,
    plan: &Plan,
    pristine: &Path,
    c: &Commit,
    trusted: &Path,
    dir: &Path,
) -> Result<Verdict, VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let repo = dir.join("repo");
    let home = dir.join("home");
    let tmp = dir.join("tmp");
    for d in [&home, &tmp] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    git.run(
        Command::new(&git.bin)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["init", "-q", "--template="])
            .arg(&repo),
        "init",
    )?;
    let alt = repo.join(".git/objects/info");
    std::fs::create_dir_all(&alt).map_err(|e| io(&alt, e))?;
    let objects = pristine.join("objects");
    std::fs::write(
        alt.join("alternates"),
        format!("{}\n", objects.to_string_lossy()),
    )
    .map_err(|e| io(&alt, e))?;
    if pristine.join("shallow").exists() {
        std::fs::copy(pristine.join("shallow"), repo.join(".git/shallow"))
            .map_err(|e| io(&repo, e))?;
    }
    git.run(
        git.cmd(&repo).args(["read-tree", "--reset", "-u", &c.id]),
        "read-tree",
    )?;
    if let Some(p) = &c.parent {
        git.run(
            git.cmd(&repo).args(["update-ref", "--no-deref", "HEAD", p]),
            "update-ref",
        )?;
    }
    let msg = git.run(
        git.cmd(pristine).args(["log", "-1", "--format=%B", &c.id]),
        "log",
    )?;
    let msg_path = repo.join(".git/COMMIT_EDITMSG");
    std::fs::write(&msg_path, msg).map_err(|e| io(&msg_path, e))?;
    let hooks = match &plan.record.location {
        Location::GitDir => repo.join(".git/hooks"),
        Location::Tree(rel) => repo.join(rel),
        Location::Absolute(_) => dir.join("hooks"),
    };
    place_hooks(trusted, &hooks)?;
    chown_tree(dir, plan.hook_uid)?;
    let hook_env = HookEnv {
        git,
        uid: plan.hook_uid,
        repo: &repo,
        home: &home,
        tmp: &tmp,
        hooks: &hooks,
        timeout: Duration::from_secs(plan.hook_timeout),
    };
    for (hook, args) in [
        (Hook::PreCommit, Vec::new()),
        (Hook::CommitMsg, vec![msg_path.clone()]),
    ] {
        if let Some(mut v) = unrunnable(trusted, &hooks, hook, &c.id) {
            v.flags = Vec::new();
            return Ok(v);
        }
        let (status, output) = hook_env.run(hook, &args)?;
        if let Some(reason) = status {
            return Ok(Verdict {
                id: c.id.clone(),
                result: Outcome::Fail,
                hook: Some(hook),
                exit_code: reason.1,
                reason: Some(reason.0),
                output: Some(output),
                flags: Vec::new(),
            });
        }
    }
    Ok(Verdict {
        id: c.id.clone(),
        result: Outcome::Pass,
        hook: None,
        reason: None,
        exit_code: None,
        output: None,
        flags: Vec::new(),
    })
}

/// A hook that was recorded but cannot run here (a link to a file outside
/// the tree, say) fails the commit: git would skip it silently.
fn unrunnable(trusted: &Path, placed: &Path, hook: Hook, id: &str) -> Option<Verdict> {
    std::fs::symlink_metadata(trusted.join(hook.name())).ok()?;
    let recorded_exec = std::fs::metadata(trusted.join(hook.name()))
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(true);
    let runnable = std::fs::metadata(placed.join(hook.name()))
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    (recorded_exec && !runnable).then(|| Verdict {
        id: id.to_owned(),
        result: Outcome::Fail,
        hook: Some(hook),
        reason: Some("the recorded hook cannot be run in the clean room (a link to a file it does not have?)".into()),
        exit_code: None,
        output: None,
        flags: Vec::new(),
    })
}

/// The trusted hooks where git will look, replacing whatever the commit
/// put there (a tracked `.husky/_/pre-commit` is not a hook).
fn place_hooks(trusted: &Path, dest: &Path) -> Result<(), VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dest).map_err(|e| io(dest, e))?,
        Ok(_) => std::fs::remove_file(dest).map_err(|e| io(dest, e))?,
        Err(_) => {}
    }
    std::fs::create_dir_all(dest).map_err(|e| io(dest, e))?;
    for e in std::fs::read_dir(trusted).into_iter().flatten().flatten() {
        let to = dest.join(e.file_name());
        let m = std::fs::symlink_metadata(e.path()).map_err(|err| io(&e.path(), err))?;
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(e.path()).map_err(|err| io(&e.path(), err))?;
            std::os::unix::fs::symlink(t, &to).map_err(|err| io(&to, err))?;
        } else {
            std::fs::copy(e.path(), &to).map_err(|err| io(&to, err))?;
        }
    }
    Ok(())
}

/// Give a commit's directory to the hooks' uid (links themselves, not
/// what they name).
fn chown_tree(dir: &Path, uid: u32) -> Result<(), VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid)).map_err(|e| io(dir, e))?;
    let m = std::fs::symlink_metadata(dir).map_err(|e| io(dir, e))?;
    if m.is_dir() {
        for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let e = e.map_err(|e| io(dir, e))?;
            chown_tree(&e.path(), uid)?;
        }
    }
    Ok(())
}

struct HookEnv<'a> {
    git: &'a RoomGit,
    uid: u32,
    repo: &'a Path,
    home: &'a Path,
    tmp: &'a Path,
    hooks: &'a Path,
    timeout: Duration,
}

/// A failure's reason and exit code; None when the hook passed.
type Status = Option<(String, Option<i32>)>;

impl HookEnv<'_> {
    /// `git hook run` as the hooks' uid, with the trusted hooks directory
    /// pinned in the environment (above any config file the commit's code
    /// could write), then every process of that uid killed.
    fn run(&self, hook: Hook, args: &[PathBuf]) -> Result<(Status, String), VerifyError> {
        let mut c = Command::new(&self.git.bin);
        c.env_clear()
            .env("PATH", PATH)
            .env("HOME", self.home)
            .env("TMPDIR", self.tmp)
            .env("LANG", "C.UTF-8")
            .env("GIT_EXEC_PATH", &self.git.exec_path)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_COUNT", "2")
            .env("GIT_CONFIG_KEY_0", "core.hooksPath")
            .env("GIT_CONFIG_VALUE_0", self.hooks)
            .env("GIT_CONFIG_KEY_1", "core.commitGraph")
            .env("GIT_CONFIG_VALUE_1", "false")
            .args(["hook", "run", "--ignore-missing", hook.name(), "--"])
            .args(args)
            .current_dir(self.repo)
            .uid(self.uid)
            .gid(self.uid)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| VerifyError::Io(self.git.bin.clone(), e))?;
        let readers = [
            reader(
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
            reader(
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
        ];
        let status = wait(&mut child, self.timeout);
        // Whatever the hook left running goes, so no process of this
        // commit's code outlives its check (and the pipes close).
        self.kill_all();
        let mut all = String::new();
        for r in readers {
            all.push_str(&String::from_utf8_lossy(&r.join().unwrap_or_default()));
        }
        let lines: Vec<&str> = all.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(TAIL)..].join("\n");
        if tail.len() > plan::OUTPUT_CAP {
            let cut = tail.len() - plan::OUTPUT_CAP;
            let cut = (cut..tail.len())
                .find(|i| tail.is_char_boundary(*i))
                .unwrap_or(tail.len());
            tail = tail[cut..].to_owned();
        }
        let status = match status {
            None => Some(("timed out".into(), None)),
            Some(s) if s.success() => None,
            Some(s) => match s.code() {
                Some(code) => Some((format!("exited {code}"), Some(code))),
                None => Some((
                    format!(
                        "killed by signal {}",
                        std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)
                    ),
                    None,
                )),
            },
        };
        Ok((status, tail))
    }

    /// kill(-1, SIGKILL) as the hooks' uid: every process of that uid.
    fn kill_all(&self) {
        let _ = Command::new("/bin/kill")
            .args(["-s", "KILL", "--", "-1"])
            .uid(self.uid)
            .gid(self.uid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The child's status, or None when it ran past `timeout` (then killed).
fn wait(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Read a stream to its end, keeping the last READ_CAP bytes.
fn reader(s: Option<Box<dyn Read + Send>>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let Some(mut s) = s else { return kept };
        let mut buf = [0u8; 8192];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * READ_CAP {
                kept.drain(..kept.len() - READ_CAP);
            }
        }
        kept
    })
}

#[cfg(test)]
mod tests {
    use super::{names, tree_tool};

    #[test]
    fn a_hook_names_a_path_as_a_word() {
        let hook = "#!/bin/sh\n./scripts/lint.sh && make lint\nnpx lint-staged\n";
        assert!(names(hook, "scripts/lint.sh"));
        assert!(names(hook, "make"));
        assert!(names(hook, "lint-staged"));
        for (hook, want) in [
            ("#!/bin/sh\nnpx lint-staged\n", Some("npx")),
            ("#!/bin/sh\nmake lint\n", Some("make")),
            (
                "#!/bin/sh\nexec \"./scripts/check.sh\" \"$@\"\n",
                Some("./scripts/check.sh"),
            ),
            (
                "#!/bin/sh\n# run make lint by hand\ngit diff --cached --check\n",
                None,
            ),
            ("#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n", None),
            ("#!/bin/sh\nexit 0\n", None),
        ] {
            assert_eq!(tree_tool(hook).as_deref(), want, "{hook}");
        }
        assert!(!names(hook, "lint.sh"));
        assert!(!names(hook, "scripts/lint"));
        assert!(!names(hook, "ake"));
    }
}
