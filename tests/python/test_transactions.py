"""Client transactions through REST (`/api/v1/tx`, `X-Transaction-Id`), Protocol v1
(`transaction` begin / stage / commit / rollback) and the `rushdb` 3.0 SDK in direct mode:
staged visibility, commit, rollback, ttl expiry, conflicts (first committer wins), refused
operations, a bank-transfer invariant under 32 concurrent clients, and crash atomicity.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from rushdb import RushDB

from conftest import DEV_TOKEN, assert_protocol_error, assert_rest_error, unchanged, unique


def begin(api, **body):
    r = api.post("/api/v1/tx", body)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    return data["id"]


def tx_headers(api, tx):
    return api.headers({"X-Transaction-Id": tx})


def in_tx(api, tx, method, path, body=None):
    return api.session.request(method, api.engine.url + path, json=body, headers=tx_headers(api, tx), timeout=30)


def commit(api, tx):
    return api.post(f"/api/v1/tx/{tx}/commit", {})


def ids_of(api, label, tx=None):
    body = {"labels": [label], "limit": 1000}
    r = in_tx(api, tx, "POST", "/api/v1/records/search", body) if tx else api.post("/api/v1/records/search", body)
    assert r.status_code == 200, r.text
    return {x["__id"] for x in r.json()["data"]["data"]}


# ---------------------------------------------------------------------------------------
# REST
# ---------------------------------------------------------------------------------------


def test_begin_ttl_rules(module_api):
    r = module_api.post("/api/v1/tx", {})
    assert r.status_code == 200 and r.json()["data"]["ttl"] == 5000
    assert module_api.post("/api/v1/tx", {"ttl": 30000}).json()["data"]["ttl"] == 30000
    assert_rest_error(module_api.post("/api/v1/tx", {"ttl": 30001}), 400, "invalid_argument", message_contains=["ttl"])
    assert_rest_error(module_api.post("/api/v1/tx", {"ttl": "long"}), 400, "invalid_argument", message_contains=["ttl"])
    tx = begin(module_api)
    r = module_api.get(f"/api/v1/tx/{tx}")
    assert r.status_code == 200 and r.json()["data"]["id"] == tx


def test_staged_writes_are_visible_inside_only_until_commit(module_api):
    label = unique("TXV")
    existing = module_api.create(label, {"n": 0, "keep": "yes"})
    other = module_api.create(label, {"n": 100})
    tx = begin(module_api, ttl=20000)
    r = in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"n": 1}, "options": {"returnResult": True}})
    assert r.status_code == 201, r.text
    created = r.json()["data"]["__id"]
    r = in_tx(module_api, tx, "PATCH", f"/api/v1/records/{existing}", {"n": 5})
    assert r.status_code == 201 and r.json()["data"]["n"] == 5 and r.json()["data"]["keep"] == "yes"
    r = in_tx(module_api, tx, "POST", f"/api/v1/records/{created}/relationships", {"targetIds": [existing], "type": "T"})
    assert r.status_code == 201, r.text
    r = in_tx(module_api, tx, "DELETE", f"/api/v1/records/{other}")
    assert r.status_code == 200, r.text
    r = in_tx(module_api, tx, "POST", "/api/v1/records/import/json", {"label": label, "data": [{"n": 7}, {"n": 8}]})
    assert r.status_code == 201 and r.json()["data"]["count"] == 2

    # inside: committed data plus the staged writes
    inside = ids_of(module_api, label, tx)
    assert created in inside and existing in inside and other not in inside and len(inside) == 4
    r = in_tx(module_api, tx, "GET", f"/api/v1/records/{existing}")
    assert r.json()["data"]["n"] == 5
    r = in_tx(module_api, tx, "GET", f"/api/v1/records/{created}/relationships")
    assert [(x["sourceId"], x["targetId"], x["type"]) for x in r.json()["data"]["data"]] == [(created, existing, "T")]
    # outside: nothing of it
    assert ids_of(module_api, label) == {existing, other}
    assert module_api.record(existing)["n"] == 0
    assert module_api.get(f"/api/v1/records/{created}").status_code == 404

    r = commit(module_api, tx)
    assert r.status_code == 200, r.text
    assert ids_of(module_api, label) == inside
    assert module_api.record(existing)["n"] == 5
    rels = module_api.get(f"/api/v1/records/{created}/relationships").json()["data"]["data"]
    assert [(x["sourceId"], x["targetId"]) for x in rels] == [(created, existing)]
    # the id is gone once committed
    assert_rest_error(commit(module_api, tx), 404, "not_found")


def test_rollback_discards(module_api):
    label = unique("TXR")
    keep = module_api.create(label, {"n": 1})
    tx = begin(module_api)
    assert in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"n": 2}}).status_code == 201
    assert in_tx(module_api, tx, "PUT", f"/api/v1/records/{keep}", {"other": True}).status_code == 201
    with unchanged(module_api):
        r = module_api.post(f"/api/v1/tx/{tx}/rollback", {})
        assert r.status_code == 200, r.text
    assert ids_of(module_api, label) == {keep}
    assert module_api.record(keep)["n"] == 1
    assert_rest_error(module_api.post(f"/api/v1/tx/{tx}/rollback", {}), 404, "not_found")


def test_expiry_rolls_back_and_is_remembered(module_api):
    label = unique("TXE")
    tx = begin(module_api, ttl=300)
    assert in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"n": 1}}).status_code == 201
    time.sleep(0.8)
    assert_rest_error(commit(module_api, tx), 404, "transaction_expired")
    assert_rest_error(module_api.get(f"/api/v1/tx/{tx}"), 404, "transaction_expired")
    assert_rest_error(in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"n": 2}}), 404, "transaction_expired")
    assert ids_of(module_api, label) == set()


def test_unknown_and_malformed_ids(module_api):
    unknown = "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"
    assert_rest_error(module_api.get(f"/api/v1/tx/{unknown}"), 404, "not_found")
    assert_rest_error(commit(module_api, unknown), 404, "not_found")
    assert_rest_error(in_tx(module_api, unknown, "POST", "/api/v1/records", {"label": "X", "data": {}}), 404, "not_found")
    assert_rest_error(module_api.get("/api/v1/tx/nope"), 400, "invalid_argument")
    assert_rest_error(in_tx(module_api, "nope", "GET", f"/api/v1/records/{unknown}"), 400, "invalid_argument")


def test_an_unreadable_transaction_header_is_refused_not_ignored(module_api):
    # A value with a byte that is not UTF-8 (requests sends str headers as latin-1) was read
    # as no header at all: the write committed at once, outside the transaction.
    label = unique("TXB")
    tx = begin(module_api, ttl=20000)
    with unchanged(module_api):
        r = module_api.post("/api/v1/records", {"label": label, "data": {"k": 1}},
                            headers={"X-Transaction-Id": tx + "\xe9"})
        assert_rest_error(r, 400, "invalid_argument", message_contains=["x-transaction-id", "UTF-8"])
        r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": label,
                                                                 "properties": {"k": 1}}},
                                headers={"X-Transaction-Id": "\xe9"})
        assert_protocol_error(r, 400, "invalid_argument")
    # The tenant header likewise: on a single-tenant engine any tenant header is a mismatch,
    # and one that cannot be read is refused rather than ignored.
    r = module_api.post("/api/v1/records/search", {"labels": [label]}, headers={"X-Service-Tenant": "t\xe9"})
    assert r.status_code == 400, r.text
    assert module_api.post(f"/api/v1/tx/{tx}/rollback", {}).status_code == 200


def test_refused_inside_a_transaction(module_api):
    label = unique("TXU")
    rid = module_api.create(label, {"k": 1})
    tx = begin(module_api, ttl=20000)
    refused = [
        ("POST", "/api/v1/records/delete", {"labels": [label]}),
        ("POST", "/api/v1/relationships/create-many", {"source": {"label": label, "key": "k"}, "target": {"label": label, "key": "k"}}),
        ("POST", "/api/v1/records", {"label": label, "data": {"k": 1}, "options": {"mergeBy": ["k"]}}),
        ("POST", "/api/v1/records/import/json", {"label": label, "data": [{"k": 1}], "options": {"mergeBy": []}}),
        ("POST", "/api/v1/records/search", {"labels": [label], "aggregate": {"c": {"fn": "count"}}}),
        ("POST", "/api/v1/labels/search", {}),
    ]
    with unchanged(module_api):
        for method, path, body in refused:
            assert_rest_error(in_tx(module_api, tx, method, path, body), 501, "unsupported", message_contains=["transaction"])
    r = module_api.get(f"/api/v1/tx/{tx}")
    assert r.json()["data"]["staged"] == 0
    assert commit(module_api, tx).status_code == 200
    assert module_api.record(rid)["k"] == 1


def test_staged_write_errors_are_reported_and_not_staged(module_api):
    tx = begin(module_api, ttl=20000)
    missing = "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"
    assert_rest_error(in_tx(module_api, tx, "PATCH", f"/api/v1/records/{missing}", {"a": 1}), 404, "not_found")
    assert_rest_error(in_tx(module_api, tx, "POST", "/api/v1/records", {"label": "X", "data": {"__bad": 1}}), 400, "invalid_argument")
    assert module_api.get(f"/api/v1/tx/{tx}").json()["data"]["staged"] == 0
    assert commit(module_api, tx).status_code == 200


def test_conflict_first_committer_wins(module_api):
    label = unique("TXC")
    rid = module_api.create(label, {"balance": 10})
    a, b = begin(module_api, ttl=20000), begin(module_api, ttl=20000)
    for tx in (a, b):
        assert in_tx(module_api, tx, "GET", f"/api/v1/records/{rid}").json()["data"]["balance"] == 10
    assert in_tx(module_api, a, "PATCH", f"/api/v1/records/{rid}", {"balance": 11}).status_code == 201
    assert in_tx(module_api, b, "PATCH", f"/api/v1/records/{rid}", {"balance": 12}).status_code == 201
    assert commit(module_api, a).status_code == 200
    assert_rest_error(commit(module_api, b), 409, "conflict", message_contains=[rid])
    assert module_api.record(rid)["balance"] == 11
    # a plain write after a transaction's read conflicts too
    c = begin(module_api, ttl=20000)
    assert in_tx(module_api, c, "GET", f"/api/v1/records/{rid}").status_code == 200
    assert module_api.patch(f"/api/v1/records/{rid}", {"balance": 20}).status_code == 201
    assert in_tx(module_api, c, "POST", "/api/v1/records", {"label": label, "data": {"x": 1}}).status_code == 201
    assert_rest_error(commit(module_api, c), 409, "conflict")
    assert ids_of(module_api, label) == {rid}


def test_records_read_by_relationship_reads_conflict_too(module_api):
    """A relationship listing reads its record, and a relationship search reads the
    endpoints its record filters look at: inside a transaction those are reads like any other
    (BEHAVIOUR.md §5), so a newer committed version of one fails the commit. Records the reads
    do not look at do not."""
    label = unique("TXQ")
    a, b, c = (module_api.create(label, {"n": i}) for i in range(3))
    assert module_api.post(f"/api/v1/records/{a}/relationships", {"targetIds": b, "type": "R"}).status_code == 201

    def run(read, change, conflicts):
        tx = begin(module_api, ttl=20000)
        method, path, body = read
        r = in_tx(module_api, tx, method, path, body)
        assert r.status_code == 200 and r.json()["data"]["total"] == 1, r.text
        assert in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"x": 1}}).status_code == 201
        assert module_api.patch(f"/api/v1/records/{change}", {"data": {"m": 1}}).status_code == 201
        r = commit(module_api, tx)
        if conflicts:
            assert_rest_error(r, 409, "conflict", message_contains=[change])
        else:
            assert r.status_code == 200, r.text

    listing = ("GET", f"/api/v1/records/{a}/relationships", None)
    search = ("POST", "/api/v1/relationships/search", {"where": {"sourceRecord": {"n": 0}}})
    run(listing, a, True)
    run(search, a, True)
    run(listing, c, False)


def test_relationships_read_or_written_conflict_when_another_commit_changes_them(module_api):
    """Attaching or detaching does not change a record's version, so the relationships a
    transaction reads or writes are remembered apart: a commit that would overwrite, undo or
    delete a relationship another client committed meanwhile answers 409 (no lost update)."""
    label = unique("TXR")

    def pair(rel=None):
        a, b = module_api.create(label, {"n": 1}), module_api.create(label, {"n": 2})
        if rel is not None:
            r = module_api.post(f"/api/v1/records/{a}/relationships", {"targetIds": [b], "type": "T", "properties": rel})
            assert r.status_code == 201, r.text
        return a, b

    def rels(a):
        return [(x["type"], x["properties"]) for x in module_api.get(f"/api/v1/records/{a}/relationships").json()["data"]["data"]]

    def attach(a, b, w, tx=None):
        body = {"targetIds": [b], "type": "T", "properties": {"w": w}}
        r = in_tx(module_api, tx, "POST", f"/api/v1/records/{a}/relationships", body) if tx else \
            module_api.post(f"/api/v1/records/{a}/relationships", body)
        assert r.status_code == 201, r.text

    # an attach inside, the same attach outside: the inside one would overwrite w=2
    a, b = pair()
    tx = begin(module_api, ttl=20000)
    attach(a, b, 1, tx)
    attach(a, b, 2)
    assert_rest_error(commit(module_api, tx), 409, "conflict", message_contains=[a, b])
    assert rels(a) == [("T", {"w": 2})]
    # a detach inside, a detach and a new attach outside: the commit would remove the new one
    a, b = pair({"w": 0})
    tx = begin(module_api, ttl=20000)
    assert in_tx(module_api, tx, "PUT", f"/api/v1/records/{a}/relationships", {"targetIds": [b]}).status_code == 200
    assert module_api.put(f"/api/v1/records/{a}/relationships", {"targetIds": [b]}).status_code == 200
    attach(a, b, 9)
    assert_rest_error(commit(module_api, tx), 409, "conflict")
    assert rels(a) == [("T", {"w": 9})]
    # a record deleted inside, a relationship to it attached outside
    a, b = pair()
    tx = begin(module_api, ttl=20000)
    assert in_tx(module_api, tx, "DELETE", f"/api/v1/records/{b}").status_code == 200
    attach(a, b, 3)
    assert_rest_error(commit(module_api, tx), 409, "conflict", message_contains=[b])
    assert rels(a) == [("T", {"w": 3})]
    # a re-attach inside, a detach outside: the commit would bring the relationship back
    a, b = pair({"w": 0})
    tx = begin(module_api, ttl=20000)
    attach(a, b, 5, tx)
    assert module_api.put(f"/api/v1/records/{a}/relationships", {"targetIds": [b]}).status_code == 200
    assert_rest_error(commit(module_api, tx), 409, "conflict")
    assert rels(a) == []
    # a listing read inside, an attach outside; a search hit read inside, its removal outside
    a, b = pair({"w": 0})
    c = module_api.create(label, {"n": 3})
    for read, change in [
        (("GET", f"/api/v1/records/{a}/relationships", None), lambda: attach(a, c, 1)),
        (("POST", "/api/v1/relationships/search", {"where": {"sourceRecord": {"$id": a}, "w": 0}}),
         lambda: module_api.put(f"/api/v1/records/{a}/relationships", {"targetIds": [b], "typeOrTypes": "T"})),
    ]:
        tx = begin(module_api, ttl=20000)
        r = in_tx(module_api, tx, *read)
        assert r.status_code == 200 and r.json()["data"]["total"] >= 1, r.text
        assert in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"x": 1}}).status_code == 201
        change()
        assert_rest_error(commit(module_api, tx), 409, "conflict", message_contains=[a])
    # Relationships the transaction neither read nor wrote do not conflict: attaches to one
    # shared record from two transactions, to different targets, both commit.
    hub = module_api.create(label, {"hub": True})
    t1, t2 = begin(module_api, ttl=20000), begin(module_api, ttl=20000)
    x, y = module_api.create(label, {"n": 4}), module_api.create(label, {"n": 5})
    attach(hub, x, 1, t1)
    attach(hub, y, 1, t2)
    assert commit(module_api, t1).status_code == 200
    assert commit(module_api, t2).status_code == 200, "attaches to other targets are not a conflict"
    assert len(rels(hub)) == 2


def test_refused_staged_write_leaves_no_check_behind(module_api):
    """A staged write refused with its error is not staged, and what it would have read is
    not remembered either: a later change of that record does not abort the commit."""
    label = unique("TXN")
    a, b = module_api.create(label, {"v": 1}), module_api.create(label, {"v": 2})
    r = tx_op(module_api, {"kind": "begin", "ttlMs": 20000})
    tx = r.json()["response"]["transactionId"]
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "retypeRecord", "id": a, "fromLabel": "WRONG", "toLabel": "X"}})
    assert r.status_code == 409, r.text
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "updateRecord", "record": {"id": b}, "properties": {"v": 3}}})
    assert r.status_code == 200, r.text
    assert module_api.patch(f"/api/v1/records/{a}", {"data": {"v": 99}}).status_code == 201
    r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
    assert r.json()["response"]["status"] == "committed", r.text
    assert module_api.record(b)["v"] == 3 and module_api.record(a)["v"] == 99


def test_search_defaults_are_plain_searches_inside_a_transaction(module_api):
    """SearchDto's defaults (`select: {}`, `aggregate: {}`, `groupBy: []`) and a `groupBy`
    without aggregation are plain searches, which a transaction takes (they were 501)."""
    label = unique("TXD")
    rid = module_api.create(label, {"v": 1})
    tx = begin(module_api, ttl=20000)
    r = in_tx(module_api, tx, "POST", "/api/v1/records", {"label": label, "data": {"v": 2}})
    assert r.status_code == 201
    for extra in ({"select": {}}, {"aggregate": {}}, {"groupBy": []}, {"groupBy": ["$record.v"]},
                  {"select": {}, "aggregate": {}, "groupBy": []}):
        r = in_tx(module_api, tx, "POST", "/api/v1/records/search", {"labels": [label], **extra})
        assert r.status_code == 200, (extra, r.text)
        assert r.json()["data"]["total"] == 2, (extra, r.text)
    r = in_tx(module_api, tx, "POST", "/api/v1/records/search",
              {"labels": [label], "aggregate": {"n": {"fn": "count", "alias": "$record"}}})
    assert_rest_error(r, 501, "unsupported")
    assert rid in ids_of(module_api, label)


def test_long_open_transaction_does_not_block_writers(module_api):
    label = unique("TXB")
    rid = module_api.create(label, {"n": 0})
    tx = begin(module_api, ttl=20000)
    assert in_tx(module_api, tx, "PATCH", f"/api/v1/records/{rid}", {"n": 1}).status_code == 201
    for i in range(20):
        assert module_api.patch(f"/api/v1/records/{rid}", {"n": 100 + i}).status_code == 201
    assert module_api.record(rid)["n"] == 119
    assert_rest_error(commit(module_api, tx), 409, "conflict")


# ---------------------------------------------------------------------------------------
# Protocol v1
# ---------------------------------------------------------------------------------------


def tx_op(api, body):
    return api.protocol({"kind": "transaction", "transaction": body})


def test_protocol_begin_stage_commit(module_api):
    label = unique("TXP")
    r = tx_op(module_api, {"kind": "begin", "ttlMs": 10000})
    assert r.status_code == 200, r.text
    tx = r.json()["response"]["transactionId"]
    rid = "019a0000-0000-7000-8000-" + unique("")[1:13].ljust(12, "0")
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {"kind": "createRecord", "label": label, "id": rid, "properties": {"a": 1}}})
    assert r.json()["response"] == {"kind": "transactionStaged"}
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {"kind": "updateRecord", "record": {"id": rid}, "properties": {"b": 2}, "replace": False}})
    assert r.status_code == 200, r.text
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {"kind": "getRecord", "record": {"id": rid}}})
    got = r.json()["response"]
    assert got["kind"] == "transactionGet" and got["record"]["properties"] == {"a": 1, "b": 2}
    assert module_api.get(f"/api/v1/records/{rid}").status_code == 404
    r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
    assert r.json()["response"] == {"kind": "transactionOutcome", "transactionId": tx, "status": "committed", "retryable": False}
    assert module_api.record(rid)["b"] == 2


def test_staged_creates_are_checked_against_each_other_and_read_back(module_api):
    """A transaction of creates validates each new create on its own (nothing staged before it
    can change its answer); a second create of a staged id is still refused, and reads in the
    transaction see every staged create."""
    label = unique("TXC")
    tx = tx_op(module_api, {"kind": "begin", "ttlMs": 10000}).json()["response"]["transactionId"]
    base = "019a0001-0000-7000-8000-" + unique("")[1:13].ljust(12, "0")
    ids = [base[:-2] + "%02d" % i for i in range(5)]
    for i, rid in enumerate(ids):
        r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
            "kind": "createRecord", "label": label, "id": rid, "properties": {"i": i}}})
        assert r.json()["response"] == {"kind": "transactionStaged"}, r.text
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "createRecord", "label": label, "id": ids[2], "properties": {"i": 99}}})
    assert r.status_code == 409 and "already exists" in r.text, r.text
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "getRecord", "record": {"id": ids[4]}}})
    assert r.json()["response"]["record"]["properties"] == {"i": 4}
    r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
    assert r.json()["response"]["status"] == "committed", r.text
    page = module_api.post("/api/v1/records/search", {"labels": [label], "limit": 100}).json()["data"]
    assert page["total"] == 5 and sorted(x["i"] for x in page["data"]) == [0, 1, 2, 3, 4]
    # A create of an id that is already committed is refused when staged, not at commit.
    tx = tx_op(module_api, {"kind": "begin", "ttlMs": 10000}).json()["response"]["transactionId"]
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "createRecord", "label": label, "id": ids[0], "properties": {"i": 7}}})
    assert r.status_code == 409 and "already exists" in r.text, r.text
    r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
    assert r.json()["response"]["status"] == "committed", r.text
    assert module_api.record(ids[0])["i"] == 0


def test_a_commit_that_lost_to_another_is_retryable_whatever_it_lost(module_api):
    """Every staged write was checked when staged, so a commit refused later lost to another
    commit: a record its link needs deleted since is as retryable as a changed record."""
    label = unique("TXR")
    a, b = module_api.create(label, {"v": 1}), module_api.create(label, {"v": 2})
    tx = tx_op(module_api, {"kind": "begin"}).json()["response"]["transactionId"]
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "createRelationship", "source": {"id": a}, "target": {"id": b}, "relationType": "KNOWS"}})
    assert r.status_code == 200, r.text
    assert module_api.delete(f"/api/v1/records/{b}").status_code == 200
    out = tx_op(module_api, {"kind": "commit", "transactionId": tx}).json()["response"]
    assert (out["status"], out["retryable"]) == ("aborted", True), out
    assert b in out["reason"] and "another commit" in out["reason"], out
    assert module_api.get(f"/api/v1/records/{a}/relationships").json()["data"]["total"] == 0


def test_protocol_stage_header_and_update_options(module_api):
    """A transaction header naming another transaction than `stage` is a 400 (nothing staged);
    a staged `updateRecord` takes a create's write options."""
    label = unique("TXSH")
    rid = module_api.create(label, {"v": 1})
    t1 = tx_op(module_api, {"kind": "begin"}).json()["response"]["transactionId"]
    t2 = tx_op(module_api, {"kind": "begin"}).json()["response"]["transactionId"]
    stage = {"kind": "transaction", "transaction": {"kind": "stage", "transactionId": t1, "mutation": {
        "kind": "updateRecord", "record": {"id": rid}, "properties": {"v": 2, "e": ""},
        "options": {"skipEmptyValues": True}}}}
    r = module_api.post("/protocol/v1/execute", {"protocolVersion": 1, "operation": stage},
                        headers={"X-Transaction-Id": t2})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=[t1, t2])
    r = module_api.post("/protocol/v1/execute", {"protocolVersion": 1, "operation": stage},
                        headers={"X-Transaction-Id": t1.upper()})
    assert r.status_code == 200, r.text
    out = tx_op(module_api, {"kind": "commit", "transactionId": t1}).json()["response"]
    assert out["status"] == "committed", out
    rec = module_api.record(rid)
    assert rec["v"] == 2 and "e" not in rec, rec
    tx_op(module_api, {"kind": "rollback", "transactionId": t2})


def test_rest_begin_takes_autocommit(module_api):
    """`autocommit` over REST as in Protocol v1: true commits at expiry; another type is a 400."""
    for bad in ["true", 1, [], {}]:
        r = module_api.post("/api/v1/tx", {"ttl": 1000, "autocommit": bad})
        assert_rest_error(r, 400, "invalid_argument", message_contains=["autocommit"])
    label = unique("TXAUTO")
    tx = module_api.post("/api/v1/tx", {"ttl": 200, "autocommit": True}).json()["data"]["id"]
    r = module_api.post("/api/v1/records", {"label": label, "data": {"v": 1}}, headers={"X-Transaction-Id": tx})
    assert r.status_code in (200, 201), r.text
    deadline = time.time() + 5
    while time.time() < deadline and module_api.labels({}).get(label, 0) == 0:
        time.sleep(0.05)
    assert module_api.labels({}).get(label) == 1


def test_protocol_commit_reports_conflict_and_expiry_as_outcomes(module_api):
    label = unique("TXO")
    rid = module_api.create(label, {"v": 1})
    tx = tx_op(module_api, {"kind": "begin"}).json()["response"]["transactionId"]
    tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {"kind": "updateRecord", "record": {"id": rid}, "properties": {"v": 2}}})
    module_api.patch(f"/api/v1/records/{rid}", {"v": 3})
    r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
    assert r.status_code == 200
    out = r.json()["response"]
    assert out["status"] == "aborted" and out["retryable"] is True and rid in out["reason"]
    short = tx_op(module_api, {"kind": "begin", "ttlMs": 200}).json()["response"]["transactionId"]
    time.sleep(0.6)
    out = tx_op(module_api, {"kind": "commit", "transactionId": short}).json()["response"]
    assert out["status"] == "expired"
    assert_protocol_error(tx_op(module_api, {"kind": "begin", "ttlMs": 60000}), 400, "invalid_argument")


def test_protocol_autocommit_commits_at_expiry(module_api):
    label = unique("TXA")
    tx = tx_op(module_api, {"kind": "begin", "ttlMs": 300, "autocommit": True}).json()["response"]["transactionId"]
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {"kind": "createRecord", "label": label, "properties": {"a": 1}}})
    assert r.status_code == 200, r.text
    assert ids_of(module_api, label) == set()
    deadline = time.time() + 5
    while time.time() < deadline and not ids_of(module_api, label):
        time.sleep(0.1)
    assert len(ids_of(module_api, label)) == 1
    # The id is remembered as expired (BEHAVIOUR.md §5) with what the autocommit did: REST
    # and stage answer 404 transaction_expired, Protocol commit the outcome.
    r = module_api.get(f"/api/v1/tx/{tx}")
    assert_rest_error(r, 404, "transaction_expired", message_contains=["committed (autocommit)"])
    assert_protocol_error(tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "createRecord", "label": label, "properties": {"a": 2}}}), 404, "transaction_expired")
    out = tx_op(module_api, {"kind": "commit", "transactionId": tx}).json()["response"]
    assert (out["status"], out["retryable"]) == ("committed", False), out
    assert len(ids_of(module_api, label)) == 1


def test_protocol_autocommit_refused_at_expiry_is_reported(module_api):
    """An autocommit that conflicts at expiry applies nothing, and the commit asked for
    afterwards reports it as aborted (retryable) instead of an unknown id."""
    label = unique("TXR")
    rid = module_api.create(label, {"n": 0})
    tx = tx_op(module_api, {"kind": "begin", "ttlMs": 400, "autocommit": True}).json()["response"]["transactionId"]
    r = tx_op(module_api, {"kind": "stage", "transactionId": tx, "mutation": {
        "kind": "updateRecord", "record": {"id": rid}, "properties": {"n": 1}}})
    assert r.status_code == 200, r.text
    assert module_api.patch(f"/api/v1/records/{rid}", {"data": {"n": 2}}).status_code in (200, 201)
    deadline = time.time() + 5
    while time.time() < deadline and module_api.get(f"/api/v1/tx/{tx}").status_code == 200:
        time.sleep(0.1)
    r = module_api.get(f"/api/v1/tx/{tx}")
    assert_rest_error(r, 404, "transaction_expired", message_contains=["autocommit was refused"])
    out = tx_op(module_api, {"kind": "commit", "transactionId": tx}).json()["response"]
    assert (out["status"], out["retryable"]) == ("aborted", True) and rid in out["reason"], out
    assert module_api.record(rid)["n"] == 2


def test_a_whole_ttl_may_be_written_as_a_float(module_api):
    r = module_api.post("/api/v1/tx", {"ttl": 5000.0})
    assert r.status_code == 200 and r.json()["data"]["ttl"] == 5000, r.text
    r = tx_op(module_api, {"kind": "begin", "ttlMs": 5000.0})
    assert r.status_code == 200 and r.json()["response"]["ttlMs"] == 5000, r.text
    for bad in (1.5, -1.0, "5000"):
        assert_rest_error(module_api.post("/api/v1/tx", {"ttl": bad}), 400, "invalid_argument",
                          message_contains=["ttl"])
        assert_protocol_error(tx_op(module_api, {"kind": "begin", "ttlMs": bad}), 400, "invalid_argument")


def test_ttl_and_ttlms_are_taken_on_both_surfaces(module_api):
    # REST names it `ttl`, Protocol v1 `ttlMs`; a client sending the other name must not get
    # the default silently.
    r = module_api.post("/api/v1/tx", {"ttlMs": 7000})
    assert r.status_code == 200 and r.json()["data"]["ttl"] == 7000, r.text
    r = tx_op(module_api, {"kind": "begin", "ttl": 7000})
    assert r.status_code == 200 and r.json()["response"]["ttlMs"] == 7000, r.text
    assert_rest_error(module_api.post("/api/v1/tx", {"ttl": 7000, "ttlMs": 7000}), 400,
                      "invalid_argument", message_contains=["ttlMs"])
    assert_protocol_error(tx_op(module_api, {"kind": "begin", "ttl": 7000, "ttlMs": 7000}), 400,
                          "invalid_argument")
    assert_rest_error(module_api.post("/api/v1/tx", {"ttlMs": 30001}), 400, "invalid_argument")


# ---------------------------------------------------------------------------------------
# The SDK in direct mode
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def db(module_engine):
    return RushDB(DEV_TOKEN, direct=True, engine_url=module_engine.url)


def test_sdk_transaction_commit_and_rollback(db, module_api):
    label = unique("TXS")
    tx = db.tx.begin(ttl=10000)
    a = db.records.create(label, {"name": "a"}, transaction=tx)
    assert a["name"] == "a"
    b = db.records.create(label, {"name": "b"}, transaction=tx)
    db.records.attach(a.id, b.id, {"type": "KNOWS"}, transaction=tx)
    db.records.update(a.id, {"age": 3}, transaction=tx)
    assert ids_of(module_api, label) == set()
    tx.commit()
    assert ids_of(module_api, label) == {a.id, b.id}
    assert module_api.record(a.id)["age"] == 3
    rels = module_api.get(f"/api/v1/records/{a.id}/relationships").json()["data"]["data"]
    assert [(x["targetId"], x["type"]) for x in rels] == [(b.id, "KNOWS")]

    tx2 = db.tx.begin()
    db.records.create(label, {"name": "c"}, transaction=tx2)
    db.records.delete_by_id(a.id, transaction=tx2)
    tx2.rollback()
    assert ids_of(module_api, label) == {a.id, b.id}


def test_sdk_commit_conflict_raises(db, module_api):
    label = unique("TXSC")
    rid = module_api.create(label, {"v": 1})
    tx = db.tx.begin(ttl=10000)
    db.records.update(rid, {"v": 2}, transaction=tx)
    module_api.patch(f"/api/v1/records/{rid}", {"v": 5})
    with pytest.raises(Exception):
        tx.commit()
    assert module_api.record(rid)["v"] == 5


# ---------------------------------------------------------------------------------------
# Invariants under concurrency and crashes
# ---------------------------------------------------------------------------------------


def test_bank_transfers_keep_the_sum_and_lose_no_update(engine):
    api = engine.client()
    label = unique("ACCT")
    accounts = [api.create(label, {"balance": 1000, "moves": 0}) for _ in range(100)]
    committed = [0]
    lock = threading.Lock()
    errors = []

    def client(seed):
        rng = random.Random(seed)
        s = engine.client().session
        try:
            for _ in range(12):
                while True:
                    a, b = rng.sample(accounts, 2)
                    amount = rng.randint(1, 50)
                    tx = s.post(engine.url + "/api/v1/tx", json={"ttl": 10000}, headers=api.headers()).json()["data"]["id"]
                    h = api.headers({"X-Transaction-Id": tx})
                    ra = s.get(f"{engine.url}/api/v1/records/{a}", headers=h).json()["data"]
                    rb = s.get(f"{engine.url}/api/v1/records/{b}", headers=h).json()["data"]
                    s.patch(f"{engine.url}/api/v1/records/{a}", json={"balance": ra["balance"] - amount, "moves": ra["moves"] + 1}, headers=h)
                    s.patch(f"{engine.url}/api/v1/records/{b}", json={"balance": rb["balance"] + amount, "moves": rb["moves"] + 1}, headers=h)
                    r = s.post(f"{engine.url}/api/v1/tx/{tx}/commit", json={}, headers=api.headers())
                    if r.status_code == 200:
                        with lock:
                            committed[0] += 1
                        break
                    assert r.status_code == 409, r.text
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    rows = api.search({"labels": [label], "limit": 1000})["data"]
    assert sum(r["balance"] for r in rows) == 100 * 1000
    # every committed transfer touched two accounts exactly once: no lost update
    assert committed[0] == 32 * 12
    assert sum(r["moves"] for r in rows) == 2 * committed[0]


CRASH_CYCLES = int(os.environ.get("TX_CRASH_CYCLES", "20"))


def test_kill_during_commits_leaves_each_transaction_whole(engine):
    """A loop of 3-write transactions from 4 clients, kill -9 at a random point, restart:
    every transaction is whole or absent, and every acknowledged commit is present.
    TX_CRASH_CYCLES (default 20) sets the number of cycles (1000 for a long run)."""
    label = unique("TXK")
    rng = random.Random(7)
    acked = []

    for cycle in range(CRASH_CYCLES):
        api = engine.client()
        stop = threading.Event()

        def writer(first):
            s = engine.client().session
            i = first
            while not stop.is_set():
                try:
                    tx = s.post(engine.url + "/api/v1/tx", json={"ttl": 10000}, headers=api.headers(), timeout=5).json()["data"]["id"]
                    h = api.headers({"X-Transaction-Id": tx})
                    for part in range(3):
                        s.post(engine.url + "/api/v1/records", json={"label": label, "data": {"tx": i, "part": part}}, headers=h, timeout=5)
                    if s.post(f"{engine.url}/api/v1/tx/{tx}/commit", json={}, headers=api.headers(), timeout=5).status_code == 200:
                        acked.append(i)
                except Exception:
                    return
                i += 1

        threads = [threading.Thread(target=writer, args=((cycle * 4 + n) * 1_000_000,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, 0.5))
        engine.kill9()
        stop.set()
        for t in threads:
            t.join()
        engine.start()

    rows = engine.client().all_records([label])
    parts = {}
    for r in rows:
        parts.setdefault(r["tx"], []).append(r["part"])
    assert all(sorted(p) == [0, 1, 2] for p in parts.values()), {k: v for k, v in parts.items() if sorted(v) != [0, 1, 2]}
    assert acked, "no transaction committed before the kills"
    assert set(acked) <= set(parts), "an acknowledged commit was lost"


def test_links_in_one_commit_stay_one_per_pair_and_type(module_api):
    """Attach keeps one relationship per (source, target, type) when one commit holds the
    attach twice, a retype of an endpoint before it (the relationship then counts under the
    old label), or a detach and two re-attaches: the writer's shortcut for links that are new
    by their counters must not apply to any of these."""
    api = module_api
    label, other = unique("TXL"), unique("TXM")
    s, t, u = api.create(label, {"n": 1}), api.create(label, {"n": 2}), api.create(other, {"n": 3})

    def attach(a, b):
        return lambda tx: ("POST", f"/api/v1/records/{a}/relationships", {"targetIds": b, "type": "KNOWS"})

    def run(*stages):
        tx = begin(api, ttl=10000)
        for st in stages:
            method, path, body = st(tx)
            r = in_tx(api, tx, method, path, body)
            assert r.status_code in (200, 201), r.text
        r = commit(api, tx)
        assert r.status_code == 200, r.text

    def knows(a, b):
        r = api.get(f"/api/v1/records/{a}/relationships")
        assert r.status_code == 200, r.text
        return sum(1 for x in r.json()["data"]["data"] if x["type"] == "KNOWS" and (x["sourceId"], x["targetId"]) == (a, b))

    # twice in one commit, the counter (label, KNOWS, label) being 0 before it
    run(attach(s, t), attach(s, t), attach(s, u))
    assert (knows(s, t), knows(s, u)) == (1, 1)
    # a retype of the source first: (other, KNOWS, label) is 0, yet s -> t exists
    run(lambda tx: ("PATCH", f"/api/v1/records/{s}", {"label": other}), attach(s, t))
    assert knows(s, t) == 1
    # a detach first, then two attaches
    run(lambda tx: ("PUT", f"/api/v1/records/{s}/relationships", {"targetIds": t, "typeOrTypes": "KNOWS"}),
        attach(s, t), attach(s, t))
    assert knows(s, t) == 1
    r = api.protocol({"kind": "describe", "describe": {"kind": "schema"}})
    counts = {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"] for x in r.json()["response"]["schema"]["relationships"]}
    assert counts[(other, "KNOWS", label)] == 1 and counts[(other, "KNOWS", other)] == 1


def test_a_staged_relationship_keeps_its_id_through_reads_and_commit(module_api):
    """A relationship attached inside a transaction has one id: every read in the
    transaction shows the same one, and the commit stores it (BEHAVIOUR.md §3: every
    relationship has its own stored id)."""
    api = module_api
    label = unique("TXI")
    a, b = api.create(label, {"n": 1}), api.create(label, {"n": 2})
    tx = begin(api, ttl=10000)
    r = in_tx(api, tx, "POST", f"/api/v1/records/{a}/relationships", {"targetIds": b, "type": "R"})
    assert r.status_code == 201, r.text

    def rel_ids(tx=None):
        path = f"/api/v1/records/{a}/relationships"
        r = in_tx(api, tx, "GET", path) if tx else api.get(path)
        assert r.status_code == 200, r.text
        return [x["id"] for x in r.json()["data"]["data"]]

    seen = [rel_ids(tx) for _ in range(3)]
    assert len(seen[0]) == 1 and seen == [seen[0]] * 3
    assert rel_ids() == []
    assert commit(api, tx).status_code == 200
    assert rel_ids() == seen[0]


def test_protocol_commit_sent_again_answers_how_the_transaction_ended(module_api):
    """Protocol v1 commit always answers with the outcome (PROTOCOL.md): sent again after the
    transaction ended (a retry after a lost answer) it tells committed from aborted. REST
    answers the ended id with 404 as before; another tenant or an unknown id learns nothing."""
    label = unique("TXE")
    rid = module_api.create(label, {"n": 0})

    def begin_p():
        return tx_op(module_api, {"kind": "begin", "ttlMs": 20000}).json()["response"]["transactionId"]

    def commit_p(tx):
        r = tx_op(module_api, {"kind": "commit", "transactionId": tx})
        assert r.status_code == 200, r.text
        return r.json()["response"]

    done = begin_p()
    assert commit_p(done)["status"] == "committed"
    again = commit_p(done)
    assert (again["status"], again["retryable"], again["transactionId"]) == ("committed", False, done)
    assert_rest_error(commit(module_api, done), 404, "not_found")
    lost = begin_p()
    tx_op(module_api, {"kind": "stage", "transactionId": lost, "mutation": {
        "kind": "updateRecord", "record": {"id": rid}, "properties": {"n": 1}}})
    assert module_api.patch(f"/api/v1/records/{rid}", {"data": {"n": 2}}).status_code == 201
    first = commit_p(lost)
    assert (first["status"], first["retryable"]) == ("aborted", True)
    assert commit_p(lost) == first
    gone = begin_p()
    assert tx_op(module_api, {"kind": "rollback", "transactionId": gone}).status_code == 200
    out = commit_p(gone)
    assert (out["status"], out["retryable"]) == ("aborted", False) and "rolled back" in out["reason"]
    never = "019a0000-0000-7000-8000-00000000abcd"
    assert_protocol_error(tx_op(module_api, {"kind": "commit", "transactionId": never}), 404, "not_found")
    assert module_api.record(rid)["n"] == 2
