#!/usr/bin/env bash
# sbx-server's per-request token check (issue 41): an access token's
# session is looked up in the in-memory set of ended sessions after its
# signature is checked. Measures the check before (the JWT decode alone)
# against now (decode + lookup), with none and with 10,000 sessions
# ended, in one process; release build (PROFILE=dev for a debug one).
# No server, no database.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --profile "${PROFILE:-release}" --locked -q -p sbx-server --lib -- \
  --ignored --nocapture --test-threads 1 auth::tests::token_check_cost 2>&1 |
  grep -E 'ns a check'
