"""Snakemake adapter: split a CSV/Parquet table into train partitions and validation, one streaming pass."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.data.table import ingest

summary = ingest(params=snakemake.params.data, out_dir=snakemake.output.ingest)
rows, dropped = summary["rows_read"], summary["rows_dropped"]
print(f"ingested {rows} rows ({dropped} dropped): {summary['records']}", file=sys.stderr)
