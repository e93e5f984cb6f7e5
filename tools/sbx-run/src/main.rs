use std::process::ExitCode;

fn main() -> ExitCode {
    sbx_core::main(sbx_run::command(), sbx_core::Exit::Software, sbx_run::run)
}
