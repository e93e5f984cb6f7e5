//! Issue 37, routes 2 and 6, as attacks: the agent makes a tree hostile
//! (a set-uid file, a FIFO, a device node if it can, links to /etc, out of
//! the tree and to a host directory, names with newlines and escape
//! sequences, a file it keeps swapping for a link), then the user runs
//! `sbx-run cp :DIR HOSTDIR` as root, twice. Nothing beside HOSTDIR may
//! change, nothing under it may be set-uid, a device or a link leading
//! out, and the second copy may write through nothing the first left.
//! A second attack traces whatever reads the files for the copy.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{Repo, sbx, sh, started, text};

fn workspace() -> Repo {
    let r = Repo::new("ws");
    r.git(&["init", "-q"]);
    std::fs::write(r.path.join("README"), "hi\n").unwrap();
    r.give_to_agent();
    r
}

fn cp(repo: &Repo, src: &str, dest: &Path) -> Output {
    sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(src)
        .arg(dest)
        .output()
        .unwrap()
}

/// Every entry under `dir` (not following links), with its path.
fn walk(dir: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        out.push((e.path(), m.clone()));
        if m.is_dir() {
            walk(&e.path(), out);
        }
    }
}

/// `p` with `.` and `..` folded, without touching the disk.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The state of `dir` for before/after comparison: names, kinds, sizes.
fn snapshot(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    walk(dir, &mut v);
    let mut s: Vec<String> = v
        .iter()
        .map(|(p, m)| format!("{} {:o} {}", p.display(), m.mode(), m.len()))
        .collect();
    s.sort();
    s
}

/// The hostile tree, as the agent: `host_dir` is a host path the agent
/// guessed (the test's), for a link the copy could write through.
fn make_hostile(repo: &Repo, host_dir: &Path) {
    let script = format!(
        r#"set -e
d=/home/agent/loot; rm -rf $d; mkdir -p $d/sub
echo hi > $d/plain
cp /bin/true $d/suid; chmod 4755 $d/suid
mkdir $d/sgid; chmod 2777 $d/sgid; echo x > $d/sgid/f
mkfifo $d/fifo
mknod $d/null c 1 3 2>/dev/null && echo MKNOD-WORKED >&2 || true
ln -s /etc $d/etc
ln -s ../../x $d/sub/up
ln -s ../plain $d/sub/ok
ln -s {host} $d/away
printf x > "$d/$(printf 'new\nline')"
printf x > "$d/$(printf 'esc\033[2K\033]0;title\007\302\233')"
mkfifo "$d/$(printf 'fifo\033[2K\033]0;title\007\302\233')"
"#,
        host = host_dir.display()
    );
    let o = repo.exec(&script);
    assert!(o.status.success(), "hostile tree: {}", text(&o));
    assert!(
        !text(&o).contains("MKNOD-WORKED"),
        "the agent made a device node: the sandbox lets it mknod"
    );
}

/// What must hold of a copy under `host/out` whatever the agent did.
fn check_copy(host: &Path, out: &Path, canary_before: &[String], o: &Output) {
    let canary = host.join("canary");
    assert_eq!(
        snapshot(&canary),
        canary_before,
        "the canary beside HOSTDIR changed: {}",
        text(o)
    );
    let mut beside: Vec<_> = std::fs::read_dir(host)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(
        beside,
        ["canary", "out"],
        "something was made beside HOSTDIR"
    );
    let mut all = Vec::new();
    walk(out, &mut all);
    assert!(!all.is_empty(), "nothing copied: {}", text(o));
    for (p, m) in &all {
        let ft = m.file_type();
        assert!(
            !(ft.is_fifo() || ft.is_block_device() || ft.is_char_device() || ft.is_socket()),
            "{}: a FIFO/device/socket was copied",
            p.display()
        );
        assert_eq!(
            m.mode() & 0o7000,
            0,
            "{}: set-uid/gid/sticky copied",
            p.display()
        );
        if ft.is_symlink() {
            let t = std::fs::read_link(p).unwrap();
            let r = lexical(&p.parent().unwrap().join(&t));
            assert!(
                r.starts_with(out.join("loot")),
                "{} -> {}: a link leading out of the copy",
                p.display(),
                t.display()
            );
        }
    }
    // As root, the copy belongs to HOSTDIR's owner.
    for (p, m) in &all {
        assert_eq!(
            (m.uid(), m.gid()),
            (4321, 4321),
            "{}: not owned by HOSTDIR's owner",
            p.display()
        );
    }
    // Text output never carries the agent's escapes raw.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains('\x1b') && !err.contains('\u{9b}') && !err.contains('\x07'),
        "raw control characters reached the terminal: {err:?}"
    );
}

/// Route 2: the tree is made hostile, then copied out twice as root.
#[test]
fn cp_out_of_a_hostile_tree_changes_nothing_outside_and_copies_nothing_dangerous() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let host = repo.root().join("host");
    let out = host.join("out");
    let canary = host.join("canary");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("keep"), "keep").unwrap();
    // HOSTDIR belongs to a user: as root, the copy is theirs.
    sh(Command::new("chown").args(["4321:4321"]).arg(&out));
    let before = snapshot(&canary);
    make_hostile(&repo, &canary);
    // A file swapped for a link (to the canary) and back all through the copy.
    let race = format!(
        "cd /home/agent/loot; setsid sh -c 'while [ ! -e /tmp/stop-race ]; do \
         echo f > race.n; mv -f race.n race; ln -sfn {} race.l; mv -fT race.l race; done' \
         </dev/null >/dev/null 2>&1 &",
        canary.join("keep").display()
    );
    let o = repo.exec(&race);
    assert!(o.status.success(), "race loop: {}", text(&o));

    let o = cp(&repo, ":/home/agent/loot", &out);
    check_copy(&host, &out, &before, &o);
    assert_eq!(
        o.status.code(),
        Some(77),
        "refusals are named: {}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    for shown in [
        "fifo",
        "etc: a symlink to /etc",
        "up: a symlink to ../../x",
        "\\e[2K",
    ] {
        assert!(err.contains(shown), "no {shown:?} in {err}");
    }
    let loot = out.join("loot");
    assert!(
        loot.join("new\nline").is_file(),
        "a plain odd name is copied"
    );
    assert_eq!(
        std::fs::read_link(loot.join("sub/ok")).unwrap(),
        Path::new("../plain")
    );
    assert_eq!(loot.join("suid").metadata().unwrap().mode() & 0o7777, 0o755);

    // Round two: each kept or refused link becomes a directory or a file,
    // for a copy that would write through what the first one left.
    let o = repo.exec(
        "set -e; cd /home/agent/loot; rm -f away etc sub/ok; mkdir away etc; \
         echo PWN > away/planted; echo PWN > etc/planted; echo PWN > sub/ok",
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = cp(&repo, ":/home/agent/loot", &out);
    let _ = repo.exec("touch /tmp/stop-race");
    check_copy(&host, &out, &before, &o);
    assert_eq!(std::fs::read_to_string(loot.join("plain")).unwrap(), "hi\n");
    assert_eq!(
        std::fs::read_to_string(loot.join("sub/ok")).unwrap(),
        "PWN\n"
    );
    assert!(
        !Path::new("/etc/planted").exists(),
        "written through a link to /etc"
    );
    let race = std::fs::symlink_metadata(loot.join("race"));
    assert!(
        race.as_ref().map_or(true, |m| !m.file_type().is_symlink()
            || std::fs::read_link(loot.join("race")).unwrap().is_relative()),
        "the swapped file came out as a link leading out"
    );
}

/// Route 2, as a tar stream: `cp :DIR -` carries no set-uid bit, no FIFO,
/// no link out, and the agent's names stay entries of the tree.
#[test]
fn cp_to_a_tar_stream_carries_nothing_dangerous() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let host = repo.root().join("host");
    std::fs::create_dir_all(&host).unwrap();
    make_hostile(&repo, &host);
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .args([":/home/agent/loot", "-"])
        .output()
        .unwrap();
    let tar = repo.root().join("t.tar");
    std::fs::write(&tar, &o.stdout).unwrap();
    let listing = sh(Command::new("tar").args(["-tvf"]).arg(&tar));
    assert!(listing.contains("loot/plain"), "{listing}");
    assert!(listing.contains("loot/sub/ok -> ../plain"), "{listing}");
    for bad in ["-> /etc", "../../x", "rws", "prw", "crw", "fifo"] {
        assert!(!listing.contains(bad), "{bad:?} in the stream:\n{listing}");
    }
    assert_eq!(
        o.status.code(),
        Some(77),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Extracting it as root (what a user would do) stays inside.
    let x = repo.root().join("x");
    std::fs::create_dir_all(&x).unwrap();
    sh(Command::new("tar")
        .args(["-xf"])
        .arg(&tar)
        .arg("-C")
        .arg(&x));
    assert_eq!(
        std::fs::read_to_string(x.join("loot/plain")).unwrap(),
        "hi\n"
    );
}

/// Route 2, the other way: a host tree copied in gets the same rules
/// (no set-uid, links only inside) and lands as the agent's.
#[test]
fn cp_into_the_sandbox_clamps_modes_and_keeps_links_inside() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let src = repo.root().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), "f").unwrap();
    std::fs::write(src.join("s"), "s").unwrap();
    std::fs::set_permissions(src.join("s"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::symlink("d/f", src.join("in")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("out")).unwrap();
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&src)
        .arg(":/home/agent/in")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("out: a symlink to /etc/passwd"),
        "{}",
        text(&o)
    );
    let o = repo.exec(
        "cd /home/agent/in && stat -c '%n %a %u' s d/f && readlink in && ! test -e out && echo OK",
    );
    let t = text(&o);
    assert!(t.contains("s 755 1000"), "{t}");
    assert!(
        t.contains("d/f 644 1000") || t.contains("d/f 600 1000"),
        "{t}"
    );
    assert!(t.contains("d/f\nOK") || t.contains("OK"), "{t}");
}

/// The ptrace-free side: while the host copies out, the agent tries to
/// attach to (and open the memory of) every process that is not its own
/// shell: PID 1 and any reader of the files must refuse it.
#[test]
fn the_agent_cannot_trace_what_reads_files_for_cp() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let o = repo.exec(
        "set -e; mkdir -p /home/agent/big; cd /home/agent/big; \
         for i in $(seq 1 40); do head -c 2000000 /dev/urandom > f$i; done",
    );
    assert!(o.status.success(), "{}", text(&o));
    // perl's syscall(2): SYS_ptrace is 101 on x86_64, PTRACE_ATTACH 16,
    // PTRACE_DETACH 17 (after the attach's stop, __WALL, so the tracee
    // runs on). A hit is logged with the target's name.
    let spy = r#"setsid sh -c '
while [ ! -e /tmp/stop-spy ]; do
  for p in /proc/[0-9]*; do
    n=${p#/proc/}; [ "$n" = "$$" ] && continue
    c=$(cat $p/comm 2>/dev/null) || continue
    case "$c" in sh|perl|cat|sleep|setsid) continue;; esac
    if perl -e "exit 1 if syscall(101, 16, $n, 0, 0); waitpid($n, 0x40000000); syscall(101, 17, $n, 0, 0)" 2>/dev/null; then
      echo "ATTACHED $n $c" >> /tmp/spy.log
    fi
    if (exec 3< $p/mem) 2>/dev/null; then echo "MEM $n $c" >> /tmp/spy.log; fi
  done
done' </dev/null >/dev/null 2>&1 &
: > /tmp/spy.log
setsid tail -f /dev/null </dev/null >/dev/null 2>&1 &"#;
    let o = repo.exec(spy);
    assert!(o.status.success(), "{}", text(&o));
    let dest = repo.root().join("dest");
    std::fs::create_dir_all(&dest).unwrap();
    for _ in 0..3 {
        let o = cp(&repo, ":/home/agent/big", &dest);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = repo.exec("touch /tmp/stop-spy; sleep 2; cat /tmp/spy.log");
    let log = String::from_utf8_lossy(&o.stdout).into_owned();
    // The agent's own processes (its backup daemon, an exec's shell) are
    // its to trace; what works for the host is not.
    let hits: Vec<&str> = log
        .lines()
        .filter(|l| {
            let c = l.split_whitespace().nth(2).unwrap_or("");
            l.split_whitespace().nth(1) == Some("1") || matches!(c, "tar" | "sbx-guest")
        })
        .collect();
    assert!(
        hits.is_empty(),
        "the agent traced a copier: {hits:?}\n{log}"
    );
    let o = repo.exec("perl -e 'exit(syscall(101, 16, 1, 0, 0) == 0 ? 0 : 1)' && echo ATTACHED1; cat /proc/1/mem 2>&1 | head -c 200");
    assert!(!text(&o).contains("ATTACHED1"), "{}", text(&o));
}

/// Route a37-1: HOSTDIR named with a trailing `/` (or `/.`), as a shell's
/// completion writes it. The agent makes that name in the workspace a
/// link to a host directory; a trailing slash makes the kernel follow a
/// link in the last component whatever O_NOFOLLOW says, so the copy
/// landed, as root, in the link's target.
#[test]
fn cp_out_to_a_hostdir_with_a_trailing_slash_follows_no_agent_link() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let canary = repo.root().join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("keep"), "keep").unwrap();
    let before = snapshot(&canary);
    let o = repo.exec(&format!(
        "set -e; mkdir -p /home/agent/loot; echo PWN > /home/agent/loot/authorized_keys; \
         cd /workspace/ws; ln -s {c} out; ln -s {c} out2",
        c = canary.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    for dest in ["out/", "out2/."] {
        let arg = format!("{}/{dest}", repo.path.display());
        let o = cp(&repo, ":/home/agent/loot", Path::new(&arg));
        assert_eq!(
            snapshot(&canary),
            before,
            "cp to {dest} wrote through the agent's link: {}",
            text(&o)
        );
        assert!(
            !o.status.success(),
            "cp to {dest} did not refuse: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("symlink"),
            "cp to {dest} names no link: {}",
            text(&o)
        );
    }
}

/// Issue 37, `cp HOSTPATH :DIR`: the agent plants links in its workspace
/// (`out -> <host dir>`, `key -> <host file>`, `d/x -> <host dir>` as a
/// middle component), then the user copies what looks like the agent's
/// output into the sandbox, with and without -L. A host path inside a
/// work tree is resolved beneath it with no link followed: every copy is
/// refused (77) and the sandbox never holds the host's secret.
#[test]
fn cp_of_a_workspace_path_follows_no_agent_link_into_the_sandbox() {
    let Some(repo) = started(workspace) else {
        return;
    };
    // The user's secret outside the workspace, root's and 0700: the
    // agent cannot read it itself.
    let canary = repo.root().join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("id_ed25519"), "HOST-SECRET\n").unwrap();
    sh(Command::new("chown").args(["-R", "0:0"]).arg(&canary));
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = repo.exec(&format!(
        "cd /workspace/ws && ln -s {c} out && ln -s {c}/id_ed25519 key && mkdir d && ln -s {c} d/x",
        c = canary.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let ws = repo.path.display().to_string();
    for (src, to) in [
        (format!("{ws}/out"), ":/tmp/got1"),
        (format!("{ws}/key"), ":/tmp/got2"),
        (format!("{ws}/d/x/id_ed25519"), ":/tmp/got3"),
        (format!("{ws}/d/x"), ":/tmp/got4"),
    ] {
        for follow in [false, true] {
            let mut c = sbx();
            c.args(["cp", "-C"]).arg(&repo.path);
            if follow {
                c.arg("-L");
            }
            let o = c.arg(&src).arg(to).output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(77),
                "cp {src} (-L {follow}): {}",
                text(&o)
            );
            assert!(
                text(&o).contains("follows no link inside a repository"),
                "{}",
                text(&o)
            );
        }
    }
    let seen = repo.exec("cat /tmp/got*/id_ed25519 /tmp/got* 2>/dev/null; ls -la /tmp");
    assert!(!text(&seen).contains("HOST-SECRET"), "{}", text(&seen));
}

/// Outside any work tree, a source that is a link is copied as the
/// link it is; -L copies what it points to (cp and docker cp's rule).
#[test]
fn cp_of_a_host_link_outside_a_workspace_copies_the_link_unless_dereferenced() {
    let Some(repo) = started(workspace) else {
        return;
    };
    let dir = repo.root().join("host");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("real"), "REAL\n").unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
    let link = dir.join("link");
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .arg(&link)
        .arg(":/tmp/")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = sbx()
        .args(["cp", "-L", "-C"])
        .arg(&repo.path)
        .arg(&link)
        .arg(":/tmp/deref")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let seen = repo
        .exec("readlink /tmp/link; test -f /tmp/deref && ! test -L /tmp/deref && cat /tmp/deref");
    let t = text(&seen);
    assert!(
        t.contains(&format!("{}\n", dir.join("real").display())),
        "{t}"
    );
    assert!(t.contains("REAL"), "{t}");
}
