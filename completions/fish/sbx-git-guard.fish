# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_git_guard_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_git_guard_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_git_guard_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_git_guard_using_subcommand
    set -l cmd (__fish_sbx_git_guard_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -s V -l version -d 'Print version'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "check" -d 'Print the verdict for a git command line without running anything'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "exec" -d 'Run a git command line through the guard (what `git ARGS` does)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "rules" -d 'List every rule and what it blocks'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "install-hooks" -d 'Create the guard\'s hooks directory at DIR (a link per hook to the sbx-git-client beside this binary, else to this binary); the image runs it for /usr/lib/sbx/hooks'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "serve" -d 'Run the real git for other users\' guards (root, inside the sandbox)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand check" -s h -l help -d 'Print help'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand exec" -s h -l help -d 'Print help'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand rules" -s h -l help -d 'Print help'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand install-hooks" -s h -l help -d 'Print help'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l socket -d 'The unix socket to listen on (made 0666; callers are told apart by their kernel-attested uid)' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l git -d 'The real git: execute-only (0711) in a directory only root can enter' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l group -d 'The group (name or gid) git and its hooks run with, instead of the caller\'s: one no agent process has, so the agent cannot ptrace them' -r
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l keep -d 'Also keep the record of stash and notes commits in PATH, a file in a directory only root can write (a volume that outlives the container): read into the run\'s record at start, appended to with it, so a stash made before the sandbox was made again is still refused on a branch' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand serve" -s h -l help -d 'Print help'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "check" -d 'Print the verdict for a git command line without running anything'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "exec" -d 'Run a git command line through the guard (what `git ARGS` does)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "rules" -d 'List every rule and what it blocks'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "install-hooks" -d 'Create the guard\'s hooks directory at DIR (a link per hook to the sbx-git-client beside this binary, else to this binary); the image runs it for /usr/lib/sbx/hooks'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "serve" -d 'Run the real git for other users\' guards (root, inside the sandbox)'
complete -c sbx-git-guard -n "__fish_sbx_git_guard_using_subcommand help; and not __fish_seen_subcommand_from check exec rules install-hooks serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
