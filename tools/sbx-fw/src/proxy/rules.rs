//! `[network.rules]` at the proxy: every request head to a host with
//! rules (on a TLS connection the proxy ends for it, or on port 80) is
//! judged by method and path; a refusal answers 403 with a one-line
//! reason and is audited naming the host's rules.

use sbx_core::config::Domain;
use sbx_core::netrules::{Rule, query_overrides_method, request_path};

use super::http::{Framing, Request};

/// One host's rules, as the state records them.
#[derive(Debug, Clone, Copy)]
pub struct Ruled<'a> {
    /// The key they stand under (`github.com`, `*.sentry.io`).
    pub key: &'a Domain,
    pub rules: &'a [Rule],
}

impl Ruled<'_> {
    /// What an audit record and a 403 name: `[network.rules] "github.com"`.
    pub fn label(&self) -> String {
        format!("[network.rules] \"{}\"", self.key)
    }

    /// Whether the request may go on; Err: why not, in one line.
    pub fn check(&self, r: &Request) -> Result<(), String> {
        let line = || format!("{} {}", r.method, r.target);
        // Rules judge the method the server acts on: a GET that Express,
        // Rails or a Google API reads as DELETE is not a GET.
        if let Some(h) = &r.method_override {
            return Err(format!("{}: a {h} header (it changes the method)", line()));
        }
        // A server that ignores the body of a GET (a static file's
        // handler) reads it as the next request, which was never judged.
        let bodiless = ["GET", "HEAD", "OPTIONS"]
            .iter()
            .any(|m| r.method.eq_ignore_ascii_case(m));
        if bodiless && !matches!(r.framing, Framing::None | Framing::Length(0)) {
            return Err(format!(
                "{}: a body on a {} (a server may read it as the next request)",
                line(),
                r.method
            ));
        }
        if query_overrides_method(&r.target) {
            return Err(format!(
                "{}: a _method parameter (it changes the method)",
                line()
            ));
        }
        let t = request_path(&r.target).map_err(|why| format!("{}: {why}", line()))?;
        if self.rules.iter().any(|rule| rule.allows(&r.method, &t)) {
            Ok(())
        } else if self.rules.is_empty() {
            Err(format!("{}: no request is allowed (off)", line()))
        } else {
            Err(format!("{}: no rule allows it", line()))
        }
    }

    /// The whole answer to a refused request: a 403 whose body is the
    /// reason, then the connection ends.
    pub fn forbidden(&self, why: &str) -> Vec<u8> {
        // The reason quotes the request line: nothing in it may end ours.
        let why: String = why
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let body = format!("sbx-fw: {} refuses {why}\n", self.label());
        format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{Head, parse};

    fn req(s: &str) -> Request {
        match parse(s.as_bytes()) {
            Head::Done(r) => r,
            other => panic!("{s:?}: {other:?}"),
        }
    }

    #[test]
    fn requests_are_judged_and_refusals_say_why() {
        let key: Domain = "git.test".parse().unwrap();
        let rules: Vec<Rule> = ["GET *", "POST /me/app.git/git-receive-pack"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let r = Ruled {
            key: &key,
            rules: &rules,
        };
        let ok = req("POST /me/app.git/git-receive-pack HTTP/1.1\r\nHost: git.test\r\n\r\n");
        assert_eq!(r.check(&ok), Ok(()));
        let no = req("POST /me/other.git/git-receive-pack HTTP/1.1\r\nHost: git.test\r\n\r\n");
        let why = r.check(&no).unwrap_err();
        assert_eq!(
            why,
            "POST /me/other.git/git-receive-pack: no rule allows it"
        );
        let ans = String::from_utf8(r.forbidden(&why)).unwrap();
        assert!(ans.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{ans}");
        assert!(ans.ends_with(
            "\r\n\r\nsbx-fw: [network.rules] \"git.test\" refuses POST /me/other.git/git-receive-pack: no rule allows it\n"
        ));
        let dots = req("GET /me/app.git/../x HTTP/1.1\r\nHost: git.test\r\n\r\n");
        assert!(r.check(&dots).unwrap_err().contains("'..'"));
        for h in [
            "X-HTTP-Method-Override",
            "x-http-method",
            "X-Method-Override",
        ] {
            let over = req(&format!(
                "POST /me/app.git/git-receive-pack HTTP/1.1\r\nHost: git.test\r\n{h}: DELETE\r\n\r\n"
            ));
            assert!(r.check(&over).unwrap_err().contains(h), "{h}");
        }
        let ok_get = req("GET /x HTTP/1.1\r\nHost: git.test\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(r.check(&ok_get), Ok(()));
        for body in ["Content-Length: 40", "Transfer-Encoding: chunked"] {
            let get = req(&format!(
                "get /x HTTP/1.1\r\nHost: git.test\r\n{body}\r\n\r\n"
            ));
            assert!(r.check(&get).unwrap_err().contains("a body"), "{body}");
        }
        let q = req(
            "POST /me/app.git/git-receive-pack?_method=DELETE HTTP/1.1\r\nHost: git.test\r\n\r\n",
        );
        assert!(r.check(&q).unwrap_err().contains("_method"));
        let off = Ruled {
            key: &key,
            rules: &[],
        };
        assert!(off.check(&ok).unwrap_err().contains("off"));
    }
}
