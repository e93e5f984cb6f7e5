//! The seccomp filters every agent process starts under: built in sbx-sys
//! (the git broker installs the same ones in its sessions as the agent),
//! registered here once, installed by sbx-sys in each agent child.

/// Build the filters and register them for every agent child; an error
/// here stops the sandbox (no agent without them).
pub fn register() -> Result<(), String> {
    sbx_sys::agent_seccomp::register()
}
