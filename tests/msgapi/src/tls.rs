//! HTTPS for the stand-in: a root of its own (`--new-ca DIR`, made on the
//! host before the sandbox starts, so sbx-run can hand it to the proxy)
//! and a leaf for the names it serves, signed by that root at its start.

use std::cell::RefCell;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Server;

const CA_KEY: &str = "ca.key";
const CA_CERT: &str = "ca.pem";

/// The root's parameters: fixed, so its issuer is rebuilt from the key.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, "sbx-msgapi test root");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p
}

/// Write a new root's key and certificate into `dir`.
pub fn new_ca(dir: &Path) -> Result<(), String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = ca_params().self_signed(&key).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (f, text) in [(CA_KEY, key.serialize_pem()), (CA_CERT, cert.pem())] {
        let p = dir.join(f);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The server side for `names`, its leaf signed by the root in `dir`.
pub fn server(names: &[String], dir: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let p = dir.join(CA_KEY);
    let pem = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let ca_key = KeyPair::from_pem(&pem).map_err(|e| format!("{}: {e}", p.display()))?;
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = CertificateParams::new(names.to_vec())
        .and_then(|c| c.signed_by(&key, &Issuer::new(ca_params(), ca_key)))
        .map_err(|e| e.to_string())?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], der)
        })
        .map_err(|e| e.to_string())?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// One TLS connection: requests read and answered on the same stream.
pub fn serve(
    server: &Server,
    c: Arc<rustls::ServerConfig>,
    conn: TcpStream,
) -> std::io::Result<()> {
    let peer = conn
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let tls = rustls::ServerConnection::new(c).map_err(std::io::Error::other)?;
    let s = Shared(Rc::new(RefCell::new(rustls::StreamOwned::new(tls, conn))));
    let mut out = Shared(s.0.clone());
    crate::serve_stream(server, BufReader::new(s), &mut out, &peer)
}

/// The stream as a reader and a writer at once: requests and answers
/// take turns on one thread, so the borrows never overlap.
struct Shared(Rc<RefCell<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}
