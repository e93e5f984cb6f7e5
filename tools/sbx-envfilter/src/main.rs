use std::process::ExitCode;

fn main() -> ExitCode {
    sbx_core::main(
        sbx_envfilter::command(),
        sbx_core::Exit::WrapperFailed,
        sbx_envfilter::run,
    )
}
