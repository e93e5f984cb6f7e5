//! sbx-git-client, the sandbox's libc-free `git`, against the guard it
//! stands in for. Differential: the same call (argv[0], arguments,
//! environment byte for byte, duplicates and malformed entries included,
//! umask) through the client and through the guard must put the same
//! request on the wire, and the same broker reply must end both the same
//! way (exit status, stderr). Then against a real `sbx-git-guard serve`:
//! exit codes, stdin/stdout, signals relayed to git, a deleted working
//! directory, a huge argv and environment; and the fallback to the full
//! guard when there is no broker.

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sbx_git_guard::broker::proto::{self, Reply};

const GUARD: &str = env!("CARGO_BIN_EXE_sbx-git-guard");

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// The client beside the guard (`make debug` / scripts/test build it).
fn client() -> Option<PathBuf> {
    let p = Path::new(GUARD).with_file_name("sbx-git-client");
    if p.is_file() {
        return Some(p);
    }
    assert!(
        !ci(),
        "{} is not built (scripts/test builds it: cargo rustc -p sbx-git-client --features client -- -C panic=abort)",
        p.display()
    );
    eprintln!("skipping: {} is not built (make debug)", p.display());
    None
}

/// Exec `prog` with exactly this argv and environment (raw entries, so
/// duplicates and entries without '=' reach it as given) and umask; with
/// `as_user`, as uid/gid 1000 (needs root).
fn exec_raw(
    prog: &Path,
    argv: &[&[u8]],
    env: &[&[u8]],
    umask: u32,
    cwd: &Path,
    as_user: bool,
) -> Output {
    use std::os::unix::process::CommandExt as _;
    // The lists go through a file: one argument is at most 128 KiB.
    let py = "import ctypes, os, sys\n\
        spec = open(sys.argv[4]).read().split('\\n')\n\
        a = [bytes.fromhex(x) for x in spec[0].split(',') if x]\n\
        e = [bytes.fromhex(x) for x in spec[1].split(',') if x]\n\
        arr = lambda l: (ctypes.c_char_p * (len(l) + 1))(*l, None)\n\
        os.umask(int(sys.argv[3], 8))\n\
        os.chdir(sys.argv[2])\n\
        ctypes.CDLL(None).execve(sys.argv[1].encode(), arr(a), arr(e))\n\
        sys.exit('execve failed')\n";
    let hex = |l: &[&[u8]]| {
        l.iter()
            .map(|b| b.iter().map(|c| format!("{c:02x}")).collect::<String>())
            .collect::<Vec<_>>()
            .join(",")
    };
    let spec = cwd.join("exec-spec");
    std::fs::write(&spec, format!("{}\n{}\n", hex(argv), hex(env))).unwrap();
    let mut py3 = Command::new("python3");
    if as_user {
        py3.uid(1000).gid(1000);
    }
    let mut child = py3
        .arg("-c")
        .arg(py)
        .arg(prog)
        .arg(cwd)
        .arg(format!("{umask:o}"))
        .arg(&spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/prereqs installs it)");
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// A broker that records one request's raw bytes (and how many fds came
/// with it) and answers with `reply` (raw frame bytes; empty: hang up).
fn recorder(sock: &Path, reply: Vec<u8>) -> std::thread::JoinHandle<(Vec<u8>, usize)> {
    let l = UnixListener::bind(sock).unwrap();
    // Callers run as another user too.
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let start = Instant::now();
        let c = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(_) if start.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("nothing called the recorder: {e}"),
            }
        };
        let mut got = Vec::new();
        let mut nfds = 0;
        let mut want = 4;
        while got.len() < want {
            let mut buf = vec![0u8; 1 << 16];
            let (n, fds) = sbx_sys::privsep::recv_with_fds(c.as_fd(), &mut buf, 8).unwrap();
            assert!(n > 0, "the request ended early");
            nfds += fds.len();
            got.extend_from_slice(&buf[..n]);
            if got.len() >= 4 {
                want = 4 + u32::from_le_bytes(got[..4].try_into().unwrap()) as usize;
            }
        }
        (&c).write_all(&reply).unwrap();
        (got, nfds)
    })
}

fn run_both(
    dir: &Path,
    argv: &[&[u8]],
    env: &[&[u8]],
    umask: u32,
    reply: &[u8],
) -> [(Vec<u8>, usize, Output); 2] {
    let client = client().unwrap();
    let [c, g] = [client.as_path(), Path::new(GUARD)]
        .map(|p| run_recorded(dir, p, argv, env, umask, reply, false));
    [c, g]
}

/// `prog` run against a [`recorder`] answering `reply` (`$SBX_GIT_BROKER`
/// names it): the request, how many fds came with it, and how `prog` ended.
fn run_recorded(
    dir: &Path,
    prog: &Path,
    argv: &[&[u8]],
    env: &[&[u8]],
    umask: u32,
    reply: &[u8],
    as_user: bool,
) -> (Vec<u8>, usize, Output) {
    {
        let sock = dir.join("rec.sock");
        let _ = std::fs::remove_file(&sock);
        let rec = recorder(&sock, reply.to_vec());
        let var = [
            b"SBX_GIT_BROKER=".as_slice(),
            sock.as_os_str().as_encoded_bytes(),
        ]
        .concat();
        let mut env: Vec<&[u8]> = env.to_vec();
        env.push(&var);
        let out = exec_raw(prog, argv, &env, umask, dir, as_user);
        let (req, fds) = rec.join().unwrap();
        (req, fds, out)
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// What, argv, environment, umask.
type Case<'a> = (&'a str, Vec<&'a [u8]>, Vec<&'a [u8]>, u32);

#[test]
fn the_client_sends_the_guards_request_byte_for_byte() {
    if client().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let big_arg = vec![b'a'; 100_000];
    let big_env = [b"BIG=".as_slice(), &vec![b'v'; 120_000]].concat();
    let many: Vec<Vec<u8>> = (0..3000)
        .map(|i| format!("path/{i:0>60}").into_bytes())
        .collect();
    let mut huge: Vec<&[u8]> = vec![b"git", b"log", b"--"];
    huge.extend(many.iter().map(|v| v.as_slice()));
    huge.push(&big_arg);
    let cases: Vec<Case> = vec![
        (
            "plain",
            vec![b"git", b"status", b"--short"],
            vec![b"HOME=/h", b"PATH=/usr/bin:/bin"],
            0o022,
        ),
        (
            "a path as argv[0], odd umask",
            vec![b"/usr/local/bin/git", b"commit", b"-m", b"m\xffsg"],
            vec![b"LANG=C"],
            0o027,
        ),
        (
            "dashed",
            vec![b"/usr/lib/git-core/git-commit", b"-qm", b"x"],
            vec![],
            0o077,
        ),
        ("dashed, empty command", vec![b"git-", b"x"], vec![], 0o022),
        (
            "pass-through",
            vec![b"git-receive-pack", b"/srv/r.git"],
            vec![b"GIT_DIR=/x"],
            0o022,
        ),
        (
            "environment as the kernel gives it",
            vec![b"git", b"version"],
            vec![
                b"A=1",
                b"A=2",
                b"NOEQUALS",
                b"=lead=v",
                b"",
                b"E=",
                b"K=v=w",
                b"U=\xfe\xff",
            ],
            0o022,
        ),
        ("no arguments", vec![b"git"], vec![], 0o022),
        ("huge argv and environment", huge, vec![&big_env], 0o022),
    ];
    for (what, argv, env, umask) in cases {
        let [(c_req, c_fds, c_out), (g_req, g_fds, g_out)] =
            run_both(tmp.path(), &argv, &env, umask, &Reply::Exited(3).encode());
        assert!(
            c_req == g_req,
            "{what}: the requests differ ({} vs {} bytes)",
            c_req.len(),
            g_req.len()
        );
        assert_eq!((c_fds, g_fds), (4, 4), "{what}");
        assert_eq!(c_out.status.code(), Some(3), "{what}: {}", text(&c_out));
        assert_eq!(g_out.status.code(), Some(3), "{what}: {}", text(&g_out));
        // And it decodes as the broker reads it.
        let r = proto::Request::decode(&c_req[4..]);
        assert!(r.is_ok() || what.contains("environment"), "{what}: {r:?}");
    }
}

#[test]
fn every_broker_reply_ends_the_client_as_it_ends_the_guard() {
    if client().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let frame = |body: &[u8]| [&(body.len() as u32).to_le_bytes()[..], body].concat();
    let replies: Vec<(&str, Vec<u8>, Option<i32>)> = vec![
        ("exit 0", Reply::Exited(0).encode(), Some(0)),
        ("exit 128", Reply::Exited(128).encode(), Some(128)),
        ("exit over 255", Reply::Exited(300).encode(), Some(255)),
        ("negative exit", Reply::Exited(-1).encode(), Some(0)),
        ("killed by SIGINT", Reply::Signaled(2).encode(), Some(130)),
        ("killed by SIGKILL", Reply::Signaled(9).encode(), Some(137)),
        (
            "the broker's error",
            Reply::Error("peer credentials: n\u{e9}ant".into()).encode(),
            Some(125),
        ),
        ("an error cut mid-character", frame(b"Xab\xc3"), Some(125)),
        ("hung up", Vec::new(), Some(125)),
        ("empty frame", frame(b""), Some(125)),
        ("unknown tag", frame(b"Q\0\0\0\0"), Some(125)),
        ("short integer", frame(b"E\x01"), Some(125)),
        ("oversized", 5000u32.to_le_bytes().to_vec(), Some(125)),
        ("cut mid-frame", vec![5, 0, 0, 0, b'E'], Some(125)),
    ];
    for (what, reply, code) in replies {
        let [(_, _, c), (_, _, g)] = run_both(
            tmp.path(),
            &[b"git", b"status"],
            &[b"PATH=/usr/bin:/bin"],
            0o022,
            &reply,
        );
        assert_eq!(c.status.code(), code, "{what}: {}", text(&c));
        assert_eq!(c.status.code(), g.status.code(), "{what}");
        assert_eq!(
            String::from_utf8_lossy(&c.stderr),
            String::from_utf8_lossy(&g.stderr),
            "{what}"
        );
        assert_eq!(c.stdout, g.stdout, "{what}");
    }
}

#[test]
fn without_a_broker_the_full_guard_decides() {
    let Some(client) = client() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = dir.join("repo");
    let git = |args: &[&str]| {
        Command::new("/usr/bin/git")
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap()
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q", "."]);
    std::fs::write(repo.join("f"), "x").unwrap();
    git(&["add", "f"]);
    let audit = dir.join("audit.jsonl");
    let run = |prog: &Path, args: &[&str], env: &[(&str, &Path)]| {
        let mut c = Command::new(prog);
        c.arg0("git")
            .args(args)
            .current_dir(&repo)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("SBX_REAL_GIT", "/usr/bin/git")
            .env("SBX_AUDIT_LOG", &audit);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    use std::os::unix::process::CommandExt as _;
    // No broker configured: the client execs the guard, which refuses
    // what it refuses and runs the real git for the rest.
    let o = run(&client, &["commit", "--no-verify", "-qm", "m"], &[]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("block-no-verify"), "{}", text(&o));
    assert!(
        std::fs::read_to_string(&audit)
            .unwrap()
            .contains("block-no-verify")
    );
    let o = run(
        &client,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "m",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&client, &["rev-parse", "--verify", "nosuch"], &[]);
    assert_eq!(o.status.code(), Some(128), "{}", text(&o));
    // A broker configured but not there: the guard's own wait and message.
    let gone = dir.join("gone.sock");
    let c = run(&client, &["status"], &[("SBX_GIT_BROKER", &gone)]);
    let g = run(Path::new(GUARD), &["status"], &[("SBX_GIT_BROKER", &gone)]);
    assert_eq!(c.status.code(), Some(125), "{}", text(&c));
    assert_eq!(text(&c), text(&g));
    assert!(text(&c).contains("git broker"), "{}", text(&c));
    // Not git by name: the guard's own CLI.
    let o = Command::new(&client).arg("rules").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("block-no-verify"), "{}", text(&o));
}

struct Broker(std::process::Child);
impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A broker in `dir`, as the image lays it out (the real git execute-only
/// in a 0700 directory), listening; its socket.
fn real_broker(dir: &Path) -> (Broker, PathBuf) {
    let libexec = dir.join("libexec");
    std::fs::create_dir(&libexec).unwrap();
    std::fs::set_permissions(&libexec, std::fs::Permissions::from_mode(0o700)).unwrap();
    let real = libexec.join("git");
    std::fs::copy("/usr/bin/git", &real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o711)).unwrap();
    let sock = dir.join("s.sock");
    let broker = Broker(
        Command::new(GUARD)
            .args(["serve", "--socket"])
            .arg(&sock)
            .arg("--git")
            .arg(&real)
            // A gid no user has: the host need not have the image's group.
            .args(["--group", "2575"])
            .env_clear()
            .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(start.elapsed() < Duration::from_secs(10), "no broker");
        std::thread::sleep(Duration::from_millis(10));
    }
    (broker, sock)
}

fn root() -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        assert!(!ci(), "missing prerequisite under CI: root");
        eprintln!("skipping: the broker test needs root");
    }
    ok
}

#[test]
fn through_a_real_broker_the_client_is_git() {
    use std::os::unix::process::CommandExt as _;
    let Some(client) = client() else { return };
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, sock) = real_broker(dir);
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let cmd = |prog: &Path, cwd: &Path, args: &[&str]| {
        let mut c = Command::new(prog);
        c.arg0("git")
            .args(args)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@b")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@b")
            .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
            .env("SBX_GIT_BROKER", &sock);
        c
    };
    let run = |prog: &Path, cwd: &Path, args: &[&str], stdin: &[u8]| {
        let mut ch = cmd(prog, cwd, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut i = ch.stdin.take().unwrap();
        let data = stdin.to_vec();
        let w = std::thread::spawn(move || {
            let _ = i.write_all(&data);
        });
        let o = ch.wait_with_output().unwrap();
        w.join().unwrap();
        o
    };
    let o = run(&client, &repo, &["init", "-q", "."], b"");
    assert!(o.status.success(), "{}", text(&o));
    // stdin in, stdout out, a megabyte each way; the same as the real git.
    let blob: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let o = run(&client, &repo, &["hash-object", "-w", "--stdin"], &blob);
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8(o.stdout).unwrap();
    let real_id = run(
        Path::new("/usr/bin/git"),
        &repo,
        &["hash-object", "--stdin"],
        &blob,
    );
    assert_eq!(id, String::from_utf8(real_id.stdout).unwrap());
    let o = run(&client, &repo, &["cat-file", "blob", id.trim()], b"");
    assert!(o.stdout == blob, "cat-file through the client");
    // Exit codes: git's own, and the guard's refusal.
    let o = run(
        &client,
        &repo,
        &["rev-parse", "--verify", "-q", "nosuch"],
        b"",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = run(&client, &repo, &["no-such-command"], b"");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = run(
        &client,
        &repo,
        &["commit", "--allow-empty", "-n", "-m", "x"],
        b"",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("block-no-verify"), "{}", text(&o));
    // A huge argv and environment arrive whole.
    let mut args: Vec<String> = vec!["rev-parse".into(), "--sq-quote".into()];
    args.extend((0..2000).map(|i| format!("{i:0>100}")));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = cmd(&client, &repo, &a)
        .env("BIG", "v".repeat(100_000))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).matches('\'').count(),
        4000,
        "every argument came back"
    );
    // A working directory deleted under the caller: the same answer as
    // through the guard.
    let gone = dir.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let pair = |prog: &Path| {
        let mut c = cmd(Path::new("bash"), dir, &[]);
        c.arg0("bash")
            .arg("-c")
            .arg(r#"cd "$0" && rmdir "$0" && exec -a git "$1" status"#)
            .arg(&gone)
            .arg(prog);
        std::fs::create_dir_all(&gone).unwrap();
        c.output().unwrap()
    };
    let (c, g) = (pair(&client), pair(Path::new(GUARD)));
    assert_eq!(
        c.status.code(),
        g.status.code(),
        "{} / {}",
        text(&c),
        text(&g)
    );
    assert!(!c.status.success(), "{}", text(&c));
    assert_eq!(text(&c), text(&g));
    // A signal to the client reaches git: `hash-object --stdin` waits on
    // a stdin that stays open until SIGINT ends it (128 + 2).
    let mut ch = cmd(&client, &repo, &["hash-object", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ch.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = ch.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = ch.kill();
            panic!("SIGINT did not reach git: the client still waits");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130), "{status:?}");
    let mut err = String::new();
    ch.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.is_empty(), "{err}");
}

#[test]
fn the_guard_never_takes_the_client_for_the_real_git() {
    let Some(client) = client() else { return };
    // The image's PATH: the client as `git` first, the real git after.
    // Were the client the guard's "real git", each would exec the other
    // (here the guard's clean PATH would end it at a system git).
    let tmp = tempfile::tempdir().unwrap();
    let (bin, real) = (tmp.path().join("bin"), tmp.path().join("real"));
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&client, bin.join("git")).unwrap();
    std::fs::write(real.join("git"), "#!/bin/sh\necho the real git\n").unwrap();
    std::fs::set_permissions(real.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new("/usr/bin/timeout")
        .arg("20")
        .arg(bin.join("git"))
        .arg("--version")
        .current_dir(tmp.path())
        .env_clear()
        .env("PATH", format!("{}:{}", bin.display(), real.display()))
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "the real git\n",
        "{}",
        text(&o)
    );
}

/// As a hook step that only starts the repository's hook, the client
/// answers a hook the repository lacks (or has without an execute bit)
/// itself, exit 0 and no guard started, and hands every other case to the
/// guard beside it: a present hook (here without a broker), the steps that
/// chain a second hook, the checking steps of a checked routing (pre-push,
/// reference-transaction `prepared`), a step without the trusted
/// directory, a name that is not a hook. Run as each of the guard's hook
/// names, so the two lists cannot drift.
#[test]
fn as_a_hook_step_the_client_answers_only_for_absent_hooks() {
    use sbx_git_guard::hooks::{HOOK_NAMES, HOOKS_ONLY_ENV, TRUSTED_ENV};
    let Some(client) = client() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::copy(&client, dir.join("sbx-git-client")).unwrap();
    let mark = dir.join("guard-ran");
    std::fs::write(
        dir.join("sbx-git-guard"),
        format!("#!/bin/sh\necho \"$0\" >> {}\nexit 3\n", mark.display()),
    )
    .unwrap();
    let trusted = dir.join("trusted");
    std::fs::create_dir(&trusted).unwrap();
    std::fs::write(trusted.join("pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(trusted.join("commit-msg"), "#!/bin/sh\n").unwrap();
    for f in ["sbx-git-guard", "trusted/pre-commit"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let steps = dir.join("hooks");
    std::fs::create_dir(&steps).unwrap();
    let run_with = |name: &str, args: &[&str], env: &[(&str, &Path)]| -> (Option<i32>, bool) {
        let link = steps.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(dir.join("sbx-git-client"), &link).unwrap();
        }
        let _ = std::fs::remove_file(&mark);
        let o = Command::new(&link)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .output()
            .unwrap();
        (o.status.code(), mark.exists())
    };
    let run = |name: &str, env: &[(&str, &Path)]| run_with(name, &[], env);
    let routed = [(HOOKS_ONLY_ENV, Path::new("1")), (TRUSTED_ENV, &trusted)];
    for name in HOOK_NAMES {
        let to_guard = *name == "pre-commit"
            || ["pre-applypatch", "pre-merge-commit", "applypatch-msg"].contains(name);
        let want = if to_guard {
            (Some(3), true)
        } else {
            (Some(0), false)
        };
        assert_eq!(run(name, &routed), want, "{name}");
    }
    // A checked routing (no hooks-only variable): only its two checks are
    // the guard's; every other step only starts the hook.
    let checked = [(TRUSTED_ENV, trusted.as_path())];
    assert_eq!(run("post-commit", &checked), (Some(0), false));
    assert_eq!(run("pre-commit", &checked), (Some(3), true));
    assert_eq!(run("pre-push", &checked), (Some(3), true));
    let rt = |state: &str| run_with("reference-transaction", &[state], &checked);
    assert_eq!(rt("prepared"), (Some(3), true));
    assert_eq!(rt("committed"), (Some(0), false));
    assert_eq!(rt("aborted"), (Some(0), false));
    assert_eq!(
        run_with("reference-transaction", &["prepared"], &routed),
        (Some(0), false)
    );
    let only = [(HOOKS_ONLY_ENV, Path::new("1"))];
    assert_eq!(run("post-commit", &only), (Some(3), true));
    assert_eq!(run("pre-nothing", &routed), (Some(3), true));
}

/// As a hook step for a hook the repository has, the client sends the
/// broker what the guard's step sends (a hook request: the hook's name and
/// arguments, the environment, and the trusted directory as a fifth fd),
/// byte for byte, and ends as the guard's step does on each reply; so
/// does a checked routing's step that only starts its hook
/// (reference-transaction `committed`). Alone,
/// with no guard beside it to fall back to, it still does: it starts no
/// guard for a hook (~1 ms a commit).
#[test]
fn as_a_hook_step_the_client_sends_the_guards_hook_request() {
    use sbx_git_guard::hooks::{HOOKS_ONLY_ENV, TRUSTED_ENV};
    let Some(client) = client() else { return };
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (trusted, alone, steps) = (dir.join("trusted"), dir.join("alone"), dir.join("steps"));
    for d in [&trusted, &alone, &steps] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::copy(&client, alone.join("sbx-git-client")).unwrap();
    for h in ["pre-commit", "commit-msg", "reference-transaction"] {
        std::fs::write(trusted.join(h), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(trusted.join(h), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let only = format!("{HOOKS_ONLY_ENV}=1");
    let tr = format!("{TRUSTED_ENV}={}", trusted.display());
    let env: Vec<&[u8]> = vec![
        only.as_bytes(),
        tr.as_bytes(),
        b"A=1",
        b"A=2",
        b"NOEQ",
        b"U=\xfe",
    ];
    // A checked routing's step that only starts its hook.
    let checked: Vec<&[u8]> = env[1..].to_vec();
    let frame = |body: &[u8]| [&(body.len() as u32).to_le_bytes()[..], body].concat();
    let replies: Vec<(&str, Vec<u8>, i32)> = vec![
        ("exit 0", Reply::Exited(0).encode(), 0),
        ("exit 3", Reply::Exited(3).encode(), 3),
        ("killed", Reply::Signaled(15).encode(), 143),
        (
            "the broker's error",
            Reply::Error("a hook is run only for git's own processes".into()).encode(),
            1,
        ),
        ("hung up", Vec::new(), 1),
        ("unknown tag", frame(b"Q\0\0\0\0"), 1),
    ];
    for (hook, args, env) in [
        ("pre-commit", vec![], &env),
        ("commit-msg", vec![b".git/COMMIT_EDITMSG".as_slice()], &env),
        (
            "reference-transaction",
            vec![b"committed".as_slice()],
            &checked,
        ),
    ] {
        for (what, reply, code) in &replies {
            let what = format!("{hook}, {what}");
            let mut ends = Vec::new();
            for (prog, name) in [
                (client.clone(), "c"),
                (PathBuf::from(GUARD), "g"),
                (alone.join("sbx-git-client"), "a"),
            ] {
                let link = steps.join(name).join(hook);
                std::fs::create_dir_all(link.parent().unwrap()).unwrap();
                let _ = std::os::unix::fs::symlink(&prog, &link);
                let mut argv = vec![link.as_os_str().as_encoded_bytes()];
                argv.extend(args.iter().copied());
                ends.push(run_recorded(dir, &link, &argv, env, 0o027, reply, true));
            }
            let [(c_req, c_fds, c), (g_req, g_fds, g), (a_req, a_fds, a)] = &ends[..] else {
                unreachable!()
            };
            assert!(
                c_req == g_req && a_req == g_req,
                "{what}: the requests differ"
            );
            assert_eq!(g_req[9], 2, "{what}: not a hook request");
            assert_eq!((*c_fds, *g_fds, *a_fds), (5, 5, 5), "{what}");
            for o in [c, a] {
                assert_eq!(o.status.code(), Some(*code), "{what}: {}", text(o));
                assert_eq!(o.status.code(), g.status.code(), "{what}");
                assert_eq!(text(o), text(g), "{what}");
            }
        }
    }
}

/// A checked routing's pre-push and reference-transaction `prepared`
/// inputs: (step, argument, input, whether the guard's check passes it
/// without asking git). Hostile ones included: lines the guard cannot
/// read, deletions, branches moved onto anything, stash and notes refs,
/// symbolic updates, names with spaces, CRLF endings.
fn check_inputs() -> Vec<(&'static str, &'static str, Vec<u8>, bool)> {
    let a = "a".repeat(40);
    let b = "b".repeat(40);
    let z = "0".repeat(40);
    let pp = |s: String| ("pre-push", "origin", s.into_bytes());
    let rt = |s: String| ("reference-transaction", "prepared", s.into_bytes());
    let cases = vec![
        (pp(String::new()), true),
        (pp("\n\n".into()), true),
        (pp(" \n".into()), false),
        (pp("\r\n".into()), false),
        (pp(format!("refs/heads/m {a} refs/heads/m {a}\n")), false),
        (pp(format!("refs/heads/m {b} refs/heads/m {a}\n")), false),
        (pp(format!("refs/heads/m {b} refs/heads/n {z}\n")), false),
        (pp(format!("(delete) {z} refs/heads/m {a}\n")), false),
        (pp(format!("\nrefs/heads/m {b} refs/heads/m {a}")), false),
        (rt(String::new()), true),
        (rt("\n".into()), true),
        (
            rt(format!("{a} {a} refs/heads/master\n{z} {a} ORIG_HEAD\n")),
            true,
        ),
        (rt(format!("{a} {b} HEAD\n{a} {b} refs/tags/v1\n")), true),
        (rt(format!("{a} {b}\nnonsense\n")), true),
        (rt(format!("{a} {b} refs/heads/master\n")), false),
        (
            rt(format!("{a} {a} ORIG_HEAD\n{a} {b} refs/heads/x y\n")),
            false,
        ),
        (rt(format!("{a} {b} refs/heads/master\r\n")), false),
        (rt(format!("{a}  refs/heads/master\n")), false),
        (rt(format!("{a} {z} refs/heads/master\n")), false),
        (rt(format!("{a} ref:refs/heads/x refs/heads/y\n")), false),
        (rt(format!("{z} {b} refs/stash\n")), false),
        (rt(format!("{a} {a} refs/stash\n")), false),
        (rt(format!("{z} {b} refs/notes/commits\n")), false),
        (
            rt(format!("{a} {a} refs/heads/m\n{z} {b} refs/notes/x\n")),
            false,
        ),
    ];
    cases
        .into_iter()
        .map(|((step, arg, input), safe)| (step, arg, input, safe))
        .collect()
}

/// A copy of the client in `dir/alone` beside a stand-in guard that keeps
/// its stdin in `dir/guard-input` and exits 3: the directory, the file.
fn stand_in_guard(dir: &Path, client: &Path) -> (PathBuf, PathBuf) {
    let alone = dir.join("alone");
    std::fs::create_dir(&alone).unwrap();
    std::fs::copy(client, alone.join("sbx-git-client")).unwrap();
    let kept = dir.join("guard-input");
    let guard = alone.join("sbx-git-guard");
    std::fs::write(
        &guard,
        format!("#!/bin/sh\ncat > {}\nexit 3\n", kept.display()),
    )
    .unwrap();
    std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o755)).unwrap();
    (alone, kept)
}

/// `prog` run as a hook step (argv[0] `link`) with `input` on stdin.
fn run_step(link: &Path, arg: &str, input: &[u8], env: &[(&str, PathBuf)], cwd: &Path) -> Output {
    let mut child = Command::new(link)
        .arg(arg)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A step that does not read its input closes the pipe: not an error.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// A checked routing's checking steps (pre-push, reference-transaction
/// `prepared`), differential: the client as the step, beside the real
/// guard, ends exactly as the guard's step on every input of the table
/// (status, stderr, and what the repository's hook read on its stdin),
/// where a broker runs git but does not answer (so the guard refuses
/// every input it must ask git about), where `SBX_REAL_GIT` names the
/// real git outside any repository, and where no git is found (the
/// guard refuses every input; the client must leave it to the guard). Then, beside a stand-in
/// guard: only the inputs the check passes unasked are answered without
/// starting it, and the rest reach it byte for byte on its stdin.
#[test]
fn a_checking_step_answers_only_inputs_its_check_passes_unasked() {
    use sbx_git_guard::hooks::TRUSTED_ENV;
    let Some(client) = client() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (absent, present) = (dir.join("absent"), dir.join("present"));
    for d in [&absent, &present] {
        std::fs::create_dir(d).unwrap();
    }
    for h in ["pre-push", "reference-transaction"] {
        let p = present.join(h);
        std::fs::write(&p, "#!/bin/sh\necho \"hook $0 $*\"\ncat\nexit 4\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let link = |prog: &Path, who: &str, step: &str| {
        let l = dir.join(who).join(step);
        std::fs::create_dir_all(l.parent().unwrap()).unwrap();
        if !l.exists() {
            std::os::unix::fs::symlink(prog, &l).unwrap();
        }
        l
    };
    let dead = dir.join("nobody.sock");
    let audit = dir.join("audit.jsonl");
    let path = Path::new("/usr/bin:/bin");
    let broker_env = |trusted: &Path| -> Vec<(&'static str, PathBuf)> {
        vec![
            (TRUSTED_ENV, trusted.to_path_buf()),
            ("SBX_GIT_BROKER", dead.clone()),
            ("SBX_AUDIT_LOG", audit.clone()),
            ("PATH", path.to_path_buf()),
        ]
    };
    // No broker, and no git on PATH: the guard's step has no git to ask.
    let no_git = |trusted: &Path| -> Vec<(&'static str, PathBuf)> {
        vec![
            (TRUSTED_ENV, trusted.to_path_buf()),
            ("SBX_AUDIT_LOG", audit.clone()),
            ("PATH", PathBuf::from("/nonexistent")),
        ]
    };
    // No broker, the real git named (outside the sandbox), in a
    // directory that is no repository: git answers nothing.
    let named = |trusted: &Path, git: &str| -> Vec<(&'static str, PathBuf)> {
        vec![
            (TRUSTED_ENV, trusted.to_path_buf()),
            ("SBX_REAL_GIT", PathBuf::from(git)),
            ("SBX_AUDIT_LOG", audit.clone()),
            ("PATH", PathBuf::from("/nonexistent")),
        ]
    };
    let mut answered = 0;
    for (step, arg, input, safe) in check_inputs() {
        for (routing, env) in [
            ("broker, no hook", broker_env(&absent)),
            ("broker, a hook", broker_env(&present)),
            ("no git", no_git(&absent)),
            ("real git named", named(&absent, "/usr/bin/git")),
            ("real git named, a hook", named(&present, "/usr/bin/git")),
            ("real git named empty", named(&absent, "")),
        ] {
            let what = format!(
                "{step} {arg} {:?} ({routing})",
                String::from_utf8_lossy(&input)
            );
            let c = run_step(&link(&client, "c", step), arg, &input, &env, dir);
            let g = run_step(&link(Path::new(GUARD), "g", step), arg, &input, &env, dir);
            assert_eq!(c.status.code(), g.status.code(), "{what}: {}", text(&g));
            // The hook's $0 names the same trusted hook either way.
            assert_eq!(text(&c), text(&g), "{what}");
            if routing == "broker, no hook" {
                let passes = g.status.success();
                assert!(
                    !safe || passes,
                    "{what}: the guard refuses it: {}",
                    text(&g)
                );
                answered += usize::from(safe);
            }
            if routing == "no git" || routing == "real git named empty" {
                assert!(!g.status.success(), "{what}: the guard has no git to ask");
            }
        }
    }
    assert!(answered >= 6, "the table has inputs the client answers");
    // Beside a stand-in guard that keeps its stdin: which inputs start it.
    let (alone, kept) = stand_in_guard(dir, &client);
    let env = broker_env(&absent);
    for (step, arg, input, safe) in check_inputs() {
        let what = format!("{step} {arg} {:?}", String::from_utf8_lossy(&input));
        let _ = std::fs::remove_file(&kept);
        let o = run_step(
            &link(&alone.join("sbx-git-client"), "a", step),
            arg,
            &input,
            &env,
            dir,
        );
        if safe {
            assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o));
            assert!(!kept.exists(), "{what}: the guard was started");
        } else {
            assert_eq!(o.status.code(), Some(3), "{what}: {}", text(&o));
            assert_eq!(std::fs::read(&kept).unwrap(), input, "{what}: its input");
        }
    }
    let empty_push = |env: &[(&str, PathBuf)]| {
        run_step(
            &link(&alone.join("sbx-git-client"), "a", "pre-push"),
            "o",
            b"",
            env,
            dir,
        )
    };
    // A merge or am (no COMMIT_ENV) whose commit-msg passed a message,
    // kept in the call's private directory: a detached HEAD's move reaches
    // the guard, which compares the message (msg.rs); with none kept, the
    // client answers it.
    let head = format!("{} {} HEAD\n", "a".repeat(40), "b".repeat(40));
    let copy = dir.join("private-index");
    let mut private = env.clone();
    private.push((sbx_git_guard::index::PRIVATE_VAR, copy.clone()));
    let step = link(&alone.join("sbx-git-client"), "a", "reference-transaction");
    let _ = std::fs::remove_file(&kept);
    let o = run_step(&step, "prepared", head.as_bytes(), &private, dir);
    assert_eq!(o.status.code(), Some(0), "nothing kept: {}", text(&o));
    assert!(!kept.exists(), "nothing kept: the guard was started");
    let msg = sbx_git_guard::msg::msg_dir(&copy);
    std::fs::create_dir(&msg).unwrap();
    std::fs::write(msg.join(sbx_git_guard::msg::APPROVED), "m\n").unwrap();
    let o = run_step(&step, "prepared", head.as_bytes(), &private, dir);
    assert_eq!(o.status.code(), Some(3), "a message kept: {}", text(&o));
    assert_eq!(std::fs::read(&kept).unwrap(), head.as_bytes());
    // The real git named: answered here too.
    let _ = std::fs::remove_file(&kept);
    let o = empty_push(&named(&absent, "/usr/bin/git"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!kept.exists(), "the guard was started");
    // No broker, no git named: the guard decides every input (it may
    // find no git).
    let o = empty_push(&no_git(&absent));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
}

/// A `git commit`'s `prepared` step in a repository that holds a stash
/// (COMMIT_ENV set, no commit-msg): the client answers a branch's move
/// itself only where the new commit's one parent is the branch's old tip
/// (the guard's `log new^@ --not --branches old` then lists nothing), read
/// from the loose object and checked against its name. Differential: on
/// every case, the client ends as the guard's step with the real git
/// (merges with a stash parent refused by both); beside a stand-in guard,
/// only the plain commits are answered without starting it, and every
/// doubt (another parent, two, none, a swapped object file, a packed one,
/// a subject a stash's could be, an encoding header, a commit-graph that
/// lists the new commit, replace refs, a commit-msg's approved message)
/// reaches it.
#[test]
fn a_commits_prepared_step_is_answered_only_for_one_parent_the_old_tip() {
    use sbx_git_guard::hooks::{COMMIT_ENV, TRUSTED_ENV};
    let Some(client) = client() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = dir.join("repo");
    let git = |args: &[&str]| -> String {
        let o = Command::new("/usr/bin/git")
            .args(args)
            .current_dir(&repo)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@b")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@b")
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a"), "one\n").unwrap();
    git(&["add", "a"]);
    git(&["commit", "-qm", "c0"]);
    let c0 = git(&["rev-parse", "HEAD"]);
    std::fs::write(repo.join("a"), "two\n").unwrap();
    git(&["commit", "-qam", "c1"]);
    let c1 = git(&["rev-parse", "HEAD"]);
    std::fs::write(repo.join("a"), "STASHED\n").unwrap();
    git(&["stash", "-q"]);
    let stash = git(&["rev-parse", "stash@{0}"]);
    let tree = git(&["rev-parse", "HEAD^{tree}"]);
    // A plain commit, packed (the rest stay loose).
    let packed = git(&["commit-tree", &tree, "-p", &c1, "-m", "packed"]);
    git(&["update-ref", "refs/keep/packed", &packed]);
    git(&["repack", "-adq"]);
    assert!(!repo.join(".git/objects/info/commit-graph").exists());
    let ct = |args: &[&str]| {
        let mut a = vec!["commit-tree", tree.as_str()];
        a.extend(args);
        git(&a)
    };
    let plain = ct(&["-p", &c1, "-m", "plain"]);
    let merge = ct(&["-p", &c1, "-p", &stash, "-m", "merge"]);
    let merge_last = ct(&["-p", &stash, "-p", &c1, "-m", "merge"]);
    let root = ct(&["-m", "root"]);
    let amend = ct(&["-p", &c0, "-m", "amended"]);
    let index_on = ct(&["-p", &c1, "-m", "index on main: x"]);
    let split = ct(&["-p", &c1, "-m", "index\non main: x"]);
    let blank = ct(&["-p", &c1, "-m", "   "]);
    let stash_parent = ct(&["-p", &stash, "-m", "on the stash"]);
    let raw = format!(
        "tree {tree}\nparent {c1}\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\nencoding ISO-8859-1\n\nlatin\n"
    );
    std::fs::write(dir.join("enc"), raw).unwrap();
    let encoded = git(&[
        "hash-object",
        "-t",
        "commit",
        "-w",
        dir.join("enc").to_str().unwrap(),
    ]);
    // `merge`'s object file holding `plain`'s bytes: git reads the swapped
    // content under merge's name; the client must not.
    let swapped = ct(&["-p", &c1, "-p", &stash, "-m", "swapped"]);
    let obj = |id: &str| repo.join(format!(".git/objects/{}/{}", &id[..2], &id[2..]));
    std::fs::copy(obj(&plain), obj(&swapped)).unwrap();
    let z = "0".repeat(40);
    let line = |old: &str, new: &str| format!("{z} {new} HEAD\n{old} {new} refs/heads/main\n");
    // (case, input, answered by the client)
    let cases: Vec<(&str, String, bool)> = vec![
        ("plain", line(&c1, &plain), true),
        (
            "plain, a CRLF",
            format!("{c1} {plain} refs/heads/main\r\n"),
            true,
        ),
        ("packed", line(&c1, &packed), false),
        ("merge with the stash", line(&c1, &merge), false),
        ("merge, the old tip last", line(&c1, &merge_last), false),
        ("root", line(&z, &root), false),
        ("amend", line(&c1, &amend), false),
        ("index on", line(&c1, &index_on), false),
        ("index on, split", line(&c1, &split), false),
        ("blank subject", line(&c1, &blank), false),
        (
            "the stash as parent, the old tip",
            line(&stash, &stash_parent),
            true,
        ),
        (
            "the stash as parent, old c1",
            line(&c1, &stash_parent),
            false,
        ),
        ("encoding", line(&c1, &encoded), false),
        ("swapped object", line(&c1, &swapped), false),
        ("uppercase", line(&c1.to_uppercase(), &plain), false),
        ("no such commit", line(&c1, &"e".repeat(40)), false),
    ];
    let absent = dir.join("absent");
    std::fs::create_dir(&absent).unwrap();
    let audit = dir.join("audit.jsonl");
    let env = |trusted: &Path| -> Vec<(&'static str, PathBuf)> {
        vec![
            (TRUSTED_ENV, trusted.to_path_buf()),
            (COMMIT_ENV, PathBuf::from("1")),
            ("SBX_REAL_GIT", PathBuf::from("/usr/bin/git")),
            ("SBX_AUDIT_LOG", audit.clone()),
            ("HOME", dir.to_path_buf()),
            ("GIT_CONFIG_NOSYSTEM", PathBuf::from("1")),
            ("PATH", PathBuf::from("/usr/bin:/bin")),
        ]
    };
    let link = |prog: &Path, who: &str| {
        let l = dir.join(who).join("reference-transaction");
        std::fs::create_dir_all(l.parent().unwrap()).unwrap();
        if !l.exists() {
            std::os::unix::fs::symlink(prog, &l).unwrap();
        }
        l
    };
    // Beside a stand-in guard that records it ran.
    let (alone, kept) = stand_in_guard(dir, &client);
    let step = |input: &str, env: &[(&str, PathBuf)], cwd: &Path| {
        let _ = std::fs::remove_file(&kept);
        let o = run_step(
            &link(&alone.join("sbx-git-client"), "a"),
            "prepared",
            input.as_bytes(),
            env,
            cwd,
        );
        (o.status.code(), kept.exists())
    };
    let table = |cases: &[(&str, String, bool)], e: &[(&str, PathBuf)], cwd: &Path| {
        for (what, input, answered) in cases {
            let c = run_step(&link(&client, "c"), "prepared", input.as_bytes(), e, cwd);
            let g = run_step(
                &link(Path::new(GUARD), "g"),
                "prepared",
                input.as_bytes(),
                e,
                cwd,
            );
            assert_eq!(c.status.code(), g.status.code(), "{what}: {}", text(&g));
            assert_eq!(text(&c), text(&g), "{what}");
            let want = if *answered {
                (Some(0), false)
            } else {
                (Some(3), true)
            };
            assert_eq!(step(input, e, cwd), want, "{what}");
        }
    };
    table(&cases, &env(&absent), &repo);
    // The guard refuses a merge with the stash and a commit on it.
    for (what, input, _) in &cases[3..5] {
        let g = run_step(
            &link(Path::new(GUARD), "g"),
            "prepared",
            input.as_bytes(),
            &env(&absent),
            &repo,
        );
        assert_eq!(g.status.code(), Some(1), "{what}: {}", text(&g));
    }
    let plain_only = [cases[0].clone()];
    // A linked work tree: the common dir through its `commondir`.
    let wt = dir.join("wt");
    git(&["worktree", "add", "-q", "--detach", wt.to_str().unwrap()]);
    table(&plain_only, &env(&absent), &wt);
    // Doubts, one at a time: each sends the plain commit to the guard.
    let doubt = [(plain_only[0].0, plain_only[0].1.clone(), false)];
    let with_hook = dir.join("with-commit-msg");
    std::fs::create_dir(&with_hook).unwrap();
    std::fs::write(with_hook.join("commit-msg"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        with_hook.join("commit-msg"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(step(&doubt[0].1, &env(&with_hook), &repo), (Some(3), true));
    let copy = dir.join("index-copy");
    std::fs::create_dir(dir.join("index-copy.msg")).unwrap();
    std::fs::write(dir.join("index-copy.msg/commit-msg.approved"), "plain\n").unwrap();
    let mut e = env(&absent);
    e.push(("SBX_GUARD_PRIVATE_INDEX", copy.clone()));
    assert_eq!(step(&doubt[0].1, &e, &repo), (Some(3), true));
    std::fs::remove_file(dir.join("index-copy.msg/commit-msg.approved")).unwrap();
    assert_eq!(step(&doubt[0].1, &e, &repo), (Some(0), false));
    let mut e = env(&absent);
    e.push(("GIT_OBJECT_DIRECTORY", repo.join(".git/objects")));
    assert_eq!(step(&doubt[0].1, &e, &repo), (Some(3), true));
    let mut e = env(&absent);
    e.retain(|(k, _)| *k != COMMIT_ENV);
    assert_eq!(step(&doubt[0].1, &e, &repo), (Some(3), true));
    // A commit-graph that does not list the new commit (it never does
    // unless written ahead): answered; one that lists it: the guard.
    git(&["commit-graph", "write", "--reachable"]);
    table(&plain_only, &env(&absent), &repo);
    git(&["update-ref", "refs/keep/plain", &plain]);
    git(&["commit-graph", "write", "--reachable"]);
    table(&doubt, &env(&absent), &repo);
    std::fs::remove_file(repo.join(".git/objects/info/commit-graph")).unwrap();
    git(&["commit-graph", "write", "--reachable", "--split"]);
    assert!(
        repo.join(".git/objects/info/commit-graphs/commit-graph-chain")
            .exists()
    );
    table(&doubt, &env(&absent), &repo);
    std::fs::remove_dir_all(repo.join(".git/objects/info/commit-graphs")).unwrap();
    git(&["update-ref", "-d", "refs/keep/plain"]);
    git(&["commit-graph", "write", "--reachable", "--split"]);
    table(&plain_only, &env(&absent), &repo);
    std::fs::remove_dir_all(repo.join(".git/objects/info/commit-graphs")).unwrap();
    git(&["replace", &c0, &amend]);
    table(&doubt, &env(&absent), &repo);
    git(&["pack-refs", "--all"]);
    assert!(!repo.join(".git/refs/replace").join(&c0).exists());
    table(&doubt, &env(&absent), &repo);
    // A replace ref for the new commit itself (its id written ahead).
    git(&["replace", &plain, &merge]);
    table(&doubt, &env(&absent), &repo);
    git(&["replace", "-d", &plain]);
    // As the guard runs git (hookenv.rs FORCED): replace refs and grafts
    // off, so neither is a doubt.
    let mut forced = env(&absent);
    forced.push(("GIT_NO_REPLACE_OBJECTS", PathBuf::from("1")));
    forced.push(("GIT_GRAFT_FILE", PathBuf::from("/proc/self/sbx-no-grafts")));
    std::fs::write(repo.join(".git/info/grafts"), format!("{plain} {c0}\n")).unwrap();
    table(&plain_only, &forced, &repo);
    table(&doubt, &env(&absent), &repo);
    std::fs::remove_file(repo.join(".git/info/grafts")).unwrap();
    let mut other = env(&absent);
    other.push(("GIT_GRAFT_FILE", dir.join("grafts")));
    table(&doubt, &other, &repo);
    git(&["replace", "-d", &c0]);
    table(&plain_only, &env(&absent), &repo);
}

/// Through a real broker, the client as git: in a repository that holds a
/// stash, a plain commit and an `--amend` commit, while a `MERGE_HEAD`
/// written by hand (the stash's id) is refused by the commit's `prepared`
/// step and main never reaches the stash (round five's attack; the client
/// answers only a commit whose one parent is the branch's old tip).
#[test]
fn through_a_real_broker_a_hand_written_merge_head_is_refused() {
    use std::os::unix::process::CommandExt as _;
    let Some(client) = client() else { return };
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_broker, sock) = real_broker(dir);
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        Command::new(&client)
            .arg0("git")
            .args(args)
            .current_dir(&repo)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@b")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@b")
            .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
            .env("SBX_GIT_BROKER", &sock)
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let o = git(args);
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    };
    ok(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a"), "one\n").unwrap();
    ok(&["add", "a"]);
    ok(&["commit", "-qm", "one"]);
    std::fs::write(repo.join("a"), "MARKER\n").unwrap();
    ok(&["stash", "-q"]);
    let stash = ok(&["rev-parse", "stash@{0}"]);
    std::fs::write(repo.join("b"), "b\n").unwrap();
    ok(&["add", "b"]);
    ok(&["commit", "-qm", "plain"]);
    ok(&["commit", "-q", "--amend", "-m", "amended"]);
    let before = ok(&["rev-parse", "main"]);
    std::fs::write(repo.join(".git/MERGE_HEAD"), format!("{stash}\n")).unwrap();
    let o = git(&["commit", "-qm", "merge"]);
    assert!(
        !o.status.success(),
        "the merge commit went in: {}",
        text(&o)
    );
    assert!(text(&o).contains("unverified-commit"), "{}", text(&o));
    assert_eq!(ok(&["rev-parse", "main"]), before);
    let o = git(&["merge-base", "--is-ancestor", &stash, "main"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}
