use std::process::ExitCode;

use sbx_git_guard::{Mode, guard, mode, pass_through};

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    // Dispatch on argv[0] before clap: as `git` every argument is git's.
    match mode(&argv0) {
        Mode::Git => guard(args.collect()),
        Mode::Dashed(cmd) => {
            let mut all = vec![cmd.into()];
            all.extend(args);
            guard(all)
        }
        Mode::PassThrough(cmd) => pass_through(&cmd, args.collect()),
        Mode::Hook(name) => sbx_git_guard::hooks::run(&name, args.collect()),
        Mode::Tool => sbx_core::main(
            sbx_git_guard::command(),
            sbx_core::Exit::Denied,
            sbx_git_guard::run,
        ),
    }
}
