//! Credential detectors over variable *values*: a token under an innocent
//! name (`FOO=ghp_…`) must not slip through a name-only filter. Each
//! detector is a known, documented key format; none is a guess at entropy,
//! so false positives stay rare.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
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

/// `prefix` ends at `end`: a word boundary before `start` and at least
/// `min` bytes of `tail` after it.
fn token_at(v: &[u8], start: usize, end: usize, min: usize, tail: fn(u8) -> bool) -> bool {
    (start == 0 || !is_word(v[start - 1]))
        && v[end..].iter().take_while(|&&b| tail(b)).count() >= min
}

fn private_key(v: &[u8], _: usize, end: usize) -> bool {
    memmem::find(&v[end..], b"PRIVATE KEY-----").is_some()
}

/// AKIA… key ids are exactly 20 upper-case letters and digits.
fn aws_key_id(v: &[u8], start: usize, _: usize) -> bool {
    let stop = start + 20;
    (start == 0 || !is_word(v[start - 1]))
        && stop <= v.len()
        && v[start + 4..stop].iter().all(|&b| upper_digit(b))
        && (stop == v.len() || !is_word(v[stop]))
}

fn jwt(v: &[u8], start: usize, _: usize) -> bool {
    if start > 0 && b64url(v[start - 1]) {
        return false;
    }
    let mut parts = v[start..].split(|&b| b == b'.');
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
}

/// `scheme://user:password@host`: a non-empty password in the authority.
fn url_credentials(v: &[u8], start: usize, end: usize) -> bool {
    if start == 0 || !v[start - 1].is_ascii_alphanumeric() {
        return false;
    }
    let authority_len = v[end..]
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#' | b' ' | b'\n'))
        .unwrap_or(v.len() - end);
    let authority = &v[end..end + authority_len];
    match memchr::memrchr(b'@', authority) {
        Some(at) => {
            let userinfo = &authority[..at];
            matches!(memchr::memchr(b':', userinfo), Some(c) if c + 1 < userinfo.len())
        }
        None => false,
    }
}

/// A literal that anchors a detector, and the check run where it is found.
type Check = fn(&[u8], usize, usize) -> bool;

macro_rules! tok {
    ($min:expr, $tail:expr) => {{
        fn f(v: &[u8], s: usize, e: usize) -> bool {
            token_at(v, s, e, $min, $tail)
        }
        f as Check
    }};
}

/// (anchor literal, index into DETECTORS, check).
fn anchors() -> Vec<(&'static [u8], usize, Check)> {
    let mut a: Vec<(&'static [u8], usize, Check)> = vec![(b"-----BEGIN", 0, private_key)];
    for p in [&b"ghp_"[..], b"gho_", b"ghu_", b"ghs_", b"ghr_"] {
        a.push((p, 1, tok!(20, alnum)));
    }
    a.push((b"github_pat_", 1, tok!(20, alnum_)));
    a.push((b"glpat-", 2, tok!(20, alnum_dash)));
    a.push((b"sk-ant-", 3, tok!(20, alnum_dash)));
    a.push((b"sk-", 4, tok!(20, alnum_dash)));
    for p in [
        &b"AKIA"[..],
        b"ASIA",
        b"AGPA",
        b"AIDA",
        b"AROA",
        b"ANPA",
        b"ANVA",
        b"AIPA",
    ] {
        a.push((p, 5, aws_key_id));
    }
    for p in [
        &b"xoxa-"[..],
        b"xoxb-",
        b"xoxp-",
        b"xoxo-",
        b"xoxs-",
        b"xoxr-",
        b"xapp-",
    ] {
        a.push((p, 6, tok!(10, alnum_dash)));
    }
    for p in [
        &b"sk_live_"[..],
        b"sk_test_",
        b"rk_live_",
        b"rk_test_",
        b"whsec_",
    ] {
        a.push((p, 7, tok!(16, alnum)));
    }
    a.push((b"AIza", 8, tok!(35, alnum_dash)));
    a.push((b"npm_", 9, tok!(36, alnum)));
    a.push((b"hf_", 10, tok!(30, alnum)));
    a.push((b"eyJ", 11, jwt));
    a.push((b"://", 12, url_credentials));
    a
}

struct Matcher {
    ac: AhoCorasick,
    anchors: Vec<(&'static [u8], usize, Check)>,
}

/// Built once: one automaton finds every anchor in a single pass per value.
static MATCHER: LazyLock<Matcher> = LazyLock::new(|| {
    let anchors = anchors();
    let ac = AhoCorasick::new(anchors.iter().map(|a| a.0)).expect("static patterns");
    Matcher { ac, anchors }
});

/// The first detector (in [`DETECTORS`] order) that recognises a
/// credential in `value`.
pub fn detect(value: &[u8]) -> Option<&'static str> {
    // Every format here is at least 16 bytes long.
    if value.len() < 16 {
        return None;
    }
    let m = &*MATCHER;
    let mut best: Option<usize> = None;
    for hit in m.ac.find_overlapping_iter(value) {
        let (_, det, check) = m.anchors[hit.pattern().as_usize()];
        if best.is_some_and(|b| b <= det) {
            continue;
        }
        if check(value, hit.start(), hit.end()) {
            best = Some(det);
        }
    }
    best.map(|i| DETECTORS[i].0)
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
