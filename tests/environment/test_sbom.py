"""The CycloneDX bill of materials of a stage's environment: cyclonedx-py's, each package given its installed
files' digest and index, and a node checked against it file by file."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from snakeddp.environment import sbom
from snakeddp.environment.capture import capture
from snakeddp.environment.lock import installed, read_lock
from snakeddp.util.hashing import sha256_file
from tests.helpers import REPO

LOCK = REPO / "envs" / "requirements.lock"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[dict, dict]:
    """One capture of this interpreter (the record and its SBOM): cyclonedx-py runs once for the module."""
    out = tmp_path_factory.mktemp("envs") / "train.json"
    record = capture("train", LOCK, out, env={})
    return record, json.loads((out.parent / record["sbom"]["file"]).read_text())


def test_the_record_names_the_cyclonedx_sbom_beside_it_by_sha256(recorded, tmp_path):
    record, bom = recorded
    assert record["sbom"]["file"] == "train.cdx.json" and record["sbom"]["format"] == "CycloneDX 1.6"
    assert record["sbom"]["tool"].startswith("cyclonedx-py 7.5.0")
    assert bom["bomFormat"] == "CycloneDX" and record["sbom"]["components"] == len(bom["components"])
    # Every installed distribution is a component (the editable snakeddp and pip included).
    assert {canonicalize_name(c["name"]) for c in bom["components"]} >= set(installed())
    # Each once, as the record counts them: the editable install's src/snakeddp.egg-info listed snakeddp twice.
    named = [canonicalize_name(c["name"]) for c in bom["components"]]
    assert len(named) == len(set(named)) == len(record["packages"]), [n for n in named if named.count(n) > 1]
    assert "sbom" not in json.dumps({k: record[k] for k in ("packages", "hash")}), "the SBOM is not in the hash"


def test_each_component_has_its_licence_index_and_the_digest_of_the_files_installed_here(recorded):
    _, bom = recorded
    by_name = {c["name"].lower(): c for c in bom["components"]}
    lightning = by_name["lightning"]
    assert "Apache-2.0" in [entry.get("license", {}).get("id") for entry in lightning["licenses"]]
    assert {"name": sbom.INDEX, "value": "https://pypi.org/simple"} in lightning["properties"]
    dist = importlib.metadata.distribution("lightning")
    assert lightning["hashes"] == [{"alg": "SHA-256", "content": sbom.files_digest(dist)[0]}]
    assert sbom.licences(bom)["Apache-2.0"].count("lightning 2.6.6") == 1


def test_every_component_is_a_locked_release_whose_digest_matches_the_files_installed_here(recorded):
    """Every component but snakeddp itself is a release the locks name (torch: the lock's version, of this machine's
    build), with the index the lock resolved it from, and the SHA-256 of its installed files: every file each
    RECORD lists is hashed again (3 s of CPU for this venv) and each RECORD's digest is the component's."""
    _, bom = recorded
    pins = {**read_lock(REPO / "envs" / "requirements-dev.lock").pins, **read_lock(LOCK).pins}
    components = bom["components"]
    assert {c["name"] for c in components if canonicalize_name(c["name"]) not in pins} == {"snakeddp"}
    for component in components:
        key = canonicalize_name(component["name"])
        if key not in pins:
            continue
        locked = pins[key].version
        version = component["version"] if "+" in locked else component["version"].split("+")[0]
        assert version == locked, component["name"]
        indexes = [p["value"] for p in component["properties"] if p["name"] == sbom.INDEX]
        assert indexes == ([pins[key].index] if pins[key].index else []), component["name"]
    checked, differences = sbom.check(bom)
    assert checked == len(components) > 250 and differences == []


def test_a_file_changed_after_install_is_named(tmp_path):
    """A package's files copied as installed, then one byte of one changed: the check finds that file."""
    dist = importlib.metadata.distribution("certifi")
    site = Path(str(dist.locate_file("")))
    copy = tmp_path / "site"
    for entry in ("certifi", f"certifi-{dist.version}.dist-info"):
        shutil.copytree(site / entry, copy / entry)
    bom = {"components": [{"name": "certifi", "version": dist.version,
                           "hashes": [{"alg": "SHA-256", "content": sbom.files_digest(dist)[0]}]}]}  # fmt: skip
    assert sbom.check(bom, [str(copy)]) == (1, [])
    pem = copy / "certifi" / "cacert.pem"
    pem.write_bytes(pem.read_bytes() + b"\n")
    _checked, differences = sbom.check(bom, [str(copy)])
    assert [(d.component, d.detail) for d in differences] == [
        (f"certifi {dist.version}", "certifi/cacert.pem: changed since it was installed")
    ]
    assert sha256_file(pem)
