"""Relationships through REST and through the `rushdb` 3.0 SDK in direct mode (Protocol v1):
attach, detach, list, search, create-many / delete-many by key and many-to-many, search
among related records, traversal blocks with $relation / $alias, describe schema, the
validation rules of SPEC.md, and cascading deletes (no dangling relationship, checked by
scanning every relationship).
"""

from __future__ import annotations

import uuid

import pytest
from rushdb import RushDB, RushDBError

from conftest import DEV_TOKEN, assert_protocol_error, assert_rest_error, unique

DEFAULT_TYPE = "__SERVICE__RELATION__DEFAULT__"


def rels_of(api, rid, **params):
    r = api.get(f"/api/v1/records/{rid}/relationships", params=params)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def rel_search(api, body):
    r = api.post("/api/v1/relationships/search", body)
    assert r.status_code == 200, f"{body} -> {r.text}"
    return r.json()["data"]


def find_ids(api, body):
    r = api.post("/api/v1/records/search", body)
    assert r.status_code == 200, f"{body} -> {r.text}"
    return {rec["__id"] for rec in r.json()["data"]["data"]}


def all_relationships(api):
    out, skip = [], 0
    while True:
        page = rel_search(api, {"skip": skip, "limit": 1000})
        out.extend(page["data"])
        if len(page["data"]) < 1000:
            return out
        skip += 1000


@pytest.fixture()
def shop(api):
    """Two customers, three orders, two items; Ann placed o1 and o2, Bob placed o3."""
    ann = api.create("Customer", {"name": "Ann", "country": "DE"})
    bob = api.create("Customer", {"name": "Bob", "country": "FR"})
    o1 = api.create("Order", {"n": 1, "amount": 10})
    o2 = api.create("Order", {"n": 2, "amount": 20})
    o3 = api.create("Order", {"n": 3, "amount": 30})
    i1 = api.create("Item", {"sku": "a", "price": 5})
    i2 = api.create("Item", {"sku": "b", "price": 50})
    for src, tgts in [(ann, [o1, o2]), (bob, [o3])]:
        r = api.post(f"/api/v1/records/{src}/relationships", {"targetIds": tgts, "type": "PLACED"})
        assert r.status_code == 201, r.text
    for o, items in [(o1, [i1]), (o2, [i1, i2]), (o3, [i2])]:
        r = api.post(f"/api/v1/relationships/{o}", {"targetIds": items, "type": "CONTAINS"})
        assert r.status_code == 201, r.text
    return dict(ann=ann, bob=bob, o1=o1, o2=o2, o3=o3, i1=i1, i2=i2)


def test_attach_list_and_relationship_json(api, shop):
    data = rels_of(api, shop["ann"])
    assert data["total"] == 2
    for rel in data["data"]:
        assert set(rel) == {"id", "sourceId", "sourceLabel", "targetId", "targetLabel", "type", "properties"}
        assert rel["sourceId"] == shop["ann"] and rel["sourceLabel"] == "Customer"
        assert rel["targetLabel"] == "Order" and rel["type"] == "PLACED"
        assert uuid.UUID(rel["id"]).version == 7
    assert {r["targetId"] for r in data["data"]} == {shop["o1"], shop["o2"]}
    # An order sees both its customer (stored orientation kept) and its items.
    o2 = rels_of(api, shop["o2"])
    assert o2["total"] == 3
    assert {(r["sourceId"], r["targetId"]) for r in o2["data"]} == {
        (shop["ann"], shop["o2"]), (shop["o2"], shop["i1"]), (shop["o2"], shop["i2"])}
    # skip / limit from the query string
    page = rels_of(api, shop["o2"], skip=1, limit=1)
    assert page["total"] == 3 and len(page["data"]) == 1


def test_attach_same_triple_replaces_properties_and_default_type(api, shop):
    a, b = shop["ann"], shop["bob"]
    r = api.post(f"/api/v1/relationships/{a}", {"targetIds": b, "properties": {"since": 2020, "tags": ["x", "y"]}})
    assert r.status_code == 201
    r = api.post(f"/api/v1/relationships/{a}", {"targetIds": [b], "type": "__RUSHDB__RELATION__DEFAULT__",
                                                 "properties": {"since": 2021}})
    assert r.status_code == 201
    rels = [x for x in rels_of(api, a)["data"] if x["targetId"] == b]
    assert len(rels) == 1, rels
    assert rels[0]["type"] == DEFAULT_TYPE and rels[0]["properties"] == {"since": 2021}
    # direction in: stored as target -> source
    r = api.post(f"/api/v1/records/{a}/relationships", {"targetIds": b, "type": "KNOWS", "direction": "in"})
    assert r.status_code == 201
    knows = [x for x in rels_of(api, a)["data"] if x["type"] == "KNOWS"]
    assert [(k["sourceId"], k["targetId"]) for k in knows] == [(b, a)]


def test_detach_by_type_and_direction(api, shop):
    a, b = shop["ann"], shop["bob"]
    for t in ("A", "B"):
        api.post(f"/api/v1/relationships/{a}", {"targetIds": b, "type": t})
    api.post(f"/api/v1/relationships/{b}", {"targetIds": a, "type": "A"})
    between = lambda: sorted((x["sourceId"] == a, x["type"]) for x in rels_of(api, a)["data"] if b in (x["sourceId"], x["targetId"]))
    assert between() == [(False, "A"), (True, "A"), (True, "B")]
    r = api.put(f"/api/v1/relationships/{a}", {"targetIds": [b], "typeOrTypes": "A", "direction": "out"})
    assert r.status_code == 200, r.text
    assert between() == [(False, "A"), (True, "B")]
    r = api.put(f"/api/v1/records/{a}/relationships", {"targetIds": b})  # any type, both ways
    assert r.status_code == 200
    assert between() == []


def test_relationship_search(api, shop):
    api.post(f"/api/v1/relationships/{shop['o1']}", {"targetIds": shop["i2"], "type": "CONTAINS",
                                                     "properties": {"qty": 3}})
    out = rel_search(api, {"where": {"type": "CONTAINS", "qty": {"$gte": 2}}})
    assert out["total"] == 1 and out["data"][0]["sourceId"] == shop["o1"] and out["data"][0]["targetId"] == shop["i2"]
    out = rel_search(api, {"source": {"labels": ["Customer"], "where": {"country": "DE"}}, "target": {"labels": ["Order"]}})
    assert {r["targetId"] for r in out["data"]} == {shop["o1"], shop["o2"]} and out["total"] == 2
    out = rel_search(api, {"target": {"labels": ["Item"], "where": {"sku": "b"}}, "where": {"type": "CONTAINS"}})
    assert {r["sourceId"] for r in out["data"]} == {shop["o1"], shop["o2"], shop["o3"]}
    # no direction: undirected matching of the selectors; "out" keeps the stored orientation
    out = rel_search(api, {"source": {"labels": ["Order"]}, "target": {"labels": ["Customer"]}})
    assert out["total"] == 3
    out = rel_search(api, {"source": {"labels": ["Order"]}, "target": {"labels": ["Customer"]}, "direction": "out"})
    assert out["total"] == 0
    # paging: query string, body wins
    r = api.post("/api/v1/relationships/search?limit=2&skip=0", {"where": {"type": "CONTAINS"}})
    assert r.status_code == 200 and len(r.json()["data"]["data"]) == 2 and r.json()["data"]["total"] == 5
    r = api.post("/api/v1/relationships/search?limit=2", {"where": {"type": "CONTAINS"}, "limit": 4})
    assert len(r.json()["data"]["data"]) == 4
    out = rel_search(api, {"where": {"type": "CONTAINS"}, "orderBy": {"qty": "desc"}, "limit": 1})
    assert out["data"][0]["properties"] == {"qty": 3}


def test_traversal_blocks(api, shop):
    s = shop
    assert find_ids(api, {"labels": ["Order"], "where": {"Customer": {"country": "DE"}}}) == {s["o1"], s["o2"]}
    assert find_ids(api, {"labels": ["Order"], "where": {"Customer": {"country": "DE"}, "amount": {"$gt": 15}}}) == {s["o2"]}
    # direction is seen from the current record: orders are targets of PLACED
    assert find_ids(api, {"labels": ["Order"], "where": {"Customer": {"$relation": {"type": "PLACED", "direction": "in"}}}}) == {s["o1"], s["o2"], s["o3"]}
    assert find_ids(api, {"labels": ["Order"], "where": {"Customer": {"$relation": {"type": "PLACED", "direction": "out"}}}}) == set()
    assert find_ids(api, {"labels": ["Order"], "where": {"Customer": {"$relation": "CONTAINS"}}}) == set()
    # nesting: customers who ordered an expensive item; two hops in one block
    assert find_ids(api, {"labels": ["Customer"], "where": {"Order": {"Item": {"price": {"$gt": 40}}}}}) == {s["ann"], s["bob"]}
    assert find_ids(api, {"labels": ["Customer"], "where": {"Item": {"$relation": {"direction": "out", "hops": 2}, "sku": "a"}}}) == {s["ann"]}
    assert find_ids(api, {"labels": ["Customer"], "where": {"Item": {"$relation": {"hops": {"min": 1, "max": 2}}, "sku": "a"}}}) == {s["ann"]}
    # composition with $not / $or
    assert find_ids(api, {"labels": ["Order"], "where": {"$not": {"Item": {"sku": "a"}}}}) == {s["o3"]}
    assert find_ids(api, {"labels": ["Order"], "where": {"$or": [{"Customer": {"name": "Bob"}}, {"n": 1}]}}) == {s["o1"], s["o3"]}
    # search among the records related to one record (REST route)
    r = api.post(f"/api/v1/records/{s['o2']}/search", {"labels": ["Item"]})
    assert r.status_code == 200 and {x["__id"] for x in r.json()["data"]["data"]} == {s["i1"], s["i2"]}
    r = api.post(f"/api/v1/records/{s['o2']}/search", {"where": {"price": {"$lt": 10}}})
    assert {x["__id"] for x in r.json()["data"]["data"]} == {s["i1"]}


def test_explain_names_the_traversal_side(api, shop):
    r = api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": {
        "labels": ["Order"], "predicate": {"Customer": {"name": "Ann"}}}}})
    assert r.status_code == 200, r.text
    plan = r.json()["response"]["plan"]
    assert plan["actualRows"] == 2
    assert any("from the related side" in t for t in plan["traversal"]), plan
    r = api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": {
        "labels": ["Order"], "predicate": {"n": 3, "Customer": {}}}}})
    plan = r.json()["response"]["plan"]
    assert plan["actualRows"] == 1
    assert any("from each record's side" in t for t in plan["traversal"]), plan


def test_two_hop_block_is_resolved_from_the_selective_end(api):
    # 40 customers (2 in DE), 10 orders each, 3 items on each customer's first order: 400
    # orders but 120 items. The ORDER block under ITEM is bounded by its CUSTOMER block (2
    # customers x 10 orders each = 20), so it is resolved from there, not from the 120 items.
    docs = [{"country": "DE" if c < 2 else "FR", "c": c,
             "ORDER": [{"o": o, **({"ITEM": [{"i": i} for i in range(3)]} if o == 0 else {})}
                       for o in range(10)]} for c in range(40)]
    r = api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": "CUSTOMER", "documents": docs,
                                                   "options": {"relationshipType": "HAS"}}})
    assert r.status_code == 200, r.text
    query = {"labels": ["ITEM"], "predicate": {"ORDER": {"$relation": {"type": "HAS", "direction": "in"},
                                                         "CUSTOMER": {"country": "DE"}}}}
    r = api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": query}})
    plan = r.json()["response"]["plan"]
    assert plan["actualRows"] == 2 * 3, plan
    assert any(t.startswith("ORDER: from the related side") for t in plan["traversal"]), plan
    r = api.protocol({"kind": "query", "query": {"kind": "records", "query": {**query, "limit": 1}}})
    assert r.json()["response"]["total"] == 6


def test_blocks_decided_from_ids_follow_the_labels_the_counters_show(api):
    # 40 customers (8 in DE) with 6 orders each, linked CUSTOMER -[HAS]-> ORDER. Resolved from
    # the DE customers, the block's reached records are all orders while the counters say so,
    # and matches are then decided from ids (no record read); once a NOTE also hangs off a DE
    # customer under the same type, labels must be read again. Both must give the same answers.
    statuses = ["paid", "open", "shipped"]
    docs = [{"country": "DE" if c % 5 == 0 else "FR", "c": c,
             "ORDER": [{"o": o, "status": statuses[(c + o) % 3]} for o in range(6)]} for c in range(40)]
    r = api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": "CUSTOMER", "documents": docs,
                                                   "options": {"relationshipType": "HAS"}}})
    assert r.status_code == 200, r.text
    de_paid = sum(1 for c in range(40) if c % 5 == 0 for o in range(6) if statuses[(c + o) % 3] == "paid")
    de_orders = sum(6 for c in range(40) if c % 5 == 0)
    block = {"$relation": {"type": "HAS", "direction": "in"}, "country": "DE"}

    def total(labels, where):
        r = api.post("/api/v1/records/search", {"labels": labels, "where": where, "limit": 1})
        assert r.status_code == 200, r.text
        return r.json()["data"]["total"]

    def check(extra):
        assert total(["ORDER"], {"status": "paid", "CUSTOMER": block}) == de_paid
        assert total(["ORDER"], {"CUSTOMER": block}) == de_orders
        assert len(find_ids(api, {"labels": ["ORDER"], "where": {"CUSTOMER": block}})) == de_orders
        assert total([], {"status": "paid", "CUSTOMER": block}) == de_paid + extra
        assert total(["NOTE"], {"status": "paid", "CUSTOMER": block}) == extra
        # A scope outside the reached label: customers with a DE customer above them.
        assert total(["CUSTOMER"], {"CUSTOMER": block}) == 0
        r = api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": {
            "labels": ["ORDER"], "predicate": {"status": "paid", "CUSTOMER": block}}}})
        plan = r.json()["response"]["plan"]
        assert plan["actualRows"] == de_paid, plan
        assert any(t.startswith("CUSTOMER: from the related side") for t in plan["traversal"]), plan

    check(0)
    de = find_ids(api, {"labels": ["CUSTOMER"], "where": {"c": 0}}).pop()
    note = api.create("NOTE", {"status": "paid"})
    r = api.post(f"/api/v1/records/{de}/relationships", {"targetIds": [note], "type": "HAS"})
    assert r.status_code == 201, r.text
    check(1)


def test_a_wide_block_reads_its_frontier_on_several_threads(api):
    # 7,000 DE targets: the walk back reads adjacency on several threads (4,096 and more), and
    # the 21,000 keys of `kind` (over the planner's 20,000-key count) are read in slices on
    # several threads; both must give what one thread would. Every third customer is FR.
    n = 10500
    docs = [{"country": "FR" if c % 3 == 0 else "DE", "c": c,
             "ORDER": [{"o": 0, "kind": "x", "tags": ["a", "b"]},
                       {"o": 1, "kind": "x", "tags": ["b"], "big": c % 2 == 0}]}
            for c in range(n)]
    for i in range(0, n, 3500):
        r = api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": "CUSTOMER",
                                                       "documents": docs[i:i + 3500],
                                                       "options": {"relationshipType": "HAS"}}})
        assert r.status_code == 200, r.text
    de = [c for c in range(n) if c % 3 != 0]
    block = {"$relation": {"type": "HAS", "direction": "in"}, "country": "DE"}

    def total(where):
        r = api.post("/api/v1/records/search", {"labels": ["ORDER"], "where": where, "limit": 1})
        assert r.status_code == 200, r.text
        return r.json()["data"]["total"]

    assert total({"CUSTOMER": block}) == 2 * len(de)
    assert total({"big": True, "CUSTOMER": block}) == sum(1 for c in de if c % 2 == 0)
    assert total({"kind": "x", "CUSTOMER": block}) == 2 * len(de)
    # An array property: an order is under both of its tags' keys and counts once.
    assert total({"tags": {"$in": ["a", "b"]}, "CUSTOMER": block}) == 2 * len(de)
    assert total({"tags": "a", "CUSTOMER": block}) == len(de)
    r = api.post("/api/v1/records/search", {"labels": ["ORDER"], "where": {"kind": "x", "CUSTOMER": block},
                                            "limit": 1000, "skip": 2000})
    assert r.status_code == 200, r.text
    page = [x["__id"] for x in r.json()["data"]["data"]]
    assert len(page) == 1000 and page == sorted(page, reverse=True)
    r = api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": {
        "labels": ["ORDER"], "predicate": {"kind": "x", "CUSTOMER": block}}}})
    plan = r.json()["response"]["plan"]
    assert plan["access"].startswith("index point lookup on kind"), plan
    assert plan["examinedRows"] == 2 * n, plan
    assert any(t.startswith(f"CUSTOMER: from the related side ({len(de)} targets") for t in plan["traversal"]), plan


def test_alias_aggregation_and_group_by(api, shop):
    r = api.post("/api/v1/records/search", {
        "labels": ["Customer"],
        "where": {"Order": {"$alias": "$order"}},
        "aggregate": {"orders": {"fn": "count", "alias": "$order"},
                      "spent": {"fn": "sum", "alias": "$order", "field": "amount"},
                      "nums": {"fn": "collect", "alias": "$order", "field": "n", "orderBy": "asc"}},
        "orderBy": {"spent": "desc"},
    })
    assert r.status_code == 200, r.text
    rows = r.json()["data"]["data"]
    assert [(x["name"], x["orders"], x["spent"], x["nums"]) for x in rows] == [("Bob", 1, 30, [3]), ("Ann", 2, 30, [1, 2])] or \
        [(x["name"], x["orders"], x["spent"], x["nums"]) for x in rows] == [("Ann", 2, 30, [1, 2]), ("Bob", 1, 30, [3])]
    r = api.post("/api/v1/records/search", {
        "labels": ["Customer"],
        "where": {"Order": {"$alias": "$order"}},
        "aggregate": {"orders": {"fn": "collect", "alias": "$order"}},
    })
    rows = {x["name"]: x["orders"] for x in r.json()["data"]["data"]}
    assert sorted(o["n"] for o in rows["Ann"]) == [1, 2] and [o["__label"] for o in rows["Bob"]] == ["Order"]
    r = api.post("/api/v1/records/search", {
        "labels": ["Order"],
        "where": {"Customer": {"$alias": "$c"}},
        "aggregate": {"total": {"fn": "sum", "field": "amount"}},
        "groupBy": ["$c.country"],
    })
    assert r.status_code == 200, r.text
    assert sorted((x["country"], x["total"]) for x in r.json()["data"]["data"]) == [("DE", 30), ("FR", 30)]
    r = api.post("/api/v1/records/search", {"labels": ["Order"], "aggregate": {"x": {"fn": "count", "alias": "$nope"}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["$nope"])


def test_describe_schema_relationships(api, shop):
    r = api.protocol({"kind": "describe", "describe": {"kind": "schema"}})
    rels = {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"] for x in r.json()["response"]["schema"]["relationships"]}
    assert rels == {("Customer", "PLACED", "Order"): 3, ("Order", "CONTAINS", "Item"): 4}
    # a retype moves the counters
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "retypeRecord", "id": shop["bob"], "fromLabel": "Customer", "toLabel": "Vip"}})
    assert r.status_code == 200, r.text
    r = api.protocol({"kind": "describe", "describe": {"kind": "schema"}})
    rels = {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"] for x in r.json()["response"]["schema"]["relationships"]}
    assert rels[("Customer", "PLACED", "Order")] == 2 and rels[("Vip", "PLACED", "Order")] == 1


def test_a_records_relationships_follow_its_neighbours_labels_and_properties(api, shop):
    """A record's relationship list names each other end's current label (stored with the
    adjacency), after a neighbour's retype, a self-loop's retype and a re-attach that replaces
    the properties, and label selectors on the list's search see the same."""
    def by_other(rid, **params):
        out = {}
        for x in rels_of(api, rid, **params)["data"]:
            other = x["targetId"] if x["sourceId"] == rid else x["sourceId"]
            out[(other, x["type"])] = (x["sourceLabel"], x["targetLabel"], x["properties"])
        return out

    # ann -[PLACED]-> o1; re-attach with properties replaces them on both ends' lists
    r = api.post(f"/api/v1/records/{shop['ann']}/relationships", {"targetIds": shop["o1"], "type": "PLACED", "properties": {"w": 7}})
    assert r.status_code == 201, r.text
    assert by_other(shop["o1"])[(shop["ann"], "PLACED")] == ("Customer", "Order", {"w": 7})
    assert by_other(shop["ann"])[(shop["o1"], "PLACED")] == ("Customer", "Order", {"w": 7})
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "retypeRecord", "id": shop["ann"], "fromLabel": "Customer", "toLabel": "Vip"}})
    assert r.status_code == 200, r.text
    assert by_other(shop["o1"]) == {
        (shop["ann"], "PLACED"): ("Vip", "Order", {"w": 7}),
        (shop["i1"], "CONTAINS"): ("Order", "Item", {}),
    }
    assert by_other(shop["o2"])[(shop["ann"], "PLACED")][0] == "Vip"
    # a self-loop carries the record's own label at both ends
    r = api.post(f"/api/v1/records/{shop['i2']}/relationships", {"targetIds": shop["i2"], "type": "SAME"})
    assert r.status_code == 201, r.text
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "retypeRecord", "id": shop["i2"], "fromLabel": "Item", "toLabel": "Gift"}})
    assert r.status_code == 200, r.text
    assert by_other(shop["i2"])[(shop["i2"], "SAME")] == ("Gift", "Gift", {})
    assert by_other(shop["o3"])[(shop["i2"], "CONTAINS")][1] == "Gift"
    # the self-loop (two adjacency entries under its record) is listed once, and counted once
    # under the new label (CONTAINS from o2 and o3 besides)
    listed = rels_of(api, shop["i2"])
    ids = [x["id"] for x in listed["data"]]
    assert len(ids) == len(set(ids)) == listed["total"] == 3, listed
    r = api.protocol({"kind": "describe", "describe": {"kind": "schema"}})
    rels = {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"] for x in r.json()["response"]["schema"]["relationships"]}
    assert rels[("Gift", "SAME", "Gift")] == 1 and ("Item", "SAME", "Item") not in rels, rels
    assert rels[("Order", "CONTAINS", "Gift")] == 2, rels
    # label selectors of the record's relationship search use the same labels
    r = api.post("/api/v1/relationships/search", {"where": {"sourceLabel": "Vip"}, "limit": 100})
    assert r.status_code == 200, r.text
    assert {x["targetId"] for x in r.json()["data"]["data"]} == {shop["o1"], shop["o2"]}
    r = api.protocol({"kind": "query", "query": {"kind": "relationships", "query": {"recordId": shop["o2"], "sourceLabels": ["Vip"]}}})
    assert r.status_code == 200, r.text
    assert [x["sourceId"] for x in r.json()["response"]["relationships"]] == [shop["ann"]]


def test_bulk_create_and_delete_by_key(api):
    users = [api.create("U", {"uid": i, "team": "t" + str(i % 2)}) for i in range(4)]
    posts = [api.create("P", {"author": i % 4, "n": i}) for i in range(8)]
    r = api.post("/api/v1/relationships/create-many", {"source": {"label": "U", "key": "uid"},
                                                       "target": {"label": "P", "key": "author"}, "type": "WROTE"})
    assert r.status_code == 201, r.text
    assert r.json()["data"]["count"] == 8 and "8" in r.json()["data"]["message"]
    for i, u in enumerate(users):
        got = {x["targetId"] for x in rels_of(api, u)["data"]}
        assert got == {posts[i], posts[i + 4]}
    r = api.post("/api/v1/relationships/delete-many", {"source": {"label": "U", "key": "uid", "where": {"team": "t0"}},
                                                       "target": {"label": "P", "key": "author"}})
    assert r.status_code == 200, r.text
    assert r.json()["data"]["count"] == 4
    assert rel_search(api, {"where": {"type": "WROTE"}})["total"] == 4
    # many to many needs a where on both sides
    r = api.post("/api/v1/relationships/create-many", {"source": {"label": "U", "where": {"team": "t1"}},
                                                       "target": {"label": "P", "where": {"n": {"$lt": 2}}},
                                                       "manyToMany": True, "type": "LIKES"})
    assert r.status_code == 201 and r.json()["data"]["count"] == 4
    r = api.post("/api/v1/relationships/create-many", {"source": {"label": "U"}, "target": {"label": "P", "where": {"n": 1}},
                                                       "manyToMany": True})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["manyToMany"])
    r = api.post("/api/v1/relationships/create-many", {"source": {"label": "U", "key": "uid"}, "target": {"label": "P"}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["target.key"])
    # Protocol v1 sends the same command under its own field names; the message names both.
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "linkRecords", "command": {
        "source": {"label": "U"}, "target": {"label": "P"}}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["source.property", "allowCartesian"])
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "linkRecords", "command": {
        "source": {"label": "U"}, "target": {"label": "P"}, "allowCartesian": True}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["source.predicate", "allowCartesian"])


def test_bulk_key_is_type_strict_and_never_links_a_record_to_itself(api):
    a = api.create("N", {"k": 1, "ref": "1"})
    b = api.create("N", {"k": "1", "ref": 1})
    r = api.post("/api/v1/relationships/create-many", {"source": {"label": "N", "key": "k"},
                                                       "target": {"label": "N", "key": "ref"}})
    assert r.status_code == 201, r.text
    pairs = {(x["sourceId"], x["targetId"]) for x in rel_search(api, {})["data"]}
    assert pairs == {(a, b), (b, a)}


def test_bulk_key_join_from_the_index_equals_the_record_path_and_a_reference(api):
    """create-many by key without filters joins the two property index runs; with a filter it
    reads records. Both give the reference pairs: one numeric order (1 == 1.0), type-strict,
    array elements each a key, each pair once, never a record with itself."""
    import random
    rnd = random.Random(7)
    pool = [1, 2, 2.0, 3.5, "1", "2", "x", True]

    def val():
        v = rnd.choice(pool)
        return [rnd.choice(pool) for _ in range(rnd.randint(0, 3))] if rnd.random() < 0.3 else v

    def norm(v):
        if isinstance(v, bool):
            return ("b", v)
        if isinstance(v, (int, float)):
            return ("n", float(v))
        return ("s", v)

    src = {api.create("KS", {"k": val(), "tag": 1}): None for _ in range(25)}
    tgt = {api.create("KT", {"j": val(), "tag": 1}): None for _ in range(25)}
    recs = {x["__id"]: x for x in api.post("/api/v1/records/search", {"labels": ["KS", "KT"], "limit": 100}).json()["data"]["data"]}
    keys = lambda rid, f: {norm(e) for e in (recs[rid][f] if isinstance(recs[rid][f], list) else [recs[rid][f]])}
    want = {(a, b) for a in src for b in tgt if keys(a, "k") & keys(b, "j")}
    assert want, "the data should give some pairs"

    def run(ty, where):
        body = {"source": {"label": "KS", "key": "k"}, "target": {"label": "KT", "key": "j"}, "type": ty}
        if where:
            body["source"]["where"] = {"tag": 1}
            body["target"]["where"] = {"tag": 1}
        r = api.post("/api/v1/relationships/create-many", body)
        assert r.status_code == 201, r.text
        got = [(x["sourceId"], x["targetId"]) for x in rel_search(api, {"where": {"type": ty}, "limit": 1000})["data"]]
        assert len(got) == len(set(got)) == r.json()["data"]["count"]
        return set(got)

    assert run("BY_INDEX", False) == want
    assert run("BY_RECORDS", True) == want


@pytest.mark.parametrize("body,needle", [
    ({"targetIds": []}, "targetIds"),
    ({"targetIds": [""]}, "targetIds[0]"),
    ({}, "targetIds"),
    ({"targetIds": 5}, "targetIds"),
    ({"targetIds": ["not-a-uuid"]}, "UUIDv7"),
    ({"targetIds": ["6b9c0c3e-2a3e-4c51-9a9e-1d2d3c4b5a69"]}, "UUIDv7"),
    ({"targetIds": ["0190a0b0-0000-7000-8000-000000000000"], "type": ""}, "type"),
    ({"targetIds": ["0190a0b0-0000-7000-8000-000000000000"], "direction": "sideways"}, "direction"),
    ({"targetIds": ["0190a0b0-0000-7000-8000-000000000000"], "properties": {"type": "x"}}, "reserved"),
    ({"targetIds": ["0190a0b0-0000-7000-8000-000000000000"], "properties": {"m": [1, "a"]}}, "one type"),
])
def test_attach_validation(api, body, needle):
    src = api.create("V", {"x": 1})
    r = api.post(f"/api/v1/relationships/{src}", body)
    assert_rest_error(r, 400, "invalid_argument", message_contains=[needle])
    assert rels_of(api, src)["total"] == 0


def test_missing_records_are_404_and_detach_validation(api):
    src = api.create("V", {"x": 1})
    ghost = "0190a0b0-0000-7000-8000-000000000000"
    # A path id that is not a UUIDv7 is named as the record id (not as `sourceIds[0]`).
    v4 = "6b9c0c3e-2a3e-4c51-9a9e-1d2d3c4b5a69"
    for call in (api.post, api.put):
        for path in (f"/api/v1/relationships/{v4}", f"/api/v1/records/{v4}/relationships"):
            r = call(path, {"targetIds": [src]})
            err = assert_rest_error(r, 400, "invalid_argument", message_contains=[f"record id '{v4}'"])
            assert "sourceIds" not in err["message"]
    r = api.post(f"/api/v1/relationships/{src}", {"targetIds": [ghost]})
    assert_rest_error(r, 404, "not_found", message_contains=[ghost])
    r = api.post(f"/api/v1/relationships/{ghost}", {"targetIds": [src]})
    assert_rest_error(r, 404, "not_found")
    r = api.put(f"/api/v1/relationships/{src}", {"targetIds": [ghost], "typeOrTypes": [""]})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["typeOrTypes"])
    r = api.put(f"/api/v1/relationships/{src}", {"targetIds": [ghost], "direction": "up"})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["direction"])
    r = api.get(f"/api/v1/records/{ghost}/relationships")
    assert_rest_error(r, 404, "not_found")
    # Detach names records too (SPEC.md rule 5): a missing source or target is a 404 on both
    # routes and through Protocol v1, and nothing is removed when one of several is missing.
    other = api.create("V", {"x": 2})
    assert api.post(f"/api/v1/relationships/{src}", {"targetIds": [other]}).status_code == 201
    for path, body in [(f"/api/v1/relationships/{ghost}", {"targetIds": [src]}),
                       (f"/api/v1/records/{ghost}/relationships", {"targetIds": src}),
                       (f"/api/v1/records/{src}/relationships", {"targetIds": [other, ghost]})]:
        assert_rest_error(api.put(path, body), 404, "not_found", message_contains=[ghost])
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "unlinkRecordsById", "command": {
        "relationTypes": [], "sourceIds": [src], "targetIds": [ghost]}}})
    assert_protocol_error(r, 404, "not_found", message_contains=[ghost])
    assert rels_of(api, src)["total"] == 1
    # Searching among the neighbours of a missing record is a 404 as well, not an empty page.
    r = api.post(f"/api/v1/records/{ghost}/search", {})
    assert_rest_error(r, 404, "not_found", message_contains=[ghost])
    r = api.post(f"/api/v1/records/{src}/search", {})
    assert r.status_code == 200 and r.json()["data"]["total"] == 1, r.text
    r = api.post("/api/v1/records/search", {"where": {"X": {"$relation": {"hops": 11}}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["where.X.$relation.hops"])
    r = api.post("/api/v1/records/search", {"where": {"$relation": "T"}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["where.$relation"])


def test_deletes_leave_no_dangling_relationship(engine, api):
    ids = [api.create("G", {"i": i}) for i in range(12)]
    for i, s in enumerate(ids):
        targets = [ids[(i + 1) % 12], ids[(i + 5) % 12]]
        assert api.post(f"/api/v1/relationships/{s}", {"targetIds": targets, "type": "E"}).status_code == 201
    api.post(f"/api/v1/relationships/{ids[0]}", {"targetIds": ids[0], "type": "SELF"})
    assert len(all_relationships(api)) == 25
    assert api.delete(f"/api/v1/records/{ids[0]}").status_code == 200
    r = api.post("/api/v1/records/delete", {"labels": ["G"], "where": {"i": {"$in": [3, 4, 7]}}})
    assert r.status_code in (200, 201), r.text
    gone = {ids[i] for i in (0, 3, 4, 7)}
    rels = all_relationships(api)
    assert rels and all(r["sourceId"] not in gone and r["targetId"] not in gone for r in rels)
    expected = {(ids[i], ids[(i + d) % 12]) for i in range(12) for d in (1, 5)
                if ids[i] not in gone and ids[(i + d) % 12] not in gone}
    assert {(r["sourceId"], r["targetId"]) for r in rels} == expected
    # the schema counters agree with the scan, also after a restart (durable)
    engine.restart()
    api2 = engine.client()
    r = api2.protocol({"kind": "describe", "describe": {"kind": "schema"}})
    counts = {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"] for x in r.json()["response"]["schema"]["relationships"]}
    assert counts == {("G", "E", "G"): len(expected)}
    assert {(r["sourceId"], r["targetId"]) for r in all_relationships(api2)} == expected


def test_removals_count_by_the_labels_the_ends_have_then(api):
    """Unlinks and record deletes take each removed relationship's end labels from its
    adjacency entries and the record's own label, including labels retyped earlier in the same
    batch (one committed transaction): the schema counters always equal a scan."""
    def counts():
        r = api.protocol({"kind": "describe", "describe": {"kind": "schema"}})
        assert r.status_code == 200, r.text
        return {(x["sourceLabel"], x["type"], x["targetLabel"]): x["count"]
                for x in r.json()["response"]["schema"]["relationships"] if x["count"]}

    def scanned():
        out = {}
        for x in all_relationships(api):
            k = (x["sourceLabel"], x["type"], x["targetLabel"])
            out[k] = out.get(k, 0) + 1
        return out

    def stage(tx, mutation):
        r = api.protocol({"kind": "transaction", "transaction": {"kind": "stage", "transactionId": tx, "mutation": mutation}})
        assert r.status_code == 200, r.text

    a, d, e = (api.create("A", {"n": i}) for i in range(3))
    b, c = api.create("B", {"n": 3}), api.create("B", {"n": 4})
    for s, t, ty in [(a, b, "E"), (d, b, "E"), (e, b, "K"), (b, c, "E"), (c, c, "SELF"), (a, c, "F")]:
        assert api.post(f"/api/v1/relationships/{s}", {"targetIds": t, "type": ty}).status_code == 201
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "retypeRecord", "id": b, "fromLabel": "B", "toLabel": "C"}})
    assert r.status_code == 200, r.text
    # a detach from the retyped record's neighbour
    assert api.put(f"/api/v1/records/{a}/relationships", {"targetIds": b}).status_code == 200
    assert counts() == scanned() == {("A", "E", "C"): 1, ("A", "K", "C"): 1, ("C", "E", "B"): 1,
                                     ("B", "SELF", "B"): 1, ("A", "F", "B"): 1}
    # one batch: two retypes, then an unlink and a delete across them
    r = api.protocol({"kind": "transaction", "transaction": {"kind": "begin", "ttlMs": 20000}})
    tx = r.json()["response"]["transactionId"]
    stage(tx, {"kind": "retypeRecord", "id": c, "fromLabel": "B", "toLabel": "D"})
    stage(tx, {"kind": "retypeRecord", "id": b, "fromLabel": "C", "toLabel": "X"})
    r = api.put(f"/api/v1/records/{d}/relationships", {"targetIds": b}, headers={"X-Transaction-Id": tx})
    assert r.status_code == 200, r.text
    stage(tx, {"kind": "deleteRecord", "id": c})
    r = api.protocol({"kind": "transaction", "transaction": {"kind": "commit", "transactionId": tx}})
    assert r.json()["response"]["status"] == "committed", r.text
    assert counts() == scanned() == {("A", "K", "X"): 1}


# ── the SDK in direct mode ─────────────────────────────────────────────────


@pytest.fixture()
def db(engine):
    return RushDB(DEV_TOKEN, direct=True, engine_url=engine.url)


def test_sdk_attach_find_detach(db, api):
    movie = db.records.create("MOVIE", {"title": "Inception"})
    actor = db.records.create("ACTOR", {"name": "Leo"})
    other = db.records.create("ACTOR", {"name": "Tom"})
    db.records.attach(movie, [actor, other], {"type": "STARS", "direction": "out", "properties": {"role": "lead"}})
    found = db.relationships.find({"source": {"labels": ["MOVIE"], "where": {"title": "Inception"}},
                                   "target": {"labels": ["ACTOR"]}, "where": {"type": "STARS", "role": "lead"}})
    assert found.total == 2
    assert {r["targetId"] for r in found.data} == {actor.id, other.id}
    assert all(r["properties"] == {"role": "lead"} for r in found.data)
    related = db.records.find({"labels": ["ACTOR"], "where": {"name": "Leo"}}, record_id=movie.id)
    assert [r.id for r in related.data] == [actor.id]
    db.records.detach(movie, other, {"typeOrTypes": "STARS"})
    assert [r["targetId"] for r in rels_of(api, movie.id)["data"]] == [actor.id]
    with pytest.raises(RushDBError) as err:
        db.records.attach(movie, [], {"type": "STARS"})
    assert err.value.status == 400


def test_sdk_create_many_and_delete_many(db, api):
    for i in range(3):
        db.records.create("AUTHOR", {"aid": i})
        db.records.create("BOOK", {"by": i, "title": f"b{i}"})
    db.relationships.create_many(source={"label": "AUTHOR", "key": "aid"}, target={"label": "BOOK", "key": "by"},
                                 type="WROTE")
    assert db.relationships.find({"where": {"type": "WROTE"}}).total == 3
    db.relationships.delete_many(source={"label": "AUTHOR", "key": "aid", "where": {"aid": 0}},
                                 target={"label": "BOOK", "key": "by"}, type="WROTE")
    assert db.relationships.find({"where": {"type": "WROTE"}}).total == 2
    with pytest.raises(RushDBError) as err:
        db.relationships.create_many(source={"label": "AUTHOR"}, target={"label": "BOOK"}, many_to_many=True)
    assert err.value.status == 400
    books = db.records.find({"labels": ["BOOK"], "where": {"AUTHOR": {"aid": {"$gte": 1}}}})
    assert sorted(b.data["title"] if hasattr(b, "data") else b["title"] for b in books.data) == ["b1", "b2"]


def test_protocol_link_ops_report_affected(api):
    a = api.create("PA", {"x": 1})
    b = api.create("PB", {"x": 1})
    c = api.create("PB", {"x": 2})
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "linkRecordsById", "command": {
        "relationType": "R", "sourceIds": [a], "targetIds": [b, c]}}})
    assert r.status_code == 200 and r.json()["response"] == {"kind": "mutation", "affected": 2}
    r = api.protocol({"kind": "query", "query": {"kind": "relationships", "query": {
        "sourceLabels": ["PA"], "targetLabels": ["PB"], "targetPredicate": {"x": 2}}}})
    body = r.json()["response"]
    assert body["kind"] == "relationships" and body["total"] == 1 and body["relationships"][0]["targetId"] == c
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "unlinkRecordsById", "command": {
        "relationTypes": [], "sourceIds": [a], "targetIds": [b, c], "direction": "in"}}})
    assert r.json()["response"]["affected"] == 0
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "unlinkRecordsById", "command": {
        "relationTypes": ["R"], "sourceIds": [a], "targetIds": [b, c]}}})
    assert r.json()["response"]["affected"] == 2
    r = api.protocol({"kind": "mutate", "mutation": {"kind": "linkRecords", "command": {
        "relationType": "SAME", "source": {"label": "PA", "property": "x"}, "target": {"label": "PB", "property": "x"}}}})
    assert r.json()["response"]["affected"] == 1


def test_a_listing_follows_every_write_to_the_relationships_it_shows(api):
    """A record's relationships are listed from memory once read (docs/design.md "Key
    memo"): each write that changes what the listing shows (new properties on a re-attach,
    the other end's label, a detach, a deleted neighbour, a new relationship, the record's own
    label, its delete) must show in the next listing."""
    hub = api.create("Hub", {"n": 0})
    a, b = api.create("Spoke", {"n": 1}), api.create("Spoke", {"n": 2})
    assert api.post(f"/api/v1/records/{hub}/relationships", {"targetIds": [a, b], "type": "R",
                                                             "properties": {"w": 1}}).status_code == 201

    def view():
        data = rels_of(api, hub)
        assert data["total"] == len(data["data"])
        other = lambda r: ("target", "source")[r["targetId"] == hub]  # noqa: E731
        return {(r[other(r) + "Id"], r[other(r) + "Label"], r["properties"].get("w")) for r in data["data"]}

    for _ in range(2):  # the second listing is the one answered from memory
        assert view() == {(a, "Spoke", 1), (b, "Spoke", 1)}
    assert api.post(f"/api/v1/records/{hub}/relationships", {"targetIds": a, "type": "R",
                                                             "properties": {"w": 2}}).status_code == 201
    assert view() == {(a, "Spoke", 2), (b, "Spoke", 1)}
    r = api.patch(f"/api/v1/records/{b}", {"label": "Rim", "data": {"n": 2}})
    assert r.status_code == 201, r.text
    assert view() == {(a, "Spoke", 2), (b, "Rim", 1)}
    c = api.create("Spoke", {"n": 3})
    assert api.post(f"/api/v1/relationships/{c}", {"targetIds": hub, "type": "R", "direction": "out"}).status_code == 201
    assert view() == {(a, "Spoke", 2), (b, "Rim", 1), (c, "Spoke", None)}
    assert api.put(f"/api/v1/records/{hub}/relationships", {"targetIds": a}).status_code == 200
    assert api.delete(f"/api/v1/records/{b}").status_code == 200
    assert view() == {(c, "Spoke", None)}
    # the record's own label is kept in memory too: its relabel and its delete show
    own = lambda: {r[("source", "target")[r["targetId"] == hub] + "Label"] for r in rels_of(api, hub)["data"]}  # noqa: E731
    assert own() == own() == {"Hub"}
    r = api.patch(f"/api/v1/records/{hub}", {"label": "Axle", "data": {"n": 0}})
    assert r.status_code == 201, r.text
    assert own() == {"Axle"}
    assert api.delete(f"/api/v1/records/{hub}").status_code == 200
    r = api.get(f"/api/v1/records/{hub}/relationships")
    assert r.status_code == 404, r.text


def test_counts_are_of_relationships_created(api):
    """`affected` / `count` report relationships created (BEHAVIOUR.md §3): linking a
    (source, target, type) that exists already updates its properties and counts 0."""
    la, lb = unique("CA"), unique("CB")
    a = [api.create(la, {"k": i}) for i in range(3)]
    b = [api.create(lb, {"k": i}) for i in range(3)]

    def link_by_id(props):
        r = api.protocol({"kind": "mutate", "mutation": {"kind": "linkRecordsById", "command": {
            "relationType": "C", "sourceIds": [a[0]], "targetIds": [b[0]], "properties": props}}})
        assert r.status_code == 200, r.text
        return r.json()["response"]["affected"]

    assert link_by_id({"w": 1}) == 1
    assert link_by_id({"w": 2}) == 0
    assert [x["properties"] for x in rels_of(api, a[0])["data"]] == [{"w": 2}]
    body = {"source": {"label": la, "key": "k"}, "target": {"label": lb, "key": "k"}, "type": "D"}
    for expected in (3, 0):
        r = api.post("/api/v1/relationships/create-many", body)
        assert r.status_code == 201 and r.json()["data"]["count"] == expected, r.text
    assert rel_search(api, {"where": {"type": "D"}})["total"] == 3


def test_relationship_search_type_in_empty_is_refused(api, shop):
    # `$in: []` is a 400 in record filters (BEHAVIOUR §2); here it matched every type.
    for op in ("$in", "$eq"):
        r = api.post("/api/v1/relationships/search", {"where": {"type": {op: []}}})
        assert_rest_error(r, 400, "invalid_argument", message_contains=[f"where.type.{op}"])
    r = api.post("/api/v1/relationships/search", {"where": {"type": {"$in": ["NO_SUCH_TYPE"]}}})
    assert r.status_code == 200 and r.json()["data"]["total"] == 0, r.text


def test_relationship_search_keys_compose_under_logical_operators(api, shop):
    """`type`, `sourceLabel`, `targetLabel`, `sourceRecord` and `targetRecord` mean the same
    under `$and/$or/$not/$nor/$xor` as at the top of `where` (they had been read as property
    names there, which no relationship can have), and every key narrows the answer."""
    s = shop
    api.post(f"/api/v1/relationships/{s['o1']}", {"targetIds": s["i2"], "type": "CONTAINS", "properties": {"qty": 3}})
    everything = all_relationships(api)

    def expect(pred):
        return {r["id"] for r in everything if pred(r)}

    def got(body):
        return {r["id"] for r in rel_search(api, {**body, "direction": "out"})["data"]}

    label = {}
    for k, v in s.items():
        label[v] = {"a": "Customer", "b": "Customer", "o": "Order", "i": "Item"}[k[0]]
    cases = [
        ({"where": {"$or": [{"type": "PLACED"}, {"type": "CONTAINS"}]}},
         lambda r: r["type"] in ("PLACED", "CONTAINS")),
        ({"where": {"$and": [{"type": "PLACED"}]}}, lambda r: r["type"] == "PLACED"),
        ({"where": {"$or": {"type": "PLACED", "qty": 3}}},   # an object: one operand a key
         lambda r: r["type"] == "PLACED" or r["properties"].get("qty") == 3),
        ({"where": {"$not": {"type": "PLACED"}}}, lambda r: r["type"] != "PLACED"),
        ({"where": {"$nor": [{"type": "PLACED"}, {"qty": 3}]}},
         lambda r: r["type"] != "PLACED" and r["properties"].get("qty") != 3),
        ({"where": {"$xor": [{"type": "CONTAINS"}, {"targetLabel": "Item", "sourceRecord": {"n": 1}}]}},
         lambda r: (r["type"] == "CONTAINS") != (r["targetLabel"] == "Item" and r["sourceId"] == s["o1"])),
        ({"where": {"$or": [{"qty": 3}, {"sourceLabel": "Customer"}]}},
         lambda r: r["properties"].get("qty") == 3 or r["sourceLabel"] == "Customer"),
        ({"where": {"$or": [{"sourceRecord": {"name": "Ann"}}, {"targetRecord": {"sku": "a"}}]}},
         lambda r: r["sourceId"] == s["ann"] or r["targetId"] == s["i1"]),
        ({"where": {"$not": {"targetRecord": {"price": {"$gt": 10}}}, "type": "CONTAINS"}},
         lambda r: r["type"] == "CONTAINS" and r["targetId"] != s["i2"]),
        # a where key narrows the selectors it names (had widened them: the lists were merged)
        ({"source": {"labels": ["Customer"]}, "where": {"sourceLabel": "Order"}}, lambda r: False),
        ({"source": {"labels": ["Customer", "Order"]}, "where": {"sourceLabel": ["Order", "Item"]}},
         lambda r: r["sourceLabel"] == "Order"),
        ({"type": "PLACED", "where": {"type": "CONTAINS"}}, lambda r: False),
        ({"source": {"where": {"name": "Ann"}}, "where": {"sourceRecord": {"country": "FR"}}}, lambda r: False),
    ]
    for body, pred in cases:
        want = expect(pred)
        assert got(body) == want, body
    assert all(label[r["sourceId"]] == r["sourceLabel"] for r in everything)

    # Without direction, a candidate passes in either orientation, conditions included.
    out = rel_search(api, {"source": {"labels": ["Order"]}, "where": {"$or": [{"targetLabel": "Customer"}]}})
    assert {(r["sourceId"], r["targetId"]) for r in out["data"]} == {
        (s["ann"], s["o1"]), (s["ann"], s["o2"]), (s["bob"], s["o3"])}

    # Protocol v1 reads the same tree.
    r = api.protocol({"kind": "query", "query": {"kind": "relationships", "query": {
        "sourceLabels": ["Customer"], "predicate": {"$or": [{"type": "PLACED"}]}}}})
    assert r.status_code == 200 and r.json()["response"]["total"] == 3, r.text
    r = api.protocol({"kind": "query", "query": {"kind": "relationships", "query": {
        "relationType": "PLACED", "predicate": {"type": "CONTAINS"}}}})
    assert r.status_code == 200 and r.json()["response"]["total"] == 0, r.text

    # Refused, by name: empty name lists, a nested direction, two directions that disagree,
    # a non-empty top-level labels, a related-label block among relationship properties.
    for body, where in [
        ({"where": {"type": []}}, "where.type"),
        ({"where": {"$or": [{"sourceLabel": []}]}}, "where.$or[0].sourceLabel"),
        ({"where": {"$or": [{"direction": "in"}]}}, "where.$or[0].direction"),
        ({"direction": "out", "where": {"direction": "in"}}, "disagree"),
        ({"labels": ["Customer"]}, "labels"),
        ({"where": {"$or": [{"Item": {"sku": "a"}}]}}, "related-label blocks"),
        ({"where": {"$or": 1}}, "where.$or"),
    ]:
        r = api.post("/api/v1/relationships/search", body)
        assert_rest_error(r, 400, "invalid_argument", message_contains=[where])
    assert rel_search(api, {"labels": []})["total"] == len(everything)


def test_a_record_listing_pages_as_the_search_of_all_relationships_does(api):
    """A record's whole listing is paged by its adjacency keys and decodes only the page
    (docs/design.md "Relationships"); a narrowed listing and a search take the general path.
    Both must give the relationships, labels, properties and order the search of every
    relationship gives: out and in, two types, properties on some, a self-loop (listed once),
    neighbours of two labels, ids ascending and descending, every page."""
    hub = api.create(unique("Hub"), {"n": 0})
    la, lb = unique("NA"), unique("NB")
    na = [api.create(la, {"n": i}) for i in range(4)]
    nb = [api.create(lb, {"n": i}) for i in range(3)]
    t1, t2 = unique("T1"), unique("T2")
    link = lambda src, dst, ty, props=None: api.protocol({"kind": "mutate", "mutation": {  # noqa: E731
        "kind": "linkRecordsById", "command": {"relationType": ty, "sourceIds": [src], "targetIds": [dst],
                                               **({"properties": props} if props else {})}}})
    for i, x in enumerate(na):
        assert link(hub, x, t1, {"w": i, "tag": f"q\"{i}"} if i % 2 else None).status_code == 200
    for i, x in enumerate(nb):
        assert link(x, hub, t2, {"at": [i, i + 1]}).status_code == 200
    assert link(na[0], hub, t2).status_code == 200
    assert link(hub, hub, t1, {"loop": True}).status_code == 200
    every = [r for r in all_relationships(api) if hub in (r["sourceId"], r["targetId"])]
    assert len(every) == 9
    desc = sorted(every, key=lambda r: r["id"], reverse=True)

    def query(order=None, narrowed=False, skip=0, limit=1000):
        q = {"recordId": hub, "offset": skip, "limit": limit}
        if order:
            q["order"] = order
        if narrowed:  # a where that keeps every relationship takes the general path
            q["where"] = {"type": {"$in": [t1, t2]}}
        r = api.protocol({"kind": "query", "query": {"kind": "relationships", "query": q}})
        assert r.status_code == 200, r.text
        resp = r.json()["response"]
        return resp["relationships"], resp["total"]

    for skip, limit in ((0, 1000), (0, 4), (4, 4), (8, 4), (9, 2), (3, 1)):
        page = rels_of(api, hub, skip=skip, limit=limit)
        assert page["total"] == 9 and page["data"] == desc[skip:skip + limit], (skip, limit)
        for narrowed in (False, True):
            assert query(narrowed=narrowed, skip=skip, limit=limit) == (desc[skip:skip + limit], 9)
            asc = desc[::-1][skip:skip + limit]
            assert query({"id": "asc"}, narrowed, skip, limit) == (asc, 9), (skip, limit, narrowed)
