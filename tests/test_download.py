"""The downloader against a local HTTP server on 127.0.0.1: good and bad checksums, 404, a stalled server,
partial downloads resumed (Range) or discarded, and never a file under its final name that is not complete."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evogan import download
from evogan.download import Remote, fetch
from evogan.errors import UserError

PAYLOAD = bytes(range(256)) * 64  # 16 KiB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Server(ThreadingHTTPServer):
    """Serves PAYLOAD; ``behaviour`` says how: ``ok``, ``no-range``, ``cut`` (half, then hang up once),
    ``stall`` (half, then silence until the test ends), ``missing`` (404). ``ranges`` records requests."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.behaviour = "ok"
        self.ranges: list[str | None] = []
        self.release = threading.Event()

    def url(self, name: str = "weights.pth") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/files/{name}"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: object) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        server = self.server
        asked = self.headers.get("Range")
        server.ranges.append(asked)
        if server.behaviour == "missing":
            self.send_error(404)
            return
        start = int(asked.removeprefix("bytes=").rstrip("-")) if asked and server.behaviour != "no-range" else 0
        if start >= len(PAYLOAD):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(PAYLOAD)}")
            self.end_headers()
            return
        body = PAYLOAD[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.behaviour in ("cut", "stall"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if server.behaviour == "stall":
                server.release.wait(30)
            server.behaviour = "ok"  # the next attempt is served whole
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def remote(server: Server, digest: str = SHA) -> Remote:
    return Remote(server.url(), digest)


def test_a_good_download_lands_verified_and_later_calls_reuse_it(server: Server, tmp_path: Path) -> None:
    target = tmp_path / "cache" / "weights.pth"
    assert fetch(remote(server), target, what="test weights", timeout=5) == target
    assert target.read_bytes() == PAYLOAD and not target.with_name("weights.pth.part").exists()
    server.behaviour = "missing"
    assert fetch(remote(server), target, what="test weights", timeout=5) == target  # no request needed
    assert server.ranges == [None]


def test_md5_published_digests_are_checked_too(server: Server, tmp_path: Path) -> None:
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    target = fetch(Remote(server.url(), md5, "md5"), tmp_path / "weights.pth", what="x", timeout=5)
    assert target.read_bytes() == PAYLOAD


def test_a_bad_checksum_is_one_line_naming_file_url_and_place_and_leaves_nothing(
    server: Server, tmp_path: Path
) -> None:
    target = tmp_path / "weights.pth"
    with pytest.raises(UserError) as error:
        fetch(remote(server, "0" * 64), target, what="test weights", timeout=5)
    message = str(error.value)
    assert "\n" not in message and message.startswith("weights.pth: ")
    assert server.url() in message and str(target) in message and SHA in message
    assert list(tmp_path.iterdir()) == [tmp_path / "weights.pth.lock"]


def test_a_404_is_one_line_and_leaves_nothing(server: Server, tmp_path: Path) -> None:
    server.behaviour = "missing"
    target = tmp_path / "weights.pth"
    with pytest.raises(UserError, match=r"^weights\.pth: .* answered HTTP 404; download .* by hand") as error:
        fetch(remote(server), target, what="test weights", timeout=5)
    assert str(target) in str(error.value)
    assert not target.exists() and not target.with_name("weights.pth.part").exists()


@pytest.mark.parametrize("how", ["a file", "read-only"])
def test_an_unwritable_cache_is_one_line_naming_the_cache_and_the_variable(
    server: Server, tmp_path: Path, how: str
) -> None:
    cache = tmp_path / "cache"
    if how == "a file":
        cache.write_text("not a directory")
    else:
        cache.mkdir()
        cache.chmod(0o500)
        if os.access(cache, os.W_OK):  # root writes anyway
            pytest.skip("the file system lets this user write to a read-only directory")
    with pytest.raises(UserError) as error:
        fetch(remote(server), cache / "weights.pth", what="test weights", timeout=5)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{cache}: cannot write the download cache")
    assert "EVOGAN_CACHE_DIR" in message and server.url() in message
    assert server.ranges == []  # nothing was requested


def test_offline_is_one_line(tmp_path: Path) -> None:
    # A port nothing listens on: connection refused, as with no network.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError, match=r"^weights\.pth: cannot download http://127\.0\.0\.1:\d+/w/weights\.pth \("):
        fetch(Remote(f"http://127.0.0.1:{port}/w/weights.pth", SHA), tmp_path / "weights.pth", what="x", timeout=5)


def test_a_stalled_server_times_out_and_the_next_attempt_resumes(server: Server, tmp_path: Path) -> None:
    server.behaviour = "stall"
    target = tmp_path / "weights.pth"
    with pytest.raises(UserError, match=r"timed out; a partial file is kept to resume"):
        fetch(remote(server), target, what="test weights", timeout=2)  # long enough for the half to arrive under load
    part = target.with_name("weights.pth.part")
    assert not target.exists() and part.read_bytes() == PAYLOAD[: len(PAYLOAD) // 2]
    # Serve the retry whole before waking the stalled handler: under load the retry could otherwise be
    # handled before that handler resets the behaviour, and be cut in half too (seen in a fresh clone).
    server.behaviour = "ok"
    server.release.set()
    fetch(remote(server), target, what="test weights", timeout=5)
    assert target.read_bytes() == PAYLOAD and not part.exists()
    assert server.ranges == [None, f"bytes={len(PAYLOAD) // 2}-"]


def test_a_cut_download_is_resumed_with_a_range(server: Server, tmp_path: Path) -> None:
    server.behaviour = "cut"
    target = tmp_path / "weights.pth"
    with pytest.raises(UserError, match="partial file is kept"):
        fetch(remote(server), target, what="test weights", timeout=5)
    assert not target.exists()
    fetch(remote(server), target, what="test weights", timeout=5)
    assert target.read_bytes() == PAYLOAD
    assert server.ranges == [None, f"bytes={len(PAYLOAD) // 2}-"]


def test_a_partial_file_is_discarded_when_the_server_ignores_ranges(server: Server, tmp_path: Path) -> None:
    target = tmp_path / "weights.pth"
    target.with_name("weights.pth.part").write_bytes(b"stale bytes of something else")
    server.behaviour = "no-range"
    fetch(remote(server), target, what="test weights", timeout=5)
    assert target.read_bytes() == PAYLOAD  # started over: the stale bytes were not kept in front
    assert server.ranges == ["bytes=29-"]


def test_a_partial_file_longer_than_the_file_starts_over(server: Server, tmp_path: Path) -> None:
    target = tmp_path / "weights.pth"
    target.with_name("weights.pth.part").write_bytes(PAYLOAD + b"junk")
    fetch(remote(server), target, what="test weights", timeout=5)
    assert target.read_bytes() == PAYLOAD
    assert server.ranges == [f"bytes={len(PAYLOAD) + 4}-", None]


def test_a_resumed_part_of_another_file_fails_the_checksum_and_is_removed(server: Server, tmp_path: Path) -> None:
    target = tmp_path / "weights.pth"
    part = target.with_name("weights.pth.part")
    part.write_bytes(b"x" * 100)  # not the file's first 100 bytes: the whole fails its digest
    with pytest.raises(UserError, match="not the published"):
        fetch(remote(server), target, what="test weights", timeout=5)
    assert not target.exists() and not part.exists()
    fetch(remote(server), target, what="test weights", timeout=5)  # the next attempt starts clean
    assert target.read_bytes() == PAYLOAD


def test_cache_dir_and_download_switch_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(download.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert download.cache_dir() == tmp_path / "xdg" / "evogan"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert download.cache_dir() == Path("~/.cache/evogan").expanduser()
    monkeypatch.setenv(download.CACHE_ENV, str(tmp_path / "mine"))
    assert download.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(download.DOWNLOAD_ENV, raising=False)
    assert not download.downloads_allowed() and download.downloads_allowed(True)
    monkeypatch.setenv(download.DOWNLOAD_ENV, "1")
    assert download.downloads_allowed()
    monkeypatch.setenv(download.DOWNLOAD_ENV, "0")
    assert not download.downloads_allowed()
