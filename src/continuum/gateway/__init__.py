"""Gateways: the ledger in front of another MCP server (``gateway mcp``) or an HTTP API
(``gateway http``), judging each call by a rules file, without the model's cooperation.
Imports the facade (runtime), serving, the store and the leaves; never an edge.
"""
