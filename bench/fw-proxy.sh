#!/usr/bin/env bash
# sbx-fw proxy mode side by side with a direct connection and
# with Squid (Debian's squid 5, an explicit CONNECT proxy with an
# equivalent dstdomain ACL: Debian's package has no SSL peek/splice), in
# the sealed bed (tests/fwbed): the far side is the bed's TLS server in its
# gateway namespace, nothing leaves the machine. Each path has its own bed:
#   direct        sbx-fw in address mode, the agent dials 198.18.1.1:443
#   transparent   sbx-fw in proxy mode, the same dial, redirected to the proxy
#   sbx-connect   the same bed, through sbx-fw's CONNECT port 127.0.0.1:3128
#   squid-connect no sbx-fw, Squid on 127.0.0.1:3128 in the sandbox namespace
#   base-*        with FW_BASE=/path/to/an/older/sbx-fw: its proxy, the same way
# Two clients (sbx-fwbed bench), both as uid 1000, CONC connections in
# flight from as many threads:
#   tls    a full TLS 1.3 handshake, verified, then GET /bytes/N to the end
#   hello  a ready-made ClientHello out, the server's first record back: no
#          client crypto; it also reads the proxy's CPU time per connection
# and two origins: the bed's TLS server (allowed.test, 198.18.1.1: a thread
# and a full handshake a connection) and its light origin (light.test,
# 198.18.1.4: the hello read, a ready-made ServerHello back, closed; no
# crypto, four threads). The light client against the light origin is the
# fair measure of a proxy: client and origin cost a few system calls a
# connection, so the proxy's own cost sets the rate; against the TLS server
# the origin's CPU (and on 2 CPUs its scheduling) sets every path's rate.
# Every path is also charged the CPU time of all three parties (client,
# TLS server, proxy; softirq work runs in their context): on a 2-CPU bed
# that is busy anyway, CPU per connection and per GiB compare the paths
# fairly where wall-clock rates measure the neighbours. A quiet re-run:
#   ROUNDS=5 RUNS=3 bash bench/fw-proxy.sh   (load average below 1)
# Targets: added handshake latency <= 1 ms median over direct; a 1 GiB
# transfer >= 90% of direct's throughput; >= 2x Squid's connections a
# second, and lower latency than Squid. Needs root and squid (scripts/prereqs
# --test). RUNS, ROUNDS, LAT_N, CPS_N, CPS_LIGHT_N, CPS_CONC, BYTES tune it; QUICK=1
# runs the light bed's connections a second only, TP_ONLY=1 the
# throughput rows only; RELAYS adds relays with other knobs to those
# (RELAYS=sockmap: the in-kernel sockhash relay), TP_PATHS picks rows.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v squid >/dev/null || PATH=$PATH:/usr/sbin
command -v squid >/dev/null || { echo "fw-proxy.sh: squid is missing (scripts/prereqs --test)" >&2; exit 69; }
cargo build --release --locked -q -p sbx-fw -p sbx-fwbed
FW=$PWD/target/release/sbx-fw
BED=$PWD/target/release/sbx-fwbed
FW_BASE=${FW_BASE:-}
RUNS=${RUNS:-5} ROUNDS=${ROUNDS:-7} LAT_N=${LAT_N:-500} CPS_N=${CPS_N:-2000} CPS_CONC=${CPS_CONC:-32}
BYTES=${BYTES:-1073741824}
# The light bed runs ~20,000 connections a second: more of them a round.
CPS_LIGHT_N=${CPS_LIGHT_N:-5000}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
TMP=$(mktemp -d)
chmod 0755 "$TMP"
fds=()
beds=(pdir ppx psq)
[ -n "$FW_BASE" ] && beds+=(pbs)
[ -n "${NFQ:-}" ] && beds+=(pnq)
cleanup() {
  for p in "${beds[@]}"; do { ip netns pids "$p-sbx" 2>/dev/null || true; } | xargs -r kill || true; done
  for f in "${fds[@]}"; do eval "exec $f>&-"; done
  wait 2>/dev/null || true
  if mountpoint -q "$TMP/cg2" 2>/dev/null; then rmdir "$TMP/cg2/sbx-bench-$$" || true; umount "$TMP/cg2"; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

declare -A bedpid
bed() { # PREFIX: start a bed, wait until it is up
  mkfifo "$TMP/$1.in"
  "$BED" "$1" "$TMP/$1" < "$TMP/$1.in" > "$TMP/$1.json" &
  bedpid[$1]=$!
  exec {fd}>"$TMP/$1.in"
  fds+=("$fd")
  for _ in $(seq 100); do [ -s "$TMP/$1.json" ] && { chmod 0755 "$TMP/$1"; return; }; sleep 0.05; done
  echo "bed $1 did not start" >&2; exit 1
}
for b in "${beds[@]}"; do bed "$b"; done
# Tens of thousands of connections a minute to one address:port: the
# client's and the proxy's upstream sockets share the sandbox's
# (10.77.0.2, port, 198.18.1.x, 443) tuples, and their TIME_WAITs filled
# the default 28,232 ports within a few rounds, after which every connect
# searched the range (the rate fell 20-fold). As proxy hosts are tuned,
# the same for every path: the whole port range (TIME_WAIT reuse instead
# stalled connections for a SYN retransmit's second).
for b in "${beds[@]}"; do
  ip netns exec "$b-sbx" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
done

init() { # PREFIX MODE [SBX-FW]
  printf '[network]\nallow-domains = ["allowed.test", "light.test"]\nregistries = false\ngithub = false\nmode = "%s"\n' "$2" > "$TMP/$1.toml"
  ip netns exec "$1-sbx" env SBX_FW_STATE_DIR="$TMP/$1/state" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
    "${3:-$FW}" -q --config "$TMP/$1.toml" init
}
init pdir address
init ppx proxy
[ -n "$FW_BASE" ] && init pbs proxy "$FW_BASE"
[ -n "${NFQ:-}" ] && init pnq address

# Squid as Debian ships it, tuned as one would for this job: no cache, no
# access log (sbx-fw logs refusals only), the bed's resolver.
mkdir -p "$TMP/squid" && chown proxy: "$TMP/squid"
cat > "$TMP/squid.conf" <<EOC
http_port 127.0.0.1:3128
acl allowed dstdomain allowed.test light.test .wild.test
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
EOC
ip netns exec psq-sbx squid -N -f "$TMP/squid.conf" &
SQUID_PID=$!
for _ in $(seq 100); do
  ip netns exec psq-sbx bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128' 2>/dev/null && break; sleep 0.1
done

# The smallest TCP-terminating relay (sbx-fwbed bench relay: blocking
# splice, a thread a direction, 1 MiB pipes, no checks) in the direct bed,
# for the throughput rows only: what any proxy pays for the second hop.
# RELAYS="pipe=65536 more buf=4194304 copy=262144": more relays, each with
# those knobs (see sbx-fwbed bench relay), as paths relay-1, relay-2, ...
declare -A relaypid
relay() { # NAME PORT [KNOBS]
  ip netns exec pdir-sbx "$BED" bench relay "127.0.0.1:$2" 198.18.1.1:443 ${3:-} &
  relaypid[$1]="$2 $!"
  for _ in $(seq 100); do
    ip netns exec pdir-sbx bash -c "exec 3<>/dev/tcp/127.0.0.1/$2" 2>/dev/null && break; sleep 0.05
  done
}
relay min-relay 4443
read -ra knobs <<<"${RELAYS:-}"
# RELAYS=sockmap-local: the agent's own socket goes into the map too, by a
# sock_ops program on a cgroup v2 the clients then run in (mounted under
# $TMP: `ip netns exec` remounts /sys). Bytes redirected into a socket's
# receive queue skip TCP's receive-buffer autotuning, and the kernel
# retries a full one a jiffy later: at the default 128 KiB that path ran
# at ~13 MiB/s, so every bed's initial receive buffer is 8 MiB then.
incg=()
if [[ " ${RELAYS:-} " == *" sockmap-local "* ]]; then
  mkdir -p "$TMP/cg2" && mount -t cgroup2 none "$TMP/cg2"
  mkdir "$TMP/cg2/sbx-bench-$$"
  export SBX_BENCH_CGROUP=$TMP/cg2/sbx-bench-$$
  printf '#!/bin/sh\necho $$ > %s/cgroup.procs && exec "$@"\n' "$SBX_BENCH_CGROUP" > "$TMP/in-cg"
  chmod 0755 "$TMP/in-cg"
  incg=("$TMP/in-cg")
  for b in "${beds[@]}"; do ip netns exec "$b-sbx" sysctl -qw net.ipv4.tcp_rmem="4096 8388608 33554432"; done
fi
for i in "${!knobs[@]}"; do relay "relay-$((i + 1))" $((4444 + i)) "${knobs[$i]}"; done

# NFQ=1: the out-of-path alternative, bare (bench/nfq-verdict.py): the
# direct bed's dial, each flow queued to user space until its first data
# packet, which is accepted with a mark that becomes the connection's; its
# later packets pass on a connmark rule. Row nfq-bypass.
if [ -n "${NFQ:-}" ]; then
  ip netns exec pnq-sbx iptables -t mangle -A OUTPUT -p tcp -d 198.18.1.1 --dport 443 -m connmark --mark 0x1/0x1 -j ACCEPT
  ip netns exec pnq-sbx iptables -t mangle -A OUTPUT -p tcp -d 198.18.1.1 --dport 443 -j NFQUEUE --queue-num 7
  ip netns exec pnq-sbx iptables -t mangle -A POSTROUTING -m mark --mark 0x1/0x1 -j CONNMARK --save-mark --mask 0x1
  ip netns exec pnq-sbx python3 bench/nfq-verdict.py 7 > "$TMP/nfq.out" &
  for _ in $(seq 100); do [ -s "$TMP/nfq.out" ] && break; sleep 0.05; done
fi

paths=(direct transparent sbx-connect squid-connect)
[ -n "$FW_BASE" ] && paths+=(base-transparent base-connect)
tpaths=("${paths[@]}" min-relay)
[ -n "${NFQ:-}" ] && tpaths+=(nfq-bypass)
for i in "${!knobs[@]}"; do tpaths+=("relay-$((i + 1))"); echo "relay-$((i + 1)): ${knobs[$i]}"; done
# TP_PATHS="direct min-relay relay-1": the throughput rows of those only.
[ -n "${TP_PATHS:-}" ] && read -ra tpaths <<<"$TP_PATHS"
agent=(setpriv --reuid=1000 --regid=1000 --clear-groups --)
where() { # PATH -> "netns target proxy pid"
  case "$1" in
    direct) echo "pdir 198.18.1.1:443 - -" ;;
    nfq-bypass) echo "pnq 198.18.1.1:443 - -" ;;
    transparent) echo "ppx 198.18.1.1:443 - $(cat "$TMP/ppx/state/proxy.pid")" ;;
    sbx-connect) echo "ppx allowed.test:443 127.0.0.1:3128 $(cat "$TMP/ppx/state/proxy.pid")" ;;
    squid-connect) echo "psq allowed.test:443 127.0.0.1:3128 $SQUID_PID" ;;
    min-relay | relay-*) read -r port pid <<<"${relaypid[$1]}"; echo "pdir 127.0.0.1:$port - $pid" ;;
    base-transparent) echo "pbs 198.18.1.1:443 - $(cat "$TMP/pbs/state/proxy.pid")" ;;
    base-connect) echo "pbs allowed.test:443 127.0.0.1:3128 $(cat "$TMP/pbs/state/proxy.pid")" ;;
  esac
}
client() { # PATH N CONC BYTES: the full-TLS client's command line
  local ns target proxy pid
  read -r ns target proxy pid <<<"$(where "$1")"
  echo "${incg[*]} ip netns exec $ns-sbx ${agent[*]} $BED bench tls $target allowed.test $TMP/$ns/ca.der $proxy $2 $3 $4"
}
light() { # PATH N CONC [light]: the light client's command line (to the light origin)
  local ns target proxy pid sni=allowed.test
  read -r ns target proxy pid <<<"$(where "$1")"
  if [ "${4:-}" = light ]; then
    sni=light.test target=${target/198.18.1.1/198.18.1.4} target=${target/allowed.test/light.test}
  fi
  echo "ip netns exec $ns-sbx ${agent[*]} $BED bench hello $target $sni $proxy $2 $3 $pid"
}
# CPU time in µs: a process's own and its finished threads' (the bed's
# TLS server runs a thread a connection), and the CPU of a command (user
# plus system, from the shell's `times`) as "JSON-LINE CPU-µs".
TICK=$(getconf CLK_TCK)
proc_us() { awk -v t="$TICK" '{printf "%.0f", ($14 + $15) * 1e6 / t}' /proc/"$1"/stat 2>/dev/null || echo 0; }
with_cpu() {
  local out rc
  out=$("$@"; rc=$?; times; exit $rc) && rc=0 || rc=$?
  head -1 <<<"$out" | tr -d '\n'
  tail -1 <<<"$out" | awk '{for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); s += a[1] * 60 + a[2]}} END {printf " %.0f\n", s * 1e6}'
  return $rc
}
# The parties' CPU µs, for a path: "server proxy" (proxy 0 when none).
parties_us() {
  local ns pid
  read -r ns _ _ pid <<<"$(where "$1")"
  echo "$(proc_us "${bedpid[$ns]}") $([ "$pid" = - ] && echo 0 || proc_us "$pid")"
}
$(client min-relay 2 1 1024) > /dev/null || { echo "the minimal relay does not work" >&2; exit 1; }
for p in "${paths[@]}"; do # each path works before anything is timed
  $(client "$p" 2 1 1024) > /dev/null || { echo "path $p does not work: $($(client "$p" 1 1 0))" >&2; exit 1; }
  $(light "$p" 2 1) > /dev/null || { echo "path $p does not work: $($(light "$p" 1 1))" >&2; exit 1; }
  $(light "$p" 2 1 light) > /dev/null || { echo "path $p does not work: $($(light "$p" 1 1 light))" >&2; exit 1; }
done

# stats "v1 v2 ...": median [min–max]
stats() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.4g [%.4g–%.4g]", m, v[1], v[NR]}'; }
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }

# TP_ONLY=1: the throughput rows only (sections 4 and 5); QUICK=1: the
# light bed only (section 6).
if [ -z "${TP_ONLY:-}" ]; then
# 1. Handshake latency (full TLS): LAT_N sequential connections a path,
# the paths interleaved over ROUNDS rounds; median of the rounds' medians.
declare -A lat cps cpu hlat
if [ -z "${QUICK:-}" ]; then
  for _ in $(seq "$ROUNDS"); do
    for p in "${paths[@]}"; do lat[$p]="${lat[$p]:-} $($(client "$p" "$LAT_N" 1 0) | jq .median_ms)"; done
  done
  echo "handshake latency ms (full TLS 1.3), median of $LAT_N sequential connections, median [min–max] of $ROUNDS rounds:"
  for p in "${paths[@]}"; do printf '  %-17s %s\n' "$p" "$(stats "${lat[$p]}")"; done
fi

# 2. Connections a second, light client, CPS_CONC in flight; interleaved
# rounds; with the proxy's CPU time per connection (its threads' schedstat)
# and all three parties' (client, origin, proxy). First against the light
# origin (the proxies' own cost sets the rate), then the TLS server.
declare -A allc
cps_light() { # ORIGIN (light or tls) N: fills cps cpu hlat allc
  cps=() cpu=() hlat=() allc=()
  for _ in $(seq "$ROUNDS"); do
    for p in "${paths[@]}"; do
      read -r s0 p0 <<<"$(parties_us "$p")"
      # A run with failed connections is reported and counted as it came.
      out=$(with_cpu $(light "$p" "$2" "$CPS_CONC" "$1")) || echo "  ($p: $(jq -c '{errors, first_error}' <<<"${out% *}"))" >&2
      read -r s1 p1 <<<"$(parties_us "$p")"
      j=${out% *}
      cps[$p]="${cps[$p]:-} $(jq .cps <<<"$j")"
      cpu[$p]="${cpu[$p]:-} $(jq .proxy_cpu_us_per_conn <<<"$j")"
      hlat[$p]="${hlat[$p]:-} $(jq .median_ms <<<"$j")"
      allc[$p]="${allc[$p]:-} $(jq --argjson c "${out##* }" --argjson s $((s1 - s0)) --argjson x $((p1 - p0)) \
        '($c + $s + $x) / ([.ok, 1] | max) | round' <<<"$j")"
    done
  done
  for p in "${paths[@]}"; do
    printf '  %-17s %s conn/s (%.2fx squid, %.2fx direct); connection time %s ms; CPU µs/connection: proxy %s (%.2fx squid), all parties %s\n' "$p" \
      "$(stats "${cps[$p]}")" \
      "$(awk -v a="$(med "${cps[$p]}")" -v b="$(med "${cps[squid-connect]}")" 'BEGIN {print a / b}')" \
      "$(awk -v a="$(med "${cps[$p]}")" -v b="$(med "${cps[direct]}")" 'BEGIN {print a / b}')" \
      "$(stats "${hlat[$p]}")" "$(stats "${cpu[$p]}")" \
      "$(awk -v a="$(med "${cpu[$p]}")" -v b="$(med "${cpu[squid-connect]}")" 'BEGIN {print (b > 0) ? a / b : 0}')" \
      "$(stats "${allc[$p]}")"
  done
}
if [ -z "${QUICK:-}" ]; then
echo "connections/s, light client against the TLS server (a handshake a connection on the far side), $CPS_N connections $CPS_CONC at a time, median [min–max] of $ROUNDS rounds:"
cps_light tls "$CPS_N"

# 3. Connections a second with the full-TLS client (hyperfine).
cps_args=()
for p in "${paths[@]}"; do cps_args+=(-n "$p" "$(client "$p" "$CPS_N" "$CPS_CONC" 0)"); done
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$TMP/cps.json" "${cps_args[@]}"

fi # QUICK
fi # TP_ONLY

if [ -z "${QUICK:-}" ]; then
# 4. Throughput: one connection reading BYTES (hyperfine).
tp_args=()
for p in "${tpaths[@]}"; do tp_args+=(-n "$p" "$(client "$p" 1 1 "$BYTES")"); done
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$TMP/tp.json" "${tp_args[@]}"

# 5. CPU time for one BYTES transfer, each party's, RUNS interleaved runs
# (the wall clock above is mostly other processes' on a busy machine; the
# CPU a GiB is what the path costs).
declare -A tcl tsv tpx tall
for _ in $(seq "$RUNS"); do
  for p in "${tpaths[@]}"; do
    read -r s0 p0 <<<"$(parties_us "$p")"
    out=$(with_cpu $(client "$p" 1 1 "$BYTES"))
    read -r s1 p1 <<<"$(parties_us "$p")"
    c=${out##* } sv=$((s1 - s0)) px=$((p1 - p0))
    tcl[$p]="${tcl[$p]:-} $((c / 1000))" tsv[$p]="${tsv[$p]:-} $((sv / 1000))"
    tpx[$p]="${tpx[$p]:-} $((px / 1000))" tall[$p]="${tall[$p]:-} $(((c + sv + px) / 1000))"
  done
done
echo "CPU ms for one $BYTES-byte transfer, median [min–max] of $RUNS runs:"
for p in "${tpaths[@]}"; do
  printf '  %-17s all %s = client %s + TLS server %s + proxy %s\n' "$p" \
    "$(stats "${tall[$p]}")" "$(stats "${tcl[$p]}")" "$(stats "${tsv[$p]}")" "$(stats "${tpx[$p]}")"
done

fi # QUICK

# 6. The light bed, last: its tens of thousands of connections leave
# TIME_WAITs and conntrack entries that stalled the redirected path's
# later connections for a SYN retransmit (a second) when it ran first.
if [ -z "${TP_ONLY:-}" ]; then
  echo "connections/s, LIGHT BED (light client: hello out; light origin: ServerHello back, close), $CPS_LIGHT_N connections $CPS_CONC at a time, median [min–max] of $ROUNDS rounds:"
  cps_light light "$CPS_LIGHT_N"
fi

if [ -z "${TP_ONLY:-}" ] && [ -z "${QUICK:-}" ]; then
echo "summary (medians):"
echo "  handshake latency ms: direct $(med "${lat[direct]}"), transparent $(med "${lat[transparent]}"), sbx CONNECT $(med "${lat[sbx-connect]}"), squid CONNECT $(med "${lat[squid-connect]}")"
for p in "${paths[@]}"; do
  printf '  %-17s light bed conn/s %s (%.2fx squid); CPU µs/conn: proxy %s (%.2fx squid), all %s; CPU ms/transfer: all %s (%.2fx direct), proxy %s\n' \
    "$p" "$(med "${cps[$p]}")" \
    "$(awk -v a="$(med "${cps[$p]}")" -v b="$(med "${cps[squid-connect]}")" 'BEGIN {print a / b}')" \
    "$(med "${cpu[$p]}")" "$(awk -v a="$(med "${cpu[$p]}")" -v b="$(med "${cpu[squid-connect]}")" 'BEGIN {print a / b}')" \
    "$(med "${allc[$p]}")" "$(med "${tall[$p]}")" \
    "$(awk -v a="$(med "${tall[$p]}")" -v b="$(med "${tall[direct]}")" 'BEGIN {print a / b}')" "$(med "${tpx[$p]}")"
done
jq -r --arg n "$CPS_N" --arg b "$BYTES" --slurpfile tp "$TMP/tp.json" '
  def by($r; $name): ($r.results[] | select(.command == $name));
  . as $c | ($n | tonumber) as $n | ($b | tonumber) as $b |
  ($c.results | map(.command)) as $paths |
  ($n / by($c; "squid-connect").median) as $sq |
  (by($tp[0]; "direct").median) as $dt |
  $paths[] as $p |
  "  \($p): full-TLS conn/s \($n / by($c; $p).median | round) [\($n / by($c; $p).max | round)–\($n / by($c; $p).min | round)] (\($n / by($c; $p).median / $sq * 100 | round / 100)x squid); 1 GiB \($b / by($tp[0]; $p).median / 1048576 | round) MiB/s [\($b / by($tp[0]; $p).max / 1048576 | round)–\($b / by($tp[0]; $p).min / 1048576 | round)] (\($dt / by($tp[0]; $p).median * 100 | round)% of direct)"
' "$TMP/cps.json"
fi
[ -n "${QUICK:-}" ] || jq -r --arg b "$BYTES" '
  ($b | tonumber) as $b | (.results[] | select(.command == "direct").median) as $dt |
  .results[] | "  \(.command): 1 GiB \($b / .median / 1048576 | round) MiB/s [\($b / .max / 1048576 | round)–\($b / .min / 1048576 | round)], \($dt / .median * 100 | round)% of direct"
' "$TMP/tp.json"
if [ -n "${NFQ:-}" ]; then # the bypass took the bulk: packets per rule
  ip netns exec pnq-sbx iptables -t mangle -L OUTPUT -v -n -x | awk 'NR > 2 {print "  nfq-bypass: " $1 " packets by " $3}'
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
