//! Passwords, tokens and login limits. Argon2id for passwords (the seed's
//! bcrypt is older: argon2id is memory-hard and is OWASP's first choice);
//! HS256 access tokens only, so a token naming `none` or any other
//! algorithm is refused; refresh tokens are random, stored as SHA-256
//! hashes, rotated at each use, and a reused one revokes its family.
//! An access token names its session (the refresh family, `sid`): a
//! logout or a reuse ends that session's access tokens too, at once.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ApiError;

pub const ACCESS_TTL: Duration = Duration::from_secs(15 * 60);
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Window of the login limits.
pub const LIMIT_WINDOW: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: Uuid,
    /// The session (refresh-token family) the token was issued to.
    pub sid: Uuid,
    pub iat: u64,
    pub exp: u64,
}

/// The signing key, the one algorithm accepted, and the sessions ended.
pub struct Keys {
    enc: EncodingKey,
    dec: DecodingKey,
    validation: Validation,
    ended: Ended,
}

/// Sessions ended (logout, a reused refresh token) within an access
/// token's life: in memory, so a request pays one hash-map lookup and no
/// query. The database keeps the revocations, and a start loads the last
/// [`ACCESS_TTL`] of them; one server process sees its own at once.
struct Ended {
    at: RwLock<HashMap<Uuid, Instant>>,
    /// Bumped at each revocation, for open terminals to check theirs.
    tick: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Keys {
    pub fn new(secret: &[u8]) -> Self {
        // Only HS256: the header's `alg` must be in this list, and `none`
        // is not an algorithm jsonwebtoken knows at all.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            enc: EncodingKey::from_secret(secret),
            dec: DecodingKey::from_secret(secret),
            validation,
            ended: Ended {
                at: RwLock::new(HashMap::new()),
                tick: tokio::sync::watch::Sender::new(0),
            },
        }
    }

    /// End sessions `sids`: their access tokens are refused from now on.
    pub fn end_sessions(&self, sids: impl IntoIterator<Item = Uuid>) {
        let mut at = self.ended.at.write().unwrap_or_else(|e| e.into_inner());
        // Bounded by the logouts of one token lifetime: older entries
        // name tokens that have expired anyway.
        if at.len() > 1024 {
            at.retain(|_, t| t.elapsed() < ACCESS_TTL);
        }
        let now = Instant::now();
        at.extend(sids.into_iter().map(|s| (s, now)));
        drop(at);
        self.ended.tick.send_modify(|n| *n += 1);
    }

    /// Whether session `sid` was ended.
    pub fn ended(&self, sid: Uuid) -> bool {
        self.ended
            .at
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&sid)
    }

    /// Changes at each [`Keys::end_sessions`].
    pub fn watch_ended(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ended.tick.subscribe()
    }

    pub fn issue(&self, user: Uuid, sid: Uuid) -> Result<String, ApiError> {
        let iat = now();
        let claims = Claims {
            sub: user,
            sid,
            iat,
            exp: iat + ACCESS_TTL.as_secs(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.enc)
            .map_err(|e| ApiError::internal(format!("signing a token: {e}")))
    }

    /// The user a valid, unexpired access token names.
    pub fn verify(&self, token: &str) -> Result<Uuid, ApiError> {
        self.claims(token).map(|c| c.sub)
    }

    /// The claims of a valid, unexpired access token of a live session.
    pub fn claims(&self, token: &str) -> Result<Claims, ApiError> {
        use jsonwebtoken::errors::ErrorKind;
        match jsonwebtoken::decode::<Claims>(token, &self.dec, &self.validation) {
            Ok(t) if self.ended(t.claims.sid) => Err(ApiError::unauthorized(
                "the access token's session has ended (logout): log in again",
            )),
            Ok(t) => Ok(t.claims),
            Err(e) => Err(ApiError::unauthorized(match e.kind() {
                ErrorKind::ExpiredSignature => "the access token has expired: refresh it",
                ErrorKind::InvalidAlgorithm => "the access token's algorithm is not HS256",
                ErrorKind::InvalidSignature => "the access token's signature is wrong",
                _ => "the access token is malformed",
            })),
        }
    }
}

/// The caller, from `Authorization: Bearer <access token>`.
#[derive(Debug, Clone, Copy)]
pub struct User(pub Uuid);

/// What extractors need from the application state.
pub trait HasKeys {
    fn keys(&self) -> &Keys;
}

impl<S: HasKeys + Send + Sync> FromRequestParts<S> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Session::from_request_parts(parts, state)
            .await
            .map(|s| User(s.user))
    }
}

/// The caller and the session its token was issued to.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    pub user: Uuid,
    pub sid: Uuid,
}

impl<S: HasKeys + Send + Sync> FromRequestParts<S> for Session {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let token = bearer(parts).ok_or_else(|| {
            ApiError::unauthorized("an `Authorization: Bearer` token is required")
        })?;
        let c = state.keys().claims(token)?;
        Ok(Self {
            user: c.sub,
            sid: c.sid,
        })
    }
}

/// The bearer token of a request, if it has one.
pub fn bearer(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// argon2id with the crate's defaults (19 MiB, 2 passes: OWASP's minimum).
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    let mut salt = [0u8; 16];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| ApiError::internal("no randomness"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| ApiError::internal(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| ApiError::internal(format!("hashing: {e}")))
}

pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// A new refresh token: 256 random bits, base64url.
pub fn new_refresh_token() -> Result<String, ApiError> {
    let mut b = [0u8; 32];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| ApiError::internal("no randomness"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// What the database keeps of a refresh token: its SHA-256, hex. A fast
/// hash is enough for 256 random bits; a leaked table gives no tokens.
pub fn token_hash(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Failures per key in a fixed window; over `max`, refused until the
/// window ends. In memory: one server process (what seed 001 runs).
#[derive(Debug)]
pub struct Limiter {
    max: u32,
    window: Duration,
    seen: Mutex<HashMap<String, (Instant, u32)>>,
}

impl Limiter {
    pub fn new(max: u32, window: Duration) -> Self {
        Self {
            max,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Refused (429 with Retry-After) while `key` is over its limit.
    pub fn check(&self, key: &str, what: &str) -> Result<(), ApiError> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(key) {
            Some((start, n)) if *n >= self.max && start.elapsed() < self.window => {
                let left = self.window.saturating_sub(start.elapsed()).as_secs().max(1);
                let mut e = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("too many attempts from this {what}: try again in {left} s"),
                );
                e.retry_after = Some(left);
                Err(e)
            }
            _ => Ok(()),
        }
    }

    pub fn fail(&self, key: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded: expired windows go before the map grows large.
        if seen.len() > 100_000 {
            let w = self.window;
            seen.retain(|_, (s, _)| s.elapsed() < w);
        }
        let e = seen.entry(key.to_owned()).or_insert((Instant::now(), 0));
        if e.0.elapsed() >= self.window {
            *e = (Instant::now(), 0);
        }
        e.1 += 1;
    }

    pub fn clear(&self, key: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// A character that changes how text around it shows without showing
/// itself: bidi overrides and isolates (which reorder a terminal's line),
/// zero-width ones and line or paragraph separators. `char::is_control`
/// knows only C0 and C1.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// An email as stored: trimmed, lower case; refused when it cannot be one.
pub fn normalise_email(email: &str) -> Result<String, ApiError> {
    let e = email.trim().to_lowercase();
    let ok = e.len() <= 254
        && !e
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || is_invisible(c))
        && e.split_once('@')
            .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty());
    if ok {
        Ok(e)
    } else {
        Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_email",
            "email: not an address (user@host, at most 254 bytes)",
        ))
    }
}

pub const MIN_PASSWORD: usize = 8;
/// Bounded so a 1 MB password cannot cost more than a short one.
pub const MAX_PASSWORD: usize = 1024;

pub fn check_password(p: &str) -> Result<(), ApiError> {
    if (MIN_PASSWORD..=MAX_PASSWORD).contains(&p.len()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_password",
        format!("password: {MIN_PASSWORD} to {MAX_PASSWORD} bytes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_other_algorithms_are_refused() {
        let k = Keys::new(&[7; 32]);
        let u = Uuid::new_v4();
        assert_eq!(k.verify(&k.issue(u, u).unwrap()).unwrap(), u);
        let claims = Claims {
            sub: u,
            sid: u,
            iat: now(),
            exp: now() + 60,
        };
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims,
            &EncodingKey::from_secret(&[7; 32]),
        )
        .unwrap();
        assert!(k.verify(&hs512).is_err());
        let other = Keys::new(&[8; 32]);
        assert!(k.verify(&other.issue(u, u).unwrap()).is_err());
    }

    /// bench/server-auth.sh: what a request's token check costs, the
    /// decode alone (the check before sessions could end) against
    /// [`Keys::claims`] with none and with 10,000 sessions ended.
    #[test]
    #[ignore = "a measurement: bench/server-auth.sh"]
    fn token_check_cost() {
        let k = Keys::new(&[7; 32]);
        let t = k.issue(Uuid::new_v4(), Uuid::new_v4()).unwrap();
        let n = 50_000u32;
        let per = |f: &dyn Fn()| {
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            t0.elapsed().as_nanos() / u128::from(n)
        };
        let rounds = |what: &str, f: &dyn Fn()| {
            let mut v: Vec<u128> = (0..5).map(|_| per(f)).collect();
            v.sort_unstable();
            println!("{what}: median {} ns a check (of 5 rounds of {n})", v[2]);
        };
        let decode = || {
            jsonwebtoken::decode::<Claims>(&t, &k.dec, &k.validation).unwrap();
        };
        rounds("decode only (before)", &decode);
        rounds("claims, no session ended", &|| {
            k.claims(&t).unwrap();
        });
        k.end_sessions((0..10_000).map(|_| Uuid::new_v4()));
        rounds("claims, 10000 sessions ended", &|| {
            k.claims(&t).unwrap();
        });
        rounds("decode only (again)", &decode);
    }

    #[test]
    fn an_ended_sessions_tokens_are_refused() {
        let k = Keys::new(&[7; 32]);
        let (u, a, b) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let (ta, tb) = (k.issue(u, a).unwrap(), k.issue(u, b).unwrap());
        let mut w = k.watch_ended();
        k.end_sessions([a]);
        assert!(w.has_changed().unwrap());
        w.mark_unchanged();
        assert!(k.verify(&ta).is_err());
        assert_eq!(k.verify(&tb).unwrap(), u, "another session goes on");
    }

    #[test]
    fn emails_are_normalised_or_refused() {
        assert_eq!(normalise_email(" A@B.c ").unwrap(), "a@b.c");
        for bad in ["", "a", "@b", "a@", "a b@c", "a\u{7}@b"] {
            assert!(normalise_email(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn limiter_refuses_over_max() {
        let l = Limiter::new(2, Duration::from_secs(60));
        l.fail("k");
        assert!(l.check("k", "account").is_ok());
        l.fail("k");
        assert!(l.check("k", "account").is_err());
        assert!(l.check("other", "account").is_ok());
        l.clear("k");
        assert!(l.check("k", "account").is_ok());
    }
}
