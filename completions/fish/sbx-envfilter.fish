complete -c sbx-envfilter -l color -d 'When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c sbx-envfilter -l config -d 'Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory' -r -F
complete -c sbx-envfilter -s q -l quiet -d 'Print nothing but errors; the exit status tells the result'
complete -c sbx-envfilter -s v -l verbose -d 'More detail on stderr (repeatable; or SBX_LOG=debug)'
complete -c sbx-envfilter -l json -d 'Output JSON Lines on stdout, one {"type":…,"data":…} object a line'
complete -c sbx-envfilter -l print -d 'Print the filtered environment as NAME=VALUE lines instead of running a command'
complete -c sbx-envfilter -l stdin -d 'Read the environment to filter from stdin (NAME=VALUE lines, or NUL-separated with -0)'
complete -c sbx-envfilter -s 0 -l null -d 'Records are NUL-terminated, as `env -0` prints them, on stdin and for --print (may be repeated)'
complete -c sbx-envfilter -l explain -d 'For every variable: kept or dropped and the rule that decided. Values are never shown'
complete -c sbx-envfilter -l check-config -d 'Validate the config file and exit (0 when valid, 78 when not)'
complete -c sbx-envfilter -s h -l help -d 'Print help (see more with \'--help\')'
complete -c sbx-envfilter -s V -l version -d 'Print version'
