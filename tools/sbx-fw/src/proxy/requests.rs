//! Following the requests on one plain HTTP connection, so that every
//! head is judged, not only the first.

use super::http::{Framing, Head, MAX_HEAD, Request, parse};

/// A change to each whole head before it is sent on (credential injection).
pub type HeadEdit<'a> = dyn FnMut(&Request, &mut Vec<u8>) -> Result<(), String> + 'a;

/// Follows the requests a client sends on one plain HTTP connection, so
/// that every head is judged, not only the first: a keep-alive connection
/// could otherwise carry a second request for any host. Bodies are framed
/// by Content-Length or chunked coding; anything we could not follow the
/// way a server does (an Upgrade, trailers, a malformed chunk) is refused.
#[derive(Debug, Default)]
pub struct Requests {
    state: St,
    pending: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy)]
enum St {
    #[default]
    Head,
    Body(u64),
    ChunkLine,
    ChunkData(u64),
    ChunkEnd,
    Trailer,
}

impl Requests {
    /// Take the next bytes: every whole head in them goes to `heads` (to
    /// be judged before anything is sent) and the bytes that may be sent on
    /// to `out`. A head still incomplete is held back.
    pub fn feed(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        heads: &mut Vec<Request>,
    ) -> Result<(), String> {
        self.feed_with(data, out, heads, &mut |_, _| Ok(()))
    }

    /// [`Requests::feed`], with `edit` given each whole head (parsed, and
    /// its bytes to change) before it goes to `out`: bodies are never
    /// touched, and an error stops everything after it.
    pub fn feed_with(
        &mut self,
        mut data: &[u8],
        out: &mut Vec<u8>,
        heads: &mut Vec<Request>,
        edit: &mut HeadEdit<'_>,
    ) -> Result<(), String> {
        while !data.is_empty() {
            match self.state {
                St::Body(n) | St::ChunkData(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
                    out.extend_from_slice(&data[..k]);
                    data = &data[k..];
                    let left = n - k as u64;
                    self.state = match self.state {
                        St::Body(_) if left == 0 => St::Head,
                        St::Body(_) => St::Body(left),
                        _ if left == 0 => St::ChunkEnd,
                        _ => St::ChunkData(left),
                    };
                }
                St::Head => {
                    if take_until(&mut self.pending, &mut data, b"\r\n\r\n", MAX_HEAD)? {
                        let mut r = self.head()?;
                        r.at = out.len();
                        edit(&r, &mut self.pending)?;
                        heads.push(r);
                        out.append(&mut self.pending);
                    }
                }
                St::ChunkLine => {
                    if take_until(&mut self.pending, &mut data, b"\r\n", 1024)? {
                        self.state = match chunk_size(&self.pending)? {
                            0 => St::Trailer,
                            n => St::ChunkData(n),
                        };
                        out.append(&mut self.pending);
                    }
                }
                St::ChunkEnd | St::Trailer => {
                    self.pending.push(data[0]);
                    data = &data[1..];
                    if self.pending.len() < 2 {
                        continue;
                    }
                    if self.pending != b"\r\n" {
                        return Err("malformed chunked body (or trailers)".into());
                    }
                    self.state = match self.state {
                        St::ChunkEnd => St::ChunkLine,
                        _ => St::Head,
                    };
                    out.append(&mut self.pending);
                }
            }
        }
        Ok(())
    }

    /// The whole head in `pending`, and the state its body puts us in.
    fn head(&mut self) -> Result<Request, String> {
        let r = match parse(&self.pending) {
            Head::Done(r) => r,
            Head::Bad(e) => return Err(e),
            Head::More => return Err("request head".into()),
        };
        self.state = match r.framing {
            Framing::None | Framing::Length(0) => St::Head,
            Framing::Length(n) => St::Body(n),
            Framing::Chunked => St::ChunkLine,
            Framing::Upgrade => return Err("a protocol upgrade".into()),
        };
        Ok(r)
    }
}

/// Move bytes from `data` into `buf` until it ends with `end`: true then
/// (`data` keeps what follows); an error past `max` bytes.
pub fn take_until(
    buf: &mut Vec<u8>,
    data: &mut &[u8],
    end: &[u8],
    max: usize,
) -> Result<bool, String> {
    // Look from a little before the new bytes: `end` may straddle.
    let from = buf.len().saturating_sub(end.len() - 1);
    let old = buf.len();
    let avail = &data[..data.len().min(max + 1 - old.min(max))];
    buf.extend_from_slice(avail);
    match buf[from..].windows(end.len()).position(|w| w == end) {
        Some(i) => {
            let stop = from + i + end.len();
            *data = &data[stop - old..];
            buf.truncate(stop);
            Ok(true)
        }
        None if buf.len() > max => Err(format!("nothing whole within {max} bytes")),
        None => {
            *data = &data[avail.len()..];
            Ok(false)
        }
    }
}

/// The size on a chunk line (its CRLF included).
pub fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let line = &line[..line.len().saturating_sub(2)];
    let size = line.split(|b| *b == b';').next().unwrap_or_default();
    let ok = !size.is_empty()
        && size.len() <= 15
        && size.iter().all(u8::is_ascii_hexdigit)
        && !line.iter().any(|b| matches!(b, b'\r' | b'\n' | 0));
    let n = std::str::from_utf8(size)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok());
    match n {
        Some(n) if ok => Ok(n),
        _ => Err("malformed chunk size".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every head on a connection comes out, whatever the bodies and
    /// however the bytes are cut; what cannot be followed is refused.
    #[test]
    fn requests_on_one_connection_are_all_seen() {
        let stream = "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 33\r\n\r\n\
                      GET / HTTP/1.1\r\nHost: no.test\r\n\r\n\
                      PUT / HTTP/1.1\r\nHost: b.test\r\nTransfer-Encoding: chunked\r\n\r\n\
                      5;x=1\r\nHost:\r\n10\r\nGET / HTTP/1.1\r\n\r\n0\r\n\r\n\
                      GET / HTTP/1.1\r\nHost: c.test\r\n\r\n";
        for step in [1, 2, 7, 64, stream.len()] {
            let mut r = Requests::default();
            let (mut out, mut heads) = (Vec::new(), Vec::new());
            for piece in stream.as_bytes().chunks(step) {
                r.feed(piece, &mut out, &mut heads).unwrap();
            }
            let hosts: Vec<_> = heads.iter().map(|h| h.host.clone().unwrap()).collect();
            assert_eq!(hosts, ["a.test", "b.test", "c.test"], "step {step}");
            assert_eq!(out, stream.as_bytes(), "step {step}");
        }
        // A head is not passed on before it is whole.
        let mut r = Requests::default();
        let (mut out, mut heads) = (Vec::new(), Vec::new());
        r.feed(b"GET / HTTP/1.1\r\nHost: a", &mut out, &mut heads)
            .unwrap();
        assert!(out.is_empty() && heads.is_empty());
        for bad in [
            "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\n\r\n",
            "PUT / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\nabcde\r\n",
            "PUT / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            "PUT / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: b.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n",
        ] {
            let mut r = Requests::default();
            let (mut out, mut heads) = (Vec::new(), Vec::new());
            assert!(
                r.feed(bad.as_bytes(), &mut out, &mut heads).is_err(),
                "{bad:?}"
            );
        }
    }
}
