use std::process::ExitCode;

fn main() -> ExitCode {
    sbx_core::main(
        sbx_worktree::command(),
        sbx_core::Exit::Software,
        sbx_worktree::run,
    )
}
