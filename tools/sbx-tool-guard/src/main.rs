use std::process::ExitCode;

fn main() -> ExitCode {
    // A bug in a guard refuses the call (77), never lets it through.
    sbx_core::main(
        sbx_tool_guard::command(),
        sbx_core::Exit::Denied,
        sbx_tool_guard::run,
    )
}
