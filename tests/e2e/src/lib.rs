//! Shared set-up for the end-to-end suites: where the built binaries are,
//! whether root and a Docker engine are here (a failure under CI=true, a
//! skip elsewhere), and a minimal Debian image made with debootstrap from
//! the host's own apt mirror, cached by a tag derived from its recipe.
#![forbid(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use md5::{Digest, Md5};

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

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --workspace` first or set SBX_BIN_DIR",
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

/// What the test image holds; its hash is the image tag, so a changed
/// recipe builds a new image and an unchanged one is reused across runs.
const SUITE: &str = "bookworm";
const RECIPE: &str = "debootstrap --variant=minbase --include=ca-certificates,procps,iproute2 v1";

pub fn test_image_tag() -> String {
    let hash = Md5::digest(format!("{SUITE} {RECIPE}"));
    let hex: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("sbx-test-debian:{hex}")
}

/// The minimal Debian image, built when missing. Serialised across test
/// processes with a lock file so parallel suites build it once.
pub fn test_image() -> String {
    let tag = test_image_tag();
    let lock_path = std::env::temp_dir().join("sbx-test-image.lock");
    let lock_file = File::create(&lock_path).expect("lock file");
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock");
    let have = Command::new("docker")
        .args(["image", "inspect", &tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        build_bootstrap_image(&tag);
    }
    tag
}

fn build_bootstrap_image(tag: &str) {
    let sources = sbx_core::apt::read_sources(Path::new("/"));
    let mirror = sbx_core::apt::mirror_for(&sources, SUITE)
        .or_else(|| sources.iter().find_map(|s| s.uris.first().cloned()))
        .expect("no apt mirror in /etc/apt/sources.list(.d): cannot debootstrap");
    let root = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let rootfs = root.path().join("rootfs");
    eprintln!("building {tag} with debootstrap from the host's apt mirror…");
    sh(Command::new("debootstrap")
        .args([
            "--variant=minbase",
            "--include=ca-certificates,procps,iproute2",
            SUITE,
        ])
        .arg(&rootfs)
        .arg(&mirror));
    // Import under a temporary name, then tag: an interrupted import never
    // leaves a half-made image under the cached tag.
    let tmp_tag = format!("{tag}-partial-{}", std::process::id());
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tar");
    sh(Command::new("docker")
        .args(["import", "--change", "CMD [\"/bin/bash\"]", "-", &tmp_tag])
        .stdin(tar.stdout.take().expect("tar stdout")));
    assert!(
        tar.wait().expect("tar").success(),
        "tar of the rootfs failed"
    );
    sh(Command::new("docker").args(["tag", &tmp_tag, tag]));
    sh(Command::new("docker").args(["rmi", &tmp_tag]));
}
