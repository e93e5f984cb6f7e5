#!/usr/bin/env bash
# sbx-fw init against the reference script's shape, in the
# sealed bed (tests/fwbed), side by side in one hyperfine run: the default
# allowlist, GitHub meta of 50 ranges over HTTPS. Target: >= 10x faster
# and < 50 ms median. Each side has its own bed so neither sees the other's
# rules or DNS filter. Needs root. BASELINE_FW=/path/to/an/older/sbx-fw adds
# that binary as a third command (its own bed), to compare two versions.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/sbx-fw ] || make build >/dev/null
cargo build --release --locked -q -p sbx-fwbed
FW=$PWD/target/release/sbx-fw
TMP=$(mktemp -d)
fds=()
# Closing a bed's stdin makes it tear its namespaces down; the DNS filters
# started inside inherited the fifo, so they go first.
cleanup() {
  # (bbase exists only with BASELINE_FW: a missing bed is not a failure)
  for p in bfw bref bbase; do { ip netns pids "$p-sbx" 2>/dev/null || true; } | xargs -r kill || true; done
  for f in "${fds[@]}"; do eval "exec $f>&-"; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

bed() { # PREFIX: start a bed, wait until it is up
  mkfifo "$TMP/$1.in"
  target/release/sbx-fwbed "$1" "$TMP/$1" < "$TMP/$1.in" > "$TMP/$1.json" &
  exec {fd}>"$TMP/$1.in"   # held open: the bed lives until this script exits
  fds+=("$fd")
  for _ in $(seq 100); do [ -s "$TMP/$1.json" ] && return; sleep 0.05; done
  echo "bed $1 did not start" >&2; exit 1
}
bed bfw; bed bref
base=()
if [ -n "${BASELINE_FW:-}" ]; then
  bed bbase
  base=(-n "baseline sbx-fw init" "ip netns exec bbase-sbx env SBX_FW_STATE_DIR=$TMP/bbase/state SBX_FW_CACHE_DIR=$TMP/bbase/cache SSL_CERT_FILE=$TMP/bbase/ca.pem $BASELINE_FW --config $TMP/config.toml init")
fi
printf '[network]\nregistries = false\n' > "$TMP/config.toml"
names=$(sed -n '/^pub const DEFAULT_NAMES/,/^];/p' tools/sbx-fw/src/allowlist/mod.rs | grep -o '"[a-z0-9.-]*"' | tr -d '"' | tr '\n' ' ')
export SBX_FW_GITHUB_META_URL=https://meta.github.test/meta SBX_AUDIT_LOG=$TMP/audit.jsonl
sbx="env SBX_FW_STATE_DIR=$TMP/bfw/state SBX_FW_CACHE_DIR=$TMP/bfw/cache SSL_CERT_FILE=$TMP/bfw/ca.pem $FW --config $TMP/config.toml init"
ref="bash $PWD/bench/fw-reference.sh https://meta.github.test/meta $TMP/bref/ca.pem $names"

hyperfine -N --warmup 3 --runs "${RUNS:-40}" --export-csv "$TMP/fw.csv" \
  -n "sbx-fw init" "ip netns exec bfw-sbx $sbx" \
  -n "reference script" "ip netns exec bref-sbx $ref" "${base[@]}"
awk -F, 'NR == 2 { a = $4 } NR == 3 { b = $4 } NR == 4 { c = $4 } END { printf "sbx-fw init %.1f ms, reference %.1f ms: %.1fx faster\n", a * 1000, b * 1000, b / a; if (c) printf "baseline binary %.1f ms: this one %.2fx its time\n", c * 1000, a / c }' "$TMP/fw.csv"

# The first init, as in a new container: no state and an empty neighbour
# cache, so the gateways are learned and pinned on the way (the runs above
# are re-inits). reset stops the last run's helpers and removes its state.
first=(-n "sbx-fw first init" --prepare "sh -c 'ip netns exec bfw-sbx env SBX_FW_STATE_DIR=$TMP/bfw/state $FW reset --yes -q; ip netns exec bfw-sbx ip neigh flush dev eth0 nud all'" "ip netns exec bfw-sbx $sbx")
if [ -n "${BASELINE_FW:-}" ]; then
  first+=(-n "baseline first init" --prepare "sh -c 'ip netns exec bbase-sbx env SBX_FW_STATE_DIR=$TMP/bbase/state $BASELINE_FW reset --yes -q; ip netns exec bbase-sbx ip neigh flush dev eth0 nud all'" "${base[2]}")
fi
hyperfine -N --warmup 3 --runs "${RUNS:-40}" "${first[@]}"

# verify: every check in one run, < 100 ms.
hyperfine -N --warmup 3 --runs "${RUNS:-40}" \
  -n "sbx-fw verify" "ip netns exec bfw-sbx env SBX_FW_STATE_DIR=$TMP/bfw/state $FW verify -q --reach api.anthropic.com"
