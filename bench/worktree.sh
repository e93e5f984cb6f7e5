#!/usr/bin/env bash
# Branch mode, side by side in one run:
#   1. provisioning a new worktree of a 5,000-file repository
#      (`sbx-worktree provision` on a shelf already cloned) vs a plain
#      `git worktree add` on the same clone: target <= 1.5x;
#   2. `sbx-run start --branch B2` while B1 runs vs a bind-mode
#      `sbx-run start` (each from stopped-and-removed; B2's worktree there,
#      and removed first, so the start's guest provisions it): target <= 1.3x;
#   3. disk: du of the shelf with N=4 branch worktrees vs the clone alone.
# PHASES="provision start du" picks phases; RUNS sets the runs. MODE=alt
# (the default) runs the commands of a phase in turn, round after round,
# and prints each one's min and median and their ratios to the baseline:
# on a shared machine the load drifts less between neighbours than
# between hyperfine's blocks of runs. MODE=hyperfine: hyperfine's blocks.
# Release builds: SBX_BIN_DIR=target/release, with the base image built
# from them (sbx-run build-base --bootstrap --no-ai-clis, same SBX_BASE_TAG).
set -euo pipefail
cd "$(dirname "$0")/.."
PHASES=${PHASES:-"provision start du"}
RUNS=${RUNS:-10}
export SBX_BASE_TAG=${SBX_BASE_TAG:-latest}
BIN=${SBX_BIN_DIR:-$PWD/target/debug}
[ -x "$BIN/sbx-worktree" ] || cargo build -q -p sbx-worktree
TMP=$(mktemp -d /var/tmp/sbx-bench-wt.XXXXXX)
cleanup() {
  if [ -n "${STARTED:-}" ]; then
    for b in b1 b2; do "$BIN/sbx-run" -q rm --branch=$b -C "$TMP/app" >/dev/null 2>&1 || true; done
    "$BIN/sbx-run" -q rm --volumes -C "$TMP/app" >/dev/null 2>&1 || true
    # rm --volumes leaves the branches' home volumes (b1, b2, n<k>).
    docker volume ls -q --filter "label=sbx.workspace=$TMP/app" | xargs -r docker volume rm >/dev/null 2>&1 || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
MODE=${MODE:-alt}

# alt NAME PREPARE COMMAND [NAME PREPARE COMMAND]...: RUNS rounds, each
# running every prepare (untimed) and command (timed) in turn; the first
# is the baseline.
alt() {
  local -a names preps cmds
  while [ $# -gt 0 ]; do names+=("$1"); preps+=("$2"); cmds+=("$3"); shift 3; done
  local n=${#names[@]} i r s
  for ((i = 0; i < n; i++)); do : > "$TMP/alt.$i"; done
  for ((r = 0; r < RUNS; r++)); do
    for ((i = 0; i < n; i++)); do
      sh -c "${preps[$i]}" >/dev/null 2>&1 || true
      s=$(date +%s%N)
      sh -c "${cmds[$i]}" >/dev/null || { echo "failed: ${cmds[$i]}" >&2; return 1; }
      echo $((($(date +%s%N) - s) / 1000000)) >> "$TMP/alt.$i"
    done
  done
  local bmin bmed min med
  for ((i = 0; i < n; i++)); do
    min=$(sort -n "$TMP/alt.$i" | head -1)
    med=$(sort -n "$TMP/alt.$i" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}')
    if ((i == 0)); then bmin=$min bmed=$med; fi
    printf '%-48s min %6d ms  median %6d ms  ratio min %s  median %s\n' "${names[$i]}" "$min" "$med" \
      "$(awk -v a="$min" -v b="$bmin" 'BEGIN {printf "%.2f", a/b}')" \
      "$(awk -v a="$med" -v b="$bmed" 'BEGIN {printf "%.2f", a/b}')"
  done
}
export HOME=$TMP/home GIT_TERMINAL_PROMPT=0
mkdir -p "$HOME"
printf '[user]\n\tname = b\n\temail = b@b\n[init]\n\tdefaultBranch = main\n' > "$HOME/.gitconfig"

# A 5,000-file repository, one commit.
R=$TMP/app
git init -q "$R"
for d in $(seq 1 50); do
  mkdir -p "$R/d$d"
  for f in $(seq 1 100); do echo "$d $f" > "$R/d$d/f$f.txt"; done
done
git -C "$R" add . && git -C "$R" commit -qm init

if [[ " $PHASES " == *" provision "* ]]; then
  S=$TMP/shelf
  "$BIN/sbx-worktree" -q provision --shelf "$S" --host-repo "$R" --branch seed
  # Both make a new branch's worktree on the same clone; prepare removes
  # the previous run's worktree and branch, and syncs (the disk is shared:
  # writeback of one run must not land in the next).
  PREP="git -C $S/repo worktree remove --force $S/worktrees/x 2>/dev/null; git -C $S/repo branch -qD x 2>/dev/null; sync; true"
  if [ "$MODE" = hyperfine ]; then
    hyperfine -N --runs "$RUNS" --warmup 2 --export-csv "$TMP/prov.csv" \
      --prepare "sh -c '$PREP'" \
      -n "git worktree add" "git -C $S/repo worktree add -q --no-track -b x $S/worktrees/x origin/main" \
      -n "sbx-worktree provision" "$BIN/sbx-worktree -q provision --shelf $S --host-repo $R --branch x"
  else
    alt "git worktree add" "$PREP" "git -C $S/repo worktree add -q --no-track -b x $S/worktrees/x origin/main" \
      "sbx-worktree provision" "$PREP" "$BIN/sbx-worktree -q provision --shelf $S --host-repo $R --branch x"
    # The same with a new name each round and nothing deleted: the
    # deletion of the previous 5,000 files (ext4, online discard here)
    # slows the next checkout by seconds, unevenly.
    echo 0 > "$TMP/p"
    INC="sh -c 'echo \$((\$(cat $TMP/p)+1)) > $TMP/p'"
    alt "git worktree add, new name" "$INC" "sh -c 'git -C $S/repo worktree add -q --no-track -b g\$(cat $TMP/p) $S/worktrees/g\$(cat $TMP/p) origin/main'" \
      "sbx-worktree provision, new name" "$INC" "sh -c '$BIN/sbx-worktree -q provision --shelf $S --host-repo $R --branch s\$(cat $TMP/p)'"
  fi
fi

if [[ " $PHASES " == *" start "* ]]; then
  STARTED=1
  chown -R 1000:1000 "$R"
  "$BIN/sbx-run" -q start --branch=b1 -C "$R"
  "$BIN/sbx-run" -q start -C "$R"
  "$BIN/sbx-run" -q checkout b2 -C "$R" >/dev/null
  # Each run starts from no container (the image, volumes and, for b2, the
  # worktree exist), as a new sandbox would.
  # "new worktree" also removes b2's worktree (in a
  # throwaway container on the shelf volume), so the start provisions it.
  SHELF=$(docker volume ls -q --filter "label=sbx.workspace=$R" --filter name=agent-sbx-repo-)
  RMWT="docker run --rm --user 0:0 --entrypoint rm --mount type=volume,source=$SHELF,target=/repo-shelf agent-sandbox-base:$SBX_BASE_TAG -rf /repo-shelf/worktrees/b2"
  # "new branch" starts a branch never seen before (n<k>, k counted in a
  # file), so no worktree of 5,000 files was deleted just before: that
  # deletion's cost on this disk (ext4, online discard) lands in the next
  # checkout, as in the row above.
  echo 0 > "$TMP/k"
  NEXT="sh -c 'k=\$(cat $TMP/k); $BIN/sbx-run -q rm --branch=n\$k -C $R 2>/dev/null; echo \$((k+1)) > $TMP/k'"
  NEW="sh -c 'exec $BIN/sbx-run -q start --branch=n\$(cat $TMP/k) -C $R'"
  if [ "$MODE" = hyperfine ]; then
    hyperfine -N --runs "$RUNS" --warmup 1 --export-csv "$TMP/start.csv" \
      -n "start (bind)" --prepare "$BIN/sbx-run -q rm -C $R" "$BIN/sbx-run -q start -C $R" \
      -n "start --branch b2 (b1 running)" --prepare "$BIN/sbx-run -q rm --branch=b2 -C $R" "$BIN/sbx-run -q start --branch=b2 -C $R" \
      -n "start --branch b2, new worktree (b1 running)" --prepare "sh -c '$BIN/sbx-run -q rm --branch=b2 -C $R && $RMWT'" "$BIN/sbx-run -q start --branch=b2 -C $R" \
      -n "start --branch n<k>, new branch (b1 running)" --prepare "$NEXT" "$NEW"
  else
    # One round unmeasured: the first start of each kind.
    RUNS=1 alt x "$BIN/sbx-run -q rm -C $R" "$BIN/sbx-run -q start -C $R" >/dev/null
    alt "start (bind)" "$BIN/sbx-run -q rm -C $R" "$BIN/sbx-run -q start -C $R" \
      "start --branch b2 (b1 running)" "$BIN/sbx-run -q rm --branch=b2 -C $R" "$BIN/sbx-run -q start --branch=b2 -C $R" \
      "start --branch b2, new worktree (b1 running)" "$BIN/sbx-run -q rm --branch=b2 -C $R && $RMWT" "$BIN/sbx-run -q start --branch=b2 -C $R" \
      "start --branch n<k>, new branch (b1 running)" "$NEXT" "$NEW"
  fi
  k=$(cat "$TMP/k")
  "$BIN/sbx-run" -q rm --branch=n$k -C "$R" >/dev/null 2>&1 || true
fi

if [[ " $PHASES " == *" du "* ]]; then
  S=$TMP/du
  "$BIN/sbx-worktree" -q provision --shelf "$S" --host-repo "$R" --branch w1
  git -C "$R" count-objects -vH | grep size-pack
  echo "host checkout:    $(du -sk --exclude=.git "$R" | cut -f1) KiB files, $(du -sk "$R/.git" | cut -f1) KiB .git"
  echo "shelf clone:      $(du -sk "$S/repo" | cut -f1) KiB"
  for b in w2 w3 w4; do "$BIN/sbx-worktree" -q provision --shelf "$S" --host-repo "$R" --branch $b; done
  echo "shelf, N=4:       $(du -sk "$S" | cut -f1) KiB (clone $(du -sk "$S/repo" | cut -f1) KiB + worktrees $(du -sk "$S/worktrees" | cut -f1) KiB)"
  echo "4 full clones:    $(( 4 * $(du -sk "$R" | cut -f1) )) KiB"
fi
