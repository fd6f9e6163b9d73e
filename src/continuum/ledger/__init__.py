"""The action ledger over a store: identity, intercept and settle, approvals and
their rules, the effect seam, and the notification outbox.
Imports store, state, eventlog and the leaves.
"""
