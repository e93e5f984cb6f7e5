//! Following the answers on a connection whose requests the proxy judges,
//! so that a refusal's 403 goes after the answers to the requests sent
//! before it (HTTP/1.1 answers come in request order: a 403 written
//! earlier would read as the answer to an allowed request).

use std::collections::VecDeque;

use super::http::MAX_HEAD;
use super::requests::{chunk_size, take_until};

/// Counts the answers a server has finished on one connection. What it
/// cannot follow (a protocol switch, a head it cannot read, a body that
/// ends with the connection) makes the count unknown: the caller then
/// waits for the server to close, or for the idle limit.
#[derive(Debug, Default)]
pub struct Answers {
    st: St,
    line: Vec<u8>,
    /// For each request sent and not answered yet: whether it was a HEAD
    /// (whose answer has no body, whatever its headers say).
    asked: VecDeque<bool>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum St {
    #[default]
    Head,
    Body(u64),
    ChunkLine,
    ChunkData(u64),
    ChunkEnd,
    Trailer,
    /// Unknown from here on: only the end of the connection tells.
    Lost,
}

impl Answers {
    /// A request went to the server.
    pub fn asked(&mut self, method: &str) {
        self.asked.push_back(method == "HEAD");
    }

    /// Answers still owed: None when that cannot be told.
    pub fn owed(&self) -> Option<usize> {
        (self.st != St::Lost).then_some(self.asked.len())
    }

    /// The server's next bytes, as they came.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.st != St::Lost {
            match self.st {
                St::Body(n) | St::ChunkData(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
                    data = &data[k..];
                    let left = n - k as u64;
                    self.st = match self.st {
                        St::Body(_) if left == 0 => self.answered(),
                        St::Body(_) => St::Body(left),
                        _ if left == 0 => St::ChunkEnd,
                        _ => St::ChunkData(left),
                    };
                }
                St::Head | St::ChunkLine | St::ChunkEnd | St::Trailer => {
                    let end: &[u8] = if self.st == St::Head {
                        b"\r\n\r\n"
                    } else {
                        b"\r\n"
                    };
                    let Some(line) = self.take(&mut data, end) else {
                        continue;
                    };
                    self.st = match self.st {
                        St::Head => self.head(&line),
                        St::ChunkLine => match chunk_size(&line) {
                            Ok(0) => St::Trailer,
                            Ok(n) => St::ChunkData(n),
                            Err(_) => St::Lost,
                        },
                        St::ChunkEnd if line == b"\r\n" => St::ChunkLine,
                        St::Trailer if line == b"\r\n" => self.answered(),
                        St::Trailer => St::Trailer,
                        _ => St::Lost,
                    };
                }
                St::Lost => {}
            }
        }
    }

    /// Bytes up to and including `end`, once whole.
    fn take(&mut self, data: &mut &[u8], end: &[u8]) -> Option<Vec<u8>> {
        match take_until(&mut self.line, data, end, MAX_HEAD) {
            Ok(true) => Some(std::mem::take(&mut self.line)),
            Ok(false) => None,
            Err(_) => {
                self.st = St::Lost;
                None
            }
        }
    }

    fn answered(&mut self) -> St {
        self.asked.pop_front();
        St::Head
    }

    /// The state a whole answer head puts us in.
    fn head(&mut self, head: &[u8]) -> St {
        let Ok(text) = std::str::from_utf8(head) else {
            return St::Lost;
        };
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.strip_prefix("HTTP/1."))
            .and_then(|l| l.get(2..5))
            .and_then(|c| c.parse::<u16>().ok());
        let Some(status) = status else {
            return St::Lost;
        };
        // An interim answer; the final one follows. 101 switches protocol.
        if status == 101 {
            return St::Lost;
        }
        if (100..200).contains(&status) {
            return St::Head;
        }
        let Some(&head_req) = self.asked.front() else {
            return St::Lost;
        };
        if head_req || status == 204 || status == 304 {
            return self.answered();
        }
        let (mut length, mut chunked, mut coded) = (None, false, false);
        for l in lines {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let v = v.trim_matches([' ', '\t']);
            if k.eq_ignore_ascii_case("content-length") {
                match v.parse::<u64>() {
                    Ok(n) if length.is_none_or(|m| m == n) => length = Some(n),
                    _ => return St::Lost,
                }
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                let last = v.rsplit(',').next().unwrap_or_default().trim();
                chunked = last.eq_ignore_ascii_case("chunked");
                coded = !chunked;
            }
        }
        match (chunked, coded, length) {
            (true, _, _) => St::ChunkLine,
            // Framed by the connection's end.
            (_, true, _) | (_, _, None) => St::Lost,
            (_, _, Some(0)) => self.answered(),
            (_, _, Some(n)) => St::Body(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers of every framing, however the reads cut them, are counted
    /// once whole; what only the connection's end frames is unknown.
    #[test]
    fn answers_are_counted_once_whole() {
        let stream = "HTTP/1.1 100 Continue\r\n\r\n\
                      HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
                      HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n\
                      HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                      3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n\
                      HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n";
        let methods = ["POST", "HEAD", "GET", "GET"];
        for step in [1, 2, 5, 64, stream.len()] {
            let mut a = Answers::default();
            methods.iter().for_each(|m| a.asked(m));
            a.asked("GET");
            let mut owed = Vec::new();
            for piece in stream.as_bytes().chunks(step) {
                a.feed(piece);
                owed.push(a.owed().unwrap());
            }
            assert_eq!(a.owed(), Some(1), "step {step}");
            assert!(owed.windows(2).all(|w| w[0] >= w[1]), "step {step}");
        }
        // Half a body is not an answer.
        let mut a = Answers::default();
        a.asked("GET");
        a.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab");
        assert_eq!(a.owed(), Some(1));
        a.feed(b"cd");
        assert_eq!(a.owed(), Some(0));
        for lost in [
            "HTTP/1.1 200 OK\r\n\r\nuntil the end",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "SSH-2.0-x\r\n\r\n",
        ] {
            let mut a = Answers::default();
            a.asked("GET");
            a.feed(lost.as_bytes());
            assert_eq!(a.owed(), None, "{lost:?}");
        }
    }
}
