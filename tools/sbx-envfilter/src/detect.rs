//! Credential detectors over variable *values*: a token under an innocent
//! name (`FOO=ghp_…`) must not slip through a name-only filter. Each
//! detector is a known, documented key format; none is a guess at entropy,
//! so false positives stay rare.

use memchr::memmem;

/// A detector's name (as shown by `--explain` and in the audit log) and a
/// one-line description for the man page.
pub const DETECTORS: &[(&str, &str)] = &[
    (
        "private-key",
        "a PEM block \"-----BEGIN … PRIVATE KEY-----\"",
    ),
    (
        "github-token",
        "GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ (20+ chars), github_pat_",
    ),
    ("gitlab-token", "GitLab personal access tokens: glpat-"),
    ("anthropic-key", "Anthropic API keys: sk-ant-"),
    (
        "openai-key",
        "OpenAI-style secret keys: sk-, sk-proj-, sk-or- (OpenRouter), 20+ chars",
    ),
    (
        "aws-access-key-id",
        "AWS key ids: AKIA, ASIA, AGPA, AIDA, AROA, ANPA, ANVA, AIPA + 16 chars",
    ),
    (
        "slack-token",
        "Slack tokens: xoxa-, xoxb-, xoxp-, xoxo-, xoxs-, xoxr-, xapp-",
    ),
    (
        "stripe-key",
        "Stripe keys: sk_live_, sk_test_, rk_live_, rk_test_, whsec_",
    ),
    ("google-api-key", "Google API keys: AIza + 35 chars"),
    ("npm-token", "npm tokens: npm_ + 36 chars"),
    ("huggingface-token", "Hugging Face tokens: hf_ + 30+ chars"),
    ("jwt", "JSON Web Tokens: eyJ….eyJ….signature"),
    (
        "url-credentials",
        "a URL with a password in it: scheme://user:password@host",
    ),
];

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `prefix` at a word boundary followed by at least `min` bytes of `tail`.
fn token(v: &[u8], prefix: &[u8], min: usize, tail: fn(u8) -> bool) -> bool {
    memmem::find_iter(v, prefix).any(|i| {
        let boundary = i == 0 || !is_word(v[i - 1]);
        boundary
            && v[i + prefix.len()..]
                .iter()
                .take_while(|&&b| tail(b))
                .count()
                >= min
    })
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}
fn alnum_(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn alnum_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}
fn upper_digit(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}
fn b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn private_key(v: &[u8]) -> bool {
    memmem::find(v, b"-----BEGIN").is_some() && memmem::find(v, b"PRIVATE KEY-----").is_some()
}

fn aws_key_id(v: &[u8]) -> bool {
    const PREFIXES: [&[u8]; 8] = [
        b"AKIA", b"ASIA", b"AGPA", b"AIDA", b"AROA", b"ANPA", b"ANVA", b"AIPA",
    ];
    PREFIXES.iter().any(|p| {
        memmem::find_iter(v, p).any(|i| {
            let end = i + 20;
            (i == 0 || !is_word(v[i - 1]))
                && end <= v.len()
                && v[i + 4..end].iter().all(|&b| upper_digit(b))
                && (end == v.len() || !is_word(v[end]))
        })
    })
}

fn jwt(v: &[u8]) -> bool {
    memmem::find_iter(v, b"eyJ").any(|i| {
        if i > 0 && b64url(v[i - 1]) {
            return false;
        }
        let rest = &v[i..];
        let mut parts = rest.split(|&b| b == b'.');
        let (Some(h), Some(p), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        let sig_len = s.iter().take_while(|&&b| b64url(b)).count();
        h.len() >= 10
            && h.iter().all(|&b| b64url(b))
            && p.starts_with(b"eyJ")
            && p.len() >= 10
            && p.iter().all(|&b| b64url(b))
            && sig_len >= 16
    })
}

fn url_credentials(v: &[u8]) -> bool {
    memmem::find_iter(v, b"://").any(|i| {
        let scheme_ok = i > 0 && v[..i].last().is_some_and(|b| b.is_ascii_alphanumeric());
        if !scheme_ok {
            return false;
        }
        let auth_end = v[i + 3..]
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#' | b' ' | b'\n'))
            .map_or(v.len(), |p| i + 3 + p);
        let authority = &v[i + 3..auth_end];
        match memchr::memrchr(b'@', authority) {
            Some(at) => {
                let userinfo = &authority[..at];
                matches!(memchr::memchr(b':', userinfo), Some(c) if c + 1 < userinfo.len())
            }
            None => false,
        }
    })
}

type Check<'a> = (&'static str, &'a dyn Fn(&[u8]) -> bool);

/// The first detector that recognises a credential in `value`.
pub fn detect(value: &[u8]) -> Option<&'static str> {
    // Cheap pre-check: every format here is at least 16 bytes long.
    if value.len() < 16 {
        return None;
    }
    let checks: [Check<'_>; 13] = [
        ("private-key", &private_key),
        ("github-token", &|v| {
            [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"]
                .iter()
                .any(|p| token(v, *p, 20, alnum))
                || token(v, b"github_pat_", 20, alnum_)
        }),
        ("gitlab-token", &|v| token(v, b"glpat-", 20, alnum_dash)),
        ("anthropic-key", &|v| token(v, b"sk-ant-", 20, alnum_dash)),
        ("openai-key", &|v| token(v, b"sk-", 20, alnum_dash)),
        ("aws-access-key-id", &aws_key_id),
        ("slack-token", &|v| {
            [
                b"xoxa-", b"xoxb-", b"xoxp-", b"xoxo-", b"xoxs-", b"xoxr-", b"xapp-",
            ]
            .iter()
            .any(|p| token(v, *p, 10, alnum_dash))
        }),
        ("stripe-key", &|v| {
            [
                &b"sk_live_"[..],
                b"sk_test_",
                b"rk_live_",
                b"rk_test_",
                b"whsec_",
            ]
            .iter()
            .any(|p| token(v, p, 16, alnum))
        }),
        ("google-api-key", &|v| token(v, b"AIza", 35, alnum_dash)),
        ("npm-token", &|v| token(v, b"npm_", 36, alnum)),
        ("huggingface-token", &|v| token(v, b"hf_", 30, alnum)),
        ("jwt", &jwt),
        ("url-credentials", &url_credentials),
    ];
    checks.iter().find(|(_, f)| f(value)).map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_known_formats() {
        let a = "A".repeat(36);
        let cases: Vec<(String, Option<&str>)> = vec![
            (format!("ghp_{}", "a1B2".repeat(9)), Some("github-token")),
            (format!("https://x-access-token:{}@github.com/o/r", "ghs_".to_owned() + &a), Some("github-token")),
            (format!("github_pat_{}", "a_1".repeat(20)), Some("github-token")),
            (format!("glpat-{}", "x".repeat(20)), Some("gitlab-token")),
            (format!("sk-ant-api03-{}", "x".repeat(40)), Some("anthropic-key")),
            (format!("sk-proj-{}", "x".repeat(40)), Some("openai-key")),
            (format!("sk-or-v1-{}", "a".repeat(40)), Some("openai-key")),
            ("AKIAIOSFODNN7EXAMPLE".into(), Some("aws-access-key-id")),
            ("id=ASIAIOSFODNN7EXAMPLE;".into(), Some("aws-access-key-id")),
            (format!("xoxb-{}", "1234-5678-abcd"), Some("slack-token")),
            (format!("sk_live_{}", "a".repeat(24)), Some("stripe-key")),
            (format!("AIza{}", "a".repeat(35)), Some("google-api-key")),
            (format!("npm_{}", "a".repeat(36)), Some("npm-token")),
            (format!("hf_{}", "a".repeat(34)), Some("huggingface-token")),
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----".into(),
                Some("private-key"),
            ),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U".into(),
                Some("jwt"),
            ),
            ("postgres://app:hunter2@db.internal:5432/app".into(), Some("url-credentials")),
            // Innocent values that look a bit like the above.
            ("/usr/local/bin:/usr/bin:/bin".into(), None),
            ("https://user@example.com/path/to/repo".into(), None),
            ("https://example.com/a:b@c".into(), None),
            ("task-ghp_short-and-more-words".into(), None),
            ("desk-ant-something-long-enough-here".into(), None),
            ("AKIAIOSFODNN7EXAMPLEX".into(), None),
            ("-----BEGIN CERTIFICATE-----MIIB".into(), None),
            ("xterm-256color with extra words".into(), None),
            ("eyJ.not.a.jwt.at.all.really".into(), None),
        ];
        for (v, want) in cases {
            assert_eq!(detect(v.as_bytes()), want, "{v}");
        }
    }

    #[test]
    fn every_detector_is_documented() {
        assert_eq!(DETECTORS.len(), 13);
    }

    #[test]
    fn non_utf8_values_do_not_panic() {
        assert_eq!(
            detect(b"\xff\xfe ghp_\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
            None
        );
        let mut v = b"\xffghp_".to_vec();
        v.extend(b"a".repeat(30));
        assert_eq!(detect(&v), Some("github-token"));
    }
}
