//! Names a quick build in `sbx-run --version`: scripts/shell's first build
//! compiles sbx-run unoptimised (the Makefile's QUICK=1) and replaces it with
//! the optimised one in the background; it asks the binary which it has.
fn main() {
    let quick = std::env::var("PROFILE").as_deref() == Ok("release")
        && std::env::var("OPT_LEVEL").as_deref() == Ok("0");
    let note = if quick {
        " (quick build: unoptimised until scripts/shell replaces it)"
    } else {
        ""
    };
    println!("cargo::rustc-env=SBX_RUN_BUILD_NOTE={note}");
    // The profile picks the build script's run; nothing else changes it.
    println!("cargo::rerun-if-changed=build.rs");
}
