#!/usr/bin/env bash
# Keystroke-to-echo latency of the web terminal (issue 42's "Done when"):
# a WebSocket client speaking ttyd's framing types 300 keys, one at a time,
# each timed until its echo comes back through sbx-server, the guest API
# and tmux; then, in the same run, on the same sandbox and the same tmux
# session, 300 keys through `docker exec -it` + tmux (the baseline; `script`
# gives docker its terminal). Goal: p50 and p99 within 1.2x the baseline.
# Needs root (workspaces go to uid 1000) and Docker; SBX_BASE_TAG's base
# image is built from SBX_BIN_DIR's tools when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/terminal.sh: run as root (workspaces are given to uid 1000)" >&2; exit 77; }
PROFILE=${PROFILE:-dev}
# The image takes the sandbox's git client and static tools too: make
# builds them as the install does.
if [ "$PROFILE" = dev ]; then make -s debug; else [ "$PROFILE" = release ] || { echo "bench/terminal.sh: PROFILE is dev or release" >&2; exit 64; }; make -s build; fi
DIR=$PWD/target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
export SBX_BIN_DIR=${SBX_BIN_DIR:-$DIR}
echo "sbx-server $(git rev-parse --short HEAD), profile $PROFILE, load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test --locked -q --profile "$PROFILE" -p sbx-server --test terminal_bench -- \
  --ignored --nocapture --test-threads 1 2>&1 | grep -E '^(keystrokes|web terminal|docker exec|ratio)'
