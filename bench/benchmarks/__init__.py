"""The benchmarks, one module per ``python -m bench NAME``, each with ``TITLE`` and ``run(ctx)``.

Numbered by their place in ``BENCHMARKS``: the order of bench/results.md, whose section N
(``TITLE``, "N. ...") is ``BENCHMARKS[N - 1]``. A module's name is the NAME typed and the key of its
entry in results.json, so the number is kept out of it.
"""

BENCHMARKS = (
    "partition_read",
    "datagen",
    "input_pipeline",
    "training",
    "memory",
    "workflow",
    "ingest_memory",
    "tutorial_e2e",
    "search",
    "rank_start",
    "sweep",
    "spark",
    "images",
    "wide_table",
)
#: Run only where named, on a machine with a CUDA GPU (tools/gpu-check.sh runs them); numbered after BENCHMARKS.
ON_GPU = ("gpu",)
#: Every benchmark, in the order of bench/results.md.
REGISTERED = BENCHMARKS + ON_GPU
