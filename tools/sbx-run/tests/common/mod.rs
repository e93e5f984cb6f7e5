//! What sbx-run's `show-run` tests share: the binary with a cleared
//! environment and no engine, and the flags of the printed `docker run`.

use std::path::Path;
use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_sbx-run");

/// sbx-run with only PATH and a home, state and audit log under `dir`; a
/// docker that fails, since show-run must not need the engine.
pub fn sbx_run(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("SBX_AUDIT_LOG", dir.join("audit.jsonl"))
        .env("SBX_DOCKER", "/bin/false");
    c
}

/// The values of `flag` (`--env`, `--mount`) on the sandbox's `docker run`
/// line of show-run's output.
pub fn run_flag_values(show_run: &str, flag: &str) -> Vec<String> {
    let run = show_run
        .lines()
        .find(|l| l.contains(" run --detach --name ") && !l.contains("--entrypoint sleep"))
        .unwrap_or_default();
    let words = shlex::split(run).unwrap_or_default();
    words
        .windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].clone())
        .collect()
}
