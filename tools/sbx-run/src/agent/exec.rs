//! How `sbx-run agent` runs a command in the sandbox: through the guest's
//! host API (a unix socket, no docker process). A sandbox without it is
//! refused rather than reached with `docker exec`, whose processes would
//! miss the guest's seccomp filter.

use std::io::{Read, Write};

use sbx_core::error::BoxError;
use sbx_core::guestapi::{ExecReq, User};

use crate::RunError;
use crate::guestexec::{self, GuestError};
use crate::workspace::Workspace;

/// A started command: its stdin and stdout as pipes, and a way to wait.
pub struct Spawned {
    pub stdin: Option<Box<dyn Write + Send>>,
    pub stdout: Option<Box<dyn Read + Send>>,
    /// Through the guest: the last stop signal forwarded (0: none).
    pub stopped_by: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    wait: Box<dyn FnOnce() -> std::io::Result<i32> + Send>,
}

impl Spawned {
    /// The shell's number: the code, 128+N for a signal.
    pub fn wait(self) -> std::io::Result<i32> {
        (self.wait)()
    }
}

/// Start `argv` in the sandbox as the agent user in the workspace, with
/// `env` set for that process only, on `conn` when the caller holds a
/// fresh connection to the guest (one round trip fewer). SIGINT, SIGTERM,
/// SIGHUP and SIGQUIT are forwarded to it; when this process dies the
/// connection closes and the guest ends the command's whole tree.
pub fn spawn(
    ws: &Workspace,
    argv: &[String],
    env: &[(String, String)],
    conn: Option<sbx_core::guestapi::Client<std::os::unix::net::UnixStream>>,
) -> Result<Spawned, BoxError> {
    if let Some(client) = conn {
        return through_guest(client, ws, argv, env);
    }
    let socket = guestexec::socket_for(ws);
    match guestexec::connect(&socket) {
        Ok(client) => Ok(through_guest(client, ws, argv, env)?),
        Err(GuestError::NoGuest(..)) => {
            Err(Box::new(RunError::NoGuest(ws.names.container.clone())))
        }
        Err(e) => Err(Box::new(RunError::Docker {
            command: "guest exec".into(),
            message: e.to_string(),
        })),
    }
}

fn through_guest(
    client: sbx_core::guestapi::Client<std::os::unix::net::UnixStream>,
    ws: &Workspace,
    argv: &[String],
    env: &[(String, String)],
) -> Result<Spawned, BoxError> {
    let io_err = |e: std::io::Error| Box::new(RunError::Io("pipe".into(), e)) as BoxError;
    let pipe = || {
        nix::unistd::pipe()
            .map(|(r, w)| (std::fs::File::from(r), std::fs::File::from(w)))
            .map_err(|e| io_err(e.into()))
    };
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let req = ExecReq {
        argv: argv.to_vec(),
        env: env.iter().cloned().collect(),
        cwd: Some(ws.target()),
        user: User::Agent,
        tty: None,
        timeout_ms: None,
        // The run ends with sbx-run: killed or gone, the CLI goes too.
        hangup: true,
    };
    // Noted here; run_with forwards them (a second handler of the same signals).
    let stopped_by = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        let _ = signal_hook::flag::register_usize(sig, stopped_by.clone(), sig as usize);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = out_w;
        let mut err = std::io::stderr();
        let r = guestexec::run_with(client, req, Some(Box::new(in_r)), &mut out, &mut err, true);
        // The stdout pipe closes here: the reader sees the end.
        drop(out);
        let _ = tx.send(r);
    });
    Ok(Spawned {
        stdin: Some(Box::new(in_w)),
        stdout: Some(Box::new(out_r)),
        stopped_by: Some(stopped_by),
        wait: Box::new(move || match rx.recv() {
            Ok(Ok(x)) => Ok(x.status),
            Ok(Err(GuestError::Spawn(_, s))) => Ok(s),
            Ok(Err(e)) => Err(std::io::Error::other(e.to_string())),
            Err(_) => Err(std::io::Error::other("guest exec thread ended")),
        }),
    })
}
