"""Snakemake adapter: the whole report in results/report/, in one process (rule report)."""

import json
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.errors import ConfigError
from snakeddp.provenance.schema import validate
from snakeddp.report import configurations, figures, tuning
from snakeddp.report.page import write_crate, write_report
from snakeddp.report.search import view as search_view
from snakeddp.report.search import write_table as write_search_table
from snakeddp.report.table import varying_params, write_runs_table
from snakeddp.run.runs import runs_from_provenance
from snakeddp.run.search import read_decision
from snakeddp.util.shutdown import freeze_imports
from snakeddp.util.terminal import say

freeze_imports()  # pandas, matplotlib, rocrate: less work at exit (snakeddp.util.shutdown)


def one_line(kind, error, trace):
    """A snakeddp error (a record that is not one snakeddp wrote, say) is one line in the log, which
    Snakemake shows on the terminal when the job fails; no traceback."""
    if not isinstance(error, ConfigError):
        return sys.__excepthook__(kind, error, trace)
    print(f"snakeddp report: {error}", file=sys.stderr, flush=True)
    raise SystemExit(1)


sys.excepthook = one_line

out, settings = snakemake.output, snakemake.params.report
provenance = list(snakemake.input.provenance)
say(f"report: {out.html} from {len(provenance)} runs")

# Every provenance file and metrics.csv is read once, here; each part below gets the runs.
runs = runs_from_provenance(provenance)
for run in runs:  # written by the train jobs, read back from a folder others may write
    validate(run.provenance, source=str(run.paths.provenance))
write_runs_table(runs, out.table)
configurations.write_table(runs, out.configurations)
fmt, dpi = settings["figure_format"], settings["dpi"]
plotted, absent = figures.plotted_metrics(runs, settings["metrics"])
if absent:  # on the terminal too, not only on the page: a misspelt name is seen where it was typed
    say(
        f"report: report.metrics names {', '.join(absent)}, which no run logged: not plotted. HINT: name metrics "
        f"the runs logged ({', '.join(figures.metrics_of(runs))}), or set report.metrics: null to plot them all."
    )
figures.write(figures.curves(runs, plotted), out.curves, fmt, dpi, out.curves_series)
if out.scaling:
    scaling = figures.scaling(runs, varying_params([run.provenance for run in runs]))
    figures.write(scaling, out.scaling, fmt, dpi, out.scaling_series)
if out.tuning:
    keys = configurations.numeric_keys([run.provenance["sweep_point"] for run in runs])
    figures.write(tuning.tuning(runs, keys), out.tuning, fmt, dpi, out.tuning_series)
exports = list(snakemake.input.exports)
searched = None
if snakemake.input.search:  # a search chose the runs: its rungs' decisions
    decisions = [read_decision(path) for path in snakemake.input.search]
    searched = search_view(decisions, max(run.provenance["training"]["max_epochs"] for run in runs))
    write_search_table(searched, out.search_table)
write_report(
    runs=runs,
    settings=settings,
    curves=out.curves,
    scaling=out.scaling or None,
    out=out.html,
    exports=exports,
    tuning=out.tuning or None,
    search=searched,
)
# Last: the crate lists the files above with their checksums.
report_files = [out.html, out.table, out.configurations, out.curves, out.curves_series]
report_files += [out.scaling, out.scaling_series] if out.scaling else []
report_files += [out.tuning, out.tuning_series] if out.tuning else []
report_files += [out.search_table] if searched else []
write_crate(
    runs=runs,
    settings=settings,
    repo=Path(snakemake.input.workflow[0]).parent,  # the Snakefile comes first
    config_files=snakemake.params.configfiles,
    resolved_config=json.loads(snakemake.params.config),
    report_files=report_files,
    out=out.crate,
)
