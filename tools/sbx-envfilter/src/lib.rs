//! sbx-envfilter: decide which environment variables may cross into the
//! sandbox, then exec a command with only those, or print them. sbx-run
//! uses this library to build a container's environment.
#![forbid(unsafe_code)]

pub mod detect;
pub mod input;
pub mod rules;

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;

use clap::{CommandFactory, Parser};
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::{BoxError, Message};
use sbx_core::{Exit, SbxError, config, output};
use serde::Serialize;

pub use rules::{Decision, Policy, Rule};

const TOOL: &str = "sbx-envfilter";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-envfilter",
    version,
    about = "Filter secrets out of an environment, then exec a command or print the result",
    long_about = "Filter secrets out of an environment, then exec a command or print the result.\n\n\
        sbx-envfilter reads its own environment (or, with --stdin, one piped to it), decides for every \
        variable whether it may cross into the sandbox, and then either replaces itself with COMMAND \
        (exec, not spawn) or prints what it kept. Dropped values are never printed anywhere: not in \
        --explain, not in errors, not in the audit log. Every dropped variable, and every variable let \
        through by [environment].pass, is one audit-log record holding its name and rule.",
    after_long_help = AFTER_HELP,
    trailing_var_arg = true,
    override_usage = "sbx-envfilter [OPTIONS] -- COMMAND [ARGS]...\n       \
        sbx-envfilter [OPTIONS] --print [-0 | --json]\n       \
        sbx-envfilter [OPTIONS] --explain [--json]\n       \
        env -0 | sbx-envfilter --stdin -0 --print -0"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Print the filtered environment as NAME=VALUE lines instead of running a command.
    #[arg(long, conflicts_with_all = ["explain", "check_config"])]
    pub print: bool,

    /// Read the environment to filter from stdin (NAME=VALUE lines, or NUL-separated with -0).
    #[arg(long)]
    pub stdin: bool,

    /// Records are NUL-terminated, as `env -0` prints them, on stdin and for --print (may be repeated).
    #[arg(short = '0', long = "null", overrides_with = "null")]
    pub null: bool,

    /// For every variable: kept or dropped and the rule that decided. Values are never shown.
    #[arg(long, conflicts_with_all = ["print", "check_config"])]
    pub explain: bool,

    /// Validate the config file and exit (0 when valid, 78 when not).
    #[arg(long)]
    pub check_config: bool,

    /// The command to exec with the filtered environment (after --).
    #[arg(value_name = "COMMAND", num_args = 1..)]
    pub command: Vec<OsString>,
}

const AFTER_HELP: &str = "\
Rules, in order; the first that matches decides:
  1. block         [environment].block globs                     drop
  2. pass          [environment].pass globs                      keep, and audit it
  3. baseline      PATH HOME USER SHELL TERM LANG LC_* TZ
                   NODE_ENV DEBUG CI                              keep
  4. secret-name   *_KEY *_KEYS *API_KEY* *APIKEY* *ACCESS_KEY*
                   *PRIVATE_KEY* *SECRET* *_TOKEN *_TOKEN_* TOKEN
                   *PASSWORD* *PASSWD* *PASSPHRASE* *CREDENTIAL*
                   *_AUTH AWS_* GITHUB_* GH_TOKEN
                   GOOGLE_APPLICATION_CREDENTIALS SSH_AUTH_SOCK    drop
  5. allow         [environment].allow globs                     keep
  6. secret-value  the value holds a known credential format      drop
  7. default       anything else                                  keep

Name globs are case-insensitive. Rules 4 and 6 apply only while filter-secrets = true (the default). \
allow cannot rescue a secret-looking name; pass can, and every pass is written to the audit log.

Value detectors (rule 6):
  private-key        a PEM block \"-----BEGIN ... PRIVATE KEY-----\"
  github-token       ghp_ gho_ ghu_ ghs_ ghr_ (20+ chars), github_pat_
  gitlab-token       glpat-
  anthropic-key      sk-ant-
  openai-key         sk- sk-proj- sk-or- (20+ chars)
  aws-access-key-id  AKIA ASIA AGPA AIDA AROA ANPA ANVA AIPA + 16 chars
  slack-token        xoxa- xoxb- xoxp- xoxo- xoxs- xoxr- xapp-
  stripe-key         sk_live_ sk_test_ rk_live_ rk_test_ whsec_
  google-api-key     AIza + 35 chars
  npm-token          npm_ + 36 chars
  huggingface-token  hf_ + 30+ chars
  jwt                eyJ....eyJ....signature
  url-credentials    scheme://user:password@host

Input (--stdin): records are NAME=VALUE; bytes need not be UTF-8 and are kept as they are. \
A later definition of a name replaces an earlier one. In line mode blank lines are skipped. \
A record without '=', an empty name, or a NUL byte in line mode is refused (exit 65) with the \
record's number and nothing is printed or run.

Output (--print): NAME=VALUE lines, or NUL-terminated records with -0, or with --json one \
{\"type\":\"env\",\"data\":{\"name\":…,\"value\":…}} object a line (non-UTF-8 bytes as {\"bytes\": base64}). \
In line mode a kept value that contains a newline is refused (exit 65): use -0.

Exit status: COMMAND's own status when it ran; 125 when sbx-envfilter itself failed before running it, \
126 when COMMAND cannot be executed, 127 when it is not found; 64 usage, 65 malformed input, 78 bad config.

Config: --config FILE, else $SBX_CONFIG, else .agent-sandbox/config.toml (or the legacy config.json) found \
by walking up from the working directory to the repository root; none found: the built-in defaults. \
Audit log: $SBX_AUDIT_LOG, else $XDG_STATE_HOME/sbx/audit.jsonl; inside a sandbox records go to sbx-guest, which alone writes /run/sbx/host/audit.jsonl.

Examples:
  sbx-envfilter -- claude                       run claude without the host's secrets
  sbx-envfilter --explain | grep drop           what would be dropped, and why
  env -0 | sbx-envfilter --stdin -0 --print -0  filter a piped environment";

/// clap definition, shared with xtask for man pages and completions.
pub fn command() -> clap::Command {
    Cli::command()
}

/// One variable with its decision.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: OsString,
    pub value: OsString,
    pub decision: Decision,
}

/// Decide every variable; order is kept.
pub fn filter(policy: &Policy, vars: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<Entry> {
    vars.into_iter()
        .map(|(name, value)| {
            let decision = policy.decide(&name, &value);
            Entry {
                name,
                value,
                decision,
            }
        })
        .collect()
}

/// Write the audit records for a real filtering (not `--explain`).
pub fn audit_entries(entries: &[Entry], operation: &str) {
    for e in entries {
        let outcome = match e.decision.rule {
            Rule::Pass => Outcome::Passed,
            r if !r.keeps() => Outcome::Blocked,
            _ => continue,
        };
        let name = e.name.to_string_lossy();
        let reason = e.decision.reason();
        audit::append(
            &Record::new(TOOL, operation, &name, outcome, e.decision.rule.name()).reason(&reason),
        );
    }
}

#[derive(Debug, thiserror::Error)]
enum EnvFilterError {
    #[error(transparent)]
    Input(#[from] input::InputError),
    #[error("cannot read stdin: {0}")]
    ReadStdin(io::Error),
    #[error("variable {0} has a newline in its value; use -0 to print NUL-terminated records")]
    NewlineInValue(String),
    #[error("cannot write output: {0}")]
    Write(#[from] io::Error),
    #[error("{}: command not found", .0.to_string_lossy())]
    NotFound(OsString),
    #[error("{name}: cannot run: {err}", name = .0.to_string_lossy(), err = .1)]
    CannotInvoke(OsString, io::Error),
}

impl SbxError for EnvFilterError {
    fn exit(&self) -> Exit {
        match self {
            Self::Input(_) | Self::NewlineInValue(_) => Exit::DataErr,
            Self::ReadStdin(_) | Self::Write(_) => Exit::IoErr,
            Self::NotFound(_) => Exit::NotFound,
            Self::CannotInvoke(..) => Exit::CannotInvoke,
        }
    }
}

pub fn run(cli: Cli) -> Result<Exit, BoxError> {
    output::init(TOOL, &cli.common);
    if cli.check_config {
        return config::check(&cli.common);
    }
    let mode_count =
        usize::from(cli.print) + usize::from(cli.explain) + usize::from(!cli.command.is_empty());
    if mode_count != 1 {
        return Err(Message::new(
            Exit::Usage,
            "give one of: a COMMAND after --, --print, --explain or --check-config (see --help)",
        )
        .into());
    }
    if cli.null && !(cli.print || cli.stdin) {
        return Err(Message::new(Exit::Usage, "-0 applies to --stdin and --print").into());
    }
    if cli.common.json && !(cli.print || cli.explain) {
        return Err(Message::new(Exit::Usage, "--json applies to --print and --explain").into());
    }
    let loaded = config::discover_from_env(cli.common.config.as_deref())?;
    output::debug(&format!("config: {}", loaded.describe()));
    let policy = Policy::new(&loaded.config.environment);

    let env: input::Env = if cli.stdin {
        let mut buf = Vec::new();
        io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .map_err(EnvFilterError::ReadStdin)?;
        input::parse(&buf, cli.null).map_err(EnvFilterError::from)?
    } else {
        std::env::vars_os().collect()
    };
    let entries = filter(&policy, env.into_vars());

    if cli.explain {
        explain(&entries, cli.common.json)?;
        return Ok(Exit::Ok);
    }
    for e in entries.iter().filter(|e| !e.decision.keep()) {
        output::info(&format!(
            "dropped {} ({})",
            e.name.to_string_lossy(),
            e.decision.rule.name()
        ));
    }
    if cli.print {
        let text = render(&entries, cli.null, cli.common.json)?;
        audit_entries(&entries, "env-print");
        io::stdout()
            .lock()
            .write_all(&text)
            .map_err(EnvFilterError::Write)?;
        return Ok(Exit::Ok);
    }
    audit_entries(&entries, "env-exec");
    Err(exec(&cli.command, &entries).into())
}

fn render(entries: &[Entry], null: bool, json: bool) -> Result<Vec<u8>, EnvFilterError> {
    #[derive(Serialize)]
    struct Var {
        name: serde_json::Value,
        value: serde_json::Value,
    }
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.decision.keep()) {
        if json {
            let v = Var {
                name: output::bytes_value(e.name.as_bytes()),
                value: output::bytes_value(e.value.as_bytes()),
            };
            output::json_line(&mut out, "env", &v)?;
            continue;
        }
        if !null && e.value.as_bytes().contains(&b'\n') {
            return Err(EnvFilterError::NewlineInValue(
                e.name.to_string_lossy().into_owned(),
            ));
        }
        out.extend_from_slice(e.name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(e.value.as_bytes());
        out.push(if null { 0 } else { b'\n' });
    }
    Ok(out)
}

fn explain(entries: &[Entry], json: bool) -> Result<(), EnvFilterError> {
    #[derive(Serialize)]
    struct Explained<'a> {
        name: serde_json::Value,
        action: &'a str,
        rule: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        matched: Option<&'a str>,
        reason: String,
    }
    let mut out = io::stdout().lock();
    for e in entries {
        let action = if e.decision.keep() { "keep" } else { "drop" };
        if json {
            let x = Explained {
                name: output::bytes_value(e.name.as_bytes()),
                action,
                rule: e.decision.rule.name(),
                matched: e.decision.detail.as_deref(),
                reason: e.decision.reason(),
            };
            output::json_line(&mut out, "decision", &x)?;
        } else {
            let mut line = Vec::new();
            line.extend_from_slice(action.as_bytes());
            line.push(b'\t');
            line.extend_from_slice(e.name.as_bytes());
            line.push(b'\t');
            line.extend_from_slice(e.decision.rule.name().as_bytes());
            if let Some(d) = &e.decision.detail {
                line.extend_from_slice(format!(" ({d})").as_bytes());
            }
            line.push(b'\n');
            out.write_all(&line)?;
        }
    }
    Ok(())
}

/// Replace this process with the command; returns only on failure.
fn exec(command: &[OsString], entries: &[Entry]) -> EnvFilterError {
    let kept: Vec<(OsString, OsString)> = entries
        .iter()
        .filter(|e| e.decision.keep())
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    let program = &command[0];
    let child_path = kept
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let resolved = match sbx_sys::resolve_program(program, child_path, &cwd) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return EnvFilterError::NotFound(program.clone());
        }
        Err(e) => return EnvFilterError::CannotInvoke(program.clone(), e),
    };
    let err = sbx_sys::exec(&resolved, command, &kept);
    if err.kind() == io::ErrorKind::NotFound {
        EnvFilterError::NotFound(program.clone())
    } else {
        EnvFilterError::CannotInvoke(program.clone(), err)
    }
}

/// Convenience for callers that only need the kept variables.
pub fn kept(entries: &[Entry]) -> impl Iterator<Item = (&OsStr, &OsStr)> {
    entries
        .iter()
        .filter(|e| e.decision.keep())
        .map(|e| (e.name.as_os_str(), e.value.as_os_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn render_refuses_newlines_in_line_mode_only() {
        let p = Policy::new(&Default::default());
        let e = filter(&p, [("A".into(), "x\ny".into())]);
        assert!(
            matches!(render(&e, false, false), Err(EnvFilterError::NewlineInValue(n)) if n == "A")
        );
        assert_eq!(render(&e, true, false).unwrap(), b"A=x\ny\0");
    }
}
