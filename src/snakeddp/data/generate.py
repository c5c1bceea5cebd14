"""Write datasets: partitions with their checksum entries, then the manifest."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.data import sources, synthetic
from snakeddp.data.partitions import write_manifest, write_partition, write_sidecar
from snakeddp.fsutil import read_json


def write_synthetic(
    params: Mapping[str, Any], split: str, index: int, path: str | Path, entry_path: str | Path
) -> dict[str, Any]:
    """Generate one partition (or the validation set) and write it with its entry."""
    tensors = synthetic.generate(params, split, index)
    metadata = {"generator": "snakeddp.synthetic/1", "split": split, "index": str(index)}
    entry = write_partition(path, tensors, metadata)
    write_sidecar(entry_path, entry)
    return entry


def write_dataset_manifest(
    path: str | Path, dataset: str, params: Mapping[str, Any], train_entries: list[str | Path], val_entry: str | Path
) -> dict[str, Any]:
    """The manifest of the given partitions; the entries were recorded by the code that wrote them."""
    train = [read_json(p) for p in train_entries]
    val = read_json(val_entry)
    full_params = {**params, "num_train_files": len(train)}
    return write_manifest(path, dataset, full_params, train, val, sources.task(full_params))


def main(argv: list[str] | None = None) -> int:
    """Command line for the workflow's data rules (shell commands, so reruns follow their text, not file mtimes).

    python -m snakeddp.data.generate partition --params JSON --index 3 --out part.safetensors --entry part.json
    python -m snakeddp.data.generate val --params JSON --out val.safetensors --entry val.json
    python -m snakeddp.data.generate manifest --params JSON --dataset ID --out manifest-4.json --val val.json ENTRY...
    """
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.data.generate",
        description=main.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("step", choices=("partition", "val", "manifest"))
    parser.add_argument("--params", required=True, type=json.loads, help="dataset parameters as JSON")
    parser.add_argument("--out", required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--entry", help="where a partition's checksum entry goes")
    parser.add_argument("--dataset", help="dataset id (manifest)")
    parser.add_argument("--val", help="the validation set's entry (manifest)")
    parser.add_argument("entries", nargs="*", help="train partition entries, in order (manifest)")
    args = parser.parse_args(argv)
    if args.step == "manifest":
        write_dataset_manifest(args.out, args.dataset, args.params, args.entries, args.val)
    else:
        write_synthetic(args.params, "train" if args.step == "partition" else "val", args.index, args.out, args.entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
