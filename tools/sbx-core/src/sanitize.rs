//! The one sanitiser for text sbx prints to a terminal. Agent-written strings
//! (commit subjects, file names, chat text, audit fields) must never reach the
//! user's terminal as control sequences: an ESC or a C1 CSI (0x9b) can erase
//! lines, draw fake ones or set the window title. JSON output keeps the raw
//! string (serde escapes controls); text output goes through here. Unicode
//! bidi controls and line separators are escaped the same way.

use std::borrow::Cow;

/// A field for a one-line display: every C0 control (newline and tab
/// included), DEL and every C1 control (U+0080–U+009F, 0x9b among them)
/// written as a visible escape (`\n`, `\t`, `\r`, `\e`, `\x7f`, `\u{9b}`).
/// A backslash is doubled only when the field needs escaping, so ordinary
/// paths and subjects print unchanged.
pub fn field(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Like [`field`], but newlines and tabs pass through: for multi-line text
/// (an agent's answer, a hook's output) that is meant to span lines.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// Bytes that may not be UTF-8: invalid sequences become U+FFFD, then
/// [`text`] applies.
pub fn bytes(b: &[u8]) -> String {
    text(&String::from_utf8_lossy(b)).into_owned()
}

fn is_control(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        // Bidi embeddings, overrides and isolates reorder what follows
        // on the line ("Trojan Source"): an agent's field could make a
        // record read as another's (the marks, which right-to-left text
        // uses, cannot). Line and paragraph separators break a line
        // where the reader expects none.
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' => true,
        c => c.is_control(), // C0, DEL and C1 (Unicode category Cc)
    }
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c, keep_lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_control(c, keep_lines) {
            if c == '\\' && !keep_lines {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(field("fix: a\\b c.rs"), Cow::Borrowed(_)));
        assert!(matches!(text("line 1\n\tline 2"), Cow::Borrowed(_)));
    }

    #[test]
    fn every_control_is_visible() {
        let cases = [
            ("\x1b[2Kok", "\\e[2Kok"),
            ("a\nb", "a\\nb"),
            ("a\rb", "a\\rb"),
            ("\x07\x00\x7f", "\\x07\\x00\\x7f"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("\u{85}", "\\u{85}"),
            ("x\\y\x1b", "x\\\\y\\e"),
            ("ok\u{202e}gnp.exe", "ok\\u{202e}gnp.exe"),
            ("\u{2066}a\u{2069}", "\\u{2066}a\\u{2069}"),
            ("a\u{2028}b", "a\\u{2028}b"),
        ];
        for (raw, shown) in cases {
            assert_eq!(field(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn text_keeps_lines_but_not_sequences() {
        assert_eq!(text("a\n\x1b]0;title\x07b\tc"), "a\n\\e]0;title\\x07b\tc");
        assert_eq!(bytes(b"ok\xff\x1b"), "ok\u{fffd}\\e");
    }
}
