"""``python -m continuum``: the CLI (``continuum hook ...`` through its lean entry point)."""

from continuum.cli.launch import main

main()
