"""Files on Databricks (a Unity Catalog volume, or a /Workspace folder) through the SDK's Files API.

Every path is absolute on Databricks. Uploads are single files under the SDK's multipart threshold
in practice (a partition, a checkpoint); the SDK chooses multipart for larger ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from snakeddp.databricks import DatabricksError
from snakeddp.databricks.workspace import api_error

CHUNK = 1 << 20


def upload(w: Any, local: Path, remote: str) -> None:
    try:
        with local.open("rb") as handle:
            w.files.upload(remote, handle, overwrite=True)
    except Exception as error:  # the SDK's DatabricksError family, or a connection error
        raise api_error(f"uploading {local} to {remote}", error) from None


def upload_tree(w: Any, local: Path, remote: str) -> int:
    """Every file under ``local`` to the same names under ``remote``; how many."""
    files = sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:
        upload(w, path, f"{remote}/{path.relative_to(local).as_posix()}")
    return len(files)


def size(w: Any, remote: str) -> int | None:
    """The file's size, None when there is none."""
    from databricks.sdk.errors import NotFound

    try:
        return w.files.get_metadata(remote).content_length
    except NotFound:
        return None
    except Exception as error:
        raise api_error(f"looking up {remote}", error) from None


def walk(w: Any, remote: str) -> Iterator[tuple[str, int]]:
    """(path, size) of every file below ``remote``, depth first; nothing when it does not exist.

    A listing is the workspace's text: an entry that is not a plain name inside the folder listed
    (``..``, an absolute path, a second slash, a sibling folder sharing its prefix) is refused, so
    nothing outside it is ever read, copied back or deleted.
    """
    from databricks.sdk.errors import NotFound

    try:
        entries = list(w.files.list_directory_contents(remote))
    except NotFound:
        return
    except Exception as error:
        raise api_error(f"listing {remote}", error) from None
    for entry in entries:
        name = entry.path.removeprefix(f"{remote}/") if entry.path.startswith(f"{remote}/") else ""
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise DatabricksError(
                f"the listing of {remote} names {entry.path!r}, which is not inside it; snakeddp reads, copies and "
                f"deletes nothing outside a run's folder. HINT: remove {entry.path!r} from {remote} on Databricks "
                "(something other than snakeddp wrote there), then rerun."
            )
        if entry.is_directory:
            yield from walk(w, entry.path)
        else:
            yield entry.path, entry.file_size or 0


def clear(w: Any, remote: str) -> None:
    """Remove ``remote``'s files, so an earlier submission's outputs cannot come back as this one's."""
    try:
        for path, _ in list(walk(w, remote)):
            w.files.delete(path)
    except DatabricksError:
        raise
    except Exception as error:
        raise api_error(f"clearing {remote}", error) from None


def download(w: Any, remote: str, local: Path) -> int:
    """``remote`` into ``local``; the bytes written."""
    local.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        contents = w.files.download(remote).contents
        with local.open("wb") as handle:
            for chunk in iter(lambda: contents.read(CHUNK), b""):
                handle.write(chunk)
                written += len(chunk)
    except Exception as error:
        raise api_error(f"copying {remote} back", error) from None
    return written
