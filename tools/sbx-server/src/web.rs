//! The web page (`GET /`): log in, projects, a project's terminal with
//! xterm.js. Everything is embedded in the binary, xterm.js included (from
//! `web/vendor/`, fetched at a pinned version by `scripts/web-assets`), so
//! nothing is loaded from elsewhere at run time.

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

/// path, content type, bytes.
const ASSETS: [(&str, &str, &[u8]); 7] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_bytes!("../web/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../web/app.js"),
    ),
    (
        "/app.css",
        "text/css; charset=utf-8",
        include_bytes!("../web/app.css"),
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

/// The page's routes, outside the API's audit layer (static files).
pub fn routes<S: Clone + Send + Sync + 'static>(mut r: axum::Router<S>) -> axum::Router<S> {
    for (path, mime, body) in ASSETS {
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
