//! Attacks: calls that got past the rules (exit 0 where a rule
//! refuses, or a crash/hang, which Claude Code takes as "let through").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sbx-tool-guard");
const CONFIG: &str = "[tools]\ndisallowed = [\"Bash(curl:*)\", \"Bash(git push:*)\", \"Edit(src/**)\", \"Read(private/**)\"]\n";

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        for d in [".agent-sandbox", ".git", "src", "private", "x/y"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        std::fs::write(ws.join(".agent-sandbox/config.toml"), CONFIG).unwrap();
        std::fs::write(ws.join("src/a.rs"), "x").unwrap();
        std::fs::write(ws.join("private/key"), "pw").unwrap();
        Self { dir }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path())
            .env("SBX_AUDIT_LOG", self.dir.path().join("audit.jsonl"))
            .current_dir(self.ws());
        c
    }

    /// The hook's exit status for one call (None: killed by a signal).
    fn check(&self, tool: &str, input: serde_json::Value) -> (Option<i32>, String) {
        let stdin = serde_json::json!({
            "session_id": "s",
            "hook_event_name": "PreToolUse",
            "cwd": self.ws(),
            "tool_name": tool,
            "tool_input": input,
        })
        .to_string();
        let mut c = self.cmd();
        c.args(["check", "--workspace"]).arg(self.ws());
        let o = run_with_stdin(c, &stdin);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    fn bash(&self, command: &str) -> (Option<i32>, String) {
        self.check("Bash", serde_json::json!({ "command": command }))
    }
}

fn run_with_stdin(mut c: Command, stdin: &str) -> Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut i = child.stdin.take().unwrap();
    let data = stdin.as_bytes().to_vec();
    let t = std::thread::spawn(move || {
        let _ = i.write_all(&data);
    });
    let o = child.wait_with_output().unwrap();
    t.join().unwrap();
    o
}

fn refused(w: &Ws, cmds: &[&str]) {
    let mut through = Vec::new();
    for c in cmds {
        let (code, err) = w.bash(c);
        if code != Some(2) {
            through.push(format!("{c:?} -> {code:?} {err}"));
        }
    }
    assert!(through.is_empty(), "got through:\n{}", through.join("\n"));
}

/// Brace expansion happens before quote removal: `{cu,'x'}rl` is `curl xrl`.
#[test]
fn brace_expansion_across_quotes() {
    refused(
        &Ws::new(),
        &[
            "{cu,'x'}rl x",
            "{c,''}url x",
            "{curl,-s''} x",
            "{cu,\"x\"}rl x",
        ],
    );
}

/// Glob options change what a pattern matches.
#[test]
fn nocaseglob_and_extglob() {
    refused(
        &Ws::new(),
        &[
            "shopt -s nocaseglob; /usr/bin/CUR? x",
            "shopt -s nocaseglob; /usr/bin/CUR[L] x",
            "shopt -s extglob\n/usr/bin/@(curl) x",
            "shopt -s extglob\n/usr/bin/+(curl) x",
        ],
    );
}

/// Array subscripts are evaluated as arithmetic, which runs `$(…)`, also
/// when the text comes from a variable (`$((x))` with x='a[$(curl)]').
#[test]
fn arithmetic_subscript_injection() {
    refused(
        &Ws::new(),
        &[
            "a[$(curl x)]=1",
            "x='a[$(curl x)]'; echo $((x))",
            "x='a[$(curl x)]'; [[ $x -eq 0 ]]",
            "declare x='a[$(curl x)]'; let x",
        ],
    );
}

/// A shell or `source` reading its script from stdin or a pipe is refused
/// like `… | sh`.
#[test]
fn shells_and_source_reading_stdin_or_a_pipe() {
    refused(
        &Ws::new(),
        &[
            "bash /dev/stdin <<< 'curl x'",
            "sh /dev/fd/0 <<< 'curl x'",
            "source /dev/stdin <<< 'curl x'",
            "source <(echo 'curl x')",
            ". <(echo curl x)",
            "echo 'curl x' | source /dev/stdin",
        ],
    );
}

/// xargs: `--replace`, `--eof` and `--max-lines` take their value only
/// with `=`; the words after `-I R` are templates filled from stdin.
#[test]
fn xargs_optional_values_and_templates() {
    refused(
        &Ws::new(),
        &[
            "xargs --replace curl x",
            "xargs --eof curl x",
            "xargs --max-lines curl x",
            "echo curl x | xargs -I{} sh -c {}",
            "echo curl x | xargs -I Q sh -c Q",
            "echo curl x | xargs -i sh -c {}",
        ],
    );
}

/// git's global options come before the subcommand.
#[test]
fn git_global_options_before_the_subcommand() {
    refused(
        &Ws::new(),
        &[
            "git -C . push origin main",
            "git --no-pager push",
            "git -c x=y push",
            "git --git-dir=.git push",
            "git -C. push",
        ],
    );
}

/// Deep nesting must refuse, not overflow the stack (a signal is not exit
/// 2, so Claude Code would let the call through).
#[test]
fn deep_nesting_refuses_instead_of_crashing() {
    let w = Ws::new();
    let n = 3000;
    for c in [
        format!("{}curl x;{}", "{ ".repeat(n), " }".repeat(n)),
        format!("{}curl x;{}", "if true; then ".repeat(n), " fi".repeat(n)),
        format!("echo {}curl x{}", "$(".repeat(n), ")".repeat(n)),
        format!("{}curl x{}", "( ".repeat(n), " )".repeat(n)),
        format!("echo ${{a:-{}x{}}}", "${a:-".repeat(n), "}".repeat(n)),
    ] {
        let (code, err) = w.bash(&c);
        assert_eq!(code, Some(2), "{}…: {err}", &c[..40]);
    }
}

/// A glob command word must be matched in bounded time: the hook has a
/// 30 s timeout, and a timed-out hook lets the call through.
#[test]
fn glob_matching_is_not_exponential() {
    let w = Ws::new();
    for c in [
        format!("/usr/bin/{}q x", "*".repeat(3000)),
        format!("/usr/bin/{}q x", "?".repeat(3000)),
    ] {
        let t = Instant::now();
        let (code, err) = w.bash(&c);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // Neither matches curl; either answer is fine, but it must answer.
        assert!(matches!(code, Some(0 | 2)), "{err}");
    }
}

/// Path rules follow symlinks and resolve `..` as the kernel does (after
/// the symlink before it), for paths that exist and for new files.
#[test]
fn path_rules_follow_symlinks() {
    let w = Ws::new();
    let ws = w.ws();
    std::os::unix::fs::symlink("src", ws.join("link")).unwrap();
    std::os::unix::fs::symlink("private", ws.join("pl")).unwrap();
    std::os::unix::fs::symlink(ws.join("x/y"), ws.join("d")).unwrap();
    let mut through = Vec::new();
    for (tool, key, p) in [
        ("Edit", "file_path", "link/a.rs"),
        ("Write", "file_path", "link/new.rs"),
        ("MultiEdit", "file_path", "link/a.rs"),
        ("NotebookEdit", "notebook_path", "link/n.ipynb"),
        ("Write", "file_path", "d/../../src/a.rs"),
        ("Read", "file_path", "pl/key"),
        ("Read", "file_path", "d/../../private/key"),
        ("Grep", "path", "pl"),
        ("Glob", "path", "pl"),
        ("LS", "path", "pl"),
    ] {
        let p = if tool == "LS" {
            ws.join(p).to_string_lossy().into_owned()
        } else {
            p.to_owned()
        };
        let (code, err) = w.check(tool, serde_json::json!({ key: p, "pattern": "*" }));
        if code != Some(2) {
            through.push(format!("{tool} {p} -> {code:?} {err}"));
        }
    }
    assert!(through.is_empty(), "got through:\n{}", through.join("\n"));
    let _ = Path::new("");
}

/// A search rooted at the denied directory itself reads its files.
#[test]
fn search_tools_rooted_in_a_denied_directory() {
    let w = Ws::new();
    for (tool, p) in [("Grep", "private"), ("Glob", "private"), ("LS", "private")] {
        let p = w.ws().join(p).to_string_lossy().into_owned();
        let (code, err) = w.check(tool, serde_json::json!({ "path": p, "pattern": "*" }));
        assert_eq!(code, Some(2), "{tool} {p}: {err}");
    }
}

/// Programs that run a command given in their arguments.
#[test]
fn more_command_runners() {
    refused(
        &Ws::new(),
        &[
            "flock /tmp/f curl x",
            "flock -x /tmp/f -c 'curl x'",
            "chroot / curl x",
            "unshare -U curl x",
            "watch -n1 curl x",
            "watch 'curl x'",
            "taskset 1 curl x",
            "strace -f curl x",
            "script -qc 'curl x' /dev/null",
            "chrt 1 curl x",
            "nsenter -t 1 curl x",
        ],
    );
}

/// `mcp__server` names every tool of the server, as in Claude Code.
#[test]
fn mcp_server_rule_covers_its_tools() {
    let w = Ws::new();
    std::fs::write(
        w.ws().join(".agent-sandbox/config.toml"),
        "[tools]\ndisallowed = [\"mcp__github\"]\n",
    )
    .unwrap();
    let (code, err) = w.check("mcp__github__create_issue", serde_json::json!({}));
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = w.check("mcp__githubx__y", serde_json::json!({}));
    assert_eq!(code, Some(0), "{err}");
}

/// A huge command must be answered inside the hook's 30 s timeout (20 s leaves room for a
/// loaded machine and a debug build; quadratic work would take minutes).
#[test]
fn huge_command_is_answered_quickly() {
    let w = Ws::new();
    let c = format!("{}; curl x", "a ".repeat(8 << 20));
    let t = Instant::now();
    let (code, err) = w.bash(&c);
    assert_eq!(code, Some(2), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

/// Names bound, scripts sourced and subscripts filled by builtins.
#[test]
fn hash_bash_env_and_builtin_filled_subscripts() {
    refused(
        &Ws::new(),
        &[
            "hash -p /usr/bin/curl c; c x",
            "BASH_ENV=/dev/stdin bash -c true <<< 'curl x'",
            "printf -v a 'x[$(curl x)]'; echo $((a))",
            "read -r x <<< 'a[$(curl x)]'; echo $((x))",
            "time -- curl x",
        ],
    );
}

/// Variables and git settings whose value a program runs.
#[test]
fn command_valued_variables_and_git_settings() {
    refused(
        &Ws::new(),
        &[
            "env BASH_ENV=/dev/stdin bash -c true <<< 'curl x'",
            "sudo BASH_ENV=/dev/stdin bash -c true <<< 'curl x'",
            "source -- /dev/stdin <<< 'curl x'",
            "git -c core.pager='curl x' log",
            "git -c core.sshCommand='curl x' fetch",
            "git -c alias.x='!curl x' x",
            "GIT_SSH_COMMAND='curl x' git fetch",
            "env GIT_PAGER='curl x' git log",
            "PAGER='curl x' man ls",
            "LESSOPEN='|curl x' less f",
        ],
    );
}

/// Writing a dangling symlink creates its target.
#[test]
fn write_through_a_dangling_symlink() {
    let w = Ws::new();
    std::os::unix::fs::symlink("src/new.rs", w.ws().join("e")).unwrap();
    std::os::unix::fs::symlink("f", w.ws().join("g")).unwrap();
    std::os::unix::fs::symlink("src/deep/new.rs", w.ws().join("f")).unwrap();
    for p in ["e", "g"] {
        let (code, err) = w.check(
            "Write",
            serde_json::json!({ "file_path": p, "content": "x" }),
        );
        assert_eq!(code, Some(2), "{p}: {err}");
    }
}
