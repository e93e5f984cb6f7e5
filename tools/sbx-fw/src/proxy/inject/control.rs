//! Renewed values for the running proxy: `sbx-fw secret` (root, run by the
//! host through the guest) stores the value on the tmpfs, for a restarted
//! proxy, and hands it over [`CONTROL`]; the value travels on stdin and
//! this socket only, never in an argv or an environment.

use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use sbx_core::secrets::Binding;

use super::{BINDINGS, CONTROL, Injector, Update};

/// The largest update read.
const MAX_UPDATE: u64 = 128 * 1024;

/// The socket in `dir`, root's 0600 in a root's 0700 directory.
pub fn control_listener(dir: &Path) -> io::Result<UnixListener> {
    let p = dir.join(CONTROL);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display())));
        }
        _ => {}
    }
    let l = UnixListener::bind(&p)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Serve updates until the listener fails: one JSON [`Update`] a
/// connection, answered `ok` or `error: WHY`. Only root's are taken.
pub fn serve_control(l: &UnixListener, s: &Injector) {
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        let answer = match one(&mut c, s) {
            Ok(()) => "ok\n".to_owned(),
            Err(why) => format!("error: {why}\n"),
        };
        let _ = c.write_all(answer.as_bytes());
    }
}

fn one(c: &mut UnixStream, inj: &Injector) -> Result<(), String> {
    let cred = nix::sys::socket::getsockopt(&*c, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| e.to_string())?;
    if cred.uid() != 0 {
        return Err("only root renews secrets".into());
    }
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let mut text = Vec::new();
    (&mut *c)
        .take(MAX_UPDATE)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    let u: Update = serde_json::from_slice(&text).map_err(|e| format!("not an update: {e}"))?;
    inj.update(&u)
}

/// Store `u`'s value in `dir`'s bindings (write a new file, rename it
/// over): a proxy the guest restarts starts with it. A failure is not
/// stored: the running proxy holds it until the next renewal.
pub fn store(dir: &Path, u: &Update) -> io::Result<()> {
    let Some(v) = &u.value else { return Ok(()) };
    let p = dir.join(BINDINGS);
    let bad = |e: &dyn std::fmt::Display| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display()))
    };
    let text = std::fs::read(&p).map_err(|e| bad(&e))?;
    let mut all: Vec<Binding> = serde_json::from_slice(&text).map_err(|e| bad(&e))?;
    let mut found = false;
    for b in all.iter_mut().filter(|b| b.name == u.name) {
        b.value.clone_from(v);
        found = true;
    }
    if !found {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no [secrets] entry {:?} in {}", u.name, p.display()),
        ));
    }
    let tmp = dir.join(format!(".{BINDINGS}.new"));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| bad(&e))?;
        f.write_all(&serde_json::to_vec(&all).map_err(io::Error::other)?)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &p)
}

/// Hand `u` to the proxy serving `dir` and return its answer.
pub fn send(dir: &Path, u: &Update) -> io::Result<Result<(), String>> {
    let mut c = UnixStream::connect(dir.join(CONTROL))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(&serde_json::to_vec(u).map_err(io::Error::other)?)?;
    c.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    c.take(4096).read_to_string(&mut answer)?;
    Ok(match answer.trim_end().strip_prefix("error: ") {
        None if answer.trim_end() == "ok" => Ok(()),
        None => Err(format!("the proxy answered {:?}", answer.trim_end())),
        Some(why) => Err(why.to_owned()),
    })
}
