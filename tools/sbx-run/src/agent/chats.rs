//! Chats: `$XDG_STATE_HOME/sbx/chats/<workspace-hash>/<id>/turns.jsonl`,
//! one `{"ts", "role", "content"}` object a line, on the host only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};
use serde_json::{Value, json};

use crate::RunError;
use crate::workspace::Workspace;

pub fn root() -> PathBuf {
    crate::spec::state_dir().join("chats")
}

fn dir(ws: &Workspace, id: &str) -> PathBuf {
    root().join(&ws.names.hash).join(id)
}

/// Chat ID's scratch directory as the sandbox sees it.
pub fn scratch_in_sandbox(id: &str) -> String {
    format!("{}/{id}", crate::workspace::SCRATCH_TARGET)
}

/// Chat ID's scratch directory on the host.
fn scratch_on_host(hash: &str, id: &str) -> PathBuf {
    crate::workspace::scratch_root(hash).join(id)
}

/// What the model is told about its scratch directory.
pub fn scratch_prompt(dir: &str) -> String {
    format!(
        "## Scratch workspace\nThis conversation has its own scratch directory, {dir} ($SBX_SCRATCH). What you leave there is there again in this conversation's later runs, and no other conversation is given it. Keep notes, downloads and intermediate files there, not in the repository; the repository stays your working directory."
    )
}

/// A chat id names a directory: 1-64 of letters, digits, `_`, `-` and `.`, not starting with `.`.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid chat id \"{id}\": 1-64 letters, digits, _, - or . (not starting with .)"
        ))
    }
}

fn io(p: &Path, e: std::io::Error) -> BoxError {
    Box::new(RunError::Io(p.to_owned(), e))
}

pub fn load(ws: &Workspace, id: &str) -> Result<Vec<Value>, BoxError> {
    let f = dir(ws, id).join("turns.jsonl");
    let text = match std::fs::read_to_string(&f) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&f, e)),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                Box::new(RunError::Config(format!(
                    "{}:{}: not a chat turn ({e}); remove the chat with `sbx-run prune --chats`",
                    f.display(),
                    i + 1
                ))) as BoxError
            })
        })
        .collect()
}

/// Earlier turns as one system-prompt section.
pub fn history_prompt(turns: &[Value]) -> Option<String> {
    if turns.is_empty() {
        return None;
    }
    let lines: Vec<String> = turns
        .iter()
        .map(|t| {
            format!(
                "[{}]: {}",
                t["role"].as_str().unwrap_or("user"),
                t["content"].as_str().unwrap_or("")
            )
        })
        .collect();
    Some(format!("## Conversation History:\n{}", lines.join("\n\n")))
}

pub fn append(ws: &Workspace, id: &str, prompt: &str, answer: &str) -> Result<(), BoxError> {
    let d = dir(ws, id);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    let f = d.join("turns.jsonl");
    let ts = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let mut text = String::new();
    for (role, content) in [("user", prompt), ("assistant", answer)] {
        text.push_str(&json!({"ts": ts, "role": role, "content": content}).to_string());
        text.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&f)
        .and_then(|mut h| h.write_all(text.as_bytes()))
        .map_err(|e| io(&f, e))
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p.join("turns.jsonl"))
        .or_else(|_| std::fs::metadata(p))
        .and_then(|m| m.modified())
        .ok()
}

pub fn cli(
    common: &CommonArgs,
    ws: &Workspace,
    list: bool,
    show: Option<&str>,
) -> Result<ExitCode, BoxError> {
    let mut out = std::io::stdout().lock();
    if list {
        let base = root().join(&ws.names.hash);
        let mut ids: Vec<String> = std::fs::read_dir(&base)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        for id in ids {
            let turns = load(ws, &id).map(|t| t.len()).unwrap_or(0);
            let when = modified(&base.join(&id))
                .map(|t| humantime::format_rfc3339_seconds(t).to_string())
                .unwrap_or_default();
            let scratch = scratch_on_host(&ws.names.hash, &id)
                .is_dir()
                .then(|| scratch_in_sandbox(&id));
            let r = if common.json {
                output::json_line(
                    &mut out,
                    "chat",
                    &json!({"id": id, "turns": turns, "modified": when, "scratch": scratch}),
                )
            } else {
                writeln!(
                    out,
                    "{}\t{turns} turns\t{when}{}",
                    sbx_core::sanitize::field(&id),
                    scratch
                        .map(|s| format!("\t{}", sbx_core::sanitize::field(&s)))
                        .unwrap_or_default()
                )
            };
            r.map_err(|e| io(Path::new("stdout"), e))?;
        }
        return Ok(Exit::Ok.into());
    }
    let id = show.unwrap_or_default();
    check_id(id).map_err(|m| Box::new(RunError::Usage(m)) as BoxError)?;
    let turns = load(ws, id)?;
    if turns.is_empty() {
        return Err(Box::new(sbx_core::error::Message::new(
            Exit::NoInput,
            format!("no chat \"{id}\" in this workspace (sbx-run agent --list-chats)"),
        )));
    }
    for t in turns {
        let r = if common.json {
            output::json_line(&mut out, "turn", &t)
        } else {
            writeln!(
                out,
                "[{}] {}",
                sbx_core::sanitize::field(t["role"].as_str().unwrap_or("?")),
                sbx_core::sanitize::text(t["content"].as_str().unwrap_or(""))
            )
        };
        r.map_err(|e| io(Path::new("stdout"), e))?;
    }
    Ok(Exit::Ok.into())
}

fn entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).collect())
        .unwrap_or_default()
}

/// Remove a directory tree the agent may have written (a scratch
/// directory): `remove_dir_all` never follows a link, it removes the link.
fn remove(p: &Path) -> Result<(), BoxError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).map_err(|e| io(p, e)),
        Ok(_) => std::fs::remove_file(p).map_err(|e| io(p, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(p, e)),
    }
}

/// Remove chats (of every workspace) idle longer than `older_than`, with
/// their scratch directories; return how many chats.
pub fn prune(older_than: Duration) -> Result<usize, BoxError> {
    let now = SystemTime::now();
    let stale = |t: Option<SystemTime>| {
        t.and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > older_than)
    };
    let mut n = 0;
    for w in entries(&root()) {
        let hash = w.file_name().to_string_lossy().into_owned();
        for c in entries(&w.path()) {
            let p = c.path();
            if stale(modified(&p)) {
                remove(&scratch_on_host(&hash, &c.file_name().to_string_lossy()))?;
                std::fs::remove_dir_all(&p).map_err(|e| io(&p, e))?;
                n += 1;
            }
        }
    }
    // A scratch directory whose chat is gone (its first run never ended)
    // goes once it is as old.
    for w in entries(&crate::spec::state_dir().join("scratch")) {
        let hash = w.file_name();
        for s in entries(&w.path()) {
            let chat = root().join(&hash).join(s.file_name());
            let p = s.path();
            if !chat.exists()
                && stale(
                    std::fs::symlink_metadata(&p)
                        .and_then(|m| m.modified())
                        .ok(),
                )
            {
                remove(&p)?;
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for (id, ok) in [
            ("review", true),
            ("a.b_c-1", true),
            ("", false),
            (".hidden", false),
            ("a/b", false),
            ("..", false),
        ] {
            assert_eq!(check_id(id).is_ok(), ok, "{id}");
        }
    }

    #[test]
    fn history_is_a_system_prompt_section() {
        assert_eq!(history_prompt(&[]), None);
        let h = history_prompt(&[
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "yo"}),
        ]);
        assert_eq!(
            h.as_deref(),
            Some("## Conversation History:\n[user]: hi\n\n[assistant]: yo")
        );
    }
}
