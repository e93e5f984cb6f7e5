//! The state directory under the home is left out of the
//! backup by comparing paths, not by a glob made from its name. Names with
//! glob syntax, spaces and newlines, in the home, the state dir and the
//! files, neither panic nor exclude a sibling.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// Every file under `root`, relative, as bytes.
fn files(root: &Path) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap();
                out.insert(rel.as_os_str().as_bytes().to_vec());
            }
        }
    }
    out
}

const NAMES: &[&str] = &[
    "st[ate",
    "a*",
    "s?t",
    "{a,b}",
    "x]",
    "sp ace",
    "new\nline",
    "a[1]",
    "ab",
    "a",
    "b",
    "state",
    "s1t",
    "\\*",
];

#[test]
fn state_dir_with_glob_syntax_excludes_only_itself() {
    let bin = env!("CARGO_BIN_EXE_sbx-backup");
    for (i, state_name) in NAMES.iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("h [*?{x,y}] \n~");
        fs::create_dir_all(&home).unwrap();
        fs::write(tmp.path().join("config.toml"), "").unwrap();
        // Every other name is a sibling directory with a file whose name
        // is glob syntax too; the state dir's own contents must stay out.
        for other in NAMES.iter().filter(|n| *n != state_name) {
            let d = home.join(other);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("f [*?] {1,2}\n"), other.as_bytes()).unwrap();
            fs::write(home.join(format!("{other}.file")), b"x").unwrap();
        }
        let state = home.join(state_name);
        let url = format!("file://{}/store", tmp.path().display());
        let run = |args: &[&str]| {
            let o = Command::new(bin)
                .env_clear()
                .arg("--config")
                .arg(tmp.path().join("config.toml"))
                .arg("--url")
                .arg(&url)
                .arg("--home")
                .arg(&home)
                .arg("--state-dir")
                .arg(&state)
                .args(args)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "state dir {state_name:?}: {args:?} exited {:?}: {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
        };
        run(&["-q", "sync"]);
        assert!(state.join("index.json").is_file(), "{state_name:?}");
        let to = tmp.path().join(format!("restored{i}"));
        run(&["-q", "restore", "--to", to.to_str().unwrap()]);
        let mut want = files(&home);
        want.retain(|f| !Path::new(std::ffi::OsStr::from_bytes(f)).starts_with(state_name));
        assert!(want.len() > 2 * (NAMES.len() - 1) - 1);
        assert_eq!(files(&to), want, "state dir {state_name:?}");
    }
}
