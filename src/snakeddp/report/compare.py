"""What differs between two runs: config keys, code (the user's model and DataModule files too), data, environment
packages, layout, outcome."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from snakeddp.config import flatten
from snakeddp.report.table import metrics_of, outcome
from snakeddp.run.runs import Run
from snakeddp.util.numbers import readable

MISSING = "(absent)"
CODE_KEYS = ("commit", "dirty", "source", "snakeddp_version")
DATA_KEYS = ("dataset", "manifest", "manifest_sha256", "partitions", "records.train", "records.val")
STACK_KEYS = (
    "python",
    "torch",
    "lightning",
    "cuda",
    "cudnn",
    "nccl",
    "gpus",
    "gpu_capabilities",
    "nvidia_driver",
    "environment_hash",
    "lock_sha256",
)
LAUNCH_KEYS = ("launcher", "backend", "accelerator", "nodes", "processes_per_node", "world_size", "hosts", "job_id")


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], keys: tuple[str, ...] | None = None) -> list[list[Any]]:
    flat_a, flat_b = flatten(a), flatten(b)
    names = keys if keys is not None else sorted(set(flat_a) | set(flat_b))
    return [
        [key, flat_a.get(key, MISSING), flat_b.get(key, MISSING)]
        for key in names
        if flat_a.get(key, MISSING) != flat_b.get(key, MISSING)
    ]


def _packages(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, list[Any]]:
    return {
        "added": sorted([name, b[name]] for name in set(b) - set(a)),
        "removed": sorted([name, a[name]] for name in set(a) - set(b)),
        "changed": sorted([name, a[name], b[name]] for name in set(a) & set(b) if a[name] != b[name]),
    }


def user_code_differences(pa: Mapping[str, Any], pb: Mapping[str, Any]) -> list[list[Any]]:
    """Each of the user's classes (provenance's user_code: model.target, data.module) whose module file differs, as
    ``[f"{role} code", "file sha256", "file sha256"]``: a model beside the config is often outside version control,
    where the commit and its dirty flag (tracked files only) say "same" for two runs of different model code."""

    def by_role(record: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        return {entry.get("role"): entry for entry in record.get("user_code") or []}

    def shown(entry: Mapping[str, Any] | None) -> str:
        return f"{entry.get('file')} sha256 {str(entry.get('sha256'))[:16]}" if entry else MISSING

    code_a, code_b = by_role(pa), by_role(pb)
    return [
        [f"{role} code", shown(code_a.get(role)), shown(code_b.get(role))]
        for role in sorted(set(code_a) | set(code_b), key=str)
        if (code_a.get(role) or {}).get("sha256") != (code_b.get(role) or {}).get("sha256")
    ]


def compare(a: Run, b: Run, raw: bool = True) -> dict[str, Any]:
    """Section -> differences, each a [key, value in a, value in b]; packages as added/removed/changed. The outcome's
    values as a script reads them, or (not ``raw``) as `snakeddp runs` shows them (``table.outcome``)."""
    pa, pb = a.provenance, b.provenance
    env_a, env_b = pa["environment"], pb["environment"]
    logged = metrics_of([a, b])
    sides = (outcome(a, logged, raw), outcome(b, logged, raw))
    return {
        "runs": [a.label, b.label],
        "config": _differences(pa["config"], pb["config"]),
        "code": _differences(pa["code"], pb["code"], CODE_KEYS) + user_code_differences(pa, pb),
        "data": _differences(pa["data"], pb["data"], DATA_KEYS),
        "environment": _differences(env_a, env_b, STACK_KEYS),
        "packages": _packages(env_a["packages"], env_b["packages"]),
        "launch": _differences(pa["launch"], pb["launch"], LAUNCH_KEYS),
        "outcome": [[label, va, vb] for (label, va), (_, vb) in zip(*sides, strict=True)],
    }


def _show(value: Any) -> str:
    if isinstance(value, float):  # six digits: a config's 0.0031 and 0.00312 must not read equal
        return readable(value, 6)
    if isinstance(value, list):
        return " ".join(map(str, value)) or "[]"
    return str(value)


def format_comparison(result: Mapping[str, Any]) -> str:
    """The comparison as aligned text: a section per kind of difference, 'same' where none."""
    a, b = result["runs"]
    lines = [f"compare {a} (A) with {b} (B)"]
    packages = result["packages"]
    count = sum(len(v) for v in packages.values())
    for section in ("config", "code", "data", "environment", "launch"):
        rows = result[section]
        # The packages are part of the environment: it is never "same" when they differ.
        differences = len(rows) + (count if section == "environment" else 0)
        lines.append(f"\n{section}: {'same' if not differences else f'{differences} difference(s)'}")
        lines += _rows(rows)
        if section == "environment" and count and not rows:
            lines.append(
                "  the packages below differ, but the environment records' hashes agree: a record was "
                "not captured again after its packages changed"
            )
    lines.append(f"\npackages: {'same' if not count else f'{count} difference(s)'}")
    lines += [f"  + {name} {version} (only in B)" for name, version in packages["added"]]
    lines += [f"  - {name} {version} (only in A)" for name, version in packages["removed"]]
    lines += [f"  ~ {name}: {va} -> {vb}" for name, va, vb in packages["changed"]]
    lines.append("\noutcome:")
    lines += _rows(result["outcome"])
    return "\n".join(lines)


def _rows(rows: list[list[Any]]) -> list[str]:
    if not rows:
        return []
    width = max(len(str(row[0])) for row in rows)
    return [f"  {key:{width}}  A: {_show(va)}  B: {_show(vb)}" for key, va, vb in rows]
