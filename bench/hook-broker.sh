#!/usr/bin/env bash
# The added cost of one repository hook run through the broker (issue 15:
# the hook starts beside git's Landlock domain) against the guard's step
# running it itself and against the hook run directly, as git ran it before
# for a command the steps did not judge. Interleaved (bench/interleave.py),
# as uid 1000 with the broker's group, like git's children in a sandbox.
# Needs root (the broker). GUARD=path picks the build (default: release).
# BASE_GUARD=path adds a broker of another build (its sbx-git-client beside
# it) and its commit with the hook, commit-hook-base, to the same run: what
# a change to the broker adds to a commit (and commit-no-hook-base, without;
# rev-parse-base, a call with no hook at all).
# BENCH_DIR=path puts the whole set-up (repositories, the broker's socket
# and private-index directory) there instead of /tmp, e.g. on a tmpfs.
# BROKER_TMPFS=1 mounts a tmpfs on the broker's private-index and approved
# directories only, as sbx-guest does in a sandbox, the repositories staying
# on BENCH_DIR's disk: the sandbox's layout.
# Usage: bench/hook-broker.sh [RUNS]
set -euo pipefail
RUNS=${1:-300}
GUARD=${GUARD:-$PWD/target/release/sbx-git-guard}
IL=$PWD/bench/interleave.py
GID=2575
TMP=$(mktemp -d "${BENCH_DIR:-/tmp}/sbx-hook-bench.XXXXXX")
BASE_BROKER=
trap 'kill "$BROKER" $BASE_BROKER 2>/dev/null || true; sleep 0.2
  for m in "$TMP"/index "$TMP"/approved "$TMP"/base/index "$TMP"/base/approved; do
    mountpoint -q "$m" && umount "$m"; done; rm -rf "$TMP"' EXIT
chmod 755 "$TMP"
if [ "${BROKER_TMPFS:-0}" = 1 ]; then
  for d in "$TMP" ${BASE_GUARD:+"$TMP/base"}; do
    install -d -m 0755 "$d"
    install -d -m 01730 -g "$GID" "$d/index"; mount -t tmpfs -o mode=01730,gid="$GID",size=256m tmpfs "$d/index"
    install -d -m 0755 "$d/approved"; mount -t tmpfs -o mode=0755,size=16m tmpfs "$d/approved"
  done
fi
install -d -m 0700 "$TMP/libexec"
install -m 0711 /usr/bin/git "$TMP/libexec/git"
: > "$TMP/audit.jsonl"; chmod 666 "$TMP/audit.jsonl"
env -i SBX_AUDIT_LOG="$TMP/audit.jsonl" "$GUARD" serve --socket "$TMP/s.sock" \
  --git "$TMP/libexec/git" --group "$GID" 2>"$TMP/broker.log" &
BROKER=$!
BASE=()
if [ -n "${BASE_GUARD:-}" ]; then
  install -d -m 0755 "$TMP/base"
  env -i SBX_AUDIT_LOG="$TMP/audit.jsonl" "$BASE_GUARD" serve --socket "$TMP/base/s.sock" \
    --git "$TMP/libexec/git" --group "$GID" 2>"$TMP/base-broker.log" &
  BASE_BROKER=$!
  "$BASE_GUARD" install-hooks "$(dirname "$(readlink -f "$BASE_GUARD")")/.sbx-git-hooks"
  install -d -m 0755 "$TMP/bbin"
  ln -s "$(dirname "$(readlink -f "$BASE_GUARD")")/sbx-git-client" "$TMP/bbin/git"
  BASE=("commit-hook-base=SBX_GIT_BROKER=$TMP/base/s.sock HOME=$TMP/w $TMP/bbin/git -C $TMP/with commit -q --allow-empty -m x"
    "commit-no-hook-base=SBX_GIT_BROKER=$TMP/base/s.sock HOME=$TMP/w $TMP/bbin/git -C $TMP/without commit -q --allow-empty -m x"
    "rev-parse-base=SBX_GIT_BROKER=$TMP/base/s.sock HOME=$TMP/w $TMP/bbin/git -C $TMP/with rev-parse HEAD")
fi
for _ in $(seq 100); do [ -S "$TMP/s.sock" ] && break; sleep 0.02; done
install -d -m 0755 "$TMP/hooks" "$TMP/step" "$TMP/w"
printf '#!/bin/sh\nexit 0\n' > "$TMP/hooks/pre-commit"; chmod 755 "$TMP/hooks/pre-commit"
ln -s "$GUARD" "$TMP/step/pre-commit"
chown 1000 "$TMP/w"
# Whole commits, the real git vs through the broker: a repository with a
# pre-commit hook (through the broker its hook runs by a step) and one
# without (no step runs). The overhead per call is commit-hook minus
# git-commit-hook.
# git is sbx-git-client, as in the sandbox: it forwards the call, and as a
# hook step it sends the hook to the broker itself.
CLIENT=$(dirname "$(readlink -f "$GUARD")")/sbx-git-client
[ -x "$CLIENT" ] || { echo "no $CLIENT: make build" >&2; exit 1; }
install -d -m 0755 "$TMP/bin" "$TMP/cstep"; ln -s "$CLIENT" "$TMP/bin/git"
ln -s "$CLIENT" "$TMP/cstep/pre-commit"
# The guard's hooks directory beside it (uid 1000 could not make it there).
"$GUARD" install-hooks "$(dirname "$(readlink -f "$GUARD")")/.sbx-git-hooks"
for r in with without; do
  git init -q "$TMP/$r"; git -C "$TMP/$r" config user.name a; git -C "$TMP/$r" config user.email a@b
  # Born: rev-parse HEAD fails on an unborn branch (warm-up runs may
  # shuffle it before the first commit).
  git -C "$TMP/$r" commit -q --allow-empty -m init
done
cp "$TMP/hooks/pre-commit" "$TMP/with/.git/hooks/pre-commit"
chown -R 1000 "$TMP/with" "$TMP/without"
cd "$TMP/w"
setpriv --reuid=1000 --regid="$GID" --clear-groups -- env -i PATH=/usr/bin:/bin \
  python3 "$IL" "$RUNS" \
  "hook=$TMP/hooks/pre-commit" \
  "step=SBX_GUARD_TRUSTED_HOOKS=$TMP/hooks $TMP/step/pre-commit" \
  "step+broker=SBX_GIT_BROKER=$TMP/s.sock SBX_GUARD_TRUSTED_HOOKS=$TMP/hooks $TMP/step/pre-commit" \
  "client-step+broker=SBX_GIT_BROKER=$TMP/s.sock SBX_GUARD_HOOKS_ONLY=1 SBX_GUARD_TRUSTED_HOOKS=$TMP/hooks $TMP/cstep/pre-commit" \
  "git-commit-no-hook=HOME=$TMP/w /usr/bin/git -C $TMP/without commit -q --allow-empty -m x" \
  "commit-no-hook=SBX_GIT_BROKER=$TMP/s.sock HOME=$TMP/w $TMP/bin/git -C $TMP/without commit -q --allow-empty -m x" \
  "git-commit-hook=HOME=$TMP/w /usr/bin/git -C $TMP/with commit -q --allow-empty -m x" \
  "commit-hook=SBX_GIT_BROKER=$TMP/s.sock HOME=$TMP/w $TMP/bin/git -C $TMP/with commit -q --allow-empty -m x" \
  "git-rev-parse=HOME=$TMP/w /usr/bin/git -C $TMP/with rev-parse HEAD" \
  "rev-parse=SBX_GIT_BROKER=$TMP/s.sock HOME=$TMP/w $TMP/bin/git -C $TMP/with rev-parse HEAD" \
  "${BASE[@]}"
