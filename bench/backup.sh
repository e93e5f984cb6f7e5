#!/usr/bin/env bash
# sbx-backup against Debian's restic and rclone,
# all three against the same local S3 server (moto, from scripts/prereqs)
# in one run, on the home bench/gen-home.py makes (~20,000 files, ~200 MB).
# Targets: a full backup and a full restore no slower than restic's; an
# incremental pass after 10 changed files and a no-op pass <= 0.3 s; objects
# after a full backup within 2x of restic's.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/sbx-backup ] || cargo build --release -p sbx-backup >/dev/null
for t in rclone restic; do
  command -v $t >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $t >/dev/null
done
B=$PWD/target/release/sbx-backup
TMP=$(mktemp -d)
PORT=${PORT:-4599}
/opt/sbx/moto/bin/moto_server -H 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
MOTO=$!
trap 'kill $MOTO 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do curl -fsS -X PUT "http://127.0.0.1:$PORT/sbx" >/dev/null 2>&1 && break; sleep 0.2; done
for b in rclone-bucket restic-bucket; do curl -fsS -X PUT "http://127.0.0.1:$PORT/$b" >/dev/null; done

python3 bench/gen-home.py "$TMP/home"
: > "$TMP/config.toml"
export AWS_ENDPOINT=http://127.0.0.1:$PORT AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other RCLONE_CONFIG_S3_ENDPOINT=$AWS_ENDPOINT \
  RCLONE_CONFIG_S3_ACCESS_KEY_ID=test RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=test RCLONE_CONFIG_S3_REGION=us-east-1
export RESTIC_PASSWORD=bench RESTIC_REPOSITORY=s3:$AWS_ENDPOINT/restic-bucket/home RESTIC_CACHE_DIR=$TMP/restic-cache
sbx="$B -q --config $TMP/config.toml --url s3://sbx/home --home $TMP/home --state-dir $TMP/state"
# BASELINE=/path/to/an/older/sbx-backup adds it to the full, no-op and
# restore phases (its own prefix and state), for before/after figures in one run.
base="${BASELINE:+$BASELINE -q --config $TMP/config.toml --url s3://sbx/base --home $TMP/home --state-dir $TMP/state-base}"
# The AWS SDK inside rclone refuses AWS_CA_BUNDLE with a plain-HTTP endpoint.
rc="env -u AWS_CA_BUNDLE rclone --config /dev/null -q"
rs="env -u AWS_CA_BUNDLE restic -q"
# restic stores paths as given: back up "." from inside the home.
rsb="sh -c 'cd $TMP/home && exec $rs backup .'"
$rs init >/dev/null

PHASES=${PHASES:-full noop incr restore}
# RCLONE=0 leaves rclone out (each of its passes takes minutes).
rcl=; [ "${RCLONE:-1}" = 1 ] && rcl=1
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
# Full backup, each from nothing (untimed when only later phases are asked for).
if ! has full; then
  $sbx sync; sh -c "$rsb"
  if [ -n "$rcl" ]; then $rc sync "$TMP/home" s3:rclone-bucket/home --links; fi
fi
has full && hyperfine -N --runs 1 --export-csv "$TMP/full.csv" \
  --prepare "rm -rf $TMP/state" -n "sbx-backup sync (full)" "$sbx sync" \
  ${base:+--prepare "rm -rf $TMP/state-base" -n "baseline sync (full)" "$base sync"} \
  --prepare "true" -n "restic backup (full)" "$rsb" \
  ${rcl:+--prepare "true" -n "rclone sync (full)" "$rc sync $TMP/home s3:rclone-bucket/home --links"}
count() { $rc lsf -R --files-only "s3:$1" | wc -l; }
echo "objects  sbx-backup $(count sbx/home), restic $(count restic-bucket/home), rclone $(count rclone-bucket/home)"
# No-op: nothing changed (the baseline, if given, after a full pass of its own).
# rclone's passes take a minute each (a HEAD per file): one run of them (RCLONE=0: none).
if has noop && [ -n "$base" ] && ! has full; then $base sync; fi
has noop && hyperfine -N --warmup 1 --runs 5 --export-csv "$TMP/noop.csv" \
  -n "sbx-backup sync (no-op)" "$sbx sync" \
  ${base:+-n "baseline sync (no-op)" "$base sync"} \
  -n "restic backup (no-op)" "$rsb" &&
  if [ -n "$rcl" ]; then hyperfine -N --runs 1 --export-csv "$TMP/noop-rclone.csv" \
  -n "rclone sync (no-op)" "$rc sync $TMP/home s3:rclone-bucket/home --links"; fi
# Incremental: 10 files changed before every run.
printf '#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7 8 9; do head -c 1000 /dev/urandom > "%s/home/project/node_modules/pkg$i/lib/m0.js"; done\n' "$TMP" > "$TMP/touch10"
chmod +x "$TMP/touch10"
has incr && hyperfine -N --runs 3 --export-csv "$TMP/incr.csv" --prepare "$TMP/touch10" \
  -n "sbx-backup sync (10 changed)" "$sbx sync" \
  -n "restic backup (10 changed)" "$rsb" &&
  if [ -n "$rcl" ]; then hyperfine -N --runs 1 --export-csv "$TMP/incr-rclone.csv" --prepare "$TMP/touch10" \
  -n "rclone sync (10 changed)" "$rc sync $TMP/home s3:rclone-bucket/home --links"; fi
# Full restore into an empty directory.
has restore && hyperfine -N --runs 1 --export-csv "$TMP/restore.csv" \
  --prepare "sh -c 'rm -rf $TMP/r1; sync'" -n "sbx-backup restore" "$sbx restore --to $TMP/r1" \
  ${base:+--prepare "sh -c 'rm -rf $TMP/r0; sync'" -n "baseline restore" "$base restore --to $TMP/r0"} \
  --prepare "sh -c 'rm -rf $TMP/r2; sync'" -n "restic restore" "$rs restore latest --target $TMP/r2" \
  ${rcl:+--prepare "sh -c 'rm -rf $TMP/r3; sync'" -n "rclone copy (restore)" "$rc copy s3:rclone-bucket/home $TMP/r3 --links"}
# Medians, by name (rclone's no-op and incremental rows are in their own file).
for f in $PHASES; do
  { cat "$TMP/$f.csv"; cat "$TMP/$f-rclone.csv" 2>/dev/null || true; } | awk -F, -v f=$f '
    /sbx-backup/ { a = $4 } /restic/ { b = $4 } /rclone/ { c = $4 } /baseline/ { d = $4 } END {
    printf "%-8s sbx-backup %.3f s, restic %.3f s (%.2fx), rclone %.3f s (%.2fx)", f, a, b, b / a, c, c / a
    if (d) printf ", baseline %.3f s", d; printf "\n" }'
done
