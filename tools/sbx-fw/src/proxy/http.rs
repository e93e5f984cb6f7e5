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
    pub framing: Framing,
    /// A header that asks the server to act as another method
    /// (`X-HTTP-Method-Override: DELETE`), by name.
    pub method_override: Option<String>,
    /// Where the head starts in what [`super::requests::Requests::feed`]
    /// wrote out (0 from [`parse`]): a refusal sends only what came before.
    pub at: usize,
}

/// Parse the head at the start of `buf`.
pub fn parse(buf: &[u8]) -> Head {
    // A method is a token: a TLS hello or other binary is refused at once,
    // not after the head timeout.
    if buf.first().is_some_and(|b| !is_tchar(*b)) {
        return Head::Bad("not an HTTP request".into());
    }
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
    // A lone CR or LF, a folded line or a header name that is not a token
    // is read one way here and another by some servers: refused, so the
    // headers we judge are the ones the server acts on.
    if first.contains(['\r', '\n']) {
        return Head::Bad("bare CR or LF in the request line".into());
    }
    let (host, framing, method_override) = match headers(lines) {
        Ok(v) => v,
        Err(e) => return Head::Bad(e),
    };
    let host = match (host, target_name(method, target)) {
        (_, Err(e)) => return Head::Bad(e),
        (Some(h), Ok(Some(n))) if h != n => {
            return Head::Bad(format!("request target names {n}, Host {h}"));
        }
        (h, Ok(n)) => h.or(n),
    };
    Head::Done(Request {
        method: method.to_owned(),
        target: target.to_owned(),
        host,
        len: end + 4,
        framing,
        method_override,
        at: 0,
    })
}

/// Headers some servers and frameworks read as the request's real method.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The Host (lower case, no port), the body framing and a method override
/// header's name, of the header lines.
fn headers<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<(Option<String>, Framing, Option<String>), String> {
    let mut host = None;
    let mut framing = Framing::None;
    let mut method_override = None;
    for l in lines {
        if l.contains(['\r', '\n']) {
            return Err("bare CR or LF in a header".into());
        }
        let Some((k, v)) = l.split_once(':') else {
            return Err("malformed header line".into());
        };
        if k.is_empty() || !k.bytes().all(is_tchar) {
            return Err(format!("header name {k:?} is not a token"));
        }
        let v = v.trim_matches([' ', '\t']);
        if k.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Err("more than one Host header".into());
            }
            host = Some(v.to_owned());
        } else if k.eq_ignore_ascii_case("content-length") {
            let Ok(n) = v.parse::<u64>() else {
                return Err(format!("Content-Length {v:?}"));
            };
            if !v.bytes().all(|b| b.is_ascii_digit()) || framing != Framing::None {
                return Err("ambiguous body length".into());
            }
            framing = Framing::Length(n);
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            if !v.eq_ignore_ascii_case("chunked") || framing != Framing::None {
                return Err("ambiguous body length".into());
            }
            framing = Framing::Chunked;
        } else if k.eq_ignore_ascii_case("upgrade") {
            framing = Framing::Upgrade;
        } else if METHOD_OVERRIDES.iter().any(|m| k.eq_ignore_ascii_case(m)) {
            method_override = Some(k.to_owned());
        }
    }
    match host {
        Some(h) => match host_name(&h) {
            Some((n, _)) => Ok((Some(n), framing, method_override)),
            None => Err(format!("Host {h:?} is not a host name")),
        },
        None => Ok((None, framing, method_override)),
    }
}

/// The name in CONNECT's authority-form target is the one a proxy acts
/// on: it must be the Host's, and stands for it when there is no Host.
/// Every other request takes a path (origin-form) or `*`: an absolute-form
/// target (`GET http://x/ HTTP/1.1`) is what a client sends a proxy, and
/// the server behind a redirected connection may be one (its name is the
/// one it would act on, and rules judge a path), so it is refused.
fn target_name(method: &str, target: &str) -> Result<Option<String>, String> {
    if target.starts_with('/') || target == "*" {
        return Ok(None);
    }
    if method != "CONNECT" {
        return Err(format!(
            "request target {target:?}: only a path is taken here (absolute-form is for proxies)"
        ));
    }
    let auth = target;
    match host_name(auth) {
        Some((n, _)) => Ok(Some(n)),
        None => Err(format!("request target {target:?} names no host")),
    }
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// How the body after a request head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    /// The connection may change protocol: what follows is not HTTP/1 we
    /// could follow.
    Upgrade,
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
        assert!(matches!(parse(&[0x16, 3, 1]), Head::Bad(_)));
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

    #[test]
    fn target_and_host_must_agree_and_headers_be_plain() {
        for r in [
            // Absolute-form, even agreeing with the Host.
            "GET http://Allowed.test:80/x?y HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET http://allowed.test/ HTTP/1.0\r\n\r\n",
            "GET HTTPS://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET http://blocked.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET http://u@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET ftp://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "CONNECT blocked.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\nHost: blocked.test\r\nHost: allowed.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : blocked.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: allowed.test\r\n blocked.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ] {
            assert!(matches!(parse(r.as_bytes()), Head::Bad(_)), "{r:?}");
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
