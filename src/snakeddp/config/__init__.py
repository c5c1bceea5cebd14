"""Load, validate and expand the snakeddp configuration.

The JSON Schema in ``schemas/config.schema.yaml`` (linked as ``config/schema.yaml``) is the one
definition of every key, its type, its default and its documentation. This module applies it
(filling defaults), turns its errors into one message a person can act on, and expands the
``sweep`` grid into one fully resolved config per run.

May import: ``compat``, ``errors``, ``platforms``, ``util`` (the floors below its own: tests/test_floors.py).
"""

from __future__ import annotations

import copy
import difflib
import functools
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from snakeddp.config import coerce, lightningcli, monitor, sources
from snakeddp.config.bounds import check_run_size, check_shape, check_sweep_size
from snakeddp.config.naming import canonical, run_id
from snakeddp.config.network import network_variable_error
from snakeddp.config.schema import load_schema
from snakeddp.errors import ConfigError
from snakeddp.platforms import by_name as platform_rows
from snakeddp.util import yamltext
from snakeddp.util.hashing import sha256_json
from snakeddp.util.redact import MASK, is_secret_name, redact_text, secret_keys

# Keys that define what a run computes. platform and report settings say where it runs and how
# it is shown, so changing them never retrains anything.
RUN_KEYS = ("seed", "data", "model", "trainer", "launch")
# launch keys that only reach the scheduler (sbatch --mem/--time, the AzureML timeout): raising them
# after a time limit must resume the run, not restart it, so they stay out of its identity.
SCHEDULER_KEYS = ("mem_mb", "runtime")
# Run keys added after runs were finished with the keys before them. At their default they stay out
# of a run's config (run.yaml, its identity, its attempt key), so a run finished before the key
# existed stays up to date; whoever reads one asks for it with its default (``monitor``).
QUIET_AT_DEFAULT = (
    "trainer.monitor",
    "trainer.budget_continues",
    "trainer.matmul_precision",
    "trainer.deterministic",
    "data.table.version",
    "data.table.table_id",
    # Keys added with images, arrays, categories and wide tables: at their default a run config (and so
    # its id, and a table dataset's id) is what it was before they existed.
    "data.table.feature_pattern",
    "data.table.exclude",
    "data.table.categories",
    "data.table.unseen",
    "data.image",
    "data.augment",
    "model.width",
    "model.depth",
    "launch.hang_timeout",
    "launch.straggler",
    "launch.straggler_ratio",
    "launch.straggler_window",
)
# Run keys that say how attempts of a run relate, not what one computes: out of its identity.
RELATION_KEYS = ("trainer.budget_continues",)
# Run keys that bound how long its processes may wait on each other: every rank reads them from
# run.yaml, and raising one must resume an attempt stopped by it, not start another.
WATCH_KEYS = ("launch.hang_timeout", "launch.straggler", "launch.straggler_ratio", "launch.straggler_window")
# Keys of the built-in models (model.name): with model.target the user's class is built from
# model.kwargs instead, so one set away from its default would be silently ignored.
BUILT_IN_MODEL_KEYS = (
    "model.name",
    "model.hidden_sizes",
    "model.width",
    "model.depth",
    "model.optimizer",
    "model.lr",
    "model.weight_decay",
)
# Free-form maps among the keys a run computes from: run.yaml carries them to every rank, provenance
# and the crate record them, the run's identity hashes them. A secret has no place there; the
# environment is how it reaches a user's code.
IDENTITY_MAPS = ("model.kwargs", "data.module_kwargs", "trainer.strategy_options")
# Keys that only mean something beside another: (key, what it needs, whether the config has that).
# Set without it, such a key would be silently ignored, so validation refuses it.
ONLY_WITH = (
    ("model.kwargs", "model.target", lambda cfg: bool(cfg["model"].get("target"))),
    ("data.module_kwargs", "data.module", lambda cfg: bool(cfg["data"].get("module"))),
    ("data.table", "data.source: table", lambda cfg: cfg["data"].get("source") == "table"),
    # Images come from tables (a folder of class folders is one); synthetic data has none.
    ("data.image", "data.source: table", lambda cfg: cfg["data"].get("source") == "table"),
    ("data.augment", "data.source: table", lambda cfg: cfg["data"].get("source") == "table"),
    # The generator's keys: a table or a DataModule has its own samples (and changing one would only retrain).
    *((f"data.{key}", "data.source: synthetic", lambda cfg: cfg["data"].get("source", "synthetic") == "synthetic")
      for key in sources.SYNTHETIC_ONLY),
    # The ranks' paces are scored by the hang watch (snakeddp.cluster.pace), which null turns off.
    *((f"launch.{key}", "launch.hang_timeout (auto or seconds)",
       lambda cfg: cfg["launch"].get("hang_timeout") is not None)
      for key in ("straggler", "straggler_ratio", "straggler_window")),
)  # fmt: skip


def _with_defaults(validator_class: type) -> type:
    """A validator that fills in each property's ``default`` before validating it."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": fill_defaults})


_DefaultingValidator = _with_defaults(jsonschema.Draft202012Validator)


def _dotted(path: Iterator[Any]) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _describe(error: jsonschema.ValidationError, schema: Mapping[str, Any], platform: Any = None) -> str:
    key = _dotted(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        lines = []
        for name in extra:
            where = f"{key}.{name}" if error.absolute_path else name
            close = difflib.get_close_matches(name, allowed, n=1)
            elsewhere = _sections_with(schema, name) if error.absolute_path else []
            beside_target = key == "model" and isinstance(error.instance, Mapping) and error.instance.get("target")
            built_in = bool(close) and f"model.{close[0]}" in BUILT_IN_MODEL_KEYS
            if beside_target and not elsewhere and (built_in or not close):
                # Not a built-in's key (hidden_sizes is refused beside model.target): the class's own argument.
                hint = f"model.target's own arguments go in model.kwargs: did you mean model.kwargs.{name}?"
            elif close:
                hint = f"did you mean '{close[0]}'?"
            elif elsewhere:  # model.max_epochs: a key of another section
                hint = f"it is a key of {' and '.join(elsewhere)}: did you mean {elsewhere[0]}.{name}?"
            else:
                hint = f"known keys: {', '.join(allowed)}"
            lines.append(f"{where}: unknown key ({hint})")
        return "\n".join(lines)
    if "propertyNames" in error.schema_path and key == "network.env":
        name = str(error.instance)
        return network_variable_error(name, remote_secret_home(platform, name))
    if key == "experiment" and error.validator in ("pattern", "maxLength"):
        return (
            f"experiment: {error.instance!r} cannot start a run id. HINT: name it with letters and digits, "
            "single '.', '_', '+' or '-' between them, at most 64 characters (lr-search, ddp_check)."
        )
    if "propertyNames" in error.schema_path:
        return (
            f"{key}: '{error.instance}' is not a sweepable key. HINT: sweep keys are dotted paths "
            "such as model.lr, launch.devices or data.num_features"
        )
    secret = any(is_secret_name(str(part)) for part in error.absolute_path)  # its value is not shown
    if key.startswith("sweep.") and error.validator == "type" and error.validator_value == "array" and not secret:
        swept = key.removeprefix("sweep.")
        return (
            f"{key}: {error.instance} is one value, and a sweep takes a list of them. HINT: write it as a list, "
            f"e.g. sweep: {{{swept}: [{error.instance}]}} (--config 'sweep={{{swept}: [{error.instance}]}}')"
        )
    if error.validator == "type" and not secret:
        fix = _type_fix(key, error.instance, error.validator_value)
        if fix:
            return f"{key}: {_shortened(error)}. HINT: {fix}"
    if error.validator in ("anyOf", "oneOf") and not secret:
        # jsonschema says only "is not valid under any of the given schemas": name what each one accepts.
        accepted = ", ".join(_accepted(sub) for sub in error.validator_value)
        return f"{key}: {_shown(error.instance)} is none of what it accepts: {accepted}"
    if key in ("model.target", "data.module") and error.validator == "pattern":
        return _import_path_error(key, str(error.instance))
    if error.validator == "pattern" and error.schema.get("description"):
        # A regular expression says little to a reader: the key's own description says what it wants.
        wanted = " ".join(str(error.schema["description"]).split()).split(". ")[0].rstrip(".")
        return f"{key}: {_shortened(error)} ({key}: {wanted})"
    return f"{key}: {_shortened(error)}"


_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*")


def _type_fix(key: str, value: Any, wanted: Any) -> str | None:
    """The edit that gives ``value`` the type the schema wants, where one is plain: a list of the one value, or a
    number (or true/false) written without the quotes that made it text."""
    kinds = set(wanted) if isinstance(wanted, list) else {wanted}
    name = key.rpartition(".")[2]
    if len(str(value)) > 60:
        return None  # no edit to spell out for a long value: the line says what the key takes
    if "array" in kinds and isinstance(value, str | int | float) and not isinstance(value, bool):
        return f"write it as a list: {name}: [{value}]"
    if isinstance(value, str) and kinds & {"integer", "number", "boolean"}:
        try:
            parsed = yamltext.safe_load(value)
        except yaml.YAMLError:
            return None
        fits = {"integer": isinstance(parsed, int), "number": isinstance(parsed, int | float), "boolean": False}
        if isinstance(parsed, bool):
            fits = {"boolean": True}
        if any(fits.get(kind) for kind in kinds):
            return f"write it without quotes: {name}: {value.strip()}"
    return None


def _import_path_error(key: str, value: str) -> str:
    """A class given as its file's path (byo/net.py:Net) or with a dot before it (LightningCLI's class_path form,
    byo.net.Net): the import path it means, which the schema's pattern alone left the user to work out."""
    module, colon, name = value.partition(":")
    if not colon:
        module, _, name = value.rpartition(".")
    module = module.strip().removeprefix("./").removesuffix(".py").replace("/", ".").replace("\\", ".")
    meant = f"{module}:{name.strip()}"
    fix = (
        f"did you mean '{meant}'? (a module under the directory snakemake runs in, dots for its folders, no .py)"
        if _IMPORT_PATH.fullmatch(meant)
        else "write it as 'package.module:ClassName', e.g. 'examples.tabular.model:TabularNet'."
    )
    return f"{key}: {value!r} is not an import path. HINT: {fix}"


def _documented_in(errors: list[jsonschema.ValidationError]) -> str:
    """Where the refused keys are documented: config/schema.yaml, or a platform's section in its package's
    settings.yaml (the schema puts each registered platform's section in)."""
    package = Path(__file__).resolve().parents[1]
    files: dict[str, None] = {}
    for error in errors:
        section = str(error.absolute_path[0]) if error.absolute_path else ""
        own = bool(section) and (package / section / "settings.yaml").is_file()
        files[f"src/snakeddp/{section}/settings.yaml" if own else "config/schema.yaml"] = None
    return " and ".join(files)


def _sections_with(schema: Mapping[str, Any], name: str) -> list[str]:
    """The top-level sections of ``schema`` with a key ``name`` of their own."""
    sections = schema.get("properties", {})
    return [section for section, sub in sections.items() if name in (sub.get("properties") or {})]


def _shown(value: Any, limit: int = 120) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit // 2]}... ({len(shown)} characters)"


def _accepted(schema: Mapping[str, Any]) -> str:
    """What one alternative of an anyOf accepts, in words: ``"auto"``, ``a number from 5 to 86400``, ``null``."""
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " or ".join(json.dumps(value) for value in schema["enum"])
    kinds = schema.get("type", "a value")
    kinds = " or ".join(kinds) if isinstance(kinds, list) else kinds
    named = {"number": "a number", "integer": "an integer", "string": "text", "array": "a list", "object": "a mapping"}
    text = named.get(kinds, kinds)
    low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
    if low is not None and high is not None:
        text += f" from {low} to {high}"
    elif low is not None:
        text += f" of at least {low}" if "minimum" in schema else f" above {low}"
    elif high is not None:
        text += f" of at most {high}"
    return text


def _shortened(error: jsonschema.ValidationError, limit: int = 120) -> str:
    """jsonschema's message with a long offending value cut down: an error stays one readable line.
    A value under a secret-looking key is not shown: the terminal and .snakemake/log keep what is printed."""
    shown = repr(error.instance)
    if any(is_secret_name(str(part)) for part in error.absolute_path):
        return error.message.replace(shown, MASK)
    if len(shown) <= limit:
        return error.message
    return error.message.replace(shown, f"{shown[: limit // 2]}... ({len(shown)} characters)")


def validate(config: Mapping[str, Any], source: str = "config") -> dict[str, Any]:
    """Return a deep copy of ``config`` with defaults filled in, or raise ConfigError.

    Every problem is reported at once, one line each, named by its dotted key. A model or DataModule
    written as LightningCLI writes it (class_path + init_args) comes back in snakeddp's keys.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: the configuration must be a mapping, got {type(config).__name__}")
    check_shape(config, source)
    schema = load_schema()
    # Before anything else reads it: a run written in LightningCLI's form is the same run (lightningcli).
    resolved = coerce.normalise(lightningcli.normalise(config, source), schema)
    unchosen = monitor.rising_without_mode([resolved])  # before the schema's defaults fill the mode in
    errors = sorted(
        _DefaultingValidator(schema).iter_errors(resolved),
        key=lambda e: (list(map(str, e.absolute_path)), e.message),
    )
    if errors:
        # A value is quoted as given: a URL's user:password@ or a SAS signature masked (report.title, a path).
        described = [_describe(e, schema, resolved.get("platform")) for e in errors]
        details = redact_text("\n  ".join(described))
        # Where every line has its own HINT, it is the one to follow: a second would say less.
        documented = _documented_in(errors)
        closing = (
            ""
            if all("HINT:" in line for line in described)
            else (f"\nHINT: every key is documented in {documented}; fix the keys above and rerun.")
        )
        raise ConfigError(f"{source} is not valid:\n  {details}{closing}")
    if unchosen:
        raise monitor.mode_error(*unchosen, source)
    _check_layout(resolved, source)
    return resolved


def _check_layout(cfg: Mapping[str, Any], source: str) -> None:
    """Cross-key rules JSON Schema cannot express."""
    launch, data = cfg.get("launch", {}), cfg.get("data", {})
    world = launch.get("nodes", 1) * launch.get("devices", 1)
    for key in ("num_records_per_train_file", "num_val_records"):
        if key in data and data[key] < world:
            raise ConfigError(
                f"{source}: data.{key}={data[key]} is smaller than the world size {world} "
                f"(launch.nodes x launch.devices), so some rank would get no samples. "
                f"HINT: raise data.{key} or lower launch.devices/launch.nodes."
            )
    sources.check(data, source)
    _check_only_with(cfg, source)
    _check_no_secrets(cfg, source)


def _check_no_secrets(cfg: Mapping[str, Any], source: str) -> None:
    for key in IDENTITY_MAPS:
        found = secret_keys(dotted_get(cfg, key), key)
        if found:
            variable = re.sub(r"[^A-Za-z0-9]+", "_", found[0].rsplit(".", 1)[-1]).strip("_").upper()
            raise ConfigError(
                f"{source}: {found[0]} looks like a secret, and {key} is part of what a run computes: run.yaml "
                "carries it to every rank and provenance records it. HINT: remove it from the config, "
                f"{secret_home(cfg.get('platform'), variable)}"
            )


def secret_home(platform: Any, variable: str) -> str:
    """Where a secret goes instead of the config, on ``platform``: where its ranks read it from."""
    row = platform_rows().get(str(platform))
    there = row.secrets if row is not None else None
    if there is None:  # local and Slurm: every job and rank inherits the environment (sbatch exports it)
        return (
            f"export it where snakemake runs (export {variable}=...) and read it in your code as "
            f'os.environ["{variable}"].'
        )
    return (
        f"and keep it {there.replace('VARIABLE', variable)}: on {platform} the ranks do not inherit the "
        "environment snakemake runs in (docs/security.md)."
    )


def remote_secret_home(platform: Any, variable: str) -> str:
    """``secret_home`` on a platform whose ranks do not inherit snakemake's environment; "" where they do."""
    row = platform_rows().get(str(platform))
    return secret_home(platform, variable) if row is not None and row.secrets is not None else ""


def dotted_get(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


@functools.cache
def _defaults_json() -> str:
    defaults: dict[str, Any] = {}
    _DefaultingValidator(load_schema()).validate(defaults)
    return json.dumps(defaults)


def defaults() -> dict[str, Any]:
    """Every key at its schema default."""
    return json.loads(_defaults_json())


def _check_only_with(cfg: Mapping[str, Any], source: str) -> None:
    every = defaults()
    if cfg.get("model", {}).get("target"):
        for key in BUILT_IN_MODEL_KEYS:
            value = dotted_get(cfg, key)
            if value is not None and value != dotted_get(every, key):
                raise ConfigError(
                    f"{source}: {key} configures the built-in models, and model.target is set, so here it would "
                    f"be silently ignored. HINT: pass it to your model's constructor as "
                    f"model.kwargs.{key.split('.')[-1]} (sweep that key instead), or remove {key}."
                )
    for key, needs, present in ONLY_WITH:
        value = dotted_get(cfg, key)
        if value is not None and value != dotted_get(every, key) and not present(cfg):
            raise ConfigError(
                f"{source}: {key} only applies with {needs}, so here it would be silently ignored. "
                f"HINT: set {needs} as well, or remove {key}."
            )


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        raw = yamltext.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return validate(raw, source=str(path))


def set_dotted(cfg: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"sweep.{key}: '{part}' is not a section of the config")
    node[leaf] = value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config -> {dotted.key: leaf}; lists stay leaves, empty sections vanish."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value}


def applying(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` without the keys that mean nothing in it: those ONLY_WITH names (a table run's generator keys, the
    straggler keys with the hang watch off), the built-in models' beside model.target, and a DataModule's run's
    table keys. What a tracker and the report show as the run's settings, where they would read as such."""
    kept = copy.deepcopy(dict(cfg))
    sections = {section: kept.setdefault(section, {}) for section in ("model", "data", "launch")}
    dropped = [key for key, _needs, present in ONLY_WITH if not present(kept)]
    if sections["model"].get("target"):
        dropped += BUILT_IN_MODEL_KEYS
    source = sections["data"].get("source", sources.SYNTHETIC)
    if source == sources.MODULE:
        own = {*sources.SOURCE_KEYS[sources.MODULE], *sources.LOADER_KEYS}
        dropped += [f"data.{key}" for key in sources.SOURCE_KEYS[sources.TABLE] if key not in own]
    for key in dropped:
        section, _, leaf = key.partition(".")
        sections[section].pop(leaf, None)
    return {section: value for section, value in kept.items() if section in cfg}


def run_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that defines what a run computes (QUIET_AT_DEFAULT keys
    left out at their default)."""
    run = {key: copy.deepcopy(cfg[key]) for key in RUN_KEYS if key in cfg}
    every = defaults()
    for key in QUIET_AT_DEFAULT:
        *parents, leaf = key.split(".")
        parent = dotted_get(run, ".".join(parents))
        if isinstance(parent, dict) and leaf in parent and parent[leaf] == dotted_get(every, key):
            del parent[leaf]
    return run


def run_identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run config without its scheduler requests, RELATION_KEYS and WATCH_KEYS: what its results depend on."""
    identity = copy.deepcopy(dict(run))
    for key in SCHEDULER_KEYS:
        identity.get("launch", {}).pop(key, None)
    for key in (*RELATION_KEYS, *WATCH_KEYS):
        section, _, leaf = key.partition(".")
        identity.get(section, {}).pop(leaf, None)
    return identity


def budget_continues(run: Mapping[str, Any]) -> bool:
    """Whether a higher trainer.max_epochs continues this run's finished attempts (trainer.budget_continues;
    null: the built-in models have no schedule over the budget, a model.target may have one)."""
    chosen = run.get("trainer", {}).get("budget_continues")
    return not run.get("model", {}).get("target") if chosen is None else bool(chosen)


def expand_sweep(cfg: Mapping[str, Any], source: str = "config") -> dict[str, dict[str, Any]]:
    """Map run id -> (sweep point, validated run config), one entry per point of the grid."""
    sweep = cfg.get("sweep", {})
    base = {k: v for k, v in cfg.items() if k != "sweep"}
    check_sweep_size(sweep, source)
    # Before the points: their run ids are made of the values, and a secret's would name its run.
    swept: dict[str, Any] = {}
    for key, values in sweep.items():
        set_dotted(swept, key, values[0])
    _check_no_secrets(swept, source)
    # Keys in the order run ids name them: a reordered sweep plans the same runs, in the same order.
    keys = canonical(sweep)
    runs: dict[str, dict[str, Any]] = {}
    for values in itertools.product(*(sweep[key] for key in keys)):
        point = dict(zip(keys, values, strict=True))
        point_cfg = copy.deepcopy(base)
        for key, value in point.items():
            set_dotted(point_cfg, key, value)
        rid = run_id(point, cfg.get("experiment"))
        label = f"{source} (sweep point {rid})" if point else source
        resolved = validate(point_cfg, source=label)
        if rid in runs:
            shown = ", ".join(f"{key}: {value!r}" for key, value in point.items())
            raise ConfigError(
                f"{source}: two sweep points share the run id '{rid}' ({shown}). HINT: give each value once in "
                f"the sweep's lists ({', '.join(keys)}); values that differ only in how they are written (1 and "
                "1.0) are one value."
            )
        runs[rid] = {"point": point, "config": run_config(resolved)}
        check_run_size(rid, runs[rid]["config"])
    return runs


def dataset_id(data: Mapping[str, Any]) -> str:
    """Directory name of a dataset: readable name plus a hash of everything that shapes its bytes."""
    return f"{data['name']}-{sha256_json(sources.identity(data))[:10]}"
