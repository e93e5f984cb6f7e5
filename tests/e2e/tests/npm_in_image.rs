//! The base image's npm is npm's own release, fetched once by the host's npm
//! and pinned by its SHA-512 (issue 40). When the host's npm cannot fetch
//! it, build-base says so in one line and builds without npm (CI=true:
//! fails, tagging nothing); a cached tarball that does not match the pin
//! is never used, and the real npm replaces it.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use sbx_e2e::{bin, docker_ready, prerequisite, text};

const TAG: &str = "e2e-npm-in-image";

fn build_base(path: &str, cache: &std::path::Path, ci: bool) -> Output {
    let sbx = bin("sbx-run");
    let mut c = Command::new(&sbx);
    c.env("SBX_BIN_DIR", sbx.parent().unwrap())
        .env("PATH", path)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("CI")
        .args(["build-base", "--bootstrap", "--no-ai-clis", "--tag", TAG]);
    if ci {
        c.env("CI", "true");
    }
    c.output().unwrap()
}

/// `script`'s output in the image; None when it fails (or there is no image).
fn in_image(script: &str) -> Option<String> {
    let o = Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--entrypoint", "sh"])
        .arg(format!("agent-sandbox-base:{TAG}"))
        .args(["-c", script])
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

fn remove_image() {
    let _ = Command::new("docker")
        .args(["image", "rm", "--no-prune"])
        .arg(format!("agent-sandbox-base:{TAG}"))
        .output();
}

#[test]
fn npm_comes_from_the_pinned_release_or_not_at_all() {
    if !prerequisite(docker_ready(), "a running Docker engine") {
        return;
    }
    remove_image();
    let cache = tempfile::tempdir().unwrap();
    let pinned = cache.path().join("sbx/npm-10.9.9.tgz");
    std::fs::create_dir_all(pinned.parent().unwrap()).unwrap();
    // A tarball in the cache that is not npm's release.
    std::fs::write(&pinned, b"not npm").unwrap();
    // A host npm that cannot reach its registry.
    let fake = tempfile::tempdir().unwrap();
    let npm = fake.path().join("npm");
    std::fs::write(
        &npm,
        "#!/bin/sh\necho 'npm ERR! code ECONNREFUSED' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let real_path = std::env::var("PATH").unwrap();
    let offline = format!("{}:{real_path}", fake.path().display());

    let o = build_base(&offline, cache.path(), true);
    let out = text(&o);
    assert!(!o.status.success(), "built without npm under CI: {out}");
    assert!(
        out.contains(
            "no npm in the image: npm pack npm@10.9.9 failed: npm ERR! code ECONNREFUSED (CI=true)"
        ),
        "{out}"
    );
    assert_eq!(in_image("true"), None, "CI=true tagged an image: {out}");

    let o = build_base(&offline, cache.path(), false);
    let out = text(&o);
    assert!(o.status.success(), "build-base: {out}");
    assert!(
        out.contains(
            "building it without npm: `sbx-run build-base --bootstrap` adds it once npm answers"
        ),
        "{out}"
    );
    assert_eq!(
        in_image("command -v npm || echo no-npm").as_deref(),
        Some("no-npm")
    );

    // The host's real npm fetches the release again, over the bad copy.
    let o = build_base(&real_path, cache.path(), true);
    let out = text(&o);
    let npm_version = in_image("npm --version");
    remove_image();
    assert!(o.status.success(), "build-base: {out}");
    assert_eq!(npm_version.as_deref(), Some("10.9.9"));
    assert_ne!(std::fs::read(&pinned).unwrap(), b"not npm");
}
