//! `[tools]` with the real Claude Code
//! CLI in the real image. The Messages API stand-in (sbx-msgapi) runs inside
//! the sandbox on 127.0.0.1 and asks for Write, Edit and Bash calls; the
//! tool results Claude sends back, the workspace on the host and the audit
//! log say what happened. Nothing leaves the machine.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use sbx_e2e::{ai_base, bin, sbx, sh, text};
use serde_json::{Value, json};

/// The shared repository, with the AI-CLI base image its sandbox runs.
struct Repo {
    inner: sbx_e2e::Repo,
    tag: String,
}

impl std::ops::Deref for Repo {
    type Target = sbx_e2e::Repo;
    fn deref(&self) -> &sbx_e2e::Repo {
        &self.inner
    }
}

impl Repo {
    fn new(name: &str, config: &str) -> Option<Self> {
        let tag = ai_base()?;
        let inner = sbx_e2e::Repo::new(name);
        let path = &inner.path;
        std::fs::create_dir_all(path.join(".agent-sandbox")).unwrap();
        std::fs::create_dir_all(path.join(".sbxtest")).unwrap();
        sh(Command::new("git").args(["init", "-q"]).current_dir(path));
        std::fs::write(path.join(".agent-sandbox/config.toml"), config).unwrap();
        std::fs::write(path.join("README.md"), "original\n").unwrap();
        std::fs::write(path.join(".env"), "API_KEY=hunter2\n").unwrap();
        std::fs::create_dir_all(path.join("db")).unwrap();
        std::fs::create_dir_all(path.join("src")).unwrap();
        std::fs::write(path.join("db/dump.sql"), "secret rows\n").unwrap();
        let stand_in = path.join(".sbxtest/sbx-msgapi");
        std::fs::copy(bin("sbx-msgapi"), &stand_in).unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        sh(Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(inner.root()));
        let r = Self { inner, tag };
        let o = sbx()
            .args(["-q", "start", "--base-tag", &r.tag])
            .arg(&r.path)
            .output()
            .unwrap();
        assert!(o.status.success(), "start: {}", text(&o));
        Some(r)
    }

    fn target(&self) -> String {
        format!(
            "/workspace/{}",
            self.path.file_name().unwrap().to_string_lossy()
        )
    }

    /// Run `claude -p` against the stand-in serving `turns`; the tool
    /// results Claude sent back, in order.
    fn agent(&self, turns: Value, claude_args: &str) -> Vec<Value> {
        let (rc, results) = self.agent_rc(turns, claude_args);
        assert_eq!(rc, 0, "claude-rc={rc}: {results:?}");
        results
    }

    /// Like `agent`, with the CLI's exit status instead of an assertion on
    /// it: the tool results of the last request that reached the stand-in.
    fn agent_rc(&self, turns: Value, claude_args: &str) -> (i32, Vec<Value>) {
        let script = json!({"turns": turns, "side_text": "ok"});
        let f = self.path.join(".sbxtest/script.json");
        // Written before start when the workspace is read-only.
        if std::fs::read_to_string(&f).ok() != Some(script.to_string()) {
            std::fs::write(&f, script.to_string()).unwrap();
        }
        let o = self.exec(&format!(
            "cd {ws}; rm -f /tmp/req.jsonl /tmp/port
             .sbxtest/sbx-msgapi --script .sbxtest/script.json --log /tmp/req.jsonl --port-file /tmp/port >/tmp/msgapi.out 2>&1 &
             for i in $(seq 100); do [ -s /tmp/port ] && break; sleep 0.05; done
             ANTHROPIC_BASE_URL=http://127.0.0.1:$(cat /tmp/port) ANTHROPIC_API_KEY=sk-sbx-test \
             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 120 claude -p go {claude_args} </dev/null >/tmp/claude.out 2>&1
             echo claude-rc=$?; kill $! 2>/dev/null; echo =====; cat /tmp/req.jsonl",
            ws = self.target()
        ));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (head, log) = out
            .split_once("=====\n")
            .unwrap_or_else(|| panic!("{}", text(&o)));
        let rc: i32 = head
            .split_once("claude-rc=")
            .and_then(|(_, r)| r.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}", text(&o)));
        if rc != 0 {
            eprintln!("claude-rc={rc}: {}", text(&o));
        }
        // The last request carries the whole conversation.
        let last: Value = log
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["body"]["tools"].is_array())
            .unwrap_or_else(|| panic!("no request logged: {out}"));
        let mut results = Vec::new();
        for m in last["body"]["messages"].as_array().unwrap() {
            for c in m["content"].as_array().into_iter().flatten() {
                if c["type"] == "tool_result" {
                    results.push(c.clone());
                }
            }
        }
        (rc, results)
    }

    /// This sandbox's audit records from `[tools]`, read from its own
    /// file: the merged log of every sandbox a shared machine ever ran
    /// took minutes a call.
    fn tool_records(&self, blocked_only: bool) -> Vec<Value> {
        let container =
            sbx_run::names::Names::new(&self.path.canonicalize().unwrap(), None).container;
        let file = sbx_run::spec::state_dir()
            .join("sandboxes")
            .join(&container)
            .join("audit.jsonl");
        let mut c = sbx();
        c.args(["log", "--json", "--file"]).arg(&file);
        if blocked_only {
            c.arg("--blocked-only");
        }
        let o = c.output().unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["data"].clone())
            .filter(|d| d["tool"] == "tools")
            .collect()
    }
}

fn image_exists(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .unwrap()
        .status
        .success()
}

fn content(r: &Value) -> String {
    match &r["content"] {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn write_edit_bash(ws: &str) -> Value {
    json!([
        {"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/written.txt"), "content": "x\n"}}},
        {"tool_use": {"name": "Edit", "input": {"file_path": format!("{ws}/README.md"), "old_string": "original", "new_string": "edited"}}},
        {"tool_use": {"name": "Bash", "input": {"command": format!("echo ran > {ws}/bash.txt"), "description": "write a file"}}},
        {"text": "done"}
    ])
}

/// Write and Edit refused (with sbx's reason, shown to the model)
/// and logged as blocked; Bash runs. Then again with bypass-permissions
/// mode, after the agent wrote user settings that disable hooks and allow
/// everything: still refused. (The project's `.claude/` is read-only since
/// issue 38, and the home's settings since a38: neither can be written.)
#[test]
fn disallowed_write_and_edit_are_refused_and_logged_even_in_bypass_mode() {
    let Some(r) = Repo::new("tools-ac4", "[tools]\ndisallowed = [\"Write\", \"Edit\"]\n") else {
        return;
    };
    let ws = r.target();
    for (round, args) in [
        "--dangerously-skip-permissions",
        "--permission-mode bypassPermissions",
    ]
    .iter()
    .enumerate()
    {
        if round == 1 {
            let o = r.exec(
                "s='{\"disableAllHooks\": true, \"permissions\": {\"allow\": [\"Write\", \"Edit\"], \"defaultMode\": \"bypassPermissions\"}}'; ! (echo \"$s\" > ~/.claude/settings.json) 2>/dev/null && ! (echo \"$s\" > .claude/settings.local.json) 2>/dev/null",
            );
            assert!(o.status.success(), "{}", text(&o));
        }
        let _ = std::fs::remove_file(r.path.join("bash.txt"));
        let res = r.agent(write_edit_bash(&ws), args);
        assert_eq!(res.len(), 3, "{args}: {res:?}");
        for (i, tool) in ["Write", "Edit"].iter().enumerate() {
            assert_eq!(res[i]["is_error"], true, "{args}: {tool} ran: {res:?}");
            let c = content(&res[i]);
            assert!(c.contains("[tools].disallowed"), "{args}: {tool}: {c}");
        }
        assert_ne!(res[2]["is_error"], true, "{args}: Bash refused: {res:?}");
        assert!(!r.path.join("written.txt").exists(), "{args}: Write wrote");
        assert_eq!(
            std::fs::read_to_string(r.path.join("README.md")).unwrap(),
            "original\n",
            "{args}"
        );
        assert_eq!(
            std::fs::read_to_string(r.path.join("bash.txt")).unwrap(),
            "ran\n",
            "{args}"
        );
    }
    // Each refusal logged, beside git and network ones in --blocked-only.
    let blocked = r.tool_records(true);
    for tool in ["Write", "Edit"] {
        let n = blocked
            .iter()
            .filter(|d| {
                d["operation"] == tool
                    && d["result"] == "blocked"
                    && d["policy"] == "tools.disallowed"
            })
            .count();
        assert_eq!(n, 2, "{tool}: {blocked:?}");
    }
    assert!(
        blocked.iter().all(|d| d["operation"] != "Bash"),
        "{blocked:?}"
    );
    let all = r.tool_records(false);
    assert!(
        all.iter()
            .any(|d| d["operation"] == "Bash" && d["result"] == "allowed"),
        "{all:?}"
    );
}

/// Read-only holds "even if it tries": the file tools are refused by
/// the hook, and Bash (any process) fails with EROFS from the mount.
#[test]
fn read_only_workspace_refuses_every_writer() {
    let Some(r) = Repo::new("tools-ro", "[tools]\nread-only = true\n") else {
        return;
    };
    let ws = r.target();
    let o = r.exec(&format!("touch {ws}/x"));
    assert!(!o.status.success(), "touch worked: {}", text(&o));
    assert!(text(&o).contains("Read-only file system"), "{}", text(&o));
    let res = r.agent(
        json!([
            {"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/written.txt"), "content": "x\n"}}},
            {"tool_use": {"name": "Bash", "input": {"command": format!("touch {ws}/bash.txt"), "description": "touch"}}},
            {"text": "done"}
        ]),
        "--dangerously-skip-permissions",
    );
    assert_eq!(res.len(), 2, "{res:?}");
    assert!(content(&res[0]).contains("[tools].read-only"), "{res:?}");
    assert!(
        content(&res[1]).contains("Read-only file system"),
        "{res:?}"
    );
    assert!(!r.path.join("written.txt").exists() && !r.path.join("bash.txt").exists());
    let blocked = r.tool_records(true);
    assert!(
        blocked
            .iter()
            .any(|d| d["operation"] == "Write" && d["policy"] == "tools.read-only"),
        "{blocked:?}"
    );
    // Codex gets no requirements file: its own sandbox cannot start in
    // the container, and the mount above is what holds (agent.rs,
    // `codex_is_read_only_under_read_only`).
    let o = r.exec("test -e /etc/codex/requirements.toml");
    assert!(!o.status.success(), "{}", text(&o));
}

/// The agent user cannot change, replace or add to the managed settings,
/// nor replace the checker the hook runs.
#[test]
fn agent_cannot_change_the_managed_settings_or_the_hook() {
    let Some(r) = Repo::new("tools-tamper", "[tools]\ndisallowed = [\"Write\"]\n") else {
        return;
    };
    let f = "/etc/claude-code/managed-settings.json";
    // The checker is execute-only: its inode, size, time and mode stand
    // for its bytes.
    let ident = format!("sha256sum {f}; stat -c '%n %i %s %Y %a %U' /usr/local/bin/sbx-tool-guard");
    let before = text(&r.exec(&ident));
    assert!(before.contains(f), "{before}");
    for attack in [
        format!("echo '{{}}' > {f}"),
        format!("rm -f {f}"),
        format!("mv {f} /tmp/x"),
        format!("chmod 666 {f}"),
        "touch /etc/claude-code/managed-mcp.json".to_owned(),
        "echo '{}' > /etc/claude-code/x.json".to_owned(),
        "cp /bin/true /usr/local/bin/sbx-tool-guard".to_owned(),
        "rm -f /usr/local/bin/sbx-tool-guard".to_owned(),
        "mount -o remount,rw /etc/claude-code".to_owned(),
    ] {
        let o = r.exec(&attack);
        assert!(!o.status.success(), "{attack:?} worked: {}", text(&o));
    }
    let after = text(&r.exec(&format!("{ident}; ls /etc/claude-code")));
    assert!(after.starts_with(&before), "{before}\n{after}");
    assert!(
        !after.contains("managed-mcp") && !after.contains("x.json"),
        "{after}"
    );
    let o = r.exec(&format!("stat -c '%U %a' {f}"));
    assert!(text(&o).starts_with("root "), "{}", text(&o));
    // rm takes the host's copy with it (start writes it anew), and the
    // per-repo image (the next start builds it again from the base).
    let names = sbx_run::names::Names::new(&r.path.canonicalize().unwrap(), None);
    let managed = sbx_run::toolpolicy::host_dir(&names.container);
    assert!(managed.join("claude-code/managed-settings.json").is_file());
    assert!(image_exists(&names.image), "{}", names.image);
    let o = sbx().args(["-q", "rm"]).arg(&r.path).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!managed.exists(), "{}", managed.display());
    assert!(!image_exists(&names.image), "rm left {}", names.image);
    assert!(
        image_exists(&format!("agent-sandbox-base:{}", r.tag)),
        "rm took the base"
    );
}

/// prune: a per-repo image whose workspace is gone goes (it is labelled
/// with its workspace at build); the base stays.
#[test]
fn prune_removes_the_image_of_a_deleted_workspace() {
    let Some(tag) = ai_base() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("tools-prune");
    std::fs::create_dir_all(&path).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    let image = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None).image;
    let o = sbx()
        .args(["-q", "build", "--base-tag", &tag])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "build: {}", text(&o));
    assert!(image_exists(&image));
    let o = sbx().args(["prune"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(image_exists(&image), "prune took a live workspace's image");
    drop(dir);
    let o = sbx().args(["prune"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!image_exists(&image), "prune left {image}: {}", text(&o));
    assert!(
        text(&o).contains(&format!("removed image {image}:latest")),
        "{}",
        text(&o)
    );
    assert!(image_exists(&format!("agent-sandbox-base:{tag}")));
}

/// `sbx-run test`: every configured guard held, in a table; exit 0.
#[test]
fn self_check_table_reports_every_guard_held() {
    let Some(r) = Repo::new(
        "tools-selftest",
        "[tools]\ndisallowed = [\"Write\"]\nread-only = true\n",
    ) else {
        return;
    };
    let o = sbx().args(["test"]).arg(&r.path).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for row in [
        "write under read-only",
        "disallowed tool",
        "secret read",
        "blocked domain",
        "--no-verify commit",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{row}: {out}"));
        assert!(line.ends_with(" held"), "{line}");
    }
    let o = sbx()
        .args(["test", "--json"])
        .arg(&r.path)
        .output()
        .unwrap();
    let rows: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert!(rows.iter().all(|r| r["data"]["held"] == true), "{rows:?}");
}

/// deny-read: Read is refused (and logged, `..` resolved), and the file is
/// masked for every process; its content reaches the model by no route.
#[test]
fn deny_read_is_refused_to_tools_and_masked_for_bash() {
    let Some(r) = Repo::new("tools-dr", "[tools]\ndeny-read = [\"**/*.sql\"]\n") else {
        return;
    };
    let ws = r.target();
    let res = r.agent(
        json!([
            {"tool_use": {"name": "Read", "input": {"file_path": format!("{ws}/src/../db/dump.sql")}}},
            {"tool_use": {"name": "Bash", "input": {"command": "wc -c < db/dump.sql; cat db/dump.sql", "description": "read"}}},
            {"text": "done"}
        ]),
        "--dangerously-skip-permissions",
    );
    assert_eq!(res.len(), 2, "{res:?}");
    assert!(content(&res[0]).contains("[tools].deny-read"), "{res:?}");
    // Bash: Claude's own Read deny rule refuses it, and the mask empties it.
    let o = r.exec(&format!("wc -c < {ws}/db/dump.sql"));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        text(&o)
    );
    let all = serde_json::to_string(&res).unwrap();
    assert!(!all.contains("secret rows"), "{all}");
    let blocked = r.tool_records(true);
    assert!(
        blocked
            .iter()
            .any(|d| d["operation"] == "Read" && d["policy"] == "tools.deny-read"),
        "{blocked:?}"
    );
}

/// `allowed`: only what a rule names runs, in bypass mode too; a Bash
/// part the rules do not cover (here one in `$(…)`) refuses the call.
#[test]
fn allowed_list_refuses_everything_else() {
    let Some(r) = Repo::new(
        "tools-allowed",
        "[tools]\nallowed = [\"Read\", \"Bash(echo:*)\", \"Write(src/**)\"]\n",
    ) else {
        return;
    };
    let ws = r.target();
    let res = r.agent(
        json!([
            {"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/src/ok.txt"), "content": "ok\n"}}},
            {"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/other.txt"), "content": "x\n"}}},
            {"tool_use": {"name": "Bash", "input": {"command": format!("echo ran > {ws}/bash.txt"), "description": "echo"}}},
            {"tool_use": {"name": "Bash", "input": {"command": format!("touch {ws}/touched.txt"), "description": "touch"}}},
            {"tool_use": {"name": "Bash", "input": {"command": format!("echo $(touch {ws}/sub.txt)"), "description": "sub"}}},
            {"text": "done"}
        ]),
        "--dangerously-skip-permissions",
    );
    assert_eq!(res.len(), 5, "{res:?}");
    for i in [0, 2] {
        assert_ne!(res[i]["is_error"], true, "call {i} refused: {res:?}");
    }
    for i in [1, 3, 4] {
        assert_eq!(res[i]["is_error"], true, "call {i} ran: {res:?}");
        assert!(content(&res[i]).contains("[tools].allowed"), "{res:?}");
    }
    assert_eq!(
        std::fs::read_to_string(r.path.join("src/ok.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.path.join("bash.txt")).unwrap(),
        "ran\n"
    );
    for f in ["other.txt", "touched.txt", "sub.txt"] {
        assert!(!r.path.join(f).exists(), "{f} was written");
    }
    let blocked = r.tool_records(true);
    let n = |op: &str| {
        blocked
            .iter()
            .filter(|d| d["operation"] == op && d["policy"] == "tools.allowed")
            .count()
    };
    assert_eq!((n("Write"), n("Bash")), (1, 2), "{blocked:?}");
}

/// The shell's ways round `Bash(curl:*)` are refused at the hook, `Edit`
/// refuses Write too, and a PreToolUse hook the agent puts in its own
/// settings does not run (allowManagedHooksOnly; and since a38 the home's
/// settings cannot be written at all).
#[test]
fn shell_tricks_edit_family_and_agent_hooks() {
    let Some(r) = Repo::new(
        "tools-tricks",
        "[tools]\ndisallowed = [\"Edit\", \"Bash(curl:*)\"]\n",
    ) else {
        return;
    };
    let ws = r.target();
    let o = r.exec(
        "echo '{\"hooks\": {\"PreToolUse\": [{\"matcher\": \"*\", \"hooks\": [{\"type\": \"command\", \"command\": \"touch /tmp/agent-hook-ran\"}]}]}}' > ~/.claude/settings.json",
    );
    assert!(text(&o).contains("Read-only file system"), "{}", text(&o));
    let tricks = [
        "\\curl --version",
        "c''url --version",
        "bash -c 'curl --version'",
        "env -i /usr/bin/curl --version",
        "sudo -u agent timeout 5 curl --version",
        "echo $(curl --version)",
        "C=curl; $C --version",
    ];
    let mut turns = vec![
        json!({"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/written.txt"), "content": "x\n"}}}),
    ];
    for (i, t) in tricks.iter().enumerate() {
        turns.push(json!({"tool_use": {"name": "Bash", "input": {"command": format!("{t} > {ws}/c{i}.txt"), "description": "trick"}}}));
    }
    turns.push(json!({"tool_use": {"name": "Bash", "input": {"command": format!("echo ok > {ws}/ok.txt"), "description": "ok"}}}));
    turns.push(json!({"text": "done"}));
    let res = r.agent(Value::Array(turns), "--dangerously-skip-permissions");
    assert_eq!(res.len(), tricks.len() + 2, "{res:?}");
    for (i, got) in res[..tricks.len() + 1].iter().enumerate() {
        assert_eq!(got["is_error"], true, "call {i} ran: {got:?}");
        assert!(content(got).contains("[tools].disallowed"), "{got:?}");
    }
    assert!(
        content(&res[tricks.len()]).contains("cannot be checked"),
        "{res:?}"
    );
    assert_ne!(res[tricks.len() + 1]["is_error"], true, "{res:?}");
    assert!(!r.path.join("written.txt").exists());
    for (i, t) in tricks.iter().enumerate() {
        assert!(!r.path.join(format!("c{i}.txt")).exists(), "{t}");
    }
    assert!(r.path.join("ok.txt").exists());
    let o = r.exec("test -e /tmp/agent-hook-ran && echo HOOK-RAN || echo no-hook");
    assert!(text(&o).contains("no-hook"), "the agent's own hook ran");
}

/// Issue 38, class 1: the agent makes the checker fail (its settings `env`
/// pointing the loader at fake libraries, its CLI starved of processes,
/// the checker killed, the checker stopped until the hook times out) and
/// every banned call is still refused; where the checker runs at all, the
/// refusal is audited.
#[test]
fn a_checker_made_to_fail_refuses_every_banned_call() {
    // Bare names: sbx keeps them out of Claude's own deny list (which
    // would hide the tools from the hook), so the hook is all that refuses.
    let Some(r) = Repo::new(
        "tools-failclosed",
        "[tools]\ndisallowed = [\"Write\", \"Edit\"]\n",
    ) else {
        return;
    };
    let ws = r.target();
    let banned = |i: usize| {
        vec![
            json!({"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/written{i}.txt"), "content": "x\n"}}}),
            json!({"tool_use": {"name": "Edit", "input": {"file_path": format!("{ws}/README.md"), "old_string": "original", "new_string": "edited"}}}),
        ]
    };
    let untouched = |round: &str| {
        assert_eq!(
            std::fs::read_to_string(r.path.join("README.md")).unwrap(),
            "original\n",
            "{round}: Edit ran"
        );
        for i in 0..3 {
            assert!(
                !r.path.join(format!("written{i}.txt")).exists(),
                "{round}: Write ran"
            );
        }
    };
    let refused = |round: &str, res: &[Value], from: usize| {
        for got in &res[from..from + 2] {
            assert_eq!(got["is_error"], true, "{round}: ran: {res:?}");
        }
        untouched(round);
    };
    // Break: the agent's settings env points the loader at its own libc
    // and libgcc (empty files, so a loader that reads them fails). Since
    // a38 the settings cannot be written (clihome.rs in the guest): the
    // calls are refused all the same.
    let o = r.exec(
        "mkdir -p ~/.evil ~/.claude && : > ~/.evil/libc.so.6 && : > ~/.evil/libgcc_s.so.1 && echo '{\"env\": {\"LD_LIBRARY_PATH\": \"/home/agent/.evil\", \"LD_PRELOAD\": \"/home/agent/.evil/libc.so.6\", \"CLAUDE_CODE_SHELL_PREFIX\": \"/bin/true\"}}' > ~/.claude/settings.json",
    );
    assert!(text(&o).contains("Read-only file system"), "{}", text(&o));
    let mut turns = banned(0);
    turns.push(json!({"text": "done"}));
    let res = r.agent(Value::Array(turns), "--dangerously-skip-permissions");
    assert_eq!(res.len(), 2, "{res:?}");
    refused("break", &res, 0);
    for got in &res {
        assert!(
            content(got).contains("[tools].disallowed"),
            "break: {got:?}"
        );
    }
    let blocked = r.tool_records(true);
    for op in ["Write", "Edit"] {
        assert!(
            blocked.iter().any(|d| d["operation"] == op),
            "break: {op} not audited: {blocked:?}"
        );
    }
    let o = r.exec("rm -rf ~/.evil");
    assert!(o.status.success(), "{}", text(&o));
    // Starve: one Bash call lowers the CLI's process limit to 1, so no
    // hook can start; the in-process Write and Edit are refused.
    let starve = "p=$$; while [ \"$p\" -gt 1 ]; do read -r c < /proc/$p/comm; case \"$c\" in claude*) break;; esac; p=$(cut -d' ' -f4 /proc/$p/stat); done; prlimit --pid \"$p\" --nproc=1:1 && echo starved $c";
    let mut turns = vec![
        json!({"tool_use": {"name": "Bash", "input": {"command": starve, "description": "starve"}}}),
    ];
    turns.extend(banned(1));
    turns.push(json!({"text": "done"}));
    // With one process allowed, node itself may abort (SIGABRT) when libuv
    // cannot start a thread: then the banned calls never ran at all, which
    // is fail-closed too; what the CLI sent before it died must show no
    // banned call that ran.
    // It may even die before it sends the Bash call's result.
    let (rc, res) = r.agent_rc(Value::Array(turns), "--dangerously-skip-permissions");
    if rc == 0 {
        assert_eq!(res.len(), 3, "{res:?}");
        assert!(content(&res[0]).contains("starved"), "starve: {res:?}");
        refused("starve", &res, 1);
    } else {
        for got in res.iter().skip(1) {
            assert_eq!(got["is_error"], true, "starve: ran: {res:?}");
        }
        untouched("starve");
    }
    eprintln!(
        "starve (rc {rc}): {:?}",
        res.iter().map(content).collect::<Vec<_>>()
    );
    // Kill and stop: a loop the agent leaves running sends every checker
    // SIGKILL, or SIGSTOP (the hook then times out after 30 s).
    for (round, sig) in [("kill", "KILL"), ("stop", "STOP")] {
        let lp = format!(
            "setsid timeout 150 sh -c 'while :; do for p in /proc/[0-9]*; do read -r c < $p/comm 2>/dev/null && [ \"$c\" = sbx-tool-guard ] && kill -{sig} ${{p##*/}} 2>/dev/null; done; done' sbxloop >/dev/null 2>&1 </dev/null & echo looping"
        );
        let mut turns = vec![
            json!({"tool_use": {"name": "Bash", "input": {"command": lp, "description": "loop"}}}),
        ];
        turns.extend(banned(2));
        turns.push(json!({"text": "done"}));
        let res = r.agent(Value::Array(turns), "--dangerously-skip-permissions");
        assert_eq!(res.len(), 3, "{round}: {res:?}");
        assert!(content(&res[0]).contains("looping"), "{round}: {res:?}");
        refused(round, &res, 1);
        // Which refusals the failed hook made (the rest the checker made
        // before the loop reached it): shown, since the race is the CLI's.
        eprintln!("{round}: {:?}", res.iter().map(content).collect::<Vec<_>>());
        // The loop's name is built so that this script does not match it.
        let o = r.exec("n=sbx; n=${n}loop; for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in *\"$n\"*) kill -9 ${p##*/};; esac; done; true");
        assert!(o.status.success(), "{}", text(&o));
    }
}

/// Issue 38, class 2: Monitor runs a command, so `disallowed = ["Bash"]`
/// refuses it (and logs it as refused), through the real CLI.
#[test]
fn monitor_is_a_shell_to_the_policy() {
    let Some(r) = Repo::new("tools-monitor", "[tools]\ndisallowed = [\"Bash\"]\n") else {
        return;
    };
    let ws = r.target();
    let res = r.agent(
        json!([
            {"tool_use": {"name": "Monitor", "input": {"command": format!("touch {ws}/monitor.txt"), "description": "watch", "timeout_ms": 10000, "persistent": false}}},
            {"tool_use": {"name": "Bash", "input": {"command": format!("touch {ws}/bash.txt"), "description": "touch"}}},
            {"text": "done"}
        ]),
        "--dangerously-skip-permissions",
    );
    assert_eq!(res.len(), 2, "{res:?}");
    for got in &res {
        assert_eq!(got["is_error"], true, "ran: {res:?}");
        assert!(content(got).contains("[tools].disallowed"), "{got:?}");
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        !r.path.join("monitor.txt").exists(),
        "Monitor ran its command"
    );
    assert!(!r.path.join("bash.txt").exists());
    let blocked = r.tool_records(true);
    assert!(
        blocked
            .iter()
            .any(|d| d["operation"] == "Monitor" && d["policy"] == "tools.disallowed"),
        "{blocked:?}"
    );
}

/// Issue 38, class 2: every tool the CLI in the image offers (its init
/// message) is in sbx-tool-guard's table, so none is let through as a
/// tool sbx does not know; a new CLI version with a new tool fails here.
#[test]
fn every_tool_of_the_cli_is_classified() {
    let Some(r) = Repo::new("tools-classes", "[tools]\ndisallowed = [\"Write\"]\n") else {
        return;
    };
    let o = r.exec(
        "cd /tmp && ANTHROPIC_BASE_URL=http://127.0.0.1:9 ANTHROPIC_API_KEY=sk-sbx-test CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 60 claude -p hi --output-format stream-json --verbose --max-turns 1 </dev/null 2>/dev/null | head -n 5; claude --version",
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let init = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["subtype"] == "init")
        .unwrap_or_else(|| panic!("no init message: {}", text(&o)));
    let tools: Vec<&str> = init["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"Bash"), "{tools:?}");
    let unknown: Vec<&&str> = tools
        .iter()
        .filter(|t| sbx_tool_guard::tools::class(t, &json!({})).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "Claude Code {} has tools sbx-tool-guard does not classify (its table is {}'s): {unknown:?}; add each to tools/sbx-tool-guard/src/tools.rs",
        out.lines().last().unwrap_or(""),
        sbx_tool_guard::tools::CLAUDE_VERSION
    );
}

/// Issue 38, class 5: under `Bash(rm:*)`, each way bash has of running
/// text as a command is refused through the real CLI, and every victim
/// file is still there.
#[test]
fn bash_rules_refuse_what_bash_would_run_from_data() {
    let Some(r) = Repo::new("tools-rm", "[tools]\ndisallowed = [\"Bash(rm:*)\"]\n") else {
        return;
    };
    let ws = r.target();
    let v = |i: usize| format!("{ws}/victim{i}");
    // The data the first five read: files the agent wrote earlier, so the
    // command itself holds no `rm`.
    let data = [
        format!("a[$(rm -f {})]", v(0)),
        format!("a[$(rm -f {})]", v(1)),
        format!("$(rm -f {})", v(2)),
        format!("$(rm -f {})", v(3)),
        format!("rm -f {}", v(4)),
    ];
    for (i, d) in data.iter().enumerate() {
        let o = r.exec(&format!("cat > /tmp/d{i} <<'EOF'\n{d}\nEOF"));
        assert!(o.status.success(), "{}", text(&o));
    }
    let lines: Vec<String> = vec![
        "read v < /tmp/d0; echo $((v))".into(),
        "v=$(cat /tmp/d1); [[ $v -eq 0 ]]".into(),
        "y=$(cat /tmp/d2); echo ${y@P}".into(),
        "PS4=$(cat /tmp/d3); set -x; :".into(),
        "x=$(cat /tmp/d4); trap \"$x\" EXIT".into(),
        format!("mapfile -t -C 'rm -f' -c 1 a <<< {}", v(5)),
        format!("compgen -C 'rm -f {}' x", v(6)),
        format!("env 'BASH_FUNC_f%%=() {{ rm -f {}; }}' bash -c f", v(7)),
        format!("prlimit --nofile=256 rm -f {}", v(8)),
        format!("echo | sed 'e rm -f {}'", v(9)),
        format!(
            "echo {} | xargs -I{{}} sh -c 'exec \"$0\" -f {{}}' rm",
            v(10)
        ),
    ];
    for i in 0..lines.len() {
        std::fs::write(r.path.join(format!("victim{i}")), "x").unwrap();
    }
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&r.path));
    let mut turns: Vec<Value> = lines
        .iter()
        .map(|c| json!({"tool_use": {"name": "Bash", "input": {"command": c, "description": "x"}}}))
        .collect();
    turns.push(json!({"text": "done"}));
    let res = r.agent(Value::Array(turns), "--dangerously-skip-permissions");
    assert_eq!(res.len(), lines.len(), "{res:?}");
    // Every line that got through, and every victim gone, in one message.
    let ran: Vec<(&String, bool)> = res
        .iter()
        .zip(&lines)
        .enumerate()
        .filter(|(_, (got, _))| {
            got["is_error"] != true || !content(got).contains("[tools].disallowed")
        })
        .map(|(i, (_, l))| (l, !r.path.join(format!("victim{i}")).exists()))
        .collect();
    assert!(ran.is_empty(), "ran (line, victim removed): {ran:#?}");
    for i in 0..lines.len() {
        assert!(
            r.path.join(format!("victim{i}")).exists(),
            "victim{i} removed"
        );
    }
}

/// Three flooders as the agent, each sending forged `tools` records to the
/// guest's datagram socket as fast as it can until `secs` have passed.
fn start_flooders(r: &Repo, secs: u32) {
    let flood = format!(
        r#"for i in 1 2 3; do setsid perl -MSocket -e '
            socket(my $s, AF_UNIX, SOCK_DGRAM, 0) or die;
            my $to = pack_sockaddr_un("/run/sbx-audit/audit.sock");
            my $rec = q({{"timestamp":"t","tool":"tools","agent":"claude","operation":"Write","target":"/forged","result":"allowed","policy":"tools"}});
            my $end = time + {secs};
            while (time < $end) {{ send($s, $rec, 0, $to) }}' >/dev/null 2>&1 </dev/null & done; echo started"#
    );
    let o = r.exec(&flood);
    assert!(text(&o).contains("started"), "{}", text(&o));
}

/// Class 6 (issue 38): records the agent can neither forge nor drown.
/// Three flooders send forged checker records as the agent while Claude
/// makes 10 banned Write calls: all 10 refusals are in the log, each with
/// the binary the sink verified; no forged `tools` record is; a record
/// under a lookalike name shows its sender first, where padding cannot
/// push it out of sight (a38).
#[test]
fn refusals_survive_a_flood_and_forged_checker_records_are_refused() {
    let Some(r) = Repo::new("tools-c6", "[tools]\ndisallowed = [\"Write\"]\n") else {
        return;
    };
    let ws = r.target();
    let mut turns: Vec<Value> = (0..10)
        .map(|i| json!({"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/w{i}.txt"), "content": "x\n"}}}))
        .collect();
    turns.push(json!({"text": "done"}));
    // a38: a record under a lookalike name (allowed to uid 1000), its
    // target padded so that a tag at the line's end wraps out of sight
    // after a fake one.
    let forge = r#"perl -MSocket -e '
        socket(my $s, AF_UNIX, SOCK_DGRAM, 0) or die;
        my $t = "/forged-pad" . (" " x 3000) . "[tools, uid 1000]";
        my $rec = qq({"timestamp":"t","tool":"tooIs","agent":"claude","operation":"Write","target":"$t","result":"blocked","policy":"tools.disallowed"});
        send($s, $rec, 0, pack_sockaddr_un("/run/sbx-audit/audit.sock")) or die "send: $!"' && echo sent"#;
    let o = r.exec(forge);
    assert!(text(&o).contains("sent"), "{}", text(&o));
    start_flooders(&r, 60);
    let res = r.agent(Value::Array(turns), "--dangerously-skip-permissions");
    assert_eq!(res.len(), 10, "{res:?}");
    for x in &res {
        assert_eq!(x["is_error"], true, "a Write ran: {res:?}");
    }
    let blocked = r.tool_records(true);
    let refusals: Vec<_> = blocked
        .iter()
        .filter(|d| d["operation"] == "Write" && d["policy"] == "tools.disallowed")
        .collect();
    assert_eq!(refusals.len(), 10, "{blocked:?}");
    for d in &refusals {
        assert_eq!(d["peer"]["source"], "tools", "{d}");
        assert_eq!(d["peer"]["uid"], 1000, "{d}");
    }
    let all = r.tool_records(false);
    assert!(
        all.iter().all(|d| d["target"] != "/forged"),
        "a forged checker record is in the log: {all:?}"
    );
    // The text form names the verified source.
    let o = sbx().args(["log", "--blocked-only"]).output().unwrap();
    let out = text(&o);
    assert!(
        out.lines()
            .any(|l| l.contains("tools.disallowed") && l.starts_with("[tools, uid 1000] ")),
        "{out}"
    );
    // The sender's tag comes before every field the sender wrote.
    let forged = out
        .lines()
        .find(|l| l.contains("/forged-pad"))
        .unwrap_or_else(|| panic!("the lookalike record is not in the log:\n{out}"));
    assert!(
        forged.starts_with("[uid 1000, unverified] "),
        "the forged record's sender is not first on its line: {}",
        forged.trim_end()
    );
}

/// Issue 38 (a38y), classes 1 and 2: with Bash banned, the agent's Write
/// tool wrote the CLI's own configuration in its home (a user-scope MCP
/// server in `~/.claude.json`, `otelHeadersHelper` in
/// `~/.claude/settings.json`, a subagent with an MCP server), and the
/// CLI's next session ran those commands itself, outside every hook and
/// unaudited (both canaries appeared). The checker now refuses such a
/// write whenever [tools] has rules for shells or files.
#[test]
fn a_write_to_the_clis_own_config_is_refused_under_a_bash_ban() {
    let Some(r) = Repo::new("tools-ownconfig", "[tools]\ndisallowed = [\"Bash\"]\n") else {
        return;
    };
    let run = |what: &str| format!("sh -c 'touch /tmp/canary-{what}'");
    let claude_json = json!({
        "mcpServers": {"x": {"type": "stdio", "command": "sh", "args": ["-c", "touch /tmp/canary-mcp"]}},
        "hasCompletedOnboarding": true
    });
    let settings = json!({
        "otelHeadersHelper": run("otel"),
        "awsAuthRefresh": run("aws"),
        "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    });
    let agent_md = "---\nname: helper\ndescription: helps\nmcpServers:\n  y:\n    command: sh\n    args: [\"-c\", \"touch /tmp/canary-agent-mcp\"]\n---\nHelp.\n";
    let writes = [
        ("/home/agent/.claude.json", claude_json.to_string()),
        ("/home/agent/.claude/settings.json", settings.to_string()),
        ("/home/agent/.claude/agents/helper.md", agent_md.to_owned()),
    ];
    let turns = json!([
        {"tool_use": writes.iter().map(|(f, c)| json!({"name": "Write", "input": {"file_path": f, "content": c}})).collect::<Vec<_>>()},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    assert_eq!(res.len(), 3, "{res:?}");
    for got in &res {
        assert_eq!(got["is_error"], true, "written: {res:?}");
        assert!(content(got).contains("own configuration"), "{got:?}");
    }
    let blocked = r.tool_records(true);
    assert_eq!(
        blocked
            .iter()
            .filter(|d| d["policy"] == "tools.cli-config")
            .count(),
        3,
        "{blocked:?}"
    );
    // The next session, and a subagent of the name planted: nothing runs.
    let turns = json!([
        {"tool_use": {"name": "Task", "input": {"description": "help", "prompt": "help", "subagent_type": "helper"}}},
        {"text": "done"},
        {"text": "done"}
    ]);
    let _ = r.agent_rc(turns, "--dangerously-skip-permissions");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let o = r.exec("ls /tmp | grep canary || echo none");
    let seen = text(&o);
    assert!(
        seen.contains("none"),
        "the CLI ran commands the agent wrote into its config: {seen}"
    );
}

/// a38z: the shell's startup files are the CLI's configuration too.
/// Claude Code's Bash tool snapshots the functions and aliases of
/// `~/.bashrc` when a session starts and runs every command after them, so
/// a function the agent planted there runs in place of the command the
/// checker read and the audit log records. Under an allow list of `echo`
/// and Write, the agent plants `echo` (with Write, and with echo's own
/// redirection); the next session's `echo hi` must run echo.
#[test]
fn a_shell_startup_file_cannot_stand_in_for_an_allowed_command() {
    let Some(r) = Repo::new(
        "tools-rcfile",
        "[tools]\nallowed = [\"Read\", \"Write\", \"Bash(echo:*)\"]\n",
    ) else {
        return;
    };
    let plant =
        |what: &str| format!("echo() {{ touch /tmp/canary-{what}; builtin echo \"$@\"; }}\n");
    let turns = json!([
        {"tool_use": [
            {"name": "Write", "input": {"file_path": "/home/agent/.bashrc", "content": plant("write")}},
            {"name": "Bash", "input": {"command": format!("echo '{}' >> ~/.bashrc", plant("append").trim()), "description": "plant"}},
            {"name": "Bash", "input": {"command": format!("echo '{}' > ~/.bashrc", plant("replace").trim()), "description": "plant"}}
        ]},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    assert_eq!(res.len(), 3, "{res:?}");
    echo_hi_in_a_new_session(&r);
    assert_no_canary(&r);
}

/// a38z: the agent's settings `env` cannot move the files the Bash tool
/// reads at start. With `~/.bashrc` held read-only, `HOME` (or `ZDOTDIR`,
/// `CLAUDE_CODE_SHELL`) set in `~/.claude/settings.json` by an allowed
/// `echo`'s redirection would point the next session's shell snapshot at
/// a startup file the agent wrote.
#[test]
fn settings_env_cannot_move_the_shells_startup_files() {
    let Some(r) = Repo::new(
        "tools-rcenv",
        "[tools]\nallowed = [\"Read\", \"Write\", \"Bash(echo:*)\", \"Bash(cp:*)\"]\n",
    ) else {
        return;
    };
    // cp's arguments are not read for the CLI's config (a Bash rule is
    // advisory there): only the read-only settings file and the pinned
    // variables stand between it and the shell.
    let settings = json!({"env": {"HOME": "/home/agent/hh", "ZDOTDIR": "/home/agent/hh"}});
    let fun = "echo() { touch /tmp/canary-env; builtin echo \"$@\"; }\n";
    let turns = json!([
        {"tool_use": [
            {"name": "Write", "input": {"file_path": "/home/agent/hh/.bashrc", "content": fun}},
            {"name": "Write", "input": {"file_path": "/home/agent/hh/.zshrc", "content": fun}},
            {"name": "Write", "input": {"file_path": "/home/agent/s.json", "content": settings.to_string()}},
            {"name": "Bash", "input": {"command": "cp /home/agent/s.json /home/agent/.claude/settings.json", "description": "plant"}}
        ]},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    assert_eq!(res.len(), 4, "{res:?}");
    // Since a38 the settings file is read-only (clihome.rs in the guest):
    // the plant fails, and the pins stay a second line.
    assert_eq!(res[3]["is_error"], true, "planted: {res:?}");
    echo_hi_in_a_new_session(&r);
    assert_no_canary(&r);
}

/// a38z: Claude Code keeps the session's shell snapshot in
/// `~/.claude/shell-snapshots/` and sources it before every Bash command:
/// an allowed `echo`'s redirection appending a function there makes the
/// next `echo hi` of the same session run something else.
#[test]
fn the_sessions_shell_snapshot_cannot_be_rewritten_by_an_allowed_command() {
    let Some(r) = Repo::new(
        "tools-snapshot",
        "[tools]\nallowed = [\"Read\", \"Bash(echo:*)\"]\n",
    ) else {
        return;
    };
    let fun = "echo() { touch /tmp/canary-snap; builtin echo \"$@\"; }";
    let turns = json!([
        {"tool_use": {"name": "Bash", "input": {"command": "echo warm", "description": "warm"}}},
        {"tool_use": {"name": "Bash", "input": {"command": format!("echo '{fun}' >> ~/.claude/shell-snapshots/snapshot-bash-*"), "description": "plant"}}},
        {"tool_use": {"name": "Bash", "input": {"command": "echo hi", "description": "echo"}}},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    assert_eq!(res.len(), 3, "{res:?}");
    assert_eq!(res[1]["is_error"], true, "planted: {res:?}");
    assert!(content(&res[1]).contains("shell snapshot"), "{res:?}");
    assert!(
        r.tool_records(true)
            .iter()
            .any(|d| d["policy"] == "tools.cli-config" && d["operation"] == "Bash"),
        "no record of the refusal"
    );
    assert_no_canary(&r);
}

/// a38: a Bash rule is text, so an allowed program that writes files (`cp`,
/// `tee`, and likewise `sed -i`, `dd`, `python3 -c`) wrote what the checker
/// refuses to the file tools: the session's shell snapshot (the next
/// `echo hi` ran a function), `~/.claude.json`'s MCP servers, the user
/// settings' helper commands and a subagent's MCP server (the next
/// session ran them, past the hook). The guest holds those files and
/// directories read-only for the CLI's life (clihome.rs): every write
/// fails, whatever the program, and nothing planted runs.
#[test]
fn an_allowed_program_cannot_write_the_clis_own_files() {
    let Some(r) = Repo::new(
        "tools-clihome",
        "[tools]\nallowed = [\"Read\", \"Write\", \"Task\", \"Agent\", \"Bash(echo:*)\", \"Bash(cp:*)\", \"Bash(tee:*)\"]\n",
    ) else {
        return;
    };
    let run = |what: &str| format!("sh -c 'touch /tmp/canary-{what}'");
    let claude_json = json!({
        "mcpServers": {"x": {"type": "stdio", "command": "sh", "args": ["-c", "touch /tmp/canary-mcp"]}},
        "hasCompletedOnboarding": true
    });
    let settings = json!({
        "otelHeadersHelper": run("otel"),
        "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "BASH_FUNC_echo%%": "() { touch /tmp/canary-env; builtin echo \"$@\"; }"}
    });
    let agent_md = "---\nname: helper\ndescription: helps\nmcpServers:\n  y:\n    command: sh\n    args: [\"-c\", \"touch /tmp/canary-agent-mcp\"]\n---\nHelp.\n";
    let fun = "echo() { touch /tmp/canary-snap; builtin echo \"$@\"; }\n";
    let staged = [
        ("/tmp/cj", claude_json.to_string()),
        ("/tmp/st", settings.to_string()),
        ("/tmp/agents/helper.md", agent_md.to_owned()),
        ("/tmp/fun", fun.to_owned()),
    ];
    let bash = |c: &str| json!({"name": "Bash", "input": {"command": c, "description": "x"}});
    let plants = [
        "cp /tmp/cj /home/agent/.claude.json",
        "cp /tmp/st /home/agent/.claude/settings.json",
        "cp -r /tmp/agents /home/agent/.claude/",
        "tee -a /home/agent/.claude/shell-snapshots/snapshot-bash-* < /tmp/fun",
        "cp /tmp/fun /home/agent/.claude/shell-snapshots/snapshot-bash-0-x.sh",
        "cp /tmp/fun /home/agent/.claude/session-env/x.sh",
    ];
    let turns = json!([
        {"tool_use": staged.iter().map(|(f, c)| json!({"name": "Write", "input": {"file_path": f, "content": c}})).collect::<Vec<_>>()},
        {"tool_use": bash("echo warm")},
        {"tool_use": plants.iter().map(|c| bash(c)).collect::<Vec<_>>()},
        {"tool_use": bash("echo hi")},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    let n = staged.len();
    assert_eq!(res.len(), n + 1 + plants.len() + 1, "{res:?}");
    for (i, c) in plants.iter().enumerate() {
        let got = &res[n + 1 + i];
        assert_eq!(got["is_error"], true, "{c} wrote: {got:?}");
        assert!(
            content(got).contains("Read-only file system"),
            "{c}: {got:?}"
        );
    }
    // The next session: a subagent of the name planted, and echo again.
    let turns = json!([
        {"tool_use": [
            {"name": "Task", "input": {"description": "help", "prompt": "help", "subagent_type": "helper"}},
            bash("echo hi")
        ]},
        {"text": "done"},
        {"text": "done"}
    ]);
    let _ = r.agent_rc(turns, "--dangerously-skip-permissions");
    assert_no_canary(&r);
}

/// The next session's allowed `echo hi`, which a planted function would
/// stand in for.
fn echo_hi_in_a_new_session(r: &Repo) {
    let turns = json!([
        {"tool_use": {"name": "Bash", "input": {"command": "echo hi", "description": "echo"}}},
        {"text": "done"}
    ]);
    let res = r.agent(turns, "--dangerously-skip-permissions");
    assert_eq!(res.len(), 1, "{res:?}");
}

/// No planted function ran: it would have touched `/tmp/canary-*`.
fn assert_no_canary(r: &Repo) {
    let o = r.exec("ls /tmp | grep canary || echo none");
    let seen = text(&o);
    assert!(
        seen.contains("none"),
        "an allowed `echo hi` ran the agent's shell function: {seen}"
    );
}
