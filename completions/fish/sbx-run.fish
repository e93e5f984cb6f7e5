# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_run_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_run_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_run_using_subcommand
    set -l cmd (__fish_sbx_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-run -n "__fish_sbx_run_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -s V -l version -d 'Print version'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "init" -d 'Create .agent-sandbox/ (commented config.toml and a per-repo Dockerfile), then build'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "build" -d 'Build the per-repo image from .agent-sandbox/Dockerfile'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "build-base" -d 'Build the shared base image agent-sandbox-base:<tag>'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "start" -d 'Start the sandbox container (building what is missing or stale)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "snapshot" -d 'Snapshot the running sandbox: its system state outside the home and the workspace (what `exec --root` installed) as an image, with a home backup when [backup].url is set'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "restore" -d 'Restore an older point in time: a snapshot\'s system state and home, or the home from a backup'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "snapshots" -d 'List the workspace\'s snapshots: id, tag, age, size (what they add to the per-repo image)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "stop" -d 'Stop the sandbox container'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "restart" -d 'Recreate the sandbox container (picks up config changes)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "ssh" -d 'Open an SSH session in the sandbox as the agent ([ssh] enabled), or run COMMAND there'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "ssh-key" -d 'Print the project\'s SSH private key ([ssh] enabled; made by the first start)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "ssh-config" -d 'Print an ssh_config Host block for the sandbox (for ~/.ssh/config and VS Code Remote-SSH)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "shell" -d 'Open an interactive shell in the sandbox (the default command)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "exec" -d 'Run a command in the sandbox; its exit status is passed through'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "cp" -d 'Copy files or directories between the host and the sandbox, like docker cp'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "show-run" -d 'Print the exact docker commands start would run, shell-quoted; or the same sandbox as Kubernetes manifests'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "checkout" -d 'Provision BRANCH\'s worktree on the repo shelf (clone once, fetch, add the worktree), start nothing'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "login" -d 'Log in once for the whole machine, or share one workspace\'s login with the others'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "volume" -d 'Print the name of the machine\'s Claude Code login store (never mounted into a sandbox)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "volumes" -d 'List the volumes a workspace\'s sandbox uses'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "list" -d 'List sandbox containers (from their labels)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "rm" -d 'Remove the sandbox container, its network holder, its network and its per-repo image'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "prune" -d 'Remove containers, networks, volumes and per-repo images whose workspace no longer exists'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "agent" -d 'Run Claude Code (or Codex) headless in the sandbox; print its text, or events with --json'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "doctor" -d 'Check the Docker engine, kernel features, images and the workspace\'s ownership; say how to fix each'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "log" -d 'Show the audit log (git, network and tool refusals with --blocked-only)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "allow" -d 'Open a name the firewall refuses, in the running sandbox, for a while (default 1h)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "terminal" -d 'Serve the sandbox\'s terminal to a browser (xterm.js, ttyd\'s protocol), on loopback'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "test" -d 'Self-check: start the sandbox, try what each guard must refuse (a write under read-only, a disallowed tool, a secret read, a blocked domain, a --no-verify commit) and print expected vs got; exit 0 only when every configured guard held'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "codex-init-config" -d 'Initialise the machine\'s Codex store (config.toml, AGENTS.md for new workspaces; --auth imports credentials)'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "codex-logout" -d 'Delete the Codex credentials from the machine\'s store and every workspace\'s volume'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "verify-commits" -d 'Run the repository\'s pre-commit and commit-msg hooks (as recorded when the sandbox started) against each commit added since REF, in a throwaway container with no network, never on the host; exit 1 when any fails'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "fetch" -d 'Bring the sandbox\'s branches back as data: a `git bundle` from its clone (clone or branch mode), size-capped, fetched with hooks off into refs/remotes/sbx/'
complete -c sbx-run -n "__fish_sbx_run_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -l import -d 'Write config.toml from a policy seed\'s YAML config (e.g. .uds/config.yaml) instead of the template: each key is mapped to its sbx key or named as not mappable, one line per key, printed and kept as comments in the file' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -l force -d 'Overwrite existing files and remove an existing sandbox container'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand init" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -l base-tag -d 'Tag of agent-sandbox-base to build on' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -l allow-entrypoint -d 'Allow ENTRYPOINT and USER in .agent-sandbox/Dockerfile'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l tag -d 'Tag of the base image' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l claude-code-version -d 'Claude Code version from npm ("latest" is resolved before the build)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l codex-version -d 'Codex version from npm' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l ast-grep-version -d 'ast-grep version from npm' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l ca-cert -d 'Add this CA bundle to the image (TLS-intercepting networks)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l git-delta-version -d 'git-delta version to put in the image as /usr/local/bin/delta, or "none". Debian bookworm has no git-delta package, so it is built from its crate with the host\'s cargo (minutes, once per version: cached in ~/.cache/sbx)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l bootstrap -d 'Build FROM a Debian root made with mmdebstrap from the host\'s apt mirror (no registry needed)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l no-ai-clis -d 'Skip the npm AI CLIs (Claude Code, Codex, ast-grep)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l prefetch -d 'Build only the layers that do not hold the sbx tools (Debian packages, AI CLIs), so they are cached while the tools still compile; the next build-base with the same options reuses them. Needs no sbx binaries'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand build-base" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l base-tag -d 'Build the per-repo image on agent-sandbox-base:TAG (implies --build)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l from-snapshot -d 'Replace the sandbox with one made from a snapshot of this workspace (ID or tag; default: the newest). Its guards are made anew at start, as in a fresh one' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l ssh-listen -d 'With [ssh] enabled: publish sshd on ADDR:PORT instead of 127.0.0.1 and a free port (0.0.0.0:2222 reaches it from other machines). Kept for later starts; a sandbox made with another address is made anew' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l build -d 'Rebuild the per-repo image first and replace a running container'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand start" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -l tag -d 'A name to start from later (`start --from-snapshot TAG`)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -a "export" -d 'Write a snapshot (id or tag) as a `docker save` archive, its record inside'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -a "import" -d 'Load an archive `snapshot export` wrote as a snapshot of this workspace'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and not __fish_seen_subcommand_from export import help" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -s o -l output -d 'The archive to write: it must not exist, and not be in a workspace (an agent could rewrite it there)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "export" -d 'Write a snapshot (id or tag) as a `docker save` archive, its record inside'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "import" -d 'Load an archive `snapshot export` wrote as a snapshot of this workspace'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -l snapshot -d 'The snapshot (id or tag, `sbx-run snapshots`) to restore' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -l backup -d 'The home backup (`sbx-backup snapshots`) to restore into the home' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand snapshots" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand stop" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand restart" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -l public -d 'The public key instead'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-key" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand ssh-config" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -l build -d 'Rebuild the per-repo image first and replace a running container'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand shell" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -s C -l path -d 'Workspace (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -l root -d 'As the sandbox\'s root (e.g. `apt-get install`), through the guest\'s socket only; recorded in the audit log before it runs. Only the host user who owns the sandbox can; the agent has no root and no way to this'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -s C -l path -d 'Workspace (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -s L -l dereference -d 'Copy what a host source link points to, not the link (outside a git work tree)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand cp" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l format -d 'docker: the commands start runs; k8s: a Sandbox (agents.x-k8s.io) with its ConfigMap and NetworkPolicy; pod: a plain Pod with its claims; k8s-template: a SandboxTemplate and a SandboxWarmPool for a server. Config with no meaning on a cluster is refused (exit 78)' -r -f -a "docker\t''
k8s\t''
pod\t''
k8s-template\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l repo -d 'The repository a cluster clones the workspace from (k8s formats; a cluster has no host checkout to bind). The branch: --branch, else the one the checkout is on' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l image -d 'The image a cluster pulls (k8s formats; default: the per-repo image\'s local name, which a cluster\'s registry will not have)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand show-run" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -s C -l path -d 'Workspace (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand checkout" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -l cli -d 'Which AI CLI\'s login' -r -f -a "claude\t''
codex\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -s C -l path -d 'With --share: the workspace (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -l share -d 'Copy this workspace\'s login (made in its sandbox) into the machine\'s store'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand login" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volume" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand volumes" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand list" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l volumes -d 'Also remove volumes: without --branch, the workspace\'s (history, repo shelf, logins, homes), once no branch sandbox of it is left; with --branch, that sandbox\'s home. With backups on, a running sandbox is stopped first (its final backup), and a home whose newest state is in no completed backup is refused unless --force'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l force -d 'With --volumes: remove a home volume even when its newest state is in no backup'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand rm" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -l older-than -d 'With --chats: the age, e.g. 7d (default: [agent].chat-retention, 7d)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -l chats -d 'Remove agent chats (every workspace\'s) idle longer than --older-than instead'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand prune" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l chat -d 'Keep a conversation: earlier turns of chat ID are given to this run, and this run\'s are kept' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l model -d 'Model for the CLI\'s --model' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l max-turns -d 'Stop after N agent turns (exit 3)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l permission-mode -d 'The CLI\'s permission mode (default: [agent].permission-mode, else bypassPermissions: the sandbox is the guard)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l timeout -d 'Kill the run (the CLI\'s whole process group in the sandbox) after DUR, e.g. 10m (exit 124)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l cli -d 'Which agent CLI (default: [agent].cli, else claude)' -r -f -a "claude\t''
codex\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l show-chat -d 'Print chat ID\'s turns and exit' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l scratch -d 'With --chat: give the run the chat\'s own scratch directory, /scratch/ID in the sandbox ($SBX_SCRATCH), kept across the chat\'s runs until `sbx-run prune --chats` removes the chat'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l list-chats -d 'List this workspace\'s chats and exit'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand agent" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -l file -d 'Read only this file (default: the host\'s audit log merged in time order with every sandbox\'s, which their guests keep on the host; a sandbox record\'s tool is marked with *)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -l blocked-only -d 'Only records whose result is "blocked"'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -s f -l follow -d 'Keep reading as records are appended'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand log" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -s C -l path -d 'Workspace, as -C on every other command' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l for -d 'How long the name stays open, like 30m or 2h (at most 7d)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l list -d 'Print the names opened and until when (NAME is then read as PATH)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l revoke -d 'Close NAME now'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand allow" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -l listen -d 'Address to serve the page on (plain HTTP). Loopback unless --public' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -l public -d 'Allow a --listen address that is not loopback. The page and the terminal then cross that network unencrypted: put TLS in front'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand terminal" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -s C -l path -d 'Workspace: a git repository or a directory in one (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand test" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -l auth -d 'Import ~/.codex/auth.json (and profile.json) from the host'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -l force -d 'Overwrite existing files in the volume'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-init-config" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand codex-logout" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l since -d 'Check the commits after REF up to HEAD (default: the current branch\'s upstream, `@{upstream}`, which is where the sandbox\'s work starts in both bind and branch mode)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l head -d 'The last commit to check (default: HEAD); e.g. `--since HEAD --head sbx/main` checks what `sbx-run fetch` brought back before a merge' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l clean-room -d 'Inside the clean room: the directory the host prepared' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand verify-commits" -s h -l help -d 'Print help'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -s C -l path -d 'Workspace (default: the current directory)' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l branch -d 'Branch mode: a sandbox of its own for BRANCH, working in /repo-shelf/worktrees/<BRANCH> (its guest provisions it before the agent starts); `git push` there lands in the host checkout' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l max-size -d 'The largest bundle taken from the sandbox (b, k, m or g); a bigger one is refused and nothing is fetched' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l max-object-size -d 'The largest object (a file\'s content, as git inflates it) the bundle may hold; checked from the bundle\'s own sizes before your git reads it' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l max-inflated -d 'The most the bundle\'s objects may inflate to, all together' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l max-objects -d 'The most objects the bundle may hold (your git\'s index of them takes about 140 bytes of memory each)' -r
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l allow-hook-changes -d 'Take branches that change what your git runs on a merge or checkout (a hooks directory in the work tree, `.husky`, a config file your `.git/config` includes from the work tree) or what your Claude Code or codex runs (`.claude/`, `.mcp.json`, `.codex/`), after you have read the change in the sandbox'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand fetch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "init" -d 'Create .agent-sandbox/ (commented config.toml and a per-repo Dockerfile), then build'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "build" -d 'Build the per-repo image from .agent-sandbox/Dockerfile'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "build-base" -d 'Build the shared base image agent-sandbox-base:<tag>'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "start" -d 'Start the sandbox container (building what is missing or stale)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "snapshot" -d 'Snapshot the running sandbox: its system state outside the home and the workspace (what `exec --root` installed) as an image, with a home backup when [backup].url is set'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "restore" -d 'Restore an older point in time: a snapshot\'s system state and home, or the home from a backup'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "snapshots" -d 'List the workspace\'s snapshots: id, tag, age, size (what they add to the per-repo image)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "stop" -d 'Stop the sandbox container'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "restart" -d 'Recreate the sandbox container (picks up config changes)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "ssh" -d 'Open an SSH session in the sandbox as the agent ([ssh] enabled), or run COMMAND there'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "ssh-key" -d 'Print the project\'s SSH private key ([ssh] enabled; made by the first start)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "ssh-config" -d 'Print an ssh_config Host block for the sandbox (for ~/.ssh/config and VS Code Remote-SSH)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "shell" -d 'Open an interactive shell in the sandbox (the default command)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "exec" -d 'Run a command in the sandbox; its exit status is passed through'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "cp" -d 'Copy files or directories between the host and the sandbox, like docker cp'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "show-run" -d 'Print the exact docker commands start would run, shell-quoted; or the same sandbox as Kubernetes manifests'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "checkout" -d 'Provision BRANCH\'s worktree on the repo shelf (clone once, fetch, add the worktree), start nothing'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "login" -d 'Log in once for the whole machine, or share one workspace\'s login with the others'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "volume" -d 'Print the name of the machine\'s Claude Code login store (never mounted into a sandbox)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "volumes" -d 'List the volumes a workspace\'s sandbox uses'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "list" -d 'List sandbox containers (from their labels)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "rm" -d 'Remove the sandbox container, its network holder, its network and its per-repo image'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "prune" -d 'Remove containers, networks, volumes and per-repo images whose workspace no longer exists'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "agent" -d 'Run Claude Code (or Codex) headless in the sandbox; print its text, or events with --json'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "doctor" -d 'Check the Docker engine, kernel features, images and the workspace\'s ownership; say how to fix each'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "log" -d 'Show the audit log (git, network and tool refusals with --blocked-only)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "allow" -d 'Open a name the firewall refuses, in the running sandbox, for a while (default 1h)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "terminal" -d 'Serve the sandbox\'s terminal to a browser (xterm.js, ttyd\'s protocol), on loopback'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "test" -d 'Self-check: start the sandbox, try what each guard must refuse (a write under read-only, a disallowed tool, a secret read, a blocked domain, a --no-verify commit) and print expected vs got; exit 0 only when every configured guard held'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "codex-init-config" -d 'Initialise the machine\'s Codex store (config.toml, AGENTS.md for new workspaces; --auth imports credentials)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "codex-logout" -d 'Delete the Codex credentials from the machine\'s store and every workspace\'s volume'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "verify-commits" -d 'Run the repository\'s pre-commit and commit-msg hooks (as recorded when the sandbox started) against each commit added since REF, in a throwaway container with no network, never on the host; exit 1 when any fails'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "fetch" -d 'Bring the sandbox\'s branches back as data: a `git bundle` from its clone (clone or branch mode), size-capped, fetched with hooks off into refs/remotes/sbx/'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and not __fish_seen_subcommand_from init build build-base start snapshot restore snapshots stop restart ssh ssh-key ssh-config shell exec cp show-run checkout login volume volumes list rm prune agent doctor log allow terminal test codex-init-config codex-logout verify-commits fetch help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "export" -d 'Write a snapshot (id or tag) as a `docker save` archive, its record inside'
complete -c sbx-run -n "__fish_sbx_run_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "import" -d 'Load an archive `snapshot export` wrote as a snapshot of this workspace'
