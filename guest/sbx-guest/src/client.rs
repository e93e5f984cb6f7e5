//! `sbx-guest exec`: the guest API's client inside the sandbox, for a
//! cluster, where no host reaches the socket: the API server's exec runs
//! this in the main container, and the command runs as `sbx-run exec`
//! runs it from the host (the agent's uid, its audit record, the guards).

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use sbx_core::Exit;
use sbx_core::error::{BoxError, Message};
use sbx_core::guestapi::{
    self as proto, Control, ExecReq, ExitMsg, Kind, ProtoError, Request, Winsize,
};

fn failed(e: impl std::fmt::Display) -> BoxError {
    Box::new(Message::new(Exit::Unavailable, format!("guest API: {e}")))
}

/// This tty's size; a tty not sized yet (an exec's, before its first
/// resize) is 80x24 until it is.
fn tty_size() -> Winsize {
    match sbx_sys::winsize(std::io::stdin().as_fd()) {
        Some((rows, cols)) if rows > 0 && cols > 0 => Winsize { rows, cols },
        _ => Winsize { rows: 24, cols: 80 },
    }
}

/// Run `argv` as the agent; stdin is passed on, the exit is its status.
/// `tty`: on a PTY of the guest's, sized as this process's stdin, a tty.
/// `env`: NAME=VALUE pairs for the command.
pub fn exec(
    socket: &Path,
    agent: &str,
    cwd: Option<String>,
    tty: bool,
    env: &[String],
    argv: &[OsString],
) -> Result<ExitCode, BoxError> {
    if tty && !std::io::stdin().is_terminal() {
        return Err(Box::new(Message::new(
            Exit::Usage,
            "--tty: stdin is not a terminal (ask the exec for one: tty=true, kubectl exec -t)",
        )));
    }
    let mut vars = std::collections::BTreeMap::new();
    for kv in env {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(Box::new(Message::new(
                Exit::Usage,
                format!("--env {kv:?}: give NAME=VALUE"),
            )));
        };
        vars.insert(k.to_owned(), v.to_owned());
    }
    vars.insert("SBX_AGENT".to_owned(), agent.to_owned());
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
        env: vars,
        cwd,
        tty: tty.then(tty_size),
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
    // Restored when this returns: the exec's tty is the guest PTY's view.
    let _raw = if tty {
        Some(sbx_sys::raw_terminal(std::io::stdin().as_fd()).map_err(failed)?)
    } else {
        None
    };
    if tty {
        resizes(Arc::clone(&writer))?;
    }
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

/// Each SIGWINCH (the exec's tty resized: the API server's channel 4)
/// becomes a resize of the guest's PTY; one is sent once the handler is
/// in place, for a resize that came before it (the viewer's first).
fn resizes(w: Arc<Mutex<std::os::unix::net::UnixStream>>) -> Result<(), BoxError> {
    let mut sigs =
        signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH]).map_err(failed)?;
    {
        let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
        proto::write_json(&mut *s, Kind::Control, &Control::Resize(tty_size())).map_err(failed)?;
    }
    std::thread::spawn(move || {
        for _ in sigs.forever() {
            let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
            if proto::write_json(&mut *s, Kind::Control, &Control::Resize(tty_size())).is_err() {
                return;
            }
        }
    });
    Ok(())
}
