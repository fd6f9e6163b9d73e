"""``python -m continuum``: the CLI."""

from continuum.cli.main import main

main()
