//! npm's release tarball for the image, through the host's real npm: a
//! tampered cache file or a directory where the cache file goes must not
//! keep npm out of the image, and only the pinned tarball reaches the build
//! context.

use std::process::Command;

#[test]
fn a_tampered_or_blocked_cache_still_gives_the_pinned_npm() {
    if Command::new("npm").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no npm on the host (scripts/prereqs installs it)"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("sbx");
    std::fs::create_dir_all(&cache).unwrap();
    let cached = cache.join("npm-10.9.9.tgz");
    let ctx = d.path().join("npm.tgz");
    let sha = |p: &std::path::Path| {
        let o = Command::new("sha512sum").arg(p).output().unwrap();
        String::from_utf8_lossy(&o.stdout)[..128].to_owned()
    };

    // A directory where the cache file goes: npm still reaches the context.
    std::fs::create_dir(&cached).unwrap();
    sbx_image::base::npm_release(&cache, &ctx).unwrap();
    let pinned = sha(&ctx);
    assert!(cached.is_dir());

    // A tampered cache file is replaced by the pinned one.
    std::fs::remove_dir(&cached).unwrap();
    std::fs::write(&cached, b"not npm").unwrap();
    std::fs::remove_file(&ctx).unwrap();
    sbx_image::base::npm_release(&cache, &ctx).unwrap();
    assert_eq!(sha(&ctx), pinned);
    assert_eq!(sha(&cached), pinned);
}
