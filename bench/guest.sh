#!/usr/bin/env bash
# Start to ready of a sandbox container, side by side in one hyperfine run:
#   docker run -d IMAGE sleep infinity          (the engine alone)
#   tini + the old entrypoint.sh                (before sbx-guest: sbx-fw init)
#   sbx-guest                                   (pre-block, sbx-fw init + verify, audit sink)
# "Ready" is the init's ready line in the container's log; both inits run the
# same sbx-fw binary from the same image, so the difference is the init's.
# Target: sbx-guest no slower than tini + entrypoint.sh.
# The hyperfine run is repeated ROUNDS times (this machine is often shared);
# the best and the median of the rounds' medians are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10}
ROUNDS=${ROUNDS:-3}
BIN=${SBX_BIN_DIR:-$PWD/target/release}
[ -x "$BIN/sbx-guest" ] || { echo "build first (make build), or set SBX_BIN_DIR" >&2; exit 66; }
TAG=${SBX_BASE_TAG:-guest-bench}
SBX_BIN_DIR=$BIN "$BIN/sbx-run" -q build-base --bootstrap --no-ai-clis --tag $TAG
IMG=agent-sandbox-base:$TAG
CTX=$(mktemp -d)
trap 'rm -rf "$CTX"; docker rm -f sbx-gb-base-$TAG sbx-gb-old-$TAG sbx-gb-new-$TAG >/dev/null 2>&1; docker image rm sbx-guest-bench-old-$TAG >/dev/null 2>&1 || true' EXIT
git show 65fb90d:base-image/entrypoint.sh > "$CTX/entrypoint.sh"
cat > "$CTX/Dockerfile" <<DOCKER
FROM $IMG
COPY entrypoint.sh /usr/local/sbin/sbx-entrypoint
RUN chmod 0755 /usr/local/sbin/sbx-entrypoint && install -m 0622 /dev/null /var/log/sbx/audit.jsonl
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/sbin/sbx-entrypoint"]
CMD ["sleep", "infinity"]
DOCKER
docker build -q -t sbx-guest-bench-old-$TAG "$CTX" >/dev/null
CAPS="--cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW --cap-add SETUID --cap-add SETGID --cap-add SETPCAP --cap-add KILL --cap-add SYS_ADMIN --cap-add DAC_READ_SEARCH --security-opt no-new-privileges"
wait_ready() { until docker logs "$1" 2>&1 | grep -q ': ready'; do :; done; }
export -f wait_ready
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
hyperfine --shell bash --style basic --runs "$RUNS" --export-csv "$CTX/r.csv" \
  --prepare "docker rm -f sbx-gb-base-$TAG >/dev/null 2>&1 || true" \
  "docker run -d --name sbx-gb-base-$TAG $CAPS --entrypoint sleep $IMG infinity >/dev/null" \
  --prepare "docker rm -f sbx-gb-old-$TAG >/dev/null 2>&1 || true" \
  "docker run -d --name sbx-gb-old-$TAG $CAPS sbx-guest-bench-old-$TAG >/dev/null && wait_ready sbx-gb-old-$TAG" \
  --prepare "docker rm -f sbx-gb-new-$TAG >/dev/null 2>&1 || true" \
  "docker run -d --name sbx-gb-new-$TAG $CAPS $IMG >/dev/null && wait_ready sbx-gb-new-$TAG" >/dev/null 2>&1
median() { awk -F, -v row="$1" 'NR == row + 1 { printf "%.1f", $4 * 1000 }' "$CTX/r.csv"; }
b=$(median 1); o=$(median 2); n=$(median 3)
echo "round $r: docker run -d (no init): $b ms   tini + entrypoint.sh: $o ms   sbx-guest: $n ms ($(awk -v a="$o" -v b="$n" 'BEGIN{printf "%.2fx", b/a}') of the old init)"
echo "$b" >> "$CTX/b"; echo "$o" >> "$CTX/o"; echo "$n" >> "$CTX/n"; awk -v a="$o" -v b="$n" 'BEGIN{printf "%.3f\n", b/a}' >> "$CTX/ratio"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
bm() { sort -g "$1" | awk '{ v[NR] = $1 } END { printf "%s / %s", v[1], v[int((NR + 1) / 2)] }'; }
echo "$ROUNDS rounds, best / median of the rounds' medians: docker run -d $(bm "$CTX/b") ms   tini + entrypoint.sh $(bm "$CTX/o") ms   sbx-guest $(bm "$CTX/n") ms   sbx-guest / old init $(bm "$CTX/ratio")"
echo "sbx-guest's own start (pre-block to ready), from its log: $(docker logs sbx-gb-new-$TAG 2>&1 | sed -n 's/.*ready (\(.*\))/\1/p')"
