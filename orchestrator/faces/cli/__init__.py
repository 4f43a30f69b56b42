"""The `peakpack` command line (`app.py` assembles the command groups, one module each)."""

from .app import app, main

__all__ = ["app", "main"]
