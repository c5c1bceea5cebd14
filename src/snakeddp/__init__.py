"""snakeddp: reproducible distributed PyTorch Lightning training as one Snakemake workflow.

``snakeddp.load(DIR)`` rebuilds a model written by ``snakeddp export`` (snakeddp.training.export), and
``snakeddp.inputs(DIR).encode(rows)`` turns raw columns into its input as training's data did; both are
imported on first use, so importing snakeddp stays free of torch.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "load":
        from snakeddp.training.export import load

        return load
    if name == "inputs":
        from snakeddp.training.export import inputs

        return inputs
    raise AttributeError(f"module 'snakeddp' has no attribute {name!r}")
