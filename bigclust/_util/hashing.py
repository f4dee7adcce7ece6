"""Stable short hashes of JSON-able objects: config hashes and the store keys of stage instances."""
from __future__ import annotations

import hashlib
import json


def stable_hash(obj) -> str:
    """Short, stable hash of a JSON-able object (sorted keys)."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
