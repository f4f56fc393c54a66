"""Fetch the upstream source files listed in envs/upstream/sources.toml into a cache outside the
checkout and link it as .upstream/ (one folder per entry). Checked by sha256; fetched once.

An entry names a project, its source archive and the archive's sha256. The archive is found on
the package index pip is configured with (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, pip.conf, as
`pip config list` reports them; default PyPI): the project's simple-API page (PEP 503 HTML or
PEP 691 JSON) lists the file with its hash, which must be the entry's; the downloaded bytes are
checked again. So a mirror or a proxy in front of PyPI works wherever pip works.

The verified archive itself is kept too (ARCHIVES, beside the extracted files), because a build
needs the whole source tree: `fetch_upstream.py --archive NAME` makes sure the archive of entry
NAME is there, checked against its sha256, and prints its path (envs/engine055/install.sh builds
vLLM 0.5.5 from it). sources.toml stays the one place that names the archive and its sha256.

Runs on Python 3.10 as well (the BI-100 engine venv calls it): compat_build/toml_files.py reads its TOML.
"""

import argparse
import ast
import base64
import hashlib
import json
import os
import re
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script, by the engine venvs' install scripts too

from compat_build import toml_files  # noqa: E402  (tomllib, or on Python 3.10 pip's own tomli)

SOURCES = ROOT / "envs" / "upstream" / "sources.toml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "enginex-compat" / "upstream"
ARCHIVES = CACHE.parent / "upstream-archives"
LINK = ROOT / ".upstream"
PYPI = "https://pypi.org/simple"
# pip's own precedence for a download: the environment, then the command's section, then [global].
CONFIG_SECTIONS = (":env:", "download", "global")
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class FetchError(Exception):
    """One sentence for the user: what is missing or wrong, and where."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pip_config() -> dict:
    """`pip config list` of this interpreter's pip as {"section.key": value}; {} without pip."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            try:
                config[key.strip()] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                config[key.strip()] = value.strip()
    return config


def _setting(config: dict, name: str):
    return next((config[f"{s}.{name}"] for s in CONFIG_SECTIONS if f"{s}.{name}" in config), None)


def pip_indexes(config: dict) -> list:
    """The index URLs pip would search, in its order: index-url (default PyPI), then each extra."""
    index = _setting(config, "index-url") or PYPI
    extra = _setting(config, "extra-index-url") or ""
    return [u for u in [index, *str(extra).split()] if u]


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")))
    return url


def _request(url: str, accept: str = "*/*") -> urllib.request.Request:
    """A request for `url`, with the URL's user:password (as pip takes it in an index URL) sent as
    HTTP basic auth rather than left in the URL."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": accept, "User-Agent": "enginex-compat fetch_upstream"}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return urllib.request.Request(url, headers=headers)


def _open(url: str, accept: str, context):
    """(content type, response) of an http(s) or file URL; a file: directory means its index.html."""
    if urllib.parse.urlsplit(url).scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if path.is_dir():
            path = path / "index.html"
        kind = "application/vnd.pypi.simple.v1+json" if path.suffix == ".json" else "text/html"
        return kind, open(path, "rb")
    response = urllib.request.urlopen(_request(url, accept), timeout=300, context=context)
    return response.headers.get("Content-Type", ""), response


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def project_files(index: str, project: str, context) -> dict:
    """{filename: (absolute url, sha256 or None)} from the index's simple page of `project`."""
    page = index.rstrip("/") + "/" + re.sub(r"[-_.]+", "-", project).lower() + "/"
    kind, response = _open(page, SIMPLE_ACCEPT, context)
    with response:
        body = response.read()
    files = {}
    if "json" in kind:
        for entry in json.loads(body).get("files", []):
            url = urllib.parse.urljoin(page, entry["url"])
            files[entry["filename"]] = (url, (entry.get("hashes") or {}).get("sha256"))
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for href in parser.links:
        url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        algo, _, value = fragment.partition("=")
        files[name] = (url, value.lower() if algo == "sha256" and value else None)
    return files


def _download(url: str, entry: dict, index: str, context) -> Path:
    """`url` into ARCHIVES, kept only when its sha256 is the entry's."""
    if not urllib.parse.urlsplit(url).username:  # a file on the index's host gets the index's credentials
        ours, theirs = urllib.parse.urlsplit(index), urllib.parse.urlsplit(url)
        if ours.username and ours.hostname == theirs.hostname:
            url = urllib.parse.urlunsplit(theirs._replace(netloc=ours.netloc))
    ARCHIVES.mkdir(parents=True, exist_ok=True)
    # Downloaded next to its final place and renamed once verified: concurrent runs never see half a file.
    with tempfile.NamedTemporaryFile(dir=ARCHIVES, prefix=".part-", delete=False) as fh:
        part = Path(fh.name)
        try:
            _, response = _open(url, "*/*", context)
            with response:
                while chunk := response.read(1 << 20):
                    fh.write(chunk)
        except BaseException:
            part.unlink()
            raise
    digest = sha256_of(part)
    if digest != entry["sha256"]:
        part.unlink()
        raise FetchError(f"{entry['archive']} from {_redact(url)} has sha256 {digest}, not {entry['sha256']}")
    part.chmod(0o644)
    path = ARCHIVES / entry["archive"]
    part.replace(path)
    return path


def archive(name: str, entry: dict) -> Path:
    """The entry's archive in ARCHIVES, downloaded once from pip's index and checked against its
    sha256 on every call (a damaged or replaced file is fetched again, a wrong one never kept)."""
    path = ARCHIVES / entry["archive"]
    if path.is_file() and sha256_of(path) == entry["sha256"]:
        return path
    config = pip_config()
    cert = _setting(config, "cert")
    context = ssl.create_default_context(cafile=cert) if cert and os.path.isfile(cert) else None
    tried = []
    for index in pip_indexes(config):
        try:
            files = project_files(index, entry["project"], context)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            tried.append(f"{_redact(index)} ({getattr(exc, 'reason', None) or exc})")
            continue
        if entry["archive"] not in files:
            tried.append(f"{_redact(index)} (no {entry['archive']} among {entry['project']}'s {len(files)} files)")
            continue
        url, listed = files[entry["archive"]]
        if listed and listed != entry["sha256"]:
            raise FetchError(
                f"{name}: {_redact(index)} lists {entry['archive']} with sha256 {listed}, not "
                f"{entry['sha256']} ({SOURCES.name}); that index serves another file under this name"
            )
        print(f"fetching {entry['archive']} from {_redact(index)}", file=sys.stderr)
        try:
            return _download(url, entry, index, context)
        except (OSError, urllib.error.URLError) as exc:
            tried.append(f"{_redact(index)} (download failed: {getattr(exc, 'reason', None) or exc})")
    raise FetchError(
        f"{name}: {entry['archive']} was found on none of pip's indexes: {'; '.join(tried)}. Point "
        f"PIP_INDEX_URL (or pip.conf's index-url) at an index or mirror that has it, or put the file, "
        f"sha256 {entry['sha256']}, at {path}"
    )


def fetch(name: str, entry: dict) -> None:
    dest = CACHE / name
    if all((dest / m).is_file() for m in entry["members"]):
        return
    with tarfile.open(archive(name, entry)) as tar:
        for member in entry["members"]:
            data = tar.extractfile(entry["strip"] + member)
            if data is None:
                sys.exit(f"{name}: {member} is not a file in the archive")
            (dest / member).parent.mkdir(parents=True, exist_ok=True)
            (dest / member).write_bytes(data.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", metavar="NAME", help="only make sure entry NAME's verified archive is cached and print its path")
    opts = parser.parse_args()
    sources = toml_files.load(SOURCES)
    try:
        if opts.archive:
            if opts.archive not in sources:
                sys.exit(f"no entry {opts.archive!r} in {SOURCES.name}")
            print(archive(opts.archive, sources[opts.archive]))
            return
        for name, entry in sources.items():
            fetch(name, entry)
    except FetchError as exc:
        sys.exit(f"fetch_upstream: {exc}")
    if LINK.is_symlink() or LINK.exists():
        if LINK.resolve() == CACHE.resolve():
            return
        LINK.unlink()
    LINK.symlink_to(CACHE)


if __name__ == "__main__":
    main()
