#!/usr/bin/env bash
# The overhead `sbx-run agent` adds to a headless Claude Code run with the
# sandbox running, side by side in one hyperfine run:
#   docker exec ... claude --print --output-format stream-json --verbose   (the CLI alone)
#   sbx-run agent --json                                                    (config, skills,
#       start check, agent-launch and the one-shot key socket, event translation)
# Both talk to sbx-msgapi (tests/msgapi) inside the sandbox on 127.0.0.1 with
# the same one-turn script, so the model's time is the same. Target: <= 50 ms.
# Needs the base image with the AI CLIs (sbx-run build-base without --no-ai-clis).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
BIN=${SBX_BIN_DIR:-$PWD/target/release}
for b in sbx-run sbx-msgapi; do
  [ -x "$BIN/$b" ] || { echo "build first (cargo build -p sbx-run -p sbx-msgapi), or set SBX_BIN_DIR" >&2; exit 66; }
done
export SBX_BIN_DIR=$BIN
DIR=$(mktemp -d /var/tmp/sbx-agent-bench.XXXXXX)
REPO=$DIR/benchrepo
mkdir -p "$REPO" && git -C "$REPO" init -q && chown -R 1000:1000 "$REPO"
trap '"$BIN/sbx-run" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
"$BIN/sbx-run" -q start -C "$REPO"
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
echo '{"turns":[{"text":"ok"}]}' > "$DIR/script.json"
docker cp "$BIN/sbx-msgapi" "$C:/tmp/sbx-msgapi" && docker cp "$DIR/script.json" "$C:/tmp/bench-script.json"
docker exec -d -u agent "$C" /tmp/sbx-msgapi --script /tmp/bench-script.json --log /dev/null --listen 127.0.0.1:8199
sleep 0.5
export ANTHROPIC_API_KEY=sk-bench ANTHROPIC_BASE_URL=http://127.0.0.1:8199
hyperfine --shell bash --style basic --warmup 2 --runs "$RUNS" --export-csv "$DIR/r.csv" \
  "docker exec -i -u agent -w /workspace/benchrepo -e ANTHROPIC_API_KEY -e ANTHROPIC_BASE_URL -e CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -e DISABLE_AUTOUPDATER=1 $C claude --print --output-format stream-json --verbose --permission-mode bypassPermissions hi </dev/null >/dev/null" \
  "$BIN/sbx-run agent -C $REPO --json hi </dev/null >/dev/null" >/dev/null 2>&1
cut -d, -f1-4 "$DIR/r.csv" | column -s, -t
median() { awk -F, -v row="$1" 'NR == row + 1 { printf "%.1f", $4 * 1000 }' "$DIR/r.csv"; }
mean() { awk -F, -v row="$1" 'NR == row + 1 { printf "%.1f", $2 * 1000 }' "$DIR/r.csv"; }
b=$(median 1); s=$(median 2)
echo "docker exec claude: median $b ms (mean $(mean 1))   sbx-run agent: median $s ms (mean $(mean 2))   overhead $(awk -v a="$b" -v b="$s" 'BEGIN{printf "%+.1f ms (%.3fx)", b-a, b/a}')"
