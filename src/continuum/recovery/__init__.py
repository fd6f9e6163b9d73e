"""Recovery: the engine that turns state, validation and the chain into a verdict
and a sealed contract, checkpoints, and verification of a run against its log.
Imports store, state, eventlog and the leaves.
"""
