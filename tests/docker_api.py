"""A Docker Engine API stand-in on 127.0.0.1 for `make build` tests: the real docker SDK talks to
it over HTTP. It answers /version, /_ping and POST /build, streaming a scripted build log; it
records the build's query (tag, buildargs) and the context tarball it received."""

import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List
from urllib.parse import parse_qs, urlparse

API = "1.41"


class DockerAPI:
    def __init__(self, chunks: List[Dict]) -> None:
        self.chunks = chunks
        self.builds: List[Dict] = []
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

            def do_GET(self):
                path = urlparse(self.path).path
                if path.endswith("/_ping"):
                    self._send(200, b"OK", "text/plain")
                elif path.endswith("/version"):
                    self._send(200, json.dumps({"ApiVersion": API, "Version": "24.0.0"}).encode())
                else:
                    self._send(404, b'{"message": "not here"}')

            def do_HEAD(self):
                self._send(200, b"")

            def do_POST(self):
                url = urlparse(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not url.path.endswith("/build"):
                    self._send(404, b'{"message": "not here"}')
                    return
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                    names = sorted(tar.getnames())
                    dockerfile = tar.extractfile("Dockerfile").read().decode()
                api.builds.append({"query": query, "names": names, "dockerfile": dockerfile})
                # The daemon streams a build as chunked JSON messages, one per chunk.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in api.chunks:
                    data = json.dumps(chunk).encode() + b"\r\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
