# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_sbx_backup_global_optspecs
    string join \n q/quiet v/verbose json color= config= url= home= state-dir= h/help V/version
end

function __fish_sbx_backup_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_sbx_backup_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_sbx_backup_using_subcommand
    set -l cmd (__fish_sbx_backup_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -s V -l version -d 'Print version'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "sync" -d 'One pass: upload what changed, commit a snapshot, apply retention'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "daemon" -d 'Sync every interval while files change, until SIGTERM (which lets the current pass finish)'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "restore" -d 'Restore a snapshot (default: the newest, or the one an interrupted restore began) into the home or --to DIR'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "first-boot" -d 'Restore only when the home is new or empty and a snapshot exists; then mark it initialized'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "adopt" -d 'Make this home its prefix\'s owner without restoring: its next sync continues the prefix\'s history, and the home that owned it is refused from then on'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "snapshots" -d 'List snapshots'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "status" -d 'Last good sync, lag and errors (also in the state dir\'s status.json)'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "check" -d 'Check that every pack and blob the snapshots reference exists (and with --read-data hashes right); name the files a problem breaks'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "prune" -d 'Remove snapshots by --keep-last/--keep-within, then delete the packs and blobs no snapshot references'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "verify" -d 'Same as `check --read-data` (kept for scripts)'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "gc" -d 'Same as `prune` without a rule (kept for scripts)'
complete -c sbx-backup -n "__fish_sbx_backup_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l wait -d 'How long to wait for a running prune to finish (then exit 75)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l dry-run -d 'Report what would be uploaded; upload and commit nothing'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand sync" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l interval -d 'Time between passes (default: [backup].interval)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l final-sync -d 'On SIGTERM, after the current pass, sync once more before exiting'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand daemon" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l snapshot -d 'The snapshot (default: the one an interrupted restore into the target began, else the newest)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l to -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l force -d 'Restore over a non-empty directory'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand restore" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand first-boot" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand adopt" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand snapshots" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand status" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l snapshot -d 'Only this snapshot (default: all)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l read-data -d 'Download every referenced pack and blob and check each file\'s hash'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand check" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l keep-last -d 'Keep the N newest snapshots (the newest is always kept)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l keep-within -d 'Keep snapshots created within DURATION (e.g. 7d) of the newest one' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l wait -d 'How long to wait for running syncs to finish' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l dry-run -d 'Report what would go; delete nothing'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand prune" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l snapshot -d 'Only this snapshot (default: all)' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l read-data -d 'Download every referenced pack and blob and check each file\'s hash'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand verify" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l url -d 'Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir' -r
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l home -d 'The directory backed up and restored into by default' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l state-dir -d 'Index and status (default ~/.local/state/sbx-backup, never backed up)' -r -F
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand gc" -s h -l help -d 'Print help'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "sync" -d 'One pass: upload what changed, commit a snapshot, apply retention'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "daemon" -d 'Sync every interval while files change, until SIGTERM (which lets the current pass finish)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "restore" -d 'Restore a snapshot (default: the newest, or the one an interrupted restore began) into the home or --to DIR'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "first-boot" -d 'Restore only when the home is new or empty and a snapshot exists; then mark it initialized'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "adopt" -d 'Make this home its prefix\'s owner without restoring: its next sync continues the prefix\'s history, and the home that owned it is refused from then on'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "snapshots" -d 'List snapshots'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "status" -d 'Last good sync, lag and errors (also in the state dir\'s status.json)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "check" -d 'Check that every pack and blob the snapshots reference exists (and with --read-data hashes right); name the files a problem breaks'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "prune" -d 'Remove snapshots by --keep-last/--keep-within, then delete the packs and blobs no snapshot references'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "verify" -d 'Same as `check --read-data` (kept for scripts)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "gc" -d 'Same as `prune` without a rule (kept for scripts)'
complete -c sbx-backup -n "__fish_sbx_backup_using_subcommand help; and not __fish_seen_subcommand_from sync daemon restore first-boot adopt snapshots status check prune verify gc help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
