//! `cargo xtask gen` writes man pages and completions; `cargo xtask check`
//! exits 1 when the committed ones are stale.

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
        _ => {
            eprintln!("usage: cargo xtask gen|check");
            ExitCode::from(64)
        }
    }
}
