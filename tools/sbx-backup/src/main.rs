use std::process::ExitCode;

fn main() -> ExitCode {
    sbx_core::main(
        sbx_backup::command(),
        sbx_core::Exit::Software,
        sbx_backup::run,
    )
}
