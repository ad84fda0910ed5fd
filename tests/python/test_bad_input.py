"""Hostile and malformed input. Every refusal must be a clean 4xx with the documented error
envelope, and afterwards the server must still serve with the stored data unchanged
(compared as a full snapshot: records, labels, properties)."""

import json
import uuid

import pytest
import requests

from conftest import (DEV_TOKEN, REASON, assert_protocol_error, assert_rest_error, unchanged,
                      unique)

SEED_LABEL = "SEED"


@pytest.fixture(scope="module")
def seeded(module_api):
    """Data that must survive every bad request."""
    ids = [module_api.create(SEED_LABEL, {"i": i, "name": f"n{i}", "tags": ["a", "b"], "when": "2024-01-02",
                                          "ok": i % 2 == 0}) for i in range(5)]
    module_api.create("OTHER", {"x": 1.5})
    return ids


@pytest.fixture
def api(module_api, seeded):
    return module_api


def raw(api, method, path, data, headers=None, auth=True):
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = f"Bearer {DEV_TOKEN}"
    h.update(headers or {})
    return api.session.request(method, api.engine.url + path, data=data, headers=h, timeout=30)


# ---------------------------------------------------------------------------------------
# malformed JSON
# ---------------------------------------------------------------------------------------

MALFORMED = [
    b'{"label": "X"',
    b'{"label": "X", "data": {"a": 1}',
    b'{"label": "X"} trailing',
    b"{'label': 'X'}",
    b'{"label": "X", "data": {"a": NaN}}',
    b'{"label": "X", "data": {"a": Infinity}}',
    b'{"label": "X", "data": {"a": 1e400}}',
    b'{"label": "X",}',
    b"\xff\xfe{}",
    b'{"label": "\xc3\x28"}',
    b"nul",
]


@pytest.mark.parametrize("body", MALFORMED, ids=[f"m{i}" for i in range(len(MALFORMED))])
@pytest.mark.parametrize("method,path", [
    ("POST", "/api/v1/records"), ("POST", "/api/v1/records/search"), ("POST", "/api/v1/labels/search"),
    ("PATCH", "/api/v1/records/{seed}"), ("PUT", "/api/v1/records/{seed}"),
])
def test_malformed_json_rest(api, seeded, body, method, path):
    with unchanged(api):
        r = raw(api, method, path.format(seed=seeded[0]), body)
        assert_rest_error(r, 400, "invalid_argument")
        assert r.json()["error"] == REASON[400]


@pytest.mark.parametrize("body", MALFORMED, ids=[f"m{i}" for i in range(len(MALFORMED))])
def test_malformed_json_protocol(api, body):
    with unchanged(api):
        assert_protocol_error(raw(api, "POST", "/protocol/v1/execute", body), 400, "invalid_argument")


def test_malformed_json_message_says_so(api):
    r = raw(api, "POST", "/api/v1/records", b'{"label": ')
    assert_rest_error(r, 400, "invalid_argument", message_contains=["JSON"])


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/api/v1/records", ["ARRAYBODY", {"a": 1}]),
    ("POST", "/api/v1/records/search", [1, 0]),
    ("POST", "/protocol/v1/execute", [1, None, {"kind": "describe", "describe": {"kind": "buildInfo"}}]),
], ids=["create", "search", "protocol"])
def test_array_body_is_refused(api, method, path, body):
    with unchanged(api):
        r = raw(api, method, path, json.dumps(body).encode())
        assert r.status_code == 400, r.text
        code = r.json()["error"]["code"] if path.startswith("/protocol") else r.json()["code"]
        assert code == "invalid_argument"


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
@pytest.mark.parametrize("body", [b"[1]", b'"text"', b"42", b"null"])
def test_edit_body_must_be_object(api, seeded, method, body):
    with unchanged(api):
        assert_rest_error(raw(api, method, f"/api/v1/records/{seeded[1]}", body), 400, "invalid_argument")


# ---------------------------------------------------------------------------------------
# wrong field types: 400 naming the path
# ---------------------------------------------------------------------------------------

WRONG_TYPES = [
    ("POST", "/api/v1/records", {"label": "X", "options": {"returnResult": "yes"}}, "options.returnResult"),
    ("POST", "/api/v1/records", {"label": "X", "options": {"suggestTypes": 1}}, "options.suggestTypes"),
    ("POST", "/api/v1/records", {"label": "X", "options": {"capitalizeLabels": "no"}}, "options.capitalizeLabels"),
    ("POST", "/api/v1/records", {"label": "X", "options": {"convertNumericValuesToNumbers": []}},
     "options.convertNumericValuesToNumbers"),
    ("POST", "/api/v1/records", {"label": "X", "options": "fast"}, "options"),
    ("POST", "/api/v1/records", {"label": 5}, "label"),
    ("POST", "/api/v1/records", {"label": "X", "data": [1, 2]}, "data"),
    ("POST", "/api/v1/records", {"label": "X", "data": "a=1"}, "data"),
    ("POST", "/api/v1/records", {"label": "X", "properties": {"a": 1}}, "properties"),
    ("POST", "/api/v1/records", {"label": "X", "properties": [{"name": "a", "type": 5, "value": 1}]}, "properties[0].type"),
    ("POST", "/api/v1/records", {"label": "X", "properties": [{"type": "number", "value": 1}]}, "name"),
    ("POST", "/api/v1/records/search", {"limit": "ten"}, "limit"),
    ("POST", "/api/v1/records/search", {"skip": 1.5}, "skip"),
    ("POST", "/api/v1/records/search", {"labels": "SEED"}, "labels"),
    ("POST", "/api/v1/records/search", {"labels": [1]}, "labels[0]"),
    ("POST", "/api/v1/labels/search", {"labels": {"a": 1}}, "labels"),
    ("PATCH", "/api/v1/records/{seed}", {"data": {"a": 1}, "label": 7}, "label"),
    ("PATCH", "/api/v1/records/{seed}", {"data": [1]}, "data"),
    ("PATCH", "/api/v1/records/{seed}", {"data": {"a": 1}, "options": {"suggestTypes": "x"}}, "options.suggestTypes"),
    ("PUT", "/api/v1/records/{seed}", {"properties": "x"}, "properties"),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "query", "query": {
        "kind": "records", "query": {"limit": "ten"}}}}, "operation.query.query.limit"),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "mutate", "mutation": {
        "kind": "putRecord", "mode": "upsert", "label": "X"}}}, "operation.mutation.mode"),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "mutate", "mutation": {
        "kind": "putRecord", "mode": "create", "label": "X", "options": {"returnResult": 1}}}},
     "operation.mutation.options.returnResult"),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": 7}}, "operation.kind"),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": "query"}, "operation"),
]


@pytest.mark.parametrize("method,path,body,field", WRONG_TYPES, ids=[f"{w[0]} {w[3]}" for w in WRONG_TYPES])
def test_wrong_field_type_names_the_path(api, seeded, method, path, body, field):
    with unchanged(api):
        r = raw(api, method, path.format(seed=seeded[2]), json.dumps(body).encode())
        if path.startswith("/protocol"):
            assert_protocol_error(r, 400, "invalid_argument", message_contains=[field])
        else:
            assert_rest_error(r, 400, "invalid_argument", message_contains=[field])


def test_unknown_fields_are_ignored(api):
    label = unique("EXTRA")
    r = api.post("/api/v1/records", {"label": label, "data": {"a": 1}, "extra": {"deep": [1]},
                                     "options": {"returnResult": True, "whatever": 1}})
    assert r.status_code == 201, r.text
    assert r.json()["data"]["a"] == 1 and "extra" not in r.json()["data"]
    api.delete(f"/api/v1/records/{r.json()['data']['id']}")


# ---------------------------------------------------------------------------------------
# ids in paths
# ---------------------------------------------------------------------------------------

BAD_IDS = [
    "not-a-uuid",
    "123",
    "0190d5c2-8e3a-4b4c-9d2e-1a2b3c4d5e6f",  # v4
    "6ba7b810-9dad-11d1-80b4-00c04fd430c8",  # v1
    "00000000-0000-0000-0000-000000000000",  # nil
    "0190d5c28e3a7b4c9d2e1a2b3c4d5e6f",      # v7 without hyphens
    "{0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f}",
    "urn:uuid:0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f",
    "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6",    # one digit short
    "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6fa",  # one digit long
    "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6g",   # not hex
    "0190d5c2-8e3a-7b4c-0d2e-1a2b3c4d5e6f",   # version 7, NCS variant (not RFC 9562)
    "0190d5c2-8e3a-7b4c-cd2e-1a2b3c4d5e6f",   # version 7, Microsoft variant
]


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("method,prefix", [
    ("GET", "/api/v1/records/"), ("PATCH", "/api/v1/records/"), ("PUT", "/api/v1/records/"),
    ("DELETE", "/api/v1/records/"), ("GET", "/api/v1/properties/"), ("DELETE", "/api/v1/properties/"),
])
def test_invalid_uuid_in_path_is_400(api, method, prefix, bad):
    body = json.dumps({"data": {"a": 1}}).encode() if method in ("PATCH", "PUT") else None
    with unchanged(api):
        r = raw(api, method, prefix + requests.utils.quote(bad, safe=""), body)
        assert_rest_error(r, 400, "invalid_argument")


@pytest.mark.parametrize("bad", ["0190d5c2-8e3a-4b4c-9d2e-1a2b3c4d5e6f", "nope", "01a217e4-0b1b-7711-0a81-bbbbbbbbbbbb"])
def test_invalid_uuid_in_protocol_is_400(api, bad):
    with unchanged(api):
        r = api.protocol({"kind": "query", "query": {"kind": "record", "id": bad}})
        assert_protocol_error(r, 400, "invalid_argument")
        r = api.protocol({"kind": "mutate", "mutation": {"kind": "deleteRecord", "id": bad}})
        assert_protocol_error(r, 400, "invalid_argument")
        r = api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "X",
                                                         "id": bad, "properties": {"a": 1}}})
        assert_protocol_error(r, 400, "invalid_argument")


def test_valid_v7_unknown_id_is_404_not_400(api):
    rid = str(uuid.UUID("0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"))
    with unchanged(api):
        assert_rest_error(api.get(f"/api/v1/records/{rid}"), 404, "not_found")
        assert_rest_error(api.get(f"/api/v1/properties/{rid}"), 404, "not_found")
        assert_rest_error(api.delete(f"/api/v1/properties/{rid}"), 404, "not_found")


# ---------------------------------------------------------------------------------------
# unknown routes
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method,path", [
    ("POST", "/api/v1/nothing"), ("GET", "/x"), ("PATCH", "/api/v1/records"), ("POST", "/protocol/v2/execute"),
])
def test_unknown_route(api, method, path):
    # Under /protocol/ in the Protocol v1 envelope, as every answer there.
    check = assert_protocol_error if path.startswith("/protocol/") else assert_rest_error
    with unchanged(api):
        check(raw(api, method, path, b"{}"), 404, "not_found")


# ---------------------------------------------------------------------------------------
# body size
# ---------------------------------------------------------------------------------------

LIMIT = 2048


@pytest.fixture(scope="module")
def small(request):
    """An engine with --max-body-bytes 2048 and some data."""
    from conftest import _factory
    with _factory() as f:
        e = f.start(extra_args=["--max-body-bytes", str(LIMIT)])
        c = e.client()
        c.create("KEEP", {"a": 1})
        c.create("KEEP", {"b": "x" * 100})
        yield c


def _padded_create(size):
    body = {"label": "BIG", "data": {"pad": ""}}
    base = len(json.dumps(body))
    body["data"]["pad"] = "x" * (size - base)
    out = json.dumps(body).encode()
    assert len(out) == size
    return out


def test_body_at_limit_is_accepted(small):
    r = raw(small, "POST", "/api/v1/records", _padded_create(LIMIT))
    assert r.status_code == 201, r.text
    small.delete(f"/api/v1/records/{r.json()['data']['id']}")


@pytest.mark.parametrize("size", [LIMIT + 1, 4 * LIMIT])
def test_oversized_body_413(small, size):
    with unchanged(small):
        r = raw(small, "POST", "/api/v1/records", _padded_create(size))
        assert_rest_error(r, 413, "payload_too_large")
        assert r.json()["error"] == REASON[413]


def test_oversized_chunked_body_413(small):
    payload = _padded_create(4 * LIMIT)

    def chunks():
        for i in range(0, len(payload), 512):
            yield payload[i:i + 512]

    with unchanged(small):
        r = small.session.post(small.engine.url + "/api/v1/records", data=chunks(),
                               headers={"Authorization": f"Bearer {DEV_TOKEN}", "Content-Type": "application/json"},
                               timeout=30)
        assert_rest_error(r, 413, "payload_too_large")


def test_oversized_protocol_body_413(small):
    env = {"protocolVersion": 1, "operation": {"kind": "mutate", "mutation": {
        "kind": "putRecord", "mode": "create", "label": "BIG", "properties": {"pad": "x" * (2 * LIMIT)}}}}
    with unchanged(small):
        assert_protocol_error(raw(small, "POST", "/protocol/v1/execute", json.dumps(env).encode()),
                              413, "payload_too_large")


def test_a_large_body_without_a_credential_is_refused_before_it_is_read(engine):
    """Past 64 KiB (or of unknown length) a body is read only after the credential passed:
    a client without one gets its 401 at once, and the connection is closed (its body was not
    read), so it cannot make the server buffer up to the body cap."""
    import socket
    host, port = engine.url.removeprefix("http://").split(":")
    for path, envelope in (("/api/v1/records", "statusCode"), ("/protocol/v1/execute", "protocolVersion")):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            # Announce 16 MiB, send only the head: the answer must come without the body.
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {16 << 20}\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401"), got[:200]
        assert b"connection: close" in head.lower()
        assert json.loads(body)[envelope] in (401, 1), body
    # A small body without a credential still answers 401 (the route checks it).
    r = engine.client().session.post(engine.url + "/api/v1/records", json={"label": "X", "data": {"a": 1}}, timeout=10)
    assert_rest_error(r, 401, "unauthenticated")


def test_a_peer_that_stops_reading_is_disconnected(engine_factory, tmp_path):
    """An answer that makes no progress for the request time budget (a client that never
    reads) ends its connection, so the server does not hold the answer for as long as the
    client likes; a client that reads gets the whole answer."""
    import socket
    import time
    cfg = tmp_path / "engine.toml"
    cfg.write_text("schema_version = 1\n[limits]\nrequest_timeout_ms = 1000\n")
    e = engine_factory.start(extra_args=["--config", str(cfg)])
    api = e.client()
    label = unique("STALL")
    for i in range(200):
        api.create(label, {"i": i, "pad": "p" * 100_000})
    host, port = e.url.removeprefix("http://").split(":")
    body = json.dumps({"labels": [label], "limit": 1000}).encode()
    request = (f"POST /api/v1/records/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {DEV_TOKEN}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body

    def fetch(wait):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
            s.connect((host, int(port)))
            s.sendall(request)
            time.sleep(wait)
            s.settimeout(10)
            got = 0
            try:
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
                    if wait == 0 and got > 20_000_000:
                        break
            except (ConnectionResetError, socket.timeout):
                pass
            return got

    assert fetch(0) > 20_000_000  # read at once: the answer (~20 MB) arrives
    assert fetch(3.0) < 10_000_000  # not read for 3 s: cut off after the 1 s budget
    assert api.get("/health").status_code == 200


def test_oversized_edit_body_413(small):
    rid = small.all_records()[0]["id"]
    with unchanged(small):
        body = json.dumps({"data": {"pad": "x" * (2 * LIMIT)}}).encode()
        assert_rest_error(raw(small, "PATCH", f"/api/v1/records/{rid}", body), 413, "payload_too_large")


# ---------------------------------------------------------------------------------------
# nesting depth
# ---------------------------------------------------------------------------------------


def _nested(depth):
    """A create body whose deepest point has `depth` levels of {}/[] in total."""
    inner = "1"
    for _ in range(depth - 1):
        inner = f"[{inner}]"
    return ('{"label": "DEEP", "data": {}, "ignored": %s}' % inner).encode()


def test_deep_nesting_400(api):
    with unchanged(api):
        assert_rest_error(raw(api, "POST", "/api/v1/records", _nested(65)), 400, "invalid_argument")
        assert_rest_error(raw(api, "POST", "/api/v1/records", _nested(5000)), 400, "invalid_argument")
        deep_obj = ('{"protocolVersion": 1, "operation": %s}' % ('{"a":' * 100 + "1" + "}" * 100)).encode()
        assert_protocol_error(raw(api, "POST", "/protocol/v1/execute", deep_obj), 400, "invalid_argument")


def test_nesting_at_64_is_parsed(api):
    # 64 levels is within the limit: the body parses and the ignored field is dropped
    r = raw(api, "POST", "/api/v1/records", _nested(64))
    assert r.status_code == 201, r.text
    assert api.delete(f"/api/v1/records/{r.json()['data']['id']}").status_code == 200


def test_brackets_inside_strings_do_not_count(api):
    label = unique("BRACKETS")
    body = json.dumps({"label": label, "data": {"s": "[" * 200 + "{" * 200}, "options": {"returnResult": True}})
    r = raw(api, "POST", "/api/v1/records", body.encode())
    assert r.status_code == 201, r.text
    assert r.json()["data"]["s"] == "[" * 200 + "{" * 200
    api.delete(f"/api/v1/records/{r.json()['data']['id']}")


# ---------------------------------------------------------------------------------------
# credentials
# ---------------------------------------------------------------------------------------

AUTHED_ROUTES = [
    ("POST", "/api/v1/records", {"label": "X", "data": {"a": 1}}),
    ("GET", "/api/v1/records/{seed}", None),
    ("PATCH", "/api/v1/records/{seed}", {"data": {"i": 100}}),
    ("PUT", "/api/v1/records/{seed}", {"data": {"z": 1}}),
    ("DELETE", "/api/v1/records/{seed}", None),
    ("POST", "/api/v1/records/search", {}),
    ("POST", "/api/v1/labels/search", {}),
    ("POST", "/api/v1/properties/search", {}),
    ("GET", "/api/v1/properties/{prop}", None),
    ("DELETE", "/api/v1/properties/{prop}", None),
    ("GET", "/api/v1/sdk/settings", None),
    ("GET", "/metrics", None),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "mutate", "mutation": {
        "kind": "putRecord", "mode": "create", "label": "X", "properties": {"a": 1}}}}),
    ("POST", "/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "query", "query": {
        "kind": "records", "query": {}}}}),
]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"X-Service-Token": "wrong"},
                                     {"token": "wrong"}], ids=["missing", "bearer", "x-service-token", "token"])
@pytest.mark.parametrize("method,path,body", AUTHED_ROUTES, ids=[f"{m} {p}" for m, p, _ in AUTHED_ROUTES])
def test_missing_or_wrong_token_401(api, seeded, method, path, body, headers):
    prop = api.property_by("name", "string")["id"]
    with unchanged(api):
        data = json.dumps(body).encode() if body is not None else None
        r = raw(api, method, path.format(seed=seeded[3], prop=prop), data, headers=headers, auth=False)
        if path.startswith("/protocol"):
            assert_protocol_error(r, 401, "unauthenticated")
        else:
            assert_rest_error(r, 401, "unauthenticated")


@pytest.mark.parametrize("path,body", [
    ("/api/v1/records", b'{"label": '),
    ("/api/v1/records", b'{"label": "X", "options": {"returnResult": "yes"}}'),
    ("/api/v1/records/search", b'{"limit": "ten"}'),
    ("/protocol/v1/execute", b'{"protocolVersion": '),
    ("/protocol/v1/execute", b'{"protocolVersion": 2, "operation": {"kind": "describe"}}'),
], ids=["rest-malformed", "rest-wrong-type", "search-wrong-type", "protocol-malformed", "protocol-version"])
def test_unauthenticated_bad_body_is_401(api, path, body):
    with unchanged(api):
        r = raw(api, "POST", path, body, auth=False)
        assert r.status_code == 401, r.text


# ---------------------------------------------------------------------------------------
# Protocol v1 envelope
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 0, -1, "1", 1.5, None])
def test_protocol_version_other_than_1(api, version):
    with unchanged(api):
        r = api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "V2",
                                                         "properties": {"a": 1}}}, version=version)
        err = assert_protocol_error(r, 400, "invalid_argument")
        if version == 2:
            assert "protocolVersion" in err["message"]


def test_protocol_version_missing(api):
    with unchanged(api):
        r = raw(api, "POST", "/protocol/v1/execute", json.dumps({"operation": {
            "kind": "describe", "describe": {"kind": "buildInfo"}}}).encode())
        assert_protocol_error(r, 400, "invalid_argument", message_contains=["protocolVersion"])


@pytest.mark.parametrize("operation,needle", [
    ({"kind": "frobnicate"}, "frobnicate"),
    ({"kind": "frobnicate", "frobnicate": {}}, "frobnicate"),
    ({"kind": "query", "query": {"kind": "nope"}}, "nope"),
    ({"kind": "describe", "describe": {"kind": "everything"}}, "everything"),
    ({"kind": "mutate", "mutation": {"kind": "explode"}}, "explode"),
    ({"query": {"kind": "records"}}, "kind"),
    ({"kind": "query"}, "query"),
], ids=["unknown-kind", "unknown-kind-payload", "unknown-query", "unknown-describe", "unknown-mutation",
        "missing-kind", "missing-payload"])
def test_protocol_unknown_operation_400(api, operation, needle):
    with unchanged(api):
        r = api.protocol(operation)
        assert_protocol_error(r, 400, "invalid_argument", message_contains=[needle])


@pytest.mark.parametrize("operation", [
    {"kind": "describe", "describe": {"kind": "labels"}},
    {"kind": "describe", "describe": {"kind": "buildInfo"}},
    {"kind": "query", "query": {"kind": "records", "query": {"labels": [SEED_LABEL]}}},
    {"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "SCOPED", "properties": {"a": 1}}},
], ids=["describe", "build-info", "query", "mutate"])
@pytest.mark.parametrize("scope", ["x", "default", ""])
def test_scope_on_single_tenant_is_scope_mismatch(api, operation, scope):
    with unchanged(api):
        r = api.protocol(operation, context={"scope": scope})
        assert_protocol_error(r, 400, "scope_mismatch")


def test_tenant_header_on_single_tenant_is_refused(api):
    with unchanged(api):
        r = api.post("/api/v1/records", {"label": "TENANT", "data": {"a": 1}}, headers={"X-Service-Tenant": "t1"})
        assert_rest_error(r, 400, "scope_mismatch")
        r = api.protocol({"kind": "describe", "describe": {"kind": "labels"}}, headers={"X-RushDB-Tenant": "t1"})
        assert_protocol_error(r, 400, "scope_mismatch")


def test_server_still_serves_after_garbage(api, seeded):
    """A burst of garbage on fresh connections, then the seed data reads back intact."""
    with unchanged(api):
        for body in MALFORMED + [b"\x00" * 100, b"{" * 10000, b"]" * 100]:
            s = requests.Session()
            r = s.post(api.engine.url + "/api/v1/records", data=body,
                       headers={"Authorization": f"Bearer {DEV_TOKEN}"}, timeout=30)
            assert r.status_code == 400, (body[:20], r.text)
    recs = api.search({"labels": [SEED_LABEL], "orderBy": "asc"})
    assert [x["id"] for x in recs["data"]] == seeded
    assert [x["i"] for x in recs["data"]] == list(range(5))


def test_names_longer_than_1024_bytes_are_refused(api, seeded):
    # Property names and relationship types are parts of index keys, as labels are: bounded.
    long = "p" * 1025
    ok_name = "q" * 1024
    with unchanged(api):
        for path, body in (("/api/v1/records", {"label": "LONGN", "data": {long: 1}}),
                           ("/api/v1/records/import/json", {"label": "LONGN", "data": [{"kid": {long: 1}}]}),
                           ("/api/v1/records/import/json", {"label": "LONGN", "data": [{"a": {"b": 1}}],
                                                            "options": {"relationshipType": long}}),
                           (f"/api/v1/records/{seeded[0]}/relationships", {"targetIds": [seeded[1]], "type": long}),
                           ("/api/v1/records", {"label": "LONGN", "data": {"a": 1},
                                                "vectors": [{"propertyName": long, "vector": [1.0, 2.0]}]})):
            r = api.post(path, body)
            assert_rest_error(r, 400, "invalid_argument", message_contains=["longer than 1024 bytes"])
            assert len(r.text) < 2000, len(r.text)
    rid = api.create("LONGN", {ok_name: 1})
    assert api.record(rid)[ok_name] == 1
    r = api.post(f"/api/v1/records/{seeded[0]}/relationships", {"targetIds": [seeded[1]], "type": "t" * 1024})
    assert r.status_code in (200, 201), r.text
    # Looking a type up is not bounded (a store may hold longer ones, written before the bound).
    r = api.post("/api/v1/relationships/search", {"where": {"type": long}})
    assert r.status_code == 200 and r.json()["data"]["total"] == 0, r.text


def test_an_array_given_for_an_object_is_refused(api, seeded):
    # serde's structs also read an array by position: `options: [false, false, true, ...]` set
    # suggestTypes=false and returnResult=true, and a query document given as an array was run.
    with unchanged(api):
        r = api.post("/api/v1/records", {"label": "POS", "data": {"n": "12"}, "options": [False, False, True, None, True]})
        assert_rest_error(r, 400, "invalid_argument", message_contains=["options", "sequence"])
        r = api.post("/api/v1/relationships/search", {"source": []})
        assert r.status_code == 400, r.text
        r = api.protocol({"kind": "query", "query": {"kind": "records", "query": [[SEED_LABEL], {"i": 1}]}})
        assert_protocol_error(r, 400, "invalid_argument", message_contains=["query", "sequence"])
        r = api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "POS",
                                                         "properties": {"n": 1}, "options": []}})
        assert_protocol_error(r, 400, "invalid_argument", message_contains=["options"])
    # Arrays where arrays belong still decode.
    r = api.post("/api/v1/records/search", {"labels": [SEED_LABEL], "where": {"i": {"$in": [1, 2]}}})
    assert r.status_code == 200 and len(r.json()["data"]) == 2, r.text


def _raw(api, lines):
    """A request with the headers exactly as given (requests folds repeated ones)."""
    import socket
    host, port = api.engine.url.split("//")[1].split(":")
    lines = [x if isinstance(x, bytes) else x.encode() for x in lines]
    req = b"\r\n".join([b"POST /api/v1/records/search HTTP/1.1", f"Host: {host}".encode(),
                         b"Content-Type: application/json", b"Content-Length: 2", b"Connection: close",
                         *lines]) + b"\r\n\r\n{}"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(req)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


@pytest.mark.parametrize("lines,needle", [
    ([f"Authorization: Bearer {DEV_TOKEN}", "Authorization: Bearer nope"], "Authorization"),
    ([f"Authorization: Bearer {DEV_TOKEN}", "X-Service-Token: nope"], "X-Service-Token"),
    ([f"X-Service-Token: {DEV_TOKEN}", f"token: {DEV_TOKEN}x"], "token"),
    (["Authorization: Basic dXNlcjpwdw==", f"X-Service-Token: {DEV_TOKEN}"], "only the Bearer scheme"),
    ([b"Authorization: Bearer \xff", f"X-Service-Token: {DEV_TOKEN}"], "Authorization: the header's value is not"),
    ([f"Authorization: Bearer {DEV_TOKEN}", b"token: \xfe"], "token: the header's value is not"),
    ([f"Authorization: Bearer {DEV_TOKEN}", "X-Transaction-Id: 0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f",
      "X-Transaction-Id: 0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e60"], "X-Transaction-Id"),
])
def test_conflicting_headers_are_refused(api, lines, needle):
    """A credential or transaction sent twice with different values is a 400 naming the
    headers, whichever value comes first; the same value twice is fine."""
    status, body = _raw(api, lines)
    assert status == 400, body
    err = json.loads(body)
    assert err["code"] == "invalid_argument" and needle in err["message"], err
    status, body = _raw(api, [f"Authorization: Bearer {DEV_TOKEN}", f"X-Service-Token: {DEV_TOKEN}"])
    assert status == 200, body
    # a wrong first credential is still a 401
    status, _ = _raw(api, ["Authorization: Bearer nope", f"Authorization: Bearer {DEV_TOKEN}"])
    assert status == 401


def _raw_request(api, head: bytes, body: bytes = b"") -> tuple:
    import socket
    host, port = api.engine.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + b"\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    h, _, b = data.partition(b"\r\n\r\n")
    return int(h.split(b" ")[1]), b


def test_request_framing_rfc_9112(api):
    """Exactly one Host on HTTP/1.1 (400 otherwise), none needed on HTTP/1.0; a transfer
    coding other than chunked is 501, not a body read still coded."""
    auth = f"Authorization: Bearer {DEV_TOKEN}".encode()
    for head in (b"GET /api/v1/settings HTTP/1.1\r\nConnection: close",
                 b"GET /api/v1/settings HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close"):
        status, body = _raw_request(api, head)
        assert status == 400 and "Host" in json.loads(body)["message"], body
    status, _ = _raw_request(api, b"GET /api/v1/settings HTTP/1.0")
    assert status == 200
    chunked = b"2\r\n{}\r\n0\r\n\r\n"
    status, body = _raw_request(api, b"POST /api/v1/records/search HTTP/1.1\r\nHost: x\r\n" + auth +
                                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close",
                                chunked)
    assert status == 501 and "gzip" in json.loads(body)["message"], body
    status, body = _raw_request(api, b"POST /api/v1/records/search HTTP/1.1\r\nHost: x\r\n" + auth +
                                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close",
                                chunked)
    assert status == 200, body


def test_unknown_protocol_paths_answer_in_the_protocol_envelope(api):
    r = api.get("/protocol/v1/execute")
    assert_protocol_error(r, 404, "not_found", message_contains=["no route for GET /protocol/v1/execute"])
    for path in ("/protocol/", "/protocol//"):
        assert_protocol_error(api.post(path, {}), 404, "not_found")


def test_long_input_is_not_echoed_whole(api):
    r = api.post("/api/v1/records/search", {"labels": "x" * 200_000})
    err = assert_rest_error(r, 400, "invalid_argument", message_contains=["labels", "bytes left out"])
    assert len(err["message"]) <= 4096 and len(r.content) < 6000
    r = api.post("/protocol/v1/execute", {"protocolVersion": "9" * 100_000, "operation": {}})
    assert r.status_code == 400 and len(r.content) < 6000


def test_conflicting_tenant_headers_are_refused(engine_factory):
    e = engine_factory.start(extra_args=["--multitenant"])
    api = e.client()
    status, body = _raw(api, [f"Authorization: Bearer {DEV_TOKEN}", "X-Service-Tenant: a", "X-RushDB-Tenant: b"])
    assert status == 400 and "X-Service-Tenant and X-RushDB-Tenant" in json.loads(body)["message"], body
    status, body = _raw(api, [f"Authorization: Bearer {DEV_TOKEN}", "X-Service-Tenant: a", "X-RushDB-Tenant: a"])
    assert status == 200, body
