//! The filtering policy: a pure function from (name, value) to a decision
//! and the rule that made it, like sudo-rs's `should_keep`. The precedence
//! is fixed and documented in the man page:
//!
//! 1. `block`        config [environment].block          drop
//! 2. `pass`         config [environment].pass           keep, audited
//! 3. `baseline`     PATH, HOME, USER, SHELL, TERM, …    keep
//! 4. `secret-name`  built-in secret name patterns       drop (filter-secrets)
//! 5. `allow`        config [environment].allow          keep
//! 6. `secret-value` a credential detected in the value  drop (filter-secrets)
//! 7. `default`      anything else                       keep
//!
//! `allow` cannot rescue a secret-looking *name*: that takes `pass`, which
//! leaves a record in the audit log, so no secret crosses silently.

use std::ffi::OsStr;

use sbx_core::config::Environment;
use sbx_core::glob::NameSet;
use serde::Serialize;

use crate::detect;

/// Kept unless blocked by name.
pub const BASELINE: &[&str] = &[
    "PATH", "HOME", "USER", "SHELL", "TERM", "LANG", "LC_*", "TZ", "NODE_ENV", "DEBUG", "CI",
];

/// Dropped when `filter-secrets = true` (case-insensitive globs).
pub const SECRET_NAMES: &[&str] = &[
    "*_KEY",
    "*_KEYS",
    "*API_KEY*",
    "*APIKEY*",
    "*ACCESS_KEY*",
    "*PRIVATE_KEY*",
    "*SECRET*",
    "*_TOKEN",
    "*_TOKEN_*",
    "TOKEN",
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*CREDENTIAL*",
    "*_AUTH",
    "AWS_*",
    "GITHUB_*",
    "GH_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SSH_AUTH_SOCK",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    Block,
    Pass,
    Baseline,
    SecretName,
    Allow,
    SecretValue,
    Default,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::Block => "block",
            Rule::Pass => "pass",
            Rule::Baseline => "baseline",
            Rule::SecretName => "secret-name",
            Rule::Allow => "allow",
            Rule::SecretValue => "secret-value",
            Rule::Default => "default",
        }
    }

    pub fn keeps(self) -> bool {
        !matches!(self, Rule::Block | Rule::SecretName | Rule::SecretValue)
    }
}

/// A decision: the rule, and the pattern or detector that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub rule: Rule,
    pub detail: Option<String>,
}

impl Decision {
    pub fn keep(&self) -> bool {
        self.rule.keeps()
    }

    /// One line for humans and the audit log; never the value.
    pub fn reason(&self) -> String {
        match (self.rule, &self.detail) {
            (Rule::SecretValue, Some(d)) => format!("value looks like a credential ({d})"),
            (Rule::SecretName, Some(p)) => {
                format!("name matches {p}; to pass it anyway, add it to [environment].pass")
            }
            (_, Some(p)) => format!("name matches {p}"),
            (Rule::Default, None) => "no rule matched".to_owned(),
            (r, None) => r.name().to_owned(),
        }
    }
}

/// A compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    filter_secrets: bool,
    block: NameSet,
    pass: NameSet,
    baseline: NameSet,
    secret_names: NameSet,
    allow: NameSet,
}

impl Policy {
    pub fn new(env: &Environment) -> Self {
        let set = |v: &[sbx_core::config::NameGlob]| {
            let pats: Vec<&str> = v.iter().map(|g| g.0.as_str()).collect();
            // Config globs were validated when the config was parsed.
            NameSet::new(&pats).expect("validated glob")
        };
        Self {
            filter_secrets: env.filter_secrets,
            block: set(&env.block),
            pass: set(&env.pass),
            baseline: NameSet::new(BASELINE).expect("built-in glob"),
            secret_names: NameSet::new(SECRET_NAMES).expect("built-in glob"),
            allow: set(&env.allow),
        }
    }

    pub fn decide(&self, name: &OsStr, value: &OsStr) -> Decision {
        use std::os::unix::ffi::OsStrExt;
        let hit = |rule, set: &NameSet| {
            set.first_match(name).map(|p| Decision {
                rule,
                detail: Some(p.to_owned()),
            })
        };
        if let Some(d) = hit(Rule::Block, &self.block) {
            return d;
        }
        if let Some(d) = hit(Rule::Pass, &self.pass) {
            return d;
        }
        if let Some(d) = hit(Rule::Baseline, &self.baseline) {
            return d;
        }
        if self.filter_secrets {
            if let Some(d) = hit(Rule::SecretName, &self.secret_names) {
                return d;
            }
        }
        if let Some(d) = hit(Rule::Allow, &self.allow) {
            return d;
        }
        if self.filter_secrets {
            if let Some(det) = detect::detect(value.as_bytes()) {
                return Decision {
                    rule: Rule::SecretValue,
                    detail: Some(det.to_owned()),
                };
            }
        }
        Decision {
            rule: Rule::Default,
            detail: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(toml: &str) -> Environment {
        sbx_core::config::parse_toml(toml, std::path::Path::new("t.toml"))
            .unwrap()
            .environment
    }

    #[test]
    fn precedence_table() {
        let p = Policy::new(&env(r#"[environment]
allow = ["MY_*", "SAFE_VALUE"]
block = ["PATH_EXTRA", "HOME", "AWS_REGION"]
pass = ["ANTHROPIC_API_KEY", "HOME"]
"#));
        let ghp = format!("ghp_{}", "x".repeat(36));
        let cases: &[(&str, &str, Rule)] = &[
            ("PATH", "/usr/bin", Rule::Baseline),
            ("LC_ALL", "C", Rule::Baseline),
            ("lc_all", "C", Rule::Baseline),
            ("HOME", "/root", Rule::Block), // block beats pass and baseline
            ("AWS_REGION", "eu", Rule::Block),
            (
                "ANTHROPIC_API_KEY",
                "sk-ant-xxxxxxxxxxxxxxxxxxxxxxxxxxx",
                Rule::Pass,
            ),
            ("OPENAI_API_KEY", "x", Rule::SecretName),
            ("GITHUB_TOKEN", "x", Rule::SecretName),
            ("github_token", "x", Rule::SecretName),
            ("AWS_ACCESS_KEY_ID", "x", Rule::SecretName),
            ("DB_PASSWORD", "x", Rule::SecretName),
            (
                "GOOGLE_APPLICATION_CREDENTIALS",
                "/k.json",
                Rule::SecretName,
            ),
            ("SSH_AUTH_SOCK", "/tmp/s", Rule::SecretName),
            ("MY_API_KEY", "x", Rule::SecretName), // allow cannot rescue a secret name
            ("MY_SETTING", &ghp, Rule::Allow),     // allow skips value detectors
            ("INNOCENT", &ghp, Rule::SecretValue),
            ("EDITOR", "vim", Rule::Default),
            ("TOKENIZERS_PARALLELISM", "false", Rule::Default),
            ("KEYBOARD", "us", Rule::Default),
        ];
        for (name, value, want) in cases {
            let d = p.decide(OsStr::new(name), OsStr::new(value));
            assert_eq!(d.rule, *want, "{name}");
        }
    }

    #[test]
    fn filter_secrets_off_keeps_all_but_blocked() {
        let p = Policy::new(&env(
            "[environment]\nfilter-secrets = false\nblock = [\"X_*\"]\n",
        ));
        assert_eq!(
            p.decide(OsStr::new("GITHUB_TOKEN"), OsStr::new("t")).rule,
            Rule::Default
        );
        assert_eq!(
            p.decide(OsStr::new("X_1"), OsStr::new("t")).rule,
            Rule::Block
        );
    }

    #[test]
    fn reasons_never_contain_values() {
        let p = Policy::new(&Environment::default());
        let secret = format!("ghp_{}", "s3cr3t".repeat(8));
        for name in ["GITHUB_TOKEN", "INNOCENT"] {
            let d = p.decide(OsStr::new(name), OsStr::new(&secret));
            assert!(!d.reason().contains("s3cr3t"));
        }
    }
}
