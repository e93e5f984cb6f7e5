#!/usr/bin/env bash
# sbx-run snapshot and start --from-snapshot against plain docker commit and
# docker run of the same container, side by side in one run, on one sandbox
# where root installed a small package and the agent wrote in its home and
# in /var/tmp. Rounds alternate the two; best and median wall times are
# printed, and the snapshot's size (what it adds to the per-repo image)
# against the layer docker commit makes. Goal: sbx at most 1.2x docker's time.
#
# BASELINE_BIN_DIR=DIR runs an older build beside it (its own base image,
# tagged $SBX_BASE_TAG-base, and workspace), round by round in the same run.
# Each bin dir needs every tool build-base copies (sbx-run, sbx-guest, sbx-fw,
# sbx-git-guard, sbx-git-client, sbx-tool-guard, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
PROFILE=${PROFILE:-release}
BIN=${SBX_BIN_DIR:-$PWD/target/$PROFILE}
[ -x "$BIN/sbx-run" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
TAG=${SBX_BASE_TAG:-snap-bench}
WORK=$(mktemp -d /var/tmp/sbx-snap-bench.XXXXXX)
SIDES=(new)
declare -A BINS TAGS
BINS[new]=$BIN TAGS[new]=$TAG
if [ -n "${BASELINE_BIN_DIR:-}" ]; then
  SIDES=(base new)
  BINS[base]=$BASELINE_BIN_DIR TAGS[base]=$TAG-base
fi
# sbx-run of one side, with its own tools and base image.
S() { local side=$1; shift; SBX_BIN_DIR=${BINS[$side]} SBX_BASE_TAG=${TAGS[$side]} "${BINS[$side]}/sbx-run" "$@"; }
cleanup() {
  docker rm --force "snap-bench-run" >/dev/null 2>&1 || true
  for side in "${SIDES[@]}"; do S "$side" -q rm --volumes -C "$WORK/$side" >/dev/null 2>&1 || true; done
  for i in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -e '^snap-bench:' || true); do
    docker image rm --force --no-prune "$i" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
# A package from a .deb made here (no network).
P=$WORK/pkg
mkdir -p "$P/DEBIAN" "$P/usr/local/bin"
printf 'Package: hello-sbx\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n' > "$P/DEBIAN/control"
printf '#!/bin/sh\necho hello-sbx\n' > "$P/usr/local/bin/hello-sbx" && chmod 755 "$P/usr/local/bin/hello-sbx"
dpkg-deb --build --root-owner-group "$P" "$WORK/hello.deb" >/dev/null
declare -A CONT
for side in "${SIDES[@]}"; do
  R=$WORK/$side
  mkdir -p "$R" && git -C "$R" init -q
  S "$side" -q build-base --bootstrap --no-ai-clis >&2
  S "$side" -q start -C "$R" >&2
  CONT[$side]=$(docker ps --filter "label=sbx.workspace=$(realpath "$R")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
  S "$side" -q cp -C "$R" "$WORK/hello.deb" :/tmp/hello.deb
  S "$side" exec --root -C "$R" -- apt-get install -y /tmp/hello.deb >/dev/null 2>&1
  S "$side" exec -C "$R" -- sh -c 'echo mine > ~/note; mkdir -p /var/tmp/build && seq 1 200 | while read i; do echo "$i" > /var/tmp/build/f$i; done'
done
now() { date +%s.%N; }
run() { local t0; t0=$(now); "$@" >/dev/null 2>&1; echo "$(now) - $t0" | bc; }
declare -A times
for r in $(seq 1 "$ROUNDS"); do
  for side in "${SIDES[@]}"; do
    R=$WORK/$side C=${CONT[$side]}
    times[$side-snap]+="$(run S "$side" -q snapshot -C "$R" --tag "r$r") "
    times[$side-commit]+="$(run docker commit "$C" "snap-bench:$side-r$r") "
    docker rm --force "$C" >/dev/null
    times[$side-start]+="$(run S "$side" -q start -C "$R" --from-snapshot "r$r") "
    times[$side-run]+="$(run docker run -d --name snap-bench-run --entrypoint sleep "snap-bench:$side-r$r" infinity) "
    docker rm --force snap-bench-run >/dev/null
  done
done
stats() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "best %.2f s  median %.2f s", a[1], a[int((NR+1)/2)]}'; }
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for side in "${SIDES[@]}"; do
  R=$WORK/$side
  S "$side" exec -C "$R" -- hello-sbx >/dev/null || { echo "$side: the restored sandbox lost the package" >&2; exit 1; }
  for k in snap commit start run; do
    printf '%-5s %-7s %s\n' "$side" "$k" "$(echo "${times[$side-$k]}" | stats)"
  done
  snap_img=$(S "$side" --json snapshots -C "$R" | tail -1 | jq -r .data.image)
  orig=$(docker image inspect --format '{{.Size}}' "${snap_img%-snap:*}")
  snap=$(docker image inspect --format '{{.Size}}' "$snap_img")
  commit=$(docker image inspect --format '{{.Size}}' "snap-bench:$side-r$ROUNDS")
  echo "$side size: snapshot adds $(( snap - orig )) bytes; docker commit's layer $(( commit - orig )) bytes"
done
