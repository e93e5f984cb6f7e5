#!/usr/bin/env bash
# sbx-run cp against docker cp, side by side in one run, on one sandbox:
# a 100 MB tree (5000 small files of 4-16 KiB, about 60 MB, plus four
# 10 MB files) out of the sandbox (sandbox -> host) and in (host ->
# sandbox). Each direction is run ROUNDS times, alternating the two tools;
# the best and the median wall time are printed (the machine is shared).
# Target: sbx-run cp at least as fast as docker cp.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
PROFILE=${PROFILE:-release}
BIN=${SBX_BIN_DIR:-$PWD/target/$PROFILE}
[ -x "$BIN/sbx-run" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
TAG=${SBX_BASE_TAG:-cp-bench}
WORK=$(mktemp -d /var/tmp/sbx-cp-bench.XXXXXX)
S="$BIN/sbx-run"
REPO=$WORK/app
cleanup() {
  IMGS=$(docker ps -a --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Image}}' | sort -u)
  "$S" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true
  for i in $IMGS; do case $i in agent-sandbox-app-*) docker image rm "$i" >/dev/null 2>&1 || true;; esac; done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$REPO" && git -C "$REPO" init -q && chown -R 1000:1000 "$WORK"
SBX_BASE_TAG=$TAG SBX_BIN_DIR=$BIN "$S" -q build-base --bootstrap --no-ai-clis >&2
SBX_BASE_TAG=$TAG "$S" -q start -C "$REPO" >&2
C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
# The tree, made on the host, then put into the sandbox once (as the agent).
T=$WORK/tree
mkdir -p "$T"
for d in $(seq 1 50); do
  mkdir -p "$T/d$d"
  for f in $(seq 1 100); do head -c $(( (RANDOM % 13 + 4) * 1024 )) /dev/urandom > "$T/d$d/f$f"; done
done
for b in 1 2 3 4; do head -c 10000000 /dev/urandom > "$T/big$b"; done
echo "tree: $(find "$T" -type f | wc -l) files, $(du -sm "$T" | cut -f1) MB"
"$S" -q cp -C "$REPO" "$T" :/home/agent/tree
now() { date +%s.%N; }
run() { # label command...: seconds
  local t0; t0=$(now); "$@" >/dev/null; echo "$(now) - $t0" | bc
}
declare -A times
for r in $(seq 1 "$ROUNDS"); do
  for tool in sbx docker; do
    rm -rf "$WORK/out-$tool"; mkdir -p "$WORK/out-$tool"
    if [ $tool = sbx ]; then
      times[sbx-out]+="$(run "$S" -q cp -C "$REPO" :/home/agent/tree "$WORK/out-$tool") "
      times[sbx-in]+="$(run "$S" -q cp -C "$REPO" "$T" ":/tmp/in-$r") "
    else
      times[docker-out]+="$(run docker cp -q "$C:/home/agent/tree" "$WORK/out-$tool") "
      times[docker-in]+="$(run docker cp -q "$T" "$C:/tmp/din-$r") "
    fi
  done
  # sbx-run cp writes as the agent, docker cp keeps the host's uid (root).
  docker exec -u 1000 "$C" rm -rf "/tmp/in-$r"
  docker exec -u 0 "$C" rm -rf "/tmp/din-$r"
done
cmp -s "$T/big1" "$WORK/out-sbx/tree/big1" && cmp -s "$T/d7/f9" "$WORK/out-sbx/tree/d7/f9" || { echo "sbx-run cp: copy differs" >&2; exit 1; }
stats() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "best %.2f s  median %.2f s", a[1], a[int((NR+1)/2)]}'; }
for k in sbx-out docker-out sbx-in docker-in; do
  printf '%-11s %s\n' "$k" "$(echo "${times[$k]}" | stats)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
