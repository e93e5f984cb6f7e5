# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_tool_guard_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_tool_guard_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_tool_guard_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_tool_guard_using_subcommand
    set -l cmd (__fish_sbx_tool_guard_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -s V -l version -d 'Print version'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -f -a "check" -d 'The PreToolUse hook: hook JSON on stdin; exit 2 with the reason refuses the call'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -f -a "decide" -d 'Decide one call without logging it: exit 0 allowed, 77 refused'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -f -a "settings" -d 'Print the Claude Code managed settings for the config (JSON)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -l workspace -d 'The sandbox\'s workspace (relative paths and masks are relative to it)' -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand check" -s h -l help -d 'Print help'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -l workspace -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand decide" -s h -l help -d 'Print help'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -l workspace -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand settings" -s h -l help -d 'Print help'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand help; and not __fish_seen_subcommand_from check decide settings help" -f -a "check" -d 'The PreToolUse hook: hook JSON on stdin; exit 2 with the reason refuses the call'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand help; and not __fish_seen_subcommand_from check decide settings help" -f -a "decide" -d 'Decide one call without logging it: exit 0 allowed, 77 refused'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand help; and not __fish_seen_subcommand_from check decide settings help" -f -a "settings" -d 'Print the Claude Code managed settings for the config (JSON)'
complete -c sbx-tool-guard -n "__fish_sbx_tool_guard_using_subcommand help; and not __fish_seen_subcommand_from check decide settings help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
