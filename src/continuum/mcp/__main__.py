"""``continuum-mcp`` / ``python -m continuum.mcp`` entry point."""

from __future__ import annotations

import sys


def main() -> None:
    from continuum.mcp.server import main as server_main

    sys.exit(server_main())


if __name__ == "__main__":
    main()
