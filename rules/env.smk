# Environment stage: what each stage's code runs on, recorded with a hash.


# The resolved environment of a stage (packages, python, torch/CUDA/NCCL) and its hash.
rule env_capture:
    input:
        lock=LOCK_FILE,
    output:
        record="results/envs/{stage}.json",
    log:
        "logs/envs/{stage}.log",
    conda:
        "../envs/{stage}.yaml"
    script:
        "../scripts/capture_environment.py"
