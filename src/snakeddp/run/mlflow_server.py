"""Where a run's MLflow tracking logs, and whether that server answers before anyone waits on it.

MLflow's client retries a request it cannot send 7 times with exponential backoff (its
MLFLOW_HTTP_REQUEST_MAX_RETRIES / _BACKOFF_FACTOR): a server that is not there cost 4 min 22 s
and a traceback. ``check_reachable`` asks once, with a short timeout, and says in one line what
to do. The workflow asks before its first job (``workflow.preflight.check_tracking_server``),
rank 0 again before it builds MLflow's logger (``training.trackers``): on Slurm and AzureML the
ranks run on other machines. Standard library only: the workflow's checks import no MLflow.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from snakeddp.errors import TrackerError
from snakeddp.util.redact import redact_text

# A server that has not answered in this long is not one to train against; a refused port or an
# unknown host answers at once.
TIMEOUT_S = 5.0


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """'https://u:p@host/x' -> ('https://host/x', 'u', 'p'); URIs without credentials unchanged."""
    parts = urlsplit(uri)
    if not parts.username and not parts.password:
        return uri, None, None
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc)), parts.username, parts.password


def mlflow_uri(configured: str | None, env: Mapping[str, str], run_dir: Path) -> str:
    """Where MLflow logs: the config's URI, else MLFLOW_TRACKING_URI, else the file store results/mlruns."""
    uri = configured or env.get("MLFLOW_TRACKING_URI")
    if not uri:
        return "file:" + str(run_dir.resolve().parent.parent / "mlruns")
    if "://" not in uri and not uri.startswith(("file:", "databricks", "sqlite:")):
        return "file:" + str(Path(uri).resolve())
    return uri


def check_reachable(uri: str, timeout: float = TIMEOUT_S) -> None:
    """A TrackerError unless an http(s) tracking URI answers within ``timeout`` seconds. Any HTTP
    answer counts (401 from a server behind a login, 404 from one without a page at its root):
    what is refused is no answer at all. Other URIs (a file store, databricks) are not servers."""
    bare, _, _ = split_credentials(uri)
    if urlsplit(bare).scheme not in ("http", "https"):
        return
    try:
        with urllib.request.urlopen(bare, timeout=timeout):  # noqa: S310 (the scheme is checked above)
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise TrackerError(
            f"tracking.mlflow is enabled, and no MLflow server answers at {redact_text(bare)} "
            f"({' '.join(str(reason).split())}). HINT: start the server (`mlflow server --host HOST --port PORT`) "
            "or correct tracking.mlflow.tracking_uri (or MLFLOW_TRACKING_URI), or set tracking.mlflow.enabled: false "
            "to train without MLflow."
        ) from None
