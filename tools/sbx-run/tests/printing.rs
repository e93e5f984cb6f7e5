//! Route 6 of issue 37: agent-controlled strings reach the terminal
//! escaped. A sandbox's audit record, a saved chat and a masked file name
//! carry an erase-line (`\e[2K`), a title change (`\e]0;title\a`) and a
//! C1 CSI (U+009B); text output shows them as escapes, `--json` keeps them.

use std::process::Output;

mod common;
use common::{run_flag_values, sbx_run};

const EVIL: &str = "\x1b[2K\x1b]0;title\x07\u{9b}31m";

fn raw_controls(o: &Output) -> Vec<char> {
    String::from_utf8_lossy(&o.stdout)
        .chars()
        .chain(String::from_utf8_lossy(&o.stderr).chars())
        .filter(|c| *c != '\n' && *c != '\t' && c.is_control())
        .collect()
}

#[test]
fn a_sandbox_audit_record_is_shown_escaped() {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("a.jsonl");
    let rec = serde_json::json!({
        "timestamp": "2026-01-28T10:30:05Z", "tool": format!("git{EVIL}"),
        "operation": "commit", "target": format!("git commit -m {EVIL}\nfake line"),
        "result": "blocked", "policy": "p", "reason": EVIL,
    });
    std::fs::write(&log, format!("{rec}\n")).unwrap();
    let o = sbx_run(t.path())
        .arg("log")
        .arg("--file")
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(raw_controls(&o), Vec::<char>::new(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\\e[2K\\e]0;title\\x07\\u{9b}31m"), "{out}");
    assert_eq!(
        out.lines().count(),
        1,
        "a newline in a field made a fake line: {out}"
    );
    // JSON keeps the string (escaped by JSON itself).
    let o = sbx_run(t.path())
        .args(["log", "--json", "--file"])
        .arg(&log)
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(o.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(v["data"]["reason"], EVIL, "{v}");
}

#[test]
fn a_saved_chat_and_a_masked_name_are_shown_escaped() {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    // A file the agent named, masked by the default [filesystem] rules.
    std::fs::write(ws.join(format!(".env{EVIL}\nrm -rf ~")), "s").unwrap();
    let o = sbx_run(t.path())
        .arg("show-run")
        .arg(&ws)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(raw_controls(&o), Vec::<char>::new());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.lines().any(|l| l.starts_with("rm -rf")),
        "a masked name broke out of its comment: {out}"
    );
    assert!(!run_flag_values(&out, "--mount").is_empty(), "{out}");
    // A chat the model answered with sequences.
    let hash = sbx_run::names::Names::new(&ws.canonicalize().unwrap(), None).hash;
    let dir = t.path().join("state/sbx/chats").join(hash).join("c1");
    std::fs::create_dir_all(&dir).unwrap();
    let turn =
        serde_json::json!({"role": "assistant", "content": format!("done{EVIL}\nsecond line")});
    std::fs::write(dir.join("turns.jsonl"), format!("{turn}\n")).unwrap();
    let o = sbx_run(t.path())
        .args(["agent", "--show-chat", "c1", "-C"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(raw_controls(&o), Vec::<char>::new(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("done\\e[2K") && out.contains("\nsecond line"),
        "{out}"
    );
}
