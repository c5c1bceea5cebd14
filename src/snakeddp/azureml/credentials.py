"""Azure credentials, checked before anything is uploaded.

Both SDKs use ``DefaultAzureCredential``: a service principal from AZURE_CLIENT_ID /
AZURE_TENANT_ID / AZURE_CLIENT_SECRET, workload or managed identity, or the ``az login`` session,
tried in that order. One token request up front turns "no credentials" into one clear error.
"""

from __future__ import annotations

import logging

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
        detail = "\n  ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise AzureMLError(f"no usable Azure credentials.\n  {detail}\n{HINT}") from None
    finally:
        identity_log.setLevel(level)
    return credential


def token_for_resource(credential: TokenCredential):
    """azureml-core's TokenAuthentication callback: a token for a resource URL (v1 asks per audience)."""

    def get_token(resource: str) -> str:
        return credential.get_token(resource.rstrip("/") + "/.default").token

    return get_token
