"""The report page: one self-contained HTML file that opens offline.

Styles are inline, figures are embedded as base64 data URIs, and a Content-Security-Policy
forbids every fetch, so the page shows the same thing on a laptop, a cluster login node or an
archive years later. No JavaScript: sections fold with <details>.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from snakeddp import __version__
from snakeddp.report.figures import scaling_points
from snakeddp.report.runs import Run
from snakeddp.report.table import summary_frame, varying_params

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
MIME = {".png": "image/png", ".svg": "image/svg+xml"}
STYLE = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #d9dee3; --bg: #f7f8fa; --accent: #2563eb;
        --good: #157f3b; --warn: #b45309; --bad: #b91c1c; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; color: var(--ink);
       background: var(--bg); }
header { background: #111827; color: #f9fafb; padding: 20px 32px 14px; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header p { margin: 0; color: #cbd2d9; }
nav { background: #1f2937; padding: 6px 32px; position: sticky; top: 0; z-index: 1; }
nav a { color: #e5e7eb; margin-right: 18px; text-decoration: none; font-size: 13px; }
main { padding: 8px 32px 40px; max-width: 1500px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 18px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { flex: 1 1 200px; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 18px; font-weight: 600; overflow-wrap: anywhere; }
.ok { color: var(--good); } .warn { color: var(--warn); } .bad { color: var(--bad); }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.best td { background: #ecfdf3; }
code, pre, .hash { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
.hash { overflow-wrap: anywhere; }
pre { background: #f6f8fa; border: 1px solid var(--line); border-radius: 4px; padding: 8px; overflow-x: auto; }
figure { margin: 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; background: #fff; }
figcaption { color: var(--muted); font-size: 12px; margin-top: 4px; }
details { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; padding: 0 12px; }
details[open] { padding-bottom: 10px; }
summary { cursor: pointer; padding: 8px 0; font-weight: 600; }
summary .sub { font-weight: 400; color: var(--muted); margin-left: 8px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dt { color: var(--muted); } dd { margin: 0; overflow-wrap: anywhere; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 24px; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; background: #eef2ff; }
footer { color: var(--muted); font-size: 12px; padding: 0 32px 24px; }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return esc(value)


def short(sha: str | None, n: int = 12) -> str:
    return esc(sha[:n]) if sha else "–"


def embed(path: str | Path, alt: str, element_id: str) -> str:
    """An <img> whose bytes live in the page (base64 data URI)."""
    path = Path(path)
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img id="{esc(element_id)}" alt="{esc(alt)}" src="data:{MIME[path.suffix]};base64,{data}">'


def _dl(items: Sequence[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str] | tuple[Sequence[str], Mapping[str, str]]],
    numeric: set[int] = frozenset(),
    **attrs: str,
) -> str:
    """A table of already-escaped cells; a row may come with attributes: (cells, {"id": ...})."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells, row_attrs = row if isinstance(row, tuple) else (row, {})
        attr = "".join(f' {k}="{esc(v)}"' for k, v in row_attrs.items())
        tds = "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(cells))
        body.append(f"<tr{attr}>{tds}</tr>")
    table_attrs = "".join(f' {k}="{esc(v)}"' for k, v in attrs.items())
    return f"<table{table_attrs}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _same(values: Sequence[Any]) -> bool:
    return len({str(v) for v in values}) == 1


def summary_cards(runs: Sequence[Run]) -> str:
    records = [run.provenance for run in runs]
    finished = [r for r in records if r["training"]["best_val_loss"] is not None]
    best = min(finished, key=lambda r: r["training"]["best_val_loss"]) if finished else None
    commits = [r["code"]["commit"] for r in records]
    dirty = [r["run_id"] for r in records if r["code"]["dirty"]]
    envs = [r["environment"]["environment_hash"] or r["environment"]["packages_sha256"] for r in records]
    datasets = sorted({r["data"]["dataset"] for r in records})
    seconds = sum(r["timing"]["duration_s"] for r in records)
    train_time = _duration(seconds)
    if not _same(commits):
        code = f'<span class="warn">{len(set(commits))} different commits</span>'
    elif dirty:
        code = f'<span class="warn">{short(commits[0], 10)} with uncommitted changes ({len(dirty)} runs)</span>'
    else:
        code = f'<span class="ok">{short(commits[0], 10)} clean</span>' if commits[0] else "not a git checkout"
    env = (
        f'<span class="ok">one environment {short(envs[0], 10)}</span>'
        if _same(envs)
        else f'<span class="warn">{len(set(envs))} different environments</span>'
    )
    cards = [
        ("runs", f"{len(records)}"),
        (
            "best run",
            f'<a href="#run-{esc(best["run_id"])}">{esc(best["run_id"])}</a><br>'
            f"<small>val_loss {num(best['training']['best_val_loss'])}, "
            f"acc {num(best['training']['best_val_acc'], 3)}</small>"
            if best
            else "–",
        ),
        ("training time", f"{train_time} in total"),
        ("code", code),
        ("environment", env),
        ("data", "<br>".join(esc(d) for d in datasets)),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{value}</div></div>'
        for label, value in cards
    ) + "</div>"  # fmt: skip


def runs_table(runs: Sequence[Run]) -> str:
    records = [run.provenance for run in runs]
    frame = summary_frame(records)
    finished = [r for r in records if r["training"]["best_val_loss"] is not None]
    best = min(finished, key=lambda r: r["training"]["best_val_loss"])["run_id"] if finished else None
    headers = list(frame.columns)
    numeric = {i for i, h in enumerate(headers) if h in {"best val_loss", "val acc", "duration s", "samples/s"}}
    rows = []
    for record, (_, row) in zip(records, frame.iterrows(), strict=True):
        cells = [f'<a href="#run-{esc(record["run_id"])}">{esc(record["run_id"])}</a>']
        cells += [num(row[h]) if h != "duration s" else f"{row[h]:.1f}" for h in headers[1:]]
        attrs = {"id": f"row-{record['run_id']}", "data-run": record["run_id"]}
        if record["run_id"] == best:
            attrs["class"] = "best"
        rows.append((cells, attrs))
    return _table(headers, rows, numeric, id="runs-table")


def checkpoints_table(runs: Sequence[Run]) -> str:
    rows = []
    for run in runs:
        best = run.provenance["training"]["best_checkpoint"]
        if best is None:
            rows.append(([esc(run.run_id), "–", "", "", "", ""], {"data-run": run.run_id}))
            continue
        rows.append(
            (
                [
                    f'<a href="#run-{esc(run.run_id)}">{esc(run.run_id)}</a>',
                    f"<code>{esc(best['path'])}</code>",
                    esc(run.provenance["training"]["best_epoch"]),
                    num(best["score"]),
                    f'<span class="hash">{esc(best["sha256"])}</span>',
                    f"{best['bytes'] / 1024:.1f} KiB",
                ],
                {"data-run": run.run_id},
            )
        )
    headers = ["run", "best checkpoint", "epoch", "val_loss", "sha256", "size"]
    return _table(headers, rows, {2, 3, 5}, id="checkpoints-table")


def scaling_table(runs: Sequence[Run], params: Sequence[str]) -> str:
    points = sorted(scaling_points(runs, params), key=lambda p: (p["series"], p["world_size"]))
    rows = [
        [
            esc(p["run"]),
            esc(p["series"]),
            f"{p['world_size']} ({p['nodes']}x{p['devices']})",
            f"{p['throughput']:,.0f}",
            f"{p['low']:,.0f} – {p['high']:,.0f}",
            f"{p['ideal']:,.0f}",
            f"{100 * p['efficiency']:.0f}%",
        ]
        for p in points
    ]
    headers = ["run", "configuration", "world size", "samples/s", "range over epochs", "ideal", "efficiency"]
    return _table(headers, rows, {3, 4, 5, 6}, id="scaling-table")


def _environment(env: Mapping[str, Any]) -> str:
    items = [
        ("python", f"{esc(env['python'])} ({esc(env['implementation'])})"),
        ("torch", esc(env["torch"])),
        ("lightning", esc(env["lightning"])),
        ("CUDA / cuDNN / NCCL", f"{esc(env['cuda'] or '–')} / {esc(env['cudnn'] or '–')} / {esc(env['nccl'] or '–')}"),
        ("GPUs", esc(", ".join(env["gpus"]) or "none")),
        ("environment hash", f'<span class="hash">{esc(env["environment_hash"] or "–")}</span>'),
        ("lock sha256", f'<span class="hash">{esc(env.get("lock_sha256") or "–")}</span>'),
        (
            "packages",
            f"{len(env['packages'])} installed, sha256 <span class=hash>{short(env['packages_sha256'])}</span>",
        ),
        ("platform", esc(env["platform"])),
        ("executable", f"<code>{esc(env['executable'])}</code>"),
    ]
    return _dl(items)


def _ranks(launch: Mapping[str, Any]) -> str:
    rows = [
        [esc(r["rank"]), esc(r["local_rank"]), esc(r["node_rank"]), esc(r["host"]), esc(r["node"] or "–"),
         esc(r["pid"]), esc(r["device"])]
        for r in launch["ranks"]
    ]  # fmt: skip
    return _table(["rank", "local", "node rank", "host", "node", "pid", "device"], rows, {0, 1, 2, 5})


def _checkpoint_list(run: Run) -> str:
    training = run.provenance["training"]
    best = (training["best_checkpoint"] or {}).get("path")
    rows = [
        [f"<code>{esc(c['path'])}</code>{' <span class=badge>best</span>' if c['path'] == best else ''}",
         f'<span class="hash">{esc(c["sha256"])}</span>', f"{c['bytes'] / 1024:.1f} KiB"]
        for c in training.get("checkpoints") or [training["last_checkpoint"]] if c
    ]  # fmt: skip
    return _table(["file", "sha256", "size"], rows, {2})


def provenance_section(run: Run) -> str:
    p = run.provenance
    code, data, launch, timing, training = p["code"], p["data"], p["launch"], p["timing"], p["training"]
    resumed = training["resumed_from"]
    dirty = ' <span class="warn">(uncommitted changes)</span>' if code["dirty"] else ""
    summary = (
        f"{esc(p['run_id'])}<span class=sub>{esc(p['status'])} · {training['epochs_completed']} epochs · "
        f"world size {launch['world_size']} via {esc(launch['launcher'])} · job {esc(launch['job_id'] or '–')}</span>"
    )
    left = [
        "<h3>Code</h3>",
        _dl(
            [
                ("commit", f'<span class="hash">{esc(code["commit"] or "not a git checkout")}</span>{dirty}'),
                ("read by", esc(code["source"] or "–")),
                ("snakeddp", esc(code["snakeddp_version"])),
            ]
        ),
        "<h3>Data</h3>",
        _dl(
            [
                ("dataset", esc(data["dataset"])),
                ("manifest", f"<code>{esc(data['manifest'])}</code>"),
                ("manifest sha256", f'<span class="hash">{esc(data["manifest_sha256"])}</span>'),
                ("partitions", f"{data['partitions']} (epochs used {esc(training['partitions_per_epoch'])})"),
                ("records", f"{data['records']['train']:,} train, {data['records']['val']:,} validation"),
            ]
        ),
        "<h3>Timing</h3>",
        _dl(
            [
                ("started", esc(timing["started_at"])),
                ("finished", esc(timing["finished_at"])),
                ("duration", f"{timing['duration_s']:.1f} s ({timing['train_seconds']:.1f} s in training loops)"),
                ("samples", f"{timing['samples_trained']:,} at {num(timing['samples_per_s'])} samples/s"),
                (
                    "resumed from",
                    f"<code>{esc(resumed['path'])}</code> <span class=hash>{short(resumed['sha256'])}</span>"
                    if resumed
                    else "– (fresh start)",
                ),
            ]
        ),
        "<h3>Checkpoints</h3>",
        _checkpoint_list(run),
    ]
    right = [
        "<h3>Launch</h3>",
        _dl(
            [
                ("launcher", esc(launch["launcher"])),
                (
                    "strategy",
                    f"{esc(launch['strategy'])} over {esc(launch['backend'])} on {esc(launch['accelerator'])}",
                ),
                ("layout", f"{launch['nodes']} node(s) x {launch['processes_per_node']} process(es)"),
                ("rendezvous", f"{esc(launch['master_addr'])}:{esc(launch['master_port'] or '–')}"),
                ("cluster job id", esc(launch["job_id"] or "–")),
                ("user", esc(launch.get("user") or "–")),
                ("command", f"<code>{esc(launch['command'] or '–')}</code>"),
            ]
        ),
        "<h3>Hosts per rank</h3>",
        _ranks(launch),
        "<h3>Environment</h3>",
        _environment(p["environment"]),
    ]
    config = yaml.safe_dump(p["config"], sort_keys=False)
    variables = "\n".join(f"{k}={v}" for k, v in launch["variables"].items()) or "(none recorded)"
    return (
        f'<details id="run-{esc(p["run_id"])}" data-run="{esc(p["run_id"])}"><summary>{summary}</summary>'
        f'<div class="grid2"><div>{"".join(left)}</div><div>{"".join(right)}</div></div>'
        f"<h3>Config <small>sha256 <span class=hash>{esc(p['config_sha256'])}</span></small></h3>"
        f"<pre>{esc(config)}</pre>"
        f"<h3>Cluster variables</h3><pre>{esc(variables)}</pre></details>"
    )


def render(
    runs: Sequence[Run],
    settings: Mapping[str, Any],
    curves_figure: str | Path,
    scaling_figure: str | Path | None,
    links: Mapping[str, str] | None = None,
) -> str:
    """The whole page for ``runs``; ``links`` maps labels to files next to the report."""
    records = [run.provenance for run in runs]
    params = varying_params(records)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    nav = [("summary", "Summary"), ("runs", "Runs"), ("curves", "Curves")]
    if scaling_figure:
        nav.append(("scaling", "Scaling"))
    nav += [("checkpoints", "Checkpoints"), ("provenance", "Provenance"), ("files", "Files")]
    metrics = ", ".join(settings["metrics"])
    sections = [
        f'<section id="summary"><h2>Summary</h2>{summary_cards(runs)}</section>',
        '<section id="runs"><h2>Runs</h2>'
        f"<p>One row per run; parameter columns are the config keys that differ between runs. The best "
        f"validation loss is highlighted. Throughput counts samples of all ranks over training-loop time.</p>"
        f"{runs_table(runs)}</section>",
        '<section id="curves"><h2>Curves per epoch</h2><figure>'
        f"{embed(curves_figure, 'per-epoch ' + metrics + ' of every run', 'figure-curves')}"
        f"<figcaption>{esc(metrics)} per epoch, one colour per run; in the loss panel train is solid and "
        "validation dashed, the star marks each run's best validation loss (its best checkpoint).</figcaption>"
        "</figure></section>",
    ]
    if scaling_figure:
        sections.append(
            '<section id="scaling"><h2>Scaling</h2><figure>'
            f"{embed(scaling_figure, 'throughput and scaling efficiency vs world size', 'figure-scaling')}"
            "<figcaption>Left: samples/s of all ranks (median of the epochs after the first; the whisker spans "
            "their range), with hatched bars for perfect linear scaling from the smallest run of the same "
            "configuration. Right: measured / ideal throughput.</figcaption></figure>"
            f"{scaling_table(runs, params)}</section>"
        )
    sections += [
        '<section id="checkpoints"><h2>Best checkpoints</h2>'
        "<p>Paths are relative to each run directory; <code>snakeddp verify RUN</code> recomputes every "
        f"sha256 without loading a checkpoint.</p>{checkpoints_table(runs)}</section>",
        '<section id="provenance"><h2>Provenance per run</h2>'
        "<p>What each run was made from, as recorded by its rank 0 when it finished "
        "(<code>results/runs/&lt;run&gt;/provenance.json</code>).</p>"
        f"{''.join(provenance_section(run) for run in runs)}</section>",
        '<section id="files"><h2>Files</h2><ul>'
        + "".join(f'<li><a href="{esc(href)}">{esc(label)}</a></li>' for label, href in (links or {}).items())
        + "</ul></section>",
    ]
    title = esc(settings["title"])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="generator" content="snakeddp {esc(__version__)}">
<title>{title}</title>
<style>{STYLE}</style>
</head>
<body>
<header><h1>{title}</h1><p>{len(runs)} runs · generated {esc(now)} by snakeddp {esc(__version__)}</p></header>
<nav>{"".join(f'<a href="#{key}">{label}</a>' for key, label in nav)}</nav>
<main>
{"".join(sections)}
</main>
<footer>Self-contained page: styles and figures are embedded and nothing is fetched.</footer>
</body>
</html>
"""


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
