//! The page's embedded files: xterm.js (from `web/vendor/`, fetched at a
//! pinned version by `scripts/web-assets`) for both binaries, and the
//! one-terminal page `sbx-run terminal` serves. Nothing is loaded from
//! elsewhere at run time.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// No inline script and nothing from another origin: a value that slipped
/// into the DOM as markup could not run. Styles allow inline because
/// xterm.js's DOM renderer sizes its rows with `<style>` elements it makes.
/// `connect-src 'self'` covers the terminal's ws: of the same origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
    font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: path, content type, bytes.
pub type Asset = (&'static str, &'static str, &'static [u8]);

/// xterm.js, its fit addon and its licence, and the ttyd glue both pages use.
pub const COMMON: [Asset; 5] = [
    (
        "/ttyd.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../web/ttyd.js"),
    ),
    (
        "/vendor/xterm.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../web/vendor/xterm.js"),
    ),
    (
        "/vendor/xterm.css",
        "text/css; charset=utf-8",
        include_bytes!("../web/vendor/xterm.css"),
    ),
    (
        "/vendor/addon-fit.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../web/vendor/addon-fit.js"),
    ),
    // MIT asks for the notice to travel with the code.
    (
        "/vendor/LICENSE-xterm.txt",
        "text/plain; charset=utf-8",
        include_bytes!("../web/vendor/LICENSE-xterm"),
    ),
];

/// `sbx-run terminal`'s page: one terminal, no login.
pub const LOCAL: [Asset; 2] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_bytes!("../web/terminal.html"),
    ),
    (
        "/terminal.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../web/terminal.js"),
    ),
];

/// Routes serving `assets` (static files).
pub fn routes<S: Clone + Send + Sync + 'static>(
    mut r: axum::Router<S>,
    assets: &[Asset],
) -> axum::Router<S> {
    for &(path, mime, body) in assets {
        r = r.route(path, get(move || async move { asset(mime, body) }));
    }
    r
}

fn asset(mime: &'static str, body: &'static [u8]) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Revalidated each load: a new server's page is never mixed with an old one's.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
