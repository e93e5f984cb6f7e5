//! `sbx-run agent` with the real Claude Code CLI in the real image, against
//! sbx-msgapi (tests/msgapi), a scripted Messages API stand-in started inside
//! the sandbox on 127.0.0.1: nothing leaves the machine. The CLI really runs
//! its tools: a Bash call's file shows up in the host workspace.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{base_image_with_clis, bin, prerequisite, sh};
use serde_json::{Value, json};

const KEY: &str = "sk-sbx-test-3f9c1e77d2a04b6b";

struct Sandbox {
    _dir: tempfile::TempDir,
    path: PathBuf,
    state: PathBuf,
    hook_log: PathBuf,
    container: String,
}

impl Sandbox {
    fn sbx(&self) -> Command {
        let sbx = bin("sbx-run");
        let mut c = Command::new(&sbx);
        c.env("SBX_BIN_DIR", sbx.parent().unwrap())
            .env("XDG_STATE_HOME", &self.state)
            .env("HOOK_LOG", &self.hook_log)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        c
    }

    /// `sbx-run agent` against the stand-in on `port`.
    fn agent(&self, port: u16, args: &[&str]) -> Output {
        self.agent_cmd(port, args).output().unwrap()
    }

    fn agent_cmd(&self, port: u16, args: &[&str]) -> Command {
        let mut c = self.sbx();
        c.env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
            .arg("agent")
            .arg("-C")
            .arg(&self.path)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// `sbx-run agent --cli codex` against the stand-in's Responses API on `port`.
    fn agent_codex(&self, port: u16, args: &[&str]) -> Output {
        self.agent_codex_cmd(port, args).output().unwrap()
    }

    fn agent_codex_cmd(&self, port: u16, args: &[&str]) -> Command {
        let mut c = self.sbx();
        c.env("OPENAI_API_KEY", KEY)
            .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
            .args(["agent", "--cli", "codex", "--model", "standin-model", "-C"])
            .arg(&self.path)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn exec_root(&self, script: &str) -> String {
        let o = Command::new("docker")
            .args(["exec", "-u", "root", &self.container, "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Start a stand-in on `port` inside the sandbox with `script`.
    fn msgapi(&self, port: u16, script: &Value) {
        let f = self.state.join(format!("script-{port}.json"));
        std::fs::write(&f, script.to_string()).unwrap();
        sh(Command::new("docker")
            .arg("cp")
            .arg(&f)
            .arg(format!("{}:/tmp/script-{port}.json", self.container)));
        sh(Command::new("docker").args([
            "exec", "-d", "-u", "agent", &self.container, "sh", "-c",
            &format!("/tmp/sbx-msgapi --script /tmp/script-{port}.json --log /tmp/msgapi-{port}.jsonl --listen 127.0.0.1:{port} --require-key {KEY}"),
        ]));
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if self
                .exec_root(&format!("test -e /tmp/msgapi-{port}.jsonl && echo up"))
                .contains("up")
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("sbx-msgapi on {port} did not start");
    }

    fn requests(&self, port: u16) -> Vec<Value> {
        self.exec_root(&format!("cat /tmp/msgapi-{port}.jsonl"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self
            .sbx()
            .args(["-q", "rm", "--volumes"])
            .arg(&self.path)
            .status();
    }
}

fn events(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l}: {e}")))
        .collect()
}

fn of_type<'a>(ev: &'a [Value], t: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == t).collect()
}

fn diag(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write_exec(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn setup() -> Option<Sandbox> {
    setup_with("")
}

fn setup_with(extra_config: &str) -> Option<Sandbox> {
    setup_owned(extra_config, "1000:1000")
}

/// A sandbox for a repository owned by `owner` (uid:gid): anything but the
/// agent's 1000 is seen through idmapped mounts.
fn setup_owned(extra_config: &str, owner: &str) -> Option<Sandbox> {
    setup_full(extra_config, owner, &[])
}

/// As `setup_owned`, with `files` (workspace-relative name, text) written
/// before the sandbox starts.
fn setup_full(extra_config: &str, owner: &str, files: &[(&str, &str)]) -> Option<Sandbox> {
    if !prerequisite(
        sbx_e2e::is_root(),
        "root (the sandbox's workspace ownership)",
    ) || !base_image_with_clis()
    {
        return None;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("agentrepo");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&path).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    let cfg = path.join(".agent-sandbox");
    std::fs::create_dir_all(cfg.join("skills/hello")).unwrap();
    std::fs::write(
        cfg.join("skills/hello/SKILL.md"),
        "---\nname: hello\ndescription: Says hello. Use when greeting.\n---\nSay hello.\n",
    )
    .unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        format!("[agent]\nchat-retention = \"7d\"\n[agent.mcp.echo]\ncommand = [\"cat\"]\n{extra_config}"),
    )
    .unwrap();
    // Hooks log their order, and the before-hook refuses while REFUSE exists.
    write_exec(
        &cfg.join("hooks/before"),
        "#!/bin/sh\necho \"before chat=$SBX_CHAT_ID prompt=$(cat \"$SBX_PROMPT_FILE\") sandbox=$SBX_SANDBOX\" >> \"$HOOK_LOG\"\n[ -e \"$SBX_WORKSPACE/REFUSE\" ] && exit 1\nexit 0\n",
    );
    write_exec(
        &cfg.join("hooks/after"),
        "#!/bin/sh\necho \"after $(grep -o '\"status\":\"[a-z_]*\"' \"$SBX_RESULT_FILE\" | head -1)\" >> \"$HOOK_LOG\"\n",
    );
    for (name, text) in files {
        std::fs::write(path.join(name), text).unwrap();
    }
    sh(Command::new("chown").args(["-R", owner]).arg(&path));
    let names = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None);
    let sb = Sandbox {
        hook_log: dir.path().join("hooks.log"),
        _dir: dir,
        path,
        state,
        container: names.container,
    };
    let o = sb
        .sbx()
        .args(["-q", "start"])
        .arg(&sb.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "start: {}", diag(&o));
    sh(Command::new("docker")
        .arg("cp")
        .arg(bin("sbx-msgapi"))
        .arg(format!("{}:/tmp/sbx-msgapi", sb.container)));
    Some(sb)
}

#[test]
fn agent_runs_claude_code_in_the_sandbox() {
    let Some(sb) = setup() else { return };

    // 1. A Bash tool call whose file shows up on the host; the tool also looks for
    //    the key in every process's environment it can read, and at the prepared files.
    let probe = format!(
        // The key is spelled in two halves so no transcript holds it whole.
        "K1={}; K2={}; echo made-by-agent > made.txt; n=0; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep -q \"$K1$K2\" && n=$((n+1)); done; echo key-in-environ=$n; ls .claude/skills/hello/SKILL.md",
        &KEY[..8],
        &KEY[8..]
    );
    sb.msgapi(8101, &json!({"turns": [
        {"text": "Writing it.", "tool_use": {"name": "Bash", "input": {"command": probe, "description": "probe"}}},
        {"text": "All done.", "usage": {"input_tokens": 40, "output_tokens": 6}}
    ]}));
    let o = sb.agent(8101, &["--json", "write the file"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let ev = events(&o);
    assert!(
        ev.iter().all(|e| e["v"] == 1),
        "every event carries the schema version"
    );
    assert_eq!(of_type(&ev, "session").len(), 1, "{ev:?}");
    let tu = of_type(&ev, "tool_use");
    assert_eq!(tu.len(), 1);
    assert_eq!(tu[0]["data"]["name"], "Bash");
    let tr = of_type(&ev, "tool_result");
    let out = tr[0]["data"]["content"].as_str().unwrap();
    assert!(
        out.contains("key-in-environ=0"),
        "the key is in a process's environment: {out}"
    );
    assert!(out.contains(".claude/skills/hello/SKILL.md"), "{out}");
    assert!(
        of_type(&ev, "text")
            .iter()
            .any(|e| e["data"]["text"] == "All done.")
    );
    let usage = of_type(&ev, "usage");
    assert!(
        usage[0]["data"]["input_tokens"].as_u64().unwrap() >= 40,
        "{usage:?}"
    );
    assert!(usage[0]["data"]["cost_usd"].as_f64().unwrap() > 0.0);
    let result = of_type(&ev, "result");
    assert_eq!(result.last().unwrap()["data"]["status"], "success");
    assert_eq!(
        ev.last().unwrap()["type"],
        "result",
        "result is the last event"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path.join("made.txt")).unwrap(),
        "made-by-agent\n",
        "the agent's file reaches the host workspace"
    );
    let reqs = sb.requests(8101);
    assert!(reqs.len() >= 2, "{reqs:?}");
    assert!(
        reqs.iter().all(|r| r["headers"]["x-api-key"] == KEY),
        "the key reached the API"
    );
    // [agent.mcp] reaches the CLI as a JSON string: no `.mcp.json` is written.
    assert!(!sb.path.join(".mcp.json").is_file());
    // The key is in no audit log (host or sandbox) and no container env.
    let host_audit = std::fs::read_to_string(sb.state.join("sbx/audit.jsonl")).unwrap_or_default();
    assert!(
        host_audit.contains("\"agent-run\""),
        "the run is audited: {host_audit}"
    );
    assert!(!host_audit.contains(KEY));
    let sandbox_audit = std::fs::read_to_string(
        sb.state
            .join("sbx/sandboxes")
            .join(&sb.container)
            .join("audit.jsonl"),
    )
    .unwrap_or_default();
    assert!(!sandbox_audit.contains(KEY));
    let inspect = sh(Command::new("docker").args(["inspect", &sb.container]));
    assert!(
        !inspect.contains(KEY),
        "the key is in the container's config"
    );
    assert!(
        sb.exec_root(&format!(
            "grep -rl {KEY} /workspace /home/agent /tmp 2>/dev/null | grep -v msgapi-"
        ))
        .trim()
        .is_empty(),
        "the key is in a file"
    );

    // 2. Human output: text, a dim tool line, a last line with usage and cost.
    sb.msgapi(8102, &json!({"turns": [{"text": "Plain answer.", "usage": {"input_tokens": 11, "output_tokens": 5}}]}));
    let o = sb.agent(8102, &["--color", "never", "say it"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Plain answer."), "{text}");
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("success · turns 1 · tokens 11 in / 5 out · $"),
        "{last}"
    );

    // 3. An API error: exit 1, result status error.
    sb.msgapi(8103, &json!({"turns": [{"error": {"status": 400, "type": "invalid_request_error", "message": "scripted failure"}}]}));
    let o = sb.agent(8103, &["--json", "fail"]);
    assert_eq!(o.status.code(), Some(1), "{}", diag(&o));
    assert_eq!(
        of_type(&events(&o), "result").last().unwrap()["data"]["status"],
        "error"
    );

    // 4. Max turns: the model keeps calling tools, --max-turns 1 stops it: exit 3.
    let again = json!({"tool_use": {"name": "Bash", "input": {"command": "true"}}});
    sb.msgapi(8104, &json!({"turns": [again, again, again, again]}));
    let o = sb.agent(8104, &["--json", "--max-turns", "1", "loop"]);
    assert_eq!(o.status.code(), Some(3), "{}", diag(&o));
    assert_eq!(
        of_type(&events(&o), "result").last().unwrap()["data"]["status"],
        "max_turns"
    );

    // 5. Timeout: the API hangs; the CLI's whole process group is killed: exit 124.
    sb.msgapi(
        8105,
        &json!({"turns": [{"text": "late", "delay_ms": 120000}]}),
    );
    let t = Instant::now();
    let o = sb.agent(8105, &["--json", "--timeout", "4s", "hang"]);
    assert_eq!(o.status.code(), Some(124), "{}", diag(&o));
    assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
    let left = sb.exec_root("cat /proc/[0-9]*/comm");
    assert!(
        !left.contains("claude"),
        "the CLI survived its timeout: {left}"
    );

    // 6. Hooks in order, with the chat and prompt; a refusing before-hook stops the run.
    let hooks = std::fs::read_to_string(&sb.hook_log).unwrap();
    let lines: Vec<&str> = hooks.lines().collect();
    assert!(
        lines[0].starts_with("before chat= prompt=write the file sandbox=agent-sandbox-"),
        "{hooks}"
    );
    assert_eq!(lines[1], "after \"status\":\"success\"", "{hooks}");
    std::fs::write(sb.path.join("REFUSE"), "").unwrap();
    let before = sb.requests(8102).len();
    let o = sb.agent(8102, &["--json", "refused"]);
    assert_eq!(o.status.code(), Some(77), "{}", diag(&o));
    assert_eq!(
        sb.requests(8102).len(),
        before,
        "a refused run sends nothing"
    );
    assert!(
        !std::fs::read_to_string(&sb.hook_log)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .starts_with("after")
    );
    std::fs::remove_file(sb.path.join("REFUSE")).unwrap();

    // 7. Chats: the second run gets the first's turns.
    sb.msgapi(8106, &json!({"turns": [{"text": "The answer is 42."}]}));
    let o = sb.agent(8106, &["--chat", "c1", "what is the answer?"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let o = sb.agent(8106, &["--chat", "c1", "and again?"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let reqs = sb.requests(8106);
    let last = reqs.iter().rfind(|r| r["side"] == false).unwrap();
    let sys = last["body"]["system"].to_string();
    assert!(
        sys.contains("[user]: what is the answer?")
            && sys.contains("[assistant]: The answer is 42."),
        "{sys}"
    );
    let o = sb
        .sbx()
        .args(["agent", "--list-chats", "-C"])
        .arg(&sb.path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("c1\t4 turns"),
        "{}",
        diag(&o)
    );
    let o = sb
        .sbx()
        .args(["agent", "--show-chat", "c1", "-C"])
        .arg(&sb.path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        4,
        "{}",
        diag(&o)
    );
    let o = sb
        .sbx()
        .args(["-q", "prune", "--chats", "--older-than", "1h"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", diag(&o));
    let o = sb
        .sbx()
        .args(["agent", "--list-chats", "-C"])
        .arg(&sb.path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("c1"),
        "a fresh chat survives prune"
    );

    // 8. A bad skill is refused before anything runs, naming the file.
    std::fs::write(
        sb.path.join(".agent-sandbox/skills/hello/SKILL.md"),
        "---\nname: Hello\ndescription: x\n---\n",
    )
    .unwrap();
    let o = sb.agent(8102, &["--json", "hi"]);
    assert_eq!(o.status.code(), Some(78), "{}", diag(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("skills/hello/SKILL.md"),
        "{}",
        diag(&o)
    );
}

/// The tool_result the CLI sent back for each tool_use of the last turn, by tool name.
fn tool_results(reqs: &[Value]) -> Vec<(String, Value)> {
    tool_results_at(reqs, 1)
}

/// As `tool_results`, from the request of script turn `turn`.
fn tool_results_at(reqs: &[Value], turn: u64) -> Vec<(String, Value)> {
    let last = reqs
        .iter()
        .rfind(|r| r["side"] == false && r["turn"] == turn)
        .expect("a request after the tool calls");
    let msgs = last["body"]["messages"].as_array().unwrap();
    let mut names = std::collections::HashMap::new();
    for m in msgs {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                names.insert(
                    b["id"].as_str().unwrap().to_owned(),
                    b["name"].as_str().unwrap().to_owned(),
                );
            }
        }
    }
    let mut out = Vec::new();
    for m in msgs {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                let n = names
                    .get(b["tool_use_id"].as_str().unwrap())
                    .cloned()
                    .unwrap_or_default();
                out.push((n, b.clone()));
            }
        }
    }
    out
}

fn result_text(b: &Value) -> String {
    match &b["content"] {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(|c| c["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        v => v.to_string(),
    }
}

#[test]
fn host_tools_are_served_to_the_cli_over_mcp() {
    // `where` reads a file that exists only on the host; `show` prints each
    // argument bracketed (one element each); `slow` outlives its timeout.
    let host_only = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    std::fs::write(host_only.path(), "only-on-the-host\n").unwrap();
    let extra = format!(
        "[agent.host-tools.show]\nargv = [\"printf\", \"<%s>\\\\n\", \"{{a}}\", \"{{b}}\"]\ndescription = \"print a and b\"\n\
         [agent.host-tools.where]\nargv = [\"cat\", \"{}\"]\ndescription = \"host file\"\n\
         [agent.host-tools.slow]\nargv = [\"sleep\", \"{{secs}}\"]\ndescription = \"sleep\"\ntimeout = \"1s\"\n\
         [agent.host-tools.environ]\nargv = [\"env\"]\ndescription = \"the tool's environment\"\n",
        host_only.path().display()
    );
    let Some(sb) = setup_with(&extra) else { return };
    // Where an argument that reached a shell on the host would leave its mark.
    let semi = sb.state.join("pwned-semi").display().to_string();
    let subst = sb.state.join("pwned-subst").display().to_string();
    // A process of the agent's other than the CLI's MCP child tries the
    // channel: the socket is gone once the MCP server holds its one connection.
    // It also forges a call line into the CLI's stdout and the launcher's.
    let attack = "for d in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" in 'claude --print'*|'sbx-guest agent-launch'*) printf '\\036{\"id\":99,\"name\":\"where\",\"arguments\":{}}\\n' > $d/fd/1 && echo forged-into-$d;; esac; done; ls -la \"$(dirname \"$SBX_HOST_TOOLS_SOCKET\")\" 2>&1; printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"where\",\"arguments\":{}}}' | sbx-guest mcp-host-tools; echo attack-rc=$?";
    sb.msgapi(8111, &json!({"turns": [
        {"tool_use": [
            {"name": "mcp__sbx-host__show", "input": {"a": format!("; touch {semi}"), "b": format!("$(touch {subst})")}},
            {"name": "mcp__sbx-host__show", "input": {"a": "-n", "b": "--version"}},
            {"name": "mcp__sbx-host__where", "input": {}},
            {"name": "mcp__sbx-host__rm", "input": {"path": "/"}},
            {"name": "mcp__sbx-host__slow", "input": {"secs": "30"}},
            {"name": "mcp__sbx-host__environ", "input": {}},
            {"name": "Bash", "input": {"command": attack, "description": "attack"}}
        ]},
        {"text": "Tools done."}
    ]}));
    let o = sb.agent(8111, &["--json", "use the host tools"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    // The line forged into the CLI's stdout came out escaped, as a raw event.
    let ev = events(&o);
    assert!(
        of_type(&ev, "raw").iter().any(|e| e["data"]["line"]
            .as_str()
            .is_some_and(|l| l.starts_with("\\u001e{\"id\":99"))),
        "{}",
        diag(&o)
    );
    let results = tool_results(&sb.requests(8111));
    let of = |n: &str| -> Vec<String> {
        results
            .iter()
            .filter(|(name, _)| name == n)
            .map(|(_, b)| result_text(b))
            .collect()
    };
    let shows = of("mcp__sbx-host__show");
    assert_eq!(shows.len(), 2, "{results:?}");
    assert!(
        shows.contains(&format!("<; touch {semi}>\n<$(touch {subst})>\n")),
        "shell syntax is one argv element, as written: {shows:?}"
    );
    // `show` has no `--` before its parameters: an option-like value is
    // refused, never handed to the program.
    let opts = results
        .iter()
        .filter(|(n, _)| n == "mcp__sbx-host__show")
        .find(|(_, b)| result_text(b).contains("begins with '-'"))
        .unwrap_or_else(|| panic!("an option reached the program: {results:?}"));
    assert_eq!(opts.1["is_error"], true, "{opts:?}");
    assert!(
        !Path::new(&semi).exists() && !Path::new(&subst).exists(),
        "an argument reached a shell"
    );
    assert_eq!(
        of("mcp__sbx-host__where"),
        vec!["only-on-the-host\n".to_owned()],
        "the host ran it"
    );
    let slow = of("mcp__sbx-host__slow");
    assert!(slow[0].contains("timed out after 1s"), "{slow:?}");
    let rm = results
        .iter()
        .find(|(n, _)| n == "mcp__sbx-host__rm")
        .unwrap();
    assert_eq!(
        rm.1["is_error"], true,
        "an unconfigured tool is refused: {rm:?}"
    );
    let env = of("mcp__sbx-host__environ");
    assert!(
        env[0].contains("PATH=") && !env[0].contains(KEY),
        "the host tool sees the key: {env:?}"
    );
    let bash = of("Bash");
    assert!(
        bash[0].contains("attack-rc=77") && !bash[0].contains("only-on-the-host"),
        "another process reached the host tools: {bash:?}"
    );
    // The CLI's stdout took the forged line (and made it a raw event, not a
    // call); the launcher's could not be opened (it is not dumpable).
    assert_eq!(bash[0].matches("forged-into-").count(), 1, "{bash:?}");
    // Every call that reached the host is in both audit logs; the refused
    // one never left the CLI.
    let host_audit = std::fs::read_to_string(sb.state.join("sbx/audit.jsonl")).unwrap_or_default();
    let sandbox_audit = std::fs::read_to_string(
        sb.state
            .join("sbx/sandboxes")
            .join(&sb.container)
            .join("audit.jsonl"),
    )
    .unwrap_or_default();
    for (log, tool) in [(&host_audit, "sbx-run"), (&sandbox_audit, "sbx-host-tools")] {
        let calls: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["operation"] == "host-tool" && r["tool"] == tool)
            .collect();
        assert_eq!(calls.len(), 5, "{tool}: {log}");
        let wheres = calls
            .iter()
            .filter(|r| r["target"].as_str().unwrap().starts_with("where "))
            .count();
        assert_eq!(wheres, 1, "a forged call line ran: {log}");
        assert!(
            calls
                .iter()
                .any(|r| r["target"].as_str().unwrap().starts_with("slow ")
                    && r["reason"].as_str().unwrap().starts_with("timeout")),
            "{calls:?}"
        );
        // The option-like call is refused and audited as blocked.
        assert!(
            calls.iter().any(|r| r["target"] == "show"
                && r["result"] == "blocked"
                && r["reason"].as_str().unwrap().contains("begins with '-'")),
            "{calls:?}"
        );
        assert!(!log.contains("\"rm"), "{log}");
    }
}

/// Issue 38: `.claude/`, `.mcp.json` and `.codex/` are read-only in the
/// sandbox, so the agent cannot plant a project hook or MCP server that
/// the user's own Claude Code (or codex, in a project it trusts) on the
/// host would run. `sbx-run agent` still works: the
/// skills it copies on the host reach `.claude/skills`, its MCP servers
/// and the user's reach the CLI, and the user's `.mcp.json` is untouched.
#[test]
fn agent_cannot_plant_project_hooks_or_mcp_servers() {
    let mine = r#"{"mcpServers":{"mine":{"type":"stdio","command":"cat","args":[]}}}"#;
    let Some(sb) = setup_full("", "1000:1000", &[(".mcp.json", mine)]) else {
        return;
    };
    let hook = r#"{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}"#;
    let attack = format!(
        "ls .claude/skills/hello/SKILL.md; mv .claude c2; echo mv-rc=$?; mkdir -p .claude; \
         printf '%s' '{hook}' > .claude/settings.json; echo settings-rc=$?; \
         printf '%s' '{hook}' > .claude/settings.local.json; echo local-rc=$?; \
         mv .mcp.json m2; echo '{{\"mcpServers\":{{}}}}' > .mcp.json; echo mcp-rc=$?; \
         mkdir -p .codex; printf '[mcp_servers.x]\\ncommand = \"touch\"\\n' > .codex/config.toml; \
         echo codex-rc=$?"
    );
    sb.msgapi(
        8151,
        &json!({"turns": [
            {"tool_use": {"name": "Bash", "input": {"command": attack, "description": "plant"}}},
            {"text": "Done."}
        ]}),
    );
    let o = sb.agent(8151, &["--json", "plant hooks"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let out = tool_outputs(&o).join("\n");
    for rc in [
        "settings-rc=0",
        "local-rc=0",
        "mcp-rc=0",
        "mv-rc=0",
        "codex-rc=0",
    ] {
        assert!(!out.contains(rc), "{rc}: {out}");
    }
    assert!(out.contains(".claude/skills/hello/SKILL.md"), "{out}");
    for f in [
        ".claude/settings.json",
        ".claude/settings.local.json",
        "c2",
        "m2",
        ".codex/config.toml",
    ] {
        assert!(!sb.path.join(f).exists(), "{f} was planted");
    }
    assert_eq!(
        std::fs::read_to_string(sb.path.join(".mcp.json")).unwrap(),
        mine
    );
    let ev = events(&o);
    let session = of_type(&ev, "session");
    let names: Vec<&str> = session[0]["data"]["mcp_servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"mine"),
        "{names:?}"
    );
}

/// Issue 38, class 7: host tools run on the host, where nothing is masked
/// and nothing is read-only, so `[tools]` is enforced there. The agent
/// reads a masked file through a tool whose parameter is not called
/// `path`, and plants a file through a tool that writes, under
/// `read-only = true`: both are refused on the host and audited there.
#[test]
fn host_tools_keep_the_masks_and_read_only() {
    let extra = "[tools]\nread-only = true\ndeny-read = [\"**/*.sql\"]\n\
         [agent.host-tools.by_path]\nargv = [\"cat\", \"--\", \"{path}\"]\ndescription = \"cat\"\nwrites = false\n\
         [agent.host-tools.by_file]\nargv = [\"cat\", \"--\", \"{file}\"]\ndescription = \"cat\"\nwrites = false\n\
         [agent.host-tools.plant]\nargv = [\"touch\", \"--\", \"{name}\"]\ndescription = \"touch\"\n";
    let Some(sb) = setup_with(extra) else { return };
    std::fs::write(sb.path.join(".env"), "TOKEN=env-secret-5150\n").unwrap();
    std::fs::create_dir_all(sb.path.join("db")).unwrap();
    std::fs::write(sb.path.join("db/dump.sql"), "sql-secret-5150\n").unwrap();
    std::fs::write(sb.path.join("notes.txt"), "plain-notes\n").unwrap();
    sb.msgapi(
        8131,
        &json!({"turns": [
            {"tool_use": [
                {"name": "mcp__sbx-host__by_path", "input": {"path": ".env"}},
                {"name": "mcp__sbx-host__by_file", "input": {"file": ".env"}},
                {"name": "mcp__sbx-host__by_file", "input": {"file": "db/../db/dump.sql"}},
                {"name": "mcp__sbx-host__by_file", "input": {"file": "notes.txt"}},
                {"name": "mcp__sbx-host__plant", "input": {"name": "planted"}}
            ]},
            {"text": "Tools done."}
        ]}),
    );
    let o = sb.agent(8131, &["--json", "use the host tools"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let results = tool_results(&sb.requests(8131));
    let all: Vec<String> = results.iter().map(|(_, b)| result_text(b)).collect();
    assert_eq!(all.len(), 5, "{results:?}");
    assert!(
        all.iter().all(|t| !t.contains("secret-5150")),
        "a masked file was read through a host tool: {all:?}"
    );
    assert!(all.contains(&"plain-notes\n".to_owned()), "{all:?}");
    assert!(
        !sb.path.join("planted").exists(),
        "a host tool wrote under read-only: {all:?}"
    );
    // The refusals are the host's, in its audit log, with the reason.
    let host_audit = std::fs::read_to_string(sb.state.join("sbx/audit.jsonl")).unwrap_or_default();
    let blocked: Vec<Value> = host_audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["operation"] == "host-tool" && r["result"] == "blocked")
        .collect();
    let why = |t: &str, w: &str| {
        blocked
            .iter()
            .any(|r| r["target"] == t && r["reason"].as_str().unwrap().contains(w))
    };
    assert!(why("by_file", "[tools].deny-read"), "{blocked:?}");
    assert!(why("plant", "read-only"), "{blocked:?}");
}

/// Two argument spellings the per-argument check did not see (issue 38,
/// class 7, a fresh attack): `@FILE`, which gcc and every program with
/// response files reads as options (the agent writes `-wrapper
/// sh,-c,CMD` into a workspace file and a "syntax check" host tool runs
/// CMD on the host, as the user), and a directory, which `grep -r` reads
/// all of (a masked `.env` below it included).
#[test]
fn host_tools_refuse_response_files_and_directories_holding_masks() {
    let extra = "[agent.host-tools.check]\nargv = [\"cc\", \"-fsyntax-only\", \"{file}\"]\n\
         description = \"syntax-check a C file\"\nwrites = false\n\
         [agent.host-tools.search]\nargv = [\"grep\", \"-rn\", \"--\", \"{pattern}\", \"{path}\"]\n\
         description = \"search files\"\nwrites = false\n";
    let Some(sb) = setup_with(extra) else { return };
    std::fs::create_dir_all(sb.path.join("conf")).unwrap();
    std::fs::write(sb.path.join("conf/.env"), "TOKEN=env-secret-3838\n").unwrap();
    std::fs::write(sb.path.join("conf/app.txt"), "TOKEN=placeholder\n").unwrap();
    std::fs::write(sb.path.join("x.c"), "int main(void){return 0;}\n").unwrap();
    let canary = sb.path.parent().unwrap().join("canary-a38x");
    let plant = format!(
        "printf -- '-wrapper /bin/sh,-c,id>{} x.c\\n' > opts",
        canary.display()
    );
    sb.msgapi(
        8138,
        &json!({"turns": [
            {"tool_use": {"name": "Bash", "input": {"command": plant, "description": "opts"}}},
            {"tool_use": [
                {"name": "mcp__sbx-host__check", "input": {"file": "x.c"}},
                {"name": "mcp__sbx-host__check", "input": {"file": "@opts"}},
                {"name": "mcp__sbx-host__search", "input": {"pattern": "TOKEN", "path": "conf"}},
                {"name": "mcp__sbx-host__search", "input": {"pattern": "TOKEN", "path": "."}}
            ]},
            {"text": "Tools done."}
        ]}),
    );
    let o = sb.agent(8138, &["--json", "use the host tools"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    assert!(
        sb.path.join("opts").exists(),
        "the agent wrote opts: {}",
        diag(&o)
    );
    let results = tool_results_at(&sb.requests(8138), 2);
    let all: Vec<String> = results.iter().map(|(_, b)| result_text(b)).collect();
    assert_eq!(all.len(), 5, "{results:?}");
    assert!(
        !canary.exists(),
        "a response file ran the agent's command on the host: {all:?}"
    );
    assert!(
        all.iter().all(|t| !t.contains("env-secret-3838")),
        "a masked file was read through a directory argument: {all:?}"
    );
    let host_audit = std::fs::read_to_string(sb.state.join("sbx/audit.jsonl")).unwrap_or_default();
    let blocked = host_audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["operation"] == "host-tool" && r["result"] == "blocked")
        .count();
    assert_eq!(blocked, 3, "{host_audit}");
}

/// Issue 38 (a38y, leftover b): a host tool that reads its working
/// directory without being named a path (`grep -r` with no file,
/// `git grep --no-index`, `make` running the user's Makefile) passed the
/// argument check with nothing to check, and read the masked files on
/// the host. The tool now runs in a mount namespace of its own with the
/// sandbox's masks over them.
#[test]
fn host_tools_that_read_their_working_directory_see_the_masks() {
    let extra = "[agent.host-tools.grep]\nargv = [\"grep\", \"-rn\", \"--\", \"{pattern}\"]\n\
         description = \"search the repository\"\nwrites = false\n\
         [agent.host-tools.gitgrep]\nargv = [\"git\", \"grep\", \"--no-index\", \"-n\", \"--\", \"{pattern}\"]\n\
         description = \"search with git\"\nwrites = false\n\
         [agent.host-tools.make]\nargv = [\"make\", \"-s\", \"--\", \"{target}\"]\n\
         description = \"run a make target\"\nwrites = false\n\
         [filesystem]\nblocked = [\"keys/\"]\n";
    let Some(sb) = setup_with(extra) else { return };
    std::fs::create_dir_all(sb.path.join("conf")).unwrap();
    std::fs::create_dir_all(sb.path.join("keys")).unwrap();
    std::fs::write(sb.path.join("conf/.env"), "TOKEN=env-secret-3839\n").unwrap();
    std::fs::write(sb.path.join("server.key"), "TOKEN=key-secret-3839\n").unwrap();
    std::fs::write(sb.path.join("keys/a"), "TOKEN=dir-secret-3839\n").unwrap();
    std::fs::write(sb.path.join("conf/app.txt"), "TOKEN=placeholder\n").unwrap();
    std::fs::write(
        sb.path.join("Makefile"),
        "show:\n\tcat conf/app.txt conf/.env server.key keys/a 2>&1 || true\n",
    )
    .unwrap();
    sb.msgapi(
        8139,
        &json!({"turns": [
            {"tool_use": [
                {"name": "mcp__sbx-host__grep", "input": {"pattern": "TOKEN"}},
                {"name": "mcp__sbx-host__gitgrep", "input": {"pattern": "TOKEN"}},
                {"name": "mcp__sbx-host__make", "input": {"target": "show"}}
            ]},
            {"text": "Tools done."}
        ]}),
    );
    let o = sb.agent(8139, &["--json", "search the repository"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let results = tool_results_at(&sb.requests(8139), 1);
    let all: Vec<String> = results.iter().map(|(_, b)| result_text(b)).collect();
    assert_eq!(all.len(), 3, "{results:?}");
    // Each ran, and read the plain file beside the secrets.
    assert!(
        all.iter().all(|t| t.contains("TOKEN=placeholder")),
        "{all:?}"
    );
    assert!(
        all.iter().all(|t| !t.contains("secret-3839")),
        "a host tool read a masked file in its working directory: {all:?}"
    );
    // The host's files are untouched by the masks.
    assert_eq!(
        std::fs::read_to_string(sb.path.join("conf/.env")).unwrap(),
        "TOKEN=env-secret-3839\n"
    );
}

/// Each tool_result text of a run's events.
fn tool_outputs(o: &Output) -> Vec<String> {
    of_type(&events(o), "tool_result")
        .iter()
        .map(|e| e["data"]["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn scratch_workspace_is_kept_per_chat() {
    // Owned by neither root nor the agent: the workspace and the scratch
    // directories are both seen through the owner <-> agent idmapped view.
    let Some(sb) = setup_owned("", "1234:1234") else {
        return;
    };
    let hash = sbx_run::names::Names::new(&sb.path.canonicalize().unwrap(), None).hash;
    let root = sb.state.join("sbx/scratch").join(&hash);
    // No before-hook: these runs take the guest probe's connection for the
    // exec (the first test covers the reconnect after a hook).
    std::fs::remove_file(sb.path.join(".agent-sandbox/hooks/before")).unwrap();
    let probe = "echo scratch=$SBX_SCRATCH; echo pwd=$(pwd); echo seen:; [ -n \"$SBX_SCRATCH\" ] && { sed 's/^/  /' \"$SBX_SCRATCH/note.txt\" 2>/dev/null; echo run >> \"$SBX_SCRATCH/note.txt\"; }; echo end";
    sb.msgapi(
        8121,
        &json!({"turns": [
            {"tool_use": {"name": "Bash", "input": {"command": probe, "description": "scratch"}}},
            {"text": "Noted."}
        ]}),
    );
    let run = |args: &[&str]| {
        let o = sb.agent(8121, args);
        assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
        let out = tool_outputs(&o);
        assert_eq!(out.len(), 1, "{}", diag(&o));
        out[0].clone()
    };

    // 1. The first run of c1 starts with an empty scratch directory, and the
    //    repository stays the working directory.
    let first = run(&["--json", "--chat", "c1", "--scratch", "note it"]);
    assert!(first.contains("scratch=/scratch/c1\n"), "{first}");
    assert!(first.contains("pwd=/workspace/agentrepo\n"), "{first}");
    assert!(
        first.contains("seen:\nend"),
        "a fresh chat's scratch is empty: {first}"
    );
    let sys = sb
        .requests(8121)
        .iter()
        .rfind(|r| r["side"] == false)
        .unwrap()["body"]["system"]
        .to_string();
    assert!(sys.contains("/scratch/c1"), "the model is told: {sys}");
    // On the host, beside the chat store, owned like the repository.
    let note = root.join("c1/note.txt");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "run\n");
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&note).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (1234, 1234),
            "owned like the repository"
        );
    }

    // 2. The chat's next run sees what the first left.
    let second = run(&["--json", "--chat", "c1", "--scratch", "again"]);
    assert!(second.contains("seen:\n  run\nend"), "{second}");

    // 3. Another chat gets its own, empty one; a run without --scratch none.
    let other = run(&["--json", "--chat", "c2", "--scratch", "other"]);
    assert!(other.contains("scratch=/scratch/c2\n"), "{other}");
    assert!(
        other.contains("seen:\nend"),
        "another chat sees c1's files: {other}"
    );
    let plain = run(&["--json", "--chat", "c3", "plain"]);
    assert!(plain.contains("scratch=\n"), "{plain}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "run\nrun\n");
    let o = sb
        .sbx()
        .args(["--json", "agent", "--list-chats", "-C"])
        .arg(&sb.path)
        .output()
        .unwrap();
    let listed: Vec<Value> = events(&o);
    let scratch_of = |id: &str| {
        listed
            .iter()
            .find(|c| c["data"]["id"] == id)
            .map(|c| c["data"]["scratch"].clone())
    };
    assert_eq!(scratch_of("c1"), Some(json!("/scratch/c1")), "{}", diag(&o));
    assert_eq!(scratch_of("c3"), Some(Value::Null), "{}", diag(&o));

    // 4. --scratch needs a chat.
    let o = sb.agent(8121, &["--scratch", "no chat"]);
    assert_eq!(o.status.code(), Some(64), "{}", diag(&o));

    // 5. prune --chats removes a stale chat with its scratch directory and
    //    leaves fresh ones; a link the agent put in place of a chat's scratch
    //    directory is removed, never followed.
    let keep = sb.state.join("keep");
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(keep.join("precious"), "x").unwrap();
    std::os::unix::fs::symlink(&keep, root.join("c3")).unwrap();
    std::os::unix::fs::symlink(&keep, root.join("c1/link")).unwrap();
    let ten_days_ago = |p: &Path| {
        std::fs::File::open(p)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(10 * 86400))
            .unwrap();
    };
    for c in ["c1", "c3"] {
        ten_days_ago(
            &sb.state
                .join("sbx/chats")
                .join(&hash)
                .join(c)
                .join("turns.jsonl"),
        );
    }
    // A scratch directory whose chat never finished a run, as old.
    std::fs::create_dir_all(root.join("orphan")).unwrap();
    ten_days_ago(&root.join("orphan"));
    let o = sb
        .sbx()
        .args(["prune", "--chats", "--older-than", "7d"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", diag(&o));
    assert!(!root.join("c1").exists(), "the stale chat's scratch stayed");
    assert!(std::fs::symlink_metadata(root.join("c3")).is_err());
    assert!(!root.join("orphan").exists());
    assert!(
        root.join("c2/note.txt").exists(),
        "a fresh chat's scratch went"
    );
    assert!(keep.join("precious").exists(), "prune followed a link");
}

/// The `-c mcp_servers.…` overrides sbx-run gives `codex exec`, read back by
/// the image's own codex (`codex … mcp list --json`): what codex parsed is
/// what the config said, the relay passes its socket variable through.
#[test]
fn codex_reads_the_mcp_servers_sbx_gives_it() {
    let text = "[agent.mcp.docs]\ncommand = [\"npx\", \"a \\\"quoted\\\" arg\", \"$(id)\"]\nenv = { TOKEN = \"x y\" }\n\
                [agent.host-tools.show]\nargv = [\"echo\", \"{a}\"]\ndescription = \"echo\"\n";
    let cfg = sbx_core::config::parse_toml(text, Path::new("config.toml")).unwrap();
    let Some(sb) = setup_with(text) else { return };
    let args =
        sbx_run::agent::codex::mcp_args(&cfg.agent.mcp, !cfg.agent.host_tools.is_empty()).unwrap();
    let o = Command::new("docker")
        .args(["exec", "-u", "agent", &sb.container, "codex"])
        .args(&args)
        .args(["mcp", "list", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", diag(&o));
    let list: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", diag(&o)));
    let by = |n: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("{n} missing: {list}"))["transport"]
            .clone()
    };
    let docs = by("docs");
    assert_eq!(docs["command"], "npx");
    assert_eq!(docs["args"], json!(["a \"quoted\" arg", "$(id)"]));
    assert_eq!(docs["env"], json!({"TOKEN": "x y"}));
    let relay = by("sbx-host");
    assert_eq!(relay["command"], "/usr/local/bin/sbx-guest");
    assert_eq!(relay["args"], json!(["mcp-host-tools"]));
    assert_eq!(relay["env_vars"], json!(["SBX_HOST_TOOLS_SOCKET"]));
}

/// Issue 38: under `[tools] read-only = true` codex runs (its own sandbox
/// cannot start in the container, so it is off) and the workspace mount
/// makes it read-only: its shell call reads a file and fails to write one.
#[test]
fn codex_is_read_only_under_read_only() {
    let Some(sb) = setup_with("[tools]\nread-only = true\n") else {
        return;
    };
    std::fs::write(sb.path.join("notes.txt"), "notes-for-codex\n").unwrap();
    let probe = "cat notes.txt; echo x > codex-ro.txt; echo write-rc=$?";
    sb.msgapi(
        8141,
        &json!({"turns": [
            {"text": "Trying.", "shell": probe},
            {"text": "All done."}
        ]}),
    );
    let o = sb.agent_codex(8141, &["--json", "write the file"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let tr = of_type(&events(&o), "tool_result")
        .iter()
        .map(|e| e["data"]["content"].as_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>();
    assert_eq!(tr.len(), 1, "{}", diag(&o));
    assert!(
        tr[0].contains("notes-for-codex") && tr[0].contains("Read-only file system"),
        "codex could not run, or could write: {tr:?}"
    );
    assert!(!tr[0].contains("write-rc=0"), "{tr:?}");
    assert!(!sb.path.join("codex-ro.txt").exists());
}

/// The real codex CLI against the stand-in's Responses API: its shell call
/// really runs (the file reaches the host workspace), and `codex exec
/// --json` comes out as sbx's events, not `raw` lines. The key reaches the
/// API (bearer) through codex's token command, and no process environment,
/// file, audit log or container config.
#[test]
fn agent_runs_codex_against_the_responses_stand_in() {
    let Some(sb) = setup() else { return };
    let probe = format!(
        "K1={}; K2={}; echo made-by-codex > codex.txt; n=0; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep -q \"$K1$K2\" && n=$((n+1)); done; echo key-in-environ=$n",
        &KEY[..8],
        &KEY[8..]
    );
    sb.msgapi(8111, &json!({"turns": [
        {"text": "Writing it.", "shell": probe},
        {"text": "All done.", "usage": {"input_tokens": 40, "output_tokens": 6, "cached_tokens": 3}}
    ]}));
    let o = sb.agent_codex(8111, &["--json", "write the file"]);
    assert_eq!(o.status.code(), Some(0), "{}", diag(&o));
    let ev = events(&o);
    assert!(ev.iter().all(|e| e["v"] == 1));
    assert!(
        of_type(&ev, "raw").is_empty(),
        "codex lines of known types came out raw: {ev:?}"
    );
    assert_eq!(of_type(&ev, "session").len(), 1, "{ev:?}");
    let tu = of_type(&ev, "tool_use");
    assert_eq!(tu.len(), 1, "{ev:?}");
    assert_eq!(tu[0]["data"]["name"], "shell");
    assert!(
        tu[0]["data"]["input"]["command"]
            .as_str()
            .unwrap()
            .contains("made-by-codex"),
        "{tu:?}"
    );
    let tr = of_type(&ev, "tool_result");
    assert_eq!(tr.len(), 1, "{ev:?}");
    assert_eq!(tr[0]["data"]["tool_use_id"], tu[0]["data"]["id"]);
    assert_eq!(tr[0]["data"]["is_error"], false);
    let out = tr[0]["data"]["content"].as_str().unwrap();
    assert!(
        out.contains("key-in-environ=0"),
        "the key is in a process's environment: {out}"
    );
    assert!(
        of_type(&ev, "text")
            .iter()
            .any(|e| e["data"]["text"] == "All done.")
    );
    let usage = of_type(&ev, "usage");
    assert_eq!(usage.len(), 1, "{ev:?}");
    // Codex sums its two requests: 100 (the stand-in's default) + 40.
    assert_eq!(usage[0]["data"]["input_tokens"], 140, "{usage:?}");
    assert_eq!(usage[0]["data"]["cache_read_input_tokens"], 3);
    assert_eq!(usage[0]["data"]["output_tokens"], 26);
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "result", "result is the last event");
    assert_eq!(last["data"]["status"], "success");
    assert_eq!(last["data"]["text"], "All done.");
    assert_eq!(last["data"]["exit"], 0);
    assert_eq!(
        std::fs::read_to_string(sb.path.join("codex.txt")).unwrap(),
        "made-by-codex\n",
        "codex's shell call reaches the host workspace"
    );
    let reqs: Vec<Value> = sb
        .requests(8111)
        .into_iter()
        .filter(|r| r["path"] == "/v1/responses")
        .collect();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let bearer = format!("Bearer {KEY}");
    assert!(
        reqs.iter()
            .all(|r| r["headers"]["authorization"] == bearer.as_str()),
        "the key reached the API"
    );
    let host_audit = std::fs::read_to_string(sb.state.join("sbx/audit.jsonl")).unwrap_or_default();
    assert!(host_audit.contains("\"agent-run\""), "{host_audit}");
    assert!(!host_audit.contains(KEY));
    let sandbox_audit = std::fs::read_to_string(
        sb.state
            .join("sbx/sandboxes")
            .join(&sb.container)
            .join("audit.jsonl"),
    )
    .unwrap_or_default();
    assert!(!sandbox_audit.contains(KEY));
    let inspect = sh(Command::new("docker").args(["inspect", &sb.container]));
    assert!(
        !inspect.contains(KEY),
        "the key is in the container's config"
    );
    assert!(
        sb.exec_root(&format!(
            "grep -rl {KEY} /workspace /home/agent /tmp 2>/dev/null | grep -v msgapi-"
        ))
        .trim()
        .is_empty(),
        "the key is in a file"
    );

    // An API error: codex's turn.failed is an error event and exit 1.
    sb.msgapi(8112, &json!({"turns": [{"error": {"status": 400, "type": "invalid_request_error", "message": "scripted failure"}}]}));
    let o = sb.agent_codex(8112, &["--json", "fail"]);
    assert_eq!(o.status.code(), Some(1), "{}", diag(&o));
    let ev = events(&o);
    assert!(!of_type(&ev, "error").is_empty(), "{ev:?}");
    assert_eq!(ev.last().unwrap()["data"]["status"], "error");

    // Stopped while its shell call waits: codex (node and the native binary)
    // and the call's processes go with sbx-run.
    sb.msgapi(8113, &json!({"turns": [
        {"shell": "tail -s 4081131 -f /dev/null & setsid tail -s 4081132 -f /dev/null & tail -s 4081133 -f /dev/null"},
        // Codex may leave a long call running and ask on: then it waits here.
        {"text": "late", "delay_ms": 120000}
    ]}));
    let child = sb
        .agent_codex_cmd(8113, &["--json", "wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    stop_and_check(
        &sb,
        child,
        nix::sys::signal::Signal::SIGTERM,
        "408113",
        "codex",
    );
}

/// Live processes of the sandbox whose command line holds `marker` (the
/// scan spells it in two halves, so it does not find itself).
fn running(sb: &Sandbox, marker: &str) -> String {
    let (m1, m2) = marker.split_at(marker.len() / 2);
    sb.exec_root(&format!(
        "m={m1}; m=\"$m\"{m2}; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); s=$(cut -d' ' -f3 $p/stat 2>/dev/null); case \"$c\" in *\"$m\"*) [ \"$s\" != Z ] && echo \"${{p#/proc/}} $s $c\";; esac; done"
    ))
}

/// `sbx-run agent` stopped on the host while the CLI waits on a tool: by
/// SIGINT, SIGTERM or SIGHUP (forwarded, the CLI stops, exit 128+N and a
/// `stopped` result), or SIGKILL (the guest sees the connection close). In
/// every case the CLI, the launcher and the tool's processes, one of them in
/// its own session, are gone within a bound.
#[test]
fn agent_ends_with_sbx_run_on_every_signal() {
    use nix::sys::signal::Signal;
    let Some(sb) = setup() else { return };
    let cases = [
        (Signal::SIGINT, 8121u16),
        (Signal::SIGTERM, 8122),
        (Signal::SIGHUP, 8123),
        (Signal::SIGKILL, 8124),
    ];
    for (sig, port) in cases {
        let marker = format!("40{port}");
        // Three endless waits (Claude Code refuses chained sleeps), one in
        // the background and one in its own session.
        let cmd = format!(
            "tail -s {marker}1 -f /dev/null & setsid tail -s {marker}2 -f /dev/null & tail -s {marker}3 -f /dev/null"
        );
        sb.msgapi(
            port,
            &json!({"turns": [
                {"tool_use": {"name": "Bash", "input": {"command": cmd, "description": "wait"}}},
                {"text": "never"}
            ]}),
        );
        let child = sb
            .agent_cmd(port, &["--json", "wait for it"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        stop_and_check(&sb, child, sig, &marker, "claude");
    }
}

/// Once the three waits of the tool call (`{marker}1..3`) run, stop
/// `sbx-run agent` by `sig`; it and every process of the run (the CLI
/// `cli`, the launcher, the waits) end within a bound.
fn stop_and_check(
    sb: &Sandbox,
    mut child: std::process::Child,
    sig: nix::sys::signal::Signal,
    marker: &str,
    cli: &str,
) {
    use nix::sys::signal::{Signal, kill};
    let t = Instant::now();
    while running(sb, &format!("{marker}3")).is_empty() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                Signal::SIGKILL,
            );
            let o = child.wait_with_output().unwrap();
            panic!("{sig}: the tool never started: {}", diag(&o));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The whole tree is up: the setsid'd sleep too.
    let t = Instant::now();
    while running(sb, &format!("{marker}2")).is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(sb, &format!("{marker}2")).is_empty(), "{sig}");
    let stopped = Instant::now();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    kill(pid, sig).unwrap();
    // sbx-run itself ends within the bound too (its few events fit the pipe).
    while child.try_wait().unwrap().is_none() {
        if stopped.elapsed() > Duration::from_secs(30) {
            let _ = kill(pid, Signal::SIGKILL);
            let o = child.wait_with_output().unwrap();
            panic!("{sig}: sbx-run did not end: {}", diag(&o));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    if sig == Signal::SIGKILL {
        assert_eq!(o.status.code(), None);
    } else {
        assert_eq!(
            o.status.code(),
            Some(128 + sig as i32),
            "{sig}: {}",
            diag(&o)
        );
        let ev = events(&o);
        let last = ev.last().unwrap();
        assert_eq!(last["type"], "result", "{sig}: {ev:?}");
        assert_eq!(last["data"]["status"], "stopped", "{sig}");
    }
    // Gone within the bound: the CLI, the launcher, every sleep.
    let bound = Duration::from_secs(20);
    let left = loop {
        let left = format!(
            "{}{}{}",
            running(sb, marker),
            running(sb, "agent-launch"),
            running(sb, cli)
        );
        if left.is_empty() || stopped.elapsed() > bound {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        left.is_empty(),
        "{sig}: still running after {bound:?}:\n{left}"
    );
    eprintln!(
        "{sig}: the tree was gone {:?} after the signal",
        stopped.elapsed()
    );
}
