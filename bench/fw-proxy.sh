#!/usr/bin/env bash
# sbx-fw proxy mode side by side with a direct connection and
# with Squid (Debian's squid 5, an explicit CONNECT proxy with an
# equivalent dstdomain ACL: Debian's package has no SSL peek/splice), in
# the sealed bed (tests/fwbed): the far side is the bed's TLS server in its
# gateway namespace, nothing leaves the machine. Each path has its own bed:
#   direct        sbx-fw in address mode, the agent dials 198.18.1.1:443
#   transparent   sbx-fw in proxy mode, the same dial, redirected to the proxy
#   sbx CONNECT   the same bed, through sbx-fw's CONNECT port 127.0.0.1:3128
#   squid CONNECT no sbx-fw, Squid on 127.0.0.1:3128 in the sandbox namespace
# The client (sbx-fwbed bench tls) runs as uid 1000 and does a full TLS 1.3
# handshake, verified, then reads GET /bytes/N to the end.
# Targets: added handshake latency <= 1 ms median over direct; a 1 GiB
# transfer >= 90% of direct's throughput; >= 2x Squid's connections a
# second, and lower latency than Squid. Needs root and squid (scripts/prereqs
# --test). RUNS, LAT_N, CPS_N, CPS_CONC, BYTES tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v squid >/dev/null || PATH=$PATH:/usr/sbin
command -v squid >/dev/null || { echo "fw-proxy.sh: squid is missing (scripts/prereqs --test)" >&2; exit 69; }
cargo build --release --locked -q -p sbx-fw -p sbx-fwbed
FW=$PWD/target/release/sbx-fw
BED=$PWD/target/release/sbx-fwbed
RUNS=${RUNS:-5} LAT_N=${LAT_N:-500} CPS_N=${CPS_N:-1000} CPS_CONC=${CPS_CONC:-16}
BYTES=${BYTES:-1073741824}
TMP=$(mktemp -d)
chmod 0755 "$TMP"
fds=()
cleanup() {
  for p in pdir ppx psq; do { ip netns pids "$p-sbx" 2>/dev/null || true; } | xargs -r kill || true; done
  for f in "${fds[@]}"; do eval "exec $f>&-"; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

bed() { # PREFIX: start a bed, wait until it is up
  mkfifo "$TMP/$1.in"
  "$BED" "$1" "$TMP/$1" < "$TMP/$1.in" > "$TMP/$1.json" &
  exec {fd}>"$TMP/$1.in"
  fds+=("$fd")
  for _ in $(seq 100); do [ -s "$TMP/$1.json" ] && { chmod 0755 "$TMP/$1"; return; }; sleep 0.05; done
  echo "bed $1 did not start" >&2; exit 1
}
bed pdir; bed ppx; bed psq

init() { # PREFIX MODE
  printf '[network]\nallow-domains = ["allowed.test"]\nregistries = false\ngithub = false\nmode = "%s"\n' "$2" > "$TMP/$1.toml"
  ip netns exec "$1-sbx" env SBX_FW_STATE_DIR="$TMP/$1/state" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
    "$FW" -q --config "$TMP/$1.toml" init
}
init pdir address
init ppx proxy

# Squid as Debian ships it, tuned as one would for this job: no cache, no
# access log (sbx-fw logs refusals only), the bed's resolver.
mkdir -p "$TMP/squid" && chown proxy: "$TMP/squid"
cat > "$TMP/squid.conf" <<EOF
http_port 127.0.0.1:3128
acl allowed dstdomain allowed.test .wild.test
acl SSL_ports port 443
acl CONNECT method CONNECT
http_access deny CONNECT !SSL_ports
http_access allow CONNECT allowed
http_access deny all
dns_nameservers 198.18.0.53
cache deny all
cache_mem 8 MB
access_log none
cache_log $TMP/squid/cache.log
pid_filename $TMP/squid/squid.pid
coredump_dir $TMP/squid
netdb_filename none
pinger_enable off
shutdown_lifetime 0 seconds
max_filedescriptors 8192
EOF
ip netns exec psq-sbx squid -N -f "$TMP/squid.conf" &
for _ in $(seq 100); do
  ip netns exec psq-sbx bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128' 2>/dev/null && break; sleep 0.1
done

agent=(setpriv --reuid=1000 --regid=1000 --clear-groups --)
# client NAME N CONC BYTES: the command line of one path.
client() {
  local ns target proxy ca
  case "$1" in
    direct) ns=pdir target=198.18.1.1:443 proxy=- ;;
    transparent) ns=ppx target=198.18.1.1:443 proxy=- ;;
    sbx-connect) ns=ppx target=allowed.test:443 proxy=127.0.0.1:3128 ;;
    squid-connect) ns=psq target=allowed.test:443 proxy=127.0.0.1:3128 ;;
  esac
  ca=$TMP/$ns/ca.der
  echo "ip netns exec $ns-sbx ${agent[*]} $BED bench tls $target allowed.test $ca $proxy $2 $3 $4"
}
paths=(direct transparent sbx-connect squid-connect)
for p in "${paths[@]}"; do # each path works before anything is timed
  $(client "$p" 2 1 1024) > /dev/null || { echo "path $p does not work: $($(client "$p" 1 1 0))" >&2; exit 1; }
done

# 1. Handshake latency: LAT_N sequential connections a path, the paths
# interleaved over three rounds; the median of each path's medians.
declare -A med
for round in 1 2 3; do
  for p in "${paths[@]}"; do
    m=$($(client "$p" "$LAT_N" 1 0) | jq .median_ms)
    med[$p]="${med[$p]:-} $m"
  done
done
median3() { tr ' ' '\n' <<<"$1" | grep . | sort -g | sed -n 2p; }
echo "handshake latency, median of $LAT_N sequential connections (3 rounds):"
for p in "${paths[@]}"; do printf '  %-14s %s ms  (rounds:%s)\n' "$p" "$(median3 "${med[$p]}")" "${med[$p]}"; done

# 2. Connections a second: CPS_N connections, CPS_CONC at a time.
cps_args=()
for p in "${paths[@]}"; do cps_args+=(-n "$p" "$(client "$p" "$CPS_N" "$CPS_CONC" 0)"); done
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$TMP/cps.json" "${cps_args[@]}"

# 3. Throughput: one connection reading BYTES.
tp_args=()
for p in "${paths[@]}"; do tp_args+=(-n "$p" "$(client "$p" 1 1 "$BYTES")"); done
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$TMP/tp.json" "${tp_args[@]}"

lat() { median3 "${med[$1]}"; }
jq -r --arg n "$CPS_N" --arg b "$BYTES" \
  --arg ld "$(lat direct)" --arg lt "$(lat transparent)" --arg lc "$(lat sbx-connect)" --arg ls "$(lat squid-connect)" \
  --slurpfile tp "$TMP/tp.json" '
  def by($r; $name): ($r.results[] | select(.command == $name) | .median);
  . as $c |
  ($n | tonumber) as $n | ($b | tonumber) as $b |
  def cps($x): $n / by($c; $x);
  def mib($x): $b / by($tp[0]; $x) / 1048576;
  "summary (medians):",
  "  handshake latency ms: direct \($ld), transparent \($lt) (+\((($lt|tonumber) - ($ld|tonumber)) * 1000 | round / 1000)), sbx CONNECT \($lc), squid CONNECT \($ls)",
  "  connections/s: direct \(cps("direct") | round), transparent \(cps("transparent") | round), sbx CONNECT \(cps("sbx-connect") | round), squid CONNECT \(cps("squid-connect") | round)",
  "  vs squid: transparent \(cps("transparent") / cps("squid-connect") * 100 | round / 100)x, sbx CONNECT \(cps("sbx-connect") / cps("squid-connect") * 100 | round / 100)x its connections/s",
  "  1 GiB throughput MiB/s: direct \(mib("direct") | round), transparent \(mib("transparent") | round) (\(mib("transparent") / mib("direct") * 100 | round)%), sbx CONNECT \(mib("sbx-connect") | round) (\(mib("sbx-connect") / mib("direct") * 100 | round)%), squid CONNECT \(mib("squid-connect") | round) (\(mib("squid-connect") / mib("direct") * 100 | round)%)"
' "$TMP/cps.json"
