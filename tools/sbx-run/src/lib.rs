//! sbx-run: the host side. Builds the images, and starts, enters and stops
//! guarded sandbox containers for a repository, by driving the docker CLI.
#![forbid(unsafe_code)]

pub mod agent;
pub mod allow;
pub mod branch;
pub mod copy;
pub use sbx_image::docker;
pub mod fetch;
pub mod gitpins;
pub mod gitsecrets;
pub mod guestexec;
pub mod hostpath;
pub mod image;
pub mod import;
pub mod k8s;
pub mod lifecycle;
pub mod login;
pub mod loginrefresh;
pub mod names;
pub mod onblock;
pub mod selftest;
pub mod snapshot;
pub mod spec;
pub mod ssh;
pub mod terminal;
pub mod toolpolicy;
pub mod tools;
pub mod verify;
pub mod workspace;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

const TOOL: &str = "sbx-run";
/// The version, and whether this is scripts/shell's quick build (build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("SBX_RUN_BUILD_NOTE"));

#[derive(Debug, Parser)]
#[command(
    name = "sbx-run",
    version = VERSION,
    about = "Build and run guarded sandbox containers for coding agents",
    long_about = "Build and run guarded sandbox containers for coding agents.\n\n\
        In a git repository, `sbx-run` (or `sbx-run shell`) builds what is missing and opens a shell in a \
        container where the agent runs as a non-root user with no capabilities, the repository's hooks and \
        sandbox config are read-only, secret files read as empty, secret environment variables stay on the \
        host, and the sandbox has its own network. `sbx-run show-run` prints the exact docker commands.",
    after_long_help = AFTER_HELP,
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,

    #[command(subcommand)]
    pub command: Option<Cmd>,
}

const AFTER_HELP: &str = "\
Names (from the MD5 of the workspace's canonical path, so no state file is kept):
  container, image, network   agent-sandbox-<repo>-<hash>
  network holder              agent-sandbox-<repo>-<hash>-net
  repo-shelf volume           agent-sbx-repo-<hash>
  history volume              agent-sandbox-<hash>-history
  git record volume           agent-sandbox-<hash>-git (the git broker's stash record; root's)
  AI CLI config volumes       agent-sandbox-<hash>-claude, agent-sandbox-<hash>-codex (~/.claude, ~/.codex)
  machine login stores        agent-sandbox-claude-code-config, agent-sandbox-codex-config
                              ($SBX_CLAUDE_VOLUME, $SBX_CODEX_VOLUME), never mounted into a sandbox

Log in once per machine: each workspace has its own ~/.claude and ~/.codex (settings, hooks,
transcripts, AGENTS.md), so no sandbox reads or changes another's. Only the credential files
(~/.claude/.credentials.json, ~/.codex/auth.json and profile.json) are shared, one way: start
copies the machine's store into a workspace's volume that has no login of its own (a JSON object
in a regular file only). Nothing goes back from a sandbox: a login made in one sandbox stays that
workspace's, and no sandbox can hand the others its credentials.

What every sandbox gets (see show-run):
  the user agent (uid 1000); --cap-drop ALL plus only what init needs, dropped before the agent runs;
  no-new-privileges; memory, cpus and pids limits from [sandbox]; the workspace at /workspace/<repo>;
  .git/hooks, .husky, .agent-sandbox, .claude, .mcp.json, .codex and [sandbox].protected mounted read-only;
  files matching [filesystem].blocked and not .allowed masked by an empty read-only mount;
  host variables only as sbx-envfilter allows: by default TERM, LANG, LC_*, TZ, COLORTERM, NODE_ENV,
  DEBUG and CI, plus the names in [environment].allow and .pass (a secret-looking name in allow
  is still dropped; only pass forwards it, and audits it); the config read-only at /.agent-sandbox; one bridge network per
  sandbox; labels sbx.workspace, sbx.mode, sbx.branch, sbx.hash.

The network holder: a sleeping container (no capabilities, read-only, uid 65534) owns the
sandbox's network namespace: its address on the sandbox's bridge, published ports, hostname and
resolv.conf. The sandbox container joins it, so replacing or restarting the sandbox skips the
engine's namespace setup (about half of a docker run here). stop leaves it; rm and prune remove it;
it is made anew when [sandbox].ports or the image name change.

Guest API: exec, shell and cp talk to the guest over $XDG_STATE_HOME/sbx/sandboxes/<container>/guest.sock
(0600, yours; root-only inside the sandbox); a sandbox without it gets docker exec and a warning.

Exit status: 0 ok; exec passes the command's status through; 1 doctor found a problem; 64 usage;
66 no such workspace; 69 Docker engine unavailable; 77 refused (a container of that name is not ours);
78 bad config (nothing is started); 130 interrupted.

Examples:
  sbx-run                          open a guarded shell on the repository here
  sbx-run init ~/src/app           create .agent-sandbox/ and build the image
  sbx-run build-base --bootstrap   build the base image without a registry (mmdebstrap)
  sbx-run exec -- npm test         run one command in the sandbox
  sbx-run exec -C ~/src/app -- make   the same in another workspace (-C PATH works for every command)
  sbx-run exec --root -- apt-get install -y jq   as the sandbox's root (audited)
  sbx-run cp build.log :/tmp/      a file into the sandbox (the sandbox side is :PATH)
  sbx-run cp :/workspace/app/dist ./dist   a directory out of it
  tar -c src | sbx-run cp - :/tmp  a tar stream in (`:PATH -` streams one out)
  sbx-run show-run | sh            what start would run, runnable";

/// The workspace, named as git and cargo users expect: `-C PATH` on every
/// subcommand; a lone positional PATH is accepted too where no command
/// follows (every subcommand but exec).
#[derive(Debug, Clone, Args)]
pub struct PathArg {
    /// Workspace: a git repository or a directory in one (default: the current directory).
    #[arg(short = 'C', long = "path", value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// The same as -C PATH.
    #[arg(value_name = "PATH", conflicts_with = "dir")]
    pub path: Option<PathBuf>,
}

impl PathArg {
    pub fn get(self) -> Option<PathBuf> {
        self.dir.or(self.path)
    }
}

/// `sbx-run snapshot export|import`: a snapshot as a `docker save` archive.
#[derive(Debug, Subcommand)]
pub enum SnapAction {
    /// Write a snapshot (id or tag) as a `docker save` archive, its record inside.
    ///
    /// The archive is the snapshot's image with every layer under it, and the record
    /// (tag, time, the home backup's id) as its first file, which `docker load` skips.
    /// The home's data stays in the backup store the record names.
    Export {
        /// The snapshot's id or tag (`sbx-run snapshots`).
        #[arg(value_name = "ID")]
        id: String,
        /// The archive to write: it must not exist, and not be in a workspace (an agent could
        /// rewrite it there).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        path: PathArg,
    },
    /// Load an archive `snapshot export` wrote as a snapshot of this workspace.
    ///
    /// The image is trusted as an image you build is: its root-owned files run as they are.
    /// What an agent could have left in it (files it owns outside its home, /tmp, a sandbox's
    /// runtime state) is removed when a sandbox starts from it, as for every snapshot.
    Import {
        /// The archive (`sbx-run snapshot export`), not in a workspace.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        path: PathArg,
    },
}

/// Branch mode: the sandbox of one branch, working in its own
/// worktree of the shared clone on the repo shelf.
#[derive(Debug, Clone, Args)]
pub struct BranchArg {
    /// Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout.
    #[arg(long, value_name = "BRANCH")]
    pub branch: Option<String>,
}

/// `show-run --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShowFormat {
    Docker,
    K8s,
    Pod,
    K8sTemplate,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Create .agent-sandbox/ (commented config.toml and a per-repo Dockerfile), then build.
    Init {
        #[command(flatten)]
        path: PathArg,
        /// Overwrite existing files and remove an existing sandbox container.
        #[arg(long)]
        force: bool,
        /// Write config.toml from a policy seed's YAML config (e.g. .uds/config.yaml) instead
        /// of the template: each key is mapped to its sbx key or named as not mappable, one
        /// line per key, printed and kept as comments in the file.
        #[arg(long, value_name = "FILE")]
        import: Option<PathBuf>,
    },
    /// Build the per-repo image from .agent-sandbox/Dockerfile.
    Build {
        #[command(flatten)]
        path: PathArg,
        #[command(flatten)]
        build: image::BuildOpts,
    },
    /// Build the shared base image agent-sandbox-base:<tag>.
    BuildBase(image::BaseOpts),
    /// Start the sandbox container (building what is missing or stale).
    Start {
        #[command(flatten)]
        path: PathArg,
        /// Rebuild the per-repo image first and replace a running container.
        #[arg(long)]
        build: bool,
        /// Build the per-repo image on agent-sandbox-base:TAG (implies --build).
        #[arg(long, value_name = "TAG")]
        base_tag: Option<String>,
        #[command(flatten)]
        branch: BranchArg,
        /// Replace the sandbox with one made from a snapshot of this workspace (ID or tag;
        /// default: the newest). Its guards are made anew at start, as in a fresh one.
        #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "", conflicts_with_all = ["build", "base_tag", "branch"])]
        from_snapshot: Option<String>,
        /// With [ssh] enabled: publish sshd on ADDR:PORT instead of 127.0.0.1 and a free port
        /// (0.0.0.0:2222 reaches it from other machines). Kept for later starts; a sandbox made
        /// with another address is made anew.
        #[arg(long, value_name = "ADDR:PORT", value_parser = ssh::parse_listen)]
        ssh_listen: Option<std::net::SocketAddr>,
    },
    /// Snapshot the running sandbox: its system state outside the home and the workspace
    /// (what `exec --root` installed) as an image, with a home backup when [backup].url is set.
    ///
    /// One `docker commit` of the running sandbox (paused for it). The agent's files outside
    /// its home, /tmp and the guest's runtime state are in the image, and removed when a
    /// sandbox starts from it, before anything runs there. The record is kept under sbx's
    /// state directory on the host; `[lifecycle] keep-snapshots` prunes the oldest. Prints
    /// the snapshot's id.
    #[command(args_conflicts_with_subcommands = true)]
    Snapshot {
        #[command(subcommand)]
        action: Option<SnapAction>,
        #[command(flatten)]
        path: PathArg,
        /// A name to start from later (`start --from-snapshot TAG`).
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
    },
    /// Restore an older point in time: a snapshot's system state and home, or the home from a
    /// backup.
    ///
    /// `--snapshot` makes the sandbox anew from the snapshot's image and restores the home
    /// backup taken with it; `--backup` restores that backup snapshot (`sbx-backup snapshots`)
    /// into the home. The home is backed up first, so a restore can be undone; each step is
    /// audited.
    #[command(group(clap::ArgGroup::new("point").required(true).args(["snapshot", "backup"])))]
    Restore {
        #[command(flatten)]
        path: PathArg,
        /// The snapshot (id or tag, `sbx-run snapshots`) to restore.
        #[arg(long, value_name = "ID")]
        snapshot: Option<String>,
        /// The home backup (`sbx-backup snapshots`) to restore into the home.
        #[arg(long, value_name = "ID")]
        backup: Option<String>,
    },
    /// List the workspace's snapshots: id, tag, age, size (what they add to the per-repo image).
    Snapshots {
        #[command(flatten)]
        path: PathArg,
    },
    /// Stop the sandbox container.
    Stop {
        #[command(flatten)]
        path: PathArg,
        #[command(flatten)]
        branch: BranchArg,
    },
    /// Recreate the sandbox container (picks up config changes).
    Restart {
        #[command(flatten)]
        path: PathArg,
    },
    /// Open an SSH session in the sandbox as the agent ([ssh] enabled), or run COMMAND there.
    ///
    /// Runs the host's `ssh` with this project's key and the sandbox's pinned host key only,
    /// no user config, nothing forwarded. The session is the agent's, under every guard
    /// (the git guard, masks, the firewall); its start and end are in the audit log.
    /// Starts the sandbox if needed. Exit status: ssh's (the command's, 255 for ssh's own errors).
    ///
    /// Example: `sbx-run ssh ~/src/app -- git status`
    Ssh {
        #[command(flatten)]
        path: PathArg,
        /// The command and its arguments (after --); none: a login shell.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Print the project's SSH private key ([ssh] enabled; made by the first start).
    ///
    /// The key is kept in $XDG_STATE_HOME/sbx/ssh/<container>/id_ed25519 (0600, in a 0700
    /// directory of yours), which `sbx-run ssh` and `ssh-config`'s IdentityFile use; print it
    /// to take it to another machine. It logs in to this sandbox only.
    SshKey {
        #[command(flatten)]
        path: PathArg,
        /// The public key instead.
        #[arg(long)]
        public: bool,
    },
    /// Print an ssh_config Host block for the sandbox (for ~/.ssh/config and VS Code Remote-SSH).
    ///
    /// HostName, Port, User, IdentityFile, and the sandbox's host key pinned under HostKeyAlias
    /// in a known_hosts file of its own with StrictHostKeyChecking yes. Every value comes from
    /// files on the host, never from the sandbox. Starts the sandbox if needed (its port is
    /// the engine's choice unless `start --ssh-listen` fixed it).
    ///
    /// Example: `sbx-run ssh-config >> ~/.ssh/config`, then `ssh agent-sandbox-<repo>-<hash>`
    SshConfig {
        #[command(flatten)]
        path: PathArg,
    },
    /// Open an interactive shell in the sandbox (the default command).
    Shell {
        #[command(flatten)]
        path: PathArg,
        /// Rebuild the per-repo image first and replace a running container.
        #[arg(long)]
        build: bool,
        #[command(flatten)]
        branch: BranchArg,
    },
    /// Run a command in the sandbox; its exit status is passed through.
    ///
    /// Goes straight to the guest's socket (no docker command) when the sandbox runs; starts it
    /// otherwise. 128+N for a signal, 127 not found, 126 cannot run, 125 when sbx-run failed.
    #[command(trailing_var_arg = true)]
    Exec {
        /// Workspace (default: the current directory).
        #[arg(long = "path", short = 'C', value_name = "PATH")]
        path: Option<PathBuf>,
        #[command(flatten)]
        branch: BranchArg,
        /// As the sandbox's root (e.g. `apt-get install`), through the guest's socket only;
        /// recorded in the audit log before it runs. Only the host user who owns the sandbox
        /// can; the agent has no root and no way to this.
        #[arg(long)]
        root: bool,
        /// The command and its arguments (after --).
        #[arg(required = true, num_args = 1.., value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Copy files or directories between the host and the sandbox, like docker cp.
    ///
    /// The sandbox side is written :PATH; `-` is a tar stream on stdin (to the sandbox)
    /// or stdout (from it). Files are written as the agent and replaced atomically;
    /// paths must stay beneath /workspace, /home/agent, /tmp or /repo-shelf.
    ///
    /// A host path inside a git work tree (every workspace is one) is resolved beneath
    /// that tree with no link followed, -L or not: a link the agent made there is
    /// refused (exit 77), never followed. Elsewhere a host path that is itself a link
    /// is copied as a link unless -L is given.
    Cp {
        /// Workspace (default: the current directory).
        #[arg(long = "path", short = 'C', value_name = "PATH")]
        path: Option<PathBuf>,
        /// Copy what a host source link points to, not the link (outside a git work tree).
        #[arg(short = 'L', long = "dereference")]
        follow: bool,
        /// What to copy: a host path, :PATH in the sandbox, or - (a tar stream on stdin).
        #[arg(value_name = "SRC")]
        src: OsString,
        /// Where to: :PATH in the sandbox, a host path, or - (a tar stream on stdout).
        #[arg(value_name = "DEST")]
        dest: OsString,
    },
    /// Print the exact docker commands start would run, shell-quoted; or the same sandbox as Kubernetes manifests.
    ShowRun {
        #[command(flatten)]
        path: PathArg,
        #[command(flatten)]
        branch: BranchArg,
        /// docker: the commands start runs; k8s: a Sandbox (agents.x-k8s.io) with its ConfigMap and
        /// NetworkPolicy; pod: a plain Pod with its claims; k8s-template: a SandboxTemplate and a
        /// SandboxWarmPool for a server. Config with no meaning on a cluster is refused (exit 78).
        #[arg(long, value_enum, value_name = "FORMAT", default_value = "docker")]
        format: ShowFormat,
        /// The repository a cluster clones the workspace from (k8s formats; a cluster has no host
        /// checkout to bind). The branch: --branch, else the one the checkout is on.
        #[arg(long, value_name = "URL")]
        repo: Option<String>,
        /// The image a cluster pulls (k8s formats; default: the per-repo image's local name, which
        /// a cluster's registry will not have).
        #[arg(long, value_name = "REF")]
        image: Option<String>,
    },
    /// Provision BRANCH's worktree on the repo shelf (clone once, fetch, add the worktree), start nothing.
    Checkout {
        /// The branch (created from origin/BRANCH, else from the default branch).
        #[arg(value_name = "BRANCH")]
        branch: String,
        /// Workspace (default: the current directory).
        #[arg(long = "path", short = 'C', value_name = "PATH")]
        path: Option<PathBuf>,
    },
    /// Log in once for the whole machine, or share one workspace's login with the others.
    ///
    /// Without --share: runs the CLI's own login (`claude /login`, `codex login`) in a throwaway
    /// container of the base image whose only volume is the machine's login store: no workspace,
    /// no agent. Every workspace loads the new login at its next start. With --share: copies the
    /// login made inside this workspace's sandbox into the store instead, because you say so;
    /// nothing else ever copies a sandbox's credentials out of it.
    Login {
        /// Which AI CLI's login.
        #[arg(long, default_value = "claude", value_parser = ["claude", "codex"])]
        cli: String,
        /// Copy this workspace's login (made in its sandbox) into the machine's store.
        #[arg(long)]
        share: bool,
        /// With --share: the workspace (default: the current directory).
        #[arg(long = "path", short = 'C', value_name = "PATH", requires = "share")]
        path: Option<PathBuf>,
    },
    /// Print the name of the machine's Claude Code login store (never mounted into a sandbox).
    Volume,
    /// List the volumes a workspace's sandbox uses.
    Volumes {
        #[command(flatten)]
        path: PathArg,
    },
    /// List sandbox containers (from their labels).
    List,
    /// Remove the sandbox container, its network holder, its network and its per-repo image.
    ///
    /// The per-repo image (agent-sandbox-<repo>-<hash>, the base plus
    /// .agent-sandbox/Dockerfile) is rebuilt by the next start; it is kept
    /// while another sandbox of the workspace (another --branch) uses it.
    /// Base images are never removed. A Dockerfile that needs
    /// --allow-entrypoint: run `sbx-run build --allow-entrypoint` again
    /// before the next start.
    Rm {
        #[command(flatten)]
        path: PathArg,
        /// Also remove volumes: without --branch, the workspace's (history, repo shelf, logins,
        /// homes), once no branch sandbox of it is left; with --branch, that sandbox's home.
        /// With backups on, a running sandbox is stopped first (its final backup), and a home
        /// whose newest state is in no completed backup is refused unless --force.
        #[arg(long)]
        volumes: bool,
        /// With --volumes: remove a home volume even when its newest state is in no backup.
        #[arg(long, requires = "volumes")]
        force: bool,
        #[command(flatten)]
        branch: BranchArg,
    },
    /// Remove containers, networks, volumes and per-repo images whose workspace no longer exists.
    ///
    /// Images are found by their sbx.image.workspace label (set by build
    /// and start since this version; older per-repo images have none: remove
    /// them with `docker image rm`). Base images and the shared login volumes
    /// stay.
    Prune {
        /// Remove agent chats (every workspace's) idle longer than --older-than instead.
        #[arg(long)]
        chats: bool,
        /// With --chats: the age, e.g. 7d (default: [agent].chat-retention, 7d).
        #[arg(long, value_name = "DUR", requires = "chats")]
        older_than: Option<String>,
    },
    /// Run Claude Code (or Codex) headless in the sandbox; print its text, or events with --json.
    #[command(after_long_help = agent::AFTER_HELP)]
    Agent(agent::AgentOpts),
    /// Check the Docker engine, kernel features, images and the workspace's ownership; say how to fix each.
    Doctor {
        #[command(flatten)]
        path: PathArg,
    },
    /// Show the audit log (git, network and tool refusals with --blocked-only).
    Log(tools::LogOpts),
    /// Open a name the firewall refuses, in the running sandbox, for a while (default 1h).
    ///
    /// Works in both network modes: the DNS filter answers the name and the proxy lets it
    /// through until --for has passed; what was handed out for it expires with it. Runs
    /// `sbx-fw grant` as the sandbox's root over the guest's socket, which only you reach
    /// (the agent has no root and no way to that socket), and is recorded in the audit log
    /// on both sides. `sbx-run log --follow --blocked-only` shows refusals as they happen.
    /// Names needed from the start belong in [network] allow-domains.
    ///
    /// Examples: `sbx-run allow registry.example.org --for 30m`, `sbx-run allow --list`,
    /// `sbx-run allow --revoke registry.example.org`.
    Allow(allow::AllowOpts),
    /// Serve the sandbox's terminal to a browser (xterm.js, ttyd's protocol), on loopback.
    ///
    /// Prints a link with a one-time token: open it, and the page trades the token for a
    /// cookie, so a reload or a second tab works but the link itself works once. Every tab
    /// is a client of the same tmux session `main`, which lives on when the tab closes.
    /// Each session is recorded (asciicast v2) under $XDG_STATE_HOME/sbx/terminal/ and its
    /// start and end go to the audit log (`sbx-run log`). Starts the sandbox if needed.
    ///
    /// Example: `sbx-run terminal ~/src/app`, then open the printed http://127.0.0.1:7681/#token=…
    Terminal(terminal::TerminalOpts),
    /// Self-check: start the sandbox, try what each guard must refuse (a write under
    /// read-only, a disallowed tool, a secret read, a blocked domain, a --no-verify
    /// commit) and print expected vs got; exit 0 only when every configured guard held.
    Test {
        #[command(flatten)]
        path: PathArg,
    },
    /// Initialise the machine's Codex store (config.toml, AGENTS.md for new workspaces; --auth imports credentials).
    CodexInitConfig {
        /// Import ~/.codex/auth.json (and profile.json) from the host.
        #[arg(long)]
        auth: bool,
        /// Overwrite existing files in the volume.
        #[arg(long)]
        force: bool,
    },
    /// Delete the Codex credentials from the machine's store and every workspace's volume.
    CodexLogout,
    /// Run the repository's pre-commit and commit-msg hooks (as recorded when the
    /// sandbox started) against each commit added since REF, in a throwaway
    /// container with no network, never on the host; exit 1 when any fails.
    VerifyCommits(verify::VerifyOpts),
    /// Bring the sandbox's branches back as data: a `git bundle` from its clone
    /// (clone or branch mode), size-capped, fetched with hooks off into refs/remotes/sbx/.
    ///
    /// The host's git reads the bundle only: no hook, no program from any config, no
    /// submodule, no work tree and never the checked-out branch is touched. Review with
    /// `git log -p HEAD..sbx/BRANCH`, check with `sbx-run verify-commits --since HEAD
    /// --head sbx/BRANCH`, merge with your own git. Exit 65 when the sandbox sends
    /// something that is not a bundle of valid branches, or more than --max-size.
    Fetch(fetch::FetchOpts),
}

pub fn command() -> clap::Command {
    Cli::command()
}

pub use sbx_image::RunError;

/// `start --ssh-listen`: kept for this sandbox; one made with another
/// address is removed so the start makes it (and its holder) anew.
fn listen_at(
    common: &CommonArgs,
    path: Option<PathBuf>,
    branch: Option<&str>,
    addr: std::net::SocketAddr,
) -> Result<(), BoxError> {
    let ws = workspace::Workspace::open(common, path)?.with_branch(branch);
    if !ws.loaded.config.ssh.enabled {
        return Err(Box::new(RunError::Config(format!(
            "--ssh-listen: [ssh] is off in {}: set `[ssh] enabled = true` first",
            ws.loaded.describe()
        ))));
    }
    // The holder's spec names the address, so the start makes it anew.
    if ssh::Keys::of(&ws.names.container).set_listen(addr)?
        && lifecycle::owned_container(&ws)?.is_some()
    {
        docker::remove(&["rm", "--force", &ws.names.container])?;
    }
    Ok(())
}

pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    output::init(TOOL, &cli.common);
    let interrupted = tools::watch_interrupts();
    let common = &cli.common;
    let result = match cli.command.unwrap_or(Cmd::Shell {
        path: PathArg {
            dir: None,
            path: None,
        },
        build: false,
        branch: BranchArg { branch: None },
    }) {
        Cmd::Init {
            path,
            force,
            import,
        } => lifecycle::init(common, path.get(), force, import.as_deref()),
        Cmd::Build { path, build } => lifecycle::build(common, path.get(), &build),
        Cmd::BuildBase(opts) => image::build_base(common, &opts)
            .map(|_| Exit::Ok.into())
            .map_err(Into::into),
        Cmd::Start {
            path,
            from_snapshot: Some(id),
            ..
        } => lifecycle::start_from_snapshot(
            common,
            path.get(),
            Some(id.as_str()).filter(|i| !i.is_empty()),
        )
        .map(|_| Exit::Ok.into()),
        Cmd::Snapshot {
            action: None,
            path,
            tag,
        } => snapshot::snapshot(common, path.get(), tag.as_deref()),
        Cmd::Snapshot {
            action: Some(SnapAction::Export { id, output, path }),
            ..
        } => snapshot::export(common, path.get(), &id, &output),
        Cmd::Snapshot {
            action: Some(SnapAction::Import { file, path }),
            ..
        } => snapshot::import(common, path.get(), &file),
        Cmd::Snapshots { path } => snapshot::list(common, path.get()),
        Cmd::Restore {
            path,
            snapshot,
            backup,
        } => lifecycle::restore(common, path.get(), snapshot.as_deref(), backup.as_deref()),
        Cmd::Start {
            path,
            build,
            base_tag,
            branch,
            from_snapshot: None,
            ssh_listen,
        } => {
            if let Some(addr) = ssh_listen {
                listen_at(common, path.clone().get(), branch.branch.as_deref(), addr)?;
            }
            let opts = (build || base_tag.is_some()).then(|| image::BuildOpts {
                base_tag: base_tag.unwrap_or_else(image::default_base_tag),
                ..image::BuildOpts::default()
            });
            lifecycle::start_in(common, path.get(), opts.as_ref(), branch.branch.as_deref())
                .map(|_| Exit::Ok.into())
        }
        Cmd::Ssh { path, command } => ssh::session(common, path.get(), &command),
        Cmd::SshKey { path, public } => ssh::key(common, path.get(), public),
        Cmd::SshConfig { path } => ssh::config(common, path.get()),
        Cmd::Stop { path, branch } => lifecycle::stop(common, path.get(), branch.branch.as_deref()),
        Cmd::Restart { path } => lifecycle::restart(common, path.get()),
        Cmd::Shell {
            path,
            build,
            branch,
        } => lifecycle::shell(common, path.get(), build, branch.branch.as_deref()),
        Cmd::Exec {
            path,
            command,
            branch,
            root: false,
        } => lifecycle::exec(common, path, &command, branch.branch.as_deref()),
        Cmd::Exec {
            path,
            command,
            branch,
            root: true,
        } => lifecycle::exec_root(common, path, &command, branch.branch.as_deref()),
        Cmd::ShowRun {
            path,
            branch,
            format: ShowFormat::Docker,
            repo: None,
            image: None,
        } => lifecycle::show_run(common, path.get(), branch.branch.as_deref()),
        Cmd::ShowRun {
            format: ShowFormat::Docker,
            ..
        } => Err(RunError::Usage(
            "show-run: --repo and --image are for --format k8s, pod or k8s-template".into(),
        )
        .into()),
        Cmd::ShowRun {
            path,
            branch,
            format,
            repo,
            image,
        } => lifecycle::show_k8s(
            common,
            path.get(),
            branch.branch.as_deref(),
            format,
            repo,
            image,
        ),
        Cmd::Checkout { branch, path } => branch::checkout(common, path, &branch),
        Cmd::Cp {
            path,
            follow,
            src,
            dest,
        } => lifecycle::cp(common, path, &src, &dest, follow),
        Cmd::Login { cli, share, path } => lifecycle::login(common, &cli, share, path),
        Cmd::Volume => lifecycle::volume(common),
        Cmd::Volumes { path } => lifecycle::volumes(common, path.get()),
        Cmd::List => lifecycle::list(common),
        Cmd::Rm {
            path,
            volumes,
            force,
            branch,
        } => lifecycle::rm(common, path.get(), volumes, force, branch.branch.as_deref()),
        Cmd::Prune { chats: false, .. } => lifecycle::prune(common),
        Cmd::Prune {
            chats: true,
            older_than,
        } => agent::prune_chats(common, older_than.as_deref()),
        Cmd::Agent(opts) => agent::run(common, &opts),
        Cmd::Doctor { path } => tools::doctor(common, path.get()),
        Cmd::Log(opts) => tools::log(common, &opts),
        Cmd::Allow(opts) => allow::allow(common, &opts),
        Cmd::Terminal(opts) => terminal::run(common, opts),
        Cmd::Test { path } => selftest::run(common, path.get()),
        Cmd::CodexInitConfig { auth, force } => tools::codex_init_config(common, auth, force),
        Cmd::CodexLogout => tools::codex_logout(common),
        Cmd::VerifyCommits(opts) => verify::verify_commits(common, &opts),
        Cmd::Fetch(opts) => fetch::fetch(common, &opts),
    };
    // A failure after Ctrl-C is reported as the interruption it was; a
    // shell or exec that ended normally keeps its own status even if the
    // user pressed Ctrl-C inside it.
    if result.is_err() && interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        output::error("interrupted");
        return Ok(ExitCode::from(130));
    }
    result
}
