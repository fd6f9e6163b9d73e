#!/usr/bin/env bash
# 3-verify.sh [RUN]: score the batch on the 7 mechanics, out of band.
#
# Reads the external system itself (outbox files, or the HTTP sink's journal) and the
# store through read-only `continuum --json` commands; trusts nothing the agent says.
#   1. exactly 5 sent files (or requests)   5. 0 unresolved actions
#   2. each a single line                   6. projected progress is 5
#   3. exactly INV-001..INV-005             7. hash chain verified
#   4. ledger shows 5 completed actions
# Prints N/7; exits 0 only at 7/7. RUN defaults to the run id 1-setup.sh recorded.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
ensure_venv
load_work
exec "$PY" "$KIT/lib/score.py" "$WORK" "$@"
