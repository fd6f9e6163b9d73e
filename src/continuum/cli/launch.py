"""The ``continuum`` console script: a tiny dispatcher in front of the CLI.

``continuum hook ...`` runs on every tool call a coding host makes, so it must not pay for
importing the CLI (click, the runtime, pydantic, the store): it goes straight to the
hooks' own lean entry point. Everything else is the click CLI (``continuum.cli.main``).
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from continuum.hooks.entry import process_main

        sys.exit(process_main(argv[1:]))
    from continuum.cli.main import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
