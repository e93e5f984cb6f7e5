//! `[agent.host-tools]` on the host: the one place a call from the sandbox
//! is decided and run. Only a configured tool runs; each `{param}` element
//! of its argv template becomes exactly one argv element holding the
//! argument's text (no shell ever sees it); the run is bounded by the
//! tool's timeout (its whole process group is killed); every call, allowed
//! or refused, is audit-logged on the host and, through agent-launch, in
//! the sandbox's log.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use sbx_core::audit;
use sbx_core::config::Config;
use sbx_core::config::agent::{HostTool, ToolName, param};
use sbx_core::glob::PathSet;
use sbx_core::hosttools::{Answer, AuditNote, Call, ToolSpec};
use sbx_tool_guard::policy::Policy;
use serde_json::Value;

/// Output kept per stream; the rest is read and dropped.
const MAX_OUTPUT: usize = 64 * 1024;
/// Host variables a tool keeps; everything else (the API key first) is cleared.
const KEEP_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"];

pub struct HostTools {
    tools: BTreeMap<String, HostTool>,
    /// `[tools]` on the host: the masks every argument is checked against,
    /// and `read-only`.
    policy: Policy,
    /// The masks, as the sandbox's start finds them: the tool runs with
    /// them mounted over (`sbx_sys::masks`).
    blocked: PathSet,
    allowed: PathSet,
    read_only: bool,
    cwd: PathBuf,
    agent: String,
    /// Process groups of calls still running, killed when the run ends.
    running: Arc<Mutex<Vec<i32>>>,
}

/// What the tools/list of the sandbox's MCP server shows.
pub fn specs(tools: &BTreeMap<ToolName, HostTool>) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|(n, t)| ToolSpec {
            name: n.0.clone(),
            description: t.description.clone(),
            params: t.argv.params().into_iter().map(String::from).collect(),
        })
        .collect()
}

/// The argv of a call: the template with each `{param}` element replaced by
/// that argument. Refused: an argument the template does not name, one it
/// names that is missing, a value that is not text (numbers and booleans
/// are taken as written), a NUL byte (it cannot be in an argv), a value
/// beginning with `-` where no literal `--` comes before its `{param}`: the
/// program would read the agent's text as its own option (`git log
/// --output=FILE` writes a host file), and a value beginning with `@`: a
/// response file, whose text gcc and its kind read as options.
pub fn build_argv(tool: &HostTool, args: &Value) -> Result<Vec<String>, String> {
    let empty = serde_json::Map::new();
    let obj = match args {
        Value::Object(o) => o,
        Value::Null => &empty,
        _ => return Err("arguments must be an object".into()),
    };
    let params = tool.argv.params();
    if let Some(k) = obj.keys().find(|k| !params.contains(&k.as_str())) {
        return Err(format!(
            "unknown argument \"{k}\" (this tool takes: {params:?})"
        ));
    }
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    for p in &params {
        let v = match obj.get(*p) {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            Some(_) => return Err(format!("argument \"{p}\" must be a string")),
            None => return Err(format!("missing argument \"{p}\"")),
        };
        if v.contains('\0') {
            return Err(format!("argument \"{p}\" holds a NUL byte"));
        }
        values.insert(p, v);
    }
    let mut argv = Vec::with_capacity(tool.argv.0.len());
    let mut options_end = false;
    for a in &tool.argv.0 {
        match param(a) {
            Some(p) => {
                let v = values.get(p).cloned().unwrap_or_default();
                // `@FILE` is a response file to gcc, clang, rustc, javac and
                // every libiberty program: its text is read as options
                // (`-wrapper sh,-c,…` runs a command), `--` or not.
                if v.starts_with('@') {
                    return Err(format!(
                        "argument \"{p}\" begins with '@': programs with response files (gcc, \
                         clang, rustc, javac) read their options from the file it names, \
                         even after \"--\""
                    ));
                }
                if v.starts_with('-') && !options_end {
                    return Err(format!(
                        "argument \"{p}\" begins with '-', and this tool's argv has no \"--\" \
                         before {{{p}}}: the program would take it as an option (the user can \
                         add \"--\" before it in the tool's argv)"
                    ));
                }
                argv.push(v);
            }
            None => {
                options_end |= a == "--";
                argv.push(a.clone());
            }
        }
    }
    Ok(argv)
}

fn read_capped(mut r: impl Read) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut cut = false;
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        let room = MAX_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        cut |= n > room;
    }
    (kept, cut)
}

impl HostTools {
    /// The tools of `cfg`, run in `cwd` (the host workspace) under its `[tools]`.
    pub fn new(cfg: &Config, cwd: PathBuf, agent: &str) -> Result<Self, String> {
        let policy = Policy::new(cfg, &cwd).map_err(|e| e.to_string())?;
        let blocked = PathSet::new(&cfg.blocked_files()).map_err(|e| e.to_string())?;
        let allowed = PathSet::new(&cfg.allowed_files()).map_err(|e| e.to_string())?;
        Ok(Self {
            tools: cfg
                .agent
                .host_tools
                .iter()
                .map(|(k, v)| (k.0.clone(), v.clone()))
                .collect(),
            policy,
            blocked,
            allowed,
            read_only: cfg.read_only(),
            cwd,
            agent: agent.to_owned(),
            running: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Decide and run one call; the answer carries its audit note (see [`Self::audit`]).
    pub fn call(&self, c: &Call) -> Answer {
        let (text, is_error, allowed, target, reason) = match self.decide(c) {
            Err((target, why)) => (
                format!("refused by sbx: {why}"),
                true,
                false,
                target,
                format!("refused: {why}"),
            ),
            Ok((argv, timeout)) => {
                let target = format!(
                    "{} {}",
                    c.name,
                    serde_json::to_string(&argv).unwrap_or_default()
                );
                let (text, is_error, reason) = self.run(&argv, timeout);
                (text, is_error, true, target, reason)
            }
        };
        let target: String = target.chars().take(2048).collect();
        Answer {
            id: c.id,
            text,
            is_error,
            audit: AuditNote {
                allowed,
                target,
                reason,
            },
        }
    }

    /// The host's record of a call (the sandbox's comes through agent-launch).
    pub fn audit(&self, a: &Answer) {
        audit::append(&a.audit.record("sbx-run").agent(&self.agent));
    }

    fn decide(&self, c: &Call) -> Result<(Vec<String>, Duration), (String, String)> {
        let name: String = c.name.chars().take(64).collect();
        let Some(tool) = self.tools.get(&c.name) else {
            return Err((
                name,
                "not a configured host tool ([agent.host-tools] in .agent-sandbox/config.toml)"
                    .into(),
            ));
        };
        // The host has none of the sandbox's mounts: `[tools]` is
        // enforced here, before anything runs (issue 38, class 7).
        if self.read_only && tool.writes {
            return Err((
                name,
                format!(
                    "[tools].read-only = true, and host tool \"{}\" may write (mark it writes = false in [agent.host-tools.{}] if it only reads)",
                    c.name, c.name
                ),
            ));
        }
        let argv = build_argv(tool, &c.arguments).map_err(|e| (name.clone(), e))?;
        let values = c.arguments.as_object().into_iter().flat_map(|o| o.iter());
        for (k, v) in values {
            let Some(v) = v.as_str() else { continue };
            // The agent's own text in the answer, not the host path it reached.
            if let Some((_, pat)) = self.policy.masked_argument(v, &self.cwd) {
                let v: String = v.chars().take(200).collect();
                return Err((
                    name,
                    format!(
                        "argument \"{k}\" ({v:?}) reaches a file that matches \"{pat}\" ([tools].deny-read / [filesystem].blocked; masked in the sandbox)"
                    ),
                ));
            }
        }
        Ok((argv, tool.timeout.0))
    }

    fn run(&self, argv: &[String], timeout: Duration) -> (String, bool, String) {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&self.cwd)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for k in KEEP_ENV {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
        // The arguments are checked (`decide`), but a program may read
        // its working directory unasked (`rg PATTERN`, `git grep`, `make`):
        // it runs with the sandbox's masks mounted over, in a mount
        // namespace of its own. Listed afresh for every call.
        let masks = match crate::spec::find_masked(&self.cwd, &self.blocked, &self.allowed) {
            Ok(m) => m,
            Err(e) => {
                let e = format!("cannot list the workspace's masked files: {e}");
                return (format!("refused by sbx: {e}"), true, e);
            }
        };
        let masked = !masks.is_empty();
        if masked {
            let masks: Vec<(PathBuf, bool)> = masks
                .iter()
                .map(|m| {
                    let p = self.cwd.join(m);
                    let dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
                    (p, dir)
                })
                .collect();
            if let Err(e) = sbx_sys::masks::masked_view(&mut cmd, &masks) {
                return (format!("cannot run {}: {e}", argv[0]), true, e.to_string());
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let e = if masked {
                    format!("{e} (or the workspace's masks could not be put over it)")
                } else {
                    e.to_string()
                };
                return (
                    format!("cannot run {}: {e}", argv[0]),
                    true,
                    format!("spawn failed: {e}"),
                );
            }
        };
        let pgid = child.id() as i32;
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pgid);
        let out = child
            .stdout
            .take()
            .map(|s| std::thread::spawn(|| read_capped(s)));
        let err = child
            .stderr
            .take()
            .map(|s| std::thread::spawn(|| read_capped(s)));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let s = child.wait();
            let _ = tx.send(());
            s
        });
        let timed_out = rx.recv_timeout(timeout).is_err();
        // The group goes in either case: nothing a tool started outlives its call.
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        let status = waiter.join().ok().and_then(Result::ok);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != pgid);
        let take = |h: Option<std::thread::JoinHandle<(Vec<u8>, bool)>>| {
            h.and_then(|h| h.join().ok()).unwrap_or_default()
        };
        let (stdout, cut_o) = take(out);
        let (stderr, cut_e) = take(err);
        let mut text = String::from_utf8_lossy(&stdout).into_owned();
        if cut_o {
            text.push_str("\n[stdout cut at 64 KiB]");
        }
        if !stderr.is_empty() {
            text.push_str(&format!("\n[stderr]\n{}", String::from_utf8_lossy(&stderr)));
            if cut_e {
                text.push_str("\n[stderr cut at 64 KiB]");
            }
        }
        if timed_out {
            let t = humantime::format_duration(timeout);
            text.push_str(&format!("\n[killed: timed out after {t}]"));
            return (text, true, format!("timeout after {t}"));
        }
        let (code, reason) = match status.map(|s| (s.code(), s.signal())) {
            Some((Some(c), _)) => (c, format!("exit {c}")),
            Some((None, Some(sig))) => (128 + sig, format!("signal {sig}")),
            _ => (125, "wait failed".into()),
        };
        if code != 0 {
            text.push_str(&format!("\n[exit status {code}]"));
        }
        (text, code != 0, reason)
    }

    /// Kill every call still running (the run is over).
    pub fn kill_all(&self) {
        for p in self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(argv: &[&str], timeout_ms: u64) -> HostTool {
        HostTool {
            argv: serde_json::from_value(json!(argv)).unwrap(),
            description: "t".into(),
            timeout: sbx_core::config::Interval(Duration::from_millis(timeout_ms)),
            writes: true,
        }
    }

    #[test]
    fn an_option_reaches_a_program_only_after_a_literal_double_dash() {
        let t = tool(&["git", "log", "{ref}", "--", "{path}"], 1000);
        let got = build_argv(&t, &json!({"ref": "--output=/root/.bashrc", "path": "x"}));
        assert!(got.unwrap_err().contains("begins with '-'"));
        assert_eq!(
            build_argv(&t, &json!({"ref": "main", "path": "-x"})).unwrap(),
            vec!["git", "log", "main", "--", "-x"]
        );
        // A `--` the agent supplies ends nothing.
        let t = tool(&["git", "log", "{a}", "{b}"], 1000);
        assert!(build_argv(&t, &json!({"a": "--", "b": "--output=f"})).is_err());
        // A response file is options too, `--` or not (`cc @opts` with
        // `-wrapper sh,-c,…` in opts runs a command on the host).
        let t = tool(&["cc", "-fsyntax-only", "--", "{file}"], 1000);
        let got = build_argv(&t, &json!({"file": "@opts"}));
        assert!(got.unwrap_err().contains("begins with '@'"));
        assert!(build_argv(&t, &json!({"file": "a@b"})).is_ok());
    }

    #[test]
    fn argv_substitution_is_whole_elements() {
        let t = tool(&["printf", "%s|", "--", "{a}", "{b}", "{a}"], 1000);
        for (args, want) in [
            (
                json!({"a": "; rm -rf /", "b": "$(id)"}),
                Ok(vec![
                    "printf",
                    "%s|",
                    "--",
                    "; rm -rf /",
                    "$(id)",
                    "; rm -rf /",
                ]),
            ),
            (
                json!({"a": "-rf", "b": "a b\nc"}),
                Ok(vec!["printf", "%s|", "--", "-rf", "a b\nc", "-rf"]),
            ),
            (
                json!({"a": 3, "b": true}),
                Ok(vec!["printf", "%s|", "--", "3", "true", "3"]),
            ),
            (json!({"a": "x"}), Err("missing argument \"b\"")),
            (
                json!({"a": "x", "b": "y", "c": "z"}),
                Err("unknown argument \"c\""),
            ),
            (json!({"a": ["x"], "b": "y"}), Err("must be a string")),
            (json!({"a": "x\u{0}", "b": "y"}), Err("NUL")),
            (json!("a"), Err("must be an object")),
        ] {
            let got = build_argv(&t, &args);
            match want {
                Ok(w) => assert_eq!(got.unwrap(), w, "{args}"),
                Err(w) => assert!(got.as_ref().unwrap_err().contains(w), "{args}: {got:?}"),
            }
        }
        // A template without parameters takes no arguments at all.
        let t = tool(&["date"], 1000);
        assert_eq!(build_argv(&t, &Value::Null).unwrap(), vec!["date"]);
        assert!(build_argv(&t, &json!({"x": "1"})).is_err());
    }

    fn tools(list: &[(&str, HostTool)]) -> HostTools {
        tools_in(list, "", &std::env::temp_dir())
    }

    fn tools_in(list: &[(&str, HostTool)], config: &str, cwd: &std::path::Path) -> HostTools {
        let mut cfg =
            sbx_core::config::parse_toml(config, std::path::Path::new("config.toml")).unwrap();
        cfg.agent.host_tools = list
            .iter()
            .map(|(n, t)| (n.parse().unwrap(), t.clone()))
            .collect();
        HostTools::new(&cfg, cwd.to_path_buf(), "test").unwrap()
    }

    #[test]
    fn every_argument_is_checked_against_the_masks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "SECRET=1\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "fine\n").unwrap();
        std::os::unix::fs::symlink(".env", dir.path().join("link")).unwrap();
        let t = tool(&["cat", "--", "{file}"], 5000);
        let h = tools_in(
            &[("cat", t)],
            "[tools]\ndeny-read = [\"*.sql\"]\n",
            dir.path(),
        );
        for v in [
            ".env",
            "./x/../.env",
            "link",
            "HEAD:.env",
            "--file=.env",
            "dump.sql",
        ] {
            let a = h.call(&call("cat", json!({"file": v})));
            assert!(a.is_error && !a.audit.allowed, "{v}: {a:?}");
            assert!(a.text.contains("matches"), "{v}: {}", a.text);
        }
        let a = h.call(&call("cat", json!({"file": "notes.txt"})));
        assert_eq!(a.text, "fine\n", "{a:?}");
        // A file a program reads for `@FILE` (curl, gh -F, response files),
        // and a directory it reads everything below (grep -r, tar).
        std::fs::create_dir_all(dir.path().join("conf/deep")).unwrap();
        std::fs::write(dir.path().join("conf/deep/.env"), "SECRET=2\n").unwrap();
        std::fs::create_dir_all(dir.path().join("plain")).unwrap();
        std::fs::write(dir.path().join("plain/a.txt"), "a\n").unwrap();
        std::os::unix::fs::symlink("../.env", dir.path().join("plain/l")).unwrap();
        for v in [
            "@.env",
            "body=@.env",
            ".",
            "conf",
            "./conf/",
            "plain",
            "@conf",
        ] {
            let a = h.call(&call("cat", json!({"file": v})));
            assert!(a.is_error && !a.audit.allowed, "{v}: {a:?}");
        }
        std::fs::remove_file(dir.path().join("plain/l")).unwrap();
        assert!(h.call(&call("cat", json!({"file": "plain"}))).audit.allowed);
        // Prose that names no file is not a path.
        let a = h.call(&call("cat", json!({"file": "the secret plan"})));
        assert!(a.audit.allowed, "{a:?}");
    }

    #[test]
    fn read_only_refuses_a_host_tool_unless_it_is_marked_as_not_writing() {
        let mut reader = tool(&["true"], 5000);
        reader.writes = false;
        let h = tools_in(
            &[("w", tool(&["true"], 5000)), ("r", reader)],
            "[tools]\nread-only = true\n",
            &std::env::temp_dir(),
        );
        let a = h.call(&call("w", json!({})));
        assert!(a.is_error && a.text.contains("read-only"), "{a:?}");
        assert!(h.call(&call("r", json!({}))).audit.allowed);
    }

    fn call(name: &str, args: Value) -> Call {
        Call {
            id: 7,
            name: name.into(),
            arguments: args,
        }
    }

    #[test]
    fn only_configured_tools_run_and_no_shell_sees_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("pwned");
        let h = tools(&[("echo", tool(&["echo", "{msg}"], 5000))]);
        let inj = format!("; touch {0} $(touch {0}) `touch {0}`", marker.display());
        let a = h.call(&call("echo", json!({"msg": inj})));
        assert!(!a.is_error, "{a:?}");
        assert_eq!(a.text, format!("{inj}\n"));
        assert!(!marker.exists(), "an argument reached a shell");
        assert!(a.audit.allowed);
        assert_eq!(a.id, 7);
        let a = h.call(&call("sh", json!({"msg": "-c"})));
        assert!(a.is_error && !a.audit.allowed, "{a:?}");
        assert!(a.text.contains("not a configured host tool"));
    }

    #[test]
    fn a_call_past_its_timeout_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let late = dir.path().join("late");
        let script = format!("sleep 3; touch {}", late.display());
        let h = tools(&[("slow", tool(&["sh", "-c", &script], 300))]);
        let t = std::time::Instant::now();
        let a = h.call(&call("slow", json!({})));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(a.is_error && a.text.contains("timed out"), "{a:?}");
        assert!(a.audit.reason.starts_with("timeout"));
        std::thread::sleep(Duration::from_millis(3500));
        assert!(!late.exists(), "the tool's group outlived its timeout");
    }

    #[test]
    fn exit_status_and_stderr_reach_the_model() {
        let h = tools(&[(
            "f",
            tool(&["sh", "-c", "echo out; echo err >&2; exit 3"], 5000),
        )]);
        let a = h.call(&call("f", json!({})));
        assert!(a.is_error);
        assert!(
            a.text.contains("out")
                && a.text.contains("[stderr]\nerr")
                && a.text.contains("[exit status 3]"),
            "{}",
            a.text
        );
        assert_eq!(a.audit.reason, "exit 3");
    }
}
