//! sbx-guest: PID 1 of every sandbox. It blocks egress before anything
//! else, runs `sbx-fw init` and `sbx-fw verify` as root, becomes the sink
//! of the audit log, then starts the container's command as the agent user
//! with no capabilities, and reaps, forwards signals and stops everything
//! within the stop timeout. Any failure before the agent starts leaves the
//! network blocked and the sandbox reported unhealthy with the reason.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod boot;
pub mod branch;
pub mod cliconf;
pub mod client;
pub mod clihome;
pub mod config;
pub mod gitindex;
pub mod gitstate;
pub mod home;
pub mod hosttools;
pub mod idle;
pub mod init;
pub mod masks;
pub mod rcfiles;
pub mod real;
pub mod seccomp;
pub mod sink;
pub mod snapclean;
pub mod ssh;
pub mod status;
pub mod tree;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

pub const TOOL: &str = "sbx-guest";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-guest",
    version,
    about = "PID 1 of an sbx sandbox: fail-closed firewall start, the agent without privileges, the audit sink",
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Be the sandbox's init: firewall, audit sink, then COMMAND as the agent user.
    Init {
        /// This container was made from a snapshot (sbx-run's `start --from-snapshot`): before
        /// anything else runs, remove what the agent left outside its home and the guest's
        /// runtime state (a failure fails the start).
        #[arg(long)]
        from_snapshot: bool,
        /// With --from-snapshot: sbx-run bound the snapshot's own N layers (those above the
        /// per-repo image) read-only on /run/sbx-layers/0..N; the cleanup looks only at the
        /// names they hold, then unmounts them. Without it, every directory is read.
        #[arg(long, value_name = "N", requires = "from_snapshot")]
        snapshot_layers: Option<usize>,
        /// The container's command (the image's CMD).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "COMMAND"
        )]
        command: Vec<OsString>,
    },
    /// Exit 0 when the sandbox started cleanly, else print why and exit 1 (for HEALTHCHECK).
    Health,
    /// Run the agent CLI for `sbx-run agent`: the API key (stdin's first line) reaches only it.
    AgentLaunch {
        /// Kill the CLI's whole process group after this many seconds (exit 124).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Serve [agent.host-tools] to the CLI's MCP server: stdin carries a header line
        /// and the prompt's length, then the host's answers; calls go up on stdout.
        #[arg(long)]
        host_tools: bool,
        /// The chat's scratch directory (under the /scratch mount): made if missing and named
        /// to the CLI as SBX_SCRATCH.
        #[arg(long, value_name = "DIR")]
        scratch: Option<PathBuf>,
        /// How the key reaches the CLI: claude (an apiKeyHelper in --settings) or codex
        /// (model_providers.sbx.auth, a token command).
        #[arg(long, value_name = "CLI", default_value = "claude", value_parser = ["claude", "codex"])]
        cli: String,
        /// The CLI and its arguments (after --).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "COMMAND"
        )]
        command: Vec<OsString>,
    },
    /// Run COMMAND as the agent through this sandbox's guest API, as `sbx-run exec` does
    /// from the host: the audit record and the guards apply. For a cluster's API server
    /// exec (the container's root reaches the socket); exits with the command's status.
    Exec {
        /// The audit record's agent field (the client that asked).
        #[arg(long, value_name = "NAME", default_value = "sbx-guest")]
        agent: String,
        /// The working directory (default: the agent's home).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// Run it on a PTY of the guest's, sized and resized as this process's stdin,
        /// which must be a tty (the exec's: sbx-server's web terminal on a cluster).
        #[arg(long)]
        tty: bool,
        /// A variable for the command (repeatable).
        #[arg(long, value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// The command and its arguments (after --).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "COMMAND"
        )]
        command: Vec<OsString>,
    },
    /// The MCP stdio server for [agent.host-tools], started by the agent CLI under agent-launch.
    McpHostTools,
    /// The agent CLI's apiKeyHelper: print the key agent-launch serves once on SOCKET.
    AgentKey {
        #[arg(value_name = "SOCKET")]
        socket: PathBuf,
    },
}

const AFTER_HELP: &str = "\
Start order (each step fails closed: the agent's command never starts on an
unfiltered network, egress stays blocked, the reason is in the status):
  1. OUTPUT/INPUT DROP in both families (the iptables backend sbx-fw uses);
     with --from-snapshot, then the snapshot's cleanup: every entry the
     agent owns in a directory it can write outside its home and the
     mounts, every file of the guest's runtime state, /tmp and /scratch
  2. the audit sink on /run/sbx-audit/audit.sock
  3. sbx-fw init, then sbx-fw verify (a blocked target that answers fails
     the start; an allowlisted host that cannot be reached is a warning);
     meanwhile, in branch mode (SBX_BRANCH), the branch's worktree on
     /repo-shelf, provisioned by sbx-worktree as the agent (file:// only),
     and the host's hooks and protected paths pinned read-only over the
     shelf's; a failure of either blocks egress again
  4. the marker /.agent-sandbox, supervised services, then COMMAND as the
     agent user with every capability set empty and no_new_privs

Environment (set by sbx-run):
  SBX_AGENT_UID, SBX_AGENT_GID   the agent's uid and gid (default 1000; 0 is refused)
  SBX_AGENT_HOME                 its home (default /home/agent)
  SBX_BRANCH                     branch mode: the branch whose worktree to provision
  SBX_AGENT                      the agent field of audit records (default:
                                 the command's name)
  SBX_GUEST_STOP_TIMEOUT         seconds to stop everything after SIGTERM (default 8)
  SBX_GUEST_RUN_DIR              the guest's private directory (default /run/sbx)
  SBX_GUEST_CONFIG               services file (default /etc/sbx/guest.toml)

Files:
  /run/sbx/host/status.json      the start's outcome, readable from the host
  /run/sbx/host/audit.jsonl      the sandbox's audit log (the guest is its only writer)
  /run/sbx/host/guest.sock       the host API (exec, files, health; sbx_core::guestapi),
                                 0600, owned by the host directory's owner; /run/sbx is
                                 root's 0700, so the agent cannot reach it

agent-launch: the CLI runs in its own process group; the launcher is a child subreaper, so
  the CLI's whole tree stays beneath it. SIGINT/SIGTERM/SIGHUP/SIGQUIT go to the CLI's group,
  the tree is killed 3 s later (at once on a second signal), exit 128+N; --timeout: TERM, the
  tree killed 2 s later, exit 124; when the CLI ends, what its tree left is killed.

agent-launch --host-tools: [agent.host-tools] for sbx-run agent. The CLI's MCP server
  `mcp-host-tools` connects to a socket in a fresh 0700 directory named only in the CLI's
  environment (SBX_HOST_TOOLS_SOCKET); one connection is taken, from a child of the CLI
  running sbx-guest, and the socket removed. Calls go up the exec's stdout as lines
  starting with 0x1e, answers come down its stdin; the host decides and runs them.

Exit status: init exits with COMMAND's status (128+N for a signal), 69 when
  the sandbox could not start; health exits 0 healthy, 1 unhealthy.

Examples:
  ENTRYPOINT [\"/usr/local/bin/sbx-guest\", \"init\", \"--\"]
  HEALTHCHECK CMD [\"/usr/local/bin/sbx-guest\", \"health\"]";

pub fn command() -> clap::Command {
    Cli::command()
}

/// The guest's directories: private to root inside the sandbox, with the
/// host's per-sandbox directory mounted at `host` when sbx-run started it.
#[derive(Debug, Clone)]
pub struct Paths {
    pub run_dir: PathBuf,
    pub audit_socket: PathBuf,
    /// The sink for records whose sender it verifies.
    pub verified_socket: PathBuf,
    pub config: PathBuf,
}

impl Paths {
    pub fn from_env() -> Self {
        let var = |k: &str, d: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(d))
        };
        Self {
            run_dir: var("SBX_GUEST_RUN_DIR", "/run/sbx"),
            audit_socket: var("SBX_GUEST_AUDIT_SOCKET", sbx_core::audit::SANDBOX_SOCKET),
            verified_socket: var(
                "SBX_GUEST_VERIFIED_SOCKET",
                sbx_core::audit::VERIFIED_SOCKET,
            ),
            config: var("SBX_GUEST_CONFIG", "/etc/sbx/guest.toml"),
        }
    }

    /// Where the host can read: the mounted host directory, else run_dir.
    pub fn shared(&self) -> PathBuf {
        let h = self.run_dir.join("host");
        if h.is_dir() { h } else { self.run_dir.clone() }
    }

    pub fn status(&self) -> PathBuf {
        self.shared().join("status.json")
    }

    /// The host API's socket (sbx_core::guestapi), where the host can reach it.
    pub fn api_socket(&self) -> PathBuf {
        sbx_core::guestapi::socket_in(&self.shared())
    }

    pub fn audit_log(&self) -> PathBuf {
        self.shared().join("audit.jsonl")
    }
}

pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    sbx_core::output::init(TOOL, &cli.common);
    let paths = Paths::from_env();
    match cli.command {
        Cmd::Init {
            from_snapshot,
            snapshot_layers,
            command,
        } => {
            // init drops all traffic of its network namespace first: on a
            // host by mistake, that would cut the machine off.
            if std::process::id() != 1 && std::env::var_os("SBX_GUEST_NOT_PID1").is_none() {
                return Err(Box::new(sbx_core::error::Message::new(
                    Exit::Usage,
                    "init must be PID 1 of a sandbox (it blocks every connection of its network namespace); set SBX_GUEST_NOT_PID1=1 only inside a namespace made for it",
                )));
            }
            // PID 1 keeps root's uid, which the agent's uid cannot trace;
            // not dumpable as well, so neither ptrace nor /proc/1/mem,
            // fd or environ opens to it even where a capability slipped
            // through. What it reads for `cp` it reads itself (api::pack),
            // not through a child of the agent's uid. Yama's ptrace_scope
            // is the host kernel's, read-only in a container.
            let _ = nix::sys::prctl::set_dumpable(false);
            // Every agent process gets the socket-family filter (seccomp.rs).
            seccomp::register().map_err(|e| sbx_core::error::Message::new(Exit::OsErr, e))?;
            let from_snapshot = from_snapshot.then(|| snapshot_layers.unwrap_or(0));
            Ok(real::init(&paths, command, from_snapshot))
        }
        Cmd::AgentLaunch {
            timeout,
            host_tools,
            scratch,
            cli,
            command,
        } => Ok(agent::launch(
            timeout.map(std::time::Duration::from_secs),
            host_tools,
            scratch.as_deref(),
            cli == "codex",
            &command,
        )),
        Cmd::Exec {
            agent,
            cwd,
            tty,
            env,
            command,
        } => client::exec(&paths.api_socket(), &agent, cwd, tty, &env, &command),
        Cmd::McpHostTools => Ok(hosttools::serve()),
        Cmd::AgentKey { socket } => Ok(agent::key(&socket)),
        Cmd::Health => {
            let (healthy, text) = status::health(&paths.status());
            if cli.common.json {
                let mut out = std::io::stdout().lock();
                output::json_line(
                    &mut out,
                    "health",
                    &serde_json::json!({"healthy": healthy, "text": text}),
                )
                .map_err(|e| sbx_core::error::Message::new(Exit::IoErr, format!("stdout: {e}")))?;
            } else if !cli.common.quiet {
                println!("{text}");
            }
            Ok(if healthy { Exit::Ok } else { Exit::No }.into())
        }
    }
}
