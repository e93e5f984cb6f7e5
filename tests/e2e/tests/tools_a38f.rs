//! a38f: a fresh attack on `[tools]` with the real Claude Code CLI in the
//! real image (issue 38): the audit trail drowned by connections that
//! stall the verifying sink, and Monitor's WebSocket past a WebFetch ban.
//! One sandbox (about 5 s once it runs; 55 s with the image build when
//! this file runs alone); the Messages API stand-in
//! (sbx-msgapi) scripts the model's tool calls, as in tools.rs.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use sbx_e2e::{ai_base, bin, sbx, sh, text};
use serde_json::{Value, json};

struct Repo {
    inner: sbx_e2e::Repo,
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
        let stand_in = path.join(".sbxtest/sbx-msgapi");
        std::fs::copy(bin("sbx-msgapi"), &stand_in).unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        sh(Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(inner.root()));
        let o = sbx()
            .args(["-q", "start", "--base-tag", &tag])
            .arg(&inner.path)
            .output()
            .unwrap();
        assert!(o.status.success(), "start: {}", text(&o));
        Some(Self { inner })
    }

    fn target(&self) -> String {
        format!(
            "/workspace/{}",
            self.path.file_name().unwrap().to_string_lossy()
        )
    }

    /// `claude -p` against the stand-in serving `turns`: its exit status
    /// and the tool results of the last request.
    fn agent(&self, turns: Value) -> (i32, Vec<Value>) {
        let script = json!({"turns": turns, "side_text": "ok"});
        std::fs::write(self.path.join(".sbxtest/script.json"), script.to_string()).unwrap();
        let o = self.exec(&format!(
            "cd {ws}; rm -f /tmp/req.jsonl /tmp/port
             .sbxtest/sbx-msgapi --script .sbxtest/script.json --log /tmp/req.jsonl --port-file /tmp/port >/tmp/msgapi.out 2>&1 &
             for i in $(seq 100); do [ -s /tmp/port ] && break; sleep 0.05; done
             ANTHROPIC_BASE_URL=http://127.0.0.1:$(cat /tmp/port) ANTHROPIC_API_KEY=sk-sbx-test \
             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 120 claude -p go --dangerously-skip-permissions </dev/null >/tmp/claude.out 2>&1
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

    /// This sandbox's audit records (`sbx-run log --json`'s data), from
    /// its own file: the merged log of every sandbox on a shared machine
    /// took minutes to read.
    fn records(&self) -> Vec<Value> {
        let container =
            sbx_run::names::Names::new(&self.path.canonicalize().unwrap(), None).container;
        let file = sbx_run::spec::state_dir()
            .join("sandboxes")
            .join(&container)
            .join("audit.jsonl");
        let o = sbx()
            .args(["log", "--json", "--file"])
            .arg(&file)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["data"].clone())
            .collect()
    }
}

/// Class 6, drowned by stalling: the verifying sink served one connection
/// at a time and waited up to 1 s for its record. The agent connects to it,
/// keeps the socket across exec and execs the real checker, which the sink
/// verifies and then waits on (it reads a stdin the agent never closes).
/// Two such connections a second keep a queue in front of every real
/// checker; each waited its 10 s, refused its call and printed the record
/// on stderr only, so banned Write calls and the git guard's refusal of
/// `git commit --no-verify` vanished from the log. The sink now waits on
/// every connection at once.
#[test]
fn stalled_connections_to_the_verifying_sink_hide_no_refusal() {
    let Some(r) = Repo::new(
        "tools-a38f",
        "[tools]\ndisallowed = [\"Write\", \"WebFetch\"]\n",
    ) else {
        return;
    };
    let t0 = Instant::now();
    let ws = r.target();
    // Each staller's stdin is a pipe its parent closes after 120 s; two
    // new ones a second, while the sink gave up on one a second.
    let stall = r#"setsid perl -MSocket -MPOSIX=:sys_wait_h -e '
        open(my $p, ">", "/tmp/a38f-stall.pid") or die; print $p $$; close $p;
        my @held; my $end = time + 240;
        while (time < $end) {
            pipe(my $r, my $w) or die;
            if (fork() == 0) {
                close $w;
                open(STDIN, "<&", $r) or exit 1;
                $^F = 1000;
                socket(my $s, AF_UNIX, SOCK_SEQPACKET, 0) or exit 1;
                connect($s, pack_sockaddr_un("/run/sbx-audit/verified.sock")) or exit 1;
                exec("/usr/local/bin/sbx-tool-guard", "check");
                exit 1;
            }
            close $r;
            push @held, [time, $w];
            close((shift @held)->[1]) while @held && $held[0][0] < time - 120;
            select(undef, undef, undef, 0.5);
            1 while waitpid(-1, WNOHANG) > 0;
        }' </dev/null >/dev/null 2>&1 & echo started"#;
    let o = r.exec(stall);
    assert!(text(&o).contains("started"), "{}", text(&o));
    // Wait until the sink has turned away three of them (as stalled,
    // or, once it no longer waits on one at a time, as accepted before
    // the exec).
    let deadline = Instant::now() + Duration::from_secs(30);
    let stalled = |r: &Repo| {
        r.records()
            .iter()
            .filter(|d| {
                d["policy"] == "audit-sink" && d["target"] == "verified record from uid 1000"
            })
            .count()
    };
    while stalled(&r) < 3 {
        assert!(Instant::now() < deadline, "no stalled connection was seen");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The git guard's refusal, as the agent.
    let o = r.exec("cd /tmp && git init -q g && cd g && SBX_AGENT=claude git commit --allow-empty --no-verify -m x; echo rc=$?");
    assert!(!text(&o).contains("rc=0"), "{}", text(&o));
    let turns: Vec<Value> = (0..2)
        .map(|i| json!({"tool_use": {"name": "Write", "input": {"file_path": format!("{ws}/w{i}.txt"), "content": "x\n"}}}))
        // a38f: Monitor's `ws` opens a WebSocket to any URL, a fetch the
        // WebFetch ban let through (and logged as allowed).
        .chain([
            json!({"tool_use": {"name": "Monitor", "input": {"description": "watch", "timeout_ms": 5000, "ws": {"url": "ws://127.0.0.1:9/x"}}}}),
            json!({"text": "done"}),
        ])
        .collect();
    let (rc, res) = r.agent(Value::Array(turns));
    assert_eq!(rc, 0, "{res:?}");
    assert_eq!(res.len(), 3, "{res:?}");
    for x in &res {
        assert_eq!(x["is_error"], true, "a call ran: {res:?}");
    }
    let c = res[2]["content"].to_string();
    assert!(
        c.contains("[tools].disallowed") && c.contains("WebFetch"),
        "Monitor's WebSocket was not refused: {res:?}"
    );
    let all = r.records();
    let refusals: Vec<_> = all
        .iter()
        .filter(|d| {
            d["tool"] == "tools" && d["policy"] == "tools.disallowed" && d["operation"] == "Write"
        })
        .collect();
    assert_eq!(
        refusals.len(),
        2,
        "refused Writes missing from the log: {:?}",
        res.iter().map(|x| x["content"].clone()).collect::<Vec<_>>()
    );
    for d in &refusals {
        assert_eq!(d["peer"]["source"], "tools", "{d}");
    }
    assert!(
        all.iter().any(|d| d["tool"] == "tools"
            && d["operation"] == "Monitor"
            && d["policy"] == "tools.disallowed"),
        "Monitor's refusal is missing from the log"
    );
    assert!(
        all.iter().any(|d| d["policy"] == "block-no-verify"
            && d["result"] == "blocked"
            && d["peer"]["source"] == "sbx-git-guard"),
        "the git guard's refusal is missing from the log"
    );
    let _ = r.exec("kill -- -$(cat /tmp/a38f-stall.pid)");
    eprintln!("a38f stall: {:?}", t0.elapsed());
}
