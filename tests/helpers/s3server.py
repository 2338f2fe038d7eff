"""A real S3-compatible server on 127.0.0.1 (moto's server mode) that counts what it serves.

Used by tests/test_remote.py (in a thread) and benchmarks/bench_remote.py (in its
own process, ``python tests/helpers/s3server.py PORT``, so the server does not share the
measured process's GIL). ``GET /__counts`` answers ``{"requests", "bytes_out"}``
for everything served since the last ``DELETE /__counts``; those two are not counted.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from typing import Any

COUNTS_PATH = "/__counts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counting:
    """WSGI middleware: requests and response body bytes."""

    def __init__(self, app: Any):
        self.app = app
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes_out = 0

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == COUNTS_PATH:
            if environ.get("REQUEST_METHOD") == "DELETE":
                with self.lock:
                    self.requests = self.bytes_out = 0
            body = json.dumps({"requests": self.requests, "bytes_out": self.bytes_out}).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        with self.lock:
            self.requests += 1
        result = self.app(environ, start_response)
        return self._count(result)

    def _count(self, result):
        try:
            for chunk in result:
                with self.lock:
                    self.bytes_out += len(chunk)
                yield chunk
        finally:
            close = getattr(result, "close", None)
            if close:
                close()


class S3Server:
    """moto S3 in server mode on 127.0.0.1:port, in a daemon thread."""

    def __init__(self, port: int | None = None):
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.port = port or free_port()
        self.counting = Counting(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", self.port, self.counting, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        import logging

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)


def client_env(endpoint: str) -> dict[str, str]:
    """What a user of an S3-compatible store sets: keys, region, AWS_ENDPOINT_URL."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
            # never a real profile or the instance-metadata service
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true"}


if __name__ == "__main__":
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server(int(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(server.port, flush=True)
    server._server.serve_forever()
