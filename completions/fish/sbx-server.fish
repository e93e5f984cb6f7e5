# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_server_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_server_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_server_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_server_using_subcommand
    set -l cmd (__fish_sbx_server_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-server -n "__fish_sbx_server_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-server -n "__fish_sbx_server_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-server -n "__fish_sbx_server_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -s V -l version -d 'Print version'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -f -a "serve" -d 'Serve the API until SIGINT or SIGTERM'
complete -c sbx-server -n "__fish_sbx_server_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l listen -d 'Address to listen on (plain HTTP: keep it on loopback, behind a TLS proxy)' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l state-dir -d 'Where the server keeps its database cluster, project workspaces and audit log [default: $XDG_STATE_HOME/sbx/server]' -r -F
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-projects -d 'Projects one user may have' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-running -d 'Sandboxes one user may have running (or starting) at once' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l login-limit-account -d 'Failed logins per account in 15 minutes before it is refused (429)' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l login-limit-address -d 'Failed logins and registrations per client address in 15 minutes before it is refused (429)' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l register-limit-address -d 'Registrations (taken or not) per client address in 15 minutes before it is refused (429): each account brings its own project and sandbox quotas' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l repo-root -d 'Local repositories a project\'s `repo` may name: absolute paths below this directory. Without it, `repo` is refused' -r -F
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-connections -d 'Connections open at once; one over is closed when accepted. A request\'s head has 10 s to arrive, an idle connection 10 s to send its next' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-connections-per-address -d 'Connections one client address (an IPv6 client\'s /64) may have open at once [default: a quarter of --max-connections]. The address is the TCP peer\'s: behind a reverse proxy, every client is the proxy; there, set it to --max-connections and limit clients at the proxy' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l db-connections -d 'Connections to Postgres the server holds at most. A request that waits 2 s for one is answered 503 (busy: retry); a statement is cancelled after 10 s, so a stuck one gives its connection back' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l backup-url -d 'The backup store of every project\'s home (s3://, gs://, file://; a file:// path is inside each sandbox): each project backs up to `URL/projects/<id>`. Without it, snapshot, restore and backup-status answer 409' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l backup-pass -d 'A variable of the server\'s environment every sandbox gets, for the backup store\'s credentials (e.g. AWS_ACCESS_KEY_ID); repeatable' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l project-config -d 'The `.agent-sandbox/config.toml` of a project whose request gives none (default: sbx\'s template); checked like a request\'s' -r -F
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-cpus-per-sandbox -d 'CPUs one sandbox may have: a config asking for more is refused (409); one asking for nothing gets at most this' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l max-memory-per-sandbox -d 'Memory one sandbox may have (docker\'s notation: 512m, 4g): a config asking for more is refused (409); one asking for nothing gets at most this' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l session-retention -d 'How long a terminal session\'s recording (its asciicast file and its row) is kept after the session ends (e.g. 30d, 12h); older ones are deleted at start and hourly' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l idle-stop -d 'Stop a running project nobody has connected to for this long (no terminal open): final backup, then stop, status `stopped` with reason `idle` (seed 001\'s inactivity check; e.g. 30m, 2h)' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l backend -d 'What runs the sandboxes: `docker` on this machine, or `kubernetes`: agent-sandbox `Sandbox` objects applied through the API server of --kubeconfig (docs/kubernetes.md)' -r -f -a "docker\t''
kubernetes\t''"
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l kubeconfig -d 'The kubeconfig of `--backend kubernetes` (its current context: an https server, its CA and a ServiceAccount token)' -r -F
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l kube-image -d 'The image a cluster pulls for sandboxes (the base image pushed to its registry) [default: sbx\'s local image name]' -r
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand serve" -s h -l help -d 'Print help'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand help; and not __fish_seen_subcommand_from serve help" -f -a "serve" -d 'Serve the API until SIGINT or SIGTERM'
complete -c sbx-server -n "__fish_sbx_server_using_subcommand help; and not __fish_seen_subcommand_from serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
