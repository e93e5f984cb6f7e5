use super::*;

fn parse(s: &str) -> Result<Config, ConfigError> {
    parse_toml(s, Path::new("cfg.toml"))
}

fn err(s: &str) -> String {
    parse(s).expect_err(s).to_string()
}

#[test]
fn defaults_match_the_design() {
    let c = parse("").unwrap();
    assert_eq!(c.sandbox.memory.bytes, 4 << 30);
    assert_eq!(c.sandbox.cpus.0, 2.0);
    assert_eq!(c.sandbox.pids.0, 1024);
    assert!(c.environment.filter_secrets);
    assert!(c.network.registries && c.network.github && c.network.allow_localhost);
    assert!(!c.network.allow_external);
    assert!(c.git.block_no_verify && c.git.block_force_push && c.git.block_global_config);
    assert_eq!(c.backup.interval.0, Duration::from_secs(300));
    assert_eq!(
        c.protected_paths(),
        vec![
            ".git/hooks",
            ".husky",
            ".agent-sandbox",
            ".agent-precommit/user-context.json",
            ".claude",
            ".mcp.json",
            ".codex"
        ]
    );
    assert!(c.network.allow_git);
    assert_eq!(c.blocked_files().len(), DEFAULT_BLOCKED_FILES.len());
    assert_eq!(c.allowed_files()[0].text, ".env.example");
}

#[test]
fn the_design_example_parses() {
    let text = r#"
[sandbox]
memory = "4g"
cpus = 2.0
pids = 1024
ports = ["3000"]
protected = [".git/hooks", ".husky", ".agent-sandbox", "docs/"]

[filesystem]
blocked = [".env", ".env.*", "*.pem", "*.key", "*credentials*", "*secret*", ".aws/", ".ssh/", ".gnupg/"]
allowed = [".env.example"]

[environment]
filter-secrets = true
allow = ["NODE_ENV", "DEBUG", "CI"]
block = ["AWS_*", "GITHUB_TOKEN"]
pass = ["ANTHROPIC_API_KEY"]

[network]
allow-domains = ["api.anthropic.com", "*.example.com"]
registries = true
github = true
allow-localhost = true
allow-external = false

[git]
block-no-verify = true
block-force-push = true
block-global-config = true

[backup]
url = "file:///var/tmp/sbx-backup"
interval = "5m"
exclude = ["node_modules/", "target/", ".cache/"]
"#;
    let c = parse(text).unwrap();
    assert_eq!(c.sandbox.ports[0].text, "3000");
    assert_eq!(c.protected_paths().last().unwrap(), "docs");
    assert_eq!(c.environment.pass[0].0, "ANTHROPIC_API_KEY");
    assert!(c.network.allow_domains[1].wildcard);
    assert_eq!(c.backup.url.as_ref().unwrap().kind, StoreKind::File);
}

#[test]
fn errors_name_file_line_column_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "[sandbox]\nmemroy = \"4g\"\n",
            "cfg.toml:2:1: sandbox.memroy: unknown field `memroy`",
        ),
        (
            "[sandbox]\nmemory = \"4x\"\n",
            "cfg.toml:2:10: sandbox.memory: invalid size \"4x\"",
        ),
        (
            "[sandbox]\ncpus = \"two\"\n",
            "cfg.toml:2:8: sandbox.cpus: expected a number",
        ),
        (
            "[lifecycle]\nidle-stop = \"0s\"\n",
            "cfg.toml:2:13: lifecycle.idle-stop: invalid duration \"0s\": must be at least 1s",
        ),
        (
            "[lifecycle]\nidle-stop = \"soon\"\n",
            "cfg.toml:2:13: lifecycle.idle-stop: invalid duration \"soon\"",
        ),
        (
            "[sandbox]\ncpus = 0\n",
            "sandbox.cpus: cpus = 0 is out of range",
        ),
        (
            "[sandbox]\npids = -1\n",
            "sandbox.pids: pids = -1 is out of range",
        ),
        (
            "[sandbox]\nports = [\"70000\"]\n",
            "sandbox.ports[0]: invalid port \"70000\"",
        ),
        (
            "[sandbox]\nprotected = [\"../x\"]\n",
            "sandbox.protected[0]: invalid path \"../x\"",
        ),
        ("[sandbox]\nprotected = [\"/etc\"]\n", "use a path relative"),
        (
            "[environment]\nblock = [\"A[\"]\n",
            "environment.block[0]: invalid glob \"A[\"",
        ),
        (
            "[environment]\nallow = [\"X\", \"Y\", \"X\"]\n",
            "cfg.toml:2:9: environment.allow: duplicate entry \"X\"",
        ),
        (
            "[environment]\nfilter-secrets = \"yes\"\n",
            "environment.filter-secrets: invalid type",
        ),
        (
            "[network]\nallow-domains = [\"bad domain\"]\n",
            "network.allow-domains[0]: invalid domain",
        ),
        ("[network]\nallow-domains = [\"1.2.3.4\"]\n", "only names"),
        ("[network]\nallow-domains = [\"*.com\"]\n", "wildcard"),
        (
            "[backup]\ninterval = \"5 fortnights\"\n",
            "backup.interval: invalid duration",
        ),
        (
            "[backup]\nurl = \"ftp://x\"\n",
            "backup.url: unknown URL scheme \"ftp\"",
        ),
        ("[backup]\nurl = \"file://relative\"\n", "absolute path"),
        ("[backup]\nexclude = [\"a/../b\"]\n", "backup.exclude[0]"),
        // What validation accepts must mean the same at use.
        (
            "[backup]\nexclude = [\"//\"]\n",
            "empty and \".\" components",
        ),
        (
            "[filesystem]\nblocked = [\"./\"]\n",
            "filesystem.blocked[0]",
        ),
        ("[filesystem]\nblocked = [\"a//b\"]\n", "empty and"),
        (
            "[sandbox]\nprotected = [\"docs/*.md\"]\n",
            "sandbox.protected[0]: invalid path \"docs/*.md\": protected paths are literal paths, not globs",
        ),
        ("[sandbox]\nprotected = [\"{a,b}\"]\n", "not globs"),
        ("[bogus]\n", "cfg.toml:1:2: bogus: unknown field `bogus`"),
        ("[sandbox\n", "cfg.toml:1:"),
        ("a = 1\na = 2\n", "cfg.toml:2:1:"),
    ];
    let mut bad = Vec::new();
    for (text, want) in cases {
        let got = err(text);
        if !got.contains(want) || got.contains('\n') {
            bad.push(format!("config {text:?}\n  got:  {got}\n  want: {want}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn sizes() {
    for (s, bytes) in [
        ("4g", 4u64 << 30),
        ("512m", 512 << 20),
        ("1.5g", 3 << 29),
        ("4GB", 4 << 30),
        ("8gib", 8 << 30),
    ] {
        assert_eq!(s.parse::<Size>().unwrap().bytes, bytes, "{s}");
    }
    for s in ["4x", "", "g", "-1g", "1k", "1e9"] {
        assert!(s.parse::<Size>().is_err(), "{s}");
    }
}

#[test]
fn ports() {
    for s in ["3000", "8080:3000", "127.0.0.1:8080:3000", "53/udp"] {
        assert!(s.parse::<Port>().is_ok(), "{s}");
    }
    for s in ["0", "x", "1:2:3:4", "localhost:1:2", "80/sctp", ""] {
        assert!(s.parse::<Port>().is_err(), "{s}");
    }
    let c = parse("[sandbox]\nports = [3000, \"8080:80\"]\n").unwrap();
    assert_eq!(c.sandbox.ports.len(), 2);
    for (s, container, udp) in [
        ("3000", 3000, false),
        ("8080:3000/tcp", 3000, false),
        ("127.0.0.1:8080:53/udp", 53, true),
    ] {
        let p: Port = s.parse().unwrap();
        assert_eq!((p.container, p.udp), (container, udp), "{s}");
    }
}

/// Docker refuses fewer than 0.01 CPUs at run time: the config does first.
#[test]
fn cpus_docker_accepts() {
    assert!(err("[sandbox]\ncpus = 0.001\n").contains("0.01 to 1024"));
    assert_eq!(
        parse("[sandbox]\ncpus = 0.01\n").unwrap().sandbox.cpus.0,
        0.01
    );
}

#[test]
fn legacy_json_maps_to_the_schema() {
    let c = parse_legacy(
        r#"{"ports": ["3000"], "readonly": ["docs"], "egress_allow_domains": ["example.com"]}"#,
        Path::new("config.json"),
    )
    .unwrap();
    assert_eq!(c.sandbox.ports[0].text, "3000");
    assert_eq!(c.protected_paths().last().unwrap(), "docs");
    assert_eq!(c.network.allow_domains[0].name, "example.com");

    let e = parse_legacy(
        "{\n  \"ports\": [\"3000\"],\n  \"colour\": 1\n}",
        Path::new("config.json"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("config.json:3:"), "{e}");
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e = parse_legacy("{\"egress_allow_domains\": [\"a b\"]}", Path::new("c.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("egress_allow_domains[0]: invalid domain"), "{e}");
}

#[test]
fn discovery_order() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let sub = repo.join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    // Above the repository root: must not be picked up.
    std::fs::create_dir_all(t.path().join(DIR)).unwrap();
    std::fs::write(t.path().join(DIR).join(FILE), "[sandbox]\npids = 99\n").unwrap();
    let l = discover(None, None, &sub).unwrap();
    assert_eq!(l.source, Source::Default);

    std::fs::create_dir_all(repo.join(DIR)).unwrap();
    std::fs::write(repo.join(DIR).join(LEGACY_FILE), r#"{"ports": ["1"]}"#).unwrap();
    let l = discover(None, None, &sub).unwrap();
    assert_eq!(l.source, Source::Legacy(repo.join(DIR).join(LEGACY_FILE)));

    // TOML wins over the legacy file.
    std::fs::write(repo.join(DIR).join(FILE), "[sandbox]\npids = 100\n").unwrap();
    let l = discover(None, None, &sub).unwrap();
    assert_eq!(l.config.sandbox.pids.0, 100);

    let env = t.path().join("env.toml");
    std::fs::write(&env, "[sandbox]\npids = 200\n").unwrap();
    assert_eq!(
        discover(None, Some(&env), &sub)
            .unwrap()
            .config
            .sandbox
            .pids
            .0,
        200
    );
    let flag = t.path().join("flag.toml");
    std::fs::write(&flag, "[sandbox]\npids = 300\n").unwrap();
    assert_eq!(
        discover(Some(&flag), Some(&env), &sub)
            .unwrap()
            .config
            .sandbox
            .pids
            .0,
        300
    );

    let missing = discover(Some(&t.path().join("nope.toml")), None, &sub).unwrap_err();
    assert_eq!(missing.exit(), Exit::Config);
    assert!(
        missing
            .to_string()
            .contains("nope.toml: cannot read config")
    );
}

/// Legacy policy files' spellings are accepted where sbx
/// can honour them, and refused with the sbx key to write where it cannot.
#[test]
fn legacy_policy_spellings() {
    let c = parse(
        "[sandbox]\nenabled = true\n[filesystem]\nblocked-patterns = [\"**/.env*\", \"config/{a,b}.yml\"]\nallowed-patterns = [\".env.example\"]\n[network]\nallow-git = false\n",
    )
    .unwrap();
    let blocked: Vec<&str> = c
        .filesystem
        .blocked
        .iter()
        .map(|g| g.0.text.as_str())
        .collect();
    assert_eq!(blocked, ["**/.env*", "config/{a,b}.yml"]);
    assert_eq!(c.allowed_files()[0].text, ".env.example");
    assert!(!c.network.allow_git);
    for (text, want) in [
        (
            "[sandbox]\nenabled = false\n",
            "cfg.toml:2:11: sandbox.enabled: sbx has no off switch",
        ),
        (
            "[sandbox]\nenabled = \"yes\"\n",
            "sandbox.enabled: expected true",
        ),
        (
            "[tools]\nenforce-agent-permissions = true\n",
            "unknown field `enforce-agent-permissions`",
        ),
        (
            "[tools]\ndisallowed = [\"Bash(curl:*\"]\n",
            "tools.disallowed[0]: invalid tool rule \"Bash(curl:*\": close the argument",
        ),
        (
            "[tools]\ndisallowed = [\"Bash(:*)\"]\n",
            "name a command before",
        ),
        (
            "[tools]\nallowed = [\"Read(../x)\"]\n",
            "tools.allowed[0]: invalid path pattern \"../x\"",
        ),
        (
            "[tools]\ndisallowed = [\"Task(x)\"]\n",
            "cannot match the arguments of Task",
        ),
        (
            "[tools]\ndisallowed = [\"Write\", \"Write\"]\n",
            "duplicate entry \"Write\"",
        ),
        (
            "[tools]\nread-only = \"yes\"\n",
            "tools.read-only: invalid type",
        ),
        (
            "[tools]\ndeny-read = [\"\"]\n",
            "tools.deny-read[0]: invalid path pattern",
        ),
        (
            "[filesystem]\nblocked = [\"a\"]\nblocked-patterns = [\"b\"]\n",
            "duplicate field `blocked`",
        ),
    ] {
        let got = err(text);
        assert!(got.contains(want), "{text:?}\n got:  {got}\n want: {want}");
        assert!(!got.contains('\n'), "{got}");
    }
}

#[test]
fn guest_services_need_a_program() {
    let p = Path::new("c.toml");
    let c = parse_toml("[guest.services.term]\ncommand = [\"ttyd\", \"tmux\"]\n", p).unwrap();
    assert_eq!(c.guest.services["term"].command.0, ["ttyd", "tmux"]);
    for bad in [
        "[guest.services.term]\ncommand = []\n",
        "[guest.services.term]\ncommand = [\"\"]\n",
        "[guest.services.term]\ncommand = [\"x\"]\nuser = \"root\"\n",
    ] {
        let e = parse_toml(bad, p).unwrap_err().to_string();
        assert!(e.contains("guest.services"), "{bad}: {e}");
    }
}

#[test]
fn tools_table_parses_into_rules() {
    let c = parse_toml(
        "[tools]\ndisallowed = [\"Write\", \"Edit\", \"Bash(curl:*)\", \"Bash(git push)\", \"Read(**/*.sql)\", \"WebFetch(domain:Example.com)\", \"Wirte\"]\nallowed = [\"Read\", \"mcp__fs__read\"]\nread-only = true\ndeny-read = [\"**/.env*\"]\n",
        Path::new("cfg.toml"),
    )
    .unwrap();
    let t = c.tools.as_ref().unwrap();
    let shown: Vec<String> = t.disallowed.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        shown,
        [
            "Write",
            "Edit",
            "Bash(curl:*)",
            "Bash(git push)",
            "Read(**/*.sql)",
            "WebFetch(domain:example.com)",
            "Wirte"
        ]
    );
    assert!(matches!(t.disallowed[2].arg, Some(RuleArg::Prefix(ref p)) if p == "curl"));
    assert!(matches!(t.disallowed[3].arg, Some(RuleArg::Exact(ref p)) if p == "git push"));
    assert!(c.read_only());
    // deny-read masks like [filesystem].blocked, on top of the defaults.
    let blocked = c.blocked_files();
    assert_eq!(blocked.last().unwrap().text, "**/.env*");
    assert_eq!(blocked.len(), DEFAULT_BLOCKED_FILES.len() + 1);
    // The typo is a warning naming the known tools; the MCP tool is not.
    let w = t.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("unknown tool \"Wirte\""), "{w:?}");
    assert!(w[0].contains("Write"), "{w:?}");
    // No table: no policy, nothing read-only.
    let c = parse_toml("", Path::new("cfg.toml")).unwrap();
    assert!(c.tools.is_none() && !c.read_only());
}

/// A branch sandbox's store is one segment per part below the main one's,
/// whatever the branch name holds (`#`, `%`, `..` never escape or end it).
#[test]
fn a_child_store_is_two_segments_down() {
    for (base, name, want_path) in [
        ("s3://bkt/a/b/", "feat", "a/b/branch/feat"),
        ("s3://bkt", "a#b%2F..", "branch/a%23b%252F.."),
        ("gs://bkt/p", "...", "p/branch/..."),
    ] {
        let u: StoreUrl = base.parse().unwrap();
        let c = u.child("branch", name).unwrap();
        assert_eq!(
            (c.kind, c.bucket.as_str()),
            (u.kind, "bkt"),
            "{base} {name}"
        );
        assert_eq!(c.path, want_path, "{base} {name}");
    }
    let u: StoreUrl = "file:///var/tmp/x/".parse().unwrap();
    let c = u.child("branch", "a#b").unwrap();
    assert_eq!(c.path, "/var/tmp/x/branch/a#b");
    for bad in ["", ".", ".."] {
        assert!(u.child("branch", bad).is_err(), "{bad:?}");
    }
}

#[test]
fn store_urls_are_parsed_once_into_fields() {
    let u: StoreUrl = "s3://bkt/a/b/".parse().unwrap();
    assert_eq!(
        (u.kind, u.bucket.as_str(), u.path.as_str()),
        (StoreKind::S3, "bkt", "a/b")
    );
    let u: StoreUrl = "gs://bkt".parse().unwrap();
    assert_eq!(
        (u.kind, u.bucket.as_str(), u.path.as_str()),
        (StoreKind::Gs, "bkt", "")
    );
    let u: StoreUrl = "file:///var/tmp/x".parse().unwrap();
    assert_eq!((u.kind, u.path.as_str()), (StoreKind::File, "/var/tmp/x"));
    let u: StoreUrl = "memory://".parse().unwrap();
    assert_eq!(u.kind, StoreKind::Memory);
    // Trailing and doubled slashes do not change the prefix.
    let u: StoreUrl = "s3://bkt//a/b//".parse().unwrap();
    assert_eq!((u.bucket.as_str(), u.path.as_str()), ("bkt", "a/b"));
    let u: StoreUrl = "S3://bkt/".parse().unwrap();
    assert_eq!(
        (u.kind, u.bucket.as_str(), u.path.as_str()),
        (StoreKind::S3, "bkt", "")
    );
    let u: StoreUrl = "file:///var/tmp/x/".parse().unwrap();
    assert_eq!(u.path.as_str(), "/var/tmp/x/");
    for (bad, says) in [
        ("s3:///prefix", "name a bucket"),
        ("gs://", "name a bucket"),
        ("s3://[::1]/x", "name a bucket"),
        ("file://rel", "absolute path"),
        ("file://host/var/tmp", "absolute path"),
        ("ftp://x", "unknown URL scheme"),
        ("bucket", "invalid URL"),
        ("s3://key:secret@bkt/x", "no user or password"),
        ("gs://user@bkt/x", "no user or password"),
        ("s3://bkt:9000/x", "no port"),
        ("s3://bkt/x?versionId=1", "no port, ? or #"),
        ("s3://bkt/x#frag", "no port, ? or #"),
    ] {
        let err = bad.parse::<StoreUrl>().unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn workspace_mode_is_bind_unless_clone_is_asked_for() {
    assert!(!parse("").unwrap().clone_mode());
    let c = parse("[sandbox]\nworkspace = \"clone\"\n").unwrap();
    assert!(c.clone_mode());
    assert!(
        !parse("[sandbox]\nworkspace = \"bind\"\n")
            .unwrap()
            .clone_mode()
    );
    let e = parse("[sandbox]\nworkspace = \"copy\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("workspace") && e.contains("clone"), "{e}");
}

#[test]
fn ssh_table() {
    let p = std::path::Path::new("cfg.toml");
    assert!(!parse_toml("", p).unwrap().ssh.enabled);
    assert!(
        parse_toml("[ssh]\nenabled = true\n", p)
            .unwrap()
            .ssh
            .enabled
    );
    for (text, want) in [
        ("[ssh]\nenabled = \"yes\"\n", "ssh.enabled"),
        ("[ssh]\nport = 22\n", "port"),
    ] {
        let e = parse_toml(text, p).unwrap_err().to_string();
        assert!(e.contains("cfg.toml:2") && e.contains(want), "{e}");
    }
}

/// `[network.rules]`: a bad rule is one line naming the key and the rule.
#[test]
fn network_rules_parse_or_say_which_rule() {
    let c = parse(
        "[network]\nmode = \"proxy\"\n[network.rules]\n\"github.com\" = \"repo-only\"\n\"*.registry.example\" = [\"read-only\", \"POST /-/v1/x\"]\n",
    )
    .unwrap();
    assert_eq!(c.network.rules.len(), 2);
    let e = err(
        "[network]\nmode = \"proxy\"\n[network.rules]\n\"github.com\" = [\"GET *\", \"PUSH\"]\n",
    );
    assert!(
        e.starts_with("cfg.toml:4:") && e.contains("network.rules") && e.contains("rule \"PUSH\""),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let e = err("[network]\nmode = \"proxy\"\n[network.rules]\n\"no host\" = \"off\"\n");
    assert!(e.contains("invalid domain"), "{e}");
}
