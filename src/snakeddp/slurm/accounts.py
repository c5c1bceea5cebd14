"""The Slurm accounts the profile names (``slurm_account``), checked against the user's before any job is sent.

sbatch refuses a job of an account the user has no association with, and the executor plugin checks the same
before it submits, raising its WorkflowError with a traceback once per job and per try: a placeholder such as the
profile's ``my_project`` cost about 190 lines for two runs. Asked once, of ``sacctmgr`` (slurmdbd's associations,
what the plugin asks too), it is one line naming the accounts the user has. Where sacctmgr cannot tell (no
accounting, no permission, no answer in time), nothing is said: sbatch decides, as before.
"""

from __future__ import annotations

import getpass
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

from snakeddp.slurm.nodes import resource_text

QUERY_TIMEOUT_S = 30


class AccountError(ValueError):
    """A slurm_account the user has no association with; the message says which ones the user has."""


def named(resource_settings: Any, rules: Iterable[str]) -> dict[str, str]:
    """Where each ``slurm_account`` the jobs of ``rules`` get is given (``set-resources: train``, or
    ``default-resources``), and the account; nothing where none is given (the plugin then submits without one)."""
    found = {}
    default = resource_settings.default_resources
    for rule in rules:
        given = (resource_settings.overwrite_resources or {}).get(rule)
        # Membership, not .get(): Snakemake's Resources answer a missing name with an empty Resource.
        if given and "slurm_account" in given:
            where, value = f"set-resources: {rule}", given["slurm_account"]
        elif default and "slurm_account" in default:
            where, value = "default-resources", default["slurm_account"]
        else:
            continue
        account = resource_text(getattr(value, "raw", value))
        if account:
            found.setdefault(where, account)
    return found


def sacctmgr(user: str) -> set[str] | None:
    """The accounts ``user`` has an association with, lowercased as Slurm keeps them; None where sacctmgr cannot
    tell (not installed, no accounting storage, refused, no answer within QUERY_TIMEOUT_S) or lists none."""
    argv = ["sacctmgr", "--noheader", "--parsable2", "show", "associations", f"user={user}", "format=Account"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    accounts = {line.strip().lower() for line in done.stdout.splitlines() if line.strip()}
    return accounts if done.returncode == 0 and accounts else None


def check(
    resource_settings: Any,
    rules: Iterable[str],
    ask: Callable[[str], set[str] | None] = sacctmgr,
    user: str | None = None,
) -> None:
    """AccountError, in one line, for a ``slurm_account`` the user (this process's) has no association with."""
    given = named(resource_settings, rules)
    if not given:
        return
    user = user or getpass.getuser()
    accounts = ask(user)
    if accounts is None:
        return
    for where, account in sorted(given.items()):
        if account.lower() not in accounts:
            raise AccountError(
                f"slurm_account {account!r} ({where} in the profile or command line) is not an account of user "
                f"{user} on this cluster, so Slurm would refuse every job (sacctmgr lists: "
                f"{', '.join(sorted(accounts))}). HINT: set slurm_account to one of those, or leave it out where "
                "the site needs none."
            )
