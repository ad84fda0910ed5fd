"""1,000 generated malformed requests (truncated JSON, wrong types, huge numbers, deep nesting,
invalid UTF-8, oversized bodies, bad ids and headers) against every route family: no answer is
a 5xx, the server stays alive, and the stored data stays intact and consistent (a mutation that
happens to be a valid write is simply applied)."""

from __future__ import annotations

import json
import random

from conftest import unique

ROUTES = [
    ("POST", "/api/v1/records"),
    ("POST", "/api/v1/records/search"),
    ("POST", "/api/v1/query/records/find"),
    ("POST", "/api/v1/records/delete"),
    ("PATCH", "/api/v1/records/{id}"),
    ("PUT", "/api/v1/records/{id}"),
    ("POST", "/api/v1/records/{id}/relationships"),
    ("PUT", "/api/v1/records/{id}/relationships"),
    ("POST", "/api/v1/records/{id}/search"),
    ("POST", "/api/v1/relationships/search"),
    ("POST", "/api/v1/relationships/create-many"),
    ("POST", "/api/v1/relationships/delete-many"),
    ("POST", "/api/v1/labels/search"),
    ("POST", "/api/v1/properties/search"),
    ("POST", "/api/v1/records/import/json"),
    ("POST", "/api/v1/records/import/csv"),
    ("POST", "/api/v1/records/export/csv"),
    ("POST", "/api/v1/tx"),
    ("POST", "/protocol/v1/execute"),
]

VALID = [
    {"label": "L", "data": {"a": 1}},
    {"labels": ["L"], "where": {"a": {"$gt": 1}}, "limit": 10, "orderBy": {"a": "asc"}},
    {"targetIds": ["0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"], "type": "T"},
    {"source": {"label": "L", "key": "a"}, "target": {"label": "M", "key": "a"}},
    {"label": "L", "data": [{"a": 1, "kid": {"b": [1, 2]}}]},
    {"label": "L", "data": "a,b\n1,2\n", "parseConfig": {"delimiter": ","}},
    {"protocolVersion": 1, "operation": {"kind": "query", "query": {"kind": "records", "query": {"labels": ["L"]}}}},
    {"protocolVersion": 1, "operation": {"kind": "ingest", "ingest": {"kind": "documents", "label": "L", "documents": [{"a": 1}]}}},
]

WEIRD = [None, True, False, 0, -1, 1e308, -1e308, 10**40, -(10**40), "", "x" * 5000, [], {}, [[[]]],
         {"$gt": []}, {"$in": []}, "\u0000", "\ud7ff\ue000", "0190d5c2", 1.5, [None], {"$and": 5}]


def mutate_value(rng, v, depth=0):
    """A copy of v with one random part replaced by something of the wrong shape."""
    if isinstance(v, dict) and v and rng.random() < 0.8:
        k = rng.choice(list(v))
        out = dict(v)
        out[k] = mutate_value(rng, v[k], depth + 1)
        if rng.random() < 0.2:
            out["$" + rng.choice(["gt", "bogus", "in", "relation", "alias"])] = rng.choice(WEIRD)
        return out
    if isinstance(v, list) and v and rng.random() < 0.8:
        out = list(v)
        i = rng.randrange(len(out))
        out[i] = mutate_value(rng, out[i], depth + 1)
        return out
    return rng.choice(WEIRD)


def deep(n):
    s = '{"a":' * n + "1" + "}" * n
    return s.encode()


def malformed_bodies(rng):
    base = json.dumps(rng.choice(VALID)).encode()
    kind = rng.randrange(9)
    if kind == 0:
        return base[: rng.randrange(1, len(base))]  # truncated
    if kind == 1:
        return json.dumps(mutate_value(rng, rng.choice(VALID))).encode()  # wrong types
    if kind == 2:
        return base.replace(b"1", b"1" + b"9" * rng.randrange(20, 400), 1)  # huge numbers
    if kind == 3:
        return deep(rng.choice([65, 129, 500, 5000]))  # deep nesting
    if kind == 4:
        b = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            b.insert(rng.randrange(len(b)), rng.choice([0xFF, 0xC0, 0x80, 0xED]))
        return bytes(b)  # invalid UTF-8
    if kind == 5:
        return b"[" * rng.randrange(1, 100)
    if kind == 6:
        return rng.randbytes(rng.randrange(1, 200))  # noise
    if kind == 7:
        return json.dumps(rng.choice(WEIRD)).encode()  # not an object
    return b'{"label": "L", "data": {"a": "' + b"x" * (33 * 1024 * 1024) + b'"}}'  # oversized


def test_thousand_malformed_requests(engine):
    api = engine.client()
    label = unique("KEEP")
    rid = api.create(label, {"v": 1, "tags": ["a"]})  # never addressed: must stay intact
    victim = api.create(unique("VICTIM"), {"a": 1})  # addressed by id: may be validly changed
    rng = random.Random(20261122)
    statuses = {}
    oversized = 0
    if True:  # some mutations are valid writes by accident: "intact" is checked below
        for i in range(1000):
            method, path = rng.choice(ROUTES)
            path = path.replace("{id}", rng.choice([victim, "not-an-id", "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"]))
            body = malformed_bodies(rng)
            if len(body) > 1_000_000:
                oversized += 1
                if oversized > 3:  # a few are enough; each is 33 MiB
                    body = body[:1000]
            headers = api.headers({"Content-Type": "application/json"})
            if rng.random() < 0.1:
                headers["X-Transaction-Id"] = rng.choice(["nope", "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"])
            try:
                r = api.session.request(method, engine.url + path, data=body, headers=headers, timeout=30)
                status = r.status_code
            except Exception as e:  # a reset after an oversized body is allowed, a crash is not
                status = type(e).__name__
            statuses[status] = statuses.get(status, 0) + 1
            assert not (isinstance(status, int) and status >= 500), (i, method, path, body[:200], r.text[:300])
        assert engine.running
    rec = api.record(rid)
    assert (rec["v"], rec["tags"], rec["__label"]) == (1, ["a"], label)
    assert api.labels({})[label] == 1
    # counters and indexes agree with what is stored
    everything = api.all_records()
    assert sum(api.labels({}).values()) == len(everything)
    assert sum(v for k, v in statuses.items() if isinstance(k, int) and 400 <= k < 500) > 900, statuses
