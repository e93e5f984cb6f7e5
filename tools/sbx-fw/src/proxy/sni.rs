//! The server name of a TLS ClientHello, read with rustls's `Acceptor`,
//! which parses the hello without terminating anything: the bytes go on
//! to the server unchanged. With Encrypted Client Hello the readable
//! (outer) hello names the public name, and that is what is judged.

use rustls::server::Acceptor;

/// The largest ClientHello we wait for (post-quantum key shares make
/// hellos of 1.5-2 KiB; rustls's own limit is far above).
pub const MAX_HELLO: usize = 16 * 1024;

/// What the bytes seen so far say.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a whole ClientHello yet.
    More,
    /// A ClientHello; its server name if it has one (lower case).
    Name(Option<String>),
    /// Not TLS, or a malformed hello.
    Bad(String),
}

/// Feeds bytes to a rustls `Acceptor` as they arrive.
#[derive(Default)]
pub struct Reader {
    acc: Acceptor,
    seen: usize,
}

impl Reader {
    /// Give the next bytes (each byte exactly once).
    pub fn push(&mut self, mut chunk: &[u8]) -> Hello {
        if self.seen == 0 && chunk.first().is_some_and(|b| *b != 0x16) {
            return Hello::Bad("not a TLS handshake".into());
        }
        self.seen += chunk.len();
        if self.seen > MAX_HELLO {
            return Hello::Bad(format!("no ClientHello within {MAX_HELLO} bytes"));
        }
        while !chunk.is_empty() {
            match self.acc.read_tls(&mut chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Hello::Bad(e.to_string()),
            }
        }
        match self.acc.accept() {
            Ok(None) => Hello::More,
            Ok(Some(a)) => Hello::Name(
                a.client_hello()
                    .server_name()
                    .map(|n| n.trim_end_matches('.').to_ascii_lowercase()),
            ),
            Err((e, _)) => Hello::Bad(e.to_string()),
        }
    }
}

/// The server name in a complete hello (tests, tools).
pub fn server_name(bytes: &[u8]) -> Hello {
    Reader::default().push(bytes)
}

/// A minimal TLS 1.3 ClientHello naming `sni` (none with `None`), as
/// clients send it: for tests and the bench's clients.
pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
    fn u16b(v: usize) -> [u8; 2] {
        u16::try_from(v).unwrap_or(u16::MAX).to_be_bytes()
    }
    let mut ext = Vec::new();
    let mut push_ext = |ty: u16, body: &[u8]| {
        ext.extend_from_slice(&ty.to_be_bytes());
        ext.extend_from_slice(&u16b(body.len()));
        ext.extend_from_slice(body);
    };
    if let Some(n) = sni {
        let mut b = Vec::new();
        b.extend_from_slice(&u16b(n.len() + 3));
        b.push(0);
        b.extend_from_slice(&u16b(n.len()));
        b.extend_from_slice(n.as_bytes());
        push_ext(0x0000, &b);
    }
    push_ext(0x000a, &[0, 2, 0, 0x1d]); // groups: x25519
    push_ext(0x000d, &[0, 4, 0x08, 0x04, 0x04, 0x03]); // rsa_pss, ecdsa p256
    push_ext(0x002b, &[2, 0x03, 0x04]); // TLS 1.3
    let mut ks = vec![0, 36, 0, 0x1d, 0, 32];
    ks.extend((0..32u8).map(|i| i.wrapping_mul(7).wrapping_add(9)));
    push_ext(0x0033, &ks);
    let mut body = vec![0x03, 0x03];
    body.extend((0..32u8).map(|i| i ^ 0x5a)); // random
    body.push(32);
    body.extend([0x11u8; 32]); // legacy session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&u16b(ext.len()));
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&u16b(body.len()));
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&u16b(hs.len()));
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_name_whole_and_byte_by_byte() {
        let h = client_hello(Some("API.Example.com"));
        assert_eq!(server_name(&h), Hello::Name(Some("api.example.com".into())));
        let mut r = Reader::default();
        for (i, b) in h.iter().enumerate() {
            let got = r.push(std::slice::from_ref(b));
            if i + 1 < h.len() {
                assert_eq!(got, Hello::More, "byte {i}");
            } else {
                assert_eq!(got, Hello::Name(Some("api.example.com".into())));
            }
        }
    }

    #[test]
    fn no_sni_is_none_and_junk_is_bad() {
        assert_eq!(server_name(&client_hello(None)), Hello::Name(None));
        assert!(matches!(server_name(b"GET / HTTP/1.1\r\n"), Hello::Bad(_)));
        // An application-data record instead of a handshake.
        assert!(matches!(server_name(&[0x17, 3, 3, 0, 1, 0]), Hello::Bad(_)));
    }

    #[test]
    fn oversized_hellos_are_refused_not_waited_for() {
        // A handshake record header promising more than we wait for.
        let mut r = Reader::default();
        assert_eq!(r.push(&[0x16, 3, 1, 0x40, 0]), Hello::More);
        let got = r.push(&vec![0u8; MAX_HELLO]);
        assert!(matches!(got, Hello::Bad(_)), "{got:?}");
    }

    /// Fuzz-ish: every truncation and every single-byte corruption of a
    /// real hello gives More, Bad or a name, never a panic; and when a name
    /// comes out of a corrupted hello it is the one that was there or Bad
    /// (a flipped byte inside the name is a different name, which the
    /// policy then judges, so that is allowed too).
    #[test]
    fn truncations_and_corruptions_never_panic() {
        let h = client_hello(Some("allowed.test"));
        for n in 0..h.len() {
            let got = server_name(&h[..n]);
            assert!(
                matches!(got, Hello::More | Hello::Bad(_)),
                "len {n}: {got:?}"
            );
        }
        let mut seed = 0x9e37_79b9_u32;
        for i in 0..h.len() {
            for _ in 0..8 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let mut m = h.clone();
                m[i] = seed.to_le_bytes()[0];
                let _ = server_name(&m);
            }
        }
    }
}
