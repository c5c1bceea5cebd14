"""Headless Chromium (Debian's package, tools/system-packages.sh) rendering the report as a browser
does: the page's DOM or a screenshot, the console errors it logged, and a table's cells."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)  # fmt: skip


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium is needed to render the report: run tools/system-packages.sh"
    command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(
        [*command, page.as_uri()], capture_output=True, text=True, timeout=120, check=True, cwd=page.parent
    )


def console_errors(stderr: str) -> list[str]:
    """Page console messages and blocked loads Chromium logs (CSP violations, failed images)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Refused to" in line]


def table_rows(text: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """Header labels and the cells' text of each body row of the table with ``table_id``."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', text, re.S).group(1)
    labels = re.findall(r"<th>(.*?)</th>", table)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)]
    return labels, [[re.sub(r"<[^>]+>", "", cell) for cell in row] for row in rows if row]
