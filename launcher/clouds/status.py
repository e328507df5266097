"""`CredentialStatus`: whether a cloud can be used here, and why (or why not).

Its own module so that answering "which clouds are enabled?" from env and files
(launcher.clouds.presence) imports nothing else of the cloud interface;
launcher.clouds.base re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CredentialStatus:
    enabled: bool
    reason: str = ""  # why not enabled, or which identity is in use
