"""A CycloneDX bill of materials of the environment a stage runs in, and the check of a node against one.

cyclonedx-py (cyclonedx-bom, run in the stage's own interpreter) lists what is installed: each
distribution's name, version, licences and package URL. It gives an installed distribution no digest
(a package is many files), so each component gets one here: the SHA-256 of its installed files, the
digest of the ``path,sha256`` lines of its RECORD, which the installer wrote from the wheel whose hash
the lock required; and the index the lock resolved it from (uv's ``# from`` annotation). ``check`` hashes
every file again and compares (``snakeddp verify``). Hashing the files themselves at capture would read
the whole environment (1.2 GB with torch) in every environment job: the RECORDs are read instead.

cyclonedx-py takes about 3 s of CPU for a venv of 270 packages (0.7 s of it its imports), and every stage
captures its environment: the SBOM is kept in the environment's own prefix (``.snakeddp-sbom.json``) under a
key made of every package's version and installed-files digest and the lock, so the next capture of the same
environment (the other stages, the next workflow) reads it instead (``cached``). A read-only prefix (an
image) keeps none.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from snakeddp.environment.lock import Lock, metadata_headers, site_packages
from snakeddp.errors import LockError
from snakeddp.util.fsutil import atomic_write_json

SPEC_VERSION = "1.6"
#: The property naming what a component's SHA-256 is a digest of.
DIGEST_OF = "snakeddp:digest-of"
DIGEST_OF_VALUE = "the path,sha256 lines of its installed RECORD (every installed file with a hash), sorted"
INDEX = "snakeddp:index"


def _distributions(paths: Iterable[str] | None = None) -> dict[str, importlib.metadata.Distribution]:
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions(path=list(paths) if paths is not None else site_packages()):
        name = metadata_headers(dist).get("Name")
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def _record_lines(dist: importlib.metadata.Distribution) -> list[tuple[str, str]]:
    """(path, sha256 as RECORD writes it: ``sha256=<urlsafe base64>``) of every installed file with a hash."""
    text = dist.read_text("RECORD") or ""
    lines = []
    for row in text.splitlines():
        path, _, _size = row.rpartition(",")  # path,hash,size: the size last
        path, _, digest = path.rpartition(",")
        if path and digest.startswith("sha256="):
            lines.append((path, digest))
    return sorted(lines)


def files_digest(dist: importlib.metadata.Distribution) -> tuple[str, int]:
    """The SHA-256 of a distribution's installed files as its RECORD lists them, and how many they are."""
    lines = _record_lines(dist)
    text = "".join(f"{path},{digest}\n" for path, digest in lines)
    return hashlib.sha256(text.encode()).hexdigest(), len(lines)


def generate(python: str = sys.executable) -> dict[str, Any]:
    """cyclonedx-py's SBOM of ``python``'s environment (the interpreter's own paths: no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [
        python, "-m", "cyclonedx_py", "environment", "--output-format", "JSON", "--output-file", "-",
        "--spec-version", SPEC_VERSION, "--output-reproducible", "--no-validate", python,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise LockError(
            f"cyclonedx-py could not list {python}'s packages: {said}. HINT: install the locks into that "
            "environment (tools/setup.sh, or rebuild its conda env or image): cyclonedx-bom is one of them."
        )
    return json.loads(done.stdout)


CACHE_NAME = ".snakeddp-sbom.json"


def environment_key(lock: Lock, paths: Iterable[str] | None = None) -> str:
    """What the SBOM of an environment is made from: every package's version and installed-files digest (its
    RECORD), the lock's pins (their indexes) and cyclonedx-bom's version; another install changes it."""
    dists = _distributions(paths)
    state = {key: [metadata_headers(dist).get("Version"), files_digest(dist)[0]] for key, dist in sorted(dists.items())}
    state["<lock>"] = sorted((key, pin.version, pin.index or "") for key, pin in lock.pins.items())
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def cached(lock: Lock, prefix: Path | None = None, python: str = sys.executable) -> dict[str, Any]:
    """The enriched SBOM of this interpreter's environment: the one kept in its prefix when its key still holds,
    else made afresh (cyclonedx-py) and kept there."""
    prefix = Path(sys.prefix) if prefix is None else prefix
    key = environment_key(lock)
    kept = prefix / CACHE_NAME
    try:
        document = json.loads(kept.read_text(encoding="utf-8"))
        if document.get("key") == key:
            return one_per_package(document["bom"])
    except (OSError, ValueError, AttributeError):
        pass
    bom = enrich(one_per_package(generate(python)), lock)
    try:
        atomic_write_json(kept, {"key": key, "bom": bom})
    except OSError:
        pass  # a read-only prefix (an image): every capture makes its own
    return bom


def one_per_package(bom: dict[str, Any]) -> dict[str, Any]:
    """``bom`` with each package listed once: an editable install's ``src/<name>.egg-info`` beside its
    ``.dist-info`` made cyclonedx-py list it twice (verify counted 263 packages where the record holds 262).
    The first is kept, as importlib.metadata finds it; the dependency graph loses the other's bom-ref."""
    seen: set[tuple[str, str | None]] = set()
    components, removed = [], set()
    for component in bom.get("components", []):
        key = (canonicalize_name(component["name"]), component.get("version"))
        if key in seen:
            removed.add(component.get("bom-ref"))
            continue
        seen.add(key)
        components.append(component)
    if not removed:
        return bom
    dependencies = [
        {**d, **({"dependsOn": [r for r in d["dependsOn"] if r not in removed]} if "dependsOn" in d else {})}
        for d in bom.get("dependencies", [])
        if d.get("ref") not in removed
    ]
    return {**bom, "components": components, **({"dependencies": dependencies} if "dependencies" in bom else {})}


def enrich(bom: dict[str, Any], lock: Lock, paths: Iterable[str] | None = None) -> dict[str, Any]:
    """Give every component the SHA-256 of its installed files and the index its lock entry names."""
    dists = _distributions(paths)
    for component in bom.get("components", []):
        key = canonicalize_name(component["name"])
        dist = dists.get(key)
        properties = [p for p in component.get("properties", []) if p.get("name") not in (DIGEST_OF, INDEX)]
        if dist is not None:
            digest, count = files_digest(dist)
            component["hashes"] = [{"alg": "SHA-256", "content": digest}]
            properties.append({"name": DIGEST_OF, "value": f"{DIGEST_OF_VALUE}: {count} files"})
        pin = lock.pins.get(key)
        index = pin.index if pin is not None else None
        if index:
            properties.append({"name": INDEX, "value": index})
            references = component.setdefault("externalReferences", [])
            references.append(
                {"type": "distribution", "url": index, "comment": "the index tools/lock.sh resolved it from"}
            )
        component["properties"] = properties
    return bom


def licences(bom: Mapping[str, Any]) -> dict[str, list[str]]:
    """Licence -> the ``name version`` of the components that declare it: SPDX ids and expressions where a
    package gives them, else the names it declares (a classifier, a licence's text's title), else "unknown"."""
    found: dict[str, list[str]] = {}
    for component in bom.get("components", []):
        entries = component.get("licenses", [])
        spdx = [e["expression"] for e in entries if "expression" in e]
        spdx += [e["license"]["id"] for e in entries if e.get("license", {}).get("id")]
        named = [e["license"]["name"] for e in entries if e.get("license", {}).get("name")]
        for name in sorted(set(spdx or named or ["unknown"])):
            found.setdefault(name, []).append(f"{component['name']} {component.get('version', '')}".strip())
    return {name: sorted(items) for name, items in sorted(found.items())}


@dataclass(frozen=True)
class Difference:
    component: str
    detail: str


def check(bom: Mapping[str, Any], paths: Iterable[str] | None = None) -> tuple[int, list[Difference]]:
    """This node's installed files against ``bom``: (components checked, differences). Every file each RECORD
    lists is hashed again, and each RECORD's digest compared with the component's."""
    dists = _distributions(paths)
    differences: list[Difference] = []
    checked = 0
    for component in bom.get("components", []):
        digests = [h["content"] for h in component.get("hashes", []) if h.get("alg") == "SHA-256"]
        if not digests:
            continue
        checked += 1
        label = f"{component['name']} {component.get('version', '')}".strip()
        dist = dists.get(canonicalize_name(component["name"]))
        if dist is None:
            differences.append(Difference(label, "not installed here"))
            continue
        version = metadata_headers(dist).get("Version")
        if version != component.get("version"):
            differences.append(Difference(label, f"installed here at {version}"))
            continue
        base = Path(str(dist.locate_file("")))
        for path, recorded in _record_lines(dist):
            file = base / path
            if not file.is_file():
                differences.append(Difference(label, f"{path}: missing"))
                continue
            actual = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(file.read_bytes()).digest()).decode().rstrip(
                "="
            )
            if actual != recorded:
                differences.append(Difference(label, f"{path}: changed since it was installed"))
        digest, _ = files_digest(dist)
        if digest not in digests:
            differences.append(
                Difference(label, f"its RECORD's digest {digest[:16]}… is not the SBOM's {digests[0][:16]}…")
            )
    return checked, differences
