#!/usr/bin/env bash
# verify-commits' clean room against running the same hooks directly
# (issue 36): 100 commits, a pre-commit hook that takes 1 s. The baseline
# is what the check does without a clean room: in a worktree, each commit's
# tree read over its parent and the hook run, 100 times. The clean room is
# `sbx-run verify-commits` itself (one container for the run). Both in the
# same run, one after the other. The bar: clean room <= 1.5 x baseline.
# Needs Docker and the base image (SBX_BASE_TAG picks it; `sbx-run
# build-base --bootstrap --no-ai-clis` makes it).
# Usage: bench/verify-commits.sh [COMMITS]   (SBX_RUN=path picks the build)
set -euo pipefail
N=${1:-100}
SBX_RUN=${SBX_RUN:-$PWD/target/debug/sbx-run}
TMP=$(mktemp -d /var/tmp/sbx-verify-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export GIT_CONFIG_NOSYSTEM=1 HOME=$TMP GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b \
  GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
R=$TMP/repo
git init -q -b main "$R"
git init -q --bare -b main "$TMP/remote.git"
echo a > "$R/a"; git -C "$R" add a; git -C "$R" commit -qm base
git -C "$R" remote add origin "$TMP/remote.git"; git -C "$R" push -q -u origin main
printf '#!/bin/sh\nsleep 1\ngit diff --cached --name-only | grep -qx bad && exit 3\nexit 0\n' > "$R/.git/hooks/pre-commit"
chmod +x "$R/.git/hooks/pre-commit"
for i in $(seq "$N"); do
  echo "$i" > "$R/f$((i % 10))"; git -C "$R" add -A; git -C "$R" commit -q --no-verify -m "c$i"
done
now() { date +%s.%N; }

# Baseline: the hooks run directly, in a worktree, per commit.
git -C "$R" worktree add -q --detach "$TMP/wt" origin/main
t0=$(now)
for c in $(git -C "$R" rev-list --reverse origin/main..main); do
  git -C "$TMP/wt" checkout -q --detach "$c^"
  git -C "$TMP/wt" read-tree --reset -u "$c"
  git -C "$TMP/wt" hook run --ignore-missing pre-commit
done
t1=$(now)
git -C "$R" worktree remove --force "$TMP/wt"

# The clean room.
XDG_STATE_HOME=$TMP/state "$SBX_RUN" -q verify-commits "$R"
t2=$(now)
direct=$(echo "$t1 - $t0" | bc -l)
room=$(echo "$t2 - $t1" | bc -l)
printf 'commits=%s direct=%.1fs clean-room=%.1fs ratio=%.2f\n' "$N" "$direct" "$room" "$(echo "$room / $direct" | bc -l)"
