"""The ``continuum`` console script: a tiny dispatcher in front of the CLI.

``continuum hook ...`` runs on every tool call a coding host makes, so it must not pay for
importing the CLI (click, the runtime, pydantic, the store): it goes straight to the
hooks' own lean entry point, or hands the call to this user's resident gate when one is
running (``continuum.hooks.resident_call``). Everything else is the click CLI (``continuum.cli.main``).
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from continuum.hooks.resident_call import call

        handed = call(argv[1:])  # a resident gate (`continuum hooks serve`) runs it warm
        if handed is not None:
            sys.exit(handed)
        from continuum.hooks.entry import process_main

        sys.exit(process_main(argv[1:]))
    from continuum.cli.main import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
