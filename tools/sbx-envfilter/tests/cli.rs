//! The real binary, run with a cleared environment: only what each test
//! sets reaches it. Secrets are judged by what the child actually received.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sbx-envfilter");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn audit(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// A command in an empty working directory with a minimal environment.
    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path())
            .env("SBX_AUDIT_LOG", self.audit())
            .current_dir(self.dir.path());
        c
    }

    fn audit_lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.audit())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn write_config(&self, text: &str) -> PathBuf {
        let p = self.dir.path().join("cfg.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn run_with_stdin(mut c: Command, input: &[u8]) -> Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ghp() -> String {
    format!("ghp_{}", "Zq9".repeat(12))
}

#[test]
fn secrets_do_not_reach_the_child() {
    let e = Env::new();
    let out = e
        .cmd()
        .env("GITHUB_TOKEN", "hunter2-token")
        .env("innocent_name", ghp())
        .env("AWS_SECRET_ACCESS_KEY", "hunter2-aws")
        .env("EDITOR", "vim")
        .args(["--", "env"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.contains("EDITOR=vim\n"), "{s}");
    assert!(s.contains("PATH=/usr/bin:/bin\n"));
    assert!(
        !s.contains("GITHUB_TOKEN") && !s.contains("innocent_name") && !s.contains("AWS_"),
        "{s}"
    );
    // One audit record per dropped variable: names and rules, never values.
    let recs = e.audit_lines();
    assert_eq!(recs.len(), 3, "{recs:?}");
    let raw = std::fs::read_to_string(e.audit()).unwrap();
    assert!(!raw.contains("hunter2") && !raw.contains(&ghp()));
    let mut names: Vec<_> = recs
        .iter()
        .map(|r| r["target"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "innocent_name"]
    );
    assert!(
        recs.iter()
            .all(|r| r["tool"] == "sbx-envfilter" && r["result"] == "blocked")
    );
    let by = |n: &str| recs.iter().find(|r| r["target"] == n).unwrap()["policy"].clone();
    assert_eq!(by("innocent_name"), "secret-value");
    assert_eq!(by("GITHUB_TOKEN"), "secret-name");
}

#[test]
fn exec_replaces_the_process_and_passes_status_through() {
    let e = Env::new();
    let out = e.cmd().args(["--", "sh", "-c", "exit 3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let out = e
        .cmd()
        .args(["--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(15));
    // exec, not spawn: the child has our pid, so its parent is the test.
    let out = e
        .cmd()
        .args(["--", "sh", "-c", "echo $PPID"])
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), std::process::id().to_string());
}

#[test]
fn own_failures_are_125_126_127() {
    let e = Env::new();
    let out = e
        .cmd()
        .args(["--", "no-such-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("no-such-command-xyz: command not found"),
        "{}",
        stderr(&out)
    );

    let script = e.dir.path().join("not-exec");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let out = e.cmd().arg("--").arg(&script).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let out = e.cmd().args(["--", "/"]).output().unwrap();
    assert_eq!(out.status.code(), Some(126));

    // The child's PATH is the filtered one: a PATH-less environment finds
    // nothing outside the default.
    let out = e
        .cmd()
        .env("PATH", "/nonexistent")
        .args(["--", "env"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn print_formats() {
    let e = Env::new();
    let out = e
        .cmd()
        .env("FOO", "bar")
        .env("API_TOKEN", "x")
        .arg("--print")
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = stdout(&out);
    assert!(s.lines().any(|l| l == "FOO=bar"));
    assert!(!s.contains("API_TOKEN"));

    let out = e
        .cmd()
        .env("FOO", "bar")
        .args(["--print", "-0"])
        .output()
        .unwrap();
    assert!(out.stdout.split(|&b| b == 0).any(|r| r == b"FOO=bar"));
    assert_eq!(out.stdout.last(), Some(&0));

    let out = e
        .cmd()
        .env("FOO", "bar")
        .args(["--print", "--json"])
        .output()
        .unwrap();
    let vals: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        vals.iter().any(|v| v["type"] == "env"
            && v["data"]["name"] == "FOO"
            && v["data"]["value"] == "bar")
    );

    // A multi-line value cannot be printed as lines without ambiguity.
    let out = e
        .cmd()
        .env("MULTI", "a\nEVIL=1")
        .arg("--print")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("MULTI has a newline"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stdin_composes_with_env_0() {
    let e = Env::new();
    let input = format!("A=1\0MULTI=x\ny\0SLACK_BOT_TOKEN=t\0SNEAKY={}\0", ghp());
    let out = run_with_stdin(
        {
            let mut c = e.cmd();
            c.args(["--stdin", "-0", "--print", "-0"]);
            c
        },
        input.as_bytes(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"A=1\0MULTI=x\ny\0");

    // The real pipeline, through a shell.
    let out = e
        .cmd()
        .env("KEEP_ME", "yes")
        .env("DB_PASSWORD", "pw")
        .args(["--", "sh", "-c"])
        .arg(format!(
            "env -0 | {BIN} --stdin -0 --print -0 | tr '\\0' '\\n'"
        ))
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(
        s.contains("KEEP_ME=yes") && !s.contains("DB_PASSWORD"),
        "{s}"
    );
}

#[test]
fn malformed_stdin_is_refused_without_values() {
    let e = Env::new();
    let cases: &[(&[u8], bool, &str)] = &[
        (
            b"A=1\nsecretvalue-no-equals\n",
            false,
            "record 2 has no '='",
        ),
        (b"A=1\n=secretvalue\n", false, "record 2 has an empty name"),
        (
            b"A=1\nB=secret\0value\n",
            false,
            "line 2 contains a NUL byte",
        ),
        (b"A=1\0secretvalue\0", true, "record 2 has no '='"),
    ];
    for (input, nul, want) in cases {
        let mut c = e.cmd();
        c.args(["--stdin", "--print"]);
        if *nul {
            c.arg("-0");
        }
        let out = run_with_stdin(c, input);
        assert_eq!(out.status.code(), Some(65), "{want}");
        assert!(out.stdout.is_empty());
        let err = stderr(&out);
        assert!(err.contains(want), "{err}");
        assert!(!err.contains("secret"), "value leaked: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

#[test]
fn invalid_utf8_is_kept_byte_for_byte() {
    let e = Env::new();
    let out = run_with_stdin(
        {
            let mut c = e.cmd();
            c.args(["--stdin", "--print"]);
            c
        },
        b"N\xff=v\xfe\n",
    );
    assert!(out.status.success());
    assert_eq!(out.stdout, b"N\xff=v\xfe\n");
    let out = e
        .cmd()
        .env(OsStr::from_bytes(b"X\xff"), OsStr::from_bytes(b"\xfe"))
        .args(["--print", "--json"])
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(
            r#"{"type":"env","data":{"name":{"bytes":"WP8="},"value":{"bytes":"/g=="}}}"#
        )
    );
}

#[test]
fn explain_never_shows_values() {
    let e = Env::new();
    let secret = ghp();
    let out = e
        .cmd()
        .env("OPENAI_API_KEY", &secret)
        .env("HIDDEN", &secret)
        .env("EDITOR", "vim")
        .arg("--explain")
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(!s.contains(&secret));
    assert!(
        s.lines()
            .any(|l| l == "drop\tOPENAI_API_KEY\tsecret-name (*_KEY)"),
        "{s}"
    );
    assert!(
        s.lines()
            .any(|l| l == "drop\tHIDDEN\tsecret-value (github-token)"),
        "{s}"
    );
    assert!(s.lines().any(|l| l == "keep\tEDITOR\tdefault"), "{s}");
    assert!(s.lines().any(|l| l == "keep\tPATH\tbaseline (PATH)"), "{s}");
    // --explain is a query: it writes nothing to the audit log.
    assert!(e.audit_lines().is_empty());

    let out = e
        .cmd()
        .env("HIDDEN", &secret)
        .args(["--explain", "--json"])
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(!s.contains(&secret));
    let v: Vec<serde_json::Value> = s
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let h = v.iter().find(|v| v["data"]["name"] == "HIDDEN").unwrap();
    assert_eq!(h["data"]["action"], "drop");
    assert_eq!(h["data"]["rule"], "secret-value");
    assert_eq!(h["data"]["matched"], "github-token");
}

#[test]
fn config_rules_apply_and_pass_is_audited() {
    let e = Env::new();
    let cfg = e.write_config(
        "[environment]\nallow = [\"CUSTOM_*\"]\nblock = [\"EDITOR\"]\npass = [\"ANTHROPIC_API_KEY\"]\n",
    );
    let out = e
        .cmd()
        .env("EDITOR", "vim")
        .env("ANTHROPIC_API_KEY", "sk-ant-xyz")
        .env("CUSTOM_URL", ghp())
        .arg("--config")
        .arg(&cfg)
        .args(["--", "env"])
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(!s.contains("EDITOR="));
    assert!(s.contains("ANTHROPIC_API_KEY=sk-ant-xyz"));
    assert!(s.contains("CUSTOM_URL="));
    let recs = e.audit_lines();
    let pass = recs
        .iter()
        .find(|r| r["target"] == "ANTHROPIC_API_KEY")
        .unwrap();
    assert_eq!(pass["result"], "passed");
    assert_eq!(pass["policy"], "pass");
    let blk = recs.iter().find(|r| r["target"] == "EDITOR").unwrap();
    assert_eq!(blk["policy"], "block");

    // SBX_CONFIG is honoured too.
    let out = e
        .cmd()
        .env("SBX_CONFIG", &cfg)
        .env("EDITOR", "vim")
        .env("VISUAL", "vim")
        .arg("--print")
        .output()
        .unwrap();
    // Printed, and only EDITOR (the config's block) dropped: an empty or
    // failed run must not pass for "blocked".
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).lines().any(|l| l == "VISUAL=vim"));
    assert!(!stdout(&out).contains("EDITOR="));
}

#[test]
fn bad_config_runs_nothing_and_exits_78() {
    let e = Env::new();
    let cfg = e.write_config("[environment]\nalow = [\"X\"]\n");
    let marker = e.dir.path().join("ran");
    let out = e
        .cmd()
        .arg("--config")
        .arg(&cfg)
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(!marker.exists(), "the command ran despite a bad config");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cfg.toml:2:1: environment.alow: unknown field `alow`"),
        "{err}"
    );

    // Discovered config, too: .agent-sandbox/config.toml in the repo.
    let repo = e.dir.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join(".agent-sandbox")).unwrap();
    std::fs::write(
        repo.join(".agent-sandbox/config.toml"),
        "[sandbox]\nmemory = \"4x\"\n",
    )
    .unwrap();
    let out = e
        .cmd()
        .current_dir(&repo)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(stderr(&out).contains("config.toml:2:10: sandbox.memory: invalid size \"4x\""));

    std::fs::write(
        repo.join(".agent-sandbox/config.toml"),
        "[sandbox]\nmemory = \"8g\"\n",
    )
    .unwrap();
    let out = e
        .cmd()
        .current_dir(repo.join(".git"))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).ends_with("config.toml: ok\n"));
}

#[test]
fn usage_errors_are_64_and_help_is_0() {
    let e = Env::new();
    for args in [
        &[][..],
        &["--json", "--", "true"][..],
        &["-0", "--", "true"][..],
        &["--bogus"][..],
    ] {
        let out = e.cmd().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
    }
    let out = e.cmd().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("secret-value"));
    let out = e.cmd().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn closed_pipe_is_not_an_error() {
    let e = Env::new();
    let mut c = e.cmd();
    for i in 0..2000 {
        c.env(format!("V{i}"), "x".repeat(100));
    }
    let mut child = c
        .arg("--print")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn audit_failure_warns_but_does_not_block() {
    let e = Env::new();
    let out = e
        .cmd()
        .env("SBX_AUDIT_LOG", Path::new("/proc/no/such/audit.jsonl"))
        .env("API_TOKEN", "x")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("decisions are not being logged"),
        "{}",
        stderr(&out)
    );
    let out = e
        .cmd()
        .env("SBX_AUDIT_LOG", Path::new("/proc/no/such/audit.jsonl"))
        .env("API_TOKEN", "x")
        .args(["-q", "--", "true"])
        .output()
        .unwrap();
    assert!(out.stderr.is_empty());
}

/// Config validation accepts brace globs, so matching must
/// honour them too (one dialect), not read `{`, `,`, `}` as literals.
#[test]
fn brace_globs_in_config_match() {
    let e = Env::new();
    let cfg =
        e.write_config("[environment]\nblock = [\"{DB,REDIS}_URL\"]\nallow = [\"APP_{A,B}?\"]\n");
    let out = e
        .cmd()
        .env("DB_URL", "postgres://x")
        .env("REDIS_URL", "redis://x")
        .env("CACHE_URL", "redis://y")
        .arg("--config")
        .arg(&cfg)
        .arg("--explain")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(
        s.lines()
            .any(|l| l.contains("CACHE_URL") && l.contains("keep")),
        "{s}"
    );
    for name in ["DB_URL", "REDIS_URL"] {
        let line = s.lines().find(|l| l.contains(name)).unwrap_or_default();
        assert!(
            line.contains("drop") && line.contains("{DB,REDIS}_URL"),
            "{name}: {s}"
        );
    }
}

/// Legacy policy files' spellings load (aliases), and what sbx
/// cannot enforce is refused in one line naming the key and what to do.
#[test]
fn legacy_policy_spellings_load_or_say_what_to_write() {
    let e = Env::new();
    let ok = e.write_config(
        "[sandbox]\nenabled = true\n[filesystem]\nblocked-patterns = [\"**/.env*\"]\nallowed-patterns = [\".env.example\"]\n[network]\nallow-git = true\n[environment]\nallow = [\"NODE_ENV\", \"DEBUG\", \"CI\"]\n",
    );
    let o = e
        .cmd()
        .arg("--check-config")
        .arg("--config")
        .arg(&ok)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (text, want) in [
        (
            "[tools]\ndisallowed = [\"Bash(curl\"]\n",
            "tools.disallowed",
        ),
        (
            "[sandbox]\nenabled = false\n",
            "sandbox.enabled: sbx has no off switch",
        ),
    ] {
        let bad = e.write_config(text);
        let o = e
            .cmd()
            .arg("--check-config")
            .arg("--config")
            .arg(&bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cfg.toml:") && err.contains(want), "{err}");
    }
}
