//! build-base runs in a repository the agent writes. npm reads a project's
//! .npmrc from the directory it runs in, so the host's npm must not run
//! there: a planted `registry=` would choose where the shared base image
//! installs Claude Code from. Its own process: it changes directory.

use std::process::Command;

fn npm_on_host() -> bool {
    if Command::new("npm").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no npm on the host (scripts/prereqs installs it)"
        );
        return false;
    }
    true
}

const PLANTED: &str = "https://planted.invalid/";

fn planted_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join(".npmrc"), format!("registry={PLANTED}\n")).unwrap();
    repo
}

#[test]
fn a_repositorys_npmrc_does_not_choose_the_images_registry() {
    if !npm_on_host() {
        return;
    }
    let repo = planted_repo();
    std::fs::write(repo.path().join("package.json"), "{}\n").unwrap();
    std::env::set_current_dir(repo.path()).unwrap();
    // npm itself takes the planted registry from here...
    let here = Command::new("npm")
        .args(["config", "get", "registry"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&here.stdout).trim(), PLANTED);
    // ...and the registry build-base passes to the image is not it.
    let r = sbx_image::base::npm_registry();
    assert!(r.as_deref() != Some(PLANTED), "{r:?}");
    assert!(r.is_some_and(|r| r.starts_with("http")));
}

/// Run by the next test through `npm run`: the registry build-base sees.
#[test]
#[ignore = "run by under_npm_run_the_repositorys_npmrc_does_not_either"]
fn print_registry_under_npm_run() {
    println!("registry: {:?}", sbx_image::base::npm_registry());
}

/// `npm run sandbox` (or npx) in the repository exports the project's
/// .npmrc as npm_config_registry to what it runs.
#[test]
fn under_npm_run_the_repositorys_npmrc_does_not_either() {
    if !npm_on_host() {
        return;
    }
    let repo = planted_repo();
    let me = std::env::current_exe().unwrap();
    let script = format!(
        "'{}' --ignored --exact print_registry_under_npm_run --nocapture",
        me.display()
    );
    let pkg = serde_json::json!({ "scripts": { "sandbox": script } });
    std::fs::write(repo.path().join("package.json"), pkg.to_string()).unwrap();
    let out = Command::new("npm")
        .args(["run", "-s", "sandbox"])
        .current_dir(repo.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("registry: "))
        .unwrap();
    assert!(!line.contains("planted"), "{line}");
    assert!(line.contains("Some(\"http"), "{line}");
}
