"""A Docker Engine API stand-in on 127.0.0.1 for the build and release tests: the real docker SDK
talks to it over HTTP.

It answers /version, /_ping and POST /build (streaming a scripted build log; the build's query
and the context tarball it received are recorded), and for the release gate: image inspect
(`images`: name -> Id, Labels, RepoDigests), containers (create, start, wait, logs, inspect,
remove; a container's command is run by `runner(image, command) -> (exit status, stdout,
stderr)`, so a test decides what "the image" is, e.g. a built layout's entrypoint) and push
(streams `push_chunks`; the pushes are recorded).
"""

import io
import json
import re
import struct
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, unquote, urlparse

API = "1.41"
Runner = Callable[[str, Sequence[str]], Tuple[int, bytes, bytes]]


def _frames(stream: int, data: bytes) -> bytes:
    """Docker's multiplexed log format (no TTY): 8-byte header (stream, 0, 0, 0, size) + payload."""
    return struct.pack(">BxxxL", stream, len(data)) + data if data else b""


class DockerAPI:
    def __init__(
        self,
        chunks: List[Dict],
        runner: Optional[Runner] = None,
        images: Optional[Dict[str, Dict]] = None,
        push_chunks: Optional[List[Dict]] = None,
    ) -> None:
        self.chunks = chunks
        self.builds: List[Dict] = []
        self.runner = runner
        self.images = images or {}
        self.push_chunks = push_chunks or []
        self.containers: Dict[str, Dict] = {}
        self.pushes: List[Dict] = []
        self.removed: List[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep the test output clean
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, data) -> None:
                self._send(status, json.dumps(data).encode())

            def _stream(self, chunks: List[Dict]) -> None:
                """The daemon streams builds and pushes as chunked JSON messages, one per chunk."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    data = json.dumps(chunk).encode() + b"\r\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

            def _path(self) -> Tuple[str, Dict[str, str]]:
                url = urlparse(self.path)
                path = unquote(url.path)
                versioned = re.match(r"/v[0-9.]+(/.*)$", path)  # /v1.41/containers/... -> /containers/...
                if versioned:
                    path = versioned.group(1)
                return path, {k: v[0] for k, v in parse_qs(url.query).items()}

            def _image(self, name: str):
                return api.images.get(name) or next((i for i in api.images.values() if i.get("Id") == name), None)

            def do_GET(self):
                path, query = self._path()
                if path.endswith("/_ping"):
                    self._send(200, b"OK", "text/plain")
                elif path.endswith("/version"):
                    self._json(200, {"ApiVersion": API, "Version": "24.0.0"})
                elif path.startswith("/images/") and path.endswith("/json"):
                    image = self._image(path[len("/images/") : -len("/json")])
                    if image is None:
                        self._json(404, {"message": "No such image"})
                    else:
                        self._json(
                            200,
                            {"Id": image["Id"], "RepoDigests": image.get("RepoDigests", []), "Config": {"Labels": image.get("Labels", {})}},
                        )
                elif path.startswith("/containers/") and path.endswith("/json"):
                    cid = path.split("/")[2]
                    self._json(200, {"Id": cid, "Config": {"Tty": False}, "State": {"Running": False}})
                elif path.startswith("/containers/") and path.endswith("/logs"):
                    run = api.containers[path.split("/")[2]]
                    body = b""
                    if query.get("stdout") == "1":
                        body += _frames(1, run["stdout"])
                    if query.get("stderr") == "1":
                        body += _frames(2, run["stderr"])
                    self._send(200, body, "application/vnd.docker.raw-stream")
                else:
                    self._json(404, {"message": "not here"})

            def do_HEAD(self):
                self._send(200, b"")

            def do_DELETE(self):
                path, _ = self._path()
                if path.startswith("/containers/"):
                    api.removed.append(path.split("/")[2])
                    self._send(204, b"")
                else:
                    self._json(404, {"message": "not here"})

            def do_POST(self):
                path, query = self._path()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if path == "/build":
                    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                        names = sorted(tar.getnames())
                        dockerfile = tar.extractfile("Dockerfile").read().decode()
                    api.builds.append({"query": query, "names": names, "dockerfile": dockerfile})
                    self._stream(api.chunks)
                elif path == "/containers/create":
                    spec = json.loads(body)
                    if self._image(spec["Image"]) is None:
                        self._json(404, {"message": f"No such image: {spec['Image']}"})
                        return
                    cid = f"c{len(api.containers) + 1:063d}"
                    api.containers[cid] = {"spec": spec, "status": None, "stdout": b"", "stderr": b"", "done": threading.Event()}
                    self._json(201, {"Id": cid, "Warnings": []})
                elif path.startswith("/containers/") and path.endswith("/start"):
                    run = api.containers[path.split("/")[2]]

                    def start():  # the daemon answers at once; the container runs on
                        try:
                            run["status"], run["stdout"], run["stderr"] = api.runner(run["spec"]["Image"], run["spec"].get("Cmd") or [])
                        finally:
                            run["done"].set()

                    threading.Thread(target=start, daemon=True).start()
                    self._send(204, b"")
                elif path.startswith("/containers/") and path.endswith("/wait"):
                    run = api.containers[path.split("/")[2]]
                    run["done"].wait()
                    self._json(200, {"StatusCode": run["status"], "Error": None})
                elif path.startswith("/images/") and path.endswith("/push"):
                    name = path[len("/images/") : -len("/push")]
                    api.pushes.append({"name": name, "tag": query.get("tag"), "auth": self.headers.get("X-Registry-Auth")})
                    self._stream(api.push_chunks)
                else:
                    self._json(404, {"message": "not here"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
