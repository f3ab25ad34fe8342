"""The one cache root: `$REFRACT_CACHE`, else `~/.cache/refract` (generated datasets, tiny checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("REFRACT_CACHE") or Path.home() / ".cache" / "refract").expanduser()
