"""Where the tests find the checkout, whatever folder their file sits in."""

from __future__ import annotations

from pathlib import Path

#: the checkout's root (the folder with pyproject.toml)
REPO = Path(__file__).resolve().parents[2]
