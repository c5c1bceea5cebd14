"""Settings read from the environment: each checked where it is read, and refused in one line with a HINT."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import overload


@overload
def seconds(
    environ: Mapping[str, str],
    variable: str,
    default: float,
    *,
    sets: str,
    example: float,
    error: type[Exception],
) -> float: ...
@overload
def seconds(
    environ: Mapping[str, str],
    variable: str,
    default: None,
    *,
    sets: str,
    example: float,
    error: type[Exception],
) -> float | None: ...
def seconds(
    environ: Mapping[str, str],
    variable: str,
    default: float | None,
    *,
    sets: str,
    example: float,
    error: type[Exception],
) -> float | None:
    """``variable``'s seconds where it is set, else ``default``; ``error`` (one line with a HINT) where it is no
    finite number above 0. ``sets`` says what the setting is for, ``example`` a value the HINT offers."""
    given = environ.get(variable, "").strip()
    if not given:
        return default
    try:
        found = float(given)
    except ValueError:
        found = math.nan
    if not (math.isfinite(found) and found > 0):
        raise error(
            f"{variable}={given!r} is not a number of seconds above 0 ({sets}). HINT: set it to one, e.g. "
            f"{variable}={example:g}, or unset it"
        )
    return found
