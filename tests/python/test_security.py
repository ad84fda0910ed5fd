"""Capability tokens and permissions (SPEC.md "Engine credentials", BEHAVIOUR.md §7), tenant
isolation on a multitenant engine (REST, Protocol v1, the `rushdb` SDK with `scope=`).

Tokens are minted here from SPEC.md's format alone (HMAC-SHA256 over the base64url claims
segment), and once with `engine token mint`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import time

import pytest
from rushdb import RushDB

from conftest import DEV_TOKEN, ENGINE_BIN, assert_protocol_error, assert_rest_error, engine_env, unchanged, unique

SECRET = "5ec2e7" * 8
# The published test vector of docs/security.md.
VECTOR_SECRET = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
VECTOR_TOKEN = ("eyJzdWIiOiJ0ZXN0Iiwic2NvcGUiOiJyZWFkIHdyaXRlIiwidGVuYW50IjoiYWNtZSIsImlhdCI6MTcwMDAwMDAwMCwiZXhwIjo0MTAyNDQ0ODAwfQ"
                ".FhCdfmQZnnKa7cn4LVSOfqvhlsSUOj-aMpj1JcEPg1c")


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(claims, secret=SECRET):
    seg = b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = hmac.new(bytes.fromhex(secret), seg.encode(), hashlib.sha256).digest()
    return f"{seg}.{b64(sig)}"


def claims(scope="read write", tenant=None, exp_in=3600, **extra):
    now = int(time.time())
    c = {"sub": "tester", "scope": scope, "iat": now, "exp": now + exp_in, **extra}
    if tenant is not None:
        c["tenant"] = tenant
    return c


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    from conftest import EngineProcess

    tmp = tmp_path_factory.mktemp("sec-single")
    e = EngineProcess(tmp / "data", tmp, extra_args=["--capability-secret", SECRET]).start()
    yield e
    assert e.stop() == 0


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    from conftest import EngineProcess

    tmp = tmp_path_factory.mktemp("sec-multi")
    e = EngineProcess(tmp / "data", tmp, extra_args=["--capability-secret", SECRET, "--multitenant"]).start()
    yield e
    assert e.stop() == 0


def call(engine, token, method, path, body=None, tenant=None, raw=None):
    h = {"Authorization": f"Bearer {token}"}
    if tenant:
        h["X-Service-Tenant"] = tenant
    if raw is not None:
        return engine.client().session.request(method, engine.url + path, data=raw, headers=h, timeout=30)
    return engine.client().session.request(method, engine.url + path, json=body, headers=h, timeout=30)


# ---------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------


def test_published_vector_is_accepted(tmp_path):
    from conftest import EngineProcess

    e = EngineProcess(tmp_path / "data", tmp_path, extra_args=["--capability-secret", VECTOR_SECRET, "--multitenant"]).start()
    try:
        r = call(e, VECTOR_TOKEN, "POST", "/api/v1/records", {"label": "V", "data": {"a": 1}}, tenant="acme")
        assert r.status_code == 201, r.text
        assert_rest_error(call(e, VECTOR_TOKEN, "POST", "/api/v1/records/search", {}, tenant="other"), 401, "unauthenticated")
        assert VECTOR_TOKEN == mint({"sub": "test", "scope": "read write", "tenant": "acme", "iat": 1700000000, "exp": 4102444800},
                                    VECTOR_SECRET)
    finally:
        assert e.stop() == 0


def test_a_short_capability_secret_is_refused(tmp_path):
    # A 1-byte key is found by trying 256, and with it any token forged.
    from conftest import run_engine

    for short in ("00", "5ec2e7" * 2 + "5e"):  # 1 and 7 bytes
        p = run_engine(["serve", "--data-dir", str(tmp_path / "d"), "--http-addr", "127.0.0.1:0",
                        "--grpc-addr", "127.0.0.1:0", "--capability-secret", short])
        assert p.returncode != 0 and p.stdout == "", p.stdout
        assert "at least 16" in p.stderr, p.stderr


def test_a_claim_given_twice_is_refused(single):
    # A control plane reading the first `tenant` would see another tenant than this engine,
    # which would take the last: such tokens are refused.
    now = int(time.time())
    for raw in ('{"sub":"t","scope":"read write","tenant":"b","tenant":"a","exp":%d}' % (now + 3600),
                '{"sub":"t","scope":"read","scope":"read write","exp":%d}' % (now + 3600)):
        seg = b64(raw.encode())
        tok = f"{seg}.{b64(hmac.new(bytes.fromhex(SECRET), seg.encode(), hashlib.sha256).digest())}"
        assert_rest_error(call(single, tok, "POST", "/api/v1/records/search", {}), 401, "unauthenticated")


def test_cli_minted_token_works(single):
    env = engine_env()
    env["SERVICE_CAPABILITY_SECRET"] = SECRET
    out = subprocess.run([ENGINE_BIN, "token", "mint", "--scope", "read", "--ttl", "60"], capture_output=True, text=True, env=env, timeout=20)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert call(single, token, "POST", "/api/v1/records/search", {}).status_code == 200
    assert_rest_error(call(single, token, "POST", "/api/v1/records", {"label": "X", "data": {}}), 403, "permission_denied")
    bad = subprocess.run([ENGINE_BIN, "token", "mint", "--scope", "admin"], capture_output=True, text=True, env=env, timeout=20)
    assert bad.returncode == 2 and "scope" in bad.stderr
    huge = subprocess.run([ENGINE_BIN, "token", "mint", "--scope", "read", "--ttl", str(2**64 - 1)],
                          capture_output=True, text=True, env=env, timeout=20)
    assert huge.returncode == 2 and "--ttl is too large" in huge.stderr and huge.stdout == "", huge.stderr
    # The secret rules of `engine serve`: a 2-byte key would sign tokens no server accepts.
    short = subprocess.run([ENGINE_BIN, "token", "mint", "--scope", "read"], capture_output=True, text=True,
                           env={**env, "SERVICE_CAPABILITY_SECRET": "abcd"}, timeout=20)
    assert short.returncode == 2 and "at least 16" in short.stderr and short.stdout == "", short.stderr
    # A tenant no request could name (HTTP drops a header's edge spaces) is not minted.
    for tenant in (" a", "a ", "t" * 1025, ""):
        bad = subprocess.run([ENGINE_BIN, "token", "mint", "--scope", "read", "--tenant", tenant],
                             capture_output=True, text=True, env=env, timeout=20)
        assert bad.returncode == 2 and "--tenant" in bad.stderr and bad.stdout == "", (tenant, bad.stderr)


def test_every_single_bit_flip_is_rejected(single):
    token = mint(claims("*"))
    assert call(single, token, "POST", "/api/v1/records/search", {}).status_code == 200
    raw = token.encode()
    tried = 0
    for i in range(len(raw)):
        for bit in range(8):
            b = bytearray(raw)
            b[i] ^= 1 << bit
            try:
                t = b.decode("ascii")
            except UnicodeDecodeError:
                continue
            if not t.isprintable() or any(c in t for c in " \t\r\n"):
                continue  # not sendable as a header value
            r = call(single, t, "POST", "/api/v1/records/search", {})
            assert r.status_code == 401, (i, bit, r.status_code)
            tried += 1
    assert tried > 5 * len(raw)


@pytest.mark.parametrize("make,why", [
    (lambda: mint(claims(exp_in=-1)), "expired"),
    (lambda: mint({k: v for k, v in claims().items() if k != "exp"}), "missing exp"),
    (lambda: mint(claims(scope="read admin")), "unknown scope"),
    (lambda: mint(claims(), secret="ab" * 32), "bad signature"),
    (lambda: mint(claims()) + "=", "malformed"),
    (lambda: mint(claims()).replace(".", ""), "not a capability token"),
    (lambda: mint(claims(tenant="t1")), "single-tenant"),
    (lambda: b64(json.dumps(claims()).encode()) + "=." + mint(claims()).split(".")[1], "malformed"),
], ids=["expired", "no-exp", "unknown-scope", "wrong-secret", "padding", "no-dot", "tenant-claim", "padded-claims"])
def test_invalid_tokens_are_401(single, make, why):
    r = call(single, make(), "POST", "/api/v1/records/search", {})
    assert_rest_error(r, 401, "unauthenticated")


def test_read_token_is_refused_every_write(single):
    admin = single.client()
    rid = admin.create(unique("SEC"), {"a": 1})
    read = mint(claims("read"))
    assert call(single, read, "GET", f"/api/v1/records/{rid}").status_code == 200
    assert call(single, read, "POST", "/api/v1/records/search", {}).status_code == 200
    assert call(single, read, "POST", "/api/v1/records/export/csv", {}).status_code == 200
    writes = [
        ("POST", "/api/v1/records", {"label": "X", "data": {"a": 1}}),
        ("PATCH", f"/api/v1/records/{rid}", {"a": 2}),
        ("PUT", f"/api/v1/records/{rid}", {"a": 2}),
        ("DELETE", f"/api/v1/records/{rid}", None),
        ("POST", "/api/v1/records/delete", {"labels": ["X"]}),
        ("POST", "/api/v1/records/import/json", {"label": "X", "data": [{"a": 1}]}),
        ("POST", "/api/v1/records/import/csv", {"label": "X", "data": "a\n1"}),
        ("POST", f"/api/v1/records/{rid}/relationships", {"targetIds": [rid]}),
        ("PUT", f"/api/v1/records/{rid}/relationships", {"targetIds": [rid]}),
        ("POST", "/api/v1/relationships/create-many", {"source": {"label": "X", "key": "a"}, "target": {"label": "X", "key": "a"}}),
        ("POST", "/api/v1/tx", {}),
    ]
    with unchanged(admin):
        for method, path, body in writes:
            assert_rest_error(call(single, read, method, path, body), 403, "permission_denied")
        for op in [
            {"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "X", "properties": {}}},
            {"kind": "ingest", "ingest": {"kind": "documents", "label": "X", "documents": [{}]}},
            {"kind": "transaction", "transaction": {"kind": "begin"}},
            {"kind": "purgeTenant", "purgeTenant": {"confirm": "x"}},
        ]:
            r = single.client().session.post(single.url + "/protocol/v1/execute", json={"protocolVersion": 1, "operation": op},
                                             headers={"Authorization": f"Bearer {read}"})
            assert_protocol_error(r, 403, "permission_denied")
        # an unparseable body needs write: 403 for a read token, 400 for a write token
        assert_rest_error(call(single, read, "POST", "/api/v1/records/search", raw=b"{nope"), 403, "permission_denied")
        r = single.client().session.post(single.url + "/protocol/v1/execute", data=b"{nope", headers={"Authorization": f"Bearer {read}"})
        assert_protocol_error(r, 403, "permission_denied")
    assert_rest_error(call(single, mint(claims("write")), "POST", "/api/v1/records/search", raw=b"{nope"), 400, "invalid_argument")


def test_write_token_cannot_read_and_policy_is_bootstrap_only(single):
    write = mint(claims("write"))
    r = call(single, write, "POST", "/api/v1/records", {"label": unique("W"), "data": {"a": 1}, "options": {"returnResult": True}})
    assert r.status_code == 201, r.text
    assert_rest_error(call(single, write, "GET", f"/api/v1/records/{r.json()['data']['__id']}"), 403, "permission_denied")
    # An upsert's answer is the matched record, stored properties and all: with returnResult
    # it needs read too (it had shown a write-only token the stored `n`).
    label = unique("WU")
    assert call(single, DEV_TOKEN, "POST", "/api/v1/records", {"label": label, "data": {"k": "s", "n": 1}}).status_code == 201
    upsert = {"label": label, "data": {"k": "s"}, "options": {"mergeBy": ["k"], "returnResult": True}}
    assert_rest_error(call(single, write, "POST", "/api/v1/records", upsert), 403, "permission_denied",
                      message_contains=["returnResult"])
    assert_rest_error(call(single, write, "POST", "/api/v1/records/import/json",
                           {"label": label, "data": [{"k": "s"}], "options": {"mergeBy": ["k"], "returnResult": True}}),
                      403, "permission_denied", message_contains=["returnResult"])
    upsert["options"].pop("returnResult")
    r = call(single, write, "POST", "/api/v1/records", upsert)
    assert r.status_code == 201 and "n" not in r.text, r.text
    assert call(single, mint(claims("read write")), "POST", "/api/v1/records",
                {**upsert, "options": {"mergeBy": ["k"], "returnResult": True}}).json()["data"]["n"] == 1
    star = mint(claims("*"))
    for token in (write, star, mint(claims("read"))):
        r = single.client().session.post(single.url + "/protocol/v1/execute",
                                         json={"protocolVersion": 1, "operation": {"kind": "policy", "policy": {"kind": "get"}}},
                                         headers={"Authorization": f"Bearer {token}"})
        assert_protocol_error(r, 403, "permission_denied")
    assert call(single, star, "POST", "/api/v1/records/search", {}).status_code == 200
    assert call(single, mint(claims("read")), "GET", "/metrics").status_code == 200


# ---------------------------------------------------------------------------------------
# Tenants
# ---------------------------------------------------------------------------------------


def test_capability_token_is_bound_to_its_tenant(multi):
    a = mint(claims("*", tenant="alpha"))
    assert call(multi, a, "POST", "/api/v1/records", {"label": "T", "data": {"x": 1}}, tenant="alpha").status_code == 201
    assert_rest_error(call(multi, a, "POST", "/api/v1/records/search", {}, tenant="beta"), 401, "unauthenticated")
    assert_rest_error(call(multi, mint(claims("*")), "POST", "/api/v1/records/search", {}, tenant="alpha"), 401, "unauthenticated")
    # no tenant named: refused (fail closed)
    r = call(multi, a, "POST", "/api/v1/records/search", {})
    assert r.status_code in (400, 401), r.text
    # a protocol envelope must name the same tenant in context.scope
    r = multi.client().session.post(multi.url + "/protocol/v1/execute", json={
        "protocolVersion": 1, "context": {"scope": "alpha"},
        "operation": {"kind": "query", "query": {"kind": "records", "query": {"labels": ["T"]}}}},
        headers={"Authorization": f"Bearer {a}", "X-Service-Tenant": "alpha"})
    assert r.status_code == 200 and r.json()["response"]["total"] == 1
    assert_rest_error(call(multi, mint(claims("read", tenant="alpha")), "GET", "/metrics"), 403, "permission_denied")
    # Naming another tenant is a 401 on every route, before anything else is looked at: a
    # route without tenant data, a route not built yet, and an envelope whose scope is the
    # token's own while its header is not.
    assert_rest_error(call(multi, a, "GET", "/api/v1/sdk/settings", tenant="beta"), 401, "unauthenticated")
    assert_rest_error(call(multi, a, "GET", "/metrics", tenant="beta"), 401, "unauthenticated")
    assert_rest_error(call(multi, a, "POST", "/api/v1/query/raw", {}, tenant="beta"), 401, "unauthenticated")
    r = multi.client().session.post(multi.url + "/protocol/v1/execute", json={
        "protocolVersion": 1, "context": {"scope": "alpha"},
        "operation": {"kind": "query", "query": {"kind": "records", "query": {"labels": ["T"]}}}},
        headers={"Authorization": f"Bearer {a}", "X-Service-Tenant": "beta"})
    assert_protocol_error(r, 401, "unauthenticated")


def test_cross_tenant_matrix(multi):
    """Everything tenant A holds is invisible to tenant B, answered exactly like an unknown id."""
    boot = DEV_TOKEN
    label = unique("SECRET")
    A, B = "tenant-a", "tenant-b"
    mk = lambda d: call(multi, boot, "POST", "/api/v1/records", {"label": label, "data": d, "options": {"returnResult": True}}, tenant=A).json()["data"]["__id"]
    ra, rb = mk({"v": 1, "k": "x"}), mk({"v": 2, "k": "x"})
    assert call(multi, boot, "POST", f"/api/v1/records/{ra}/relationships", {"targetIds": [rb], "type": "L"}, tenant=A).status_code == 201
    own = call(multi, boot, "POST", "/api/v1/records", {"label": label, "data": {"v": 9}, "options": {"returnResult": True}}, tenant=B).json()["data"]["__id"]
    unknown = "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"

    def same_as_unknown(method, make):
        """`make(id) -> (path, body)`: A's id and an unknown id get the same answer from B."""
        answers = []
        for i in (ra, unknown):
            path, body = make(i)
            r = call(multi, boot, method, path, body, tenant=B)
            answers.append((r.status_code, r.json().get("code"), r.json().get("message", "").replace(i, "ID")))
        assert answers[0] == answers[1], (method, make(ra), answers)
        assert answers[0][0] == 404

    same_as_unknown("GET", lambda i: (f"/api/v1/records/{i}", None))
    same_as_unknown("PATCH", lambda i: (f"/api/v1/records/{i}", {"v": 5}))
    same_as_unknown("PUT", lambda i: (f"/api/v1/records/{i}", {"v": 5}))
    same_as_unknown("DELETE", lambda i: (f"/api/v1/records/{i}", None))
    same_as_unknown("GET", lambda i: (f"/api/v1/records/{i}/relationships", None))
    same_as_unknown("POST", lambda i: (f"/api/v1/records/{i}/relationships", {"targetIds": [own]}))
    same_as_unknown("POST", lambda i: (f"/api/v1/records/{own}/relationships", {"targetIds": [i]}))
    same_as_unknown("POST", lambda i: ("/api/v1/records/import/json", {"label": "K", "parentId": i, "data": {"z": 1}}))
    # searches, counts, exports and schema of B show nothing of A
    r = call(multi, boot, "POST", "/api/v1/records/search", {"labels": [label]}, tenant=B)
    assert [x["__id"] for x in r.json()["data"]["data"]] == [own]
    assert call(multi, boot, "POST", "/api/v1/labels/search", {}, tenant=B).json()["data"].get(label) == 1
    text = call(multi, boot, "POST", "/api/v1/records/export/csv", {"labels": [label]}, tenant=B).json()["data"]["fileContent"]
    assert ra not in text and rb not in text and own in text
    r = call(multi, boot, "POST", "/api/v1/relationships/search", {}, tenant=B)
    assert r.json()["data"]["total"] == 0
    props = call(multi, boot, "POST", "/api/v1/properties/search", {}, tenant=B).json()["data"]["data"]
    assert {p["name"] for p in props} == {"v"}
    # every Protocol v1 read of B shows nothing of A
    def proto_b(op):
        r = multi.client().session.post(multi.url + "/protocol/v1/execute", json={
            "protocolVersion": 1, "context": {"scope": B}, "operation": op},
            headers={"Authorization": f"Bearer {boot}", "X-Service-Tenant": B})
        assert r.status_code in (200, 404), r.text
        return r.text

    for op in [
        {"kind": "query", "query": {"kind": "record", "id": ra}},
        {"kind": "query", "query": {"kind": "records", "query": {"labels": [label]}}},
        {"kind": "query", "query": {"kind": "relationships", "query": {}}},
        {"kind": "query", "query": {"kind": "relationships", "query": {"recordId": ra}}},
        {"kind": "query", "query": {"kind": "propertyValues", "property": "v", "query": {}}},
        {"kind": "query", "query": {"kind": "exportCsv", "query": {"labels": [label]}}},
        {"kind": "describe", "describe": {"kind": "schema"}},
        {"kind": "describe", "describe": {"kind": "labels"}},
        {"kind": "describe", "describe": {"kind": "properties"}},
        {"kind": "describe", "describe": {"kind": "explain", "query": {"labels": [label]}}},
    ]:
        text = proto_b(op)
        if ra in json.dumps(op):  # an error may echo the id the request named
            assert '"not_found"' in text, (op, text)
            text = text.replace(ra, "")
        assert ra not in text and rb not in text and '"L"' not in text, (op, text)
        assert '"v":1' not in text.replace(" ", "") and '"v":2' not in text.replace(" ", ""), (op, text)
    # bulk operations of B never touch A
    call(multi, boot, "POST", "/api/v1/records/delete", {"labels": [label]}, tenant=B)
    call(multi, boot, "POST", "/api/v1/relationships/create-many",
         {"source": {"label": label, "key": "k"}, "target": {"label": label, "key": "k"}}, tenant=B)
    # a transaction of A cannot be used from B
    tx = call(multi, boot, "POST", "/api/v1/tx", {}, tenant=A).json()["data"]["id"]
    r = multi.client().session.post(multi.url + "/api/v1/records", json={"label": label, "data": {}},
                                    headers={"Authorization": f"Bearer {boot}", "X-Service-Tenant": B, "X-Transaction-Id": tx})
    assert_rest_error(r, 404, "not_found")
    # A is intact
    r = call(multi, boot, "POST", "/api/v1/records/search", {"labels": [label]}, tenant=A)
    assert {x["__id"] for x in r.json()["data"]["data"]} == {ra, rb}
    rels = call(multi, boot, "GET", f"/api/v1/records/{ra}/relationships", tenant=A).json()["data"]["data"]
    assert [(x["sourceId"], x["targetId"]) for x in rels] == [(ra, rb)]


def test_sdk_scopes_never_see_each_other(multi):
    one = RushDB(DEV_TOKEN, direct=True, engine_url=multi.url, scope="sdk-one")
    two = RushDB(DEV_TOKEN, direct=True, engine_url=multi.url, scope="sdk-two")
    label = unique("SDKT")
    a = one.records.create(label, {"name": "one"})
    b = two.records.create(label, {"name": "two"})
    assert [r.id for r in one.records.find({"labels": [label]}).data] == [a.id]
    assert [r.id for r in two.records.find({"labels": [label]}).data] == [b.id]
    one.records.update(a.id, {"name": "uno"})
    assert one.records.find_by_id(a.id)["name"] == "uno"
    with pytest.raises(Exception):
        two.records.find_by_id(a.id)
    with pytest.raises(Exception):
        two.records.delete_by_id(a.id)
    assert one.records.find_by_id(a.id)["name"] == "uno"
    one.records.delete_by_id(a.id)
    assert one.records.find({"labels": [label]}).data == []
    assert [r.id for r in two.records.find({"labels": [label]}).data] == [b.id]


# ---------------------------------------------------------------------------------------
# purgeTenant
# ---------------------------------------------------------------------------------------


def purge(engine, tenant, confirm, token=DEV_TOKEN):
    return engine.client().session.post(engine.url + "/protocol/v1/execute", json={
        "protocolVersion": 1, "context": {"scope": tenant},
        "operation": {"kind": "purgeTenant", "purgeTenant": {"confirm": confirm}}},
        headers={"Authorization": f"Bearer {token}", "X-Service-Tenant": tenant})


def test_purge_tenant(multi, single):
    P, Q = unique("purge"), unique("keep")
    docs = [{"n": i, "kid": {"k": i}} for i in range(1500)]
    for t in (P, Q):
        r = call(multi, DEV_TOKEN, "POST", "/api/v1/records/import/json", {"label": "DOC", "data": docs}, tenant=t)
        assert r.status_code == 201, r.text
    assert_protocol_error(purge(multi, P, Q), 400, "invalid_argument", message_contains=["confirm"])
    assert_protocol_error(purge(multi, P, P, token=mint(claims("read", tenant=P))), 403, "permission_denied")
    assert_protocol_error(purge(multi, P, P, token=mint(claims("*", tenant=Q))), 401, "unauthenticated")
    r = purge(multi, P, P, token=mint(claims("write", tenant=P)))
    assert r.status_code == 200, r.text
    assert r.json()["response"] == {"kind": "purged", "tenant": P, "records": 3000, "relationships": 1500}
    # invisible at once; the other tenant is untouched
    assert call(multi, DEV_TOKEN, "POST", "/api/v1/labels/search", {}, tenant=P).json()["data"] == {}
    assert call(multi, DEV_TOKEN, "POST", "/api/v1/labels/search", {}, tenant=Q).json()["data"] == {"DOC": 1500, "kid": 1500}
    # the name starts over as an empty tenant
    assert call(multi, DEV_TOKEN, "POST", "/api/v1/records", {"label": "NEW", "data": {"a": 1}}, tenant=P).status_code == 201
    assert call(multi, DEV_TOKEN, "POST", "/api/v1/labels/search", {}, tenant=P).json()["data"] == {"NEW": 1}
    deadline = time.time() + 10
    while "reclaimed the keys of purged tenant" not in multi.log() and time.time() < deadline:
        time.sleep(0.1)
    assert "reclaimed the keys of purged tenant" in multi.log()
    # single-tenant engines have no tenant to purge
    r = single.client().session.post(single.url + "/protocol/v1/execute", json={
        "protocolVersion": 1, "operation": {"kind": "purgeTenant", "purgeTenant": {"confirm": "x"}}},
        headers={"Authorization": f"Bearer {DEV_TOKEN}"})
    assert_protocol_error(r, 400, "invalid_argument")


def test_ended_transactions_say_nothing_to_another_tenant(multi):
    """How a transaction ended (committed, or expired) is told to its own tenant only: to
    another tenant its id is unknown."""
    def tx(tenant, body):
        return multi.client().session.post(multi.url + "/protocol/v1/execute", json={
            "protocolVersion": 1, "context": {"scope": tenant}, "operation": {"kind": "transaction", "transaction": body}},
            headers={"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": tenant}, timeout=30)

    done = tx("own", {"kind": "begin", "ttlMs": 20000}).json()["response"]["transactionId"]
    assert tx("own", {"kind": "commit", "transactionId": done}).json()["response"]["status"] == "committed"
    short = tx("own", {"kind": "begin", "ttlMs": 200}).json()["response"]["transactionId"]
    import time
    time.sleep(0.8)
    for t in (done, short):
        assert_protocol_error(tx("other", {"kind": "commit", "transactionId": t}), 404, "not_found")
        assert_rest_error(call(multi, DEV_TOKEN, "GET", f"/api/v1/tx/{t}", tenant="other"), 404, "not_found")
    assert tx("own", {"kind": "commit", "transactionId": done}).json()["response"]["status"] == "committed"
    assert tx("own", {"kind": "commit", "transactionId": short}).json()["response"]["status"] == "expired"
    assert_rest_error(call(multi, DEV_TOKEN, "GET", f"/api/v1/tx/{short}", tenant="own"), 404, "transaction_expired")
