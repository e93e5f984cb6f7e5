# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_fw_global_optspecs
    string join \n q/quiet v/verbose json color= config= h/help V/version
end

function __fish_sbx_fw_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_fw_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_fw_using_subcommand
    set -l cmd (__fish_sbx_fw_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -s V -l version -d 'Print version'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "init" -d 'Resolve, build and install the firewall and start the DNS filter (root, CAP_NET_ADMIN)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "verify" -d 'Prove the firewall works: blocked targets are refused, an allowlisted one is reachable'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "allow" -d 'Allow more names now, keeping every open connection'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "deny" -d 'Remove names from the running allowlist, with the addresses the DNS filter handed out for them alone (their connections are cut)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "grant" -d 'Open names for a while (root only: `sbx-run allow` from the host), list or revoke them'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "secret" -d 'Renew a [secrets] value in the running proxy (root only: the host\'s login refresh)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "status" -d 'Rules, set sizes, the DNS filter and the last refresh'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "reset" -d 'Remove the firewall entirely: everything becomes reachable. Needs --yes'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "probe" -d 'Try connections and report whether each was refused or open'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "dns" -d 'Serve the DNS filter in the foreground (init starts it)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "proxy" -d 'Serve the name-checking proxy in the foreground ([network] mode = "proxy"; init starts it)'
complete -c sbx-fw -n "__fish_sbx_fw_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l github-meta-url -d 'Where GitHub\'s ranges are fetched from' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l timeout -d 'Deadline for all name lookups and for the GitHub fetch, in milliseconds' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l dry-run -d 'Print the exact sets and rules that would be installed, and install nothing'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l no-dns-filter -d 'Do not start the DNS filter (resolv.conf is left as it is; the agent then cannot resolve names at all, since only uid 0 may reach DNS)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand init" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l reach -d 'The allowlisted name that must be reachable on 443 (default: the first one resolved)' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l blocked-v4 -d 'An IPv4 address that must be refused' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l blocked-v6 -d 'An IPv6 address that must be refused' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l other-resolver -d 'A resolver other than the configured ones, which must be refused' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l timeout -d 'Per-probe deadline in milliseconds (probes run in parallel)' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand verify" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand allow" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand deny" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l for -d 'How long each grant lasts, like 30m or 2h (at most 7d)' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l by -d 'Who asked, for --list and the audit record' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l list -d 'Print the grants in force'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l revoke -d 'End the named grants now'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand grant" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -l failed -d 'The renewal failed: answer the entry\'s requests with this instead' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand secret" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand status" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -l yes -d 'Confirm that the sandbox should be left without a firewall'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand reset" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -l timeout -d 'Per-probe deadline in milliseconds' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand probe" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -l listen -d 'Address to listen on (UDP and TCP)' -r
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand dns" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand proxy" -s h -l help -d 'Print help'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "init" -d 'Resolve, build and install the firewall and start the DNS filter (root, CAP_NET_ADMIN)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "verify" -d 'Prove the firewall works: blocked targets are refused, an allowlisted one is reachable'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "allow" -d 'Allow more names now, keeping every open connection'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "deny" -d 'Remove names from the running allowlist, with the addresses the DNS filter handed out for them alone (their connections are cut)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "grant" -d 'Open names for a while (root only: `sbx-run allow` from the host), list or revoke them'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "secret" -d 'Renew a [secrets] value in the running proxy (root only: the host\'s login refresh)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "status" -d 'Rules, set sizes, the DNS filter and the last refresh'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "reset" -d 'Remove the firewall entirely: everything becomes reachable. Needs --yes'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "probe" -d 'Try connections and report whether each was refused or open'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "dns" -d 'Serve the DNS filter in the foreground (init starts it)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "proxy" -d 'Serve the name-checking proxy in the foreground ([network] mode = "proxy"; init starts it)'
complete -c sbx-fw -n "__fish_sbx_fw_using_subcommand help; and not __fish_seen_subcommand_from init verify allow deny grant secret status reset probe dns proxy help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
