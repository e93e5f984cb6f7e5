#!/usr/bin/env bash
# sbx-run snapshot and start --from-snapshot against plain docker commit and
# docker run of the same container, side by side in one run, on one sandbox
# where root installed a small package and the agent wrote in its home.
# Rounds alternate the two; best and median wall times are printed, and the
# snapshot's size (what it adds to the per-repo image) against the layer
# docker commit makes. Goal: sbx at most 1.2x docker's time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
PROFILE=${PROFILE:-release}
BIN=${SBX_BIN_DIR:-$PWD/target/$PROFILE}
[ -x "$BIN/sbx-run" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
export SBX_BASE_TAG=${SBX_BASE_TAG:-snap-bench}
export SBX_BIN_DIR=$BIN
WORK=$(mktemp -d /var/tmp/sbx-snap-bench.XXXXXX)
S="$BIN/sbx-run"
REPO=$WORK/app
cleanup() {
  docker rm --force "snap-bench-run" >/dev/null 2>&1 || true
  for i in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -e '-snap:' -e '^snap-bench:' || true); do
    case $i in agent-sandbox-app-*|snap-bench:*) docker image rm --force "$i" >/dev/null 2>&1 || true;; esac
  done
  "$S" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$REPO" && git -C "$REPO" init -q
"$S" -q build-base --bootstrap --no-ai-clis >&2
"$S" -q start -C "$REPO" >&2
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
# A package from a .deb made here (no network), and a file in the home.
P=$WORK/pkg
mkdir -p "$P/DEBIAN" "$P/usr/local/bin"
printf 'Package: hello-sbx\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n' > "$P/DEBIAN/control"
printf '#!/bin/sh\necho hello-sbx\n' > "$P/usr/local/bin/hello-sbx" && chmod 755 "$P/usr/local/bin/hello-sbx"
dpkg-deb --build --root-owner-group "$P" "$WORK/hello.deb" >/dev/null
"$S" -q cp -C "$REPO" "$WORK/hello.deb" :/tmp/hello.deb
"$S" exec --root -C "$REPO" -- apt-get install -y /tmp/hello.deb >/dev/null 2>&1
"$S" exec -C "$REPO" -- sh -c 'echo mine > ~/note'
now() { date +%s.%N; }
run() { local t0; t0=$(now); "$@" >/dev/null 2>&1; echo "$(now) - $t0" | bc; }
declare -A times
for r in $(seq 1 "$ROUNDS"); do
  times[sbx-snap]+="$(run "$S" -q snapshot -C "$REPO" --tag "r$r") "
  times[docker-commit]+="$(run docker commit "$C" "snap-bench:r$r") "
  docker rm --force "$C" >/dev/null
  times[sbx-start]+="$(run "$S" -q start -C "$REPO" --from-snapshot "r$r") "
  times[docker-run]+="$(run docker run -d --name snap-bench-run --entrypoint sleep "snap-bench:r$r" infinity) "
  docker rm --force snap-bench-run >/dev/null
done
"$S" exec -C "$REPO" -- hello-sbx >/dev/null || { echo "the restored sandbox lost the package" >&2; exit 1; }
stats() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "best %.2f s  median %.2f s", a[1], a[int((NR+1)/2)]}'; }
for k in sbx-snap docker-commit sbx-start docker-run; do
  printf '%-14s %s\n' "$k" "$(echo "${times[$k]}" | stats)"
done
snap_img=$("$S" --json snapshots -C "$REPO" | tail -1 | jq -r .data.image)
orig=$(docker image inspect --format '{{.Size}}' "${snap_img%-snap:*}")
snap=$(docker image inspect --format '{{.Size}}' "$snap_img")
commit=$(docker image inspect --format '{{.Size}}' "snap-bench:r$ROUNDS")
echo "size: snapshot adds $(( snap - orig )) bytes; docker commit's layer $(( commit - orig )) bytes"
