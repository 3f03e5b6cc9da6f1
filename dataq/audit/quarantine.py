"""The quarantine of a storing root: where a repair moves a damaged copy, never deleting it, so that the record can
be stored anew under its name and an operator can still look at what was there."""

from __future__ import annotations

import os
import time

from dataq.audit import manifest


def quarantine(root: str, path: str, now: float | None = None) -> str:
    """Move the copy at ``path`` (under ``root``) to ``root/.dataq/quarantine/<YYYYMMDD>/<its path under root>`` (a
    name taken there gets a numbered suffix); the path it went to. OSError if it cannot be moved (it is then left
    where it is)."""
    relative = os.path.relpath(path, root)
    day = time.strftime("%Y%m%d", time.gmtime(time.time() if now is None else now))
    target = os.path.join(root, manifest.QUARANTINE_DIR, day, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    candidate, number = target, 0
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{target}.{number}"
    # Within one filesystem (the quarantine is under the root): a rename, which never copies or loses the bytes.
    os.rename(path, candidate)
    return candidate
