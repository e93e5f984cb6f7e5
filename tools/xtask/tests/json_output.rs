//! `--json` on every subcommand that prints data (issue 40).
//!
//! The rule is mechanical: every leaf subcommand of every tool in
//! `xtask::commands()` has a row in [`TABLE`]. A row says either that the
//! subcommand prints data on stdout (then `--json` must be accepted there
//! and, where it runs here without Docker, root or a sandbox, its stdout
//! must be `{"type":…,"data":…}` lines and nothing else), or why it prints
//! no data of its own. A subcommand added without a row fails
//! `every_subcommand_is_classified`; one whose row says `Data` and whose
//! code prints text fails `data_subcommands_print_json_lines`.

use std::path::Path;
use std::process::Command;

/// What a leaf subcommand writes on stdout.
enum Out {
    /// Data: with `--json` only envelope lines. `Some`: how to run it here
    /// (arguments after the tool's name; `--json` goes first), `None`:
    /// the reason it cannot run in a test without Docker, root or a sandbox.
    Data(Result<Run, &'static str>),
    /// No data of its own on stdout; the reason.
    Exempt(&'static str),
}

struct Run {
    args: &'static [&'static str],
    /// Exit statuses that count as a run (1 is a query's "no").
    ok: &'static [i32],
    /// Whether no output at all is a pass (a list of nothing here).
    empty_ok: bool,
}

const fn run(args: &'static [&'static str]) -> Out {
    Out::Data(Ok(Run {
        args,
        ok: &[0],
        empty_ok: false,
    }))
}

const fn run_no(args: &'static [&'static str]) -> Out {
    Out::Data(Ok(Run {
        args,
        ok: &[0, 1],
        empty_ok: false,
    }))
}

const fn not_here(why: &'static str) -> Out {
    Out::Data(Err(why))
}

const DOCKER: &str = "needs the Docker engine and a sandbox";
const ROOT_NET: &str = "needs root and CAP_NET_ADMIN in a namespace with the firewall";
const PASS: &str = "passes another program's stdout through";
const SILENT: &str = "acts; reports on stderr only";
const SERVER: &str = "a server: stdout is a protocol or unused";

/// Placeholders in `Run::args`: `{ws}` a git repository with one commit,
/// `{store}` a `file://` object store, `{home}` a home to back up,
/// `{shelf}` an empty repo shelf, `{open}` a config with allow-external.
const TABLE: &[(&str, Out)] = &[
    (
        "sbx-backup sync",
        run(&["sync", "--url", "{store}", "--home", "{home}"]),
    ),
    ("sbx-backup daemon", Out::Exempt(SILENT)),
    (
        "sbx-backup restore",
        run(&["restore", "--url", "{store}", "--to", "{tmp}/restored"]),
    ),
    ("sbx-backup first-boot", Out::Exempt(SILENT)),
    ("sbx-backup adopt", Out::Exempt(SILENT)),
    (
        "sbx-backup snapshots",
        run(&["snapshots", "--url", "{store}"]),
    ),
    ("sbx-backup status", run(&["status", "--url", "{store}"])),
    ("sbx-backup check", run(&["check", "--url", "{store}"])),
    (
        "sbx-backup prune",
        run(&["prune", "--url", "{store}", "--keep-last", "1"]),
    ),
    ("sbx-backup verify", run(&["verify", "--url", "{store}"])),
    ("sbx-backup gc", run(&["gc", "--url", "{store}"])),
    ("sbx-envfilter", run(&["--print"])),
    (
        "sbx-fw init",
        run(&["--config", "{open}", "init", "--dry-run"]),
    ),
    ("sbx-fw verify", not_here(ROOT_NET)),
    ("sbx-fw allow", Out::Exempt(SILENT)),
    ("sbx-fw deny", Out::Exempt(SILENT)),
    (
        "sbx-fw grant",
        not_here("needs root and a firewall's state (--list prints grant lines)"),
    ),
    ("sbx-fw secret", Out::Exempt(SILENT)),
    ("sbx-fw status", not_here(ROOT_NET)),
    ("sbx-fw reset", Out::Exempt(SILENT)),
    ("sbx-fw probe", run(&["probe", "tcp:127.0.0.1:9"])),
    ("sbx-fw dns", Out::Exempt(SERVER)),
    ("sbx-fw proxy", Out::Exempt(SERVER)),
    ("sbx-git-guard check", run_no(&["check", "--", "status"])),
    ("sbx-git-guard exec", Out::Exempt(PASS)),
    ("sbx-git-guard rules", run(&["rules"])),
    ("sbx-git-guard install-hooks", Out::Exempt(SILENT)),
    ("sbx-git-guard serve", Out::Exempt(SERVER)),
    ("sbx-guest init", Out::Exempt(PASS)),
    ("sbx-guest health", run_no(&["health"])),
    ("sbx-guest exec", Out::Exempt(PASS)),
    ("sbx-guest agent-launch", Out::Exempt(PASS)),
    ("sbx-guest mcp-host-tools", Out::Exempt(SERVER)),
    (
        "sbx-guest agent-key",
        Out::Exempt("Claude Code's apiKeyHelper: stdout is the key itself"),
    ),
    ("sbx-run init", not_here("builds the per-repo image")),
    ("sbx-run build", Out::Exempt(SILENT)),
    ("sbx-run build-base", Out::Exempt(SILENT)),
    ("sbx-run start", Out::Exempt(SILENT)),
    ("sbx-run stop", Out::Exempt(SILENT)),
    ("sbx-run restart", Out::Exempt(SILENT)),
    (
        "sbx-run shell",
        Out::Exempt("interactive: the terminal is the sandbox's"),
    ),
    ("sbx-run exec", Out::Exempt(PASS)),
    (
        "sbx-run cp",
        Out::Exempt("stdout is a tar stream with `-`, else unused"),
    ),
    ("sbx-run show-run", run(&["show-run", "-C", "{ws}"])),
    ("sbx-run checkout", not_here(DOCKER)),
    ("sbx-run login", not_here(DOCKER)),
    ("sbx-run volume", run(&["volume"])),
    ("sbx-run volumes", run(&["volumes", "-C", "{ws}"])),
    ("sbx-run list", not_here(DOCKER)),
    ("sbx-run snapshot export", not_here(DOCKER)),
    ("sbx-run snapshot import", not_here(DOCKER)),
    ("sbx-run snapshots", not_here(DOCKER)),
    ("sbx-run restore", not_here(DOCKER)),
    ("sbx-run rm", Out::Exempt(SILENT)),
    ("sbx-run prune", not_here(DOCKER)),
    ("sbx-run agent", not_here(DOCKER)),
    ("sbx-run doctor", run_no(&["doctor", "-C", "{ws}"])),
    ("sbx-run log", run(&["log"])),
    ("sbx-run allow", not_here(DOCKER)),
    (
        "sbx-run terminal",
        not_here("starts the sandbox and serves until Ctrl-C"),
    ),
    ("sbx-run ssh", Out::Exempt(PASS)),
    (
        "sbx-run ssh-key",
        not_here("needs the keys a start with [ssh] enabled makes"),
    ),
    ("sbx-run ssh-config", not_here(DOCKER)),
    ("sbx-run test", not_here(DOCKER)),
    ("sbx-run codex-init-config", not_here(DOCKER)),
    ("sbx-run codex-logout", not_here(DOCKER)),
    ("sbx-run verify-commits", not_here(DOCKER)),
    ("sbx-run fetch", not_here(DOCKER)),
    ("sbx-server serve", Out::Exempt(SERVER)),
    (
        "sbx-tool-guard check",
        Out::Exempt("Claude Code's PreToolUse hook: its protocol, not ours"),
    ),
    (
        "sbx-tool-guard decide",
        run(&["decide", "Bash", r#"{"command":"ls"}"#]),
    ),
    ("sbx-tool-guard settings", run(&["settings"])),
    (
        "sbx-worktree provision",
        run(&[
            "provision",
            "--shelf",
            "{shelf}",
            "--host-repo",
            "{ws}",
            "--branch",
            "feat",
            "--origin-from-host",
        ]),
    ),
    ("sbx-worktree list", run(&["list", "--shelf", "{shelf}"])),
    (
        "sbx-worktree remove",
        run(&["remove", "--shelf", "{shelf}", "--branch", "feat"]),
    ),
    (
        "sbx-worktree prune",
        Out::Data(Ok(Run {
            args: &["prune", "--shelf", "{shelf}"],
            ok: &[0],
            empty_ok: true,
        })),
    ),
];

/// Every leaf subcommand as "tool sub …"; a tool without subcommands is
/// its own leaf.
fn leaves(c: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    let p = if path.is_empty() {
        c.get_name().to_owned()
    } else {
        format!("{path} {}", c.get_name())
    };
    let subs: Vec<_> = c
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if subs.is_empty() {
        out.push((p.clone(), c.clone()));
    }
    for s in subs {
        leaves(s, &p, out);
    }
}

fn all_leaves() -> Vec<(String, clap::Command)> {
    let mut v = Vec::new();
    for mut c in xtask::commands() {
        // Built, so global flags (--json) are propagated to subcommands.
        c.build();
        leaves(&c, "", &mut v);
    }
    v
}

#[test]
fn every_subcommand_is_classified() {
    let leaves = all_leaves();
    let mut problems = Vec::new();
    for (name, cmd) in &leaves {
        match TABLE.iter().find(|(n, _)| n == name) {
            None => problems.push(format!(
                "{name}: not in TABLE (tools/xtask/tests/json_output.rs): say whether it prints data \
                 (then give it --json) or why not"
            )),
            Some((_, Out::Data(r))) => {
                if !cmd.get_arguments().any(|a| a.get_long() == Some("json")) {
                    problems.push(format!("{name}: prints data but has no --json"));
                }
                if r.as_ref().is_err_and(|why| why.trim().is_empty()) {
                    problems.push(format!("{name}: say why it cannot run here"));
                }
            }
            Some((_, Out::Exempt(why))) => {
                if why.trim().is_empty() {
                    problems.push(format!("{name}: exempt without a reason"));
                }
            }
        }
    }
    for (name, _) in TABLE {
        if !leaves.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name}: in TABLE but no such subcommand"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn sh(dir: &Path, script: &str) {
    let st = Command::new("sh")
        .args(["-euc", script])
        .current_dir(dir)
        .status()
        .expect("sh");
    assert!(st.success(), "{script}");
}

/// Each line a JSON object `{"type": string, "data": …}` and nothing else.
fn envelope_problem(stdout: &[u8]) -> Option<String> {
    let text = match std::str::from_utf8(stdout) {
        Ok(t) => t,
        Err(e) => return Some(format!("not UTF-8: {e}")),
    };
    for line in text.lines() {
        let v: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => return Some(format!("not JSON ({e}): {line:.200}")),
        };
        let ok = v.as_object().is_some_and(|o| {
            o.len() == 2 && o.get("type").is_some_and(|t| t.is_string()) && o.contains_key("data")
        });
        if !ok {
            return Some(format!("not a {{\"type\",\"data\"}} object: {line:.200}"));
        }
    }
    None
}

#[test]
fn data_subcommands_print_json_lines() {
    let bins = sbx_e2e::bin_dir();
    let missing: Vec<_> = xtask::commands()
        .iter()
        .map(|c| bins.join(c.get_name()))
        .filter(|p| !p.is_file())
        .collect();
    if !sbx_e2e::prerequisite(
        missing.is_empty(),
        &format!("the tools, built: {missing:?} (cargo build --workspace --bins)"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ws = t.join("ws");
    let home = t.join("home");
    for d in [
        &ws,
        &home,
        &t.join("state"),
        &t.join("store"),
        &t.join("shelf"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    sh(
        &ws,
        "git init -q -b main . && git -c user.name=t -c user.email=t@e commit -q --allow-empty -m one",
    );
    std::fs::write(home.join("notes.txt"), "kept\n").unwrap();
    let open = t.join("open.toml");
    std::fs::write(&open, "[network]\nallow-external = true\n").unwrap();
    let fill = |a: &str| {
        a.replace("{ws}", &ws.to_string_lossy())
            .replace("{store}", &format!("file://{}", t.join("store").display()))
            .replace("{home}", &home.to_string_lossy())
            .replace("{shelf}", &t.join("shelf").to_string_lossy())
            .replace("{open}", &open.to_string_lossy())
            .replace("{tmp}", &t.to_string_lossy())
    };
    let mut problems = Vec::new();
    let mut ran = 0;
    for (name, out) in TABLE {
        let Out::Data(Ok(r)) = out else { continue };
        let tool = name.split(' ').next().unwrap();
        let args: Vec<String> = r.args.iter().map(|a| fill(a)).collect();
        let o = Command::new(bins.join(tool))
            .arg("--json")
            .args(&args)
            .current_dir(&ws)
            .env("HOME", &home)
            .env("XDG_STATE_HOME", t.join("state"))
            .env_remove("SBX_CONFIG")
            .env_remove("SBX_BACKUP_URL")
            // Filtered by sbx-envfilter, which logs it for `sbx-run log`.
            .env("AWS_SECRET_ACCESS_KEY", "not-a-secret")
            .output()
            .unwrap();
        ran += 1;
        let code = o.status.code().unwrap_or(-1);
        let why = if !r.ok.contains(&code) {
            Some(format!(
                "exit {code}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        } else if o.stdout.is_empty() && !r.empty_ok {
            Some("printed nothing".into())
        } else {
            envelope_problem(&o.stdout)
        };
        if let Some(why) = why {
            problems.push(format!("{tool} --json {}: {why}", args.join(" ")));
        }
    }
    assert!(ran > 20, "only {ran} subcommands ran");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
