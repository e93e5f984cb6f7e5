#!/bin/sh
# Minimal init until sbx-guest exists: as root, apply the firewall (fail
# closed: the container exits and never reaches the agent), then drop every
# capability and become the agent user for the long-running command.
set -eu

say() { echo "sbx-entrypoint: $*" >&2; }

# The uid without a process (each one costs milliseconds of start time).
uid=
while read -r key value _; do
  if [ "$key" = "Uid:" ]; then uid=$value; break; fi
done < /proc/self/status

if [ "$uid" = 0 ]; then
  if command -v sbx-fw >/dev/null 2>&1; then
    sbx-fw init || { say "sbx-fw init failed: refusing to start an unfiltered sandbox"; exit 1; }
  fi
  # The audit log lives outside the workspace; tools running as the agent append to it.
  # (made at build time; only an image that removed it pays for these)
  if [ ! -f /var/log/sbx/audit.jsonl ]; then
    touch /var/log/sbx/audit.jsonl
    chmod 0622 /var/log/sbx/audit.jsonl
  fi
  # A new, empty home gets the newest backup back before the agent starts.
  if command -v sbx-backup >/dev/null 2>&1; then
    HOME=/home/agent setpriv --reuid=1000 --regid=1000 --init-groups --inh-caps=-all \
      --bounding-set=-all --no-new-privs -- sbx-backup -q first-boot \
      || say "sbx-backup first-boot failed: starting with the home as it is"
  fi
  # The git broker: the only way to the real git (0711 in a 0700 directory).
  # Root with only SETUID/SETGID left; orphaned at once, so tini adopts it.
  if [ -x /usr/libexec/sbx/git ] && command -v sbx-git-guard >/dev/null 2>&1; then
    mkdir -p /run/sbx-git && chmod 0755 /run/sbx-git && rm -f /run/sbx-git/broker.sock
    (setsid setpriv --inh-caps=-all --bounding-set=-all,+setuid,+setgid -- \
      sbx-git-guard serve --socket /run/sbx-git/broker.sock --git /usr/libexec/sbx/git \
      </dev/null >>/var/log/sbx/git-broker.log 2>&1 &)
    i=0
    while [ ! -S /run/sbx-git/broker.sock ]; do
      i=$((i + 1))
      [ "$i" -le 200 ] || { say "the git broker did not start (see /var/log/sbx/git-broker.log)"; exit 1; }
      sleep 0.01
    done
  fi
  say "ready"
  exec setpriv --reuid=1000 --regid=1000 --init-groups \
    --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
fi
say "ready"
exec "$@"
