//! Link without libc: no C runtime start files, no default libraries, no
//! dynamic loader. `-no-pie` because nothing would apply a static-pie's
//! relocations (glibc's start code does that); the code is position
//! independent anyway, only its load address is fixed.
fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo::rustc-link-arg-bins={arg}");
    }
}
