"""A local HTTP server that stands in for LangSmith's API at the network boundary.

The real ``langsmith.Client`` talks to it through ``LANGSMITH_ENDPOINT`` / ``api_url``: it records
every request the client sends and keeps what a LangSmith deployment would keep (runs merged from
their ``post`` and ``patch`` operations, feedback, projects, datasets, examples), so tests read the
result back either from the server's state or through the client's own read API (``list_runs``,
``read_run``, ``list_feedback``, ``read_project``, ``list_examples``).

Covered, as read from ``langsmith`` 0.15's client:

- ``GET /info`` (no zstd compression, no multipart examples: the client then sends plain multipart
  runs and JSON example batches);
- ``POST /runs/multipart`` (parts ``post.<id>``, ``patch.<id>``, ``<op>.<id>.<field>``,
  ``feedback.<id>``), ``POST /runs/batch``, ``POST /runs``, ``PATCH /runs/<id>``,
  ``GET /runs/<id>``, ``POST /runs/query`` (``session``, ``id``, ``trace``, ``is_root``,
  ``run_type``, ``start_time`` and the ``filter``/``trace_filter`` language for the comparators
  the docs use: ``and``/``or``/``not``, ``eq``/``neq``/``gt``/``gte``/``lt``/``lte``, ``has``,
  ``search``, ``metadata_key``+``metadata_value`` and ``feedback_key``+``feedback_score`` pairs);
- ``POST /feedback``, ``GET /feedback``;
- ``POST /sessions``, ``GET /sessions`` (by name), ``GET /sessions/<id>``;
- ``POST /datasets``, ``GET /datasets``, ``POST /examples/bulk``, ``GET /examples``.

``delay_s`` makes every request wait (a slow LangSmith); ``status`` makes every request fail
with that HTTP status (a broken one).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

__all__ = ["FakeLangSmith", "fake_langsmith", "matches_filter"]

_INFO = {
    "version": "0.16.0",  # the first self-hosted version with the v2 run queries (``client.runs``)
    "license_expiration_time": None,
    "batch_ingest_config": {
        "use_multipart_endpoint": True,
        "scale_up_qsize_trigger": 1000,
        "scale_up_nthreads_limit": 16,
        "scale_down_nempty_trigger": 4,
        "size_limit": 100,
        "size_limit_bytes": 20_971_520,
    },
    "instance_flags": {},
    "tenant_handle": "tests",
}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class FakeLangSmith:
    """State and HTTP server. Start with :func:`fake_langsmith` (a context manager)."""

    def __init__(self, *, delay_s: float = 0.0, status: int | None = None) -> None:
        self.delay_s = delay_s
        self.status = status
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.runs: dict[str, dict[str, Any]] = {}
        self.feedback: list[dict[str, Any]] = []
        self.sessions: dict[str, dict[str, Any]] = {}
        self.datasets: dict[str, dict[str, Any]] = {}
        self.examples: dict[str, dict[str, Any]] = {}
        self.server: ThreadingHTTPServer | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeLangSmith:
        state = self

        class Handler(_Handler):
            fake = state

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # ----------------------------------------------------------------- seeding and reading

    def session(self, name: str, **extra: Any) -> dict[str, Any]:
        with self.lock:
            return self._session(name, **extra)

    def _session(self, name: str, **extra: Any) -> dict[str, Any]:
        for s in self.sessions.values():
            if s["name"] == name:
                s.update(extra)
                return s
        sid = str(extra.pop("id", None) or uuid.uuid4())
        s = {"id": sid, "name": name, "tenant_id": str(uuid.UUID(int=1)), "start_time": _now(), "extra": None,
             "reference_dataset_id": None, "description": None, **extra}  # fmt: skip
        self.sessions[sid] = s
        return s

    def add_runs(self, runs: list[dict[str, Any]], *, project: str) -> None:
        """Serve recorded runs (LangSmith's run schema, e.g. ``JsonlTracer`` lines) under ``project``."""
        with self.lock:
            sid = self._session(project)["id"]
            for run in runs:
                stored = {k: v for k, v in run.items() if k != "child_runs"}
                stored["session_id"] = sid
                self.runs[str(run["id"])] = stored

    def add_feedback(self, run_id: str, key: str, score: float | None, **extra: Any) -> None:
        with self.lock:
            self.feedback.append({"id": str(uuid.uuid4()), "run_id": str(run_id), "key": key, "score": score,
                                  "created_at": _now(), "modified_at": _now(), **extra})  # fmt: skip

    def runs_of(self, project: str) -> list[dict[str, Any]]:
        with self.lock:
            sids = {s["id"] for s in self.sessions.values() if s["name"] == project}
            return [self._public(r) for r in self.runs.values() if r.get("session_id") in sids]

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(self):
                    return True
            time.sleep(0.02)
        return False

    # ----------------------------------------------------------------- run ingestion

    def _ingest(self, op: str, run: dict[str, Any]) -> None:
        rid = str(run.get("id"))
        if op == "post":
            project = run.pop("session_name", None) or "default"
            sid = run.pop("session_id", None) or self._session(project)["id"]
            current = self.runs.get(rid, {})
            self.runs[rid] = {**run, **current, "session_id": sid, "id": rid}
        else:
            current = self.runs.setdefault(rid, {"id": rid})
            current.update({k: v for k, v in run.items() if v is not None})
        stored = self.runs[rid]
        stored.setdefault("trace_id", rid)
        stored["status"] = "error" if stored.get("error") else ("success" if stored.get("end_time") else "pending")

    def _multipart(self, content_type: str, body: bytes) -> None:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        ops: dict[tuple[str, str], dict[str, Any]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition") or ""
            payload = part.get_payload(decode=True) or b""
            pieces = name.split(".")
            if pieces[0] == "feedback":
                self.feedback.append(json.loads(payload))
                continue
            if pieces[0] not in ("post", "patch"):
                continue  # attachments
            run = ops.setdefault((pieces[0], pieces[1]), {"id": pieces[1]})
            if len(pieces) == 2:
                run.update(json.loads(payload))
            else:
                run[pieces[2]] = json.loads(payload)
        for (op, _), run in ops.items():
            self._ingest(op, run)

    # ----------------------------------------------------------------- queries

    def _query(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        runs = list(self.runs.values())
        if body.get("session"):
            sessions = {str(s) for s in body["session"]}
            runs = [r for r in runs if r.get("session_id") in sessions]
        if body.get("id"):
            ids = {str(i) for i in body["id"]}
            runs = [r for r in runs if r["id"] in ids]
        if body.get("trace"):
            runs = [r for r in runs if str(r.get("trace_id")) == str(body["trace"])]
        if body.get("is_root") is not None:
            runs = [r for r in runs if (r.get("parent_run_id") is None) == bool(body["is_root"])]
        if body.get("run_type"):
            runs = [r for r in runs if r.get("run_type") == body["run_type"]]
        if body.get("start_time"):
            runs = [r for r in runs if str(r.get("start_time") or "") >= body["start_time"]]
        if body.get("parent_run"):
            runs = [r for r in runs if str(r.get("parent_run_id")) == str(body["parent_run"])]
        if body.get("error") is not None:
            runs = [r for r in runs if bool(r.get("error")) == bool(body["error"])]
        if body.get("filter"):
            runs = [r for r in runs if matches_filter(body["filter"], r, self._feedback_of(r["id"]))]
        if body.get("trace_filter"):
            roots = {r["id"]: r for r in self.runs.values() if r.get("parent_run_id") is None}
            runs = [r for r in runs if (root := roots.get(str(r.get("trace_id")))) is not None
                    and matches_filter(body["trace_filter"], root, self._feedback_of(root["id"]))]  # fmt: skip
        runs.sort(key=lambda r: str(r.get("dotted_order") or r.get("start_time") or ""))
        if body.get("limit"):
            runs = runs[: int(body["limit"])]
        return [self._public(r) for r in runs]

    def _query_v2(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /api/v2/runs/query`` (what ``client.runs.query`` sends): validated as the server does, a
        start-time window defaulting to the last day, cursor pages, and only the selected fields."""
        unknown = sorted(set(body) - _V2_QUERY_FIELDS)
        if unknown:
            return 422, {"detail": f"unknown fields {unknown}"}
        if bool(body.get("project_ids")) == bool(body.get("reference_dataset_id")):
            return 422, {"detail": "set exactly one of project_ids and reference_dataset_id"}
        size = int(body.get("page_size", 100))
        if not 1 <= size <= 1000:
            return 422, {"detail": "page_size must be between 1 and 1000"}
        low = _instant(body.get("min_start_time")) or datetime.now(UTC) - timedelta(days=1)
        high = _instant(body.get("max_start_time")) or datetime.now(UTC)
        query: dict[str, Any] = {"session": body.get("project_ids"), "id": body.get("ids"),
                                 "trace": body.get("trace_id"), "is_root": body.get("is_root"),
                                 "filter": body.get("filter"), "trace_filter": body.get("trace_filter")}  # fmt: skip
        if body.get("run_type"):
            query["run_type"] = str(body["run_type"]).lower()
        runs = [r for r in self._query(query) if low <= (_instant(r["start_time"]) or low) <= high]
        offset = int(body.get("cursor") or 0)
        page = runs[offset : offset + size]
        selects = [str(s).lower() for s in body.get("selects") or ["ID"]]
        items = [{k: v for k, v in self._v2(r).items() if k in selects or k == "id"} for r in page]
        more = offset + size < len(runs)
        return 200, {"items": items, "next_cursor": str(offset + size) if more else None}

    def _v2(self, run: dict[str, Any]) -> dict[str, Any]:
        """A run as the v2 API returns it: ``project_id``, the ancestors in ``parent_run_ids`` (root first),
        upper-case run type and status, the metadata beside ``extra``."""
        ancestors: list[str] = []
        parent = run.get("parent_run_id")
        while parent is not None and str(parent) not in ancestors:
            ancestors.insert(0, str(parent))
            parent = (self.runs.get(str(parent)) or {}).get("parent_run_id")
        out = {k: v for k, v in run.items() if k not in ("session_id", "parent_run_id", "child_run_ids")}
        out.update(project_id=run.get("session_id"), parent_run_ids=ancestors, is_root=not ancestors,
                   run_type=str(run.get("run_type") or "chain").upper(), status=str(run.get("status")).upper(),
                   metadata=(run.get("extra") or {}).get("metadata"))  # fmt: skip
        return out

    def _feedback_of(self, run_id: str) -> list[dict[str, Any]]:
        return [f for f in self.feedback if str(f.get("run_id")) == run_id]

    def _public(self, run: dict[str, Any]) -> dict[str, Any]:
        out = {"inputs": {}, "outputs": None, "extra": {}, "tags": [], "events": [], "error": None,
               "parent_run_id": None, "end_time": None, **run}  # fmt: skip
        out.setdefault("start_time", _now())
        stats: dict[str, Any] = {}
        for f in self._feedback_of(run["id"]):
            s = stats.setdefault(f["key"], {"n": 0, "avg": None, "values": {}})
            if isinstance(f.get("score"), int | float):
                s["avg"] = ((s["avg"] or 0) * s["n"] + f["score"]) / (s["n"] + 1)
            s["n"] += 1
        out["feedback_stats"] = stats or None
        return out


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:  # clients that hang up mid-request
        pass


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLangSmith
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any = None) -> None:
        data = b"" if body is None else json.dumps(body, default=str).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeouts): nothing to answer
            pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self, method: str) -> None:
        fake = self.fake
        raw = self._body()
        parsed = urlparse(self.path)
        path = parsed.path.rstrip("/")
        params = {k: v if len(v) > 1 else v[0] for k, v in parse_qs(parsed.query).items()}
        content_type = self.headers.get("Content-Type") or ""
        record: dict[str, Any] = {"method": method, "path": path, "params": params, "time": time.monotonic(),
                                  "headers": dict(self.headers)}  # fmt: skip
        if content_type.startswith("application/json") and raw:
            record["json"] = json.loads(raw)
        with fake.lock:
            fake.requests.append(record)
        if fake.delay_s:
            time.sleep(fake.delay_s)
        if fake.status is not None:
            self._send(fake.status, {"detail": "fake LangSmith is failing on purpose"})
            return
        try:
            with fake.lock:
                status, body = _route(fake, method, path, params, record.get("json"), raw, content_type)
        except Exception as e:  # a stand-in bug must show up in the test, as a 500 with the reason
            status, body = 500, {"detail": f"{type(e).__name__}: {e}"}
        self._send(status, body)

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")


def _route(fake: FakeLangSmith, method: str, path: str, params: dict[str, Any], body: Any, raw: bytes,
           content_type: str) -> tuple[int, Any]:  # fmt: skip
    if path == "/info":
        return 200, _INFO
    if path == "/runs/multipart" and method == "POST":
        fake._multipart(content_type, raw)
        return 202, {}
    if path == "/runs/batch" and method == "POST":
        for op in ("post", "patch"):
            for run in body.get(op) or []:
                fake._ingest(op, dict(run))
        return 202, {}
    if path == "/runs" and method == "POST":
        fake._ingest("post", dict(body))
        return 202, {}
    if path == "/runs/query" and method == "POST":
        return 200, {"runs": fake._query(body or {}), "cursors": {"next": None}}
    if path == "/api/v2/runs/query" and method == "POST":
        return fake._query_v2(body or {})
    if m := re.fullmatch(r"/runs/([0-9a-f-]{36})", path):
        rid = m.group(1)
        if method == "PATCH":
            fake._ingest("patch", {**body, "id": rid})
            return 202, {}
        if rid not in fake.runs:
            return 404, {"detail": "run not found"}
        return 200, fake._public(fake.runs[rid])
    if path == "/feedback" and method == "POST":
        fake.feedback.append(dict(body))
        return 200, body
    if path == "/feedback" and method == "GET":
        runs = params.get("run")
        wanted = {runs} if isinstance(runs, str) else set(runs or ())
        keys = params.get("key")
        wanted_keys = {keys} if isinstance(keys, str) else set(keys or ())
        items = [f for f in fake.feedback if (not wanted or str(f.get("run_id")) in wanted)
                 and (not wanted_keys or f.get("key") in wanted_keys)]  # fmt: skip
        offset, limit = int(params.get("offset", 0)), int(params.get("limit", 100))
        return 200, [_feedback_out(f, fake.runs) for f in items[offset : offset + limit]]
    if path == "/sessions" and method == "POST":
        return 200, fake._session(body["name"], **{k: v for k, v in body.items() if k != "name"})
    if path == "/sessions" and method == "GET":
        found = [s for s in fake.sessions.values() if "name" not in params or s["name"] == params["name"]]
        return 200, found[: int(params.get("limit", 100))] if int(params.get("offset", 0)) == 0 else []
    if m := re.fullmatch(r"/sessions/([0-9a-f-]{36})", path):
        session = fake.sessions.get(m.group(1))
        return (200, session) if session else (404, {"detail": "session not found"})
    if path == "/datasets" and method == "POST":
        if any(d["name"] == body["name"] for d in fake.datasets.values()):
            return 409, {"detail": "dataset exists"}
        dataset = {"id": str(body.get("id") or uuid.uuid4()), "created_at": _now(), "modified_at": _now(),
                   "tenant_id": str(uuid.UUID(int=1)), "example_count": 0, **body}  # fmt: skip
        fake.datasets[dataset["id"]] = dataset
        return 200, dataset
    if path == "/datasets" and method == "GET":
        found = [d for d in fake.datasets.values() if "name" not in params or d["name"] == params["name"]]
        return 200, found if int(params.get("offset", 0)) == 0 else []
    if m := re.fullmatch(r"/datasets/([0-9a-f-]{36})", path):
        dataset = fake.datasets.get(m.group(1))
        return (200, dataset) if dataset else (404, {"detail": "dataset not found"})
    if path == "/examples/bulk" and method == "POST":
        out = []
        for example in body:
            stored = {"id": str(example.get("id") or uuid.uuid4()), "created_at": _now(), "modified_at": _now(),
                      **example}  # fmt: skip
            fake.examples[stored["id"]] = stored
            out.append(stored)
        return 200, out
    if path == "/examples" and method == "GET":
        found = [e for e in fake.examples.values() if str(e.get("dataset_id")) == str(params.get("dataset"))]
        return 200, found if int(params.get("offset", 0)) == 0 else []
    return 404, {"detail": f"the fake LangSmith has no {method} {path}"}


# What ``POST /api/v2/runs/query`` accepts (langsmith 0.15's ``RunsResource.query_v2``); anything else is a 422.
_V2_QUERY_FIELDS = {"ai_search", "cursor", "filter", "has_error", "ids", "include_subtree_usage", "is_root",
                    "max_feedback_modified_at", "max_start_time", "min_feedback_modified_at", "min_start_time",
                    "page_size", "project_ids", "reference_dataset_id", "reference_examples", "run_type", "selects",
                    "sem_filter", "trace_filter", "trace_id", "tree_filter"}  # fmt: skip


def _instant(value: Any) -> datetime | None:
    """An RFC 3339 time (or None) as a zoned datetime; naive ones are UTC."""
    if not value:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _feedback_out(feedback: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    run = runs.get(str(feedback.get("run_id"))) or {}
    out = {"created_at": _now(), "modified_at": _now(), "trace_id": run.get("trace_id") or feedback.get("run_id"),
           "session_id": run.get("session_id"), **feedback}  # fmt: skip
    out.pop("feedback_source", None)
    return out


# --------------------------------------------------------------------------- the filter language


def _tokens(text: str) -> list[str]:
    return re.findall(r'"(?:[^"\\]|\\.)*"|[(),]|[^\s(),]+', text)


def _parse(tokens: list[str], i: int = 0) -> tuple[Any, int]:
    token = tokens[i]
    if i + 1 < len(tokens) and tokens[i + 1] == "(":
        args: list[Any] = []
        i += 2
        while tokens[i] != ")":
            arg, i = _parse(tokens, i)
            args.append(arg)
            if tokens[i] == ",":
                i += 1
        return (token, args), i + 1
    if token.startswith('"'):
        return json.loads(token), i + 1
    try:
        return float(token) if "." in token else int(token), i + 1
    except ValueError:
        return ("field", token), i + 1


_COMPARE = {
    "eq": lambda a, b: a == b,
    "neq": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "gte": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "lte": lambda a, b: a is not None and a <= b,
}


def matches_filter(text: str, run: dict[str, Any], feedback: list[dict[str, Any]]) -> bool:
    """Whether ``run`` passes a LangSmith filter string (the subset in the module docstring)."""
    tree, _ = _parse(_tokens(text))
    return _eval(tree, run, feedback)


def _field(node: Any) -> str | None:
    return node[1] if isinstance(node, tuple) and node[0] == "field" else None


def _value(run: dict[str, Any], name: str) -> Any:
    if name in ("start_time", "end_time"):
        return str(run.get(name) or "")
    return run.get(name)


def _eval(node: Any, run: dict[str, Any], feedback: list[dict[str, Any]]) -> bool:
    op, args = node
    if op == "and":
        pairs = _pairs(args)
        rest = [a for a in args if not _paired(a)]
        return all(_pair_ok(kind, k, cmp, v, run, feedback) for kind, k, cmp, v in pairs) and all(
            _eval(a, run, feedback) for a in rest
        )
    if op == "or":
        return any(_eval(a, run, feedback) for a in args)
    if op == "not":
        return not _eval(args[0], run, feedback)
    if op == "has":
        name = _field(args[0])
        assert name is not None
        return args[1] in (run.get(name) or [])
    if op == "search":
        return str(args[0]).lower() in json.dumps(run.get("inputs"), default=str).lower()
    if op in _COMPARE:
        name = _field(args[0])
        assert name is not None, node
        if name in ("metadata_key", "feedback_key"):  # a lone key: the key is present
            return _pair_ok("metadata" if name == "metadata_key" else "feedback", args[1], None, None, run, feedback)
        return _COMPARE[op](_value(run, name), args[1])
    raise ValueError(f"filter operator {op!r} is not supported by the fake LangSmith")


def _paired(node: Any) -> bool:
    return isinstance(node, tuple) and node[0] in _COMPARE and _field(node[1][0]) in (
        "metadata_key", "metadata_value", "feedback_key", "feedback_score")  # fmt: skip


def _pairs(args: list[Any]) -> list[tuple[str, Any, Any, Any]]:
    out = []
    for kind in ("metadata", "feedback"):
        keys = [a[1][1] for a in args if _paired(a) and _field(a[1][0]) == f"{kind}_key"]
        values = [(a[0], a[1][1]) for a in args if _paired(a) and _field(a[1][0]) in (f"{kind}_value",
                                                                                   f"{kind}_score")]  # fmt: skip
        for i, key in enumerate(keys):
            cmp, value = values[i] if i < len(values) else (None, None)
            out.append((kind, key, cmp, value))
    return out


def _pair_ok(kind: str, key: Any, cmp: Any, value: Any, run: dict[str, Any], feedback: list[dict[str, Any]]) -> bool:
    if kind == "metadata":
        metadata = (run.get("extra") or {}).get("metadata") or {}
        if key not in metadata:
            return False
        return cmp is None or _COMPARE[cmp](metadata[key] if not isinstance(value, str) else str(metadata[key]), value)
    scores = [f.get("score") for f in feedback if f.get("key") == key]
    if cmp is None:
        return bool(scores)
    return any(_COMPARE[cmp](s, value) for s in scores)


@contextmanager
def fake_langsmith(**options: Any) -> Iterator[FakeLangSmith]:
    """Start a :class:`FakeLangSmith` for the duration of the block."""
    fake = FakeLangSmith(**options).start()
    try:
        yield fake
    finally:
        fake.stop()
