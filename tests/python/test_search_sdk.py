"""Search through the published `rushdb` 3.0 Python SDK in direct mode (Protocol v1):
records.find with where/orderBy/skip/limit and select/groupBy, records.delete by query,
labels.find, properties.find and properties.values.

Every answer is checked against hand-computed expectations, and writes are checked through
REST as well, so a test fails when the SDK merely echoes what it sent.
"""

from __future__ import annotations

import pytest
from rushdb import RushDB, RushDBError

from conftest import DEV_TOKEN, unique
from search_helpers import positions, rest_find, seed

PEOPLE = [
    {"name": "Ann", "age": 31, "city": "Berlin", "joined": "2020-05-01T10:00:00Z", "tags": ["a", "b"], "team": "red"},
    {"name": "ben", "age": 25, "city": "Paris", "joined": "2021-07-15", "tags": ["b"], "team": "blue"},
    {"name": "Cid", "age": "40", "city": "berlin", "joined": "2020-05-01T12:00:00+02:00", "team": "red"},
    {"name": "Dora", "age": 52, "city": "Rome", "tags": ["c"], "team": "blue"},
    {"name": "Eli", "age": 25, "joined": "2023-01-01", "team": "red"},
    {"name": "Fay", "age": 19.5, "city": "Paris", "tags": ["a"]},
]


@pytest.fixture(scope="module")
def db(module_engine):
    return RushDB(DEV_TOKEN, direct=True, engine_url=module_engine.url)


@pytest.fixture(scope="module")
def people(module_api):
    label = unique("PERSON")
    return label, seed(module_api, label, PEOPLE)


def sdk_positions(ids, result):
    where = {rid: i for i, rid in enumerate(ids)}
    return [where[r.id] for r in result.data]


FIND_CASES = [
    ({"age": 25}, {1, 4}),
    ({"age": "40"}, {2}),
    ({"age": {"$gt": 25}}, {0, 3}),
    ({"age": {"$gte": 19.5, "$lt": 31}}, {1, 4, 5}),
    ({"age": {"$ne": 25}}, {0, 2, 3, 5}),
    ({"city": {"$contains": "BERL"}}, {0, 2}),
    ({"city": {"$startsWith": "P"}}, {1, 5}),
    ({"city": {"$exists": False}}, {4}),
    ({"city": None}, {4}),
    ({"tags": "b"}, {0, 1}),
    ({"tags": {"$nin": ["b"]}}, {3, 5}),
    ({"joined": "2020-05-01T10:00:00+00:00"}, {0, 2}),
    ({"joined": {"$gte": {"$year": 2021}, "$lt": {"$year": 2024}}}, {1, 4}),
    ({"joined": {"$lt": "2021-07-15"}}, {0, 2}),
    ({"$or": [{"team": "blue"}, {"age": {"$type": "string"}}]}, {1, 2, 3}),
    ({"$xor": [{"team": "red"}, {"tags": {"$exists": True}}]}, {1, 2, 3, 4, 5}),
    ({"$not": {"team": "red"}}, {1, 3, 5}),
    ({"$nor": [{"team": "red"}, {"city": "Paris"}]}, {3}),
]


@pytest.mark.parametrize("where,expected", FIND_CASES, ids=[str(w) for w, _ in FIND_CASES])
def test_find_where(db, module_api, people, where, expected):
    label, ids = people
    res = db.records.find({"labels": [label], "where": where})
    assert res.total == len(expected)
    got = sdk_positions(ids, res)
    assert set(got) == expected
    # newest first by default
    assert got == sorted(expected, key=lambda i: ids[i], reverse=True)
    assert all(r.label == label for r in res.data)
    # the same through REST
    page = rest_find(module_api, {"labels": [label], "where": where})
    assert positions(ids, page["data"]) == got


def test_find_order_skip_limit(db, people):
    label, ids = people
    res = db.records.find({"labels": [label], "where": {"age": {"$type": "number"}},
                           "orderBy": {"age": "desc"}, "skip": 1, "limit": 3})
    # numbers: 52 (3), 31 (0), 25 (1, 4 -> id desc: 4, 1), 19.5 (5)
    assert res.total == 5
    assert sdk_positions(ids, res) == [0, 4, 1]
    assert [r.data["age"] for r in res.data] == [31, 25, 25]
    res = db.records.find({"labels": [label], "orderBy": {"name": "asc"}})
    # code points: "Ann" "Cid" "Dora" "Eli" "Fay" "ben"
    assert sdk_positions(ids, res) == [0, 2, 3, 4, 5, 1]
    res = db.records.find({"labels": [label], "orderBy": {"city": "desc"}, "limit": 10})
    # "berlin" > "Rome" > "Paris" (1, 5 -> 5, 1) > "Berlin"; Eli lacks city: last
    assert sdk_positions(ids, res) == [2, 3, 5, 1, 0, 4]
    res = db.records.find({"labels": [label], "orderBy": "asc", "skip": 4})
    assert sdk_positions(ids, res) == [4, 5] and res.total == 6


def test_find_multi_key_order(db, people):
    label, ids = people
    res = db.records.find({"labels": [label], "orderBy": [{"team": "asc"}, {"age": "desc"}]})
    # team: "blue" (1: 25, 3: 52), "red" (0: 31, 2: "40", 4: 25); 5 lacks team
    # red by age desc: "40" is a string and sorts after numbers -> "40" first in desc
    assert sdk_positions(ids, res) == [3, 1, 2, 0, 4, 5]


def test_find_invalid_where_raises_400(db, people):
    label, _ = people
    with pytest.raises(RushDBError) as exc:
        db.records.find({"labels": [label], "where": {"age": {"$foo": 1}}})
    assert exc.value.status == 400
    with pytest.raises(RushDBError) as exc:
        db.records.find({"labels": [label], "limit": 1001})
    assert exc.value.status == 400


def test_find_select_group_by(db, people):
    label, _ = people
    res = db.records.find({"labels": [label], "where": {"team": {"$exists": True}, "age": {"$type": "number"}},
                           "select": {"n": {"$count": "*"}, "oldest": {"$max": "$record.age"},
                                      "names": {"$collect": {"field": "$record.name", "orderBy": "asc"}}},
                           "groupBy": ["$record.team"]})
    rows = {r.data["team"]: r.data for r in res.data}
    assert set(rows) == {"red", "blue"}
    # red: Ann 31, Eli 25 (Cid's age is a string); blue: ben 25, Dora 52
    assert rows["red"] == {"team": "red", "n": 2, "oldest": 31, "names": ["Ann", "Eli"]}
    assert rows["blue"] == {"team": "blue", "n": 2, "oldest": 52, "names": ["Dora", "ben"]}


def test_find_select_sum_avg_group_by_array(db, people):
    label, _ = people
    res = db.records.find({"labels": [label], "where": {"tags": {"$exists": True}},
                           "select": {"n": {"$count": "*"}, "s": {"$sum": "$record.age"},
                                      "m": {"$avg": {"field": "$record.age", "precision": 0}}},
                           "groupBy": ["$record.tags"], "orderBy": {"tags": "asc"}})
    # a: Ann 31, Fay 19.5 (avg 25.25)   b: Ann 31, ben 25   c: Dora 52
    assert [(r.data["tags"], r.data["n"], r.data["s"], r.data["m"]) for r in res.data] == [
        ("a", 2, 50.5, 25), ("b", 2, 56, 28), ("c", 1, 52, 52)]


def test_find_select_without_group_by(db, people):
    label, ids = people
    res = db.records.find({"labels": [label], "where": {"team": "blue"},
                           "select": {"n": {"$count": "*"}, "y": {"$timeBucket": {"field": "$record.joined",
                                                                                  "granularity": "year"}}}})
    assert res.total == 2
    rows = {ids.index(r.data["__id"]): r.data for r in res.data}
    assert set(rows) == {1, 3}
    assert rows[1]["name"] == "ben" and rows[1]["n"] == 1
    assert rows[1]["y"] == 1609459200000  # 2021-01-01T00:00:00Z in epoch milliseconds
    assert rows[3]["name"] == "Dora" and rows[3]["y"] is None


def test_delete_by_query(db, module_api):
    label, other = unique("SDKDEL"), unique("SDKDELO")
    ids = seed(module_api, label, [{"n": i, "k": "x" if i % 2 else "y"} for i in range(6)])
    kept = seed(module_api, other, [{"n": 1, "k": "x"}])
    out = db.records.delete({"labels": [label], "where": {"k": "x", "n": {"$gte": 3}}})
    assert out["success"] is True
    assert out["data"]["message"].startswith("2 ")
    page = rest_find(module_api, {"labels": [label], "orderBy": "asc"})
    assert positions(ids, page["data"]) == [0, 1, 2, 4]
    assert module_api.record(kept[0])["k"] == "x"
    # labels only: every record of the label
    out = db.records.delete({"labels": [label]})
    assert out["data"]["message"].startswith("4 ")
    assert rest_find(module_api, {"labels": [label]}) == {"data": [], "total": 0}
    assert label not in module_api.labels()
    assert module_api.labels()[other] == 1


def test_delete_everything_refused(db, module_api):
    before = module_api.search({"limit": 1})["total"]
    with pytest.raises(RushDBError) as exc:
        db.records.delete({})
    assert exc.value.status == 400
    assert module_api.search({"limit": 1})["total"] == before


def test_labels_find_with_where(db, module_api):
    flag = unique("flag")
    a, b, c = unique("SLA"), unique("SLB"), unique("SLC")
    seed(module_api, a, [{flag: 1}, {flag: 2}, {flag: 3}])
    seed(module_api, b, [{flag: 2}])
    seed(module_api, c, [{"other": 1}])
    out = db.labels.find({"where": {flag: {"$gte": 2}}})
    assert out["data"] == {a: 2, b: 1}
    out = db.labels.find({"where": {flag: {"$gte": 1}}, "labels": [a]})
    assert out["data"] == {a: 3}
    out = db.labels.find({"where": {flag: 99}})
    assert out["data"] == {}
    everything = db.labels.find({})["data"]
    assert everything[a] == 3 and everything[b] == 1 and everything[c] == 1


def test_properties_find_with_where(db, module_api):
    label = unique("SPW")
    p1, p2, p3 = unique("sp1"), unique("sp2"), unique("sp3")
    seed(module_api, label, [{p1: 1, p2: "a"}, {p1: 2, p2: ["b", "c"]}, {p3: True}, {p1: 3}])
    mine = {p1, p2, p3}
    out = db.properties.find({"where": {p1: {"$lte": 2}}})
    got = {(p["name"], p["type"]): p["recordsCount"] for p in out["data"] if p["name"] in mine}
    assert got == {(p1, "number"): 2, (p2, "string"): 2}
    out = db.properties.find({"where": {p3: True}, "labels": [label]})
    got = {(p["name"], p["type"]): p["recordsCount"] for p in out["data"] if p["name"] in mine}
    assert got == {(p3, "boolean"): 1}
    # without where: the full counts, with the same ids as REST
    out = db.properties.find({})
    got = {(p["name"], p["type"]): (p["recordsCount"], p["id"]) for p in out["data"] if p["name"] in mine}
    rest = {(p["name"], p["type"]): (p["recordsCount"], p["id"]) for p in module_api.properties() if p["name"] in mine}
    assert got == rest
    assert {k: v[0] for k, v in got.items()} == {(p1, "number"): 3, (p2, "string"): 2, (p3, "boolean"): 1}


def test_properties_values(db, module_api):
    label = unique("SPV")
    prop = unique("spv")
    seed(module_api, label, [{prop: 5, "g": 1}, {prop: [1, 7], "g": 2}, {prop: 3, "g": 1}, {prop: 5, "g": 2},
                             {prop: 2.5, "g": 1}])
    pid = module_api.property_by(prop, "number")["id"]
    # The SDK forwards only `labels` and `where` of the values query, and asks the engine for
    # descending order (its default); the engine answers the distinct values in that order.
    out = db.properties.values(pid)
    assert out["data"]["values"] == [7, 5, 3, 2.5, 1]
    # restricted to matching records
    out = db.properties.values(pid, {"labels": [label], "where": {"g": 1}})
    assert out["data"]["values"] == [5, 3, 2.5]
    out = db.properties.values(pid, {"where": {"g": 2}})
    assert out["data"]["values"] == [7, 5, 1]
    out = db.properties.values(pid, {"where": {"g": 3}})
    assert out["data"]["values"] == []
    # by name as well as by id
    assert db.properties.values(prop)["data"]["values"] == [7, 5, 3, 2.5, 1]
    # the same values through REST
    r = module_api.post(f"/api/v1/properties/{pid}/values", {"orderBy": "desc"})
    assert r.json()["data"]["values"] == [7, 5, 3, 2.5, 1]
