#!/usr/bin/env bash
# sbx-tool-guard: the PreToolUse check adds <= 5 ms per tool call.
# `sbx-tool-guard check` end to end (process start, hook JSON on stdin, the
# config parsed, the decision, one audit record appended) vs `true` given
# the same stdin, in one hyperfine run (each through `sh -c 'exec … < f'`,
# for the redirect: hyperfine 1.15 has no --input; -N, so nothing is
# subtracted and both sides pay the same shell start).
# BIN=target/debug/sbx-tool-guard measures a debug build instead; BASE=PATH adds a
# baseline checker (an older build) to the same hyperfine run. Two calls: an allowed Bash call
# (a pipeline through sudo, env, timeout and bash -c with a $(…), all parsed and unwrapped) and
# a refused Write (the refusal's reason goes to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  [ -x target/release/sbx-tool-guard ] || cargo build --release --locked --bin sbx-tool-guard
  BIN=$PWD/target/release/sbx-tool-guard
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
RUNS=${RUNS:-500}
mkdir -p "$TMP/ws/.agent-sandbox"
cat > "$TMP/ws/.agent-sandbox/config.toml" <<'TOML'
[tools]
disallowed = ["Write", "Edit", "Bash(curl:*)", "Bash(git push:*)"]
deny-read = ["**/*.sql"]
TOML
printf '{"session_id":"s","hook_event_name":"PreToolUse","cwd":"%s","tool_name":"Bash","tool_input":{"command":"npm test && ls -la src | sudo -u agent env A=1 timeout 5 bash -c '"'"'grep -c x $(git ls-files)'"'"'"}}' "$TMP/ws" > "$TMP/bash.json"
printf '{"session_id":"s","hook_event_name":"PreToolUse","cwd":"%s","tool_name":"Write","tool_input":{"file_path":"src/a.rs","content":"fn main() {}"}}' "$TMP/ws" > "$TMP/write.json"

summarize() { # csv -> "median_a median_b" in ms
  awk -F, 'NR > 1 { printf "%.3f ", $4 * 1000 } END { print "" }' "$1"
}

for call in bash write; do
  echo "== check of a ${call} call"
  ( cd "$TMP/ws" && env -i PATH="$PATH" HOME="$TMP" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
    hyperfine -N --style basic --warmup 50 --runs "$RUNS" -i --export-csv "$TMP/$call.csv" \
    "sh -c 'exec /bin/true < $TMP/$call.json'" \
    "sh -c 'exec $BIN check --workspace $TMP/ws < $TMP/$call.json 2>/dev/null'" \
    ${BASE:+"sh -c 'exec $BASE check --workspace $TMP/ws < $TMP/$call.json 2>/dev/null'"} >/dev/null 2>&1 )
  read -r a b c < <(summarize "$TMP/$call.csv")
  echo "/bin/true: ${a} ms   sbx-tool-guard check: ${b} ms   added: $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms"
  if [ -n "${BASE:-}" ]; then
    echo "baseline ($BASE): ${c} ms   added: $(awk -v a="$a" -v c="$c" 'BEGIN{printf "%.3f", c-a}') ms"
  fi
done
echo "audit records written: $(wc -l < "$TMP/audit.jsonl")"
