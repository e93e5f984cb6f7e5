use std::path::Path;

use serde_json::json;

use super::*;

fn policy(toml: &str) -> Policy {
    let cfg = sbx_core::config::parse_toml(toml, Path::new("c.toml")).unwrap();
    Policy::new(&cfg, Path::new("/workspace")).unwrap()
}

fn d(p: &Policy, tool: &str, input: Value) -> Option<Key> {
    match p.decide(tool, &input, None) {
        Decision::Allow(_) => None,
        Decision::Block { key, .. } => Some(key),
    }
}

#[test]
fn disallowed_tools_by_name() {
    let p = policy("[tools]\ndisallowed = [\"Write\", \"Edit\"]\n");
    let dis = Some(Key::Disallowed);
    assert_eq!(d(&p, "Write", json!({"file_path": "/workspace/a"})), dis);
    assert_eq!(
        d(&p, "Edit", json!({"file_path": "a", "old_string": "x"})),
        dis
    );
    assert_eq!(d(&p, "Bash", json!({"command": "touch a"})), None);
    assert_eq!(d(&p, "Read", json!({"file_path": "a"})), None);
    // Names are exact: Claude's tools are case-sensitive, and a name sbx
    // does not know may do anything, so it is refused under file rules.
    assert_eq!(d(&p, "write", json!({})), Some(Key::UnknownTool));
}

#[test]
fn bash_prefix_rules() {
    let p = policy(
        "[tools]\ndisallowed = [\"Bash(curl:*)\", \"Bash(git push:*)\", \"Bash(rm -rf /)\"]\n",
    );
    let dis = Some(Key::Disallowed);
    for (cmd, want) in [
        ("curl https://x", dis),
        ("curl", dis),
        ("  curl   -s x", dis),
        ("curly x", None),
        ("echo curl", None),
        ("ls && curl x", dis),
        ("ls; curl x", dis),
        ("ls | curl -d @- x", dis),
        ("echo $(curl x)", dis),
        ("echo `curl x`", dis),
        ("(curl x)", dis),
        ("A=1 B=2 curl x", dis),
        ("sudo curl x", dis),
        ("env FOO=1 curl x", dis),
        ("ls\ncurl x", dis),
        ("git push origin main", dis),
        ("git  push", dis),
        ("git pushx", None),
        ("git status", None),
        ("rm -rf /", dis),
        ("rm -rf /tmp/x", None),
    ] {
        assert_eq!(d(&p, "Bash", json!({"command": cmd})), want, "{cmd:?}");
    }
}

/// The ways round a prefix rule a shell offers: each is the same `curl`.
#[test]
fn bash_prefix_rules_see_through_the_shell() {
    let p = policy("[tools]\ndisallowed = [\"Bash(curl:*)\", \"Bash(git push:*)\"]\n");
    for cmd in [
        "/usr/bin/curl x",
        "\\curl x",
        "c''url x",
        "\"curl\" x",
        "bash -c 'curl x'",
        "sh -c 'curl x'",
        "env -i curl x",
        "env FOO=1 curl x",
        "sudo -u x curl x",
        "xargs curl",
        "xargs -0 -n1 curl",
        "command curl x",
        "exec curl x",
        "nice curl x",
        "nice -n 5 curl x",
        "nohup curl x",
        "timeout 5 curl x",
        "stdbuf -oL curl x",
        "time curl x",
        "/usr/bin/time curl x",
        "echo $(curl x)",
        "echo `curl x`",
        "( curl x )",
        "{ curl x; }",
        "ls | curl x",
        "ls\ncurl x",
        "eval 'curl x'",
        "/usr/bin/git push origin",
        "sudo -E -u root -- env -u HOME timeout 5 nice -n 1 /usr/bin/curl x",
    ] {
        let got = p.decide("Bash", &json!({"command": cmd}), None);
        assert!(
            matches!(
                &got,
                Decision::Block {
                    key: Key::Disallowed,
                    ..
                }
            ),
            "{cmd:?}: {got:?}"
        );
    }
}

/// Fail closed: a command word the shell computes cannot be checked
/// against a deny rule, so it is refused, saying why.
#[test]
fn bash_computed_commands_are_refused_under_a_deny_rule() {
    let p = policy("[tools]\ndisallowed = [\"Bash(curl:*)\"]\n");
    for cmd in [
        "$C x",
        "X=curl; $X x",
        "\"$(echo curl)\" x",
        "/usr/bin/cur? x",
        "{c,}url x",
        "eval \"$CMD\"",
        "bash -c \"$CMD\"",
        "echo curl x | sh",
        "sh < script.sh",
        "echo 'unterminated",
    ] {
        match p.decide("Bash", &json!({"command": cmd}), None) {
            Decision::Block { key, reason } => {
                assert_eq!(key, Key::Disallowed, "{cmd:?}");
                assert!(reason.contains("cannot be checked"), "{cmd:?}: {reason}");
            }
            d => panic!("{cmd:?}: {d:?}"),
        }
    }
    // What is known and not curl runs, computed arguments and all.
    for cmd in [
        "ls -la \"$HOME\"",
        "echo $(date) curl",
        "git log --format=%H | head -1",
        "for f in *.rs; do wc -l \"$f\"; done",
        "bash ./build.sh",
        "npm test -- --grep 'a b'",
        "[ -f x ] && cat x",
        "ls *.rs",
    ] {
        assert_eq!(d(&p, "Bash", json!({"command": cmd})), None, "{cmd:?}");
    }
    // Without a Bash rule nothing needs to be known.
    let none = policy("[tools]\ndisallowed = [\"Write\"]\n");
    assert_eq!(d(&none, "Bash", json!({"command": "$C x"})), None);
}

/// Edit rules cover every tool that changes a file (Claude Code's own
/// reading), Read rules every tool that reads one; Write is Write.
#[test]
fn edit_and_read_rules_cover_their_families() {
    let p = policy("[tools]\ndisallowed = [\"Edit\"]\n");
    for t in ["Edit", "MultiEdit", "NotebookEdit", "Write"] {
        assert_eq!(
            d(&p, t, json!({"file_path": "a"})),
            Some(Key::Disallowed),
            "{t}"
        );
    }
    assert_eq!(d(&p, "Read", json!({"file_path": "a"})), None);
    let p = policy("[tools]\ndisallowed = [\"Edit(config/**)\"]\n");
    for (t, k) in [
        ("MultiEdit", "file_path"),
        ("NotebookEdit", "notebook_path"),
    ] {
        assert_eq!(
            d(&p, t, json!({k: "config/a.yml"})),
            Some(Key::Disallowed),
            "{t}"
        );
        assert_eq!(d(&p, t, json!({k: "src/a.rs"})), None, "{t}");
    }
    let p = policy("[tools]\ndisallowed = [\"Write\"]\n");
    assert_eq!(
        d(&p, "Write", json!({"file_path": "a"})),
        Some(Key::Disallowed)
    );
    assert_eq!(d(&p, "Edit", json!({"file_path": "a"})), None);
    let p = policy("[tools]\ndisallowed = [\"Read(secrets/**)\"]\n");
    for (t, k) in [
        ("Read", "file_path"),
        ("Grep", "path"),
        ("Glob", "path"),
        ("LS", "path"),
    ] {
        assert_eq!(
            d(&p, t, json!({k: "secrets/x"})),
            Some(Key::Disallowed),
            "{t}"
        );
    }
    // An allow list is read the same way.
    let p = policy("[tools]\nallowed = [\"Edit(src/**)\", \"Read\"]\n");
    assert_eq!(d(&p, "MultiEdit", json!({"file_path": "src/a"})), None);
    assert_eq!(d(&p, "Write", json!({"file_path": "src/a"})), None);
    assert_eq!(d(&p, "Grep", json!({"pattern": "x"})), None);
    assert_eq!(
        d(&p, "NotebookEdit", json!({"notebook_path": "docs/a.ipynb"})),
        Some(Key::Allowed)
    );
}

#[test]
fn allowed_list_refuses_the_rest_and_every_part() {
    let p = policy(
        "[tools]\nallowed = [\"Read\", \"Glob\", \"Bash(npm test)\", \"Bash(ls)\", \"Write(src/**)\"]\n",
    );
    let al = Some(Key::Allowed);
    assert_eq!(d(&p, "Read", json!({"file_path": "x"})), None);
    assert_eq!(d(&p, "Edit", json!({"file_path": "x"})), al);
    assert_eq!(d(&p, "WebFetch", json!({"url": "https://a.example"})), al);
    assert_eq!(d(&p, "Bash", json!({"command": "npm test -- -u"})), al);
    assert_eq!(d(&p, "Bash", json!({"command": "ls"})), None);
    assert_eq!(d(&p, "Bash", json!({"command": "ls -la"})), al);
    assert_eq!(d(&p, "Bash", json!({"command": "npm test && curl x"})), al);
    assert_eq!(d(&p, "Bash", json!({})), al);
    // Only what it can see: a computed command is not `npm test`.
    assert_eq!(d(&p, "Bash", json!({"command": "npm test; $X"})), al);
    assert_eq!(d(&p, "Bash", json!({"command": "npm test $(curl x)"})), al);
    assert_eq!(d(&p, "Bash", json!({"command": "sh -c 'npm test'"})), al);
    assert_eq!(d(&p, "Write", json!({"file_path": "src/a/b.rs"})), None);
    assert_eq!(
        d(&p, "Write", json!({"file_path": "/workspace/src/a.rs"})),
        None
    );
    assert_eq!(d(&p, "Write", json!({"file_path": "docs/a.md"})), al);
    // `..` is resolved before matching: out of src/ is out.
    assert_eq!(d(&p, "Write", json!({"file_path": "src/../docs/a.md"})), al);
    assert_eq!(
        d(
            &p,
            "Write",
            json!({"file_path": "/workspace/src/../../etc/passwd"})
        ),
        al
    );
}

#[test]
fn disallowed_paths_with_dotdot() {
    let p = policy("[tools]\ndisallowed = [\"Edit(config/*.yml)\", \"Read(/secrets/)\"]\n");
    let dis = Some(Key::Disallowed);
    for (path, want) in [
        ("config/app.yml", dis),
        ("/workspace/config/app.yml", dis),
        ("src/../config/app.yml", dis),
        ("./config/./app.yml", dis),
        ("/workspace/src/../../workspace/config/app.yml", dis),
        ("config/sub/app.yml", None),
        ("other/config/app.yml", None),
    ] {
        assert_eq!(d(&p, "Edit", json!({"file_path": path})), want, "{path:?}");
    }
}

#[test]
fn read_only_refuses_the_writing_tools() {
    let p = policy("[tools]\nread-only = true\n");
    for &t in writing_tools() {
        assert_eq!(
            d(&p, t, json!({"file_path": "a"})),
            Some(Key::ReadOnly),
            "{t}"
        );
    }
    // Bash is let through: the read-only mount refuses its writes (EROFS).
    assert_eq!(d(&p, "Bash", json!({"command": "touch a"})), None);
    assert_eq!(d(&p, "Read", json!({"file_path": "a"})), None);
}

#[test]
fn deny_read_and_masks() {
    let p = policy("[tools]\ndeny-read = [\"**/*.sql\", \"private/\"]\n");
    let dr = Some(Key::DenyRead);
    for (tool, path, want) in [
        ("Read", "db/dump.sql", dr),
        ("Read", "/workspace/a/../db/dump.sql", dr),
        ("Read", "private/notes.md", dr),
        ("Grep", "private", dr),
        ("Read", "README.md", None),
        // The default masks ([filesystem].blocked) are refused too...
        ("Read", ".env", dr),
        ("Read", "/workspace/app/.env.local", dr),
        ("Edit", "deploy/server.pem", dr),
        // ...minus their exceptions.
        ("Read", ".env.example", None),
    ] {
        assert_eq!(
            d(&p, tool, json!({"file_path": path})),
            want,
            "{tool} {path}"
        );
    }
}

#[test]
fn deny_read_follows_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join(".env"), "K=v").unwrap();
    std::os::unix::fs::symlink(ws.join(".env"), ws.join("innocent.txt")).unwrap();
    let cfg = sbx_core::config::parse_toml("[tools]\n", Path::new("c.toml")).unwrap();
    let p = Policy::new(&cfg, ws).unwrap();
    let got = p.decide("Read", &json!({"file_path": "innocent.txt"}), Some(ws));
    assert!(got.blocked(), "{got:?}");
}

#[test]
fn webfetch_domains() {
    let p = policy("[tools]\ndisallowed = [\"WebFetch(domain:example.com)\"]\n");
    let dis = Some(Key::Disallowed);
    for (url, want) in [
        ("https://example.com/x", dis),
        ("https://api.Example.com:443/x", dis),
        ("https://user@example.com./", dis),
        ("https://notexample.com/", None),
        ("example.com/x", dis),
        ("example.com:8443", dis),
        ("http://[::1]:8080/", None),
        // Attacks: spellings that reach example.com while naming another
        // host to a parser that is not the fetcher's (WHATWG).
        ("https://example.com\\@allowed.test/", dis),
        ("https://example.com\\.allowed.test/", dis),
        ("https://ex%61mple.com/", dis),
        ("https://EXAMPLE.COM:443@other.test/", None),
        ("https://other.test#@example.com/", None),
    ] {
        assert_eq!(d(&p, "WebFetch", json!({"url": url})), want, "{url}");
    }
}

#[test]
fn webfetch_allowed_domain_is_the_host_fetched() {
    let p = policy("[tools]\nallowed = [\"WebFetch(domain:allowed.test)\"]\n");
    let al = Some(Key::Allowed);
    for (url, want) in [
        ("https://allowed.test/x", None),
        ("https://api.allowed.test", None),
        // A backslash ends the authority: this fetches evil.test.
        ("https://evil.test\\@allowed.test/", al),
        ("https://allowed.test@evil.test/", al),
        ("https://[::1]/", al),
    ] {
        assert_eq!(d(&p, "WebFetch", json!({"url": url})), want, "{url}");
    }
}

#[test]
fn no_table_refuses_only_masked_paths() {
    let p = policy("");
    assert_eq!(d(&p, "Write", json!({"file_path": "a"})), None);
    assert_eq!(
        d(&p, "Read", json!({"file_path": ".env"})),
        Some(Key::DenyRead)
    );
}

#[test]
fn normalize_is_lexical_and_stops_at_root() {
    for (base, p, want) in [
        ("/workspace", "a/../b", "/workspace/b"),
        ("/workspace", "../../../etc", "/etc"),
        ("/workspace", "/a/./b/../c", "/a/c"),
        ("/w/x", ".", "/w/x"),
    ] {
        assert_eq!(normalize(Path::new(base), Path::new(p)), Path::new(want));
    }
}

/// Class 2 of issue 38: a tool that runs a command is a shell to the
/// rules; one sbx does not know is refused when a rule depends on shells
/// or files, and let through when none does.
#[test]
fn every_tool_is_classified() {
    let p = policy("[tools]\ndisallowed = [\"Bash\"]\n");
    let dis = Some(Key::Disallowed);
    assert_eq!(d(&p, "Bash", json!({"command": "ls"})), dis);
    assert_eq!(
        d(
            &p,
            "Monitor",
            json!({"command": "ls", "description": "x", "timeout_ms": 1, "persistent": false})
        ),
        dis
    );
    assert_eq!(d(&p, "PowerShell", json!({"command": "ls"})), dis);
    assert_eq!(d(&p, "REPL", json!({"code": "1"})), dis);
    assert_eq!(d(&p, "Workflow", json!({"script": "x"})), dis);
    assert_eq!(d(&p, "Unheard", json!({"x": "ls"})), Some(Key::UnknownTool));
    assert_eq!(d(&p, "TodoWrite", json!({"todos": []})), None);
    assert_eq!(d(&p, "ToolSearch", json!({"query": "monitor"})), None);
    let p = policy("[tools]\ndisallowed = [\"Bash(curl:*)\"]\n");
    assert_eq!(d(&p, "Monitor", json!({"command": "curl x"})), dis);
    assert_eq!(d(&p, "Monitor", json!({"command": "tail -f log"})), None);
    assert_eq!(d(&p, "Skill", json!({"skill": "x"})), dis);
    assert_eq!(d(&p, "mcp__s__run", json!({"command": "curl x"})), dis);
    assert_eq!(d(&p, "mcp__s__get", json!({"id": "1"})), None);
    let p = policy("[tools]\nallowed = [\"Bash(echo:*)\", \"Read\"]\n");
    assert_eq!(d(&p, "Monitor", json!({"command": "echo hi"})), None);
    assert_eq!(
        d(&p, "Monitor", json!({"command": "touch x"})),
        Some(Key::Allowed)
    );
    assert_eq!(d(&p, "Unheard", json!({})), Some(Key::UnknownTool));
    let p = policy("[tools]\nallowed = [\"Unheard\", \"Bash(echo:*)\"]\n");
    assert_eq!(d(&p, "Unheard", json!({})), None);
    let p = policy("[tools]\nread-only = true\n");
    assert_eq!(d(&p, "EnterWorktree", json!({})), Some(Key::ReadOnly));
    assert_eq!(d(&p, "Unheard", json!({})), Some(Key::UnknownTool));
    // No rule about shells or files: nothing to protect by refusing.
    let p = policy("[tools]\ndisallowed = [\"WebSearch\"]\n");
    assert_eq!(d(&p, "Unheard", json!({})), None);
}

/// Class 5 of issue 38: each one-liner runs `rm` without the word `rm`
/// in a place the old reader looked; under `Bash(rm:*)` each is refused.
#[test]
fn eleven_ways_round_bash_rm_are_refused() {
    let p = policy("[tools]\ndisallowed = [\"Bash(rm:*)\"]\n");
    for cmd in [
        "read v < f; echo $((v))",
        "v=$(cat f); [[ $v -eq 0 ]]",
        "y=$(cat f); echo ${y@P}",
        "PS4=$(cat f); set -x; :",
        "x=$(cat f); trap \"$x\" EXIT",
        "mapfile -C rm -c 1 a < f",
        "compgen -C 'rm -rf x' y",
        "env 'BASH_FUNC_f%%=() { rm -rf x; }' bash -c f",
        "prlimit --nproc=10 rm -rf x",
        "setarch x86_64 -R rm -rf x",
        "echo | sed 'e rm -rf x'",
        // and their neighbours
        "a=(1 2); i=$(cat f); echo ${a[$i]}",
        "s=$(cat f); echo ${s:$n}",
        "n=x; echo ${!n}",
        "let x=v",
        "declare -i x; x=$(cat f)",
        "(( v ))",
        "bash -x -c ':'",
        "set -o xtrace; :",
        "sed -n '1e rm x' f",
        "sed 's/.*/rm x/e' f",
        "sed -f script.sed f",
        "linux64 rm -rf x",
        "readarray -C \"$c\" a",
        "SHELLOPTS=xtrace bash -c :",
    ] {
        assert!(
            d(&p, "Bash", json!({"command": cmd})).is_some(),
            "ran: {cmd}"
        );
    }
    for cmd in [
        "echo $((1 + 2))",
        "[[ 3 -eq 3 ]]",
        "sed 's/a/b/g' f",
        "sed -n '/x/p;s/e/E/2' f",
        "trap 'echo bye' EXIT",
        "mapfile -t a < f",
        "set -e",
        "echo ${x:-default} ${y%.txt} ${#z}",
    ] {
        assert_eq!(d(&p, "Bash", json!({"command": cmd})), None, "{cmd}");
    }
}

/// An allow rule sees the assignments before a command: `NODE_OPTIONS`
/// takes code, so `Bash(npm test)` does not cover it.
#[test]
fn allow_rules_see_assignments_and_flags() {
    let p = policy("[tools]\nallowed = [\"Bash(npm test)\"]\n");
    assert_eq!(d(&p, "Bash", json!({"command": "npm test"})), None);
    for cmd in [
        "npm test '--node-options=--import=data:text/javascript,x'",
        "NODE_OPTIONS=--require=/tmp/x npm test",
        "env NODE_OPTIONS=--require=/tmp/x npm test",
    ] {
        assert_eq!(
            d(&p, "Bash", json!({"command": cmd})),
            Some(Key::Allowed),
            "{cmd}"
        );
    }
}

#[test]
fn writes_to_the_clis_own_config_are_refused_under_tool_rules() {
    let p = policy("[tools]\ndisallowed = [\"Bash\"]\n");
    let cfg = Some(Key::CliConfig);
    for f in [
        "/home/agent/.claude.json",
        "/home/agent/.claude.json.backup",
        "/home/agent/.claude/settings.json",
        "/home/agent/.claude/agents/helper.md",
        "/home/agent/.config/claude/settings.json",
        "/home/agent/.codex/config.toml",
        "/home/agent/x/../.claude/settings.json",
        "web/.claude/settings.json",
        "web/.mcp.json",
    ] {
        assert_eq!(d(&p, "Write", json!({"file_path": f})), cfg, "{f}");
        assert_eq!(
            d(&p, "Edit", json!({"file_path": f, "old_string": "a"})),
            cfg,
            "{f}"
        );
    }
    // Reading them, and files merely named alike, are not refused.
    assert_eq!(
        d(&p, "Read", json!({"file_path": "/home/agent/.claude.json"})),
        None
    );
    for f in [
        "/workspace/claude.json",
        "/workspace/.claudex/a",
        "/workspace/src/mcp.json",
    ] {
        assert_eq!(d(&p, "Write", json!({"file_path": f})), None, "{f}");
    }
    // Without rules for shells or files, nothing depends on it.
    let p = policy("[tools]\ndisallowed = [\"WebFetch\"]\n");
    assert_eq!(
        d(
            &p,
            "Write",
            json!({"file_path": "/home/agent/.claude.json"})
        ),
        None
    );
}

#[test]
fn redirections_into_the_clis_config_are_refused_under_bash_rules() {
    let cfg = Some(Key::CliConfig);
    let strict = policy("[tools]\nallowed = [\"Read\", \"Bash(echo:*)\"]\n");
    let bash = |c: &str| json!({ "command": c });
    for c in [
        "echo 'echo() { :; }' >> ~/.claude/shell-snapshots/snapshot-bash-*",
        "echo '{}' > ~/.claude/settings.json",
        "echo x > /home/agent/.claude.json",
        "echo x >| ~/.bashrc",
        "echo x &> web/.mcp.json",
        "echo x 2>> ../workspace/.claude/x",
        "echo x >& ~/.codex/config.toml",
        "echo x > \"$F\"",
        "echo x > $(echo ~/.claude)/settings.json",
    ] {
        assert_eq!(d(&strict, "Bash", bash(c)), cfg, "{c}");
    }
    for c in [
        "echo x > out.txt",
        "echo x >> /tmp/log",
        "echo x 2>&1",
        "echo x >&2",
    ] {
        assert_eq!(d(&strict, "Bash", bash(c)), None, "{c}");
    }
    // A deny list: computed targets are the shell's, literal ones checked.
    let loose = policy("[tools]\ndisallowed = [\"Bash(curl:*)\"]\n");
    assert_eq!(d(&loose, "Bash", bash("echo x > \"$F\"")), None);
    assert_eq!(
        d(&loose, "Bash", bash("echo x > ~/.claude/settings.json")),
        cfg
    );
    assert_eq!(
        d(
            &loose,
            "Write",
            json!({"file_path": "/home/agent/.bashrc", "content": "x"})
        ),
        cfg
    );
    // No rule on shells or files: nothing to protect.
    let none = policy("[tools]\ndisallowed = [\"WebFetch\"]\n");
    assert_eq!(
        d(&none, "Bash", bash("echo x > ~/.claude/settings.json")),
        None
    );
}

/// a38f: Monitor's `ws` opens a WebSocket to any URL; WebFetch rules
/// cover it as they cover WebFetch's `url`.
#[test]
fn a_monitor_websocket_is_a_fetch() {
    let ws = |u: &str| json!({"description": "d", "timeout_ms": 1000, "ws": {"url": u}});
    let p = policy("[tools]\ndisallowed = [\"WebFetch\"]\n");
    assert_eq!(
        d(&p, "Monitor", ws("wss://evil.example/x")),
        Some(Key::Disallowed)
    );
    assert_eq!(d(&p, "Monitor", json!({"command": "tail -f log"})), None);
    let p = policy("[tools]\ndisallowed = [\"WebFetch(domain:evil.example)\"]\n");
    assert_eq!(
        d(&p, "Monitor", ws("wss://a.evil.example/x")),
        Some(Key::Disallowed)
    );
    assert_eq!(d(&p, "Monitor", ws("wss://docs.rs/x")), None);
    let p = policy("[tools]\nallowed = [\"WebFetch(domain:docs.rs)\"]\n");
    assert_eq!(d(&p, "Monitor", ws("wss://docs.rs/x")), None);
    assert_eq!(
        d(&p, "Monitor", ws("wss://evil.example/x")),
        Some(Key::Allowed)
    );
}
