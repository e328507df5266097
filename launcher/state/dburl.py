"""Which database the state DB is: the URL's source and its masking. Standard library only."""

from __future__ import annotations

import os
import re

ENV_URL = "LAUNCHER_DB_URL"


def configured_url() -> str | None:
    """The database server the state DB lives on: `LAUNCHER_DB_URL`, else `db:` in
    config.yaml; None for the SQLite file. Raises ConfigError for a bad config file."""
    url = os.environ.get(ENV_URL, "").strip()
    if url:
        return url
    from launcher.config.settings import load_config

    return load_config().db


def mask_url(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and logs)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):[^@]*@", r"\1:***@", url)
