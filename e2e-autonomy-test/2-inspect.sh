#!/usr/bin/env bash
# 2-inspect.sh [RUN]: a read-only view of the batch, safe to run at any moment (mid-run too).
#
# Shows what the external system holds (outbox files, or the HTTP sink's journal) and
# what continuum says: the run's status, its action ledger, and the resume verdict with
# its exit code. Nothing is written: every command used here is read-only.
set -uo pipefail
. "$(dirname "$0")/lib/common.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
ensure_venv
load_work
RUN="${1:-$KIT_RUN}"

meaning() {
    case "$1" in
        0) echo "ok" ;; 2) echo "not found" ;; 3) echo "integrity failure" ;;
        10) echo "repair or replan first" ;;
        20) echo "a human is needed: an unresolved action or unconfirmed state" ;;
        30) echo "rollback, abort or not resumable" ;; *) echo "error" ;;
    esac
}
show() {  # show TITLE CMD...: run a read-only command, indent it, report its exit code
    local title="$1" rc; shift
    say "-- $title"
    "$@" 2>&1 | sed 's/^/   /'
    rc=${PIPESTATUS[0]}
    say "   (exit $rc: $(meaning "$rc"))"
    return "$rc"
}

say "-- external system ($KIT_MODE mode)"
if [ "$KIT_MODE" = http ]; then
    if [ -s "$WORK/sink/received.jsonl" ]; then
        "$PY" -c 'import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    print("   received #%d: %s (%s)" % (r["n"], r["invoice"], r["receipt"]))' \
            "$WORK/sink/received.jsonl"
    else
        say "   the sink has received nothing yet"
    fi
else
    found=0
    for f in "$WORK"/outbox/*; do
        [ -f "$f" ] || continue
        found=1
        say "   $(basename "$f"): $(wc -l < "$f") line(s)"
    done
    [ "$found" = 1 ] || say "   the outbox is empty"
fi
show "continuum runs" cx runs
show "continuum status $RUN" cx status "$RUN"
if [ $? = 2 ]; then say "   (the agent has not started the run yet)"; exit 0; fi  # 20: go on
show "continuum actions $RUN" cx actions "$RUN"
show "continuum resume $RUN" cx resume "$RUN"
exit 0
