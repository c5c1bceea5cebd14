"""The Workflow Run RO-Crate of a sweep: ``results/report/`` as a self-contained, shippable crate.

The crate root is the report directory. What the runs were made from and what they made is
placed under ``files/`` (hard links where the filesystem allows, so checkpoints cost no space,
copies otherwise): the workflow (Snakefile, rules, environment specs), the config, each
dataset's manifest, and per run its run.yaml, metrics.csv, provenance.json, checkpoints and log, and the
user's model and DataModule modules it trained with (files/code/).
Zip ``results/report`` and the report, the figures and the evidence travel together.

It is an RO-Crate 1.1 following the Provenance Run Crate profile 0.5 (which extends Workflow Run
Crate and Process Run Crate 0.5, themselves built on RO-Crate 1.1; roc-validator checks it in the
tests): the Snakefile is the main ComputationalWorkflow, a HowTo whose steps are the rules that
ran, each naming its tool (``python -m snakeddp.steps ...``, ``snakeddp.train``), all of them read from
the registry the rules and ``snakeddp.steps`` use (``snakeddp.run.rules``). Each execution of a
tool is a CreateAction: per training run, with start and end time, its agent, its instrument
and the software it ran on, its inputs (run config, data manifest, environment record, sweep
values) and its outputs (checkpoints with sha256, metrics, provenance); per dataset, the steps of
its source (a table's ingestion, partitions, validation split and manifest, or the record of the
user's DataModule); per run, its run.yaml; the report itself. Snakemake is the engine whose
OrganizeAction ran the workflow's CreateAction and, through a ControlAction per step execution,
each tool's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rocrate.model.contextentity import ContextEntity
from rocrate.rocrate import ROCrate

from snakeddp import __version__
from snakeddp.config import flatten
from snakeddp.environment.image import RECORD as IMAGE_RECORD
from snakeddp.errors import ProvenanceError
from snakeddp.report.files import workflow_files
from snakeddp.run import account, layout, rules
from snakeddp.run.runs import Run, earlier_attempts
from snakeddp.util.fsutil import atomic_write_json, atomic_write_text, copy_file, link_or_copy, read_json
from snakeddp.util.hashing import sha256_file
from snakeddp.util.paths import inside
from snakeddp.util.redact import redact_text
from snakeddp.util.words import counted
from snakeddp.util.yamltext import redact_yaml

BASENAME = "ro-crate-metadata.json"
PAYLOAD = "files"
# The newest released Workflow Run Crate profiles (0.6 is a draft); they build on RO-Crate 1.1 (whose
# JSON-LD context the validators' shapes are written against) and Workflow RO-Crate 1.0.
RO_CRATE_VERSION = "1.1"
PROFILES = {
    "https://w3id.org/ro/wfrun/process/0.5": "Process Run Crate",
    "https://w3id.org/ro/wfrun/workflow/0.5": "Workflow Run Crate",
    "https://w3id.org/ro/wfrun/provenance/0.5": "Provenance Run Crate",
    "https://w3id.org/workflowhub/workflow-ro-crate/1.0": "Workflow RO-Crate",
}
WFRUN_CONTEXT = "https://w3id.org/ro/terms/workflow-run/context"
# The licence of the crate's own content (the workflow, config and report), as pyproject.toml and LICENSE say.
LICENSE = {"@id": "https://spdx.org/licenses/MIT", "name": "MIT License"}


# Where each piece of software the runs record can be found (a SoftwareApplication's url).
SOFTWARE_URLS = {
    "python": "https://www.python.org",
    "torch": "https://pytorch.org",
    "lightning": "https://lightning.ai/docs/pytorch/stable/",
    "cuda": "https://developer.nvidia.com/cuda-toolkit",
    "nccl": "https://developer.nvidia.com/nccl",
}
MIME = {".json": "application/json", ".csv": "text/csv", ".yaml": "application/yaml", ".html": "text/html",
        ".png": "image/png", ".svg": "image/svg+xml", ".log": "text/plain", ".py": "text/x-python",
        ".smk": "text/plain", ".lock": "text/plain", ".ckpt": "application/zip"}  # fmt: skip


def _place(source: Path, target: Path, link: bool = False) -> None:
    """Copy ``source`` to ``target``, or hard-link it (checkpoints: large, and written once by the
    pipeline). Configs and sources are copied: an editor saving one in place must not change what
    the crate recorded, and a crate file must never be a way to write into a user's file."""
    (link_or_copy if link else copy_file)(source, target)


def _redacted_copy(source: Path, target: Path) -> Path:
    """The crate's copy of a config file, with every value under a secret-looking key masked (a storage
    key in spark.conf) and credentials in URLs (a tracking URI's user:password@): the crate is shared,
    the config file may not be."""
    atomic_write_text(target, redact_yaml(source.read_text(encoding="utf-8")))
    return target


def sbom_of(run: Run) -> Path | None:
    """The bill of materials beside the environment record a run trained with, when there is one."""
    record = run.provenance["environment"].get("record")
    if not record:
        return None
    try:
        path = run.resolve(record)
        sbom = read_json(path).get("sbom") if path.is_file() else None
    except (ProvenanceError, OSError, ValueError):
        return None
    found = inside(path.parent, sbom["file"]) if isinstance(sbom, dict) and sbom.get("file") else None
    return found if found is not None and found.is_file() else None


class CrateBuilder:
    """Places files under the crate root and describes each one as a data entity."""

    def __init__(self, root: Path, title: str) -> None:
        self.root = root
        self.crate = ROCrate(version=RO_CRATE_VERSION)
        self.crate.metadata.extra_contexts.append(WFRUN_CONTEXT)
        self.crate.root_dataset["name"] = title
        self.crate.root_dataset["description"] = (
            "Runs of the snakeddp workflow: what each training run was made from (workflow, config, data "
            "manifest, environment) and what it produced (checkpoints, metrics, provenance), with the report."
        )
        self.crate.root_dataset["datePublished"] = datetime.now(UTC).isoformat(timespec="seconds")
        license_ = self.entity(LICENSE["@id"], "CreativeWork", name=LICENSE["name"])
        self.crate.root_dataset["license"] = {"@id": license_.id}

    def add(
        self, source: Path, dest: str, types: Sequence[str] = ("File",), link: bool = False, **properties: Any
    ) -> Any:
        """Place ``source`` at ``dest`` (relative to the root) unless it is there already, and describe it.
        A ``dest`` made from a record's values (run id, dataset, checkpoint name) never leaves the crate."""
        target = inside(self.root, dest)
        if target is None:
            raise ProvenanceError(
                f"the crate would place {source} at {dest!r}, outside {self.root}: a record names a path that "
                "leaves its directory. HINT: run `snakeddp verify` to find the run whose record is not one "
                "snakeddp wrote, move that run's directory out of results/, and rerun snakemake."
            )
        # A file already at its place in the crate (the report's own outputs) stays; anything
        # else is placed again: a link that is already there is kept by link_or_copy, and a copy
        # replaces whatever the target was (an older crate's hard link to a config included).
        if target.resolve() != Path(source).resolve():
            _place(source, target, link)
        props = {"@type": list(types), "name": Path(dest).name, "contentSize": str(target.stat().st_size)}
        props.update(properties)
        if Path(dest).suffix in MIME:
            props.setdefault("encodingFormat", MIME[Path(dest).suffix])
        return self.crate.add_file(target, dest_path=dest, properties=props)

    def entity(self, identifier: str, type_: str | list[str], **properties: Any) -> ContextEntity:
        existing = self.crate.get(identifier)
        if existing is not None:
            return existing
        return self.crate.add(ContextEntity(self.crate, identifier, properties={"@type": type_, **properties}))


def _additional_type(value: Any) -> str:
    return {bool: "Boolean", int: "Integer", float: "Float"}.get(type(value), "Text")


def _software(builder: CrateBuilder, name: str, version: str | None) -> ContextEntity | None:
    if not version:
        return None
    return builder.entity(
        f"#software-{name}-{version}", "SoftwareApplication", name=name, version=str(version), url=SOFTWARE_URLS[name]
    )


def _agent(builder: CrateBuilder, user: str | None) -> ContextEntity | None:
    return builder.entity(f"#person-{user}", "Person", name=user) if user else None


def _tool(builder: CrateBuilder, step: rules.Step) -> ContextEntity:
    """The application a step runs."""
    return builder.entity(
        step.tool, "SoftwareApplication", name=step.command, description=step.does, version=__version__
    )


def _workflow(
    builder: CrateBuilder, repo: Path, snakemake_version: str, commit: str | None, steps: Sequence[rules.Step]
) -> Any:
    """The Snakefile as the main ComputationalWorkflow: a HowTo whose steps are the rules that ran, each
    naming its tool, and whose parts are those tools (the profile asks every tool to be an action's
    instrument). The other source files (rules, environment specs) are files of the crate, not
    parts: a workflow's parts are the tools it runs."""
    crate = builder.crate
    snakefile = repo / "Snakefile"
    dest = f"{PAYLOAD}/workflow/Snakefile"
    _place(snakefile, builder.root / dest)
    workflow = crate.add_workflow(
        builder.root / dest,
        dest_path=dest,
        main=True,
        lang="snakemake",
        lang_version=snakemake_version,
        properties={
            "name": "snakeddp",
            "description": "Partitioned data -> distributed PyTorch Lightning training -> report, as one workflow.",
            "version": commit or __version__,
            "license": {"@id": LICENSE["@id"]},
            "encodingFormat": "text/x-snakemake",
        },
    )
    workflow.type.append("HowTo")
    for path in workflow_files(repo):
        if path != snakefile:
            part = f"{PAYLOAD}/workflow/{path.relative_to(repo).as_posix()}"
            builder.add(path, part, description="workflow source file")
    for position, step in enumerate(steps):
        tool = _tool(builder, step)
        workflow.append_to("hasPart", tool)
        howto = builder.entity(
            f"{dest}#{step.rule}", "HowToStep", name=step.rule, position=str(position), workExample={"@id": tool.id}
        )
        workflow.append_to("step", howto)
    return workflow


def _train_tool(builder: CrateBuilder, runs: Sequence[Run], params: Sequence[str]) -> ContextEntity:
    """The application every training run executes, with what it ran on and its sweepable inputs."""
    tool = _tool(builder, rules.BY_RULE["train"])
    stacks = {}
    for run in runs:
        env = run.provenance["environment"]
        for name in ("python", "torch", "lightning", "cuda", "nccl"):
            software = _software(builder, name, env.get(name))
            if software is not None:
                stacks[software.id] = software
    tool["softwareRequirements"] = [{"@id": key} for key in sorted(stacks)]
    for key in params:
        value = flatten(runs[0].provenance["config"]).get(key)
        parameter = builder.entity(
            f"#snakeddp.train-param-{key}",
            "FormalParameter",
            name=key,
            additionalType=_additional_type(value),
            description=f"config key {key} (varied by the sweep)",
            conformsTo={"@id": "https://bioschemas.org/profiles/FormalParameter/1.0-RELEASE"},
        )
        tool.append_to("input", parameter)
    return tool


def _run_action(
    builder: CrateBuilder, run: Run, tool: ContextEntity, params: Sequence[str], files: Mapping[str, Any]
) -> ContextEntity:
    """One training run as a CreateAction of the train step."""
    p = run.provenance
    # provenance's launch record: where and how the run was placed (not the config's launch section).
    launched, timing = p["launch"], p["timing"]
    config = flatten(p["config"])
    values = []
    for key in params:
        value = builder.entity(
            f"#{run.run_id}-{key}",
            "PropertyValue",
            name=key,
            value=str(config.get(key)),
            exampleOfWork={"@id": f"#snakeddp.train-param-{key}"},
        )
        builder.crate.get(f"#snakeddp.train-param-{key}").append_to("workExample", value)
        values.append(value)
    environment = [
        builder.entity(f"#{run.run_id}-env-{name}", "PropertyValue", name=name, value=value)
        for name, value in launched["variables"].items()
    ]
    results = [files[k] for k in ("checkpoints", "metrics", "provenance", "hang") if k in files]
    results.append(_account_values(builder, run))
    results.append(_pace_values(builder, run))
    action = builder.crate.add_action(
        tool,
        identifier=f"#run-{run.run_id}",
        object=[files["run_config"], files["manifest"], *files.get("environment", []), *files["user_code"], *values],
        result=[item for group in results for item in (group if isinstance(group, list) else [group])],
        properties={
            "@type": "CreateAction",
            "name": f"Training run {run.run_id}",
            "description": (
                f"{p['status']} after {counted(p['training']['epochs_completed'], 'epoch')} "
                f"on {launched['nodes']} node(s) x "
                f"{launched['processes_per_node']} process(es) ({launched['backend']}, "
                f"launcher {launched['launcher']}, "
                f"hosts {' '.join(launched['hosts'])}, job {launched['job_id'] or '-'}); best {run.monitor['metric']} "
                f"{run.best_score}; code {p['code']['commit'] or 'unknown'}"
                f"{' (dirty)' if p['code']['dirty'] else ''}"
            ),
            "startTime": timing["started_at"],
            "endTime": timing["finished_at"],
            "actionStatus": {"@id": "http://schema.org/CompletedActionStatus"},
        },
    )
    agent = _agent(builder, launched.get("user"))
    if agent is not None:
        action["agent"] = {"@id": agent.id}
    if environment:
        action["environment"] = [{"@id": e.id} for e in environment]
    for log in files.get("log", []):
        log["about"] = {"@id": action.id}
    return action


def _tool_action(
    builder: CrateBuilder,
    rule: str,
    subject: str,
    outputs: Sequence[Any] = (),
    inputs: Sequence[Any] = (),
    detail: str = "",
) -> ContextEntity:
    """One execution of a step's tool (other than training) as a CreateAction: what it read and wrote."""
    step = rules.BY_RULE[rule]
    action = builder.entity(
        f"#{rule}-{subject}",
        "CreateAction",
        name=f"{rule} {subject}",
        description=f"{step.command}: {step.does}{detail}",
        instrument={"@id": step.tool},
    )
    for key, items in (("object", inputs), ("result", outputs)):
        if items:
            references = [{"@id": item.id} for item in items]
            action[key] = references[0] if len(references) == 1 else references
    return action


def _data_actions(builder: CrateBuilder, run: Run, manifest: Any) -> list[tuple[str, ContextEntity]]:
    """The steps that made a run's dataset: those of its source (``snakeddp.run.rules``). A table, its
    ingestion, the partitions and the validation split stay out of the crate (their size); the manifest,
    which is in it, lists the checksum of each. A module dataset's record stands where the manifest would."""
    data, config = run.provenance["data"], run.provenance["config"]["data"]
    where = f" (checksum of each in {manifest.id})"
    made: dict[str, dict[str, Any]] = {"data_manifest": {"outputs": [manifest]}, "data_module": {"outputs": [manifest]}}
    if config["source"] == rules.TABLE:
        made["data_table"] = {"detail": f"; from {config['table']['path']}"}
    if data["records"]:
        train, val = data["records"]["train"], data["records"]["val"]
        made["data_partition"] = {"detail": f"; {data['partitions']} partitions, {train} records{where}"}
        made["data_val"] = {"detail": f"; {val} records{where}"}
    return _step_actions(builder, rules.for_dataset(config["source"]), data["dataset"], made)


def _step_actions(
    builder: CrateBuilder, steps: Sequence[rules.Step], subject: str, made: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, ContextEntity]]:
    """An action of each step for ``subject``: with what ``made`` says it read and wrote, else its description."""
    return [(step.rule, _tool_action(builder, step.rule, subject, **made.get(step.rule, {}))) for step in steps]


def _account_values(builder: CrateBuilder, run: Run) -> list[ContextEntity]:
    """Where the run's wall time went, all its tries together (provenance timing.goodput.account, run.account):
    a PropertyValue per Goodput bucket in seconds, the queue wait ("not known" where the platform cannot tell),
    GPU-hours and the GPUs' mean utilisation; none for a run recorded before accounts were kept."""
    kept = (run.provenance["timing"].get("goodput") or {}).get("account")
    if not kept:
        return []
    measured = {**kept["buckets"], "queue_wait_s": account.shown(kept["queue_wait_s"]), "gpu_hours": kept["gpu_hours"]}
    if kept["gpu_util_mean"] is not None:
        measured["gpu_util_mean"] = kept["gpu_util_mean"]
    units = {"gpu_hours": "GPU-hours", "gpu_util_mean": "percent"}
    return [
        builder.entity(
            f"#{run.run_id}-account-{name}",
            "PropertyValue",
            name=name,
            value=value,
            # A unit for a number only: "not known seconds" said a wait was measured.
            **({"unitText": units.get(name, "seconds")} if isinstance(value, (int, float)) else {}),
        )
        for name, value in measured.items()
    ]


def _pace_values(builder: CrateBuilder, run: Run) -> list[ContextEntity]:
    """Each rank's pace over its try (provenance launch.ranks[].pace, snakeddp.cluster.pace): a PropertyValue of its
    own seconds per step relative to the fastest rank's, with the spells it was named slow; none where nothing
    scored it."""
    values = []
    for rank in run.provenance["launch"]["ranks"]:
        pace = rank.get("pace") or {}
        if pace.get("relative") is None:
            continue
        spells = "; ".join(f"slow from {s['since']} to {s['until'] or 'its end'}" for s in pace["slow_spells"])
        values.append(
            builder.entity(
                f"#{run.run_id}-rank-{rank['rank']}-pace",
                "PropertyValue",
                name=f"rank {rank['rank']} pace",
                value=pace["relative"],
                description=f"on {rank['host']}: the fastest rank's own seconds per training step over this rank's, "
                f"over the try (1 is the fastest){f'; {spells}' if spells else ''}{_clock_said(rank, pace)}",
            )
        )
    return values


def _clock_said(rank: Mapping[str, Any], pace: Mapping[str, Any]) -> str:
    """On a GPU, that the pace is its host's view (pace.clock: its own time is read from the host's clock)."""
    if pace.get("clock") != "host" or not str(rank.get("device", "")).startswith("cuda"):
        return ""
    return "; read from the host's clock, which sees a slow GPU kernel only where the host waits for it"


def _run_files(builder: CrateBuilder, run: Run) -> dict[str, Any]:
    """Place one run's inputs and outputs in the crate and describe them."""
    p = run.provenance
    paths, base = layout.RunPaths(run.run_dir), f"{PAYLOAD}/{layout.RUNS}/{run.run_id}"
    files: dict[str, Any] = {
        "run_config": builder.add(paths.run_file, f"{base}/{layout.RUN_FILE}", description="resolved run config"),
        "metrics": builder.add(paths.metrics, f"{base}/{layout.METRICS}", description="one row per epoch"),
        "provenance": builder.add(
            paths.provenance,
            f"{base}/{layout.PROVENANCE}",
            description="what the run was made from (schema: snakeddp provenance.schema.json)",
        ),
    }
    manifest, dataset = run.manifest_path, p["data"]["dataset"]
    files["manifest"] = builder.add(
        manifest,
        f"{PAYLOAD}/data/{dataset}/{manifest.name}",
        sha256=p["data"]["manifest_sha256"],
        description=(
            f"data manifest of {dataset}: checksum of each of its {p['data']['partitions']} train partitions "
            "and the validation file"
            if p["data"]["partitions"]
            else f"record of {dataset}: the DataModule that reads its data (data.module) and its arguments"
        ),
    )
    record = p["environment"]["record"]
    if record and run.resolve(record).is_file():
        files["environment"] = [
            builder.add(
                run.resolve(record),
                f"{PAYLOAD}/envs/{Path(record).name}",
                description=f"captured environment, hash {p['environment']['environment_hash']}",
            )
        ]
        bom = sbom_of(run)
        if bom is not None:
            files["environment"].append(
                builder.add(
                    bom,
                    f"{PAYLOAD}/envs/{bom.name}",
                    encodingFormat="application/vnd.cyclonedx+json",
                    conformsTo={"@id": "https://cyclonedx.org/docs/1.6/json/"},
                    description="CycloneDX bill of materials of that environment: every installed package with its "
                    "licence, index and the SHA-256 of its installed files (snakeddp verify checks a node against it)",
                )
            )
    best = (p["training"]["best_checkpoint"] or {}).get("path")
    checkpoints = p["training"].get("checkpoints") or [c for c in (p["training"]["last_checkpoint"],) if c]
    files["checkpoints"] = [
        builder.add(
            run.file(c),
            f"{base}/{c['path']}",
            link=True,
            sha256=c["sha256"],
            description=(
                f"best checkpoint ({run.monitor['metric']} {run.best_score})" if c["path"] == best else "checkpoint"
            ),
        )
        for c in checkpoints
        if run.file(c).is_file()
    ]
    log = layout.train_log(run.workdir, run.run_id)
    if log.is_file():
        files["log"] = [builder.add(log, f"{base}/train.log", description="launcher and training log (rank 0)")]
    files["hang"] = _hang_evidence(builder, run, f"{base}/{layout.HANG_EVIDENCE}")
    files["user_code"] = _user_code(builder, run)
    return files


def _user_code(builder: CrateBuilder, run: Run) -> list[Any]:
    """The module files of the user's classes the run trained with (model.target, data.module), under
    files/code/ as the workflow's directory holds them: where they are inside it and still the bytes the run
    recorded (sha256). Without them the crate named a model it could not build; a file edited since, or one
    outside the workflow's directory (an installed package), stays named by its record alone."""
    placed = []
    for entry in run.provenance.get("user_code") or []:
        path = inside(run.workdir, entry.get("file"))
        if path is None or not path.is_file() or sha256_file(path) != entry.get("sha256"):
            continue
        dest = f"{PAYLOAD}/code/{path.resolve().relative_to(run.workdir.resolve()).as_posix()}"
        placed.append(
            builder.crate.get(dest)
            or builder.add(
                path,
                dest,
                types=("File", "SoftwareSourceCode"),
                sha256=entry["sha256"],
                description=f"the {entry['role']} code the run trained with: {entry['target']}",
            )
        )
    return placed


# What each file of a hang's evidence holds (snakeddp.training.gather writes them).
EVIDENCE = {
    "stacks.txt": "every rank's Python stack when the run was found hung (faulthandler)",
    "gpu.json": "the GPU state of the rank the others waited for, as NVML reported it (none on the CPU)",
}


def _hang_evidence(builder: CrateBuilder, run: Run, base: str) -> list[Any]:
    """The evidence of each hung try of the run's attempt (hang/try-<n>/; a run written before that keeps one
    folder, hang/), where a try hung; ``run`` may be an earlier attempt, whose evidence moved with it."""
    hung = any(t["outcome"] == "hung" for t in run.provenance.get("attempt", {}).get("tries") or [])
    folder = run.paths.hang_evidence
    found = sorted(folder.rglob("*")) if hung and folder.is_dir() else []
    added = []
    for path in found:
        within = path.relative_to(folder)
        if not path.is_file() or any(part.startswith(".") for part in within.parts):  # a folder being written
            continue
        about = EVIDENCE.get(path.name, "a rank's flight recorder dump of its collectives (torch's pickle)")
        tried = f"; try {within.parts[0].removeprefix('try-')}" if len(within.parts) > 1 else ""
        added.append(builder.add(path, f"{base}/{within.as_posix()}", description=f"{about}{tried}"))
    return added


def attempt_record(run: Run) -> str:
    """Where an earlier attempt's provenance.json sits in the crate (the report's history links to it)."""
    return f"{PAYLOAD}/{layout.RUNS}/{run.run_id}/{layout.ATTEMPTS}/{run.run_dir.name}/{layout.PROVENANCE}"


def _unique_names(paths: Sequence[str | Path]) -> list[str]:
    """File names for ``paths`` in one folder: the name itself, numbered in given order where names repeat
    (the default config/config.yaml and an overlay such as examples/tabular/config.yaml)."""
    names = [Path(path).name for path in paths]
    return [name if names.count(name) == 1 else f"{index}-{name}" for index, name in enumerate(names, 1)]


def build(
    root: str | Path,
    runs: Sequence[Run],
    params: Sequence[str],
    settings: Mapping[str, Any],
    repo: str | Path,
    config_files: Sequence[str | Path],
    resolved_config: Mapping[str, Any],
    report_files: Sequence[str | Path],
    snakemake_version: str,
) -> Path:
    """Write ``root/ro-crate-metadata.json`` and place the crate's files under ``root/files``."""
    root, repo = Path(root), Path(repo)
    builder = CrateBuilder(root, redact_text(settings["title"]))
    crate = builder.crate
    for profile, name in PROFILES.items():
        crate.root_dataset.append_to(
            "conformsTo", builder.entity(profile, "CreativeWork", name=name, version=profile.rsplit("/", 1)[-1])
        )
    tool = _train_tool(builder, runs, params)
    configs = _config_files(builder, root, config_files, resolved_config)
    trained = _trained(builder, runs, tool, params, configs)
    actions = trained.actions
    reports = [builder.add(Path(path), Path(path).relative_to(root).as_posix()) for path in report_files]
    once = [step for step in rules.STEPS if step.per == rules.PER_WORKFLOW]
    actions += _step_actions(builder, once, "runs", {"report": {"outputs": reports, "inputs": trained.provenance}})
    image = runs[0].workdir / IMAGE_RECORD if runs else None
    if image is not None and image.is_file():
        record = builder.add(image, f"{PAYLOAD}/envs/{image.name}", description="record of the image build")
        actions.append(("build_image", _tool_action(builder, "build_image", "image", [record])))
    ran = {rule for rule, _ in actions}
    commits = {run.provenance["code"]["commit"] for run in runs}
    workflow = _workflow(
        builder,
        repo,
        snakemake_version,
        commits.pop() if len(commits) == 1 else None,
        [step for step in rules.STEPS if step.rule in ran],
    )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    started = min((run.provenance["timing"]["started_at"] for run in runs), default=now)
    workflow_run = crate.add_action(
        workflow,
        identifier="#workflow-run",
        object=[*configs, *(manifest for _, manifest in trained.datasets.values())],
        result=[*trained.outputs, *reports],
        properties={
            "@type": "CreateAction",
            "name": f"snakeddp workflow run: {len(runs)} training run(s)",
            "description": "From the first training run's start to this report.",
            "startTime": started,
            "endTime": now,
            "actionStatus": {"@id": "http://schema.org/CompletedActionStatus"},
        },
    )
    organize = _orchestration(builder, workflow, actions, workflow_run, snakemake_version, (started, now))
    user = next((run.provenance["launch"].get("user") for run in runs if run.provenance["launch"].get("user")), None)
    agent = _agent(builder, user)
    if agent is not None:
        # Whoever ran the workflow ran its steps; a training run names its own agent (its rank 0's user).
        for entity in (workflow_run, organize, *(action for _, action in actions)):
            entity.setdefault("agent", {"@id": agent.id})
    crate.root_dataset["mentions"] = [{"@id": workflow_run.id}, *({"@id": action.id} for _, action in actions)]
    return atomic_write_json(root / BASENAME, crate.metadata.generate())


def _config_files(
    builder: CrateBuilder, root: Path, config_files: Sequence[str | Path], resolved_config: Mapping[str, Any]
) -> list[Any]:
    """The workflow's config files (credentials redacted) and the config after defaults, as the crate's files."""
    configs = [
        builder.add(
            _redacted_copy(Path(path), root / PAYLOAD / "workflow" / "config" / name),
            f"{PAYLOAD}/workflow/config/{name}",
            description=f"workflow config file {path}",
        )
        for path, name in zip(config_files, _unique_names(config_files), strict=True)
    ]
    resolved = root / PAYLOAD / "workflow" / "config.resolved.yaml"
    atomic_write_text(resolved, yaml.safe_dump(dict(resolved_config), sort_keys=False, allow_unicode=True))
    configs.append(
        builder.add(resolved, resolved.relative_to(root).as_posix(), description="config after defaults (validated)")
    )
    return configs


@dataclass
class _Trained:
    """What the runs put into the crate: the actions that made their files, and the files the workflow run names."""

    actions: list[tuple[str, Any]] = field(default_factory=list)
    datasets: dict[str, tuple[Run, Any]] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)
    provenance: list[Any] = field(default_factory=list)


def _trained(
    builder: CrateBuilder, runs: Sequence[Run], tool: Any, params: Sequence[str], configs: list[Any]
) -> _Trained:
    """Each run's files and the actions that made them (its data, environment and run config), once each."""
    trained, environments = _Trained(), {}
    per_run = [step for step in rules.STEPS if step.per == rules.PER_RUN and step.rule != "train"]
    for run in runs:
        files = _run_files(builder, run)
        trained.actions.append(("train", _run_action(builder, run, tool, params, files)))
        made = {"run_config": {"outputs": [files["run_config"]], "inputs": configs}}
        trained.actions += _step_actions(builder, per_run, run.run_id, made)
        trained.datasets.setdefault(files["manifest"].id, (run, files["manifest"]))
        environments.update({record.id: record for record in files.get("environment", [])})
        trained.outputs += [files["metrics"], files["provenance"], *files["checkpoints"]]
        trained.provenance.append(files["provenance"])
    for run in runs:
        for earlier in earlier_attempts(run.run_dir):
            record = attempt_record(earlier)
            builder.add(
                earlier.paths.provenance,
                record,
                description=f"provenance of {earlier.label}, an earlier finished attempt of run {run.run_id}",
            )
            _hang_evidence(builder, earlier, f"{record.rsplit('/', 1)[0]}/{layout.HANG_EVIDENCE}")
    for run, manifest in trained.datasets.values():
        trained.actions += _data_actions(builder, run, manifest)
    for record in environments.values():
        trained.actions.append(("env_capture", _tool_action(builder, "env_capture", Path(record.id).stem, [record])))
    return trained


def _orchestration(
    builder: CrateBuilder,
    workflow: Any,
    actions: list[tuple[str, Any]],
    workflow_run: Any,
    snakemake_version: str,
    span: tuple[str, str],
) -> Any:
    """Snakemake's run of the workflow (Workflow Run Crate): a control action per step it orchestrated."""
    engine = builder.entity(
        "#snakemake", "SoftwareApplication", name="Snakemake", version=snakemake_version,
        url="https://snakemake.readthedocs.io",
    )  # fmt: skip
    controls = [
        builder.entity(
            f"#control-{action.id.lstrip('#')}",
            "ControlAction",
            name=f"orchestrate {action.id.lstrip('#')}",
            instrument={"@id": f"{workflow.id}#{rule}"},
            object={"@id": action.id},
        )
        for rule, action in actions
    ]
    return builder.entity(
        "#snakemake-run",
        "OrganizeAction",
        name="Snakemake run of the workflow",
        instrument={"@id": engine.id},
        object=[{"@id": c.id} for c in controls],
        result={"@id": workflow_run.id},
        startTime=span[0],
        endTime=span[1],
    )
