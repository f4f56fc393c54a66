"""A Docker Engine API stand-in on 127.0.0.1, for what a real daemon cannot be made to do: a push
whose stream names no digest (or ends in an error a registry here cannot be made to give), and a
daemon that dies in the middle of a build. Everything else is tested on a real daemon
(tests/images).

It answers /_ping, /version, image inspect (`images`: name -> Id, Labels, RepoDigests), POST
/build (streams `chunks`) and push (streams `push_chunks`, the pushes recorded). A chunk that is
the string DROP ends the stream without its last chunk, as a daemon that died would.
"""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple, Union
from urllib.parse import parse_qs, unquote, urlparse

API = "1.41"
DROP = "drop the connection"
Chunk = Union[Dict, str]


class DockerAPI:
    def __init__(self, chunks: List[Chunk], images: Optional[Dict[str, Dict]] = None, push_chunks: Optional[List[Chunk]] = None) -> None:
        self.chunks = chunks
        self.images = images or {}
        self.push_chunks = push_chunks or []
        self.pushes: List[Dict] = []
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

            def _stream(self, chunks: List[Chunk]) -> None:
                """The daemon streams builds and pushes as chunked JSON messages, one per chunk."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    if chunk == DROP:
                        self.close_connection = True
                        return
                    data = json.dumps(chunk).encode() + b"\r\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

            def _path(self) -> Tuple[str, Dict[str, str]]:
                url = urlparse(self.path)
                path = unquote(url.path)
                versioned = re.match(r"/v[0-9.]+(/.*)$", path)  # /v1.41/images/... -> /images/...
                if versioned:
                    path = versioned.group(1)
                return path, {k: v[0] for k, v in parse_qs(url.query).items()}

            def do_GET(self):
                path, _ = self._path()
                if path.endswith("/_ping"):
                    self._send(200, b"OK", "text/plain")
                elif path.endswith("/version"):
                    self._json(200, {"ApiVersion": API, "Version": "24.0.0"})
                elif path.startswith("/images/") and path.endswith("/json"):
                    image = api.images.get(path[len("/images/") : -len("/json")])
                    if image is None:
                        self._json(404, {"message": "No such image"})
                    else:
                        config = {"Labels": image.get("Labels", {})}
                        self._json(200, {"Id": image["Id"], "RepoDigests": image.get("RepoDigests", []), "Config": config})
                else:
                    self._json(404, {"message": "not here"})

            def do_HEAD(self):
                self._send(200, b"")

            def do_POST(self):
                path, query = self._path()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if path == "/build":
                    self._stream(api.chunks)
                elif path.startswith("/images/") and path.endswith("/push"):
                    api.pushes.append({"name": path[len("/images/") : -len("/push")], "tag": query.get("tag")})
                    self._stream(api.push_chunks)
                else:
                    self._json(404, {"message": "not here"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
