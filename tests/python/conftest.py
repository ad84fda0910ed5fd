"""Shared fixtures and helpers of the Python integration suite.

Every engine runs the real binary (``$ENGINE_BIN``, default ``target/debug/engine``) on a
fresh temporary data directory, bound to ``127.0.0.1:0``; the bound port is read from the
``listening grpc ADDR`` and ``listening http ADDR`` lines the server prints on stdout (gRPC also
on port 0). Logs (stderr) go to a file
next to the data directory so a failing test can show them.

Fixtures:
- ``module_engine`` / ``module_api``: one engine per test module, for tests that do not
  interfere with each other (they use unique labels and property names).
- ``engine`` / ``api``: a fresh engine for one test.
- ``engine_factory``: starts engines with custom flags; all are stopped at teardown.

Teardown sends SIGTERM and asserts a graceful exit (code 0) for every engine still running.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
ENGINE_BIN = os.environ.get("ENGINE_BIN") or str(ROOT / "target" / "debug" / "engine")
DEV_TOKEN = "dev-token"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0
HTTP_TIMEOUT = 30.0

# Environment variables the binary reads; cleared so the host cannot steer the tests.
_ENGINE_ENV = (
    "SERVICE_TOKEN",
    "SERVICE_CAPABILITY_SECRET",
    "ENGINE_DATA_DIR",
    "ENGINE_CONFIG",
    "ENGINE_HTTP_ADDR",
    "ENGINE_GRPC_ADDR",
    "ENGINE_PG_ADDR",
    "ENGINE_BOLT_ADDR",
    "ENGINE_MAX_BODY_BYTES",
    "ENGINE_REST_ENVELOPE",
    "ENGINE_WORKERS",
)


def engine_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENGINE_ENV}
    env.setdefault("RUST_BACKTRACE", "1")
    return env


class EngineStartError(RuntimeError):
    pass


class EngineProcess:
    """One engine server on one data directory; can be stopped, killed and restarted."""

    def __init__(
        self,
        data_dir: Path,
        log_dir: Path,
        token: Optional[str] = DEV_TOKEN,
        extra_args: Iterable[str] = (),
        http_addr: str = "127.0.0.1:0",
    ):
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.token = token if token is not None else DEV_TOKEN
        self._token_flag = token
        self.extra_args = list(extra_args)
        self.http_addr = http_addr
        self.grpc_addr = "127.0.0.1:0"
        self.grpc_target: Optional[str] = None  # host:port of the gRPC listener once started
        self.proc: Optional[subprocess.Popen] = None
        self.url: Optional[str] = None
        self.starts = 0
        self.log_path: Optional[Path] = None
        self.last_exit: Optional[int] = None
        self._stdout_lines: "queue.Queue[Optional[str]]" = queue.Queue()

    # -- lifecycle ---------------------------------------------------------------------

    def argv(self) -> List[str]:
        argv = [ENGINE_BIN, "serve", "--data-dir", str(self.data_dir), "--http-addr", self.http_addr,
                "--grpc-addr", self.grpc_addr]
        if self._token_flag is not None:
            argv += ["--token", self._token_flag]
        return argv + self.extra_args

    def start(self, wait_ready: bool = True) -> "EngineProcess":
        """Starts the server and waits for its `listening http` line (and, with
        `wait_ready`, for /health to answer)."""
        assert self.proc is None or self.proc.poll() is not None, "engine already running"
        self.starts += 1
        self.log_path = self.log_dir / f"engine-{id(self)}-{self.starts}.log"
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=engine_env(),
        )
        log.close()
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._stdout_lines = lines
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill9()
                raise EngineStartError(f"engine did not report its address within {START_TIMEOUT}s\n{self.log()}")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                rc = proc.wait(timeout=STOP_TIMEOUT)
                self.last_exit = rc
                raise EngineStartError(f"engine exited with {rc} before listening\n{self.log()}")
            if line.startswith("listening grpc "):
                self.grpc_target = line[len("listening grpc "):].strip()
                continue
            if line.startswith("listening http "):
                addr = line[len("listening http "):].strip()
                self.url = f"http://{addr}"
                if wait_ready:
                    self._wait_ready(deadline)
                return self
            raise EngineStartError(f"unexpected stdout line {line!r}\n{self.log()}")

    def _wait_ready(self, deadline: float) -> None:
        """Waits until /health answers, so the server is serving (and handling signals)."""
        while True:
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise EngineStartError(f"engine at {self.url} never answered /health\n{self.log()}")
            time.sleep(0.02)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"engine did not exit within {timeout}s of SIGTERM\n{self.log()}")
        self.last_exit = rc
        return rc

    def kill9(self) -> None:
        """SIGKILL: no chance to flush or clean up."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.last_exit = self.proc.wait(timeout=STOP_TIMEOUT)

    def restart(self) -> "EngineProcess":
        """Graceful stop (asserting exit 0), then start on the same data directory."""
        rc = self.stop()
        assert rc == 0, f"graceful stop exited with {rc}\n{self.log()}"
        return self.start()

    def crash_restart(self) -> "EngineProcess":
        """kill -9, then start on the same data directory."""
        self.kill9()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    # -- HTTP --------------------------------------------------------------------------

    def client(self, token: Optional[str] = "default") -> "Api":
        return Api(self, token=self.token if token == "default" else token)


class Api:
    """A small REST/protocol client bound to an engine (follows it across restarts)."""

    def __init__(self, engine: EngineProcess, token: Optional[str]):
        self.engine = engine
        self.token = token
        self.session = requests.Session()

    def headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {}
        if self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    def request(self, method: str, path: str, json_body: Any = None, *, data: Any = None,
                headers: Optional[Dict[str, str]] = None, auth: bool = True, **kw) -> requests.Response:
        h = self.headers(headers) if auth else dict(headers or {})
        if json_body is not None:
            data = json.dumps(json_body)
            h.setdefault("Content-Type", "application/json")
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return self.session.request(method, self.engine.url + path, data=data, headers=h, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw) -> requests.Response:
        return self.request("POST", path, body, **kw)

    def patch(self, path: str, body: Any = None, **kw) -> requests.Response:
        return self.request("PATCH", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw) -> requests.Response:
        return self.request("PUT", path, body, **kw)

    def delete(self, path: str, **kw) -> requests.Response:
        return self.request("DELETE", path, **kw)

    # -- typed helpers -----------------------------------------------------------------

    def create(self, label: str, data: Optional[Dict[str, Any]] = None, **options) -> str:
        body: Dict[str, Any] = {"label": label, "data": data or {}}
        if options:
            body["options"] = options
        r = self.post("/api/v1/records", body)
        assert r.status_code == 201, r.text
        return r.json()["data"]["id"]

    def create_record(self, label: str, data: Optional[Dict[str, Any]] = None, **options) -> Dict[str, Any]:
        body = {"label": label, "data": data or {}, "options": {"returnResult": True, **options}}
        r = self.post("/api/v1/records", body)
        assert r.status_code == 201, r.text
        return r.json()["data"]

    def record(self, rid: str) -> Dict[str, Any]:
        r = self.get(f"/api/v1/records/{rid}")
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def search(self, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        r = self.post("/api/v1/records/search", body or {})
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def labels(self, body: Optional[Dict[str, Any]] = None) -> Dict[str, int]:
        r = self.post("/api/v1/labels/search", body or {})
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def properties(self) -> List[Dict[str, Any]]:
        r = self.post("/api/v1/properties/search", {})
        assert r.status_code == 200, r.text
        return r.json()["data"]["data"]

    def property_by(self, name: str, type_: str) -> Optional[Dict[str, Any]]:
        found = [p for p in self.properties() if p["name"] == name and p["type"] == type_]
        assert len(found) <= 1, found
        return found[0] if found else None

    def all_records(self, labels: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        """Every record (ascending id), paging through search."""
        out: List[Dict[str, Any]] = []
        skip = 0
        while True:
            body: Dict[str, Any] = {"limit": 1000, "skip": skip, "orderBy": "asc"}
            if labels:
                body["labels"] = labels
            page = self.search(body)
            out.extend(page["data"])
            skip += len(page["data"])
            if not page["data"] or skip >= page["total"]:
                assert skip == page["total"] or not page["data"], (skip, page["total"])
                return out

    def snapshot(self) -> Dict[str, Any]:
        """Everything a client can see of the stored data."""
        return {
            "records": self.all_records(),
            "labels": self.labels(),
            "properties": sorted(self.properties(), key=lambda p: p["id"]),
        }

    def protocol(self, operation: Dict[str, Any], *, version: Any = 1, context: Any = None,
                 **kw) -> requests.Response:
        env: Dict[str, Any] = {"protocolVersion": version, "operation": operation}
        if context is not None:
            env["context"] = context
        return self.post("/protocol/v1/execute", env, **kw)

    def metrics(self) -> str:
        r = self.get("/metrics")
        assert r.status_code == 200, r.text
        return r.text


# -- assertion helpers -----------------------------------------------------------------


def assert_rest_error(r: requests.Response, status: int, code: str, *, message_contains: Iterable[str] = ()) -> Dict[str, Any]:
    """The REST error envelope of BEHAVIOUR.md §4."""
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text}"
    body = r.json()
    assert body["success"] is False, body
    assert body["statusCode"] == status, body
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"], body
    assert isinstance(body["message"], str) and body["message"], body
    for part in message_contains:
        assert part in body["message"], f"{part!r} not in {body['message']!r}"
    return body


REASON = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large", 501: "Not Implemented"}


def assert_protocol_error(r: requests.Response, status: int, code: str, *, message_contains: Iterable[str] = ()) -> Dict[str, Any]:
    """The Protocol v1 error envelope."""
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text}"
    body = r.json()
    assert body["protocolVersion"] == 1, body
    assert "response" not in body, body
    err = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"], body
    for part in message_contains:
        assert part in err["message"], f"{part!r} not in {err['message']!r}"
    return err


def is_uuid_v7(s: str) -> bool:
    try:
        u = uuid.UUID(s)
    except (ValueError, TypeError, AttributeError):
        return False
    return u.version == 7 and str(u) == s


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def unchanged(api: Api):
    """Asserts the server still serves and the stored data is the same after the block."""
    before = api.snapshot()
    yield
    health = api.session.get(api.engine.url + "/health", timeout=HTTP_TIMEOUT)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    after = api.snapshot()
    assert after == before


def run_engine(args: List[str], timeout: float = 20.0) -> subprocess.CompletedProcess:
    """Runs the binary to completion (startup refusals, `engine version`)."""
    return subprocess.run([ENGINE_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=engine_env())


# -- fixtures --------------------------------------------------------------------------


class EngineFactory:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.engines: List[EngineProcess] = []
        self.n = 0

    def new_dir(self, name: str = "data") -> Path:
        self.n += 1
        return self.tmp / f"{name}-{self.n}"

    def start(self, data_dir: Optional[Path] = None, wait_ready: bool = True, **kw) -> EngineProcess:
        e = EngineProcess(data_dir or self.new_dir(), self.tmp, **kw)
        self.engines.append(e)
        return e.start(wait_ready=wait_ready)

    def close(self) -> None:
        errors = []
        for e in self.engines:
            if e.running:
                rc = e.stop()
                if rc != 0:
                    errors.append(f"engine on {e.data_dir} exited with {rc} on SIGTERM\n{e.log()}")
        assert not errors, "\n".join(errors)


@contextlib.contextmanager
def _factory():
    with tempfile.TemporaryDirectory(prefix="engine-test-") as tmp:
        f = EngineFactory(Path(tmp))
        try:
            yield f
        finally:
            f.close()


@pytest.fixture
def engine_factory():
    with _factory() as f:
        yield f


@pytest.fixture
def engine(engine_factory) -> EngineProcess:
    return engine_factory.start()


@pytest.fixture
def api(engine) -> Api:
    return engine.client()


@pytest.fixture(scope="module")
def module_engine() -> EngineProcess:
    with _factory() as f:
        yield f.start()


@pytest.fixture(scope="module")
def module_api(module_engine) -> Api:
    return module_engine.client()
