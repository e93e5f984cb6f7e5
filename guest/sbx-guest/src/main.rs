use std::process::ExitCode;

fn main() -> ExitCode {
    // A bug is a failed start: never mistaken for a healthy sandbox.
    sbx_core::main(
        sbx_guest::command(),
        sbx_core::Exit::Software,
        sbx_guest::run,
    )
}
