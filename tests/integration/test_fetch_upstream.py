"""scripts/fetch_upstream.py finds an upstream archive on the index pip is configured with (its
simple-API page, HTML or JSON), checks the index's hash and the bytes against sources.toml, and
says clearly when no index has the file. A local index server stands in for PyPI or a mirror."""

import base64
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "demo-1.0.tar.gz"


def _tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"HEAD_SIZES = [64, 80, 96, 112, 128, 256]\n"
        info = tarfile.TarInfo("demo-1.0/demo/ops.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TARBALL = _tarball()
SHA = hashlib.sha256(TARBALL).hexdigest()
ENTRY = {"project": "Demo_Pkg", "archive": ARCHIVE, "sha256": SHA, "strip": "demo-1.0/", "members": ["demo/ops.py"]}


class Index:
    """/simple/<project>/ pages (PEP 503 HTML or PEP 691 JSON) and /files/<name>; records the
    requests and their Authorization headers."""

    def __init__(self, files, json_api=False, listed_sha=None):
        self.requests = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                index.requests.append((self.path, self.headers.get("Authorization")))
                if self.path == "/simple/demo-pkg/":
                    sha = listed_sha or SHA
                    if json_api:
                        body = json.dumps(
                            {
                                "meta": {"api-version": "1.0"},
                                "name": "demo-pkg",
                                "files": [{"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": sha}} for name in files],
                            }
                        ).encode()
                        kind = "application/vnd.pypi.simple.v1+json"
                    else:
                        body = "".join(f'<a href="../../files/{n}#sha256={sha}">{n}</a>\n' for n in files).encode()
                        kind = "text/html"
                elif self.path == f"/files/{ARCHIVE}" and ARCHIVE in files:
                    body, kind = TARBALL, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fetcher(tmp_path, monkeypatch):
    """The script as a module, its cache in tmp_path, pip's configuration files out of the way."""
    spec = importlib.util.spec_from_file_location("fetch_upstream", ROOT / "scripts" / "fetch_upstream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ARCHIVES", tmp_path / "archives")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    return module


@pytest.mark.parametrize("json_api", [False, True])
def test_the_archive_comes_from_pips_index_checked_and_cached(fetcher, monkeypatch, json_api):
    index = Index([ARCHIVE, "demo-1.0-py3-none-any.whl"], json_api=json_api)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    try:
        path = fetcher.archive("demo", ENTRY)
        again = fetcher.archive("demo", ENTRY)
    finally:
        index.close()
    assert path == again == fetcher.ARCHIVES / ARCHIVE and path.read_bytes() == TARBALL
    assert [p for p, _ in index.requests] == ["/simple/demo-pkg/", f"/files/{ARCHIVE}"]  # the second call: cached


def test_an_extra_index_is_searched_after_the_index(fetcher, monkeypatch):
    empty, mirror = Index([]), Index([ARCHIVE])
    monkeypatch.setenv("PIP_INDEX_URL", empty.url)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", mirror.url)
    try:
        assert fetcher.archive("demo", ENTRY).read_bytes() == TARBALL
    finally:
        empty.close()
        mirror.close()
    assert empty.requests and mirror.requests[-1][0] == f"/files/{ARCHIVE}"


def test_index_credentials_are_sent_as_basic_auth_and_never_printed(fetcher, monkeypatch, capsys):
    index = Index([ARCHIVE])
    monkeypatch.setenv("PIP_INDEX_URL", index.url.replace("http://", "http://ci:s3cret@"))
    try:
        fetcher.archive("demo", ENTRY)
    finally:
        index.close()
    expected = "Basic " + base64.b64encode(b"ci:s3cret").decode()
    assert [auth for _, auth in index.requests] == [expected, expected]
    assert "s3cret" not in capsys.readouterr().err


def test_an_index_listing_another_hash_is_refused_before_the_download(fetcher, monkeypatch):
    index = Index([ARCHIVE], listed_sha="0" * 64)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    try:
        with pytest.raises(fetcher.FetchError, match=f"lists {ARCHIVE} with sha256 0000.*not {SHA}"):
            fetcher.archive("demo", ENTRY)
    finally:
        index.close()
    assert [p for p, _ in index.requests] == ["/simple/demo-pkg/"]


def test_bytes_that_do_not_match_are_never_kept(fetcher, monkeypatch):
    """The index lists the expected hash but serves other bytes (a broken mirror)."""
    index = Index([ARCHIVE], listed_sha="f" * 64)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    wrong = dict(ENTRY, sha256="f" * 64)
    try:
        with pytest.raises(fetcher.FetchError, match=f"{ARCHIVE} from .* has sha256 {SHA}, not ffff"):
            fetcher.archive("demo", wrong)
    finally:
        index.close()
    assert not list((fetcher.ARCHIVES).glob("*"))


def test_no_index_with_the_file_is_one_clear_error(tmp_path):
    """The script itself, as envs/engine055/install.sh runs it, on the real sources.toml entry
    (vLLM 0.5.5), which this index lacks: exit 1 with one sentence naming the indexes searched
    and what to do."""
    index = Index(["other-2.0.tar.gz"])
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index.url, PIP_EXTRA_INDEX_URL="", XDG_CACHE_HOME=str(tmp_path))
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "fetch_upstream.py"), "--archive", "vllm-0_5_5"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        index.close()
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"fetch_upstream: vllm-0_5_5: vllm-0.5.5.tar.gz was found on none of pip's indexes: {index.url} (")
    assert "Point PIP_INDEX_URL" in result.stderr and "sha256 14abe332" in result.stderr
