"""Keep secrets out of provenance and logs.

What provenance records of the environment is an allow-list of what it needs: the named variables
that describe the job and its layout (RECORDED_NAMES), snakeddp's own ``SNAKEDDP_*``, and the
network families every rank is given (asked of the caller, which owns their definition). Even
those are dropped when the name looks like a credential (AzureML exports AZUREML_RUN_TOKEN) or the
value does (a JWT or bearer token under any name); credentials embedded in URLs are masked wherever
a value is recorded or copied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Any

# Matched against a name's words (split at `_`, `-`, `.` and camelCase), never its substrings:
# NCCL_IB_PKEY (an InfiniBand partition), TOKENIZERS_PARALLELISM and the shell's PWD are settings.
SECRET_WORDS = frozenset(
    "KEY KEYS APIKEY ACCESSKEY SECRETKEY PRIVATEKEY TOKEN TOKENS AUTHTOKEN ACCESSTOKEN SECRET SECRETS "
    "PASSWORD PASSWD PASS PASSPHRASE PWD SAS SIG SIGNATURE CREDENTIAL CREDENTIALS CREDS AUTH PAT PRIVATE "
    "COOKIE CERT CONNECTIONSTRING JWT BEARER OAUTH".split()
)
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# What provenance needs to say where and how a run ran. A variable not named here is not recorded,
# whatever it holds: a site's SLURM_JWT, an AzureML job's tokens, a user's exports.
RECORDED_NAMES = frozenset(
    """
    SLURM_JOB_ID SLURM_JOB_NAME SLURM_JOB_NODELIST SLURM_NODELIST SLURM_STEP_NODELIST SLURM_NNODES
    SLURM_JOB_NUM_NODES SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_PROCID SLURM_LOCALID
    SLURM_NODEID SLURM_STEP_ID SLURM_CLUSTER_NAME SLURM_JOB_PARTITION SLURM_JOB_ACCOUNT SLURM_JOB_QOS
    SLURM_CPUS_PER_TASK SLURM_CPUS_ON_NODE SLURM_GPUS SLURM_GPUS_PER_NODE SLURM_GPUS_ON_NODE SLURM_JOB_GPUS
    SLURM_STEP_GPUS SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_RESTART_COUNT SLURM_SUBMIT_HOST SLURMD_NODENAME
    OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE
    OMPI_COMM_WORLD_NODE_RANK MASTER_ADDR MASTER_PORT AZ_BATCH_MASTER_NODE AZ_BATCHAI_MPI_MASTER_NODE
    AZUREML_RUN_ID AZUREML_NODE_COUNT AZUREML_CR_NODE_RANK AZUREML_EXPERIMENT_NAME
    TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS
    RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK
    CUDA_VISIBLE_DEVICES OMP_NUM_THREADS MKL_NUM_THREADS
    """.split()
)
OWN_PREFIX = "SNAKEDDP_"
MASK = "***"
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
# A JSON Web Token (three base64url parts, the first two JSON objects) or an HTTP bearer credential.
_TOKEN_VALUE = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.|\bBearer\s+\S{8,}", re.IGNORECASE)
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


def looks_like_credential(value: str) -> bool:
    """A value that is a token whatever its variable is called (a JWT, a bearer header)."""
    return _TOKEN_VALUE.search(value) is not None


def recorded_environment(env: Mapping[str, str], network: Callable[[str], bool]) -> dict[str, str]:
    """The variables provenance records: the allow-list above and the network variables that
    ``network`` accepts, without secret-looking names or values, URL credentials masked."""
    return {
        name: redact_text(value)
        for name, value in sorted(env.items())
        if (name in RECORDED_NAMES or name.startswith(OWN_PREFIX) or network(name))
        and not is_secret_name(name)
        and not looks_like_credential(value)
    }


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with secret-named keys masked and URL credentials removed."""
    if isinstance(value, Mapping):
        return {k: (MASK if is_secret_name(str(k)) and v not in (None, "") else scrub(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
