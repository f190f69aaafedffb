"""Files fetched when the user allows it (``download = true``, ``evogan run --download``): the FID Inception
weights and torchvision datasets, into a cache directory later runs reuse.

Standard library only (urllib). A download streams into ``<file>.part`` with socket time-outs, is checked
against its published digest and only then renamed to its name, so a file under its final name is always
complete. An interrupted download leaves the ``.part`` file: the next attempt resumes it with an HTTP
``Range`` request when the server honours one, and starts over when it does not. Processes that want the
same file at once (the workers of one run) take turns through a lock file; the second finds it done.

Every failure is one :class:`UserError` line naming the file, the URL and where to put the file by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evogan.errors import UserError

#: Overrides the cache directory (default ``$XDG_CACHE_HOME/evogan``, else ``~/.cache/evogan``).
CACHE_ENV = "EVOGAN_CACHE_DIR"
#: Set (to anything but 0) by ``evogan run --download``: every component may download what it needs;
#: worker processes inherit it.
DOWNLOAD_ENV = "EVOGAN_DOWNLOAD"
TIMEOUT = 30.0  # seconds without a byte before a download is abandoned (resumable later)
CHUNK = 1 << 16


def cache_dir() -> Path:
    """Where downloads are kept: ``$EVOGAN_CACHE_DIR``, ``$XDG_CACHE_HOME/evogan`` or ``~/.cache/evogan``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "evogan"


def downloads_allowed(option: bool = False) -> bool:
    """A component's own ``download`` option, or ``evogan run --download`` for the whole run."""
    return option or os.environ.get(DOWNLOAD_ENV, "0") not in ("", "0")


@dataclass(frozen=True)
class Remote:
    """A published file: where it is and the digest its publisher gives (``sha256`` or ``md5``)."""

    url: str
    digest: str
    algorithm: str = "sha256"

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB blocks (downloads here; checkpoints through rundir.file_sha256)."""
    digest = hashlib.new(algorithm)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def by_hand(what: str, remote: Remote, destination: Path) -> str:
    return f"download {remote.url} by hand and put it at {destination} ({what})"


@contextlib.contextmanager
def _locked(destination: Path) -> Iterator[None]:
    lock = destination.with_name(destination.name + ".lock")
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open(url: str, offset: int, timeout: float) -> tuple[object, bool]:
    """The response, and whether it continues ``offset`` bytes already held (a ``206`` from that byte)."""
    request = urllib.request.Request(url, headers={"User-Agent": "evogan"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    response = urllib.request.urlopen(request, timeout=timeout)
    resumed = offset > 0 and response.status == 206
    if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
        response.close()
        raise urllib.error.URLError("the server resumed from another byte than asked")
    return response, resumed


def _transfer(remote: Remote, part: Path, timeout: float) -> None:
    """Stream ``remote`` into ``part``, continuing what it holds when the server allows a range."""
    offset = part.stat().st_size if part.exists() else 0
    try:
        response, resumed = _open(remote.url, offset, timeout)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:  # 416: the range is past the end: a stale part file
            raise
        error.close()
        part.unlink()
        offset = 0
        response, resumed = _open(remote.url, 0, timeout)
    with response as stream, part.open("ab" if resumed else "wb") as handle:  # type: ignore[attr-defined]
        length = stream.headers.get("Content-Length")
        received = 0
        for block in iter(lambda: stream.read1(CHUNK), b""):  # what has arrived: a stall keeps it
            handle.write(block)
            received += len(block)
        handle.flush()
        os.fsync(handle.fileno())
    if length is not None and received < int(length):  # the server hung up early: keep the part to resume
        raise http.client.IncompleteRead(b"", int(length) - received)


def fetch(remote: Remote, destination: Path, *, what: str, timeout: float = TIMEOUT) -> Path:
    """``destination`` once it holds ``remote``, verified; downloaded only when it is not there yet.

    :param what: what the file is, for error messages ("the FID Inception weights").
    :param timeout: seconds to wait for the connection and for each read.
    :raises UserError: unreachable, HTTP error, time-out, a digest that does not match, or a cache that
        cannot be written (not a directory, read-only, full) (one line).
    """
    try:
        return _fetch(remote, destination, what=what, timeout=timeout)
    except OSError as error:  # the download's own errors are UserErrors already: this is the cache
        raise UserError(
            f"{destination.parent}: cannot write the download cache ({error.strerror or error}); set {CACHE_ENV} "
            f"to a writable directory, or {by_hand(what, remote, destination)}"
        ) from None


def _fetch(remote: Remote, destination: Path, *, what: str, timeout: float) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    part = destination.with_name(destination.name + ".part")
    with _locked(destination):
        if destination.is_file():  # another process finished it while this one waited
            return destination
        try:
            _transfer(remote, part, timeout)
        except urllib.error.HTTPError as error:
            error.close()  # it holds the connection
            part.unlink(missing_ok=True)  # an error page is not a part of the file
            raise UserError(
                f"{destination.name}: {remote.url} answered HTTP {error.code}; {by_hand(what, remote, destination)}"
            ) from None
        except (OSError, http.client.HTTPException) as error:  # URLError, time-outs, a cut connection
            reason = getattr(error, "reason", None) or error or type(error).__name__
            raise UserError(
                f"{destination.name}: cannot download {remote.url} ({reason}; a partial file is kept to resume); "
                f"{by_hand(what, remote, destination)}"
            ) from None
        got = file_digest(part, remote.algorithm)
        if got != remote.digest:
            part.unlink()
            raise UserError(
                f"{destination.name}: {remote.url} sent a file whose {remote.algorithm} is {got}, not the published "
                f"{remote.digest} (removed); {by_hand(what, remote, destination)}"
            )
        os.replace(part, destination)
    return destination


__all__ = ["CACHE_ENV", "DOWNLOAD_ENV", "Remote", "by_hand", "cache_dir", "downloads_allowed", "fetch", "file_digest"]
