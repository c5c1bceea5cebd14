"""A local table's identity: its files' content, the hash reused while no file changed."""

from __future__ import annotations

import json

from snakeddp.data.identity import cached_fingerprint, fingerprint
from tests.tables import frame


def test_fingerprint_follows_content_and_the_cache_notices_changes(tmp_path):
    path, cache = tmp_path / "t.csv", tmp_path / "cache.json"
    frame().to_csv(path, index=False)
    first = cached_fingerprint(path, "auto", cache)
    assert first == fingerprint(path) and json.loads(cache.read_text())
    assert cached_fingerprint(path, "auto", cache) == first
    frame(seed=1).to_csv(path, index=False)
    assert cached_fingerprint(path, "auto", cache) == fingerprint(path) != first
