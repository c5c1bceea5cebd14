"""Reports: run tables, figures and the HTML page built from the runs' provenance."""
