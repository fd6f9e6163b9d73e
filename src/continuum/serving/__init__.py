"""What an HTTP server of continuum needs, shared by ``continuum-mcp`` over HTTP and the
operator page (``continuum ui``): flags, secrets, the token file and its roles, listen
address and TLS (``config``), and serving an ASGI app (``server``).

Imports only the leaves; never the store, an edge (cli, mcp) nor ui.
"""
