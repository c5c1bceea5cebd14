"""The baselines: what the benchmarks measure snakeddp against, written the way a user without it would.

``handwritten_ddp`` (a plain DDP loop under torchrun), ``handwritten_sweep`` (a sweep's models
trained one after another in one process), ``plain_pipeline`` (the workflow's steps as one script)
and ``tutorial`` (the reference tutorial's pickled partitions). The benchmarks start each as
``python -m bench.baselines.<name>``.
"""
