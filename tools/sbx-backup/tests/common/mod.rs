//! What several of sbx-backup's test files need: moto's S3 server on
//! loopback, and a description of a tree to compare a restore with.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const MOTO: &str = "/opt/sbx/moto/bin/moto_server";

/// A running moto_server; dropping it kills and reaps it, on every path
/// out of a test.
pub struct Moto(Child, pub u16);
impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One bodiless request, answered in full (the connection is closed).
pub fn http(port: u16, method: &str, path: &str) -> String {
    try_http(port, method, path).unwrap()
}

/// [`http`], or the error connecting (a server still starting).
pub fn try_http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    Ok(r)
}

/// moto_server on a free loopback port with the bucket `sbx` made; None
/// (a skip) where it is missing, a failure under CI.
pub fn moto() -> Option<Moto> {
    let bin = std::env::var("SBX_MOTO_SERVER").unwrap_or_else(|_| MOTO.into());
    if !Path::new(&bin).exists() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(!ci, "{bin} is missing: run scripts/prereqs");
        eprintln!("skipping: {bin} is missing (scripts/prereqs installs it)");
        return None;
    }
    let port = free_port();
    let child = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Moto(child, port);
    // moto (Python) takes seconds to start on a loaded 2-core machine.
    // A first connection can be taken and then refused while it starts:
    // only an answered request says it is up.
    let mut last = String::new();
    for _ in 0..600 {
        // moto does not check signatures: a plain PUT makes the bucket.
        match try_http(port, "PUT", "/sbx") {
            Ok(r) if r.starts_with("HTTP/1.1 200") => return Some(server),
            Ok(r) => last = r,
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("moto_server did not start: {last}");
}

/// Type, mode, mtime, content and link target of every path under `root`
/// (the state directory `.local` left out), to compare a restore with.
pub fn tree(root: &Path) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            if rel.starts_with(b".local") {
                continue;
            }
            let ft = md.file_type();
            let desc = if ft.is_symlink() {
                format!("link -> {:?}", fs::read_link(&p).unwrap())
            } else if ft.is_dir() {
                stack.push(p.clone());
                format!("dir {:o} {}", md.mode() & 0o7777, md.mtime())
            } else if ft.is_file() {
                let mut h = blake3::Hasher::new();
                h.update_reader(fs::File::open(&p).unwrap()).unwrap();
                format!(
                    "file {:o} {}.{} {} {}",
                    md.mode() & 0o7777,
                    md.mtime(),
                    md.mtime_nsec(),
                    md.len(),
                    h.finalize().to_hex()
                )
            } else {
                "special".into()
            };
            out.insert(rel, desc);
        }
    }
    out
}

/// A relay to `to` that can be cut (new and open connections dropped),
/// counting the bytes it forwards to the server in `sent`; `edit` may
/// change what goes to the server in place (a proxy that drops a header).
pub fn relay(
    to: u16,
    up: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    edit: Option<fn(&mut [u8])>,
) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            if !up.load(Ordering::SeqCst) {
                continue; // dropped: connection reset
            }
            let Ok(s) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            for (i, (mut a, mut b)) in [(c.try_clone().unwrap(), s.try_clone().unwrap()), (s, c)]
                .into_iter()
                .enumerate()
            {
                let up = up.clone();
                let sent = (i == 0).then(|| sent.clone());
                let edit = edit.filter(|_| i == 0);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while up.load(Ordering::SeqCst) {
                        match a.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if let Some(f) = edit {
                                    f(&mut buf[..n]);
                                }
                                if let Some(s) = &sent {
                                    s.fetch_add(n as u64, Ordering::SeqCst);
                                }
                                if b.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = a.shutdown(Shutdown::Both);
                    let _ = b.shutdown(Shutdown::Both);
                });
            }
        }
    });
    port
}
