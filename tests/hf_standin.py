"""A stand-in for the Hugging Face Hub on loopback: the routes huggingface_hub calls to list a
model repository and download a file (HEAD + GET with Range), for tests of `cyb-llm pull`.

    with StandInHub({"org/repo": {"model.gguf": "/path/to/file"}}, cut_first_get_at=1 << 20) as hub:
        env["HF_ENDPOINT"] = hub.url

`cut_first_get_at`: the first full-body GET of a file is cut after that many bytes (the
connection drops mid-file), so the client has to resume with a Range request. `hub.log`
records (method, path, range header) of every request."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class StandInHub:
    def __init__(self, repos: dict[str, dict[str, str]], cut_first_get_at: int | None = None):
        self.repos = repos
        self.cut = cut_first_get_at
        self.log: list[tuple[str, str, str | None]] = []
        self._sha: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def sha256(self, path: str) -> str:
        if path not in self._sha:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            self._sha[path] = h.hexdigest()
        return self._sha[path]

    def __enter__(self) -> "StandInHub":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def body_gets(self, name: str) -> list[str | None]:
        """Range headers of the GETs of file `name` (None = the whole file)."""
        return [r for m, p, r in self.log if m == "GET" and p.endswith("/" + name)]

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, doc) -> None:
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, head: bool) -> None:
                path = unquote(urlparse(self.path).path)
                parts = path.strip("/").split("/")
                # /{org}/{repo}/resolve/{revision}/{file...}
                if len(parts) < 5 or parts[2] != "resolve":
                    return self.send_error(404)
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                local = hub.repos.get(repo, {}).get(name)
                if local is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = os.path.getsize(local)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0] or 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hub.sha256(local)}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()
                if head:
                    return
                limit = size
                with hub._lock:
                    if hub.cut is not None and not start:
                        limit, hub.cut = min(hub.cut, size), None  # only the first full GET is cut
                with open(local, "rb") as f:
                    f.seek(start)
                    left = limit - start
                    while left > 0:
                        chunk = f.read(min(1 << 20, left))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        left -= len(chunk)
                if limit < size:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)

            def _tree(self) -> None:
                parts = urlparse(self.path).path.strip("/").split("/")
                # /api/models/{org}/{repo}/tree/{revision}
                repo = "/".join(parts[2:4])
                if repo not in hub.repos:
                    return self.send_error(404)
                self._json([{"type": "file", "path": n, "size": os.path.getsize(p), "oid": COMMIT}
                            for n, p in sorted(hub.repos[repo].items())])

            def do_HEAD(self) -> None:
                hub.log.append(("HEAD", self.path, self.headers.get("Range")))
                self._file(head=True)

            def do_GET(self) -> None:
                hub.log.append(("GET", self.path, self.headers.get("Range")))
                if self.path.startswith("/api/models/") and "/tree/" in self.path:
                    return self._tree()
                self._file(head=False)

        return Handler
