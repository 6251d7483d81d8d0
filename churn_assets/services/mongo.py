"""The embedded MongoDB-protocol server: `nx-27017`, always with `--data-dir` (one SQLite file per logical
database; its single-file mode does not isolate databases), on a free port of the service address."""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any
from urllib.parse import urlsplit

from churn_assets.services.base import HEALTH_TIMEOUT_S, MONGODB_URI_ENV, url_host
from churn_assets.services.process import ProcessService
from churn_assets.state import StatePaths


class MongoService(ProcessService):
    """nx-27017, a MongoDB wire-protocol server on SQLite, one file per logical database."""

    name = "mongo"
    label = "MongoDB-protocol server (nx-27017)"
    url_env = MONGODB_URI_ENV

    def prepare(self, paths: StatePaths) -> None:
        paths.mongo_dir.mkdir(parents=True, exist_ok=True)

    def command(self, paths: StatePaths, host: str, port: int) -> list[str]:
        # Always --data-dir: in single-file mode (--db) logical databases share collections.
        return [sys.executable, "-m", "nx_27017.nx_27017", "--data-dir", str(paths.mongo_dir),
                "--host", host, "-p", str(port), "--log-file", str(self.log_file(paths)),
                "--pid-file", str(paths.services_dir / f"{self.name}.pid")]

    def url_for(self, host: str, port: int) -> str:
        return f"mongodb://{url_host(host)}:{port}/"

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        marker = str(paths.mongo_dir)
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if marker in cmdline and any("nx_27017" in part for part in cmdline):
                found.append(proc)
        return found

    def health(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "mongodb" or not parts.hostname:
            # mongodb+srv, replica sets, auth...: let the driver handle what the raw ping cannot.
            client = mongo_client(url, timeout=timeout)
            try:
                client.admin.command("ping")
            finally:
                client.close()
            return
        mongo_ping(parts.hostname, parts.port or 27017, timeout)


def mongo_ping(host: str, port: int, timeout: float) -> None:
    """`{ping: 1}` as one raw OP_MSG: a real wire-protocol answer without starting a pymongo client,
    whose monitor threads add half a second to the exit of every short command."""
    import bson

    body = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    op_msg = 2013
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(struct.pack("<iiii", 16 + len(body), 1, 0, op_msg) + body)

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = conn.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                buf += chunk
            return buf

        length, _, _, opcode = struct.unpack("<iiii", read(16))
        reply = read(length - 16)
    if opcode != op_msg or bson.decode(reply[5:]).get("ok") != 1:
        raise ConnectionError(f"{host}:{port} did not answer ping like a MongoDB server")


def mongo_client(url: str, timeout: float = HEALTH_TIMEOUT_S) -> Any:
    """A pymongo client whose every wait is bounded: a dead server fails in seconds, never hangs
    (pymongo's default server selection waits 30 s)."""
    import pymongo

    ms = int(timeout * 1000)
    return pymongo.MongoClient(url, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
                               socketTimeoutMS=max(ms, 30_000), directConnection=True)
