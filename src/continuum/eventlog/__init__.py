"""The event log: events and their payloads, canonical JSON and the hash chain, the
limits of an entry, and what an event tells a person (notices).
Pure; imports only the leaves (errors, types, untrusted).
"""
