# Environment stage: what each stage's code runs on, recorded with a hash.
from pathlib import Path

from snakeddp import errors as snakeddp_errors
from snakeddp.environment.image import RECORD as IMAGE_RECORD
from snakeddp.workflow import envrecords as snakeddp_envrecords


# The resolved environment of a stage (packages, python, torch/CUDA/cuDNN/NCCL, image digest,
# conda packages) and its hash, and its CycloneDX bill of materials; rerun when the lock changes, so
# training reruns too.
rule env_capture:
    output:
        record="results/envs/{stage}.json",
        sbom="results/envs/{stage}.cdx.json",
    log:
        "logs/envs/{stage}.log",
    conda:
        PLAN.stage_conda_env
    params:
        lock_sha256=PLAN.lock_sha256,
        image=PLAN.container_image if PLAN.in_container else "",
    message:
        "environment: record the {wildcards.stage} stage"
    shell:
        "python -m snakeddp.steps environment --stage {wildcards.stage:q} --image={params.image:q}"
        " --out {output.record:q} > {log:q} 2>&1"


# Optional (snakemake build_image): build and tag envs/Dockerfile with docker or podman. Runs on
# this machine, never in a container or conda env: it needs the engine, not the stage packages.
rule build_image:
    input:
        dockerfile=PLAN.repo / "envs" / "Dockerfile",
        lock=PLAN.repo / "envs" / "requirements.lock",
    output:
        record=IMAGE_RECORD,
    log:
        "logs/envs/image.log",
    localrule: True
    container:
        None
    params:
        image=PLAN.container_image,
        cuda=PLAN.config["environment"]["cuda"],
    message:
        "environment: build the image"
    run:
        from snakeddp.environment.image import build

        with open(log[0], "w") as handle:
            build(
                context=PLAN.repo,
                record_path=output.record,
                image=params.image,
                log=handle,
                cuda=params.cuda,
            )


# A record of this interpreter whose packages changed since (a pip install, make setup-dev) is
# captured again before any job runs (snakeddp.workflow.envrecords); a dry run or a report only
# says so.
if PLAN.typed and not snakeddp_snakemake.linting(workflow):
    for line in snakeddp_envrecords.refresh(
        [
            Path(rules.env_capture.output.record.format(stage=stage))
            for stage in ("data", "train", "report")
        ],
        remove=workflow.resource_settings.cores is not None
        and not workflow.output_settings.dryrun,
    ):
        snakeddp_errors.print_line(line)
