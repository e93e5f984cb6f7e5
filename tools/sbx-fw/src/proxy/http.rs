//! Plain HTTP request heads: the Host of a request on port 80, the target
//! of a CONNECT on the explicit proxy. Strict: one Host header, a name (not
//! an address), nothing we have to guess about.

/// The largest request head we wait for.
pub const MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// The head has not ended yet.
    More,
    /// A whole head, `len` bytes including the blank line.
    Done(Request),
    Bad(String),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: String,
    /// The Host header, lower case, without its port.
    pub host: Option<String>,
    pub len: usize,
}

/// Parse the head at the start of `buf`.
pub fn parse(buf: &[u8]) -> Head {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Head::Bad(format!("no request head within {MAX_HEAD} bytes"))
        } else {
            Head::More
        };
    };
    if end + 4 > MAX_HEAD {
        return Head::Bad(format!("request head over {MAX_HEAD} bytes"));
    }
    let Ok(text) = std::str::from_utf8(&buf[..end]) else {
        return Head::Bad("request head is not UTF-8".into());
    };
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Head::Bad("malformed request line".into());
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
        return Head::Bad("malformed request line".into());
    }
    let mut host = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Head::Bad("malformed header line".into());
        };
        if k.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Head::Bad("more than one Host header".into());
            }
            host = Some(v.trim().to_owned());
        }
    }
    let host = match host {
        Some(h) => match host_name(&h) {
            Some((n, _)) => Some(n),
            None => return Head::Bad(format!("Host {h:?} is not a host name")),
        },
        None => None,
    };
    Head::Done(Request {
        method: method.to_owned(),
        target: target.to_owned(),
        host,
        len: end + 4,
    })
}

/// `name[:port]` -> (lower-case name, port). Addresses, brackets and
/// anything that is not a host name give None.
pub fn host_name(s: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = match s.rsplit_once(':') {
        Some((n, p)) => (n, Some(p.parse::<u16>().ok()?)),
        None => (s, None),
    };
    let d: sbx_core::config::Domain = name.parse().ok()?;
    if d.wildcard {
        return None;
    }
    Some((d.name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(req: &str) -> Option<String> {
        match parse(req.as_bytes()) {
            Head::Done(r) => r.host,
            other => panic!("{req:?}: {other:?}"),
        }
    }

    #[test]
    fn host_header_found_lowered_and_port_stripped() {
        assert_eq!(
            host("GET / HTTP/1.1\r\nUser-Agent: x\r\nhOsT:  Allowed.Test:80 \r\n\r\n"),
            Some("allowed.test".into())
        );
        assert_eq!(host("GET / HTTP/1.0\r\n\r\n"), None);
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a"), Head::More);
    }

    #[test]
    fn ambiguous_or_address_hosts_are_bad() {
        for r in [
            "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 198.18.1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [2001:2::1]:80\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: *.wild.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test:99999\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a b.test\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET /\r\n\r\n",
            "GET / SPDY/3\r\n\r\n",
        ] {
            assert!(matches!(parse(r.as_bytes()), Head::Bad(_)), "{r:?}");
        }
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(parse(big.as_bytes()), Head::Bad(_)));
    }

    #[test]
    fn connect_target() {
        match parse(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\nrest") {
            Head::Done(r) => {
                assert_eq!(r.method, "CONNECT");
                assert_eq!(
                    host_name(&r.target),
                    Some(("allowed.test".into(), Some(443)))
                );
                assert_eq!(r.len, 61);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Fuzz-ish: any prefix or byte flip of a request never panics.
    #[test]
    fn prefixes_and_flips_never_panic() {
        let r = b"GET /x HTTP/1.1\r\nHost: allowed.test\r\nAccept: */*\r\n\r\n";
        for n in 0..=r.len() {
            let _ = parse(&r[..n]);
        }
        for i in 0..r.len() {
            for b in [0u8, b':', b'\r', b'\n', b' ', 0xff, b'A'] {
                let mut m = r.to_vec();
                m[i] = b;
                let _ = parse(&m);
            }
        }
    }
}
