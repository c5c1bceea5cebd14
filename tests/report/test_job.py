"""The report job's folder: what an earlier report made and this one does not is gone, the user's files stay."""

from __future__ import annotations

from snakeddp.report.job import drop_stale


def test_figures_an_earlier_report_made_are_removed_and_other_files_kept(tmp_path):
    plots = tmp_path / "report" / "plots"
    plots.mkdir(parents=True)
    out = {
        "table": str(tmp_path / "report" / "runs.csv"),
        "curves": str(plots / "curves.svg"),
        "curves_series": str(plots / "curves.json"),
        "account": str(plots / "account.svg"),
        "scaling": "",  # this sweep has no scaling axis
        "search_table": "",
    }
    # An earlier report in png, with a scaling figure and a search; a figure and a note of the user's own.
    earlier = ["curves.png", "account.png", "scaling.png", "scaling.json", "curves.json", "curves.svg"]
    for name in [*earlier, "mine.png", "notes.txt"]:
        (plots / name).write_text(name)
    (tmp_path / "report" / "search.csv").write_text("rung\n")
    drop_stale(out)
    assert sorted(p.name for p in plots.iterdir()) == ["curves.json", "curves.svg", "mine.png", "notes.txt"]
    assert not (tmp_path / "report" / "search.csv").exists()
