//! The page embeds xterm.js from `web/vendor/`, which `scripts/prereqs`
//! (through `scripts/web-assets`) fetches at a pinned version: say so in one
//! line when it is missing, instead of include_bytes!'s long error.

const VENDOR: [&str; 4] = ["xterm.js", "xterm.css", "addon-fit.js", "LICENSE-xterm"];

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
    println!("cargo::rerun-if-changed=web");
    for f in VENDOR {
        let p = dir.join("vendor").join(f);
        println!("cargo::rerun-if-changed={}", p.display());
        if !p.is_file() {
            println!(
                "cargo::error={} is missing: run scripts/prereqs (or scripts/web-assets) to fetch xterm.js",
                p.display()
            );
            return;
        }
    }
}
