#!/usr/bin/env bash
# The guest's host API against docker's own paths, side by side in one run:
#   sbx-run exec -- true            (the whole host command: socket, no docker CLI)
#   docker exec C true              (the engine's exec)
#   100 MB in and out: sbx-run cp   vs  docker cp
# and a raw client (tools/sbx-run/examples/guest_api_bench.rs): connect +
# hello + exec /bin/true + exit, and a 4 KiB read, medians of 500.
# Targets: exec <= 5 ms and >= 15x docker exec; raw exec < 1 ms; 4 KiB read
# < 0.1 ms; cp at least docker cp's throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
PROFILE=${PROFILE:-release}
BIN=${SBX_BIN_DIR:-$PWD/target/$PROFILE}
[ -x "$BIN/sbx-run" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
EX=$BIN/examples/guest_api_bench
[ -x "$EX" ] || { echo "build the raw client: cargo build --${PROFILE/debug/} --example guest_api_bench -p sbx-run" >&2; exit 66; }
export SBX_BASE_TAG=${SBX_BASE_TAG:-guest-api-bench}
WORK=$(mktemp -d /var/tmp/sbx-guest-api-bench.XXXXXX)
REPO=$WORK/bench-app
mkdir -p "$REPO" && git -C "$REPO" init -q && chown -R 1000:1000 "$WORK"
S="$BIN/sbx-run"
cleanup() {
  IMGS=$(docker ps -a --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Image}}' | sort -u)
  "$S" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true
  for i in $IMGS; do case $i in agent-sandbox-bench-app-*) docker image rm "$i" >/dev/null 2>&1 || true;; esac; done
  rm -rf "$WORK"
}
trap cleanup EXIT
SBX_BIN_DIR=$BIN "$S" -q build-base --bootstrap --no-ai-clis
"$S" -q start -C "$REPO"
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
SOCK=$("$S" show-run -C "$REPO" | sed -n 's/^# guest API: \(.*\) (host).*/\1/p')
head -c 100000000 /dev/urandom > "$WORK/100m.bin"
hyperfine --style basic --warmup 3 --runs "$RUNS" --export-csv "$WORK/exec.csv" \
  "$S exec -C $REPO -- true" \
  "docker exec $C true" >/dev/null 2>&1
hyperfine --style basic --warmup 1 --runs 5 --export-csv "$WORK/cp.csv" \
  "$S cp -C $REPO $WORK/100m.bin :/tmp/100m.bin" \
  "docker cp -q $WORK/100m.bin $C:/tmp/100m-d.bin" \
  "$S cp -C $REPO :/tmp/100m.bin $WORK/out.bin" \
  "docker cp -q $C:/tmp/100m-d.bin $WORK/out-d.bin" >/dev/null 2>&1
cmp "$WORK/100m.bin" "$WORK/out.bin"
med() { awk -F, -v row="$2" 'NR == row + 1 { printf "%.2f", $4 * 1000 }' "$1"; }
e=$(med "$WORK/exec.csv" 1); d=$(med "$WORK/exec.csv" 2)
echo "sbx-run exec -- true: $e ms   docker exec: $d ms   ($(awk -v a="$d" -v b="$e" 'BEGIN{printf "%.1fx", a/b}'))"
ci=$(med "$WORK/cp.csv" 1); di=$(med "$WORK/cp.csv" 2); co=$(med "$WORK/cp.csv" 3); do=$(med "$WORK/cp.csv" 4)
echo "100 MB in:  sbx-run cp $ci ms   docker cp $di ms   ($(awk -v a="$di" -v b="$ci" 'BEGIN{printf "%.2fx", a/b}'))"
echo "100 MB out: sbx-run cp $co ms   docker cp $do ms   ($(awk -v a="$do" -v b="$co" 'BEGIN{printf "%.2fx", a/b}'))"
"$EX" "$SOCK" 500
