//! The real binary with a cleared environment, for what needs no Docker
//! engine: `show-run` prints the exact `docker run`, so what it names is
//! what a sandbox gets. (Behaviour in real containers: tests/e2e.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{run_flag_values, sbx_run};

struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join(".agent-sandbox")).unwrap();
        std::fs::write(ws.join(".agent-sandbox/config.toml"), config).unwrap();
        Self { dir }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn cmd(&self) -> Command {
        let mut c = sbx_run(self.dir.path());
        c.current_dir(self.dir.path());
        c
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// The `--env NAME` words of the sandbox's `docker run` line.
fn env_names(show_run: &str) -> Vec<String> {
    let mut names = run_flag_values(show_run, "--env");
    names.retain(|w| !w.contains('='));
    names
}

const GHP: &str = "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// The default allowed names reach the sandbox. Names the config forwards still go through the filter, so a
/// secret-looking name is dropped even when `allow` lists it (only `pass`,
/// audited, forwards one); this fails if sbx-run forwarded its candidates
/// unfiltered.
#[test]
fn show_run_forwards_default_names_and_filters_configured_ones() {
    let r = Repo::new(
        "[environment]\nallow = [\"APP_*\", \"GITHUB_TOKEN\"]\npass = [\"PASSED_KEY\"]\n",
    );
    let o = r
        .cmd()
        .env("NODE_ENV", "production")
        .env("DEBUG", "app:*")
        .env("CI", "true")
        .env("TERM", "xterm")
        .env("APP_MODE", "dev")
        .env("GITHUB_TOKEN", GHP)
        .env("PASSED_KEY", "k")
        .env("UNLISTED", "x")
        .arg("show-run")
        .arg(r.ws())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(!s.contains(GHP), "a secret value is on the command line");
    let names = env_names(&s);
    for want in ["APP_MODE", "CI", "DEBUG", "NODE_ENV", "PASSED_KEY", "TERM"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    for never in ["GITHUB_TOKEN", "UNLISTED"] {
        assert!(
            !names.iter().any(|n| n == never),
            "{never} forwarded: {names:?}"
        );
    }
    // The drops are audited, by rule, without values.
    let audit = std::fs::read_to_string(r.dir.path().join("audit.jsonl")).unwrap_or_default();
    assert!(
        audit.contains("GITHUB_TOKEN") && audit.contains("secret-name"),
        "{audit}"
    );
    assert!(!audit.contains(GHP));
}

/// A config only reaches docker once validated: a glob-looking protected
/// path is refused (exit 78) instead of protecting a literal `*` file.
#[test]
fn protected_globs_are_refused_before_docker() {
    let r = Repo::new("[sandbox]\nprotected = [\"docs/*.md\"]\n");
    let o = r.cmd().arg("show-run").arg(r.ws()).output().unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("not globs"), "{}", text(&o));
    assert!(Path::new(&r.ws()).is_dir());
}

/// `--git-delta-version` becomes an argument of `cargo install`: anything
/// but a version (or "none") is a usage error before anything runs.
#[test]
fn git_delta_version_is_a_version() {
    let r = Repo::new("");
    for bad in ["--locked", "latest", "1.0 x", ""] {
        let o = r
            .cmd()
            .args(["build-base", &format!("--git-delta-version={bad}")])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(64), "{bad:?}: {}", text(&o));
        assert!(text(&o).contains("is not a version"), "{}", text(&o));
    }
}

/// Branch mode binds only the host's `.git` into its provisioning
/// container: a checkout whose `.git` is a file (a linked worktree) is
/// refused (65) in one line, before the engine is asked anything.
#[test]
fn branch_mode_needs_a_git_directory() {
    let r = Repo::new("");
    std::fs::remove_dir(r.ws().join(".git")).unwrap();
    std::fs::write(
        r.ws().join(".git"),
        "gitdir: /elsewhere/.git/worktrees/ws\n",
    )
    .unwrap();
    let o = r
        .cmd()
        .args(["checkout", "feat/x", "-C"])
        .arg(r.ws())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(text(&o).contains(".git is not a directory"), "{}", text(&o));
    assert_eq!(text(&o).trim_end().lines().count(), 1, "{}", text(&o));
}

/// `init --import` with the policy seed's AC-6 example, as a user runs it
/// from the repository: one line per key on stdout, the converted config
/// written (with the same lines as comments) before the image build, which
/// this engine-less test lets fail.
#[test]
fn init_imports_the_seeds_yaml_config() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::create_dir_all(ws.join(".uds")).unwrap();
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uds-config.yaml"
    );
    std::fs::copy(seed, ws.join(".uds/config.yaml")).unwrap();
    let o = sbx_run(dir.path())
        .current_dir(&ws)
        .args(["init", "--import", ".uds/config.yaml"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("sandbox.")).collect();
    assert_eq!(notes.len(), 11, "{}", text(&o));
    assert!(
        notes.contains(&"sandbox.network.allow-git: mapped: [network] allow-git"),
        "{out}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("sandbox.tools.enforce-agent-permissions: not mapped: ")),
        "{out}"
    );
    let written = std::fs::read_to_string(ws.join(".agent-sandbox/config.toml")).unwrap();
    for n in &notes {
        assert!(written.contains(&format!("# {n}\n")), "{n}\n{written}");
    }
    assert!(
        written.contains("allow = [\"NODE_ENV\", \"DEBUG\", \"CI\"]"),
        "{written}"
    );
    // The build needs the engine this test has not got; the import is done.
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(o.status.code(), Some(78), "{}", text(&o));
}

/// A YAML value sbx cannot take is one line naming file and key, exit 78,
/// and nothing is written.
#[test]
fn init_refuses_a_bad_import_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::write(
        ws.join("c.yaml"),
        "sandbox:\n  network:\n    allow-git: yes\n",
    )
    .unwrap();
    let o = sbx_run(dir.path())
        .current_dir(&ws)
        .args(["init", "--import", "c.yaml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("c.yaml: sandbox.network.allow-git: expected true or false"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!ws.join(".agent-sandbox").exists());
}

/// Codex has no per-tool hook: `[tools]` rules on tool calls would be
/// ignored, so `sbx-run agent --cli codex` under them is refused (78),
/// naming the key, before anything starts; mounts (read-only, deny-read)
/// hold for codex and pass.
#[test]
fn codex_refuses_tool_rules_it_cannot_apply() {
    for (config, key) in [
        ("[tools]\ndisallowed = [\"Bash\"]\n", "[tools].disallowed"),
        ("[tools]\nallowed = [\"Read\"]\n", "[tools].allowed"),
        (
            "[agent]\ncli = \"codex\"\n[tools]\ndisallowed = [\"Write\"]\n",
            "[tools].disallowed",
        ),
    ] {
        let r = Repo::new(config);
        let o = r
            .cmd()
            .args(["agent", "--cli", "codex", "-C"])
            .arg(r.ws())
            .arg("hi")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(78), "{config}: {}", text(&o));
        assert!(text(&o).contains(key), "{config}: {}", text(&o));
    }
    // Claude applies them; codex without --cli follows [agent].cli.
    let r = Repo::new("[agent]\ncli = \"codex\"\n[tools]\nallowed = [\"Read\"]\n");
    let o = r
        .cmd()
        .args(["agent", "-C"])
        .arg(r.ws())
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
}

/// `[secrets]`: the variable a secret is read from never crosses, even
/// when `pass` names it; the sandbox gets the placeholder, the secrets'
/// tmpfs and the CA for Node. A reference that does not resolve, or
/// secrets without proxy mode, refuse before Docker, naming the key.
#[test]
fn secrets_reach_the_sandbox_as_placeholders_only() {
    const KEY: &str = "sk-real-secret-h44c";
    let secrets = "[secrets]\nanthropic = { from = \"env:ANTHROPIC_API_KEY\", host = \"api.anthropic.com\", header = \"x-api-key\" }\n";
    let r = Repo::new(&format!(
        "[environment]\npass = [\"ANTHROPIC_API_KEY\", \"SBX_FW_PROXY_TEST_ROOT\", \"SBX_FW_SECRETS_DIR\"]\n[network]\nmode = \"proxy\"\n{secrets}"
    ));
    let with_key = |r: &Repo| {
        r.cmd()
            .env("ANTHROPIC_API_KEY", KEY)
            .env("SBX_FW_PROXY_TEST_ROOT", "/var/tmp/root.pem")
            .env("SBX_FW_SECRETS_DIR", "/dev/shm")
            .arg("show-run")
            .arg(r.ws())
            .output()
            .unwrap()
    };
    let o = with_key(&r);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains(KEY), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    let env = run_flag_values(&s, "--env");
    assert!(
        env.iter()
            .any(|e| e == "ANTHROPIC_API_KEY=sbx-placeholder-anthropic"),
        "{env:?}"
    );
    assert!(!env.iter().any(|e| e == "ANTHROPIC_API_KEY"), "{env:?}");
    // The firewall's knobs never cross, even when `pass` names them.
    assert!(!env.iter().any(|e| e.starts_with("SBX_FW_")), "{env:?}");
    assert!(
        env.iter().any(|e| e.starts_with("NODE_EXTRA_CA_CERTS=")),
        "{env:?}"
    );
    let tmpfs = run_flag_values(&s, "--tmpfs");
    assert!(
        tmpfs
            .iter()
            .any(|t| t.starts_with("/run/sbx-secrets:mode=0700")),
        "{tmpfs:?}"
    );

    let o = r.cmd().arg("show-run").arg(r.ws()).output().unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(
        text(&o).contains("[secrets] anthropic: env:ANTHROPIC_API_KEY is not set"),
        "{}",
        text(&o)
    );

    // Proxy mode is the default; address mode with secrets is refused.
    let o = with_key(&Repo::new(&format!(
        "[network]\nmode = \"address\"\n{secrets}"
    )));
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("mode = \"proxy\""), "{}", text(&o));
}

/// `login --share` of a workspace whose Claude login is a `claude-login:`
/// secret's placeholders is refused before anything runs: the file in its
/// volume is placeholders or what the agent wrote (its own account's
/// login, which would become every workspace's), never the user's.
#[test]
fn a_claude_login_workspace_shares_no_login() {
    let r = Repo::new(
        "[network]\nmode = \"proxy\"\n[secrets]\nclaude = { from = \"claude-login:/nonexistent/.credentials.json\", host = \"api.anthropic.com\", header = \"authorization\" }\n",
    );
    let o = r
        .cmd()
        .args(["login", "--share", "--cli", "claude", "-C"])
        .arg(r.ws())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("nothing to share"), "{}", text(&o));
}
