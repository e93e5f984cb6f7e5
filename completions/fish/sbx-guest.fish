# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_guest_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_guest_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_guest_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_guest_using_subcommand
    set -l cmd (__fish_sbx_guest_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -s V -l version -d 'Print version'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "init" -d 'Be the sandbox\'s init: firewall, audit sink, then COMMAND as the agent user'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "health" -d 'Exit 0 when the sandbox started cleanly, else print why and exit 1 (for HEALTHCHECK)'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "agent-launch" -d 'Run the agent CLI for `sbx-run agent`: the API key (stdin\'s first line) reaches only it'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "exec" -d 'Run COMMAND as the agent through this sandbox\'s guest API, as `sbx-run exec` does from the host: the audit record and the guards apply. For a cluster\'s API server exec (the container\'s root reaches the socket); exits with the command\'s status'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "mcp-host-tools" -d 'The MCP stdio server for [agent.host-tools], started by the agent CLI under agent-launch'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "agent-key" -d 'The agent CLI\'s apiKeyHelper: print the key agent-launch serves once on SOCKET'
complete -c sbx-guest -n "__fish_sbx_guest_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -l snapshot-layers -d 'With --from-snapshot: sbx-run bound the snapshot\'s own N layers (those above the per-repo image) read-only on /run/sbx-layers/0..N; the cleanup looks only at the names they hold, then unmounts them. Without it, every directory is read' -r
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -l from-snapshot -d 'This container was made from a snapshot (sbx-run\'s `start --from-snapshot`): before anything else runs, remove what the agent left outside its home and the guest\'s runtime state (a failure fails the start)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand init" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand health" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l timeout -d 'Kill the CLI\'s whole process group after this many seconds (exit 124)' -r
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l scratch -d 'The chat\'s scratch directory (under the /scratch mount): made if missing and named to the CLI as SBX_SCRATCH' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l cli -d 'How the key reaches the CLI: claude (an apiKeyHelper in --settings) or codex (model_providers.sbx.auth, a token command)' -r -f -a "claude\t''
codex\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l host-tools -d 'Serve [agent.host-tools] to the CLI\'s MCP server: stdin carries a header line and the prompt\'s length, then the host\'s answers; calls go up on stdout'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-launch" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l agent -d 'The audit record\'s agent field (the client that asked)' -r
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l cwd -d 'The working directory (default: the agent\'s home)' -r
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l env -d 'A variable for the command (repeatable)' -r
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l tty -d 'Run it on a PTY of the guest\'s, sized and resized as this process\'s stdin, which must be a tty (the exec\'s: sbx-server\'s web terminal on a cluster)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand exec" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand mcp-host-tools" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand agent-key" -s h -l help -d 'Print help'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "init" -d 'Be the sandbox\'s init: firewall, audit sink, then COMMAND as the agent user'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "health" -d 'Exit 0 when the sandbox started cleanly, else print why and exit 1 (for HEALTHCHECK)'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "agent-launch" -d 'Run the agent CLI for `sbx-run agent`: the API key (stdin\'s first line) reaches only it'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "exec" -d 'Run COMMAND as the agent through this sandbox\'s guest API, as `sbx-run exec` does from the host: the audit record and the guards apply. For a cluster\'s API server exec (the container\'s root reaches the socket); exits with the command\'s status'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "mcp-host-tools" -d 'The MCP stdio server for [agent.host-tools], started by the agent CLI under agent-launch'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "agent-key" -d 'The agent CLI\'s apiKeyHelper: print the key agent-launch serves once on SOCKET'
complete -c sbx-guest -n "__fish_sbx_guest_using_subcommand help; and not __fish_seen_subcommand_from init health agent-launch exec mcp-host-tools agent-key help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
