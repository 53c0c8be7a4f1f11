"""Where Strata keeps what it downloads and builds."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def strata_home() -> Path:
    """STRATA_HOME if set, else the user's cache directory (e.g. ~/.cache/strata)."""
    env = os.environ.get("STRATA_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("strata"))
