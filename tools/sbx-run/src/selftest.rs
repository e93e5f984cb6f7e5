//! `sbx-run test`: the policy self-check. Starts the sandbox and
//! tries, as the agent, what each guard must refuse; prints expected vs got
//! and exits 0 only when every configured guard held. No check sends
//! traffic anywhere: the domain check asks the sandbox's DNS filter.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

use crate::workspace::Workspace;
use crate::{RunError, guestexec, lifecycle, spec};

/// A name the DNS filter must refuse unless the config allows it.
const BLOCKED_NAME: &str = "example.com";

struct Check {
    name: &'static str,
    expected: String,
    got: String,
    /// None: not configured, nothing to hold.
    held: Option<bool>,
}

/// Run `script` as the agent in the sandbox, through the guest as every
/// agent process starts (its seccomp filter included, which `docker exec`
/// would skip): (exit code, stdout+stderr).
fn agent_sh(ws: &Workspace, script: &str) -> Result<(i32, String), RunError> {
    let argv = ["sh", "-c", script].map(std::ffi::OsString::from);
    let mut req = guestexec::exec_request(ws, &argv, "sbx-run-test", false);
    req.cwd = Some(ws.target());
    let client = guestexec::connect(&guestexec::socket_for(ws)).map_err(|e| match e {
        guestexec::GuestError::NoGuest(..) => RunError::NoGuest(ws.names.container.clone()),
        e => RunError::NotReady(e.to_string()),
    })?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = match guestexec::run_with(client, req, None, &mut out, &mut err, false) {
        Ok(x) => x.status,
        Err(guestexec::GuestError::Spawn(_, s)) => s,
        Err(e) => return Err(RunError::NotReady(e.to_string())),
    };
    out.extend_from_slice(&err);
    Ok((code, String::from_utf8_lossy(&out).trim().to_owned()))
}

fn short(s: &str) -> String {
    let line = s.lines().last().unwrap_or("");
    line.chars().take(40).collect()
}

pub fn run(common: &CommonArgs, path: Option<PathBuf>) -> Result<ExitCode, BoxError> {
    let ws = lifecycle::start(common, path, None)?;
    let cfg = &ws.loaded.config;
    let target = ws.target();
    let q = |s: &str| {
        shlex::try_quote(s)
            .map(|q| q.into_owned())
            .unwrap_or_default()
    };
    let mut checks = Vec::new();

    // 1. A write under read-only.
    let probe = format!("{target}/.sbx-selftest-write");
    let (code, out) = agent_sh(&ws, &format!("touch {p} && rm -f {p}", p = q(&probe)))?;
    checks.push(if cfg.read_only() {
        Check {
            name: "write under read-only",
            expected: "refused (EROFS)".into(),
            held: Some(code != 0 && out.contains("Read-only file system")),
            got: if code == 0 {
                "written".into()
            } else {
                short(&out)
            },
        }
    } else {
        Check {
            name: "write under read-only",
            expected: "n/a ([tools].read-only = false)".into(),
            got: if code == 0 {
                "written".into()
            } else {
                short(&out)
            },
            held: None,
        }
    });

    // 2. A disallowed tool, through the hook the managed settings install.
    let rule = cfg
        .tools
        .as_ref()
        .and_then(|t| t.disallowed.iter().find(|r| r.arg.is_none()).cloned());
    checks.push(match rule {
        Some(r) => {
            let hook = serde_json::json!({
                "session_id": "sbx-run-test", "hook_event_name": "PreToolUse", "cwd": target,
                "tool_name": r.tool, "tool_input": {"file_path": format!("{target}/.sbx-selftest")},
            });
            // The hook Claude would run, as the managed settings name it:
            // exec form, failing closed (a shell-form or fail-open entry
            // is not held, whatever it exits with).
            let script = format!(
                "h=$(jq -er '.hooks.PreToolUse[] | select(.matcher == \"*\") | .hooks[0] | select(.onFailure == \"block\" and (.args | type) == \"array\") | [.command] + .args | @sh' {m}) || {{ echo 'no fail-closed exec-form PreToolUse hook in {m}'; exit 9; }}; eval \"set -- $h\"; echo {j} | \"$@\"",
                m = sbx_tool_guard::settings::MANAGED_PATH,
                j = q(&hook.to_string()),
            );
            let (code, out) = agent_sh(&ws, &script)?;
            Check {
                name: "disallowed tool",
                expected: format!("{} refused by the hook (exit 2)", r.tool),
                held: Some(code == 2),
                got: format!("exit {code}: {}", short(&out)),
            }
        }
        None => Check {
            name: "disallowed tool",
            expected: "n/a (no [tools].disallowed tool name)".into(),
            got: "-".into(),
            held: None,
        },
    });

    // 3. A secret read: a masked file reads as empty.
    let masks = spec::mask_sources()?;
    let env = spec::env_names(&ws, std::env::vars_os());
    let s = spec::build(&ws, &ws.names.image, &env, (&masks.0, &masks.1), false)?;
    let secret = s.masked.iter().find(|m| ws.path.join(m).is_file());
    checks.push(match secret {
        Some(m) => {
            let (code, out) = agent_sh(&ws, &format!("wc -c < {}", q(m)))?;
            Check {
                name: "secret read",
                expected: format!("{m} reads as empty"),
                held: Some(code == 0 && out.trim() == "0"),
                got: format!("{} bytes", out.trim()),
            }
        }
        None => Check {
            name: "secret read",
            expected: "n/a (no masked file in the workspace)".into(),
            got: "-".into(),
            held: None,
        },
    });

    // 4. A blocked domain: the DNS filter gives no address.
    let allowed = cfg.network.allow_external
        || cfg.network.allow_domains.iter().any(|d| {
            d.name == BLOCKED_NAME
                || (d.wildcard && BLOCKED_NAME.ends_with(&format!(".{}", d.name)))
        });
    if allowed {
        checks.push(Check {
            name: "blocked domain",
            expected: format!("n/a ({BLOCKED_NAME} is allowed by [network])"),
            got: "-".into(),
            held: None,
        });
    } else {
        let (code, out) = agent_sh(&ws, &format!("getent hosts {BLOCKED_NAME}"))?;
        checks.push(Check {
            name: "blocked domain",
            expected: format!("{BLOCKED_NAME} does not resolve"),
            held: Some(code != 0),
            got: if code == 0 {
                format!("resolved: {}", short(&out))
            } else {
                "no address".into()
            },
        });
    }

    // 5. `git commit --no-verify`, in a scratch repository in the sandbox.
    let (code, out) = agent_sh(
        &ws,
        "d=$(mktemp -d) && cd \"$d\" && git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty --no-verify -m t; rc=$?; rm -rf \"$d\"; exit $rc",
    )?;
    checks.push(if cfg.git.block_no_verify {
        Check {
            name: "--no-verify commit",
            expected: "refused by the git guard (exit 77)".into(),
            held: Some(code == 77),
            got: format!("exit {code}: {}", short(&out)),
        }
    } else {
        Check {
            name: "--no-verify commit",
            expected: "n/a ([git].block-no-verify = false)".into(),
            got: format!("exit {code}"),
            held: None,
        }
    });

    let failed = checks.iter().filter(|c| c.held == Some(false)).count();
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| RunError::Io("stdout".into(), e);
    if common.json {
        for ch in &checks {
            output::json_line(
                &mut out,
                "check",
                &serde_json::json!({"check": ch.name, "expected": ch.expected, "got": ch.got, "held": ch.held}),
            )
            .map_err(io)?;
        }
    } else if !common.quiet {
        writeln!(
            out,
            "{:<20} {:<46} {:<40} result",
            "check", "expected", "got"
        )
        .map_err(io)?;
        for ch in &checks {
            let r = match ch.held {
                Some(true) => "held",
                Some(false) => "FAILED",
                None => "-",
            };
            writeln!(
                out,
                "{:<20} {:<46} {:<40} {r}",
                ch.name,
                ch.expected,
                sbx_core::sanitize::field(&ch.got)
            )
            .map_err(io)?;
        }
    }
    if failed > 0 {
        output::error(&format!("{failed} guard(s) did not hold"));
        return Ok(ExitCode::from(1));
    }
    Ok(Exit::Ok.into())
}
