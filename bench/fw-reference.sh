#!/usr/bin/env bash
# The baseline for bench/fw.sh: the shape of the reference devcontainer's
# init-firewall.sh, written here for the benchmark (not shipped): flush,
# one `dig` per name, one `ipset add` per address and range, one `iptables`
# call per rule, curl + jq for GitHub's meta. Same names, same meta URL.
# Usage: fw-reference.sh META_URL CA_FILE NAME...
set -euo pipefail
meta=$1 ca=$2; shift 2
iptables -P INPUT ACCEPT; iptables -P OUTPUT ACCEPT; iptables -P FORWARD ACCEPT
iptables -F; iptables -X
ipset destroy allowed-domains 2>/dev/null || true
iptables -A OUTPUT -p udp --dport 53 -j ACCEPT
iptables -A INPUT -p udp --sport 53 -j ACCEPT
iptables -A INPUT -i lo -j ACCEPT
iptables -A OUTPUT -o lo -j ACCEPT
ipset create allowed-domains hash:net
for cidr in $(curl -fsS --cacert "$ca" "$meta" | jq -r '(.web + .api + .git)[]' | sort -u); do
  case $cidr in *:*) continue ;; esac
  ipset add allowed-domains "$cidr" -exist
done
for name in "$@"; do
  for ip in $(dig +short +time=2 +tries=1 A "$name" | grep -E '^[0-9.]+$' || true); do
    ipset add allowed-domains "$ip" -exist
  done
done
gw=$(ip route | awk '/default/ { print $3; exit }')
iptables -A INPUT -s "${gw%.*}.0/24" -j ACCEPT
iptables -A OUTPUT -d "${gw%.*}.0/24" -j ACCEPT
iptables -P INPUT DROP; iptables -P FORWARD DROP; iptables -P OUTPUT DROP
iptables -A INPUT -m state --state ESTABLISHED,RELATED -j ACCEPT
iptables -A OUTPUT -m state --state ESTABLISHED,RELATED -j ACCEPT
iptables -A OUTPUT -m set --match-set allowed-domains dst -j ACCEPT
iptables -A OUTPUT -j REJECT --reject-with icmp-admin-prohibited
