#!/usr/bin/env bash
# The overhead `sbx-run agent` adds to a headless run with the sandbox
# running, measured three ways in one run of this script:
#
# 1. A fixed-cost stand-in CLI (a shell script that reads the prompt and
#    prints three stream-json lines) placed first on the sandbox's PATH as
#    `claude`, so the CLI's own time is ~constant and sbx's part shows:
#      docker exec ... claude --print ...        (the baseline: the CLI alone)
#      sbx-run exec -- claude --print ...        (the guest API, no agent logic)
#      sbx-run agent --json hi                   (config, skills, .mcp.json,
#          agent-launch and its key socket, event translation, audit)
#    many runs each, medians and spread.
# 2. `sbx-run -vv agent` phase times (ms since sbx-run agent began: before
#    the exec, first CLI line, exec exit, done), medians over the runs.
# 3. The real Claude Code against sbx-msgapi (tests/msgapi) on 127.0.0.1 in
#    the sandbox, docker exec vs sbx-run agent: the end-to-end check, whose
#    spread is the CLI's own.
# Target: <= 50 ms added. Needs the base image with the AI CLIs.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
FAST_RUNS=${FAST_RUNS:-100}
BIN=${SBX_BIN_DIR:-$PWD/target/release}
for b in sbx-run sbx-msgapi; do
  [ -x "$BIN/$b" ] || { echo "build first (cargo build --release -p sbx-run -p sbx-msgapi), or set SBX_BIN_DIR" >&2; exit 66; }
done
export SBX_BIN_DIR=$BIN
DIR=$(mktemp -d /var/tmp/sbx-agent-bench.XXXXXX)
REPO=$DIR/benchrepo
mkdir -p "$REPO" && git -C "$REPO" init -q && chown -R 1000:1000 "$REPO"
trap '"$BIN/sbx-run" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
"$BIN/sbx-run" -q start -C "$REPO"
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "nan"; exit}; m = NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.1f", m}'; }
row() { awk -F, -v row="$1" 'NR == row + 1 { printf "%.1f ms (sd %.1f, min %.1f)", $4 * 1000, $3 * 1000, $7 * 1000 }' "$2"; }
med() { awk -F, -v row="$1" 'NR == row + 1 { printf "%.2f", $4 * 1000 }' "$2"; }
CLIARGS="--print --output-format stream-json --verbose --permission-mode bypassPermissions"
ENVS="-e ANTHROPIC_API_KEY -e ANTHROPIC_BASE_URL -e CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -e DISABLE_AUTOUPDATER=1"
export ANTHROPIC_API_KEY=sk-bench ANTHROPIC_BASE_URL=http://127.0.0.1:8199

# 1. The fixed-cost stand-in, ahead of the real CLI on PATH (/usr/local/sbin).
cat > "$DIR/claude" <<'EOF'
#!/bin/sh
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"bench","model":"stand-in","tools":[]}'
echo '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"fixed-cost stand-in"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"fixed-cost stand-in","total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":1}}'
EOF
chmod 755 "$DIR/claude"
docker cp "$DIR/claude" "$C:/usr/local/sbin/claude"
for way in "docker exec -i -u agent -w /workspace/benchrepo $ENVS $C claude $CLIARGS hi" \
           "$BIN/sbx-run exec -C $REPO -- claude $CLIARGS hi" \
           "$BIN/sbx-run agent -C $REPO --json hi"; do
  out=$(bash -c "$way </dev/null" 2>&1) || true
  grep -q 'fixed-cost stand-in' <<<"$out" || { echo "the stand-in did not run: $way: $out" >&2; exit 70; }
done
hyperfine --shell none --style basic --warmup 5 --runs "$FAST_RUNS" --output null --export-csv "$DIR/fast.csv" \
  -n "docker exec (stand-in)" "docker exec -i -u agent -w /workspace/benchrepo $ENVS $C claude $CLIARGS hi" \
  -n "sbx-run exec (stand-in)" "$BIN/sbx-run exec -C $REPO -- claude $CLIARGS hi" \
  -n "sbx-run agent (stand-in)" "$BIN/sbx-run agent -C $REPO --json hi" >/dev/null 2>&1
d=$(med 1 "$DIR/fast.csv"); e=$(med 2 "$DIR/fast.csv"); a=$(med 3 "$DIR/fast.csv")
echo "fixed-cost stand-in CLI, $FAST_RUNS runs each, medians:"
echo "  docker exec      $(row 1 "$DIR/fast.csv")"
echo "  sbx-run exec     $(row 2 "$DIR/fast.csv")"
echo "  sbx-run agent    $(row 3 "$DIR/fast.csv")"
echo "  agent - docker exec: $(awk -v a="$a" -v b="$d" 'BEGIN{printf "%+.1f ms", a-b}')   agent - sbx-run exec (the agent logic alone): $(awk -v a="$a" -v b="$e" 'BEGIN{printf "%+.1f ms", a-b}')"

# 2. Phase times of sbx-run agent itself.
: > "$DIR/phases"
for _ in $(seq "$FAST_RUNS"); do
  "$BIN/sbx-run" -vv agent -C "$REPO" --json hi </dev/null 2>>"$DIR/phases" >/dev/null
done
phase() { grep -E " ms $1\$" "$DIR/phases" | awk '{print $3}' | median; }
ex=$(phase exec); first=$(phase "first CLI line"); ended=$(phase "exec exited"); done_=$(phase done)
echo "sbx-run agent -vv phases (ms since it began, medians of $FAST_RUNS): ready to exec $ex, first CLI line $first, exec exited $ended, done $done_; after the exec: $(awk -v a="$done_" -v b="$ended" 'BEGIN{printf "%.1f", a-b}') ms"
docker exec -u root "$C" rm -f /usr/local/sbin/claude

# 3. The real CLI against the stand-in API.
echo '{"turns":[{"text":"ok"}]}' > "$DIR/script.json"
docker cp "$BIN/sbx-msgapi" "$C:/tmp/sbx-msgapi" && docker cp "$DIR/script.json" "$C:/tmp/bench-script.json"
docker exec -d -u agent "$C" /tmp/sbx-msgapi --script /tmp/bench-script.json --log /dev/null --listen 127.0.0.1:8199
sleep 0.5
hyperfine --shell none --style basic --warmup 2 --runs "$RUNS" --output null --export-csv "$DIR/real.csv" \
  -n "docker exec claude" "docker exec -i -u agent -w /workspace/benchrepo $ENVS $C claude $CLIARGS hi" \
  -n "sbx-run agent" "$BIN/sbx-run agent -C $REPO --json hi" >/dev/null 2>&1
b=$(med 1 "$DIR/real.csv"); s=$(med 2 "$DIR/real.csv")
echo "real Claude Code ($(docker exec "$C" claude --version 2>/dev/null | head -1)), $RUNS runs each:"
echo "  docker exec      $(row 1 "$DIR/real.csv")"
echo "  sbx-run agent    $(row 2 "$DIR/real.csv")"
echo "  difference of medians: $(awk -v a="$s" -v b="$b" 'BEGIN{printf "%+.1f ms", a-b}')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
