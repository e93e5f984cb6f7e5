#!/usr/bin/env bash
# The start-time check for masked files in git's objects (issue 38, class 3)
# on a repository of 10,000 commits and 5,000 files, side by side in one
# hyperfine run: `sbx-run start` of a stopped sandbox without the check
# (NOCHECK: a build with the call switched off), with it and no cache, and
# with it cached (an unchanged repository). Then the check's git commands
# alone. Usage: NOCHECK=/path/to/sbx-run-without-check bash bench/git-secrets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX:-$PWD/target/debug/sbx-run}
export SBX_BIN_DIR=${SBX_BIN_DIR:-$(dirname "$SBX")}
: "${NOCHECK:?a sbx-run built with the check switched off}"
RUNS=${RUNS:-5}
WORK=/var/tmp/sbx-bench-gitsecrets
REPO=$WORK/repo
CACHE=${XDG_STATE_HOME:-$HOME/.local/state}/sbx/git-secrets
if [ ! -d "$REPO/.git" ]; then
  rm -rf "$WORK"; mkdir -p "$WORK"; git init -q -b main "$REPO"
  python3 - <<'PY' | git -C "$REPO" fast-import --quiet
import sys
out = sys.stdout.buffer
def blob(d):
    out.write(b"data %d\n" % len(d)); out.write(d); out.write(b"\n")
for c in range(10000):
    out.write(b"commit refs/heads/main\ncommitter B <b@x> %d +0000\n" % (1700000000 + c))
    blob(b"c%d" % c)
    files = range(5000) if c == 0 else [(c * 7919) % 5000]
    for f in files:
        out.write(b"M 100644 inline d%02d/s%02d/f%04d.txt\n" % (f % 50, (f // 50) % 10, f))
        blob(b"file %d v%d\n" % (f, c))
PY
  git -C "$REPO" checkout -q main
  printf '/.agent-sandbox/\n' > "$REPO/.gitignore"
  chown -R 1000:1000 "$WORK"
fi
G="git -c safe.directory=$REPO -C $REPO"
echo "commits: $($G rev-list --count --all), files: $($G ls-files | wc -l)"
TMP=$(mktemp -d)
summary() {  # median, min and CPU (user+sys, mean) of each command
  python3 -c 'import json,statistics,sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("%-52s median %7.1f ms  min %7.1f ms  cpu %6.1f ms" % (r["command"], statistics.median(r["times"])*1e3, min(r["times"])*1e3, (r["user"]+r["system"])*1e3))' "$1"
}
"$SBX" -q build-base --bootstrap --no-ai-clis
[ -d "$REPO/.agent-sandbox" ] || "$SBX" -q init "$REPO"
"$SBX" -q start "$REPO"
trap '"$SBX" -q rm --volumes "$REPO" || true; rm -rf "$TMP"' EXIT
hyperfine --style basic --runs "$RUNS" --export-json "$TMP/start.json" \
  --prepare "$SBX -q stop $REPO; sleep 1" -n "start, no check (baseline)" "$NOCHECK -q start $REPO" \
  --prepare "$SBX -q stop $REPO; rm -rf $CACHE; sleep 1" -n "start, check, no cache" "$SBX -q start $REPO" \
  --prepare "$SBX -q stop $REPO; sleep 1" -n "start, check cached" "$SBX -q start $REPO" >/dev/null
hyperfine --style basic --runs 10 -N --export-json "$TMP/git.json" \
  -n "check alone: git log --all --reflog --name-only" \
  "$G log -z --all --reflog --no-renames --diff-merges=first-parent --name-only --format=%x01%H" \
  -n "check alone: git ls-files" "$G ls-files -z" \
  -n "cache key: git show-ref --head" "$G show-ref --head" >/dev/null
summary "$TMP/start.json"
summary "$TMP/git.json"
