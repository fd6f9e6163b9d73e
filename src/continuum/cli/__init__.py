"""The ``continuum`` CLI: one module per command group, ``main.main`` is the entry point."""
