//! The first run builds sbx-backup after the first shell (scripts/shell,
//! issue 40): an image without it must not start a workspace whose config
//! sets `[backup] url`, and must say why in one line.

use std::process::Command;

use sbx_e2e::{base_image, bin, plain_repo, prerequisite, sbx, text};

#[test]
fn an_image_without_sbx_backup_refuses_a_config_with_backups() {
    if !prerequisite(sbx_e2e::is_root(), "root") || !base_image() {
        return;
    }
    // The tools as the first shell has them: every one but sbx-backup.
    let tools = tempfile::tempdir().unwrap();
    let built = bin("sbx-run").parent().unwrap().to_path_buf();
    for t in sbx_run::image::TOOLS.iter().chain(&["sbx-run"]) {
        let src = built.join(t);
        if *t != "sbx-backup" && src.is_file() {
            std::os::unix::fs::symlink(&src, tools.path().join(t)).unwrap();
        }
    }
    let tag = format!("{}-nobackup", sbx_e2e::base_tag());
    let o = sbx()
        .env("SBX_BIN_DIR", tools.path())
        .args([
            "-q",
            "build-base",
            "--bootstrap",
            "--no-ai-clis",
            "--tag",
            &tag,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "build-base: {}", text(&o));

    let repo = plain_repo("nobackup");
    let store = repo.root().join("store");
    let o = sbx()
        .env("SBX_BASE_TAG", &tag)
        .args(["-q", "init"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "init: {}", text(&o));
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        format!("[backup]\nurl = \"file://{}\"\n", store.display()),
    )
    .unwrap();
    let o = sbx()
        .env("SBX_BASE_TAG", &tag)
        .arg("start")
        .arg(&repo.path)
        .output()
        .unwrap();
    let out = text(&o);
    // A config with backups: rm refuses a home not yet backed up.
    let _ = sbx()
        .args(["-q", "rm", "--volumes", "--force"])
        .arg(&repo.path)
        .output();
    let _ = Command::new("docker")
        .args([
            "image",
            "rm",
            "--no-prune",
            &format!("agent-sandbox-base:{tag}"),
        ])
        .output();
    assert!(!o.status.success(), "started without sbx-backup: {out}");
    assert!(
        out.contains("this image has no /usr/local/bin/sbx-backup"),
        "not the guest's reason: {out}"
    );
}
