use std::process::ExitCode;

fn main() -> ExitCode {
    // A bug must not be mistaken for success; init's caller refuses to
    // start the agent on any non-zero status.
    sbx_core::main(sbx_fw::command(), sbx_core::Exit::Software, sbx_fw::run)
}
