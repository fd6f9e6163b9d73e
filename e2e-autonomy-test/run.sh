#!/usr/bin/env bash
# run.sh --scripted [--http]: play the whole invoice-batch scenario with a scripted MCP agent.
#
#   1. 1-setup.sh: fresh store, five invoices, the hosts' MCP configuration
#   2. session 1: the agent (an MCP client of continuum-mcp) sends INV-001, INV-002 and
#      INV-003, and is SIGKILLed together with its server between the send of INV-003
#      and its completion
#   3. 2-inspect.sh: the read-only mid-run view (INV-003 reported unknown)
#   4. session 2: a fresh agent resumes through continuum_resume, reconciles INV-003 by
#      checking the external system, skips what was done, sends INV-004 and INV-005
#   5. a human confirms the agent's self-reported progress (continuum confirm RUN --yes)
#   6. 3-verify.sh: the 7 mechanics, scored out of band; prints 7/7 and exits 0 only then
# --http: the "hidden side effect" variant: invoices go to a local HTTP sink on 127.0.0.1
# (started and stopped here) instead of files, and the scorer counts what it received.
# --host claude-code|gemini|codex|kilo: sessions 1 and 2 are run by that REAL host
# (installed by `make hosts`) against the scripted model of tests/hosts/, with a real
# SIGKILL of the host and its continuum-mcp right after the send of INV-003 (files mode).
# Add --live (Claude Code) to use the real model with the ANTHROPIC_API_KEY in your
# environment (not run in CI).
# The working directory is $KIT_WORK (default e2e-autonomy-test/work). To run the same
# scenario with Claude Code, Gemini CLI or Kilo Code by hand, see README.md here.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

SCRIPTED=0 HTTP=0 HOST="" LIVE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --scripted) SCRIPTED=1 ;;
        --http) HTTP=1 ;;
        --host) shift; HOST="${1:-}" ;;
        --host=*) HOST="${1#--host=}" ;;
        --live) LIVE=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
if [ -n "$HOST" ]; then
    case "$HOST" in claude-code|gemini|codex|kilo) ;; *) die "--host takes claude-code, gemini, codex or kilo" ;; esac
    [ "$HTTP" = 0 ] || die "--host runs the files variant only"
    SCRIPTED=1
fi
[ "$LIVE" = 0 ] || [ "$HOST" = claude-code ] || die "--live needs --host claude-code"
if [ "$SCRIPTED" != 1 ]; then
    usage >&2
    die "pass --scripted or --host HOST (a host by hand: see $KIT/README.md)"
fi

step() { say ""; say "== $*"; }

ensure_venv
step "1. setup"
if [ "$HTTP" = 1 ]; then bash "$KIT/1-setup.sh" --http; else bash "$KIT/1-setup.sh"; fi
load_work
SINK_ARGS=()
if [ "$HTTP" = 1 ]; then
    # The sink prints its URL (ephemeral port) as its first line: reading it is the
    # readiness signal, no polling.
    exec 3< <(exec "$PY" "$KIT/lib/sink.py" "$WORK/sink/received.jsonl" 2>>"$WORK/logs/sink.stderr")
    SINK_PID=$!
    stop_sink() { kill -TERM "$SINK_PID" 2>/dev/null || true; wait "$SINK_PID" 2>/dev/null || true; }
    trap stop_sink EXIT
    IFS= read -r SINK_URL <&3 || die "the HTTP sink did not start; see $WORK/logs/sink.stderr"
    printf 'KIT_SINK_URL=%s\n' "$SINK_URL" >> "$WORK/kit.env"
    say "HTTP sink listening on $SINK_URL (pid $SINK_PID)"
    SINK_ARGS=(--sink "$SINK_URL")
fi

if [ -n "$HOST" ]; then
    HOST_ARGS=(--host "$HOST")
    [ "$LIVE" = 0 ] || HOST_ARGS+=(--live)
    session() { "$PY" "$KIT/lib/host_session.py" "$WORK" "${HOST_ARGS[@]}" --run-id "$KIT_RUN" "$@"; }
else
    session() {
        local n="$1"; shift
        "$PY" "$KIT/lib/session.py" "$WORK" "$WORK/logs/session-$n.stderr" --run-id "$KIT_RUN" "$@" "${SINK_ARGS[@]}"
    }
fi

step "2. session 1: the agent sends invoices; it is SIGKILLed between the send of INV-003 and its completion"
if [ -n "$HOST" ]; then session --session 1 --kill-after-send INV-003; else session 1 --kill-after-send INV-003; fi

step "3. mid-run view (2-inspect.sh, read-only)"
bash "$KIT/2-inspect.sh"

step "4. session 2: a fresh agent resumes through continuum_resume and finishes the batch"
if [ -n "$HOST" ]; then session --session 2; else session 2; fi

step "5. a human reviews and confirms the agent's self-reported progress"
say "\$ continuum confirm $KIT_RUN --yes"
set +e
cx confirm "$KIT_RUN" --yes 2>&1 | sed 's/^/   /'
confirmed=${PIPESTATUS[0]}
set -e
[ "$confirmed" = 0 ] || say "   (confirm exit $confirmed: the verdict is not resume)"

step "6. score (3-verify.sh)"
bash "$KIT/3-verify.sh" && [ "$confirmed" = 0 ]
