#!/usr/bin/env bash
# sbx-envfilter against its baselines:
#   1. `sbx-envfilter -- true` vs `env -i PATH=$PATH true`: added latency < 1 ms
#   2. exec with 10,000 variables vs `env true` with the same 10,000: < 10 ms
#   3. `--stdin -0 --print -0` of 10,000 records vs `cat` of the same file
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/sbx-envfilter ] || cargo build --release --locked --bin sbx-envfilter
BIN=$PWD/target/release/sbx-envfilter
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
RUNS=${RUNS:-500}

# A synthetic environment: 10,000 variables, 5% secret names, 2% credential
# values under innocent names, the rest ordinary settings.
awk 'BEGIN {
  srand(42)
  for (i = 0; i < 10000; i++) {
    r = rand()
    if (r < 0.05)      printf "SERVICE_%d_TOKEN=t%08d%c", i, i, 0
    else if (r < 0.07) printf "SETTING_%d=ghp_%036d%c", i, i, 0
    else               printf "SETTING_%d=/opt/app/%d/value-%d%c", i, i, i * 7, 0
  }
}' > "$TMP/env10k"

summarize() { # csv -> "median_a median_b" in ms
  awk -F, 'NR > 1 { printf "%.3f ", $4 * 1000 } END { print "" }' "$1"
}

echo "== 1. exec overhead (small environment)"
env -i PATH="$PATH" HOME="$TMP" SBX_AUDIT_LOG="$TMP/audit.jsonl" TERM=dumb LANG=C.UTF-8 \
  hyperfine -N --style basic --warmup 50 --runs "$RUNS" --export-csv "$TMP/1.csv" \
  "env -i PATH=$PATH true" "$BIN -- true" >/dev/null 2>&1
read -r a b < <(summarize "$TMP/1.csv")
echo "env -i true: ${a} ms   sbx-envfilter -- true: ${b} ms   added: $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms"

echo "== 2. exec with 10,000 variables in the environment"
# xargs appends the 10,000 NAME=VALUE words; env puts them in hyperfine's environment.
export BIN TMP RUNS
xargs -0 -s 2000000 -a "$TMP/env10k" sh -c '
  exec env -i PATH="$PATH" HOME="$TMP" SBX_AUDIT_LOG="$TMP/audit.jsonl" "$@" \
    hyperfine -N --style basic --warmup 20 --runs "$((RUNS / 5))" --export-csv "$TMP/2.csv" \
    "env true" "$BIN -- true"' sh >/dev/null 2>&1
read -r a b < <(summarize "$TMP/2.csv")
echo "env true: ${a} ms   sbx-envfilter -- true: ${b} ms   added: $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms"

echo "== 3. --stdin -0 --print -0 of 10,000 records"
env -i PATH="$PATH" HOME="$TMP" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
  hyperfine --style basic --warmup 20 --runs "$((RUNS / 5))" --export-csv "$TMP/3.csv" \
  "cat < $TMP/env10k > /dev/null" "$BIN --stdin -0 --print -0 < $TMP/env10k > /dev/null" >/dev/null 2>&1
read -r a b < <(summarize "$TMP/3.csv")
echo "cat: ${a} ms   sbx-envfilter --stdin: ${b} ms   added: $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms"
