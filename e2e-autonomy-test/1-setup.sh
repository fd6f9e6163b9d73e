#!/usr/bin/env bash
# 1-setup.sh [--http]: a fresh working directory for the invoice-batch kit.
#
# Creates, under $KIT_WORK (default e2e-autonomy-test/work):
#   continuum.db           a fresh, empty continuum store
#   invoices/INV-00N.txt   five invoices, one line each (the input)
#   outbox/                where a sent invoice lands (files mode)
#   sink/                  the HTTP sink's journal (--http mode)
#   .mcp.json              Claude Code's project MCP configuration for continuum-mcp
#   .gemini/settings.json  Gemini CLI's
#   .kilo/kilo.jsonc       Kilo Code's
#   .codex/config.toml     Codex's
#   kit.env                what the other scripts read (mode, run id, store)
# An existing kit working directory is wiped first; any other directory is refused.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

MODE=files
for arg in "$@"; do
    case "$arg" in
        --http) MODE=http ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $arg (use --http or nothing)" ;;
    esac
done
RUN_ID="${KIT_RUN:-invoice-batch}"

ensure_venv
if [ -e "$WORK" ]; then
    [ -f "$WORK/kit.env" ] || die "$WORK exists and is not a kit working directory; set KIT_WORK elsewhere"
    rm -rf "$WORK"
fi
mkdir -p "$WORK/invoices" "$WORK/logs"
if [ "$MODE" = files ]; then mkdir "$WORK/outbox"; else mkdir "$WORK/sink"; fi
DB="$WORK/continuum.db"

customers=("Acme GmbH" "Globex Ltd" "Initech SA" "Umbrella BV" "Stark Oy")
amounts=("1200.00" "845.50" "3120.00" "99.90" "15000.00")
for i in 1 2 3 4 5; do
    printf 'INV-00%d | %s | EUR %s | due 2026-12-31\n' "$i" "${customers[$((i-1))]}" \
        "${amounts[$((i-1))]}" > "$WORK/invoices/INV-00$i.txt"
done

cat > "$WORK/kit.env" <<ENV
KIT_MODE=$MODE
KIT_RUN=$RUN_ID
KIT_DB=$DB
ENV

cx init >/dev/null
# The hosts' configurations, written by continuum itself: the server command with this
# store, and the allowlist set to that host's client name (contract §9).
cx mcp install --client claude-code --config "$WORK/.mcp.json" >/dev/null
cx mcp install --client gemini --config "$WORK/.gemini/settings.json" >/dev/null
cx mcp install --client kilo --config "$WORK/.kilo/kilo.jsonc" >/dev/null
cx mcp install --client codex --config "$WORK/.codex/config.toml" >/dev/null

say "kit working directory: $WORK  (mode: $MODE, run: $RUN_ID)"
say "  store:    $DB (fresh, no runs)"
say "  invoices: $(cd "$WORK/invoices" && ls | tr '\n' ' ')"
if [ "$MODE" = files ]; then
    say "  outbox:   $WORK/outbox/ (empty)"
else
    say "  sink:     an HTTP server on 127.0.0.1 (run.sh starts it; journal in $WORK/sink/)"
fi
say "  MCP configuration for continuum-mcp:"
say "    Claude Code: $WORK/.mcp.json"
say "    Gemini CLI:  $WORK/.gemini/settings.json"
say "    Kilo Code:   $WORK/.kilocode/mcp.json"
say "  e.g. .mcp.json:"
sed 's/^/      /' "$WORK/.mcp.json"
