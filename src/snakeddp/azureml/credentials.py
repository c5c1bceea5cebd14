"""Azure credentials, checked before anything is uploaded.

Both SDKs use ``DefaultAzureCredential``: a service principal from AZURE_CLIENT_ID /
AZURE_TENANT_ID / AZURE_CLIENT_SECRET, workload or managed identity, or the ``az login`` session,
tried in that order. One token request up front turns "no credentials" into one clear error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from azure.core.credentials import TokenCredential
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import DefaultAzureCredential

from snakeddp.azureml.settings import AzureMLError

ARM_SCOPE = "https://management.azure.com/.default"
HINT = (
    "HINT: run `az login` on this machine (Azure CLI), or export AZURE_CLIENT_ID, AZURE_TENANT_ID and "
    "AZURE_CLIENT_SECRET for a service principal, or run where a managed identity is assigned; "
    "DefaultAzureCredential tries each of these. Nothing was uploaded."
)


def default_credential() -> TokenCredential:
    """A credential that has just produced a token for Azure Resource Manager, or AzureMLError."""
    credential = DefaultAzureCredential()
    identity_log = logging.getLogger("azure.identity")
    level = identity_log.level
    # The SDK logs the same failure as a warning; the error below says it once, with the fix.
    identity_log.setLevel(logging.ERROR)
    try:
        credential.get_token(ARM_SCOPE)
    except ClientAuthenticationError as exc:
        raise AzureMLError(f"no usable Azure credentials: {diagnosis(str(exc))} {hint(os.environ)}") from None
    finally:
        identity_log.setLevel(level)
    return credential


# The credentials the HINT names, whose reasons the line keeps (the SDK tries nine, each with a paragraph).
NAMED = ("EnvironmentCredential", "ManagedIdentityCredential", "AzureCliCredential")
SERVICE_PRINCIPAL = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET")


def diagnosis(said: str) -> str:
    """DefaultAzureCredential's error (a line per credential tried, with links) as one clause: its first line
    and the first sentence of each NAMED credential's reason."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    reasons = []
    for line in lines:
        name, _, reason = line.partition(": ")
        if name in NAMED and reason:
            first = reason.removeprefix(f"{name} ").split(". ")[0].rstrip(".")
            reasons.append(f"{name}: {first[:160]}")
    head = lines[0].rstrip(".") if lines else "DefaultAzureCredential failed"
    return f"{head} ({'; '.join(reasons)})." if reasons else f"{head}."


def hint(env: Mapping[str, str]) -> str:
    """Where a service principal's variables are all set, its sign-in is what failed: not a missing login."""
    if all(env.get(name) for name in SERVICE_PRINCIPAL):
        return (
            "HINT: AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET are set, and that service principal "
            "could not sign in: check that this machine reaches login.microsoftonline.com (a proxy: HTTPS_PROXY) "
            "and that the secret is current (az ad sp credential list). Nothing was uploaded."
        )
    return HINT


def token_for_resource(credential: TokenCredential):
    """azureml-core's TokenAuthentication callback: a token for a resource URL (v1 asks per audience)."""

    def get_token(resource: str) -> str:
        return credential.get_token(resource.rstrip("/") + "/.default").token

    return get_token
