"""The report job (rule report, ``python -m snakeddp.steps report``): all of results/report/ in one process.

The rule hands everything over as two parameter files (snakeddp.workflow.paramfile): the report
settings, the config the crate records and the config files (the rerun key), and the job's inputs
and outputs by name (an output the workflow does not make is empty). As a shell step, not a
Snakemake ``script:``, it is forked from the workflow's warm process like every other step
(snakeddp.warm), where matplotlib and the report's modules are imported already.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.provenance.schema import validate
from snakeddp.report import configurations, figures, tuning
from snakeddp.report.page import write_crate, write_report
from snakeddp.report.search import view as search_view
from snakeddp.report.search import write_table as write_search_table
from snakeddp.report.table import varying_params, write_runs_table
from snakeddp.run.rungs import read_decision
from snakeddp.run.runs import runs_from_provenance
from snakeddp.util.terminal import say
from snakeddp.util.words import counted

#: The rule's outputs the workflow makes only for some sweeps (empty otherwise), in the crate's order.
OPTIONAL_OUTPUTS = ("scaling", "scaling_series", "tuning", "tuning_series", "search_table")


#: The figures' names (their image in any format, and their series): one an earlier report wrote and this one does
#: not (another figure_format, a sweep without a scaling axis) would be shown beside this report's as its own.
FIGURES = ("curves", "account", "scaling", "hyperparameters")
FIGURE_SUFFIXES = (".png", ".svg", ".pdf", ".json")


def drop_stale(out: Mapping[str, str]) -> None:
    """Remove what an earlier report job made and this one does not: figures beside the curves, and a search
    table. Only those names, so a file of the user's own in results/report/ stays."""
    made = {Path(path).resolve() for path in out.values() if path}
    folder = Path(out["curves"]).parent
    stale = [folder / f"{name}{suffix}" for name in FIGURES for suffix in FIGURE_SUFFIXES]
    stale.append(Path(out["table"]).with_name("search.csv"))
    for path in stale:
        if path.is_file() and path.resolve() not in made:
            path.unlink()
            say(f"report: removed {path}, which an earlier report made and this one does not")


def write(params: Mapping[str, Any]) -> None:
    """The runs table, the configurations table, the figures, the page and the crate, from ``params``
    (the rule's two parameter files together: inputs, outputs, settings, config, configfiles)."""
    inputs: Mapping[str, list[str]] = params["inputs"]
    out: Mapping[str, str] = params["outputs"]  # every output of the rule, "" where it makes none
    settings = params["settings"]
    say(f"report: {out['html']} from {counted(len(inputs['provenance']), 'run')}")
    drop_stale(out)
    # Every provenance file and metrics.csv is read once, here; each part below gets the runs.
    runs = runs_from_provenance(inputs["provenance"])
    for run in runs:  # written by the train jobs, read back from a folder others may write
        validate(run.provenance, source=str(run.paths.provenance))
    write_runs_table(runs, out["table"])
    configurations.write_table(runs, out["configurations"])
    fmt, dpi = settings["figure_format"], settings["dpi"]
    plotted, absent = figures.plotted_metrics(runs, settings["metrics"])
    if absent:  # on the terminal too, not only on the page: a misspelt name is seen where it was typed
        say(
            f"report: report.metrics names {', '.join(absent)}, which no run logged: not plotted. HINT: name "
            f"metrics the runs logged ({', '.join(figures.metrics_of(runs))}), or set report.metrics: null to "
            "plot them all."
        )
    figures.write(figures.curves(runs, plotted), out["curves"], fmt, dpi, out["curves_series"])
    figures.write(figures.account(runs), out["account"], fmt, dpi, out["account_series"])
    if out["scaling"]:
        scaling = figures.scaling(runs, varying_params([run.provenance for run in runs]))
        figures.write(scaling, out["scaling"], fmt, dpi, out["scaling_series"])
    if out["tuning"]:
        keys = configurations.numeric_keys([run.provenance["sweep_point"] for run in runs])
        figures.write(tuning.tuning(runs, keys), out["tuning"], fmt, dpi, out["tuning_series"])
    searched = None
    if inputs["search"]:  # a search chose the runs: its rungs' decisions
        decisions = [read_decision(path) for path in inputs["search"]]
        searched = search_view(decisions, max(run.provenance["training"]["max_epochs"] for run in runs))
        write_search_table(searched, out["search_table"])
    write_report(
        runs=runs,
        settings=settings,
        curves=out["curves"],
        scaling=out["scaling"] or None,
        account=out["account"],
        out=out["html"],
        exports=inputs["exports"],
        tuning=out["tuning"] or None,
        search=searched,
    )
    # Last: the crate lists the files above with their checksums.
    listed = ("html", "table", "configurations", "curves", "curves_series", "account", "account_series",
              *OPTIONAL_OUTPUTS)  # fmt: skip
    write_crate(
        runs=runs,
        settings=settings,
        repo=Path(inputs["workflow"][0]).parent,  # the Snakefile comes first
        config_files=params["configfiles"],
        resolved_config=params["config"],
        report_files=[out[name] for name in listed if out[name]],
        out=out["crate"],
    )
