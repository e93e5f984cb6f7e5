//! Diagnostics on stderr and JSON Lines on stdout. Diagnostics settings are
//! process-wide (set once from CommonArgs) so library code can warn without
//! threading a handle through every call.

use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;

use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use crate::cli::{ColorWhen, CommonArgs};

#[derive(Debug, Clone, Copy)]
struct Settings {
    tool: &'static str,
    quiet: bool,
    verbosity: u8,
    color: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

impl Settings {
    /// Before `init`: plain, not quiet, named by the tool.
    const fn plain(tool: &'static str) -> Self {
        Self {
            tool,
            quiet: false,
            verbosity: 0,
            color: false,
        }
    }
}

fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or(Settings::plain("sbx"))
}

/// Whether to color a stream, by the flag, NO_COLOR and TERM=dumb.
pub fn use_color(when: ColorWhen, is_tty: bool) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            is_tty
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// Set diagnostics from the common flags. Call once, early in `run`.
pub fn init(tool: &'static str, common: &CommonArgs) {
    let env_debug = std::env::var("SBX_LOG").is_ok_and(|v| v.eq_ignore_ascii_case("debug"));
    let _ = SETTINGS.set(Settings {
        tool,
        quiet: common.quiet,
        verbosity: common.verbose.max(u8::from(env_debug)),
        color: use_color(common.color, io::stderr().is_terminal()),
    });
}

/// Name errors by the tool even when `init` never ran (e.g. a parse error).
pub fn set_tool_if_unset(tool: &'static str) {
    let _ = SETTINGS.set(Settings::plain(tool));
}

pub fn tool_name() -> &'static str {
    settings().tool
}

fn emit(level: &str, ansi: &str, msg: &str) {
    // Messages quote paths, names and output the agent chose: escaped
    // here once, so no caller can forget (sanitize.rs). A diagnostic is
    // one line: a newline in an agent's name must not start a second
    // `sbx-run: error:` line of the agent's making (issue 37).
    let msg = crate::sanitize::field(msg);
    let s = settings();
    let mut err = io::stderr().lock();
    let _ = if s.color {
        writeln!(err, "{}: \x1b[{ansi}m{level}\x1b[0m: {msg}", s.tool)
    } else {
        writeln!(err, "{}: {level}: {msg}", s.tool)
    };
}

/// Always printed, even with -q: the reason the tool failed.
pub fn error(msg: &str) {
    emit("error", "1;31", msg);
}

/// Printed unless -q.
pub fn warn(msg: &str) {
    if !settings().quiet {
        emit("warning", "1;33", msg);
    }
}

/// Progress on long work (image builds, backups): unless -q.
pub fn progress(msg: &str) {
    if !settings().quiet {
        emit("progress", "1;36", msg);
    }
}

pub fn is_verbose() -> bool {
    settings().verbosity >= 1
}

/// Printed with -v.
pub fn info(msg: &str) {
    if settings().verbosity >= 1 {
        emit("info", "1;34", msg);
    }
}

/// Printed with -vv or SBX_LOG=debug.
pub fn debug(msg: &str) {
    if settings().verbosity >= 2 {
        emit("debug", "2", msg);
    }
}

pub fn is_quiet() -> bool {
    settings().quiet
}

/// Bytes as JSON: a string when UTF-8, else `{"bytes": base64}`.
pub fn bytes_value(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => {
            serde_json::json!({ "bytes": base64::engine::general_purpose::STANDARD.encode(b) })
        }
    }
}

/// Write one `{"type":…,"data":…}` line (ripgrep's envelope).
pub fn json_line<W: Write, T: Serialize>(out: &mut W, kind: &str, data: &T) -> io::Result<()> {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        #[serde(rename = "type")]
        kind: &'a str,
        data: &'a T,
    }
    serde_json::to_writer(&mut *out, &Envelope { kind, data })?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_as_text_or_base64() {
        assert_eq!(bytes_value(b"abc"), Value::String("abc".into()));
        assert_eq!(bytes_value(b"\xff"), serde_json::json!({"bytes": "/w=="}));
    }

    #[test]
    fn color_follows_flag_and_tty() {
        assert!(use_color(ColorWhen::Always, false));
        assert!(!use_color(ColorWhen::Never, true));
        assert!(!use_color(ColorWhen::Auto, false));
    }

    #[test]
    fn envelope_shape() {
        let mut v = Vec::new();
        json_line(&mut v, "env", &serde_json::json!({"name": "A"})).unwrap();
        assert_eq!(v, b"{\"type\":\"env\",\"data\":{\"name\":\"A\"}}\n");
    }
}
