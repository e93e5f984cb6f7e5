//! Protected paths and masked secrets hold against renaming what is above
//! them, tried from inside a real sandbox as the agent: `mv .github .gh2`
//! used to carry `.github/workflows`'s read-only mount away and free the
//! path for a writable copy. sbx-run binds each directory above a
//! read-only or masking mount onto itself, and a mount point cannot be
//! renamed (EBUSY); a protected path whose parents are missing at the
//! start gets them made, and pinned, first.

use std::process::Command;

use sbx_e2e::{Repo, base_image, sbx, sh, text};

fn read(r: &Repo, rel: &str) -> Option<String> {
    std::fs::read_to_string(r.path.join(rel)).ok()
}

#[test]
fn renaming_a_parent_frees_no_protected_or_masked_path() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("pins");
    let path = repo.path.clone();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    for (f, t) in [
        (".github/workflows/ci.yml", "on: push\n"),
        (".github/dependabot.yml", "version: 2\n"),
        ("config/deploy/secrets.env", "TOKEN=hunter2\n"),
        ("config/deploy/app.toml", "port = 1\n"),
        ("lib/tools/lint.sh", "#!/bin/sh\n"),
        (
            ".agent-sandbox/config.toml",
            // A nested directory, a nested file, and a path whose parents
            // (`ci`, `ci/deploy`) do not exist at the start.
            "[sandbox]\nprotected = [\".github/workflows\", \"lib/tools/lint.sh\", \"ci/deploy/scripts\"]\n",
        ),
    ] {
        let p = path.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, t).unwrap();
    }
    sh(Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(repo.root()));
    let r = repo;
    let o = sbx().arg("start").arg(&r.path).output().unwrap();
    assert!(o.status.success(), "start: {}", text(&o));
    let agent = |script: &str| r.exec(script);

    // Controls: the parents stay writable, the secret reads as empty.
    for ok in [
        "echo x > .github/new.md && rm .github/new.md",
        "echo x > config/deploy/other.txt",
        "echo y > lib/tools/other.sh",
        "mkdir -p ci/deploy/other && touch ci/deploy/other/f",
        "test \"$(wc -c < config/deploy/secrets.env)\" = 0",
        "mv config/deploy/app.toml config/deploy/app2.toml",
    ] {
        let o = agent(ok);
        assert!(o.status.success(), "control `{ok}`: {}", text(&o));
    }

    // Each attack: move a parent (or the mount itself) away, then write the
    // freed path. Every step chain must fail at the move.
    let mut through = Vec::new();
    for attack in [
        "mv .github .gh2 && mkdir -p .github/workflows && echo evil > .github/workflows/ci.yml",
        "mv .github/workflows .github/w2 && mkdir .github/workflows && echo evil > .github/workflows/ci.yml",
        "mkdir -p x && mv .github x/ && mkdir -p .github/workflows && echo evil > .github/workflows/ci.yml",
        "rmdir .github",
        "mv lib lib2 && mkdir -p lib/tools && echo evil > lib/tools/lint.sh",
        "mv lib/tools lib/t2 && mkdir -p lib/tools && echo evil > lib/tools/lint.sh",
        "mv config config2 && mkdir -p config/deploy && echo TOKEN=evil > config/deploy/secrets.env",
        "mv config/deploy config/d2 && mkdir config/deploy && echo TOKEN=evil > config/deploy/secrets.env",
        "cat config/deploy/secrets.env | grep -q hunter2",
        "ln config/deploy/secrets.env config/hard && grep -q hunter2 config/hard",
        "ln .github/workflows/ci.yml .github/hard && echo evil >> .github/hard",
        "mv ci ci2 && mkdir -p ci/deploy/scripts && touch ci/deploy/scripts/x",
        "mv ci/deploy ci/d2 && mkdir -p ci/deploy/scripts && touch ci/deploy/scripts/x",
        "mkdir -p ci/deploy/scripts/y",
        "touch ci/deploy/scripts/x",
        "mv .git .git2 && mkdir -p .git/hooks && touch .git/hooks/pre-commit",
    ] {
        if agent(attack).status.success() {
            through.push(attack);
        }
    }
    assert!(through.is_empty(), "went through: {through:#?}");

    // On the host: nothing moved, nothing replaced.
    assert_eq!(
        read(&r, ".github/workflows/ci.yml").as_deref(),
        Some("on: push\n")
    );
    assert_eq!(
        read(&r, "lib/tools/lint.sh").as_deref(),
        Some("#!/bin/sh\n")
    );
    assert_eq!(
        read(&r, "config/deploy/secrets.env").as_deref(),
        Some("TOKEN=hunter2\n")
    );
    for gone in [
        ".gh2",
        "x/.github",
        "lib2",
        "config2",
        "config/d2",
        "ci2",
        ".git2",
        "ci/deploy/scripts/x",
    ] {
        assert!(!r.path.join(gone).exists(), "{gone} exists on the host");
    }
    // The missing parents were made, as the workspace's owner.
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(r.path.join("ci/deploy")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1000));
    assert!(r.path.join("ci/deploy/scripts").is_dir());
}

/// A protected path under a symlink cannot be held: start refuses, naming
/// the key and the link, and runs nothing.
#[test]
fn a_protected_path_under_a_symlink_is_refused() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("pinlink");
    let path = repo.path.clone();
    std::fs::create_dir_all(path.join("real/sub")).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    std::os::unix::fs::symlink("real", path.join("link")).unwrap();
    std::fs::create_dir_all(path.join(".agent-sandbox")).unwrap();
    std::fs::write(
        path.join(".agent-sandbox/config.toml"),
        "[sandbox]\nprotected = [\"link/sub\"]\n",
    )
    .unwrap();
    let r = repo;
    let o = sbx().arg("start").arg(&r.path).output().unwrap();
    // 65: the workspace's data (a link), not the config, is at fault.
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("link/sub") && t.contains("symbolic link"), "{t}");
}
