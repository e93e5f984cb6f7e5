//! Shared set-up for the end-to-end suites: where the built binaries are,
//! whether root and a Docker engine are here (a failure under CI=true, a
//! skip elsewhere), and a minimal Debian image made with mmdebstrap from
//! the host's own apt mirror, cached by a tag derived from its recipe.
#![forbid(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Directory of the built sbx binaries: `$SBX_BIN_DIR`, else the cargo
/// target directory this test binary runs from (ripgrep's tests/util.rs).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SBX_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// `sbx-run`, finding the other tools beside it.
pub fn sbx() -> Command {
    let mut c = Command::new(bin("sbx-run"));
    c.env("SBX_BIN_DIR", bin("sbx-run").parent().expect("bin dir"));
    c
}

/// stdout then stderr, for assertion messages and matching.
pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `make debug` first or set SBX_BIN_DIR",
        p.display()
    );
    p
}

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Returns false (and says why) when a prerequisite is missing; under CI
/// that is a failure, not a skip.
pub fn prerequisite(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            !under_ci(),
            "missing prerequisite under CI: {what} (scripts/prereqs installs it)"
        );
        eprintln!("skipping: {what} (run scripts/prereqs)");
    }
    ok
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True when a Docker engine answers.
pub fn docker_ready() -> bool {
    Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run a command, panicking with its stderr on failure; returns stdout.
pub fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The minimal Debian image (mmdebstrap from the host's apt mirror, made
/// by sbx-run's own code), built when missing. Serialised across test
/// processes with a lock file so parallel suites build it once.
pub fn test_image() -> String {
    let lock_path = std::env::temp_dir().join("sbx-test-image.lock");
    let lock_file = File::create(&lock_path).expect("lock file");
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock");
    sbx_run::image::ensure_bootstrap().unwrap_or_else(|e| panic!("bootstrap image: {e}"))
}

/// The base image's tag (`$SBX_BASE_TAG`, else latest), as sbx-run reads it.
pub fn base_tag() -> String {
    std::env::var("SBX_BASE_TAG")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "latest".into())
}

/// The lock every rebuild of the shared base tag takes: a test that needs
/// the tag as it built it (delta_pager's) holds it until its sandbox has
/// started, so no other suite's [`base_image`] rebuilds the tag meanwhile.
pub fn base_image_lock() -> nix::fcntl::Flock<File> {
    let lock_file =
        File::create(std::env::temp_dir().join("sbx-base-image.lock")).expect("lock file");
    nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock")
}

/// The base image (`build-base --bootstrap --no-ai-clis`, tag
/// `$SBX_BASE_TAG` or latest, which sbx-run also reads) with
/// the freshly built sbx binaries, once per test process and one process
/// at a time (cached layers make a rebuild quick).
pub fn base_image() -> bool {
    static BUILT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BUILT.get_or_init(|| {
        if !prerequisite(docker_ready(), "a running Docker engine") {
            return false;
        }
        let _lock = base_image_lock();
        let sbx = bin("sbx-run");
        let out = Command::new(&sbx)
            .env("SBX_BIN_DIR", sbx.parent().expect("bin dir"))
            .args(["-q", "build-base", "--bootstrap", "--no-ai-clis"])
            .output()
            .expect("sbx-run build-base");
        assert!(
            out.status.success(),
            "build-base: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        true
    })
}

/// The base image with the AI CLIs (npm, cached layer) and these binaries.
/// `SBX_TEST_CA_CERT` names a CA bundle for TLS-intercepting networks.
pub fn base_image_with_clis() -> bool {
    if !prerequisite(docker_ready(), "a running Docker engine") {
        return false;
    }
    let _lock = base_image_lock();
    let sbx = bin("sbx-run");
    let mut c = Command::new(&sbx);
    c.env("SBX_BIN_DIR", sbx.parent().unwrap())
        .args(["-q", "build-base", "--bootstrap"]);
    // TLS-intercepting networks: the host's CA bundle, as scripts/shell does.
    let ca = std::env::var_os("SBX_TEST_CA_CERT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into());
    if ca.is_file() {
        c.arg("--ca-cert").arg(ca);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "build-base: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tag = std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into());
    let has = Command::new("docker")
        .args(["run", "--rm", "--entrypoint", "claude"])
        .arg(format!("agent-sandbox-base:{tag}"))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    prerequisite(
        has,
        "Claude Code in the base image (build-base without --no-ai-clis; npm must reach its registry)",
    )
}

/// Drop `start`'s hold for its bind check from a container's `Config`
/// (docker inspect): show-run leaves it out, since a pasted line has no
/// sbx-run to release the guest (docs/security.md).
pub fn drop_hold_env(config: &mut serde_json::Value) {
    let hold = format!("{}=1", sbx_core::guestapi::HOLD_ENV);
    if let Some(env) = config["Env"].as_array_mut() {
        env.retain(|e| e.as_str() != Some(hold.as_str()));
    }
}

/// A fresh repository (`git init`, nothing committed) that ignores its
/// `.agent-sandbox/`.
pub fn plain_repo(name: &str) -> Repo {
    let r = Repo::new(name);
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&r.path));
    std::fs::write(r.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    r
}

/// A repository directory in a fresh temporary directory under /var/tmp
/// (outside /tmp, which sandboxes mount over); its sandbox, volumes and
/// per-repository image are removed when it drops.
pub struct Repo {
    dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Repo {
    /// An empty directory `name` in the temporary directory.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        Self { dir, path }
    }

    /// A repository `name` with one commit, which ignores its `.agent-sandbox/`.
    pub fn committed(name: &str) -> Self {
        let repo = Self::new(name);
        repo.git(&["init", "-q", "-b", "main"]);
        std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "base"]);
        repo
    }

    /// [`Repo::committed`], after `sbx-run init`.
    pub fn initialised(name: &str) -> Self {
        let repo = Self::committed(name);
        let o = sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        repo
    }

    /// The temporary directory holding the repository.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `sh -c script` in the repository's sandbox, as the agent.
    pub fn exec(&self, script: &str) -> Output {
        sbx()
            .args(["exec", "-C"])
            .arg(&self.path)
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    }

    /// The host's git in the repository, with a commit identity (a, a@b),
    /// required to succeed; its stdout.
    pub fn git(&self, args: &[&str]) -> String {
        sh(Command::new("git")
            .args(["-c", "user.name=a", "-c", "user.email=a@b"])
            .args(args)
            .current_dir(&self.path))
    }

    /// [`Repo::exec`] with a commit identity set (a, a@b).
    pub fn agent(&self, script: &str) -> Output {
        self.exec(&format!(
            "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b \
             GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; {script}"
        ))
    }

    /// An executable hook `.git/hooks/<name>` holding `body`.
    pub fn hook(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let hook = self.path.join(".git/hooks").join(name);
        std::fs::write(&hook, body).unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The temporary directory, repository and all, handed to the agent
    /// (uid 1000), as a developer's checkout is theirs.
    pub fn give_to_agent(&self) {
        sh(Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(self.root()));
    }

    /// `sbx-run init` and `sbx-run start` on it, each required to succeed.
    pub fn start(&self) {
        for args in [&["-q", "init"][..], &["start"][..]] {
            let o = sbx().args(args).arg(&self.path).output().unwrap();
            assert!(
                o.status.success(),
                "{args:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// A repository `name` with one commit (ignoring its `.agent-sandbox/`),
/// its sandbox started: root's checkout, as the README runs it.
pub fn started_repo(name: &str) -> Repo {
    let repo = Repo::committed(name);
    repo.start();
    repo
}

/// Config lines, for the sandbox's `printf`, that run `touch CANARY` on
/// the next `git status` in that repository.
pub fn fsmonitor_lines(canary: &Path) -> String {
    format!(
        "[core]\\n\\tfsmonitor = \\042touch {}; false\\042\\n",
        canary.display()
    )
}

/// The start of the agent's hand-made index writers (python3, run as
/// `python3 FILE NAME TEXT`): a loose blob `sha` holding TEXT, `ent(n,
/// s)` for one version-2 entry, `put(body)` to put the index in place.
pub const PY_INDEX_LIB: &str = r#"
import hashlib, os, struct, subprocess, sys, zlib
name, text = sys.argv[1].encode(), sys.argv[2].encode()
raw = b'blob %d\0' % len(text) + text
sha = hashlib.sha1(raw).hexdigest()
d = '.git/objects/' + sha[:2]
os.makedirs(d, exist_ok=True)
open(d + '/' + sha[2:], 'wb').write(zlib.compress(raw))
def ent(n, s):
    e = struct.pack('>10I', 0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 0) + bytes.fromhex(s) + struct.pack('>H', len(n)) + n
    return e + b'\0' * (8 - len(e) % 8)
def put(body):
    open('.git/index.new', 'wb').write(body + hashlib.sha1(body).digest())
    os.rename('.git/index.new', '.git/index')
"#;

/// The guard attacks' pre-commit: refuses any staged MARKER.
pub const REFUSE_MARKER: &str =
    "#!/bin/sh\nif git diff --cached | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\n";

/// The attack rounds' commit-msg: the subject must say OK.
pub const SUBJECT_OK: &str = "#!/bin/sh\n\
    head -n1 \"$1\" | grep -q OK || { echo 'commit-msg: no OK in the subject' >&2; exit 1; }\n";

/// A shell snippet, run as the agent in an attack repository: `$C`, a
/// commit of MARKER on HEAD that no hook saw, written by Python as any
/// program could.
pub const PLUMBED: &str = "blob=$(echo MARKER | git hash-object -w --stdin) && \
    tree=$(printf '100644 blob %s\\ta\\n' $blob | git mktree) && \
    C=$(printf 'tree %s\\nparent %s\\nauthor a <a@b> 1 +0000\\ncommitter a <a@b> 1 +0000\\n\\nplumbed OK\\n' \
        $tree $(git rev-parse HEAD) | python3 -c \"
import hashlib, os, sys, zlib
b = sys.stdin.buffer.read(); o = b'commit %d\\0' % len(b) + b; h = hashlib.sha1(o).hexdigest()
os.makedirs('.git/objects/' + h[:2], exist_ok=True)
open('.git/objects/' + h[:2] + '/' + h[2:], 'wb').write(zlib.compress(o)); print(h)\") && git cat-file -e $C";

/// The attack rounds' workspace `name`: `main` with one commit (`a`
/// and a `.gitignore` naming `/remote.git/`, `/.agent-sandbox/` and
/// `ignored`), made by `git commit <commit>`, a bare remote `remote.git`
/// inside the workspace holding main (so the sandbox reaches it; `origin`
/// at its path in the sandbox), and
/// `hooks`; not yet the agent's (add files, then [`Repo::give_to_agent`]).
pub fn attack_repo(name: &str, commit: &[&str], ignored: &[&str], hooks: &[(&str, &str)]) -> Repo {
    let repo = Repo::new(name);
    let git = |args: &[&str]| repo.git(args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join("a"), "1\n").unwrap();
    let mut ignore = String::from("/remote.git/\n/.agent-sandbox/\n");
    for i in ignored {
        ignore.push_str(i);
        ignore.push('\n');
    }
    std::fs::write(repo.path.join(".gitignore"), ignore).unwrap();
    git(&["add", "a", ".gitignore"]);
    git(&[&["commit"][..], commit].concat());
    git(&["init", "-q", "--bare", "remote.git"]);
    git(&["push", "-q", "remote.git", "main"]);
    // `origin` as the sandbox sees it: its .git/config is the host's and
    // read-only there, so the agent cannot add it.
    let url = format!("/workspace/{name}/remote.git");
    git(&["remote", "add", "origin", &url]);
    for (name, body) in hooks {
        repo.hook(name, body);
    }
    repo
}

/// `make()`'s repository with its sandbox started; None (a skip, or under
/// CI a failure) without Docker or the base image.
pub fn started(make: impl FnOnce() -> Repo) -> Option<Repo> {
    if !base_image() {
        return None;
    }
    let repo = make();
    repo.start();
    Some(repo)
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = sbx()
            .args(["-q", "rm", "--volumes"])
            .arg(&self.path)
            .output();
    }
}

/// git-http-backend behind python's CGI server on the sandbox's loopback
/// (127.0.0.1:8765, repositories under /tmp/srv).
pub const GIT_HTTP_SERVER: &str = r#"import http.server, os
class H(http.server.CGIHTTPRequestHandler):
    def is_cgi(self):
        if self.path.startswith('/git/'):
            self.cgi_info = ('/git', 'http-backend/' + self.path[5:])
            return True
        return False
os.makedirs('/tmp/cgi/git', exist_ok=True)
os.chdir('/tmp/cgi')
os.symlink('/usr/lib/git-core/git-http-backend', '/tmp/cgi/git/http-backend')
os.environ['GIT_PROJECT_ROOT'] = '/tmp/srv'
os.environ['GIT_HTTP_EXPORT_ALL'] = '1'
http.server.HTTPServer(('127.0.0.1', 8765), H).serve_forever()
"#;

/// The attack rounds' racer, `python3 .race.py SRC TARGET [HOOK [MASK
/// [SKIP [late]]]]`: once HOOK (pre-commit) runs, renames SRC over TARGET
/// at the (SKIP+1)th inotify MASK event (IN_CLOSE_NOWRITE) on TARGET, or
/// after 5 s without one (git re-reads its index and message by path after
/// the hooks; a private copy is never read there); `late` watches TARGET's
/// directory only once the hook runs, for one git makes after the racer
/// starts.
pub const RACER: &str = r#"
import ctypes, os, select, struct, sys, time
src, target = sys.argv[1], sys.argv[2]
hook = ('/' + (sys.argv[3] if len(sys.argv) > 3 else 'pre-commit')).encode()
mask = int(sys.argv[4]) if len(sys.argv) > 4 else 0x10
skip = int(sys.argv[5]) if len(sys.argv) > 5 else 0
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
late = len(sys.argv) > 6
watch = lambda: libc.inotify_add_watch(fd, (os.path.dirname(target) or '.').encode(), mask)
if not late:
    watch()
name = os.path.basename(target).encode()
def hook_running():
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                c = open('/proc/%s/cmdline' % p, 'rb').read()
            except OSError:
                continue
            if b'/proc/self/fd/' in c and hook in c:
                return True
    return False
t0 = time.time()
while not hook_running():
    if time.time() - t0 > 20:
        sys.exit("no hook seen")
if late:
    watch()
os.set_blocking(fd, False)
try:
    while os.read(fd, 4096):
        pass
except BlockingIOError:
    pass
os.set_blocking(fd, True)
t0 = time.time()
while time.time() - t0 < 5:
    if not select.select([fd], [], [], 0.1)[0]:
        continue
    buf, i, hit = os.read(fd, 4096), 0, False
    while i < len(buf):
        _, _, _, n = struct.unpack_from('iIII', buf, i)
        hit |= buf[i + 16:i + 16 + n].rstrip(b'\0') == name
        i += 16 + n
    if hit:
        if skip == 0:
            break
        skip -= 1
os.rename(src, target)
"#;

/// The newest backup in a file:// store at `store` inside container
/// `name` (running or stopped; `store` on a volume of it or on its own
/// layer), restored on the host into `into`/out: what a final backup
/// kept, read without the sandbox.
pub fn restore_from_container(name: &str, store: &str, into: &Path) -> PathBuf {
    let local = into.join("store");
    std::fs::create_dir_all(&local).expect("store dir");
    // docker cp does not see a stopped sandbox's volumes: a throwaway
    // container of its image, with its volumes, packs the store.
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"img=$(docker inspect --format '{{.Config.Image}}' "$1") && docker run --rm --volumes-from "$1" --entrypoint tar "$img" -cC "$2" . | tar -xC "$3""#)
        .args(["sh", name, store])
        .arg(&local)
        .output()
        .expect("sh");
    assert!(
        o.status.success(),
        "copying {store} out of {name}: {}",
        text(&o)
    );
    let out = into.join("out");
    let o = Command::new(bin("sbx-backup"))
        .args(["-q", "restore", "--url"])
        .arg(format!("file://{}", local.display()))
        .arg("--to")
        .arg(&out)
        .arg("--home")
        .arg(&out)
        .arg("--state-dir")
        .arg(into.join("state"))
        .output()
        .expect("sbx-backup restore");
    assert!(o.status.success(), "sbx-backup restore: {}", text(&o));
    out
}

/// Whether Docker says container `name` runs (false when it is gone).
pub fn container_running(name: &str) -> bool {
    let o = Command::new("docker")
        .args(["inspect", "--format", "{{.State.Running}}", name])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&o.stdout).trim() == "true"
}

/// A base with the AI CLIs (tools.rs, tools_a38f.rs), its own tag (`<base tag>-ai`) so the suites
/// that build theirs without CLIs do not trade images with this one.
pub fn ai_base() -> Option<String> {
    static TAG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        if !prerequisite(docker_ready(), "a running Docker engine") {
            return None;
        }
        let tag = format!("{}-ai", base_tag());
        let _lock = base_image_lock();
        let mut c = sbx();
        c.env("SBX_BIN_DIR", static_checker_bin_dir());
        c.args(["-q", "build-base", "--bootstrap", "--tag", &tag]);
        // As run.rs's full image does (same layers, one npm install).
        let ca = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
        if ca.is_file() {
            c.arg("--ca-cert").arg(ca);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "build-base: {}", text(&o));
        let v = Command::new("docker")
            .args(["run", "--rm", "--entrypoint", "claude"])
            .arg(format!("agent-sandbox-base:{tag}"))
            .arg("--version")
            .output()
            .unwrap();
        if !prerequisite(
            text(&v).contains("Claude Code"),
            "Claude Code in the base image (the image's npm could not install it)",
        ) {
            return None;
        }
        Some(tag)
    })
    .clone()
}

/// The bin directory the image is built from, with the checker linked
/// statically as `make build` links it: no loader stands between Claude
/// Code and the verdict (issue 38, class 1). The other tools are the
/// debug builds beside sbx-run. `scripts/test` links the checker once
/// before the suites (`SBX_STATIC_CHECKER`); run alone, this builds it.
fn static_checker_bin_dir() -> std::path::PathBuf {
    let debug = bin("sbx-run").parent().unwrap().to_path_buf();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let host = text(&Command::new("rustc").arg("-vV").output().unwrap())
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .unwrap();
    let built = match std::env::var_os("SBX_STATIC_CHECKER") {
        Some(p) => std::path::PathBuf::from(p),
        None => build_static_checker(&root, &host),
    };
    // Beside the build, not in /tmp: one per tree, replaced by the next run.
    let dir = root.join("target").join(&host).join("e2e-bin");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&debug).unwrap().flatten() {
        let p = e.path();
        if p.is_file() && p.file_name().is_some_and(|n| n != "sbx-tool-guard") {
            std::os::unix::fs::symlink(&p, dir.join(e.file_name())).unwrap();
        }
    }
    std::fs::copy(&built, dir.join("sbx-tool-guard")).unwrap();
    dir
}

/// The checker built for HOST with a static C runtime, in its own target
/// directory (its whole dependency tree once more): for a run of this
/// suite alone.
fn build_static_checker(root: &std::path::Path, host: &str) -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = Command::new(cargo)
        .current_dir(root)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args([
            "build",
            "--locked",
            "-p",
            "sbx-tool-guard",
            "--bin",
            "sbx-tool-guard",
            "--target",
            host,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "static checker: {}", text(&o));
    root.join("target").join(host).join("debug/sbx-tool-guard")
}

/// A stand-in server's container and network, removed when a test ends
/// (the sandbox's holder taken off the network first).
pub struct Standin {
    pub container: String,
    pub network: String,
    pub holder: String,
}

impl Drop for Standin {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("docker")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet(&["rm", "-f", &self.container]);
        quiet(&["network", "disconnect", "-f", &self.network, &self.holder]);
        quiet(&["network", "rm", &self.network]);
    }
}

/// A started sandbox, removed with its volumes when a test ends.
pub struct Started<'a>(pub &'a Repo);

impl Drop for Started<'_> {
    fn drop(&mut self) {
        let _ = sbx()
            .args(["-q", "rm", "--volumes"])
            .arg(&self.0.path)
            .status();
    }
}
