//! The broker on this machine's kernel, without Docker: as root, a real
//! `sbx-git-guard serve` over a 0711 git in a 0700 directory, called as
//! uid 1000 through the guard. Shows the kernel semantics the design rests
//! on (execveat of an O_PATH fd after dropping to the caller; the exec'd,
//! unreadable git is not dumpable) and that the broker refuses a layout
//! that would expose the binary.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const GUARD: &str = env!("CARGO_BIN_EXE_sbx-git-guard");
/// The broker's group for git and its hooks: a gid no test user has.
const GIT_GID: u32 = 2575;

fn root() -> bool {
    let ok = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !ok {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(!ci, "missing prerequisite under CI: root");
        eprintln!("skipping: the broker test needs root");
    }
    ok
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

struct Broker(Child);
impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path, git: &Path) -> Child {
    serve_with(dir, git, &[])
}

fn serve_with(dir: &Path, git: &Path, more: &[&OsStr]) -> Child {
    Command::new(GUARD)
        .args(["serve", "--socket"])
        .arg(dir.join("s.sock"))
        .arg("--git")
        .arg(git)
        .args(["--group", &GIT_GID.to_string()])
        .args(more)
        .env_clear()
        .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `sh -c script` as uid/gid 1000 with the guard first on PATH as `git`.
fn agent(dir: &Path, cwd: &Path, script: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .current_dir(cwd)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .env("HOME", cwd)
        .env("SBX_GIT_BROKER", dir.join("s.sock"))
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn the_broker_runs_git_as_the_caller_and_only_as_the_guard_allows() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let git = layout(dir);

    // A readable binary is refused before anything listens.
    let open = dir.join("open-git");
    std::fs::copy("/usr/bin/git", &open).unwrap();
    mode(&open, 0o755);
    let o = serve(dir, &open).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("readable"), "{}", text(&o));

    let (broker, repo) = listening(dir, &git);
    let pid = broker.0.id();

    // The binary itself: not runnable, not readable, as the caller.
    let o = agent(
        dir,
        &repo,
        &format!("{0} --version || cat {0} >/dev/null", git.display()),
    );
    assert!(!o.status.success(), "{}", text(&o));
    // Through the guard and broker it works, as uid 1000, in our cwd.
    let o = agent(
        dir,
        &repo,
        "git init -q . && printf '#!/bin/sh\\nid -u > hook-ran\\n' > .git/hooks/pre-commit && \
         chmod +x .git/hooks/pre-commit && echo x > f && git add f && \
         git -c user.name=a -c user.email=a@b commit -qm one && cat hook-ran && stat -c %u .git/index",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1000\n1000\n");
    // Loader variables never reach git (code in git's process could read
    // the binary through /proc/self/exe); the hook, git's child, shows it.
    let o = agent(
        dir,
        &repo,
        "printf '#!/bin/sh\\nenv > hook-env\\n' > .git/hooks/pre-commit && \
         GCONV_PATH=/tmp/evil LD_LIBRARY_PATH=/tmp/evil LD_AUDIT=/tmp/evil.so \
         git -c user.name=a -c user.email=a@b commit -q --allow-empty -m two && \
         grep -c -e '^LD_' -e '^GCONV_PATH' hook-env",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        text(&o)
    );
    // Refused by the broker's own decision: exit 77, one line, audited.
    let o = agent(
        dir,
        &repo,
        "git -c user.name=a -c user.email=a@b commit --no-verify --allow-empty -qm two",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("blocked (block-no-verify)"),
        "{}",
        text(&o)
    );
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    assert!(audit.contains(r#""policy":"block-no-verify""#), "{audit}");
    // The running git: not dumpable, so its exe and fds are closed to
    // the caller's other processes; exit statuses pass through.
    let o = agent(
        dir,
        &repo,
        "sleep 2 | git hash-object --stdin >/dev/null & sleep 0.5; \
         p=$(pgrep -u 1000 -f '^git -c .*core.hooksPath=.* hash-object' | head -1); \
         test -n \"$p\" || exit 9; \
         cat /proc/$p/exe >/dev/null 2>&1 && echo exe-readable; \
         ls /proc/$p/fd >/dev/null 2>&1 && echo fd-listable; \
         wait; git rev-parse --verify -q nosuchref; echo rc=$?",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "rc=1",
        "{}",
        text(&o)
    );

    // Concurrent calls: each gets its own answer; afterwards the broker
    // holds no more fds than before and leaves no zombie behind.
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    // The broker closes a finished call's fds after the caller sees its
    // exit, so count only once the count stops moving.
    let settled = |want: Option<usize>| {
        let t = std::time::Instant::now();
        let (mut last, mut since) = (fds(), std::time::Instant::now());
        while t.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let n = fds();
            if n != last {
                (last, since) = (n, std::time::Instant::now());
            } else if want == Some(n) || since.elapsed() > std::time::Duration::from_millis(1500) {
                break;
            }
        }
        last
    };
    let before = settled(None);
    let o = agent(
        dir,
        &repo,
        "for i in $(seq 24); do (git rev-parse --verify -q HEAD >/dev/null; echo $?) & done; wait",
    );
    let codes = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        codes.lines().filter(|l| *l == "0").count(),
        24,
        "{}",
        text(&o)
    );
    assert_eq!(settled(Some(before)), before, "the broker leaked fds");
    let ps = Command::new("ps")
        .args(["-eo", "stat=,ppid="])
        .output()
        .unwrap();
    let ppid = pid.to_string();
    let zombies = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.starts_with('Z') && l.split_whitespace().nth(1) == Some(ppid.as_str()))
        .count();
    assert_eq!(zombies, 0, "zombie children of the broker");
}

/// The layout the broker insists on (the real git 0711 in a 0700
/// directory, the guard as `git` in bin/); the real git's path.
fn layout(dir: &Path) -> PathBuf {
    mode(dir, 0o755);
    std::fs::create_dir(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(GUARD, dir.join("bin/git")).unwrap();
    let libexec = dir.join("libexec");
    std::fs::create_dir(&libexec).unwrap();
    mode(&libexec, 0o700);
    let git = libexec.join("git");
    std::fs::copy("/usr/bin/git", &git).unwrap();
    mode(&git, 0o711);
    std::fs::write(dir.join("audit.jsonl"), "").unwrap();
    mode(&dir.join("audit.jsonl"), 0o666);
    git
}

/// Up to 2 s for the broker to listen on `dir`/s.sock.
fn wait_for_socket(dir: &Path) {
    for _ in 0..200 {
        if dir.join("s.sock").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A broker for `dir`'s layout, listening, and an empty repository owned
/// by uid 1000.
fn listening(dir: &Path, git: &Path) -> (Broker, PathBuf) {
    let broker = Broker(serve(dir, git));
    wait_for_socket(dir);
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    Command::new("chown")
        .arg("1000:1000")
        .arg(&repo)
        .status()
        .unwrap();
    (broker, repo)
}

/// [`layout`], the guard's hooks directory beside the guard, and
/// [`listening`].
fn started(dir: &Path) -> (Broker, PathBuf) {
    let git = layout(dir);
    // The guard's hooks directory beside it, which the caller (uid 1000)
    // could not make there.
    let exe = std::fs::canonicalize(GUARD).unwrap();
    let st = Command::new(GUARD)
        .arg("install-hooks")
        .arg(exe.parent().unwrap().join(".sbx-git-hooks"))
        .status()
        .unwrap();
    assert!(st.success());
    listening(dir, &git)
}

/// `script` run by [`agent`] in a new repository (its user name and email
/// set) under a [`started`] broker; None without root.
fn in_a_new_repo(script: &str) -> Option<Output> {
    if !root() {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, repo) = started(dir);
    Some(agent(
        dir,
        &repo,
        &format!(
            "git init -q . && git config user.name a && git config user.email a@b && {script}"
        ),
    ))
}

/// PTRACE_ATTACH, then opening /proc/PID/mem for writing: what an agent
/// would do to make a running hook exit 0. Prints what it got.
const TRACER: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
r = libc.ptrace(16, pid, 0, 0)
print("attach=%d errno=%d" % (r, ctypes.get_errno()))
if r == 0:
    import os, signal
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, 0, 0)
    os.kill(pid, signal.SIGCONT)
try:
    open("/proc/%d/mem" % pid, "r+b")
    print("mem=open")
except OSError as e:
    print("mem=%d" % e.errno)
"#;

#[test]
fn a_running_hook_is_not_the_callers_to_trace_and_killing_it_fails_closed() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, repo) = started(dir);
    std::fs::write(dir.join("tracer.py"), TRACER).unwrap();
    let setup = "git init -q . && git config user.name a && git config user.email a@b && \
                 printf '#!/bin/sh\\necho $$ > hook.pid\\nsleep 3\\nexit 1\\n' > .git/hooks/pre-commit && \
                 chmod +x .git/hooks/pre-commit";
    let o = agent(dir, &repo, setup);
    assert!(o.status.success(), "{}", text(&o));
    // A failing hook, attacked while it runs by the caller's own process.
    let o = agent(
        dir,
        &repo,
        &format!(
            "rm -f hook.pid; git commit -q --allow-empty -m x & \
             while [ ! -s hook.pid ]; do sleep 0.02; done; p=$(cat hook.pid); \
             grep '^Gid:' /proc/$p/status; python3 {} $p; wait $!; echo commit=$?; \
             stat -c 'index=%u:%g' .git/index",
            dir.join("tracer.py").display()
        ),
    );
    let out = text(&o);
    assert!(
        out.contains(&format!("Gid:\t{GIT_GID}\t{GIT_GID}\t{GIT_GID}")),
        "{out}"
    );
    assert!(out.contains("attach=-1 errno=1"), "{out}");
    assert!(out.contains("mem=13") || out.contains("mem=1"), "{out}");
    assert!(out.contains("commit=1"), "{out}");
    // git's files stay the caller's.
    assert!(out.contains(&format!("index=1000:{GIT_GID}")), "{out}");
    // A hook that would pass, killed: the commit fails, nothing is made.
    let o = agent(
        dir,
        &repo,
        "sed -i 's/exit 1/exit 0/' .git/hooks/pre-commit; rm -f hook.pid; \
         git commit -q --allow-empty -m y & \
         while [ ! -s hook.pid ]; do sleep 0.02; done; kill -9 $(cat hook.pid); \
         wait $!; echo commit=$?; git rev-parse -q --verify HEAD || echo no-head",
    );
    let out = text(&o);
    assert!(out.contains("commit=1") && out.contains("no-head"), "{out}");
}

/// Started as a git editor (so with the broker's group), it outlives that
/// call, waits for the next call's hook and tries to trace it.
const LEFTOVER: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
gid = [l for l in open("/proc/self/status") if l.startswith("Gid:")][0].split()[1]
for _ in range(400):
    if os.path.exists("hook2.pid"):
        break
    time.sleep(0.025)
pid = int(open("hook2.pid").read())
r = libc.ptrace(16, pid, 0, 0)
with open("leftover.out", "w") as f:
    f.write("gid=%s attach=%d errno=%d\n" % (gid, r, ctypes.get_errno()))
if r == 0:
    import signal
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, 0, 0)
    os.kill(pid, signal.SIGCONT)
"#;

#[test]
fn a_process_left_by_an_earlier_call_cannot_trace_a_hook() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, repo) = started(dir);
    std::fs::write(dir.join("leftover.py"), LEFTOVER).unwrap();
    let o = agent(
        dir,
        &repo,
        &format!(
            "git init -q . && git config user.name a && git config user.email a@b && \
             git commit -q --allow-empty -m one && \
             GIT_EDITOR='setsid python3 {} </dev/null >/dev/null 2>&1 & true' git tag -a t0; \
             printf '#!/bin/sh\\necho $$ > hook2.pid\\nsleep 1\\nexit 1\\n' > .git/hooks/pre-commit && \
             chmod +x .git/hooks/pre-commit; git commit -q --allow-empty -m two; \
             sleep 0.5; cat leftover.out",
            dir.join("leftover.py").display()
        ),
    );
    let out = text(&o);
    assert!(
        out.contains(&format!("gid={GIT_GID} attach=-1 errno=1")),
        "{out}"
    );
}

/// Inside the call's Landlock domain git still renames across directories
/// (a push's objects leave the quarantine directory that way; a ruleset
/// denies reparenting unless a rule grants it).
#[test]
fn a_push_into_a_local_repository_works_through_the_broker() {
    let Some(o) = in_a_new_repo(
        "echo x > f && git add f && git commit -qm one && git init -q --bare r.git && \
         git push -q r.git HEAD:refs/heads/main && mkdir -p d/e && echo y > d/e/g && \
         mv d/e/g d/h && git -C r.git rev-parse --verify -q main",
    ) else {
        return;
    };
    assert!(o.status.success(), "{}", text(&o));
}

/// Started by git as the `core.fsmonitor` the agent wrote into
/// `.git/config`, so in the same call, with the same group and Landlock
/// domain as git: it waits for that call's pre-commit and tries to trace it.
const FSMONITOR_TRACER: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
gid = [l for l in open("/proc/self/status") if l.startswith("Gid:")][0].split()[1]
for _ in range(400):
    if os.path.exists("hook.pid") and open("hook.pid").read().strip():
        break
    time.sleep(0.025)
pid = int(open("hook.pid").read())
r = libc.ptrace(16, pid, 0, 0)
err = ctypes.get_errno()
if r == 0:
    import signal
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, 0, 0)
    os.kill(pid, signal.SIGCONT)
try:
    open("/proc/%d/mem" % pid, "r+b")
    mem = "open"
except OSError as e:
    mem = str(e.errno)
with open("fsmon.tmp", "w") as f:
    f.write("gid=%s attach=%d errno=%d mem=%s\n" % (gid, r, err, mem))
os.rename("fsmon.tmp", "fsmon.out")
"#;

#[test]
fn a_program_git_starts_in_the_same_call_cannot_trace_that_calls_hook() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, repo) = started(dir);
    std::fs::write(dir.join("fsmon.py"), FSMONITOR_TRACER).unwrap();
    let fsmon = dir.join("fsmon.sh");
    std::fs::write(
        &fsmon,
        format!(
            "#!/bin/sh\n[ -e started ] || {{ : > started; \
             setsid python3 {} </dev/null >/dev/null 2>&1 & }}\nexit 1\n",
            dir.join("fsmon.py").display()
        ),
    )
    .unwrap();
    mode(&fsmon, 0o755);
    let o = agent(
        dir,
        &repo,
        &format!(
            "git init -q . && git config user.name a && git config user.email a@b && \
             printf '#!/bin/sh\\necho $$ > hook.pid\\nsleep 2\\nexit 1\\n' > .git/hooks/pre-commit && \
             chmod +x .git/hooks/pre-commit && \
             printf '[core]\\n\\tfsmonitor = {}\\n' >> .git/config && \
             git commit -q --allow-empty -m x; echo commit=$?; \
             for i in $(seq 100); do [ -e fsmon.out ] && break; sleep 0.05; done; \
             cat fsmon.out; git rev-parse -q --verify HEAD || echo no-head",
            fsmon.display()
        ),
    );
    let out = text(&o);
    // The tracer ran as git's group (so only the Landlock domain stops it).
    assert!(out.contains(&format!("gid={GIT_GID} ")), "{out}");
    assert!(out.contains("attach=-1 errno=1"), "{out}");
    assert!(out.contains("mem=13") || out.contains("mem=1\n"), "{out}");
    assert!(out.contains("commit=1") && out.contains("no-head"), "{out}");
}

/// A hook request gets a fresh Landlock domain with the broker's group:
/// only a process that has the group already (one git started) may ask,
/// so an agent's own process cannot get the group this way.
#[test]
fn only_gits_own_processes_may_ask_for_a_hook() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, repo) = started(dir);
    let o = agent(
        dir,
        &repo,
        &format!(
            "mkdir h step && printf '#!/bin/sh\\necho RAN; id -g\\n' > h/pre-commit && \
             chmod +x h/pre-commit && ln -s {GUARD} step/pre-commit && \
             SBX_GUARD_TRUSTED_HOOKS=$PWD/h step/pre-commit; echo step=$?"
        ),
    );
    let out = text(&o);
    assert!(out.contains("only for git's own processes"), "{out}");
    assert!(!out.contains("RAN") && out.contains("step=1"), "{out}");
}

/// A hook the broker starts sees what it would see run by git: `$0`'s
/// directory holds its neighbours (husky's hooks source `$(dirname "$0")/h`),
/// and a pre-push hook reads git's ref updates on stdin.
#[test]
fn a_hook_started_by_the_broker_finds_its_directory_and_its_input() {
    let Some(o) = in_a_new_repo(
        "printf 'echo lib-ran; grep -q ok ok\\n' > .git/hooks/lib.sh && \
         printf '#!/bin/sh\\n. \"$(dirname \"$0\")/lib.sh\"\\n' > .git/hooks/pre-commit && \
         printf '#!/bin/sh\\ncat > pushed.txt\\n' > .git/hooks/pre-push && \
         chmod +x .git/hooks/pre-commit .git/hooks/pre-push && \
         git commit -q --allow-empty -m refused; echo commit=$?; echo ok > ok && \
         git commit -q --allow-empty -m one && git init -q --bare r.git && \
         git push -q r.git HEAD:refs/heads/main && cat pushed.txt",
    ) else {
        return;
    };
    let out = text(&o);
    assert!(out.contains("lib-ran") && out.contains("commit=1"), "{out}");
    assert!(out.contains(" refs/heads/main 0000000000"), "{out}");
}

/// Through the broker, git starts a step only for the hooks the repository
/// has (its hooks path is a root-made directory of those names), and each
/// of them still runs: a commit in a repository with pre-commit and
/// commit-msg starts two hooks, not nine (git's trace2 lists each hook it
/// starts).
#[test]
fn a_commit_starts_steps_only_for_the_hooks_the_repository_has() {
    let Some(o) = in_a_new_repo(
        "printf '#!/bin/sh\\necho pc >> ran\\n' > .git/hooks/pre-commit && \
         printf '#!/bin/sh\\necho cm >> ran\\ngrep -q good \"$1\"\\n' > .git/hooks/commit-msg && \
         chmod +x .git/hooks/pre-commit .git/hooks/commit-msg && \
         GIT_TRACE2_EVENT=$PWD/trace git commit -q --allow-empty -m good; echo good=$? && \
         git commit -q --allow-empty -m bad; echo bad=$? && cat ran && \
         chmod 311 .git/hooks && GIT_TRACE2_EVENT=$PWD/trace2 git commit -q --allow-empty -m good; \
         echo unlisted=$? && cat trace && echo ==== && cat trace2",
    ) else {
        return;
    };
    let out = text(&o);
    let (trace, trace2) = out.split_once("====\n").unwrap_or_default();
    assert!(out.contains("good=0") && out.contains("bad=1"), "{out}");
    let ran = |h: &str| out.lines().filter(|l| *l == h).count();
    assert_eq!((ran("pc"), ran("cm")), (2, 2), "{out}");
    let mut hooks: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains(r#""event":"child_start""#) && l.contains(r#""child_class":"hook""#))
        .filter_map(|l| l.split(r#""hook_name":""#).nth(1)?.split('"').next())
        .collect();
    hooks.sort();
    assert_eq!(hooks, ["commit-msg", "pre-commit"], "{trace}");
    // A hooks directory git can search but not list is looked up name by
    // name: its hooks still run through the steps.
    assert!(out.contains("unlisted=0"), "{out}");
    for t in [trace, trace2] {
        assert!(t.contains("/.sbx-git-hooks.d/"), "{t}");
    }
}

/// A client of the broker's protocol sending a record request (kind 3)
/// with argv[2:] as the ids to socket argv[1]; prints the reply.
const RECORDER: &str = r#"
import os, socket, struct, sys
def put(b):
    return struct.pack('<I', len(b)) + b
args = [a.encode() for a in sys.argv[2:]]
body = b'SBXG' + bytes([1, 3]) + struct.pack('<II', 0o022, len(args))
body += b''.join(put(a) for a in args) + struct.pack('<I', 0)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
cwd = os.open('.', os.O_PATH)
socket.send_fds(s, [struct.pack('<I', len(body)) + body], [0, 1, 2, cwd])
data = b''
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
tag, rest = data[4:5], data[5:]
print('reply=' + (str(struct.unpack('<i', rest)[0]) if tag == b'E' else tag.decode() + rest.decode()))
"#;

/// `script` as uid 1000 with gid `gid` (git's group or the agent's own).
fn as_gid(dir: &Path, gid: u32, script: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=1000",
            &format!("--regid={gid}"),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

/// The sandbox-wide stash record: only git's own processes (the group)
/// may add to it, only well-formed ids are written, and no process of
/// the agent's, with the group or without, can truncate or replace it.
#[test]
fn the_stash_record_is_added_to_only_by_gits_processes_and_never_cut() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, _repo) = started(dir);
    std::fs::write(dir.join("rec.py"), RECORDER).unwrap();
    let rec = dir.join("stash-seen");
    let a = "a".repeat(40);
    let b = "b".repeat(64);
    let send = |gid: u32, ids: &str| {
        text(&as_gid(
            dir,
            gid,
            &format!("python3 rec.py s.sock {ids} </dev/null"),
        ))
    };
    // The agent's own process: refused, nothing written.
    let out = send(1000, &a);
    assert!(out.contains("only git's own processes"), "{out}");
    assert!(!rec.exists(), "written for the agent");
    // git's group: appended.
    let out = send(GIT_GID, &format!("{a} {b}"));
    assert!(out.contains("reply=0"), "{out}");
    let want = format!("{a}\n{b}\n");
    assert_eq!(std::fs::read_to_string(&rec).unwrap(), want);
    // Neither the agent nor a program git started can cut or swap it.
    for gid in [1000, GIT_GID] {
        let o = as_gid(
            dir,
            gid,
            ": > stash-seen; truncate -s 0 stash-seen; rm -f stash-seen; \
             mv stash-seen x; ln -sf /dev/null stash-seen; true",
        );
        assert_eq!(std::fs::read_to_string(&rec).unwrap(), want, "{}", text(&o));
    }
    // Malformed ids: the whole request refused, nothing written.
    for bad in [
        "abc".to_owned(),
        "g".repeat(40),
        "a".repeat(41),
        format!("'{a}\n{a}'"),
        format!("{a} ''"),
    ] {
        let out = send(GIT_GID, &format!("{a} {bad}"));
        assert!(out.contains("is not a commit id"), "{bad}: {out}");
        assert_eq!(std::fs::read_to_string(&rec).unwrap(), want, "{bad}");
    }
    let out = send(GIT_GID, "");
    assert!(out.contains("nothing to record"), "{out}");
    // Root's file, 0644.
    let m = std::fs::metadata(&rec).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o644));
}

/// `serve --keep`: the record outlives the broker and its run directory
/// (a container made again), both records end up each other's union, and
/// a kept record anyone but root could swap or write stops the broker.
#[test]
fn the_kept_stash_record_outlives_the_container() {
    use std::os::unix::fs::MetadataExt as _;
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let git = layout(dir);
    std::fs::write(dir.join("rec.py"), RECORDER).unwrap();
    let vol = dir.join("vol");
    std::fs::create_dir(&vol).unwrap();
    mode(&vol, 0o755);
    let keep = vol.join("stash-seen");
    let run = dir.join("stash-seen");
    let args = [OsStr::new("--keep"), keep.as_os_str()];
    let up = || {
        let b = Broker(serve_with(dir, &git, &args));
        wait_for_socket(dir);
        b
    };
    let send = |ids: &str| {
        text(&as_gid(
            dir,
            GIT_GID,
            &format!("python3 rec.py s.sock {ids} </dev/null"),
        ))
    };
    let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(64));
    let broker = up();
    let out = send(&a);
    assert!(out.contains("reply=0"), "{out}");
    drop(broker);
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), format!("{a}\n"));
    let m = std::fs::metadata(&keep).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o644));
    // A new container: the run's record is gone, the kept one is read in.
    std::fs::remove_file(&run).unwrap();
    std::fs::remove_file(dir.join("s.sock")).unwrap();
    let broker = up();
    assert_eq!(std::fs::read_to_string(&run).unwrap(), format!("{a}\n"));
    let out = send(&b);
    assert!(out.contains("reply=0"), "{out}");
    drop(broker);
    // The broker restarted in the same container, with an id the kept
    // record lacks (a garbage line is not carried over).
    std::fs::write(&run, format!("{a}\n{b}\n{c}\nnot an id\n")).unwrap();
    std::fs::remove_file(dir.join("s.sock")).unwrap();
    drop(up());
    assert_eq!(
        std::fs::read_to_string(&keep).unwrap(),
        format!("{a}\n{b}\n{c}\n")
    );
    // Unsafe places: the broker does not start (78), naming --keep.
    let refused = |why: &str| {
        let _ = std::fs::remove_file(dir.join("s.sock"));
        let mut child = serve_with(dir, &git, &args);
        let mut status = None;
        for _ in 0..500 {
            status = child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Still serving: the unsafe record was taken.
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(status.and_then(|s| s.code()), Some(78), "{why}: {err}");
        assert!(
            err.contains("--keep") && err.contains("vol"),
            "{why}: {err}"
        );
        assert!(!dir.join("s.sock").exists(), "{why}: listening");
    };
    mode(&vol, 0o777);
    refused("a directory anyone may write");
    mode(&vol, 0o755);
    std::os::unix::fs::chown(&vol, Some(1000), Some(1000)).unwrap();
    refused("the agent's directory");
    std::os::unix::fs::chown(&vol, Some(0), Some(0)).unwrap();
    std::fs::rename(&keep, vol.join("x")).unwrap();
    std::os::unix::fs::symlink(vol.join("x"), &keep).unwrap();
    refused("a symlink");
    std::fs::remove_file(&keep).unwrap();
    std::fs::rename(vol.join("x"), &keep).unwrap();
    std::os::unix::fs::chown(&keep, Some(1000), Some(1000)).unwrap();
    refused("the agent's file");
}

/// A stash made in another repository, fetched into this one (no ref of
/// its own names it): its change cherry-picked onto a branch, or its
/// index commit made the branch's tip, is refused, because the other
/// repository's step recorded it in the broker's record.
#[test]
fn a_stash_from_another_repository_reaches_no_branch() {
    let Some(o) = in_a_new_repo(
        "echo 1 > f && git add f && git commit -qm one && o=$(mktemp -d) && \
         git clone -q . $o/b && (cd $o/b && git config user.name a && git config user.email a@b && \
         echo MARKER > f && git add f && git stash -q) && \
         git fetch -q $o/b refs/stash && test ! -e .git/refs/stash && \
         { git cherry-pick -m 1 FETCH_HEAD; echo pick=$?; } && \
         { git reset -q --hard FETCH_HEAD^2; echo reset=$?; } && \
         git grep -c MARKER HEAD -- ; git log --format=%s; rm -rf $o",
    ) else {
        return;
    };
    let out = text(&o);
    assert!(out.contains("reset=1"), "{out}");
    assert!(out.contains("pick=1"), "{out}");
    assert!(!out.contains("HEAD:f"), "MARKER on the branch: {out}");
}

/// The repository for the index-swap attacks: `one` committed, `a=MARKER`
/// staged in `.git/B` (a copy of the index), `b=ok` staged in the index,
/// and a pre-commit that refuses staged MARKER, then says it has checked
/// (`sig/checked`) and waits (up to 5 s) for the racer's `sig/swapped`.
const SWAP_SETUP: &str = "echo 1 > a && git add a && git commit -qm one && \
    echo MARKER > a && git add a && cp .git/index .git/B && git reset -q && \
    git checkout -q -- a && echo ok > b && git add b && mkdir sig && \
    printf '#!/bin/sh\\nif git diff --cached | grep -q MARKER; then exit 1; fi\\n\
touch sig/checked\\nn=0; while [ ! -e sig/swapped ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done\\n' \
    > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit";

/// The agent renames the bad index over `target` once pre-commit has
/// checked the good one, while `commit` runs; then what was committed.
fn swap_race(prep: &str, target: &str, commit: &str) -> Option<String> {
    let o = in_a_new_repo(&format!(
        "{SWAP_SETUP} && {prep} || exit 1; \
         {{ n=0; while [ ! -e sig/checked ] && [ $n -lt 1000 ]; do sleep 0.01; n=$((n+1)); done; \
            mv .git/B {target}; touch sig/swapped; }} & \
         {commit}; echo rc=$?; wait; git log -1 --format=subject=%s; \
         git grep -q MARKER HEAD -- && echo COMMITTED-MARKER; \
         git cat-file -e HEAD:b && echo has-b; true"
    ))?;
    Some(text(&o))
}

/// git commit re-reads its index after pre-commit and builds the tree
/// from that: the agent renaming another index over it once the hook had
/// read the good one committed what no hook saw. Through the broker git
/// commits from a private copy of the index that only git's group can
/// reach, so the rename changes nothing: not while the hook runs, not with
/// `-a` (git's own `index.lock`), `--amend`, an index named by
/// `GIT_INDEX_FILE`, or a `.git/index` that is a symlink.
#[test]
fn an_index_swapped_after_pre_commit_is_not_what_is_committed() {
    for (what, prep, target, commit) in [
        ("plain", "true", ".git/index", "git commit -qm two"),
        ("-a", "true", ".git/index.lock", "git commit -qam two"),
        (
            "--amend",
            "true",
            ".git/index",
            "git commit -q --amend -m two",
        ),
        (
            "GIT_INDEX_FILE",
            "cp .git/index idx",
            "idx",
            "GIT_INDEX_FILE=$PWD/idx git commit -qm two",
        ),
        (
            "a symlinked index",
            "mv .git/index idx2 && ln -s ../idx2 .git/index",
            "idx2",
            "git commit -qm two",
        ),
    ] {
        let Some(out) = swap_race(prep, target, commit) else {
            return;
        };
        assert!(!out.contains("COMMITTED-MARKER"), "{what}: {out}");
        assert!(
            out.contains("rc=0") && out.contains("subject=two") && out.contains("has-b"),
            "{what}: the good commit: {out}"
        );
    }
}

/// `rebase --continue` after an `edit` with staged changes commits them
/// without pre-commit, so the guard runs pre-commit first; the index
/// renamed over after that run and before git's read (the work tree made
/// to match it) was committed. Now the hook runs on the private copy git
/// then commits from (the work tree then differs from it: git stops).
#[test]
fn an_index_swapped_after_a_continues_pre_commit_is_not_committed() {
    let Some(o) = in_a_new_repo(&format!(
        "echo 1 > a && git add a && git commit -qm one && echo 2 > c && git add c && \
         git commit -qm two && GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -qi HEAD~1 && \
         {} || exit 1; {{ n=0; while [ ! -e sig/checked ] && [ $n -lt 1000 ]; do sleep 0.01; n=$((n+1)); done; \
           mv .git/B .git/index; echo MARKER > a; touch sig/swapped; }} & \
         GIT_EDITOR=true git rebase --continue; echo rc=$?; wait; git log -1 --format=subject=%s; \
         git grep -q MARKER HEAD -- && echo COMMITTED-MARKER; git cat-file -e HEAD:b && echo has-b; true",
        SWAP_SETUP
            .split_once(" && echo MARKER")
            .map(|(_, rest)| format!("echo MARKER{rest}"))
            .unwrap()
    )) else {
        return;
    };
    let out = text(&o);
    assert!(!out.contains("COMMITTED-MARKER"), "{out}");
}

/// A partial commit (`git commit <paths>`) builds its tree from a second
/// index in the git dir, which the agent can rename over: its pre-commit
/// is refused with a way out, and nothing is committed. A hook that stages
/// a file itself (lint-staged) still has it committed and in the index
/// after, and a repository without an index yet commits through the copy.
#[test]
fn a_partial_commit_is_refused_and_a_hooks_own_staging_is_kept() {
    let Some(o) = in_a_new_repo(&format!(
        "{SWAP_SETUP} && git commit -qm two -- b; echo partial=$?; \
         echo audited=$(grep -c 'unverified-commit.*a partial commit' \
           \"$(dirname \"$SBX_GIT_BROKER\")/audit.jsonl\"); \
         git log -1 --format=subject=%s; \
         printf '#!/bin/sh\\ngit add fixed\\n' > .git/hooks/pre-commit && echo f > fixed && \
         git commit -qm three && git log -1 --format=subject=%s && git cat-file -e HEAD:fixed && \
         git diff --cached --quiet && echo index-kept && ls .git | grep -c lock; \
         mkdir fresh && cd fresh && git init -q && git config user.name a && git config user.email a@b && cp ../.git/hooks/pre-commit .git/hooks/ && \
         echo f > fixed && git commit -qm first && git ls-files"
    )) else {
        return;
    };
    let out = text(&o);
    assert!(out.contains("partial=1"), "{out}");
    assert!(
        out.contains("audited=1"),
        "the refusal is in the audit log: {out}"
    );
    assert!(out.contains("a partial commit"), "{out}");
    assert!(out.contains("subject=one"), "{out}");
    assert!(
        out.contains("subject=three") && out.contains("index-kept"),
        "{out}"
    );
    assert!(
        out.contains("index-kept\n0\nfixed\n"),
        "no lock left: {out}"
    );
}

/// The private copy's name is its only secret from git's group: the agent
/// had the broker's git `git init` the copies' directory and list it
/// (`git status -uall`), which named the copy, then staged into it with
/// `GIT_INDEX_FILE` while pre-commit ran: committed unseen. The directory
/// is not readable by git's group now.
#[test]
fn the_private_index_cannot_be_found_through_the_broker() {
    let Some(o) = in_a_new_repo(&format!(
        "{SWAP_SETUP} || exit 1; \
         {{ n=0; while [ ! -e sig/checked ] && [ $n -lt 1000 ]; do sleep 0.01; n=$((n+1)); done; \
            R=$(dirname \"$SBX_GIT_BROKER\")/index; W=$PWD; git init -q $R; \
            r=$(git -c safe.directory='*' -C $R status --porcelain -uall 2>&1); echo \"listed=$r\"; \
            p=$R/$(echo \"$r\" | grep -o '[0-9a-f]\\{{32\\}}$' | head -1); cd $W; \
            echo MARKER > a; GIT_INDEX_FILE=$p git add a; git checkout -q -- a 2>/dev/null; \
            touch sig/swapped; }} & \
         git commit -qm two; echo rc=$?; wait; git log -1 --format=subject=%s; \
         git grep -q MARKER HEAD -- && echo COMMITTED-MARKER; true"
    )) else {
        return;
    };
    let out = text(&o);
    assert!(!out.contains("COMMITTED-MARKER"), "{out}");
    // The copy's name: 32 hex digits.
    assert!(
        !out.split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() == 32),
        "the copy was listed: {out}"
    );
    assert!(out.contains("rc=0") && out.contains("subject=two"), "{out}");
}

/// A broker started from a shell in the background inherits SIGINT and
/// SIGQUIT ignored; the broker resets every signal once at start and its
/// spares only the two it changes itself, so what it runs (here a hook)
/// still starts with none ignored, as a fresh process would.
#[test]
fn what_the_broker_runs_starts_with_no_signal_ignored() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let git = layout(dir);
    let exe = std::fs::canonicalize(GUARD).unwrap();
    let st = Command::new(GUARD)
        .arg("install-hooks")
        .arg(exe.parent().unwrap().join(".sbx-git-hooks"))
        .status()
        .unwrap();
    assert!(st.success());
    let broker = Broker(
        Command::new("sh")
            .args(["-c", "trap '' INT QUIT; exec \"$0\" \"$@\"", GUARD, "serve"])
            .arg("--socket")
            .arg(dir.join("s.sock"))
            .arg("--git")
            .arg(&git)
            .args(["--group", &GIT_GID.to_string()])
            .env_clear()
            .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_socket(dir);
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    Command::new("chown")
        .arg("1000:1000")
        .arg(&repo)
        .status()
        .unwrap();
    let o = agent(
        dir,
        &repo,
        "git init -q . && printf '#!/bin/sh\\ngrep -E \"^SigIgn\" /proc/$$/status > sig\\n' \
           > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && \
         git -c user.name=a -c user.email=a@b commit -q --allow-empty -m one && cat sig",
    );
    drop(broker);
    assert!(o.status.success(), "{}", text(&o));
    // Signals 1 to 31 (what the reset covers; real-time ones are as the
    // test harness left them).
    let mask = |name: &str| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .map(|m| m & 0x7fff_ffff)
    };
    assert_eq!(mask("SigIgn:"), Some(0), "ignored: {}", text(&o));
}

/// The private copy has no cache-tree (its tree ids are what git commits,
/// and the agent writes the index), so git builds one from the entries
/// and writes the copy, which is put back: a new file, with a cache-tree.
/// (Without the strip, git 2.39 writes no index for a commit whose
/// cache-tree is whole, and the index stayed the same file.) One whose
/// hook stages a file has the copy put back (the new entry is in the
/// index after).
#[test]
fn a_private_index_is_put_back_with_gits_own_cache_tree() {
    let Some(o) = in_a_new_repo(
        "printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && \
         echo a > a && git add a && git commit -qm one && git commit -q --allow-empty -m two && \
         a=$(stat -c %i .git/index) && git commit -q --allow-empty -m three && \
         b=$(stat -c %i .git/index) && echo same=$([ \"$a\" = \"$b\" ] && echo yes || echo no) && \
         echo trees=$(grep -ac TREE .git/index) && \
         printf '#!/bin/sh\\ngit add b\\n' > .git/hooks/pre-commit && echo b > b && \
         git commit -q --allow-empty -m four && git ls-files && ls .git | grep -c lock; true",
    ) else {
        return;
    };
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("same=no\n"),
        "the copy was not put back: {out}"
    );
    assert!(out.contains("trees=1\n"), "no cache-tree of git's: {out}");
    assert!(
        out.contains("a\nb\n0\n"),
        "the hook's staging was kept: {out}"
    );
}

/// The private copy is written whole whatever the caller's `-c` says: a
/// split copy would read its entries from a `sharedindex.*` the agent can
/// rewrite between pre-commit and git's re-read.
#[test]
fn a_callers_split_index_setting_does_not_split_the_private_index() {
    let Some(o) = in_a_new_repo(
        "printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && \
         echo a > a && git add a && git -c core.splitIndex=true commit -qm one && \
         echo shared=$(ls .git | grep -c '^sharedindex'); true",
    ) else {
        return;
    };
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("shared=0\n"), "the copy was split: {out}");
}
