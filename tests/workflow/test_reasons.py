"""A rerun's reason in words: the changed keys of a run's config, as Snakemake's metadata holds them."""

from __future__ import annotations

import hashlib
import json

from snakemake.persistence import ParamsChange

from snakeddp.compat.snakemake import name_params_changes
from snakeddp.workflow.reasons import changes, describe


def run_param(lr: float, **launch: int) -> str:
    """The train stage's parameter as Snakemake records it: repr of the run's JSON."""
    run = {"point": {}, "config": {"model": {"lr": lr, "hidden_sizes": [16]}, "launch": {"devices": 1, **launch}}}
    return repr(json.dumps(run, sort_keys=True))


def test_a_run_config_edit_names_only_the_keys_that_changed():
    assert describe({run_param(0.003)}, {run_param(0.01)}) == "model.lr: 0.003 → 0.01"
    assert describe({run_param(0.003)}, {run_param(0.01, devices=2)}) == (
        "launch.devices: 1 → 2, model.lr: 0.003 → 0.01"
    )
    assert describe({run_param(0.003)}, {run_param(0.003, threads=2)}) == "launch.threads: (none) → 2"


def test_several_parameters_pair_by_what_they_share_and_plain_values_show_both_sides():
    report = repr({"title": "runs", "figures": {"scaling": True}})
    edited = repr({"title": "runs", "figures": {"scaling": False}})
    assert describe({report, "'abc'"}, {edited, "'abd'"}) == "abc → abd, figures.scaling: true → false"
    assert describe({"'x' * 3"}, set()) == "'x' * 3 → (none)"
    assert describe({"'" + "a" * 100 + "'"}, {"'b'"}) == "a" * 59 + "… → b"


def test_the_patched_change_reads_as_keys_and_lists_files_only_when_changed():
    assert name_params_changes(describe)  # the installed Snakemake is the release it was read against
    changed = ParamsChange(only_old={run_param(0.003)}, only_new={run_param(0.01)}, files={"run.yaml"})
    assert str(changed) == "model.lr: 0.003 → 0.01" and list(changed) == ["run.yaml"]
    unchanged = ParamsChange(files={"run.yaml"})
    assert str(unchanged) == "No params change" and list(unchanged) == []


def test_a_long_list_says_what_it_gained_and_lost_and_a_digest_its_first_characters():
    """Both sides of data.table.features were cut to the same 60 characters where a column was added at the end, and
    a table's sha256 to 59: the reason read as the same value twice."""
    features = [f"x{i}" for i in range(12)]

    def table(columns, sha256):
        return {"config": {"data": {"table": {"features": columns, "sha256": sha256}}}}

    old, new = hashlib.sha256(b"old").hexdigest(), hashlib.sha256(b"new").hexdigest()
    said = changes(table(features, old), table([*features, "region"], new))
    assert said == ["data.table.features: + region", f"data.table.sha256: {old[:12]}… → {new[:12]}…"], said
    assert changes(table(features, old), table(features[::-1], old)) == [
        "data.table.features: the same 12 values in another order"
    ]
    assert changes(table(features, old), table(features[1:], old)) == ["data.table.features: - x0"]
    assert changes({"hidden_sizes": [16]}, {"hidden_sizes": [16, 16]}) == ["hidden_sizes: [16] → [16, 16]"]


def test_the_reports_settings_are_not_named_again_beside_the_config_key_they_come_from():
    """The report's parameter holds its settings and the config they come from: a title edit read "report.title:
    snakeddp runs → My runs, settings.title: snakeddp runs → My runs"."""

    def report(title: str, dpi: int = 150) -> str:
        settings = {"title": title, "dpi": dpi}
        return repr(json.dumps({"settings": settings, "config": {"report": settings}, "configfiles": []}))

    assert describe({report("snakeddp runs")}, {report("My runs")}) == "report.title: snakeddp runs → My runs"
    assert describe({report("a")}, {report("b", dpi=300)}) == "report.dpi: 150 → 300, report.title: a → b"
