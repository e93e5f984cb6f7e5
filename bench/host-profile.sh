#!/usr/bin/env bash
# Two builds of the host's sbx-run side by side on one sandbox, rounds
# alternating: the release profile's choice for the host tool (issue 40:
# sbx-run at opt-level 0 compiles in a sixth of the CPU time; does the
# user wait longer for it?). Measured: `exec -- true`, a 100 MB tree `cp`
# in and out, `start` of a removed container, `list --json`.
#   A=<dir with one sbx-run> B=<dir with another> bench/host-profile.sh
# The sandbox's own tools (the image) come from SBX_BIN_DIR, the same for
# both, so only the host binary differs. Best and median of ROUNDS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
RUNS=${RUNS:-30}
: "${A:?A=dir of the first sbx-run}" "${B:?B=dir of the second sbx-run}"
BIN=${SBX_BIN_DIR:-$PWD/target/release}
export SBX_BIN_DIR=$BIN SBX_BASE_TAG=${SBX_BASE_TAG:-host-profile}
WORK=$(mktemp -d /var/tmp/sbx-host-profile.XXXXXX)
REPO=$WORK/app
cleanup() {
  IMGS=$(docker ps -a --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Image}}' | sort -u)
  "$A/sbx-run" -q rm --volumes -C "$REPO" >/dev/null 2>&1 || true
  for i in $IMGS; do case $i in agent-sandbox-app-*) docker image rm "$i" >/dev/null 2>&1 || true;; esac; done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$REPO" && git -C "$REPO" init -q && chown -R 1000:1000 "$WORK"
"$BIN/sbx-run" -q build-base --bootstrap --no-ai-clis >&2
"$A/sbx-run" -q start -C "$REPO" >&2
# The tree: 5000 files of 4-16 KiB and four of 10 MiB, made on the host.
T=$WORK/tree
python3 - "$T" <<'EOF'
import os, random, sys
r = random.Random(7)
root = sys.argv[1]
for i in range(5000):
    d = os.path.join(root, f"d{i % 50}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(r.randbytes(r.randint(4096, 16384)))
for i in range(4):
    with open(os.path.join(root, f"big{i}"), "wb") as f:
        f.write(r.randbytes(10 << 20))
EOF
chown -R 1000:1000 "$T"
now() { date +%s%N; }
ms() { echo "scale=2; ($2 - $1) / 1000000" | bc; }
declare -A t
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    S="${!side}/sbx-run"
    s=$(now); for _ in $(seq 1 "$RUNS"); do "$S" -q exec -C "$REPO" -- true; done; e=$(now)
    t[$side-exec]+="$(echo "scale=2; ($e - $s) / 1000000 / $RUNS" | bc) "
    "$S" -q exec -C "$REPO" -- rm -rf /tmp/in
    s=$(now); "$S" -q cp -C "$REPO" "$T" :/tmp/in; e=$(now); t[$side-cp-in]+="$(ms "$s" "$e") "
    rm -rf "$WORK/out"
    s=$(now); "$S" -q cp -C "$REPO" :/tmp/in "$WORK/out"; e=$(now); t[$side-cp-out]+="$(ms "$s" "$e") "
    s=$(now); for _ in $(seq 1 10); do "$S" -q --json list >/dev/null; done; e=$(now)
    t[$side-list]+="$(echo "scale=2; ($e - $s) / 1000000 / 10" | bc) "
    C=$(docker ps --filter "label=sbx.workspace=$(realpath "$REPO")" --format '{{.Names}}' | grep -v -- '-net$' | head -1)
    docker rm --force "$C" >/dev/null
    s=$(now); "$S" -q start -C "$REPO"; e=$(now); t[$side-start]+="$(ms "$s" "$e") "
  done
done
stats() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "best %8.2f ms  median %8.2f ms", a[1], a[int((NR+1)/2)]}'; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg); A=$A B=$B"
for k in exec cp-in cp-out list start; do
  printf '%-7s A %s   B %s\n' "$k" "$(echo "${t[A-$k]}" | stats)" "$(echo "${t[B-$k]}" | stats)"
done
