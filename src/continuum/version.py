"""The package version (a leaf, so every layer may import it)."""

__version__ = "0.1.0"
