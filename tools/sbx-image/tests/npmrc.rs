//! build-base runs in a repository the agent writes. npm reads a project's
//! .npmrc from the directory it runs in, so the host's npm must not run
//! there: a planted `registry=` would choose where the shared base image
//! installs Claude Code from. Its own process: it changes directory.

use std::process::Command;

#[test]
fn a_repositorys_npmrc_does_not_choose_the_images_registry() {
    if Command::new("npm").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no npm on the host (scripts/prereqs installs it)"
        );
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let planted = "https://planted.invalid/";
    std::fs::write(repo.path().join(".npmrc"), format!("registry={planted}\n")).unwrap();
    std::fs::write(repo.path().join("package.json"), "{}\n").unwrap();
    std::env::set_current_dir(repo.path()).unwrap();
    // npm itself takes the planted registry from here...
    let here = Command::new("npm")
        .args(["config", "get", "registry"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&here.stdout).trim(), planted);
    // ...and the registry build-base passes to the image is not it.
    let r = sbx_image::base::npm_registry();
    assert!(r.as_deref() != Some(planted), "{r:?}");
    assert!(r.is_some_and(|r| r.starts_with("http")));
}
