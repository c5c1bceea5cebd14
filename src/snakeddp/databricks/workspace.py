"""The Databricks workspace, reached with databricks-sdk's own credential chain.

``WorkspaceClient`` resolves DATABRICKS_HOST with DATABRICKS_TOKEN, a ~/.databrickscfg profile
(``databricks.profile``), or an Azure or Google identity, as every Databricks tool does; snakeddp
never reads a token itself, so none can reach a spec, a record or a log. Each failure of the SDK
becomes one line with a HINT, without the SDK's request dump.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from snakeddp.errors import DatabricksError, add_hint

CREDENTIALS_HINT = (
    "HINT: export DATABRICKS_HOST=https://<workspace-url> and DATABRICKS_TOKEN=<personal access token>, or set "
    "databricks.profile to a profile of ~/.databrickscfg; databricks-sdk's own chain reads them. Nothing was uploaded."
)


def require_sdk() -> None:
    """databricks-sdk is an optional extra: one line with the command that installs it to stay."""
    if importlib.util.find_spec("databricks.sdk") is None:
        raise DatabricksError(
            f"the databricks platform submits runs with databricks-sdk, which is not installed here. "
            f"{add_hint('databricks-sdk', 'train')}, then rerun."
        )


def connect(profile: str | None) -> Any:
    """A WorkspaceClient whose credentials resolved (``profile``: a ~/.databrickscfg profile, else the chain)."""
    require_sdk()
    from databricks.sdk import WorkspaceClient

    try:
        return WorkspaceClient(profile=profile) if profile else WorkspaceClient()
    except ValueError as error:  # the SDK's "cannot configure default credentials"
        where = f"profile {profile}" if profile else "DATABRICKS_HOST/DATABRICKS_TOKEN or ~/.databrickscfg"
        raise DatabricksError(
            f"no usable Databricks credentials ({where}): {first_line(error)}. {CREDENTIALS_HINT}"
        ) from None


def first_line(error: BaseException) -> str:
    """The SDK's message without its trailing request details, on one line."""
    text = " ".join(str(error).split())
    return text.split(" Config: ")[0].rstrip(".") or type(error).__name__


def api_error(doing: str, error: BaseException) -> DatabricksError:
    """An SDK error (permission, missing path, unreachable host) as one line saying what failed."""
    name = type(error).__name__
    if name in ("PermissionDenied", "Unauthenticated"):
        hint = CREDENTIALS_HINT.replace(" Nothing was uploaded.", "") + " The token must be allowed to do this."
    elif name == "NotFound":
        hint = "HINT: check databricks.stage: the volume (or workspace folder) must exist and be writable."
    else:
        hint = "HINT: check that DATABRICKS_HOST answers from here, then rerun: what was uploaded is reused."
    return DatabricksError(f"{doing} failed: {first_line(error)} ({name}). {hint}")
