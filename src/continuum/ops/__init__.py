"""Operations on a whole store: backup and restore, archive, prune, export and
import, migration from the original project, signed anchors.
Imports recovery, ledger, store, state, eventlog and the leaves.
"""
