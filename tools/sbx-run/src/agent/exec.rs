//! How `sbx-run agent` runs a command in the sandbox: one function, so the
//! guest host API (a unix socket, sub-ms) can replace `docker exec` here.

use std::process::{Child, Stdio};

use sbx_core::error::BoxError;

use crate::RunError;
use crate::workspace::Workspace;

/// Start `argv` in the sandbox as the agent user in the workspace, with
/// `env` set for that process only; stdin and stdout are pipes.
pub fn spawn(ws: &Workspace, argv: &[String], env: &[(String, String)]) -> Result<Child, BoxError> {
    let mut c = crate::docker::cmd();
    c.args(["exec", "--interactive", "--user", "agent", "--workdir"])
        .arg(ws.target());
    for (k, v) in env {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    c.arg(&ws.names.container).args(argv);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c.spawn().map_err(|e| {
        Box::new(RunError::Docker {
            command: "docker exec".into(),
            message: e.to_string(),
        }) as BoxError
    })
}
