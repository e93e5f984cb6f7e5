//! `cargo xtask gen` writes man pages and completions; `cargo xtask check`
//! exits 1 when the committed ones are stale; `cargo xtask git-options`
//! regenerates sbx-git-guard's option tables from real gits.

use std::process::ExitCode;

fn main() -> ExitCode {
    let root = xtask::root();
    match std::env::args().nth(1).as_deref() {
        Some("gen") => {
            for (path, data) in xtask::render() {
                let full = root.join(&path);
                if let Some(dir) = full.parent() {
                    std::fs::create_dir_all(dir).expect("create output directory");
                }
                std::fs::write(&full, data).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Some("check") => {
            let stale = xtask::stale(&root);
            for p in &stale {
                eprintln!("stale: {} (run `cargo xtask gen`)", p.display());
            }
            if stale.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Some("git-options") => {
            let gits: Vec<String> = std::env::args().skip(2).collect();
            if gits.is_empty() {
                eprintln!(
                    "usage: cargo xtask git-options GIT... (e.g. /usr/bin/git /usr/local/bin/git)"
                );
                return ExitCode::from(64);
            }
            let path = root.join("tools/sbx-git-guard/src/options_gen.rs");
            std::fs::write(&path, xtask::git_options::generate(&gits))
                .expect("write options_gen.rs");
            let fmt = std::process::Command::new("rustfmt")
                .args(["--edition", "2024"])
                .arg(&path)
                .status()
                .expect("run rustfmt");
            assert!(fmt.success(), "rustfmt failed");
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: cargo xtask gen|check|git-options GIT...");
            ExitCode::from(64)
        }
    }
}
