//! The web page (`GET /`): log in, projects, a project's terminal with
//! xterm.js. Everything is embedded in the binary, xterm.js included (from
//! sbx-terminal, shared with `sbx-run terminal`), so nothing is loaded
//! from elsewhere at run time.

use sbx_terminal::web::{Asset, COMMON};

/// The app's own files; xterm.js comes from [`COMMON`].
const APP: [Asset; 3] = [
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
];

/// The page's routes, outside the API's audit layer (static files).
pub fn routes<S: Clone + Send + Sync + 'static>(r: axum::Router<S>) -> axum::Router<S> {
    sbx_terminal::web::routes(sbx_terminal::web::routes(r, &APP), &COMMON)
}
