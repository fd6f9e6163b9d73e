"""The state folded from a run's events (projection), its validation against the
environment, and the environment providers.
Imports eventlog and the leaves; no store.
"""
