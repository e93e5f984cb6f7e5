//! `sbx-run allow`: a refused name opened while the sandbox runs, for a
//! while, by the user. It runs `sbx-fw grant` as the sandbox's root over
//! the guest's socket, the one way in that the agent has not (root-only
//! inside, the host user's alone outside), and records it on the host too.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::config::{Domain, Interval};
use sbx_core::error::BoxError;
use sbx_core::guestapi::User;
use sbx_core::output;

use crate::workspace::Workspace;
use crate::{BranchArg, RunError, spec};

type Res = Result<ExitCode, BoxError>;

#[derive(Debug, Args)]
pub struct AllowOpts {
    /// The name to open: api.example.com, or *.example.com for its subdomains.
    #[arg(value_name = "NAME", required_unless_present = "list")]
    pub name: Option<String>,
    /// Workspace (default: the current directory).
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Workspace, as -C on every other command.
    #[arg(
        short = 'C',
        long = "path",
        value_name = "PATH",
        conflicts_with = "path"
    )]
    pub dir: Option<PathBuf>,
    /// How long the name stays open, like 30m or 2h (at most 7d).
    #[arg(long = "for", value_name = "DURATION", default_value = "1h")]
    pub duration: Interval,
    /// Print the names opened and until when (NAME is then read as PATH).
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
    /// Close NAME now.
    #[arg(long)]
    pub revoke: bool,
    #[command(flatten)]
    pub branch: BranchArg,
}

pub fn allow(common: &CommonArgs, o: &AllowOpts) -> Res {
    // `allow --list PATH`: the one positional is the workspace.
    let (name, path) = match (o.list, &o.name, &o.path) {
        (true, Some(n), None) => (None, Some(PathBuf::from(n))),
        _ => (o.name.clone(), o.path.clone()),
    };
    let path = o.dir.clone().or(path);
    let ws = Workspace::open(common, path)?.with_branch(o.branch.branch.as_deref());
    let mut argv: Vec<String> = vec!["sbx-fw".into(), "grant".into()];
    if common.json {
        argv.push("--json".into());
    }
    let what = match (&name, o.list, o.revoke) {
        (_, true, _) => {
            argv.push("--list".into());
            None
        }
        (Some(n), _, revoke) => {
            let d = parse_name(n)?;
            if revoke {
                argv.push("--revoke".into());
            } else {
                argv.extend(["--by".into(), "sbx-run allow".into()]);
                argv.extend(["--for".into(), format!("{}s", o.duration.0.as_secs())]);
            }
            argv.push(d.to_string());
            Some((d, revoke))
        }
        (None, false, _) => {
            return Err(RunError::Usage("allow: name the host to open, or --list".into()).into());
        }
    };
    let (status, out, err) = grant_in(&ws, &argv)?;
    // What the guest printed is the sandbox's: escaped for the terminal.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(sbx_core::sanitize::bytes(&out).as_bytes());
    let _ = std::io::stderr().write_all(sbx_core::sanitize::bytes(&err).as_bytes());
    if let Some((d, revoke)) = what {
        let (op, outcome, reason) = if revoke {
            ("revoke", Outcome::Blocked, "closed by the user".to_owned())
        } else {
            (
                "allow",
                Outcome::Allowed,
                format!(
                    "opened by the user for {}",
                    humantime::format_duration(o.duration.0)
                ),
            )
        };
        let target = d.to_string();
        let why = if status == 0 {
            reason
        } else if revoke && status == 1 {
            "nothing was open to close".to_owned()
        } else {
            format!("{reason}: failed in the sandbox (exit {status})")
        };
        let why = format!("{why} (sandbox {})", ws.names.container);
        audit::append(&Record::new("sbx-run", op, &target, outcome, "allow").reason(&why));
    }
    Ok(ExitCode::from(status))
}

/// A name as the firewall takes it; anything else is refused here, before
/// the sandbox is asked.
pub fn parse_name(n: &str) -> Result<Domain, BoxError> {
    n.parse::<Domain>()
        .map_err(|e| RunError::Usage(format!("allow: {n:?}: {e}")).into())
}

/// Open `name` in the sandbox for `dur` (on-block's approvals).
pub fn grant(ws: &Workspace, name: &Domain, dur: Duration, by: &str) -> Result<(), String> {
    let argv: Vec<String> = vec![
        "sbx-fw".into(),
        "grant".into(),
        "--by".into(),
        by.into(),
        "--for".into(),
        format!("{}s", dur.as_secs()),
        name.to_string(),
    ];
    match grant_in(ws, &argv) {
        Ok((0, _, _)) => Ok(()),
        Ok((s, _, err)) => Err(format!(
            "sbx-fw grant exited {s}: {}",
            sbx_core::sanitize::field(String::from_utf8_lossy(&err).trim())
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `argv` as the sandbox's root over the guest's socket, output captured.
/// Only the host user who owns the sandbox gets this far (the socket's
/// directory is theirs, 0700); anyone else is refused and recorded.
fn grant_in(ws: &Workspace, argv: &[String]) -> Result<(u8, Vec<u8>, Vec<u8>), BoxError> {
    use crate::guestexec;
    let dir = spec::host_dir(&ws.names.container);
    guestexec::owned_by_me(&dir).map_err(|why| {
        audit::append(
            &Record::new(
                "sbx-run",
                "allow",
                &ws.names.container,
                Outcome::Blocked,
                "allow",
            )
            .reason(&why),
        );
        RunError::Denied(format!(
            "allow: {why}: only the host user who owns the sandbox may open names in it"
        ))
    })?;
    let sock = guestexec::socket_for(ws);
    let client = guestexec::connect(&sock).map_err(|_| {
        RunError::NoSandbox(format!(
            "{}: not running: allow opens a name in a running sandbox (names it needs from the start go in [network] allow-domains)",
            ws.names.container
        ))
    })?;
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let mut req = guestexec::exec_request(ws, &argv, "sbx-run", false);
    req.user = User::Root;
    req.timeout_ms = Some(30_000);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let x = guestexec::run_with(client, req, None, &mut out, &mut err, false).map_err(|e| {
        output::error(&e.to_string());
        RunError::NoSandbox(format!(
            "{}: the guest did not run sbx-fw grant",
            ws.names.container
        ))
    })?;
    Ok((guestexec::status_of(&x), out, err))
}
