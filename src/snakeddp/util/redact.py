"""Keep secrets out of provenance and logs.

What provenance records of the environment is an allow-list of what it needs: the named variables
that describe the job and its layout (RECORDED_NAMES), snakeddp's own ``SNAKEDDP_*``, and the
network families every rank is given (asked of the caller, which owns their definition). Even
those are dropped when the name looks like a credential (AzureML exports AZUREML_RUN_TOKEN) or the
value does (a JWT or bearer token under any name); credentials embedded in URLs are masked wherever
a value is recorded or copied.

Config sections with free-form maps (``spark.conf``, ``databricks.new_cluster.spark_conf``) may hold
storage keys under dotted Spark names (``spark.hadoop.fs.s3a.secret.key``): whatever snakeddp writes to
keep or share masks the value under a secret-looking name at any depth (``scrub``; in a config file's
own text, ``redact_yaml``), keeping the key so a reader sees a secret was there.

A secret is masked by value too: once a value is known to be secret (it sits under a secret-looking key
anywhere in what is scrubbed, or it is a credential of the environment: a variable with a secret-looking
name or a token-looking value), every other occurrence of it is masked, whatever its key (``again: tok-1``
beside ``token: tok-1``), inside longer text as well where it is long enough to be no ordinary word.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import Any

# What makes a key a credential (api_key, fs.s3a.access.key, fs.azure.account.key.<account>): alone, a
# key is most often a field's name (task_key, partition_key, image_key), and "key" names one key.
KEY_QUALIFIERS = (
    "API ACCESS SECRET PRIVATE ACCOUNT STORAGE MASTER ENCRYPTION SIGNING CLIENT LICENSE AUTH SESSION SHARED "
    "SSH GPG PGP SERVICE SUBSCRIPTION ADMIN APP WEBHOOK HMAC DEPLOY WRITE".split()
)
# Matched against a name's words (split at `_`, `-`, `.` and camelCase), never its substrings, or two
# words together: NCCL_IB_PKEY (an InfiniBand partition), TOKENIZERS_PARALLELISM and the shell's PWD
# are settings.
SECRET_WORDS = frozenset(
    "TOKEN TOKENS AUTHTOKEN ACCESSTOKEN SECRET SECRETS PASSWORD PASSWD PASS PASSPHRASE PWD SAS SIG SIGNATURE "
    "CREDENTIAL CREDENTIALS CREDS AUTH PAT PRIVATE COOKIE CERT CONNECTIONSTRING JWT BEARER OAUTH".split()
    + [qualifier + key for qualifier in KEY_QUALIFIERS for key in ("KEY", "KEYS")]
)
# A secret word in a name that is about the secret rather than the secret itself: its shape or
# count (pad_token_id, max_tokens, token_type_ids: a model's settings), or where it is kept or looked
# up (spark.authenticate.secret.file, AWS_ACCESS_KEY_ID, secret_scope). Only when every word after the
# secret word is one of these: fs.azure.account.key.<account>.dfs... stays secret whatever the
# account is called.
ABOUT_WORDS = frozenset(
    "DIM DIMS DIMENSION SIZE SIZES LEN LENGTH ID IDS COUNT TYPE TYPES INDEX NORM PROJ EMBED EMBEDDING "
    "EMBEDDINGS HEAD HEADS CHANNELS PADDING MASK NAME NAMES SCOPE VERSION FILE PATH DIR DIRECTORY LOCATION "
    "URL URI PROVIDER STORE EXPIRY TTL LIFETIME ENV VAR".split()
)
# Words before a secret word that make the name a number of them (max_new_tokens, num_tokens).
COUNT_WORDS = frozenset("NUM N MAX MIN TOTAL".split())
# A tokenizer's special tokens are text, not credentials (pad_token, cls_token, special_tokens).
TOKEN_KINDS = frozenset("PAD BOS EOS UNK CLS SEP MASK SPECIAL START END STOP".split())
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# A Databricks secret reference names a secret without holding it, and is what a cluster must get.
_SECRET_REFERENCE = re.compile(r"\s*\{\{\s*secrets/[^/{}\s]+/[^/{}\s]+\s*\}\}\s*")
# What provenance needs to say where and how a run ran: the launchers' variables here, each platform's in its
# job side (snakeddp.platforms.jobside.JobSide.recorded). A variable not named is not recorded, whatever it
# holds: a site's scheduler tokens, a cloud job's credentials, a user's exports.
RECORDED_NAMES = frozenset(
    """
    OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE
    OMPI_COMM_WORLD_NODE_RANK MASTER_ADDR MASTER_PORT
    TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS
    RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK
    CUDA_VISIBLE_DEVICES OMP_NUM_THREADS MKL_NUM_THREADS
    """.split()
)
OWN_PREFIX = "SNAKEDDP_"
MASK = "***"
# A known secret shorter than this is masked only where it is a whole value: a password of "8" must not mask
# every 8 of a record; one this long is masked inside longer text too (a URL, a command line, JSON).
MIN_SECRET_LENGTH = 6
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
# A JSON Web Token (three base64url parts, the first two JSON objects) or an HTTP bearer credential.
_TOKEN_VALUE = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.|\bBearer\s+\S{8,}", re.IGNORECASE)
_QUERY_SECRETS = re.compile(r"(?P<key>[?&](?:sig|signature|token|code|key|password)=)[^&\s]+", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a variable or config key names a credential (a whole word of it, or two words together:
    CONNECTION_STRING), and not something about one (ABOUT_WORDS, COUNT_WORDS, TOKEN_KINDS)."""
    words = [word.upper() for word in _WORD_BREAK.split(name) if word]
    # PWD alone is the shell's working directory; DB_PWD is a password.
    if words == ["PWD"]:
        return False
    if words in (["KEY"], ["KEYS"]):
        return True
    terms = [(i, i + 1) for i, word in enumerate(words) if word in SECRET_WORDS]
    terms += [(i, i + 2) for i, (a, b) in enumerate(pairwise(words)) if a + b in SECRET_WORDS]
    return any(not _about_a_secret(words, start, end) for start, end in terms)


def _about_a_secret(words: list[str], start: int, end: int) -> bool:
    rest = words[end:]
    if rest and all(word in ABOUT_WORDS for word in rest):
        return True
    if COUNT_WORDS & set(words[:start]):
        return True
    return words[start] in ("TOKEN", "TOKENS") and start > 0 and words[start - 1] in TOKEN_KINDS


def is_secret_reference(value: Any) -> bool:
    """A value that names where a secret is kept (Databricks' ``{{secrets/<scope>/<key>}}``), kept as written."""
    return isinstance(value, str) and _SECRET_REFERENCE.fullmatch(value) is not None


def redact_text(text: str) -> str:
    """Mask user:password@ in URLs and signature/token query parameters (SAS URLs)."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _QUERY_SECRETS.sub(lambda m: f"{m.group('key')}{MASK}", text)


def looks_like_credential(value: str) -> bool:
    """A value that is a token whatever its variable is called (a JWT, a bearer header)."""
    return _TOKEN_VALUE.search(value) is not None


def recorded_environment(env: Mapping[str, str], also: Callable[[str], bool]) -> dict[str, str]:
    """The variables provenance records: the allow-list above and those ``also`` accepts (a platform's, the
    network's), without secret-looking names or values, URL credentials masked."""
    secrets = environment_secrets(env)
    return {
        name: _scrub_text(value, secrets)
        for name, value in sorted(env.items())
        if (name in RECORDED_NAMES or name.startswith(OWN_PREFIX) or also(name))
        and not is_secret_name(name)
        and not looks_like_credential(value)
    }


def masks(key: Any, value: Any) -> bool:
    """Whether ``scrub`` masks ``value`` under ``key``: a secret-looking name with something in it
    (a secret reference names a secret, and is kept)."""
    if value in (None, "") or isinstance(value, bool) or is_secret_reference(value):  # a flag is no secret
        return False
    return is_secret_name(str(key))


def environment_secrets(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The values of the environment's credentials: variables with a secret-looking name or a token-looking value.
    A value shorter than MIN_SECRET_LENGTH is a flag or a count (HF_HUB_DISABLE_TOKEN=1, a CI runner's KEY_ID=15),
    not a credential: searched for, it would mask every such number and word of a record."""
    env = os.environ if env is None else env
    return frozenset(
        value
        for name, value in env.items()
        if len(value.strip()) >= MIN_SECRET_LENGTH
        and not is_secret_reference(value)
        and (is_secret_name(name) or looks_like_credential(value))
    )


def secret_values(value: Any) -> set[str]:
    """Every value under a secret-looking key at any depth of ``value`` (a container's scalars all count)."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        for key, item in value.items():
            if masks(key, item):
                found |= _scalars(item)
            else:
                found |= secret_values(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found |= secret_values(item)
    elif isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            found |= secret_values(json.loads(value))
        except ValueError:
            pass
    return found


def _scalars(value: Any) -> set[str]:
    if isinstance(value, Mapping):
        return {text for item in value.values() for text in _scalars(item)}
    if isinstance(value, (list, tuple)):
        return {text for item in value for text in _scalars(item)}
    if value is None or isinstance(value, bool) or value == "":
        return set()
    return {str(value)}


def scrub(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """A copy of a JSON-like value with the values under secret-named keys masked at any depth, every other
    occurrence of a known secret too (``secrets``; by default those ``value`` holds and the environment's
    credentials), and URL credentials removed. A string that holds a JSON object (a config section exported
    as a variable, SNAKEDDP_PLATFORM_SECTION) is scrubbed inside."""
    known = frozenset(secrets) if secrets is not None else frozenset(secret_values(value) | environment_secrets())
    return _scrub(value, known)


def _scrub(value: Any, secrets: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {k: (MASK if masks(k, v) else _scrub(v, secrets)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, secrets) for v in value]
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    # A number is data before it is a secret: a count of 15 is kept though some credential's value is "15";
    # only one as long as a real secret (MIN_SECRET_LENGTH digits) is masked.
    text = None if value is None or isinstance(value, bool) else str(value)
    if text is not None and len(text) >= MIN_SECRET_LENGTH and text in secrets:
        return MASK
    return value


def mask_known(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each known secret masked: the whole text when it is one, else every occurrence of those
    long enough (MIN_SECRET_LENGTH), longest first."""
    secrets = frozenset(secrets)
    if text in secrets:
        return MASK
    for secret in sorted((s for s in secrets if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def _scrub_text(text: str, secrets: frozenset[str] = frozenset()) -> str:
    if text.lstrip().startswith("{"):
        try:
            inside = json.loads(text)
        except ValueError:
            inside = None
        if isinstance(inside, dict):
            scrubbed = _scrub(inside, secrets | secret_values(inside))
            if scrubbed != inside:
                return json.dumps(scrubbed, sort_keys=True)
    return mask_known(redact_text(text), secrets)


def secret_keys(value: Any, prefix: str) -> list[str]:
    """The dotted keys below ``prefix`` whose values ``scrub`` would mask."""
    if isinstance(value, Mapping):
        found = []
        for key, item in value.items():
            dotted = f"{prefix}.{key}"
            found += [dotted] if masks(key, item) else secret_keys(item, dotted)
        return found
    if isinstance(value, (list, tuple)):
        return [key for index, item in enumerate(value) for key in secret_keys(item, f"{prefix}.{index}")]
    return []
