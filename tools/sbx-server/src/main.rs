use std::process::ExitCode;

fn main() -> ExitCode {
    sbx_core::main(
        sbx_server::command(),
        sbx_core::Exit::Software,
        sbx_server::run,
    )
}
