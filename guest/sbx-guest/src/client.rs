//! `sbx-guest exec`: the guest API's client inside the sandbox, for a
//! cluster, where no host reaches the socket: the API server's exec runs
//! this in the main container, and the command runs as `sbx-run exec`
//! runs it from the host (the agent's uid, its audit record, the guards).

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use sbx_core::Exit;
use sbx_core::error::{BoxError, Message};
use sbx_core::guestapi::{self as proto, ExecReq, ExitMsg, Kind, ProtoError, Request};

fn failed(e: impl std::fmt::Display) -> BoxError {
    Box::new(Message::new(Exit::Unavailable, format!("guest API: {e}")))
}

/// Run `argv` as the agent; stdin is passed on, the exit is its status.
pub fn exec(
    socket: &Path,
    agent: &str,
    cwd: Option<String>,
    argv: &[OsString],
) -> Result<ExitCode, BoxError> {
    let mut client = proto::connect(socket).map_err(|e| {
        Box::new(Message::new(
            Exit::Unavailable,
            format!(
                "{}: {e}: no guest API (is sbx-guest this sandbox's PID 1?)",
                socket.display()
            ),
        )) as BoxError
    })?;
    let req = ExecReq {
        argv: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env: [("SBX_AGENT".to_owned(), agent.to_owned())].into(),
        cwd,
        // The API server's exec ends with its client: so does the command.
        hangup: true,
        ..Default::default()
    };
    client.send(&Request::Exec(req)).map_err(failed)?;
    match client.frame() {
        Ok((Kind::Reply, _)) => {}
        Ok((got, _)) => return Err(failed(format!("unexpected {got:?}"))),
        Err(ProtoError::Remote(e)) if e.kind == "spawn" => {
            let _ = writeln!(std::io::stderr(), "sbx-guest: {}", e.message);
            return Ok(ExitCode::from(e.status.unwrap_or(126) as u8));
        }
        Err(e) => return Err(failed(e)),
    }
    let writer = Arc::new(Mutex::new(client.stream.try_clone().map_err(failed)?));
    proto::forward_stdin(std::io::stdin(), Arc::clone(&writer));
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    loop {
        match client.frame().map_err(failed)? {
            (Kind::Stdout, d) => {
                let _ = out.write_all(&d).and_then(|()| out.flush());
            }
            (Kind::Stderr, d) => {
                let _ = err.write_all(&d).and_then(|()| err.flush());
            }
            (Kind::Exit, p) => {
                let x: ExitMsg = proto::parse("exit", &p).map_err(failed)?;
                return Ok(ExitCode::from(x.status.clamp(0, 255) as u8));
            }
            (got, _) => return Err(failed(format!("unexpected {got:?}"))),
        }
    }
}
