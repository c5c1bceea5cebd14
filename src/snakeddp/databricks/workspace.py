"""The Databricks workspace, reached with databricks-sdk's own credential chain.

``WorkspaceClient`` resolves DATABRICKS_HOST with DATABRICKS_TOKEN, a ~/.databrickscfg profile
(``databricks.profile``), or an Azure or Google identity, as every Databricks tool does; snakeddp
never reads a token itself, so none can reach a spec, a record or a log. Each failure of the SDK
becomes one line with a HINT, without the SDK's request dump.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from snakeddp.databricks import DatabricksError
from snakeddp.errors import add_hint
from snakeddp.util.redact import redact_text

# Seconds the credential check may retry an unanswered request, and wait for each answer.
CHECK_S = 3

CREDENTIALS_HINT = (
    "HINT: export DATABRICKS_HOST=https://<workspace-url> and DATABRICKS_TOKEN=<personal access token>, or set "
    "databricks.profile to a profile of ~/.databrickscfg; databricks-sdk's own chain reads them. Nothing was uploaded."
)
UNREACHABLE_HINT = (
    "HINT: set DATABRICKS_HOST (or the profile's host) to your workspace's URL, https://<workspace-url>, and check "
    "that this machine reaches it (a proxy: HTTPS_PROXY); nothing was uploaded."
)


def require_sdk() -> None:
    """databricks-sdk is an optional extra: one line with the command that installs it to stay."""
    if importlib.util.find_spec("databricks.sdk") is None:
        raise DatabricksError(
            f"the databricks platform submits runs with databricks-sdk, which is not installed here. "
            f"{add_hint('databricks-sdk', 'train')}, then rerun."
        )


def connect(profile: str | None) -> Any:
    """A WorkspaceClient whose credentials resolved and were accepted (``profile``: a ~/.databrickscfg
    profile, else the chain), or one line saying why not."""
    require_sdk()
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.core import Config

    named = {"profile": profile} if profile else {}
    checked = None
    try:
        # The SDK retries an unreachable host for 5 minutes, also while it only resolves credentials
        # (its host-metadata probe): bounded here, so a wrong DATABRICKS_HOST is one line in seconds.
        with sdk_warnings_off():
            checked = Config(**named, retry_timeout_seconds=CHECK_S, http_timeout_seconds=CHECK_S)
            WorkspaceClient(config=checked).current_user.me()
    except ValueError as error:  # the SDK's "cannot configure default credentials"
        where = f"profile {profile}" if profile else "DATABRICKS_HOST/DATABRICKS_TOKEN or ~/.databrickscfg"
        # A profile named in the config is what the SDK reads, whatever the environment holds: fix that first.
        hint = (
            f"HINT: add a [{profile}] profile to ~/.databrickscfg (databricks configure --profile {profile}), or "
            "set databricks.profile to one it has (or remove it: the SDK then reads DATABRICKS_HOST and "
            "DATABRICKS_TOKEN). Nothing was uploaded."
            if profile and "profile" in str(error)
            else CREDENTIALS_HINT
        )
        raise DatabricksError(f"no usable Databricks credentials ({where}): {first_line(error)}. {hint}") from None
    except Exception as error:  # refused, timed out, or the token not accepted (the SDK's DatabricksError family)
        if type(error).__name__ in ("PermissionDenied", "Unauthenticated"):
            raise api_error("checking the Databricks credentials", error) from None
        host = redact_text(checked.host or "") if checked else "named"
        raise DatabricksError(
            f"the Databricks workspace {host} did not answer as one (retried for {CHECK_S} s): "
            f"{first_line(error)} ({type(error).__name__}). {UNREACHABLE_HINT}"
        ) from None
    # The run's own requests keep the SDK's retries: a workspace that answered may still hiccup mid-run.
    return WorkspaceClient(**named)


@contextmanager
def sdk_warnings_off() -> Iterator[None]:
    """The SDK's own warnings (a failed host probe) off while the check runs: its one line says it all."""
    logger = logging.getLogger("databricks.sdk")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


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
