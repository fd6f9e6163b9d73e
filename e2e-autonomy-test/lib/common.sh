# Shared by the kit's scripts: where things are. Source it; do not run it.
#   KIT_WORK   the working directory (default: e2e-autonomy-test/work)
#   KIT_RUN    the run id the agent uses (default: invoice-batch)
KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$KIT/.." && pwd)"
WORK="${KIT_WORK:-$KIT/work}"
case "$WORK" in /*) ;; *) WORK="$PWD/$WORK" ;; esac
PY="$ROOT/.venv/bin/python"
CONTINUUM="$ROOT/.venv/bin/continuum"

say() { printf '%s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The repository's .venv (made by `make test`, `make demo` or `make setup`); make it if missing.
ensure_venv() {
    if [ ! -x "$PY" ] || [ ! -x "$CONTINUUM" ]; then
        say "(.venv missing: running make setup in $ROOT)"
        make -C "$ROOT" --no-print-directory setup >&2 || die "make setup failed"
    fi
}

# Values 1-setup.sh recorded (KIT_MODE, KIT_RUN, KIT_DB).
load_work() {
    [ -f "$WORK/kit.env" ] || die "no kit working directory at $WORK: run 1-setup.sh first"
    # shellcheck disable=SC1091
    . "$WORK/kit.env"
    DB="$KIT_DB"
}

# `continuum` on the kit's store; --no-color keeps the output paste-able.
cx() { "$CONTINUUM" --db "$DB" --no-color "$@"; }

# The script's header comment (from line 2 to the first line that is not a comment).
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
