"""Real HTTP clients asked whether they would send a request through the proxy or directly (see harness.py).

`bash scripts/clients` installs them; `python -m tests.integration.real_clients.probe` writes docs/client-probe.md.
"""

from .harness import (
    REAL_CLIENTS,
    Answer,
    ClientNotInstalledError,
    HarnessError,
    decide,
    decide_many,
    explain,
    explain_many,
    versions,
)

__all__ = [
    "REAL_CLIENTS",
    "Answer",
    "ClientNotInstalledError",
    "HarnessError",
    "decide",
    "decide_many",
    "explain",
    "explain_many",
    "versions",
]
