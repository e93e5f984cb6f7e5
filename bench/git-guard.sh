#!/usr/bin/env bash
# sbx-git-guard against the real git it wraps:
#   median added latency per call < 1 ms for `git status`, `git rev-parse HEAD`
#   on a small repository and `git commit` with a trivial hook; `git reset
#   --hard HEAD` without and with a stash (with one, ref-moving commands route
#   hooks through the guard's own directory, so its reference-transaction
#   step runs once per transaction state) and a push of an
#   up-to-date branch to a local bare remote (its pre-push step runs) and
#   of a branch one commit ahead of it (the step's checks ask git), and
#   `git commit` in a repository that holds a stash (its prepared step
#   checks the new commit's parents), with and without a pre-commit hook;
#   also a bash wrapper of the classic shape (a regex over "$*", then exec);
#   and the sandbox's path: sbx-git-client (the sandbox's libc-free `git`)
#   handing the call to the guard's root broker (sbx-git-guard serve), which
#   decides and execs git by fd in a process forked ahead of the call.
# Then `rev-parse HEAD` and `status --short` through the real git, the
# guard and the broker interleaved call by call (bench/interleave.py);
# OLD_GUARD=/path/to/an/older/sbx-git-guard adds that build's broker to it
# (called through that guard itself as the client, as images before
# sbx-git-client did). Last, with perf installed, the calling process's
# CPU per call (client; OLD_GUARD's guard as client).
set -euo pipefail
cd "$(dirname "$0")/.."
# The statically linked guard `make build` installs.
[ -x target/release/sbx-git-guard ] && [ -x target/release/sbx-git-client ] || make build >/dev/null
GUARD=$PWD/target/release/sbx-git-guard
CLIENT=$PWD/target/release/sbx-git-client
IL=$PWD/bench/interleave.py
REAL=${REAL_GIT:-/usr/bin/git}
TMP=$(mktemp -d)
BPID=
OPID=
trap '[ -z "$BPID" ] || kill "$BPID"; [ -z "$OPID" ] || kill "$OPID"; rm -rf "$TMP"' EXIT
RUNS=${RUNS:-300}

mkdir -p "$TMP/guard" "$TMP/client" "$TMP/bash" "$TMP/home"
ln -s "$GUARD" "$TMP/guard/git"
ln -s "$CLIENT" "$TMP/client/git"
# A classic git-wrapper.sh, in shape: string matching on the joined argv.
cat > "$TMP/bash/git" <<EOF
#!/bin/bash
if [[ "\$*" =~ (^|[[:space:]])(commit).*(--no-verify|[[:space:]]-n([[:space:]]|$)) ]] ||
   [[ "\$*" =~ (^|[[:space:]])push.*(--force|[[:space:]]-f([[:space:]]|$)) ]]; then
  echo "blocked" >&2; exit 1
fi
exec $REAL "\$@"
EOF
chmod +x "$TMP/bash/git"
printf '[user]\n\tname = b\n\temail = b@b\n' > "$TMP/home/.gitconfig"

R="$TMP/repo"
"$REAL" init -q -b master "$R"
"$REAL" -C "$R" config core.logAllRefUpdates false
for i in $(seq 1 50); do echo "$i" > "$R/f$i"; done
env HOME="$TMP/home" "$REAL" -C "$R" add . >/dev/null
env HOME="$TMP/home" "$REAL" -C "$R" commit -qm init
printf '#!/bin/sh\nexit 0\n' > "$R/.git/hooks/pre-commit"; chmod +x "$R/.git/hooks/pre-commit"

# The broker, as the image lays it out: git execute-only in a 0700 dir.
install -d -m 0700 "$TMP/libexec"
install -m 0711 "$REAL" "$TMP/libexec/git"
"$GUARD" serve --socket "$TMP/broker.sock" --git "$TMP/libexec/git" --group 2575 2>"$TMP/broker.log" &
BPID=$!
for _ in $(seq 100); do [ -S "$TMP/broker.sock" ] && break; sleep 0.02; done

summarize() { awk -F, 'NR > 1 { printf "%.3f ", $4 * 1000 } END { print "" }' "$1"; }

BASE=$("$REAL" -C "$R" rev-parse HEAD)
# Commits would grow the branch and its reflog run after run, slowing
# whichever command hyperfine runs last; put them back before each run.
RESET="$REAL -C $R update-ref refs/heads/master $BASE"
# A push that sends one commit: the branch one ahead, the remote put back.
echo new > "$R/new"
env HOME="$TMP/home" "$REAL" -C "$R" add new
env HOME="$TMP/home" "$REAL" -C "$R" commit -qm new
NEW=$("$REAL" -C "$R" rev-parse HEAD)
$RESET
env HOME="$TMP/home" "$REAL" -C "$R" reset -q --hard
printf '%s -C %s update-ref refs/heads/master %s\n%s --git-dir=%s update-ref refs/heads/master %s\n' \
  "$REAL" "$R" "$NEW" "$REAL" "$TMP/remote.git" "$BASE" > "$TMP/ahead.sh"
AHEAD="/bin/sh $TMP/ahead.sh"
# An up-to-date push: both back at the base (a push-new row leaves them ahead).
printf '%s -C %s update-ref refs/heads/master %s\n%s --git-dir=%s update-ref refs/heads/master %s\n' \
  "$REAL" "$R" "$BASE" "$REAL" "$TMP/remote.git" "$BASE" > "$TMP/even.sh"
EVEN="/bin/sh $TMP/even.sh"

run() { # name, git args...
  local name=$1; shift
  local args="$*"
  cd "$R"
  env -i HOME="$TMP/home" SBX_REAL_GIT="$REAL" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
      GIT_CONFIG_NOSYSTEM=1 LANG=C PATH=/usr/bin:/bin \
    hyperfine -N --style basic --warmup 20 --runs "$RUNS" --export-csv "$TMP/$name.csv" \
      --prepare "${PREP:-$RESET}" \
      "$REAL $args" "$TMP/guard/git $args" "$TMP/bash/git $args" >/dev/null 2>&1
  cd - >/dev/null
  read -r a b c < <(summarize "$TMP/$name.csv")
  echo "[$name] git $args: real ${a} ms   guard ${b} ms (+$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms)   bash wrapper ${c} ms (+$(awk -v a="$a" -v c="$c" 'BEGIN{printf "%.3f", c-a}') ms)"
}

# The same calls through the broker, beside the real git in one run.
run_broker() { # name, git args...
  local name=$1; shift
  local args="$*"
  cd "$R"
  env -i HOME="$TMP/home" SBX_AUDIT_LOG="$TMP/audit.jsonl" SBX_GIT_BROKER="$TMP/broker.sock" \
      GIT_CONFIG_NOSYSTEM=1 LANG=C PATH=/usr/bin:/bin \
    hyperfine -N --style basic --warmup 20 --runs "$RUNS" --export-csv "$TMP/b$name.csv" \
      --prepare "${PREP:-$RESET}" \
      "$REAL $args" "$TMP/client/git $args" >/dev/null 2>&1
  cd - >/dev/null
  read -r a b < <(summarize "$TMP/b$name.csv")
  echo "[$name] git $args: real ${a} ms   client via broker ${b} ms (+$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b-a}') ms)"
}

echo "== git-guard: added latency per call ($("$REAL" --version))"
run status status --short
run revparse rev-parse HEAD
run commit commit -q --allow-empty -m bench
run reset reset -q --hard HEAD
# With a stash, ref-moving commands run the guard's reference-transaction step.
echo stashed > "$R/f1"
env HOME="$TMP/home" "$REAL" -C "$R" stash push -q
run reset-stash reset -q --hard HEAD
"$REAL" init -q --bare "$TMP/remote.git"
"$REAL" -C "$R" push -q "$TMP/remote.git" master
PREP=$EVEN run push push -q "$TMP/remote.git" master
PREP=$AHEAD run push-new push -q "$TMP/remote.git" master
echo "== through the broker (the sandbox's path)"
run_broker status status --short
run_broker revparse rev-parse HEAD
run_broker commit commit -q --allow-empty -m bench
run_broker reset-stash reset -q --hard HEAD
PREP=$EVEN run_broker push push -q "$TMP/remote.git" master
PREP=$AHEAD run_broker push-new push -q "$TMP/remote.git" master
# The three side by side, interleaved call by call in random order (the
# noise of a shared machine spreads evenly over them), no launcher between:
# min / p25 / median, and the load average while it ran.
interleaved() { # args...
  local args="$*" extra=() prep=()
  if [ -n "${OLD_GUARD:-}" ]; then
    extra=("old-broker=SBX_GIT_BROKER=$TMP/old.sock $TMP/old/git $args")
  fi
  [ -z "${PREP:-}" ] || prep=(--prepare "$PREP")
  cd "$R"
  env -i HOME="$TMP/home" SBX_REAL_GIT="$REAL" SBX_AUDIT_LOG="$TMP/audit.jsonl" \
      GIT_CONFIG_NOSYSTEM=1 LANG=C PATH=/usr/bin:/bin \
    python3 "$IL" "${prep[@]}" "$RUNS" "real=$REAL $args" "guard=$TMP/guard/git $args" \
      "broker=SBX_GIT_BROKER=$TMP/broker.sock $TMP/client/git $args" "${extra[@]}" > "$TMP/il.txt"
  cd - >/dev/null
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  awk -v args="$args" -v load="$load" -v label="${LABEL:+ ($LABEL)}" '
    { n[NR] = $1; mn[NR] = $2; p25[NR] = $3; med[NR] = $4 }
    END {
      printf "[interleaved] git %s%s (load %s), min / p25 / median ms:\n", args, label, load
      for (i = 1; i <= NR; i++)
        printf "  %-10s %6.3f %6.3f %6.3f   added p25 %+.3f  median %+.3f\n", n[i], mn[i], p25[i], med[i], p25[i] - p25[1], med[i] - med[1]
    }' "$TMP/il.txt"
}

if [ -n "${OLD_GUARD:-}" ]; then
  mkdir -p "$TMP/old"
  # That build's client as its `git` where one lies beside it, else the guard.
  OLD_CLIENT=$(dirname "$OLD_GUARD")/sbx-git-client
  if [ -x "$OLD_CLIENT" ]; then ln -s "$OLD_CLIENT" "$TMP/old/git"; else ln -s "$OLD_GUARD" "$TMP/old/git"; fi
  "$OLD_GUARD" serve --socket "$TMP/old.sock" --git "$TMP/libexec/git" --group 2575 2>"$TMP/old.log" &
  OPID=$!
  for _ in $(seq 100); do [ -S "$TMP/old.sock" ] && break; sleep 0.02; done
fi
echo "== real git, guard and broker interleaved (OLD_GUARD: that build's broker too)"
interleaved rev-parse HEAD
interleaved status --short
echo "== the checking hook steps (reference-transaction prepared, pre-push), interleaved"
interleaved reset -q --hard HEAD
PREP=$EVEN interleaved push -q "$TMP/remote.git" master
PREP=$AHEAD interleaved push -q "$TMP/remote.git" master
# `git commit` where a stash exists: its prepared step checks the commit's
# parents (sbx-git-client answers a plain commit's itself), with the
# repository's pre-commit hook and without one.
LABEL="a stash, pre-commit" PREP=$RESET interleaved commit -q --allow-empty -m bench
mv "$R/.git/hooks/pre-commit" "$R/.git/pre-commit.off"
LABEL="a stash, no hook" PREP=$RESET interleaved commit -q --allow-empty -m bench
mv "$R/.git/pre-commit.off" "$R/.git/hooks/pre-commit"
# The same without a stash in the repository (its checks ask git less).
"$REAL" -C "$R" stash drop -q
PREP=$AHEAD run_broker push-new-nostash push -q "$TMP/remote.git" master
PREP=$AHEAD interleaved push -q "$TMP/remote.git" master

# CPU per call of the calling process alone (perf stat task-clock, which a
# busy machine disturbs far less than wall time): the client, and with
# OLD_GUARD that build's guard as its own client.
if command -v perf >/dev/null 2>&1; then
  cpu() { # name, socket, program
    local ms
    ms=$(cd "$R" && env -i HOME="$TMP/home" SBX_AUDIT_LOG="$TMP/audit.jsonl" SBX_GIT_BROKER="$2" \
        GIT_CONFIG_NOSYSTEM=1 LANG=C PATH=/usr/bin:/bin \
      perf stat -x, -r "$RUNS" -e task-clock "$3" rev-parse HEAD 2>&1 >/dev/null | awk -F, '/task-clock/ { print $1 }')
    echo "  $1: ${ms} ms CPU per call (rev-parse HEAD, $RUNS calls)"
  }
  echo "== the calling process's CPU (perf stat)"
  cpu client "$TMP/broker.sock" "$TMP/client/git"
  [ -z "${OLD_GUARD:-}" ] || cpu old-client "$TMP/old.sock" "$TMP/old/git"
fi
