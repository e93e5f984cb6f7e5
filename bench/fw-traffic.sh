#!/usr/bin/env bash
# The agent's own traffic through sbx-fw: proxy mode (the default) side by
# side with address mode, interleaved in one run, in the sealed bed
# (tests/fwbed): two beds, one per mode, nothing leaves the machine. As the
# agent (uid 1000) in the sandbox namespace, by name through the DNS filter:
#   git-clone   `git clone` over HTTPS (git http-backend behind a TLS origin)
#               of this repository's own history, a real pack of ~10 MB
#   npm-ci      `npm ci` of a lockfile npm itself wrote against a registry
#               stand-in (NPM_PKGS packages, tarballs fetched, cache empty)
#   model-api   MSG_N streaming Messages API calls to tests/msgapi's
#               stand-in, a new TLS connection each (curl), as a CLI's turns
# The origin for git and npm is bench/fw-traffic-origin.py on other.test
# (198.18.1.2:443); sbx-msgapi serves x.wild.test through a byte relay on
# 198.18.1.3:443. Clients skip certificate checks (the same in both modes).
#   RUNS=10 NPM_PKGS=150 MSG_N=20 bash bench/fw-traffic.sh
# PROFILE=release builds -p sbx-fw -p sbx-fwbed -p sbx-msgapi in release
# (default: the debug build the tests use). Needs root, git, npm, curl,
# openssl, python3. SBX_FWBED_PREFIX names the beds apart;
# NO_BUILD=1 uses the binaries already built.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-debug}
if [ -n "${NO_BUILD:-}" ]; then
  :
elif [ "$PROFILE" = release ]; then
  cargo build --release --locked -q -p sbx-fw -p sbx-fwbed -p sbx-msgapi
else
  cargo build --locked -q -p sbx-fw -p sbx-fwbed -p sbx-msgapi
fi
FW=$PWD/target/$PROFILE/sbx-fw
BED=$PWD/target/$PROFILE/sbx-fwbed
MSGAPI=$PWD/target/$PROFILE/sbx-msgapi
ORIGIN=$PWD/bench/fw-traffic-origin.py
RUNS=${RUNS:-10} NPM_PKGS=${NPM_PKGS:-150} MSG_N=${MSG_N:-20}
P=${SBX_FWBED_PREFIX:-}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs), $PROFILE build"
TMP=$(mktemp -d)
chmod 0755 "$TMP"
fds=()
beds=("${P}tad" "${P}tpx")
cleanup() {
  for b in "${beds[@]}"; do
    for ns in "$b-sbx" "$b-gw"; do { ip netns pids "$ns" 2>/dev/null || true; } | xargs -r kill || true; done
  done
  for f in "${fds[@]}"; do eval "exec $f>&-"; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# The origin's content, made once: a bare clone of this repository, and
# the registry's packages (package/package.json + index.js each, one
# root depending on all of them).
mkdir -p "$TMP/root/git" "$TMP/root/npm"
git clone -q --bare --no-local "$PWD" "$TMP/root/git/repo.git"
git -C "$TMP/root/git/repo.git" repack -adq
python3 - "$TMP/root/npm" "$NPM_PKGS" <<'PY'
import base64, hashlib, io, json, os, sys, tarfile
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    name = f"sbx-bench-{i:03d}"
    pkg = {"name": name, "version": "1.0.0", "main": "index.js"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for fname, data in [("package/package.json", json.dumps(pkg).encode()),
                            ("package/index.js", (f"module.exports = {i};\n" + "// pad\n" * 400).encode())]:
            ti = tarfile.TarInfo(fname); ti.size = len(data); ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
    tgz = buf.getvalue()
    os.makedirs(f"{root}/{name}/-", exist_ok=True)
    open(f"{root}/{name}/-/{name}-1.0.0.tgz", "wb").write(tgz)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    ver = dict(pkg, dist={"tarball": f"https://other.test/npm/{name}/-/{name}-1.0.0.tgz",
                          "integrity": integrity, "shasum": hashlib.sha1(tgz).hexdigest()})
    doc = {"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": ver}}
    open(f"{root}/{name}/index.json", "w").write(json.dumps(doc))
PY
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other.test \
  -addext "subjectAltName=DNS:other.test" -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
"$MSGAPI" --new-ca "$TMP/msgca" >/dev/null
echo '{"turns": [{"text": "All done.", "usage": {"input_tokens": 120, "output_tokens": 7}}]}' > "$TMP/script.json"
chmod -R a+rX "$TMP"

bed() { # PREFIX MODE
  mkfifo "$TMP/$1.in"
  "$BED" "$1" "$TMP/$1" < "$TMP/$1.in" > "$TMP/$1.json" &
  exec {fd}>"$TMP/$1.in"
  fds+=("$fd")
  for _ in $(seq 200); do [ -s "$TMP/$1.json" ] && break; sleep 0.05; done
  [ -s "$TMP/$1.json" ] || { echo "bed $1 did not start" >&2; exit 1; }
  chmod 0755 "$TMP/$1"
  printf '[network]\nallow-domains = ["other.test", "x.wild.test"]\nregistries = false\ngithub = false\nmode = "%s"\n' "$2" > "$TMP/$1.toml"
  ip netns exec "$1-sbx" env SBX_FW_STATE_DIR="$TMP/$1/state" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
    "$FW" -q --config "$TMP/$1.toml" init
  # The origins, in the gateway.
  ip netns exec "$1-gw" python3 "$ORIGIN" serve 198.18.1.2 "$TMP/cert.pem" "$TMP/key.pem" "$TMP/root" > "$TMP/$1.origin" 2>&1 &
  ip netns exec "$1-gw" "$MSGAPI" --script "$TMP/script.json" --log /dev/null --listen 127.0.0.1:8443 \
    --tls x.wild.test --tls-ca "$TMP/msgca" > "$TMP/$1.msgapi" 2>&1 &
  ip netns exec "$1-gw" python3 "$ORIGIN" relay 198.18.1.3 127.0.0.1:8443 > "$TMP/$1.relay" 2>&1 &
  for f in origin msgapi relay; do
    for _ in $(seq 200); do grep -qE 'ready|listening' "$TMP/$1.$f" && break; sleep 0.05; done
    grep -qE 'ready|listening' "$TMP/$1.$f" || { echo "$1 $f did not start: $(cat "$TMP/$1.$f")" >&2; exit 1; }
  done
  mkdir -p "$TMP/$1/home" && chown 1000:1000 "$TMP/$1/home"
}
bed "${P}tad" address
bed "${P}tpx" proxy

# As the agent in bed $1: a shell command.
agent() {
  printf 'ip netns exec %s-sbx setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=%s PATH=%s sh -c %q' \
    "$1" "$TMP/$1/home" "$PATH" "$2"
}
# The project, its lockfile written by npm against the stand-in once.
python3 - "$TMP/proj" "$NPM_PKGS" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
deps = {f"sbx-bench-{i:03d}": "^1.0.0" for i in range(n)}
json.dump({"name": "proj", "version": "1.0.0", "private": True, "dependencies": deps},
          open(f"{d}/package.json", "w"))
PY
NPMOPTS="--registry=https://other.test/npm/ --strict-ssl=false --no-audit --no-fund --loglevel=error"
chown -R 1000:1000 "$TMP/proj"
eval "$(agent "${P}tad" "cd $TMP/proj && npm install $NPMOPTS --cache $TMP/${P}tad/home/npm0 >/dev/null")"
for b in "${beds[@]}"; do
  mkdir -p "$TMP/$b/proj" && cp "$TMP/proj/package.json" "$TMP/proj/package-lock.json" "$TMP/$b/proj/"
  chown -R 1000:1000 "$TMP/$b/proj"
done
echo "lockfile: $(grep -c '"resolved"' "$TMP/proj/package-lock.json") packages"

MSG='{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}'
cmd() { # BED WORKLOAD
  case $2 in
    git-clone) agent "$1" "rm -rf $TMP/$1/home/clone && git -c http.sslVerify=false clone -q https://other.test/git/repo.git $TMP/$1/home/clone" ;;
    npm-ci) agent "$1" "cd $TMP/$1/proj && rm -rf node_modules $TMP/$1/home/npmc && npm ci $NPMOPTS --cache $TMP/$1/home/npmc >/dev/null" ;;
    model-api) agent "$1" "for i in \$(seq $MSG_N); do curl -sSfk -o /dev/null -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' --data '$MSG' https://x.wild.test/v1/messages || exit 1; done" ;;
  esac
}
# Each once in each bed first: a failure stops here, not inside hyperfine.
for w in git-clone npm-ci model-api; do
  for b in "${beds[@]}"; do eval "$(cmd "$b" "$w")" || { echo "$w in $b failed" >&2; exit 1; }; done
done
# Interleaved, not one mode's runs after the other's: under load the
# machine's noise moves from second to second, and each round runs both
# modes once in a random order, so it falls on both alike.
for w in git-clone npm-ci model-api; do
  echo "== $w (load $(cut -d' ' -f1 /proc/loadavg))"
  python3 - "$RUNS" "$(cmd "${P}tad" "$w")" "$(cmd "${P}tpx" "$w")" <<'PY'
import random, statistics, subprocess, sys, time
runs, cmds = int(sys.argv[1]), {"address": sys.argv[2], "proxy": sys.argv[3]}
t = {k: [] for k in cmds}
for _ in range(runs):
    for k in random.sample(list(cmds), len(cmds)):
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", cmds[k]], check=True)
        t[k].append(time.perf_counter() - t0)
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
for k, v in t.items():
    print(f"  {k:8} min {min(v)*1e3:8.0f} ms  p25 {q(v, .25)*1e3:8.0f} ms  median {statistics.median(v)*1e3:8.0f} ms  ({len(v)} runs)")
a, p = t["address"], t["proxy"]
print(f"  proxy/address: min {min(p)/min(a):.3f}, median {statistics.median(p)/statistics.median(a):.3f}")
PY
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
