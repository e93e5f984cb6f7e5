//! Routes an outside attacker found to lose backup data (issue 47, a
//! fresh attempt), each through the real binary.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::tree;

/// sbx-backup as uid 1000 (restore runs as the agent in the guest, and
/// root would not see a permission problem), on `root`'s store and state.
fn agent(root: &Path, home: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_sbx-backup"))
        .arg("--config")
        .arg(root.join("config.toml"))
        .arg("--url")
        .arg(format!("file://{}/store", root.display()))
        .arg("--home")
        .arg(home)
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn root_only() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(root || !ci, "this test needs root (other uids)");
    root
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A home with a read-only directory holding a file and a symlink, the
/// way Go's module cache (`~/go/pkg/mod`, every directory 0555) is. A
/// restore killed after the directory modes were set, then resumed, and
/// a `restore --force` over an earlier copy, must both end as the
/// snapshot: restore makes its directories writable until the end.
#[test]
fn a_read_only_directory_does_not_stop_a_resumed_or_forced_restore() {
    if !root_only() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let home = root.join("home");
    let ro = home.join("go/pkg/mod/m@v1");
    fs::create_dir_all(&ro).unwrap();
    fs::write(root.join("config.toml"), "").unwrap();
    fs::write(ro.join("go.mod"), "module m\n").unwrap();
    symlink("go.mod", ro.join("link")).unwrap();
    Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&root)
        .status()
        .unwrap();
    for d in [ro.clone(), home.join("go/pkg/mod")] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o555)).unwrap();
    }
    let o = agent(&root, &home, &[], &["sync"]);
    assert!(o.status.success(), "sync: {}", err(&o));
    let want = tree(&home);

    // Killed after the directories got their modes, before the marker went.
    let to: PathBuf = root.join("to");
    let t = to.to_str().unwrap();
    let o = agent(
        &root,
        &home,
        &[("SBX_BACKUP_CRASH_AT", "restore-dirs-done")],
        &["restore", "--to", t],
    );
    assert_eq!(o.status.code(), None, "not killed: {}", err(&o));
    assert!(to.join(".sbx-restore-in-progress").exists());
    let o = agent(&root, &home, &[], &["restore", "--to", t]);
    assert!(o.status.success(), "resumed restore: {}", err(&o));
    assert_eq!(tree(&to), want);

    // The agent changed a file in the read-only tree; --force brings the
    // snapshot's version back.
    let f = to.join("go/pkg/mod/m@v1");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(f.join("go.mod"), "module changed\n").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o555)).unwrap();
    let o = agent(&root, &home, &[], &["restore", "--force", "--to", t]);
    assert!(o.status.success(), "restore --force: {}", err(&o));
    assert_eq!(tree(&to), want);
}

/// sbx-backup as whoever runs the test.
fn run(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .arg("--config")
        .arg(root.join("config.toml"))
        .arg("--url")
        .arg(format!("file://{}/store", root.display()))
        .arg("--home")
        .arg(root.join("home"))
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(args)
        .output()
        .unwrap()
}

/// A quiet home and a store that loses objects (a lifecycle rule that
/// expires what is older than N days, a wiped or recreated bucket): a
/// pass over an unchanged home reported "unchanged since" a snapshot
/// that could no longer restore, without a request, forever. Every pass
/// must report a snapshot that restores, byte-identical.
#[test]
fn an_unchanged_home_is_backed_up_again_when_the_store_lost_its_snapshot() {
    for lost in ["packs", "blobs", "snapshots", ""] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let home = root.join("home");
        fs::create_dir_all(home.join("src")).unwrap();
        fs::write(root.join("config.toml"), "").unwrap();
        fs::write(home.join("src/small.rs"), "fn main() {}\n").unwrap();
        fs::write(home.join("large.bin"), vec![7u8; 2 << 20]).unwrap();
        let o = run(&root, &["sync"]);
        assert!(o.status.success(), "sync: {}", err(&o));
        let want = tree(&home);

        let store = root.join("store");
        if lost.is_empty() {
            // The whole bucket.
            fs::remove_dir_all(&store).unwrap();
            fs::create_dir_all(&store).unwrap();
        } else {
            fs::remove_dir_all(store.join(lost)).unwrap();
        }
        let o = run(&root, &["--json", "sync"]);
        assert!(o.status.success(), "{lost}: sync: {}", err(&o));
        let said = String::from_utf8_lossy(&o.stdout).into_owned();

        let to = root.join("to");
        let o = run(&root, &["restore", "--to", to.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "{lost:?} lost; the pass said {said}; restore: {}",
            err(&o)
        );
        assert_eq!(tree(&to), want, "{lost:?} lost");
    }
}

/// sbx-backup for the home `root/<home>` with state `root/<state>`.
fn run_for(root: &Path, home: &str, state: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .arg("--config")
        .arg(root.join("config.toml"))
        .arg("--url")
        .arg(format!("file://{}/store", root.display()))
        .arg("--home")
        .arg(root.join(home))
        .arg("--state-dir")
        .arg(root.join(state))
        .args(args)
        .output()
        .unwrap()
}

/// One home per prefix, as a new home's first start really goes: the
/// guest restores the prefix's newest snapshot into it (branch mode's
/// second sandbox on the shared URL, a second machine), which made it
/// the same home as the first, still alive. Both then committed, and
/// each one's retention deleted the snapshots the other had reported; a
/// first boot restored whichever wrote last. The restore takes the
/// prefix over: the first home is refused from then on (exit 78), and
/// nothing it reported is deleted by the other.
#[test]
fn a_home_restored_elsewhere_never_rotates_out_the_first_homes_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    fs::write(root.join("config.toml"), "[backup]\nkeep = 1\n").unwrap();
    fs::create_dir_all(root.join("one")).unwrap();
    fs::write(root.join("one/notes"), "first home\n").unwrap();
    let o = run_for(&root, "one", "st1", &["sync"]);
    assert!(o.status.success(), "{}", err(&o));
    // The second home's first start.
    fs::create_dir_all(root.join("two")).unwrap();
    let o = run_for(&root, "two", "st2", &["restore", "--force"]);
    assert!(o.status.success(), "{}", err(&o));
    let o = run_for(&root, "two", "st2", &["sync"]);
    assert!(o.status.success(), "{}", err(&o));
    // The first home goes on working and syncing.
    fs::write(root.join("one/notes"), "first home, later work\n").unwrap();
    let o = run_for(&root, "one", "st1", &["--json", "sync"]);
    if o.status.success() {
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let id = r["data"]["snapshot"].as_str().unwrap().to_owned();
        fs::write(root.join("two/notes"), "second home\n").unwrap();
        let o = run_for(&root, "two", "st2", &["sync"]);
        assert!(o.status.success(), "{}", err(&o));
        assert!(
            root.join(format!("store/snapshots/{id}.json")).exists(),
            "the first home's reported snapshot {id} was deleted by the second home's pass"
        );
    } else {
        assert_eq!(o.status.code(), Some(78), "{}", err(&o));
        assert!(err(&o).contains("another home"), "{}", err(&o));
    }
}

/// A store whose listings name every object twice (a pagination bug of
/// an S3-compatible server, a proxy that replays a page).
#[derive(Debug)]
struct DupList(object_store::memory::InMemory);

impl std::fmt::Display for DupList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DupList")
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for DupList {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.0.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.0.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.0.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        use futures::StreamExt;
        self.0
            .list(prefix)
            .flat_map(|m| {
                futures::stream::iter([
                    m.as_ref()
                        .map(|m| m.clone())
                        .map_err(|e| object_store::Error::Generic {
                            store: "dup",
                            source: e.to_string().into(),
                        }),
                    m,
                ])
            })
            .boxed()
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.0.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}

/// Retention on a store that lists each snapshot twice: counted twice,
/// twice as many were deleted (keep = 3 kept one). Every snapshot among
/// the last `keep` a pass reported must stay.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_that_repeats_names_deletes_nothing_retention_keeps() {
    use sbx_backup::{store::Remote, sync};
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    fs::create_dir_all(&home).unwrap();
    let remote = Remote {
        url: "memory://dup".into(),
        store: std::sync::Arc::new(DupList(object_store::memory::InMemory::new())),
        prefix: object_store::path::Path::default(),
    };
    let state = d.path().join("state");
    let o = sync::Options {
        home: &home,
        state_dir: &state,
        excludes: &[],
        keep: 3,
        dry_run: false,
        wait: std::time::Duration::from_secs(5),
    };
    let mut reported = Vec::new();
    for v in 0..5 {
        fs::write(home.join("notes"), format!("version {v}\n")).unwrap();
        let r = sync::sync(&remote, &o).await.unwrap();
        reported.push(r.snapshot.unwrap());
    }
    let mut ids = remote.snapshot_ids().await.unwrap();
    ids.dedup();
    assert_eq!(ids, reported[2..], "retention kept the wrong snapshots");
}

/// A store that kept part of an object (a partial write of a faulty
/// S3-compatible server, a disk that filled): the object is listed, so a
/// pass went on referencing it and every later snapshot carried the
/// broken file. The listing's sizes show it; the pass uploads it again.
#[test]
fn a_short_object_in_the_store_is_uploaded_again() {
    for change in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let home = root.join("home");
        fs::create_dir_all(&home).unwrap();
        fs::write(root.join("config.toml"), "").unwrap();
        fs::write(home.join("large.bin"), vec![7u8; 2 << 20]).unwrap();
        fs::write(home.join("small"), "small file\n").unwrap();
        let o = run(&root, &["sync"]);
        assert!(o.status.success(), "sync: {}", err(&o));
        for dir in ["blobs", "packs"] {
            for sub in fs::read_dir(root.join("store").join(dir)).unwrap() {
                for f in fs::read_dir(sub.unwrap().path()).unwrap() {
                    let p = f.unwrap().path();
                    let n = fs::metadata(&p).unwrap().len();
                    fs::OpenOptions::new()
                        .write(true)
                        .open(&p)
                        .unwrap()
                        .set_len(n / 2)
                        .unwrap();
                }
            }
        }
        if change {
            fs::write(home.join("other"), "a change\n").unwrap();
        }
        let o = run(&root, &["--json", "sync"]);
        assert!(o.status.success(), "sync: {}", err(&o));
        let said = String::from_utf8_lossy(&o.stdout).into_owned();
        let to = root.join("to");
        let o = run(&root, &["restore", "--to", to.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "change {change}: the pass said {said}; restore: {}",
            err(&o)
        );
        assert_eq!(tree(&to), tree(&home));
    }
}

/// A home that holds a restore's in-progress marker (left by a restore
/// into it that failed; the guest now starts the agent in such a home)
/// was backed up with it. Restoring that snapshot put the old marker,
/// naming the snapshot that failed, over the restore's own: a first boot
/// killed after the files then "resumed" that other snapshot, long
/// rotated out, and never completed. The marker is sbx-backup's own
/// state and is never backed up.
#[test]
fn a_restore_marker_in_the_home_is_not_backed_up() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let home = root.join("home");
    fs::create_dir_all(&home).unwrap();
    fs::write(root.join("config.toml"), "[backup]\nkeep = 1\n").unwrap();
    fs::write(home.join("a"), "v1\n").unwrap();
    let o = run(&root, &["sync"]);
    assert!(o.status.success(), "{}", err(&o));
    fs::write(home.join("a"), "v2\n").unwrap();
    fs::write(
        home.join(".sbx-restore-in-progress"),
        "00000000000000000001",
    )
    .unwrap();
    let o = run(&root, &["sync"]);
    assert!(o.status.success(), "{}", err(&o));
    fs::remove_file(home.join(".sbx-restore-in-progress")).unwrap();
    let want = tree(&home);

    // A new home's first boot, killed once its files are in.
    fs::create_dir_all(root.join("new")).unwrap();
    let boot = |crash: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-backup"));
        c.arg("--config")
            .arg(root.join("config.toml"))
            .arg("--url")
            .arg(format!("file://{}/store", root.display()))
            .arg("--home")
            .arg(root.join("new"))
            .arg("--state-dir")
            .arg(root.join("new/.local/state/sbx-backup"))
            .arg("first-boot");
        if let Some(at) = crash {
            c.env("SBX_BACKUP_CRASH_AT", at);
        }
        c.output().unwrap()
    };
    let o = boot(Some("restore-files-done"));
    assert_eq!(o.status.code(), None, "not killed: {}", err(&o));
    let o = boot(None);
    assert!(o.status.success(), "resumed first boot: {}", err(&o));
    assert_eq!(tree(&root.join("new")), want);
}
