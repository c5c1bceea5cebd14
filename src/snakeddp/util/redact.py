"""Keep secrets out of provenance and logs.

Variables are recorded from an allow-list of prefixes that describe the cluster, and even
those are dropped when their name looks like a credential (AzureML, for one, exports
AZUREML_RUN_TOKEN). Credentials embedded in URLs are masked wherever a value is recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

# Matched against a name's words (split at `_`, `-`, `.` and camelCase), never its substrings:
# NCCL_IB_PKEY (an InfiniBand partition), TOKENIZERS_PARALLELISM and the shell's PWD are settings.
SECRET_WORDS = frozenset(
    "KEY KEYS APIKEY ACCESSKEY SECRETKEY PRIVATEKEY TOKEN TOKENS AUTHTOKEN ACCESSTOKEN SECRET SECRETS "
    "PASSWORD PASSWD PASS PASSPHRASE PWD SAS SIG SIGNATURE CREDENTIAL CREDENTIALS CREDS AUTH PAT PRIVATE "
    "COOKIE CERT CONNECTIONSTRING".split()
)
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
RECORDED_PREFIXES = (
    "SLURM_",
    "OMPI_COMM_WORLD_",
    "MASTER_",
    "NCCL_",
    "GLOO_",
    # the rest of the network tuning snakeddp.cluster.network passes to every rank
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_DEBUG",
    "UCX_",
    "FI_",
    "OMPI_MCA_",
    "AZ_BATCH",
    "AZUREML_",
    "TORCHELASTIC_",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "SNAKEDDP_",
)
MASK = "***"
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
_QUERY_SECRETS = re.compile(r"(?P<key>[?&](?:sig|signature|token|code|key|password)=)[^&\s]+", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    words = [word.upper() for word in _WORD_BREAK.split(name) if word]
    # PWD alone is the shell's working directory; DB_PWD is a password.
    if words == ["PWD"]:
        return False
    pairs = {a + b for a, b in pairwise(words)}  # CONNECTION_STRING
    return bool(SECRET_WORDS & (set(words) | pairs))


def redact_text(text: str) -> str:
    """Mask user:password@ in URLs and signature/token query parameters (SAS URLs)."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _QUERY_SECRETS.sub(lambda m: f"{m.group('key')}{MASK}", text)


def recorded_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The cluster-describing variables worth recording, without anything secret-looking."""
    return {
        name: redact_text(value)
        for name, value in sorted(env.items())
        if name.startswith(RECORDED_PREFIXES) and not is_secret_name(name)
    }


def scrub(value: Any, listings: frozenset[str] = frozenset()) -> Any:
    """A copy of a JSON-like value with secret-named keys masked and URL credentials removed.
    The keys of a mapping under a key in ``listings`` are names of things, not of settings (a
    package list: ``google-auth`` is a package, not a credential); their values are still redacted."""
    return _scrub(value, listings, listing=False)


def _scrub(value: Any, listings: frozenset[str], listing: bool) -> Any:
    if isinstance(value, Mapping):
        return {
            k: (
                MASK
                if not listing and is_secret_name(str(k)) and v not in (None, "")
                else _scrub(v, listings, str(k) in listings)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub(v, listings, listing=False) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
