#!/usr/bin/env bash
# The guest's host API against docker's own paths, side by side in one run:
#   sbx-run exec -- true            (the whole host command: socket, no docker CLI)
#   docker exec C true              (the engine's exec)
#   100 MB in and out: sbx-run cp   vs  docker cp
# and a raw client (tools/sbx-run/examples/guest_api_bench.rs): exec /bin/true
# to its exit and a 4 KiB read, medians of RAW runs, each on a new connection
# (connect + hello + request) and on one reused connection; and, as the
# floor, the client spawning /bin/true itself on the host.
# Every measurement is repeated ROUNDS times; the best and the median of the
# rounds' medians are printed (the machine this runs on is often shared).
# With BASELINE_BIN_DIR=<dir of an older build's tools>, a second sandbox
# from a base image with those tools runs the same raw client, round by
# round alternating with this build's (the old guest's numbers side by side).
# Targets: exec <= 5 ms and >= 15x docker exec; raw exec < 1 ms; 4 KiB read
# < 0.1 ms; cp at least docker cp's throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
RAW=${RAW:-500}
ROUNDS=${ROUNDS:-5}
PROFILE=${PROFILE:-release}
BIN=${SBX_BIN_DIR:-$PWD/target/$PROFILE}
[ -x "$BIN/sbx-run" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
EX=${GUEST_API_BENCH:-$PWD/target/$PROFILE/examples/guest_api_bench}
[ -x "$EX" ] || { echo "build the raw client: cargo build --${PROFILE/debug/} --example guest_api_bench -p sbx-run" >&2; exit 66; }
TAG=${SBX_BASE_TAG:-guest-api-bench}
WORK=$(mktemp -d /var/tmp/sbx-guest-api-bench.XXXXXX)
S="$BIN/sbx-run"
repos=()
cleanup() {
  for r in "${repos[@]}"; do
    IMGS=$(docker ps -a --filter "label=sbx.workspace=$(realpath "$r")" --format '{{.Image}}' | sort -u)
    "$S" -q rm --volumes -C "$r" >/dev/null 2>&1 || true
    for i in $IMGS; do case $i in agent-sandbox-bench-*) docker image rm "$i" >/dev/null 2>&1 || true;; esac; done
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
# A sandbox from a base image built with the tools in $2; prints its socket.
sandbox() {
  local repo=$WORK/$1 tag=$3
  mkdir -p "$repo" && git -C "$repo" init -q && chown -R 1000:1000 "$WORK"
  repos+=("$repo")
  SBX_BASE_TAG=$tag SBX_BIN_DIR=$2 "$S" -q build-base --bootstrap --no-ai-clis >&2
  SBX_BASE_TAG=$tag "$S" -q build "$repo" >&2
  SBX_BASE_TAG=$tag "$S" -q start -C "$repo" >&2
}
sock_of() { "$S" show-run -C "$1" | sed -n 's/^# guest API: \(.*\) (host).*/\1/p'; }
sandbox bench-app "$BIN" "$TAG"
REPO=$WORK/bench-app
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
SOCK=$(sock_of "$REPO")
if [ -n "${BASELINE_BIN_DIR:-}" ]; then
  sandbox bench-old "$BASELINE_BIN_DIR" "$TAG-baseline"
  OLD_SOCK=$(sock_of "$WORK/bench-old")
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
head -c 100000000 /dev/urandom > "$WORK/100m.bin"
med() { awk -F, -v row="$2" 'NR == row + 1 { printf "%.2f\n", $4 * 1000 }' "$1"; }
for r in $(seq "$ROUNDS"); do
  hyperfine -N --style basic --warmup 3 --runs "$RUNS" --export-csv "$WORK/exec.csv" \
    "$S exec -C $REPO -- true" \
    "docker exec $C true" >/dev/null 2>&1
  med "$WORK/exec.csv" 1 >> "$WORK/e"; med "$WORK/exec.csv" 2 >> "$WORK/d"
  hyperfine --style basic --warmup 1 --runs 5 --export-csv "$WORK/cp.csv" \
    "$S cp -C $REPO $WORK/100m.bin :/tmp/100m.bin" \
    "docker cp -q $WORK/100m.bin $C:/tmp/100m-d.bin" \
    "$S cp -C $REPO :/tmp/100m.bin $WORK/out.bin" \
    "docker cp -q $C:/tmp/100m-d.bin $WORK/out-d.bin" >/dev/null 2>&1
  cmp "$WORK/100m.bin" "$WORK/out.bin"
  for i in 1 2 3 4; do med "$WORK/cp.csv" $i >> "$WORK/cp$i"; done
  "$EX" "$SOCK" "$RAW" > "$WORK/raw.$r"
  [ -z "${OLD_SOCK:-}" ] || "$EX" "$OLD_SOCK" "$RAW" > "$WORK/old.$r"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# "best / median" of a file of numbers, one a line.
bm() { sort -g "$1" | awk '{ v[NR] = $1; all = all " " $1 } END { printf "%.3f / %.3f (%s )", v[1], v[int((NR + 1) / 2)], all }'; }
# The rounds' medians of raw lines starting with $2, from files $1.*.
raw() { for f in "$1".*; do grep "^$2" "$f" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p'; done > "$1.vals"; [ -s "$1.vals" ] && bm "$1.vals" || echo "-"; }
echo "$ROUNDS rounds; each value: best / median of the rounds' medians, ms"
echo "sbx-run exec -- true: $(bm "$WORK/e")   docker exec: $(bm "$WORK/d")"
echo "100 MB in:  sbx-run cp $(bm "$WORK/cp1")   docker cp $(bm "$WORK/cp2")"
echo "100 MB out: sbx-run cp $(bm "$WORK/cp3")   docker cp $(bm "$WORK/cp4")"
for k in "local spawn of /bin/true" "exec /bin/true round trip" "read 4 KiB:" "exec /bin/true on one reused" "read 4 KiB on one reused"; do
  line="raw ${k%:}: $(raw "$WORK/raw" "$k")"
  [ -z "${OLD_SOCK:-}" ] || line="$line   baseline guest: $(raw "$WORK/old" "$k")"
  echo "$line"
done
