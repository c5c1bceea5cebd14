"""snakeddp: reproducible distributed PyTorch Lightning training as one Snakemake workflow."""

__version__ = "0.1.0"
