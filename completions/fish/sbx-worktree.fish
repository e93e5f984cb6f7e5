# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_worktree_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_worktree_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_worktree_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_worktree_using_subcommand
    set -l cmd (__fish_sbx_worktree_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -s V -l version -d 'Print version'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -f -a "provision" -d 'Clone (once), fetch, and create or reuse the worktree of a branch'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -f -a "list" -d 'List the shelf\'s branch worktrees'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -f -a "remove" -d 'Remove a branch\'s worktree (the branch itself stays in the clone)'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -f -a "prune" -d 'Forget worktrees whose directory has vanished'
complete -c sbx-worktree -n "__fish_sbx_worktree_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l shelf -d 'The shelf directory (the repo-shelf volume inside a sandbox)' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l lock-timeout -d 'Seconds to wait for another process\'s provisioning before giving up (exit 75)' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l host-repo -d 'The host\'s checkout (pushed to as the remote `host`)' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l branch -d 'The branch' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l owner -d 'Hand what is created to UID:GID (when run as root; default: the caller)' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l origin-from-host -d 'Take origin\'s branches from the host\'s remote-tracking refs (origin/*, as the host last fetched them) instead of fetching origin: no network needed (sbx-run\'s provisioning container)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l keep-existing -d 'When the branch\'s worktree exists (and is this branch\'s), change nothing: no fetch, no remote or upstream set (sbx-guest\'s start of a branch sandbox)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand provision" -s h -l help -d 'Print help'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -l shelf -d 'The shelf directory (the repo-shelf volume inside a sandbox)' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -l lock-timeout -d 'Seconds to wait for another process\'s provisioning before giving up (exit 75)' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand list" -s h -l help -d 'Print help'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l shelf -d 'The shelf directory (the repo-shelf volume inside a sandbox)' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l lock-timeout -d 'Seconds to wait for another process\'s provisioning before giving up (exit 75)' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l branch -d 'The branch' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l force -d 'Remove it even with uncommitted changes or untracked files'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand remove" -s h -l help -d 'Print help'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -l shelf -d 'The shelf directory (the repo-shelf volume inside a sandbox)' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -l lock-timeout -d 'Seconds to wait for another process\'s provisioning before giving up (exit 75)' -r
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand prune" -s h -l help -d 'Print help'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand help; and not __fish_seen_subcommand_from provision list remove prune help" -f -a "provision" -d 'Clone (once), fetch, and create or reuse the worktree of a branch'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand help; and not __fish_seen_subcommand_from provision list remove prune help" -f -a "list" -d 'List the shelf\'s branch worktrees'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand help; and not __fish_seen_subcommand_from provision list remove prune help" -f -a "remove" -d 'Remove a branch\'s worktree (the branch itself stays in the clone)'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand help; and not __fish_seen_subcommand_from provision list remove prune help" -f -a "prune" -d 'Forget worktrees whose directory has vanished'
complete -c sbx-worktree -n "__fish_sbx_worktree_using_subcommand help; and not __fish_seen_subcommand_from provision list remove prune help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
