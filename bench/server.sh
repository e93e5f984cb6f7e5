#!/usr/bin/env bash
# sbx-server under load (issue 41's "Done when"), on 127.0.0.1, bounded: a
# release build on its own Postgres cluster (a fresh state directory),
# then bench/server-load.py: 50 clients doing login/list/get for 60 s, with
# /healthz as the baseline in the same run (HTTP plus one database round
# trip, no token), then 10 concurrent project creations that must all
# reach `running` (real Docker: SBX_BASE_TAG's base image, built from
# SBX_BIN_DIR's tools when missing). Targets: p99 under 50 ms for list and
# get, no errors, all 10 running. Needs root (workspaces go to uid 1000).
# LOAD_ARGS passes more options to the client (e.g. "--think 20").
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/server.sh: run as root (workspaces are given to uid 1000)" >&2; exit 77; }
cargo build --release --locked -q -p sbx-server --bin sbx-server
export SBX_BIN_DIR=${SBX_BIN_DIR:-$PWD/target/release}
if ! docker image inspect "agent-sandbox-base:${SBX_BASE_TAG:-latest}" >/dev/null 2>&1; then
  "$SBX_BIN_DIR/sbx-run" -q build-base --bootstrap --no-ai-clis
fi
TMP=$(mktemp -d /var/tmp/sbx-server-bench.XXXXXX)
chmod 711 "$TMP"
SERVER=
# Stopping the server stops its cluster; then its state goes.
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null; rm -rf "$TMP"' EXIT
JWT_SECRET=$(head -c 48 /dev/urandom | base64) \
  target/release/sbx-server serve --listen 127.0.0.1:0 --state-dir "$TMP/state" \
  --register-limit-address 1000 2> "$TMP/stderr" &
SERVER=$!
for _ in $(seq 600); do
  grep -q 'listening on' "$TMP/stderr" && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$TMP/stderr" >&2; exit 1; }
  sleep 0.1
done
URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/stderr")
[ -n "$URL" ] || { echo "bench/server.sh: the server did not start" >&2; cat "$TMP/stderr" >&2; exit 1; }
echo "sbx-server $(git rev-parse --short HEAD) at $URL"
# The cluster's postmaster is not the server's child: named for the CPU account.
PG=$(head -1 "$TMP/state/pg/data/postmaster.pid")
# shellcheck disable=SC2086
python3 bench/server-load.py "$URL" --pid "$SERVER" --pid "$PG" ${LOAD_ARGS:-}
