#!/usr/bin/env bash
# sbx-run against docker itself, side by side in one hyperfine run each:
#   start (image present, to a running container whose init is done)
#     vs `docker run -d IMAGE sleep infinity`: target <= 1.2x
#   `sbx-run exec -- true` vs `docker exec NAME true`: target <= 10 ms more
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/sbx-run ] || cargo build --release --locked --bin sbx-run --bin sbx-envfilter
SBX=$PWD/target/release/sbx-run
RUNS=${RUNS:-15}
WORK=/var/tmp/sbx-bench
REPO=$WORK/repo
mkdir -p "$REPO"
[ -d "$REPO/.git" ] || git init -q "$REPO"
echo "SECRET=x" > "$REPO/.env"
chown -R 1000:1000 "$WORK"

"$SBX" -q build-base --bootstrap --no-ai-clis
"$SBX" -q build "$REPO"
# The last `docker run` is the sandbox's; the one before, its network holder's.
NAME=$("$SBX" show-run "$REPO" | sed -n 's/.*--name \([^ ]*\).*/\1/p' | tail -n 1)
IMAGE=${NAME}   # the per-repo image has the container's name
TMP=$(mktemp -d); trap 'rm -rf "$TMP"; docker rm -f sbx-bench-baseline >/dev/null 2>&1 || true; "$SBX" -q rm "$REPO" || true' EXIT
median() { awk -F, -v row="$2" 'NR == row + 1 { printf "%.1f", $4 * 1000 }' "$1"; }

echo "== start: sbx-run start vs docker run -d (container removed before each run; the"
echo "   sandbox's network holder stays, as it does when a sandbox is removed or restarted)"
"$SBX" -q start "$REPO"   # creates the network and volumes once
# A second's pause before every run (outside the timing, for both sides):
# this host's resolver drops some of the firewall's ~26 lookups when the
# same names come again within a second, and each drop costs a 400 ms retry.
hyperfine --style basic --runs "$RUNS" --export-csv "$TMP/start.csv" \
  --prepare "docker rm -f sbx-bench-baseline >/dev/null 2>&1 || true; sleep 1" \
  "docker run -d --name sbx-bench-baseline $IMAGE sleep infinity" \
  --prepare "docker rm -f $NAME >/dev/null 2>&1 || true; sleep 1" \
  "$SBX -q start $REPO" \
  --prepare "$SBX -q rm $REPO; sleep 1" \
  "$SBX -q start $REPO" >/dev/null 2>&1
b=$(median "$TMP/start.csv" 1); s=$(median "$TMP/start.csv" 2); c=$(median "$TMP/start.csv" 3)
echo "docker run -d: $b ms   sbx-run start: $s ms ($(awk -v a="$b" -v b="$s" 'BEGIN{printf "%.2fx", b/a}'))   cold (sbx-run rm first: new network and holder): $c ms ($(awk -v a="$b" -v b="$c" 'BEGIN{printf "%.2fx", b/a}'))"

echo "== exec: sbx-run exec -- true vs docker exec NAME true"
"$SBX" -q start "$REPO"
hyperfine -N --style basic --warmup 3 --runs "$((RUNS * 3))" --export-csv "$TMP/exec.csv" \
  "docker exec $NAME true" "$SBX exec -C $REPO -- true" >/dev/null 2>&1
b=$(median "$TMP/exec.csv" 1); s=$(median "$TMP/exec.csv" 2)
echo "docker exec: $b ms   sbx-run exec: $s ms   added: $(awk -v a="$b" -v b="$s" 'BEGIN{printf "%.1f", b-a}') ms"
