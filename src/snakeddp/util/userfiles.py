"""Which files are the user's: not the interpreter's standard library, not an installed package, not snakeddp's
own source (an editable install's source folder counts as the user's)."""

from __future__ import annotations

import sysconfig
import traceback
from collections.abc import Callable
from functools import cache
from pathlib import Path


@cache
def _installed_roots() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    roots = {Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.add(Path(__file__).resolve().parents[1])
    return tuple(sorted(roots))


# Site customisation: it runs before the user's code, whatever it is (a test's stand-in for torch's CUDA is one).
SITE_HOOKS = ("sitecustomize.py", "usercustomize.py")


def is_users(path: Path | str) -> bool:
    if str(path).startswith("<") or Path(path).name in SITE_HOOKS:  # <frozen importlib._bootstrap>, <string>
        return False
    resolved = Path(path).resolve()
    return not any(resolved.is_relative_to(root) for root in _installed_roots())


def where_raised(error: BaseException) -> str | None:
    """``file:line`` of the innermost frame of the user's code in ``error``'s traceback (a SyntaxError's own
    place), shown relative to the working directory where it is inside it; None where no frame is the user's."""
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return f"{_shown(error.filename)}:{error.lineno}"
    frame = innermost(error, is_users)
    return shown_frame(frame) if frame is not None else None


def innermost(error: BaseException, counts: Callable[[str], bool]) -> traceback.FrameSummary | None:
    """The innermost frame of ``error``'s traceback whose file ``counts``; None where none does."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if counts(frame.filename)]
    return frames[-1] if frames else None


def shown_frame(frame: traceback.FrameSummary) -> str:
    return f"{_shown(frame.filename)}:{frame.lineno}"


def _shown(filename: str) -> str:
    path = Path(filename).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
