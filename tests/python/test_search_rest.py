"""Search over REST and Protocol v1 (BEHAVIOUR.md §2): every where operator, ordering,
paging, validation errors, bulk delete by query, labels and properties with a where filter,
property values and explain.

Datasets are small and hand-made; every expected answer is worked out by hand next to the
query. The operator table runs on an engine of its own (so a query without labels sees only
the dataset and exercises the unscoped index and full-scan paths) and is asked three ways:
REST `/records/search` with and without labels, REST `/query/records/find`, and Protocol v1.
"""

from __future__ import annotations

import pytest

from conftest import _factory, assert_protocol_error, assert_rest_error, unique
from search_helpers import (FIND, SEARCH, by_id_desc, explain, positions, protocol_records,
                            rest_find, seed)

# ---------------------------------------------------------------------------------------
# the operator dataset
# ---------------------------------------------------------------------------------------

# Field types after inference:
#   age: number (0, 2, 3, 5), string (1)     score: number (0..3)
#   born: datetime (0, 1, 2, 3, 5)            active: boolean (0, 1, 3), string (5)
#   tags: string arrays (0..3)                nums: number arrays (0..2)
#   name/city: strings
OPS_DOCS = [
    # 0
    {"name": "Alice", "age": 30, "score": 2.5, "tags": ["red", "blue"], "active": True,
     "born": "1994-03-10T12:00:00Z", "city": "Berlin", "nums": [1, 5]},
    # 1: age is the string "30"; born is the same instant as 0, written with an offset
    {"name": "alice cooper", "age": "30", "score": 2, "tags": ["green"], "active": False,
     "born": "1994-03-10T13:00:00+01:00", "city": "berlin", "nums": [10]},
    # 2: age written as 2.0 (stored as the integer 2); born is a plain date (UTC midnight)
    {"name": "Bob", "age": 2.0, "score": 7, "tags": ["blue", "yellow"],
     "born": "2023-06-15", "city": "Paris", "nums": [3, 20]},
    # 3
    {"name": "Dave", "age": 45, "score": -1.5, "tags": ["red"], "active": True,
     "born": "2023-12-31T23:59:59Z", "city": "Paris Nord"},
    # 4: lacks nearly everything
    {"name": "Eve (test)"},
    # 5: active is the string "true"
    {"name": "Zed", "age": 18.5, "active": "true", "born": "2024-01-01T00:00:00Z", "city": "PARIS"},
]
ALL = set(range(len(OPS_DOCS)))


@pytest.fixture(scope="module")
def ops():
    """(api, label, ids) of the operator dataset, alone on its own engine."""
    with _factory() as f:
        api = f.start().client()
        label = unique("OPS")
        ids = seed(api, label, OPS_DOCS)
        yield api, label, ids


OPERATOR_CASES = [
    # -- plain equality: exact and type-strict ------------------------------------------
    ("eq-number", {"age": 30}, {0}),
    ("eq-string-not-number", {"age": "30"}, {1}),
    ("eq-int-2", {"age": 2}, {2}),
    ("eq-float-2.0", {"age": 2.0}, {2}),
    ("eq-float", {"score": 2.5}, {0}),
    ("eq-float-int-stored", {"score": 2.0}, {1}),
    ("eq-negative-float", {"score": -1.5}, {3}),
    ("eq-fraction-no-int", {"age": 18}, set()),
    ("eq-string-case-sensitive", {"name": "alice"}, set()),
    ("eq-string", {"name": "Alice"}, {0}),
    ("eq-bool", {"active": True}, {0, 3}),
    ("eq-bool-false", {"active": False}, {1}),
    ("eq-string-true-not-bool", {"active": "true"}, {5}),
    ("eq-datetime-same-text", {"born": "1994-03-10T12:00:00Z"}, {0, 1}),
    ("eq-datetime-other-offset", {"born": "1994-03-10T13:00:00+01:00"}, {0, 1}),
    ("eq-datetime-third-spelling", {"born": "1994-03-10T07:00:00-05:00"}, {0, 1}),
    ("eq-datetime-fraction", {"born": "1994-03-10T12:00:00.000Z"}, {0, 1}),
    ("eq-plain-date", {"born": "2023-06-15"}, {2}),
    ("eq-plain-date-as-utc-midnight", {"born": "2023-06-15T00:00:00Z"}, {2}),
    ("eq-plain-date-offset", {"born": "2023-06-15T02:00:00+02:00"}, {2}),
    ("eq-datetime-other-instant", {"born": "1994-03-10T12:00:00+01:00"}, set()),
    ("eq-array-any-element", {"tags": "blue"}, {0, 2}),
    ("eq-number-array-any-element", {"nums": 5}, {0}),
    ("eq-missing-field", {"nope": 1}, set()),
    ("eq-two-fields-and", {"city": "Paris", "age": 2}, {2}),
    ("eq-two-fields-no-match", {"city": "Paris", "age": 45}, set()),
    # -- $eq / $ne -------------------------------------------------------------------------
    ("$eq-number", {"age": {"$eq": 30}}, {0}),
    ("$eq-string", {"age": {"$eq": "30"}}, {1}),
    ("$eq-datetime-offset", {"born": {"$eq": "1994-03-10T14:00:00+02:00"}}, {0, 1}),
    # $ne: records having the field whose no element equals (type-strict); 4 lacks it
    ("$ne-number", {"age": {"$ne": 30}}, {1, 2, 3, 5}),
    ("$ne-string", {"age": {"$ne": "30"}}, {0, 2, 3, 5}),
    ("$ne-array-no-element", {"tags": {"$ne": "blue"}}, {1, 3}),
    ("$ne-bool", {"active": {"$ne": True}}, {1, 5}),
    ("$ne-datetime-instant", {"born": {"$ne": "1994-03-10T13:00:00+01:00"}}, {2, 3, 5}),
    ("$ne-missing-field", {"nope": {"$ne": 1}}, set()),
    # -- $in / $nin ------------------------------------------------------------------------
    ("$in-numbers", {"age": {"$in": [30, 45, "x"]}}, {0, 3}),
    ("$in-mixed-types", {"age": {"$in": [45, "30"]}}, {1, 3}),
    ("$in-array-any", {"tags": {"$in": ["yellow", "green"]}}, {1, 2}),
    ("$in-array-two-elements-one-record", {"tags": {"$in": ["red", "blue"]}}, {0, 2, 3}),
    ("$in-datetime-convenience", {"born": {"$in": ["1994-03-10T14:00:00+02:00", "2024-01-01"]}}, {0, 1, 5}),
    ("$in-float-int", {"score": {"$in": [2.0, 7.0]}}, {1, 2}),
    ("$nin-array", {"tags": {"$nin": ["blue", "green"]}}, {3}),
    ("$nin-numbers", {"age": {"$nin": [30, 2]}}, {1, 3, 5}),
    ("$nin-lacking-never-matches", {"tags": {"$nin": ["zzz"]}}, {0, 1, 2, 3}),
    ("$nin-empty-list", {"nums": {"$nin": []}}, {0, 1, 2}),
    # -- ranges on numbers -----------------------------------------------------------------
    ("$gt-number", {"age": {"$gt": 18.5}}, {0, 3}),
    ("$gte-number", {"age": {"$gte": 18.5}}, {0, 3, 5}),
    ("$lt-number", {"score": {"$lt": 2}}, {3}),
    ("$lte-number", {"score": {"$lte": 2}}, {1, 3}),
    ("$lte-int-float", {"score": {"$lte": 2.0}}, {1, 3}),
    ("$gt-float-bound", {"age": {"$gt": 29.9}}, {0, 3}),
    ("$gt-$lt-window", {"age": {"$gt": 2, "$lt": 45}}, {0, 5}),
    ("$gte-$lte-window", {"age": {"$gte": 2, "$lte": 45}}, {0, 2, 3, 5}),
    ("$gt-array-any", {"nums": {"$gt": 15}}, {2}),
    ("$lt-array-any", {"nums": {"$lt": 2}}, {0}),
    ("$gte-array-dedup", {"nums": {"$gte": 1}}, {0, 1, 2}),
    # each operator holds for any element on its own: 2's 20 > 4 and 3 < 6
    ("$gt-$lt-array-per-operator", {"nums": {"$gt": 4, "$lt": 6}}, {0, 2}),
    ("range-number-on-string-never", {"name": {"$gt": 0}}, set()),
    ("range-number-on-datetime-never", {"born": {"$gt": 0}}, set()),
    # -- ranges on datetimes (instants; plain dates and offset-less times are UTC) ------------
    ("$gt-plain-date", {"born": {"$gt": "2023-06-15"}}, {3, 5}),
    ("$gte-plain-date", {"born": {"$gte": "2023-06-15"}}, {2, 3, 5}),
    ("$gte-plain-date-is-utc", {"born": {"$gte": "2024-01-01"}}, {5}),
    ("$lt-plain-date-is-utc", {"born": {"$lt": "2024-01-01"}}, {0, 1, 2, 3}),
    ("$lt-offset", {"born": {"$lt": "1994-03-10T13:30:00+01:00"}}, {0, 1}),
    ("$lte-same-instant", {"born": {"$lte": "1994-03-10T13:00:00+01:00"}}, {0, 1}),
    ("$lt-same-instant", {"born": {"$lt": "1994-03-10T12:00:00Z"}}, set()),
    ("$gt-offsetless-is-utc", {"born": {"$gt": "2023-12-31T23:59:58"}}, {3, 5}),
    ("$gt-$lt-datetime-window", {"born": {"$gt": "1994-03-10T12:00:00+00:00", "$lt": "2024-01-01"}}, {2, 3}),
    ("range-datetime-on-number-never", {"age": {"$gt": "2000-01-01"}}, set()),
    # -- component objects ------------------------------------------------------------------
    ("component-value-year", {"born": {"$year": 2024}}, {5}),
    ("component-value-instant", {"born": {"$year": 1994, "$month": 3, "$day": 10, "$hour": 12}}, {0, 1}),
    ("component-value-not-a-range", {"born": {"$year": 2023}}, set()),
    ("component-$eq", {"born": {"$eq": {"$year": 2023, "$month": 6, "$day": 15}}}, {2}),
    ("component-bounds-year", {"born": {"$gte": {"$year": 2023}, "$lt": {"$year": 2024}}}, {2, 3}),
    ("component-bound-month", {"born": {"$gte": {"$year": 2023, "$month": 7}}}, {3, 5}),
    ("component-bounds-second", {"born": {"$gte": {"$year": 2023, "$month": 12, "$day": 31,
                                                   "$hour": 23, "$minute": 59, "$second": 59},
                                          "$lte": {"$year": 2024}}}, {3, 5}),
    ("component-bound-on-number-never", {"age": {"$gte": {"$year": 1970}}}, set()),
    # -- text --------------------------------------------------------------------------------
    ("$contains-case-insensitive", {"name": {"$contains": "ALICE"}}, {0, 1}),
    ("$contains-lower", {"city": {"$contains": "paris"}}, {2, 3, 5}),
    ("$contains-middle", {"name": {"$contains": "coop"}}, {1}),
    ("$contains-literal-not-regex", {"name": {"$contains": "e.e"}}, set()),
    ("$contains-parentheses", {"name": {"$contains": "(TEST)"}}, {4}),
    ("$contains-array-any", {"tags": {"$contains": "ELL"}}, {2}),
    ("$startsWith", {"name": {"$startsWith": "Al"}}, {0}),
    ("$startsWith-case-sensitive", {"name": {"$startsWith": "al"}}, {1}),
    ("$startsWith-many", {"city": {"$startsWith": "Paris"}}, {2, 3}),
    ("$startsWith-array-any", {"tags": {"$startsWith": "ye"}}, {2}),
    ("$endsWith", {"city": {"$endsWith": "in"}}, {0, 1}),
    ("$endsWith-case-sensitive", {"city": {"$endsWith": "IS"}}, {5}),
    ("$endsWith-array-any", {"tags": {"$endsWith": "ow"}}, {2}),
    # -- existence and type ------------------------------------------------------------------
    ("$exists-true", {"age": {"$exists": True}}, {0, 1, 2, 3, 5}),
    ("$exists-false", {"age": {"$exists": False}}, {4}),
    ("$exists-false-2", {"active": {"$exists": False}}, {2, 4}),
    ("null-means-missing", {"active": None}, {2, 4}),
    ("null-means-missing-array", {"nums": None}, {3, 4, 5}),
    ("$type-string", {"age": {"$type": "string"}}, {1}),
    ("$type-number", {"age": {"$type": "number"}}, {0, 2, 3, 5}),
    ("$type-boolean", {"active": {"$type": "boolean"}}, {0, 1, 3}),
    ("$type-datetime", {"born": {"$type": "datetime"}}, {0, 1, 2, 3, 5}),
    ("$type-string-array", {"tags": {"$type": "string"}}, {0, 1, 2, 3}),
    ("$type-none", {"name": {"$type": "number"}}, set()),
    # -- logic -------------------------------------------------------------------------------
    ("$and", {"$and": [{"city": {"$startsWith": "Paris"}}, {"age": {"$gt": 10}}]}, {3}),
    ("$or", {"$or": [{"age": 30}, {"name": "Bob"}]}, {0, 2}),
    ("$or-with-missing", {"$or": [{"active": None}, {"age": 45}]}, {2, 3, 4}),
    ("$nor", {"$nor": [{"age": 30}, {"city": {"$contains": "paris"}}]}, {1, 4}),
    # an object: each key is one operand (it had been read as one AND-ed operand)
    ("$or-object", {"$or": {"age": 30, "name": "Bob"}}, {0, 2}),
    ("$nor-object", {"$nor": {"age": 30, "city": {"$contains": "paris"}}}, {1, 4}),
    ("$xor-object", {"$xor": {"city": {"$contains": "paris"}, "age": {"$gt": 20}}}, {0, 2, 5}),
    ("$and-object", {"$and": {"city": {"$startsWith": "Paris"}, "age": {"$gt": 10}}}, {3}),
    # xor is "exactly one": 3 matches both branches
    ("$xor-two", {"$xor": [{"city": {"$contains": "paris"}}, {"age": {"$gt": 20}}]}, {0, 2, 5}),
    # with four branches: 0 matches two, 3 matches three (odd, but not exactly one), 2 one
    ("$xor-exactly-one-not-parity", {"$xor": [{"active": True}, {"tags": "red"}, {"age": 45}, {"name": "Bob"}]}, {2}),
    ("$not-top", {"$not": {"age": 30}}, {1, 2, 3, 4, 5}),
    ("$not-matches-missing", {"$not": {"active": True}}, {1, 2, 4, 5}),
    ("$not-field-level", {"age": {"$not": {"$gt": 20}}}, {1, 2, 4, 5}),
    ("$not-field-value", {"active": {"$not": True}}, {1, 2, 4, 5}),
    ("$not-$exists", {"$not": {"age": {"$exists": True}}}, {4}),
    ("$not-$ne-differs", {"$not": {"age": {"$ne": 30}}}, {0, 4}),
    ("nested-logic", {"$or": [{"$and": [{"age": {"$gte": 30}}, {"active": True}]},
                              {"name": {"$endsWith": "ed"}}]}, {0, 3, 5}),
    ("$and-with-$or-and-$not", {"$and": [{"$or": [{"tags": "red"}, {"tags": "green"}]},
                                          {"$not": {"city": "Berlin"}}]}, {1, 3}),
    ("empty-where", {}, ALL),
    ("empty-$and", {"$and": []}, ALL),
]


ID_CASES = [
    ("$id-string", lambda ids: {"$id": ids[2]}, {2}),
    ("$id-$in", lambda ids: {"$id": {"$in": [ids[0], ids[3]]}}, {0, 3}),
    ("$id-$in-and-field", lambda ids: {"$id": {"$in": [ids[0], ids[3]]}, "age": 30}, {0}),
    ("$id-uppercase", lambda ids: {"$id": ids[4].upper()}, {4}),
    ("$id-in-$or", lambda ids: {"$or": [{"$id": ids[1]}, {"name": "Zed"}]}, {1, 5}),
    ("$id-under-$not", lambda ids: {"$not": {"$id": {"$in": [ids[0], ids[1]]}}}, {2, 3, 4, 5}),
]


def _check_everywhere(ops, where, expected):
    api, label, ids = ops
    expected_order = by_id_desc(ids, expected)
    # REST search scoped to the label, and unscoped (the engine holds only this dataset)
    for body in ({"labels": [label], "where": where, "limit": 1000}, {"where": where, "limit": 1000}):
        page = rest_find(api, body)
        assert positions(ids, page["data"]) == expected_order, body
        assert page["total"] == len(expected), body
    # the newer route, with a page smaller than the result
    page = rest_find(api, {"labels": [label], "where": where, "limit": 1}, FIND)
    assert positions(ids, page["data"]) == expected_order[:1]
    assert page["total"] == len(expected)
    # Protocol v1 QueryDocument
    resp = protocol_records(api, {"labels": [label], "predicate": where, "limit": 1000})
    assert resp["kind"] == "records"
    assert positions(ids, resp["records"]) == expected_order
    assert resp["total"] == len(expected)


@pytest.mark.parametrize("where,expected", [(w, e) for _, w, e in OPERATOR_CASES],
                         ids=[n for n, _, _ in OPERATOR_CASES])
def test_where_operator(ops, where, expected):
    _check_everywhere(ops, where, expected)


@pytest.mark.parametrize("where,expected", [(w, e) for _, w, e in ID_CASES],
                         ids=[n for n, _, _ in ID_CASES])
def test_where_id(ops, where, expected):
    _check_everywhere(ops, where(ops[2]), expected)


def test_where_ne_and_not_differ_on_missing_fields(ops):
    """`$ne` never matches a record lacking the field; `$not` of equality does."""
    api, label, ids = ops
    ne = rest_find(api, {"labels": [label], "where": {"active": {"$ne": True}}})
    nt = rest_find(api, {"labels": [label], "where": {"$not": {"active": True}}})
    assert set(positions(ids, ne["data"])) == {1, 5}
    assert set(positions(ids, nt["data"])) == {1, 2, 4, 5}


def test_where_with_other_label_scope_is_empty(ops):
    api, label, ids = ops
    page = rest_find(api, {"labels": [unique("NONE")], "where": {"age": 30}})
    assert page == {"data": [], "total": 0}
    page = rest_find(api, {"labels": [label, unique("NONE")], "where": {"age": 30}})
    assert positions(ids, page["data"]) == [0]


def test_where_results_are_whole_records(ops):
    api, label, ids = ops
    page = rest_find(api, {"labels": [label], "where": {"name": "Bob"}})
    [rec] = page["data"]
    assert rec["id"] == rec["__id"] == ids[2]
    assert rec["label"] == rec["__label"] == label
    assert rec["tags"] == ["blue", "yellow"] and rec["nums"] == [3, 20]
    assert rec["born"] == "2023-06-15"
    assert rec["age"] == 2 and isinstance(rec["age"], int)
    assert rec["__proptypes"] == {"name": "string", "age": "number", "score": "number", "tags": "string",
                                  "born": "datetime", "city": "string", "nums": "number"}


def test_where_big_integers_are_exact(module_api):
    """Integers beyond 2^53 keep their exact value in equality, ranges and order."""
    label = unique("BIG")
    base = 2 ** 53
    ids = seed(module_api, label, [{"v": base}, {"v": base + 1}, {"v": base + 2}, {"v": -(base + 1)}])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"v": base + 1}) == {1}
    assert found({"v": {"$in": [base + 2, -(base + 1)]}}) == {2, 3}
    assert found({"v": {"$gt": base}}) == {1, 2}
    assert found({"v": {"$gte": base + 1, "$lt": base + 2}}) == {1}
    assert found({"v": {"$lt": -base}}) == {3}
    assert found({"v": {"$ne": base + 1}}) == {0, 2, 3}
    assert _order(module_api, label, ids, {"v": "asc"}) == [3, 0, 1, 2]
    assert _order(module_api, label, ids, {"v": "desc"}) == [2, 1, 0, 3]
    assert [r["v"] for r in rest_find(module_api, {"labels": [label], "orderBy": "asc"})["data"]] == \
        [base, base + 1, base + 2, -(base + 1)]


def test_where_negative_numbers_and_zero(module_api):
    label = unique("NEG")
    ids = seed(module_api, label, [{"v": -0.5}, {"v": 0}, {"v": -10}, {"v": 0.25}, {"v": -0.0}])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"v": {"$lt": 0}}) == {0, 2}
    assert found({"v": {"$gte": 0}}) == {1, 3, 4}
    assert found({"v": 0}) == {1, 4}
    assert found({"v": {"$gt": -1, "$lte": 0}}) == {0, 1, 4}
    assert _order(module_api, label, ids, {"v": "asc"}) == [2, 0, 4, 1, 3]


def test_where_datetimes_before_epoch_and_fractions(module_api):
    label = unique("EPOCH")
    ids = seed(module_api, label, [
        {"at": "1969-12-31T23:59:59Z"},               # 0
        {"at": "1970-01-01"},                         # 1
        {"at": "1900-02-28T12:00:00+12:00"},          # 2: 1900-02-28T00:00Z
        {"at": "2024-01-01T00:00:00.000000001Z"},     # 3: one nanosecond after 4
        {"at": "2024-01-01T00:00:00Z"},               # 4
        {"at": "2024-01-01T00:00:00.5+00:00"},        # 5
    ])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"at": {"$lt": "1970-01-01"}}) == {0, 2}
    assert found({"at": {"$gte": "1969-12-31T23:59:59Z", "$lte": "1970-01-01T00:00:00Z"}}) == {0, 1}
    assert found({"at": "1900-02-28"}) == {2}
    assert found({"at": {"$gt": "2024-01-01T00:00:00Z"}}) == {3, 5}
    assert found({"at": "2024-01-01T00:00:00.000000001Z"}) == {3}
    assert found({"at": {"$year": 2024, "$nanosecond": 1}}) == {3}
    assert found({"at": {"$year": 2024, "$millisecond": 500}}) == {5}
    assert found({"at": {"$gte": {"$year": 1900}, "$lt": {"$year": 1970}}}) == {0, 2}
    assert _order(module_api, label, ids, {"at": "asc"}) == [2, 0, 1, 4, 3, 5]


def test_where_contains_unicode_case_insensitive(module_api):
    label = unique("UNI")
    ids = seed(module_api, label, [{"s": "ÄRGER im Büro"}, {"s": "ärgerlich"}, {"s": "Straße"}, {"s": "ARG"}])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"s": {"$contains": "ärg"}}) == {0, 1}
    assert found({"s": {"$contains": "BÜRO"}}) == {0}
    assert found({"s": {"$contains": "arg"}}) == {3}
    assert found({"s": {"$startsWith": "Ä"}}) == {0}
    assert found({"s": {"$startsWith": "ä"}}) == {1}
    assert found({"s": {"$endsWith": "ße"}}) == {2}
    assert found({"s": {"$contains": ""}}) == {0, 1, 2, 3}


def test_where_datetime_text_on_string_and_datetime_properties(module_api):
    """A string operand that parses as a datetime matches string properties by text and
    datetime properties by instant."""
    label = unique("DTS")
    r = module_api.post("/api/v1/records", {"label": label, "properties": [
        {"name": "d", "type": "string", "value": "2024-05-05"}]})
    assert r.status_code == 201, r.text
    as_string = r.json()["data"]["id"]
    as_datetime = module_api.create(label, {"d": "2024-05-05T00:00:00Z"})
    other_text = module_api.create(label, {"d": "2024-05-05T02:00:00+02:00"})
    ids = [as_string, as_datetime, other_text]

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"d": "2024-05-05"}) == {0, 1, 2}
    assert found({"d": "2024-05-05T00:00:00Z"}) == {1, 2}
    assert found({"d": {"$in": ["2024-05-05T00:00:00+00:00"]}}) == {1, 2}
    assert found({"d": {"$type": "string"}}) == {0}
    assert found({"d": {"$gte": "2024-05-05"}}) == {1, 2}  # a datetime bound only matches datetimes
    assert found({"d": {"$startsWith": "2024-05-05T"}}) == {1, 2}


# Regression: a covered index walk must not order an array record by the element that
# matched; it sorts by its smallest (asc) / largest (desc) element like any other.


@pytest.mark.parametrize("where,direction,expected", [
    ({"a": {"$gte": 2}}, "asc", [0, 1, 2]),      # [1, 5] sorts by 1
    ({"a": {"$lte": 4}}, "desc", [0, 2, 1]),     # [1, 5] sorts by 5
    ({"a": {"$in": [5, 3]}}, "asc", [0, 1]),     # [1, 5] sorts by 1
], ids=["range-asc", "range-desc", "in-asc"])
def test_order_arrays_by_smallest_element_under_a_range_on_the_same_field(module_api, where, direction, expected):
    """The sort key of an array is its smallest (asc) / largest (desc) element, also when a
    range or `$in` on that field matched it by another element."""
    label = unique("ORDARRW")
    ids = seed(module_api, label, [{"a": [1, 5]}, {"a": 3}, {"a": 4}])
    page = rest_find(module_api, {"labels": [label], "where": where, "orderBy": {"a": direction}})
    assert positions(ids, page["data"]) == expected


def test_where_offsetless_stored_datetime_is_utc(module_api):
    label = unique("NOOFF")
    ids = seed(module_api, label, [{"at": "2024-06-01T10:00"}, {"at": "2024-06-01T10:00:00.250"},
                                   {"at": "2024-06-01"}])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"at": "2024-06-01T10:00:00Z"}) == {0}
    assert found({"at": "2024-06-01T12:00:00+02:00"}) == {0}
    assert found({"at": "2024-06-01T10:00:00.25Z"}) == {1}
    assert found({"at": "2024-05-31T22:00:00-02:00"}) == {2}
    assert found({"at": {"$gt": "2024-06-01T11:59:59+02:00", "$lt": "2024-06-01T12:00:01+02:00"}}) == {0, 1}
    assert rest_find(module_api, {"labels": [label], "where": {"at": "2024-06-01T10:00:00Z"}})["data"][0]["at"] \
        == "2024-06-01T10:00"  # returned exactly as written


def test_where_on_empty_array(module_api):
    """`[]` is stored (as an empty string array): it exists, equals nothing, and the negative
    operators hold on it (no element equals)."""
    label = unique("EMPTYARR")
    ids = seed(module_api, label, [{"e": []}, {"e": ["x"]}, {"f": 1}])

    def found(where):
        return set(positions(ids, rest_find(module_api, {"labels": [label], "where": where})["data"]))

    assert found({"e": {"$exists": True}}) == {0, 1}
    assert found({"e": None}) == {2}
    assert found({"e": "x"}) == {1}
    assert found({"e": {"$ne": "x"}}) == {0}
    assert found({"e": {"$nin": ["x", "y"]}}) == {0}
    assert found({"e": {"$in": ["x", "y"]}}) == {1}
    assert found({"e": {"$type": "string"}}) == {0, 1}
    assert found({"e": {"$contains": ""}}) == {1}


def test_order_arrays_by_smallest_element_without_where_on_it(module_api):
    label = unique("ORDARRX")
    ids = seed(module_api, label, [{"a": [1, 5], "k": 1}, {"a": 3, "k": 1}, {"a": 4, "k": 1}])
    page = rest_find(module_api, {"labels": [label], "where": {"k": 1}, "orderBy": {"a": "asc"}})
    assert positions(ids, page["data"]) == [0, 1, 2]
    page = rest_find(module_api, {"labels": [label], "where": {"k": 1}, "orderBy": {"a": "desc"}})
    assert positions(ids, page["data"]) == [0, 2, 1]


# ---------------------------------------------------------------------------------------
# orderBy
# ---------------------------------------------------------------------------------------


def _order(api, label, ids, order_by, **extra):
    body = {"labels": [label], "orderBy": order_by, "limit": 1000, **extra}
    return positions(ids, rest_find(api, body)["data"])


def test_order_by_id_asc_desc_and_default(module_api):
    label = unique("ORDID")
    ids = seed(module_api, label, [{"n": i} for i in range(5)])
    assert _order(module_api, label, ids, "asc") == [0, 1, 2, 3, 4]
    assert _order(module_api, label, ids, "desc") == [4, 3, 2, 1, 0]
    page = rest_find(module_api, {"labels": [label], "where": {"n": {"$gte": 1}}})
    assert positions(ids, page["data"]) == [4, 3, 2, 1]  # default: newest first


def test_order_by_field_numbers(module_api):
    label = unique("ORDNUM")
    ids = seed(module_api, label, [{"v": 10}, {"v": 2.5}, {"v": -3}, {"v": 7}, {"v": 1e3}])
    assert _order(module_api, label, ids, {"v": "asc"}) == [2, 1, 3, 0, 4]
    assert _order(module_api, label, ids, {"v": "desc"}) == [4, 0, 3, 1, 2]


def test_order_by_datetime_uses_the_instant(module_api):
    label = unique("ORDDT")
    ids = seed(module_api, label, [
        {"at": "1999-12-31T22:00:00Z"},        # 0: 22:00Z
        {"at": "2000-01-01T05:00:00+08:00"},   # 1: 1999-12-31T21:00Z (text sorts after 0)
        {"at": "1999-12-31T23:30:00-01:00"},   # 2: 2000-01-01T00:30Z
        {"at": "2000-01-01"},                  # 3: 2000-01-01T00:00Z
    ])
    assert _order(module_api, label, ids, {"at": "asc"}) == [1, 0, 3, 2]
    assert _order(module_api, label, ids, {"at": "desc"}) == [2, 3, 0, 1]


def test_order_strings_by_code_point(module_api):
    label = unique("ORDSTR")
    ids = seed(module_api, label, [{"s": "apple"}, {"s": "Banana"}, {"s": "banana"}, {"s": "Zoo"}, {"s": "ä"}])
    # code points: B(66) < Z(90) < a(97) < b(98) < ä(228)
    assert _order(module_api, label, ids, {"s": "asc"}) == [1, 3, 0, 2, 4]
    assert _order(module_api, label, ids, {"s": "desc"}) == [4, 2, 0, 3, 1]


def test_order_across_types_and_missing_last(module_api):
    label = unique("ORDMIX")
    ids = seed(module_api, label, [
        {"v": 10},                               # 0 number
        {"v": "2024-01-01T00:00:00Z"},           # 1 datetime (later)
        {"v": "apple"},                          # 2 string
        {"v": True},                             # 3 boolean
        {"other": 1},                            # 4 missing
        {"v": -3},                               # 5 number
        {"v": "1990-05-05"},                     # 6 datetime (earlier)
        {"v": "Banana"},                         # 7 string
        {"v": False},                            # 8 boolean
        {"other": 2},                            # 9 missing
        {"v": "1"},                              # 10 string "1" (not a number)
    ])
    # numbers < datetimes < strings (code point: "1" < "B" < "a") < booleans; missing last,
    # missing ties by id descending
    assert _order(module_api, label, ids, {"v": "asc"}) == [5, 0, 6, 1, 10, 7, 2, 8, 3, 9, 4]
    assert _order(module_api, label, ids, {"v": "desc"}) == [3, 8, 2, 7, 10, 1, 6, 0, 5, 9, 4]


def test_order_missing_last_with_paging(module_api):
    label = unique("ORDMISS")
    ids = seed(module_api, label, [{"x": 1}, {"y": 1}, {"x": 3}, {"y": 2}, {"x": 2}])
    for direction, present in (("asc", [0, 4, 2]), ("desc", [2, 4, 0])):
        full = present + [3, 1]
        assert _order(module_api, label, ids, {"x": direction}) == full
        pages = [positions(ids, rest_find(module_api, {"labels": [label], "orderBy": {"x": direction},
                                                        "skip": s, "limit": 2})["data"]) for s in (0, 2, 4)]
        assert sum(pages, []) == full


def test_order_arrays_smallest_asc_largest_desc(module_api):
    label = unique("ORDARR")
    ids = seed(module_api, label, [{"a": [5, 1, 9]}, {"a": [3, 4]}, {"a": [2, 8]}, {"a": 7}, {"a": [6, 0.5]}])
    # asc by smallest: 0.5 (4), 1 (0), 2 (2), 3 (1), 7 (3)
    assert _order(module_api, label, ids, {"a": "asc"}) == [4, 0, 2, 1, 3]
    # desc by largest: 9 (0), 8 (2), 7 (3), 6 (4), 4 (1)
    assert _order(module_api, label, ids, {"a": "desc"}) == [0, 2, 3, 4, 1]


def test_order_string_arrays(module_api):
    label = unique("ORDSARR")
    ids = seed(module_api, label, [{"t": ["j", "c"]}, {"t": ["b", "x"]}, {"t": "k"}])
    assert _order(module_api, label, ids, {"t": "asc"}) == [1, 0, 2]   # b, c, k
    assert _order(module_api, label, ids, {"t": "desc"}) == [1, 2, 0]  # x, k, j


def test_order_ties_by_id_descending(module_api):
    label = unique("ORDTIE")
    values = [1, 0, 1, 1, 0, 1]
    ids = seed(module_api, label, [{"v": v} for v in values])
    ones, zeros = by_id_desc(ids, [0, 2, 3, 5]), by_id_desc(ids, [1, 4])
    assert _order(module_api, label, ids, {"v": "asc"}) == zeros + ones
    assert _order(module_api, label, ids, {"v": "desc"}) == ones + zeros
    # with a where on the same field (index-ordered walk)
    got = positions(ids, rest_find(module_api, {"labels": [label], "where": {"v": {"$gte": 0}},
                                                 "orderBy": {"v": "asc"}})["data"])
    assert got == zeros + ones
    got = positions(ids, rest_find(module_api, {"labels": [label], "where": {"v": {"$in": [0, 1]}},
                                                 "orderBy": {"v": "desc"}})["data"])
    assert got == ones + zeros


def test_order_multi_key_array(module_api):
    label = unique("ORDMULTI")
    ids = seed(module_api, label, [{"g": 1, "n": 1}, {"g": 1, "n": 3}, {"g": 0, "n": 2},
                                   {"g": 0, "n": 5}, {"g": 1, "n": 2}, {"g": 0, "n": 2}])
    # g asc, then n desc, then id desc
    assert _order(module_api, label, ids, [{"g": "asc"}, {"n": "desc"}]) == [3, 5, 2, 1, 4, 0]
    # n asc, then g desc
    assert _order(module_api, label, ids, [{"n": "asc"}, {"g": "desc"}]) == [0, 4, 5, 2, 1, 3]


def test_order_multi_key_object_keeps_key_order(module_api):
    label = unique("ORDOBJ")
    ids = seed(module_api, label, [{"g": 1, "n": 1}, {"g": 0, "n": 1}, {"g": 0, "n": 2}, {"g": 1, "n": 2}])
    # "n" first although it sorts after "g" alphabetically
    assert _order(module_api, label, ids, {"n": "desc", "g": "asc"}) == [2, 3, 1, 0]
    assert _order(module_api, label, ids, {"g": "asc", "n": "desc"}) == [2, 1, 3, 0]


def test_order_with_where_on_other_field(module_api):
    label = unique("ORDWH")
    ids = seed(module_api, label, [{"k": "a", "v": 3}, {"k": "b", "v": 1}, {"k": "a", "v": 2},
                                   {"k": "a", "v": 5}, {"k": "b", "v": 4}])
    page = rest_find(module_api, {"labels": [label], "where": {"k": "a"}, "orderBy": {"v": "asc"}})
    assert positions(ids, page["data"]) == [2, 0, 3]
    page = rest_find(module_api, {"labels": [label], "where": {"k": "a"}, "orderBy": {"v": "desc"},
                                  "skip": 1, "limit": 1})
    assert positions(ids, page["data"]) == [0] and page["total"] == 3


def test_paging_is_stable_over_ties(module_api):
    label = unique("PAGE")
    values = [i % 3 for i in range(13)]
    ids = seed(module_api, label, [{"v": v} for v in values])
    expected = sum((by_id_desc(ids, [i for i, v in enumerate(values) if v == k]) for k in (0, 1, 2)), [])
    for where in ({}, {"v": {"$gte": 0}}, {"v": {"$in": [0, 1, 2]}}):
        seen = []
        for skip in range(0, 15, 4):
            page = rest_find(module_api, {"labels": [label], "where": where, "orderBy": {"v": "asc"},
                                          "skip": skip, "limit": 4})
            assert page["total"] == 13, where
            seen += positions(ids, page["data"])
        assert seen == expected, where
    # total ignores skip and limit, also past the end
    page = rest_find(module_api, {"labels": [label], "where": {"v": 1}, "skip": 10, "limit": 2})
    assert page == {"data": [], "total": 4}


def test_default_limit_is_100_with_where_and_order(module_api):
    label = unique("LIM")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: module_api.engine.client().create(label, {"k": i}), range(103)))
    page = rest_find(module_api, {"labels": [label], "where": {"k": {"$gte": 1}}, "orderBy": {"k": "asc"}})
    assert page["total"] == 102
    assert [r["k"] for r in page["data"]] == list(range(1, 101))
    page = rest_find(module_api, {"labels": [label], "where": {"k": {"$gte": 1}}, "orderBy": {"k": "asc"}}, FIND)
    assert len(page["data"]) == 100
    resp = protocol_records(module_api, {"labels": [label], "predicate": {"k": {"$lt": 102}}, "order": {"k": "desc"}})
    assert resp["total"] == 102
    assert [r["properties"]["k"] for r in resp["records"]] == list(range(101, 1, -1))


@pytest.fixture(scope="module")
def many(module_api):
    """150 records {k: i % 17, s: "x<i>"} created concurrently; (label, {id: doc})."""
    from concurrent.futures import ThreadPoolExecutor
    label = unique("MANYORD")
    docs = [{"k": i % 17, "s": f"x{i}"} for i in range(150)]
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda d: module_api.engine.client().create(label, d), docs))
    return label, dict(zip(ids, docs))


@pytest.mark.parametrize("where,keep,direction,skip,limit", [
    ({"s": {"$contains": "X"}}, lambda d: True, "asc", 5, 10),
    ({"s": {"$contains": "X"}}, lambda d: True, "desc", 140, 20),
    ({"k": {"$in": [1, 2, 3, 4, 5, 6, 7, 8]}}, lambda d: 1 <= d["k"] <= 8, "desc", 3, 7),
    ({"k": {"$gt": 3, "$lte": 12}}, lambda d: 3 < d["k"] <= 12, "asc", 20, 9),
    ({"s": {"$startsWith": "x1"}}, lambda d: d["s"].startswith("x1"), "asc", 2, 5),
    ({}, lambda d: True, "desc", 60, 3),
    ({"k": {"$ne": 0}}, lambda d: d["k"] != 0, "asc", 0, 1),
], ids=["residual-asc", "residual-desc-tail", "in-desc", "range-asc", "prefix-asc", "scan-desc", "ne-first"])
def test_order_and_paging_over_many_records(module_api, many, where, keep, direction, skip, limit):
    label, docs = many
    matching = [rid for rid, d in docs.items() if keep(d)]
    # key ascending or descending, ties by id descending
    ordered = sorted(matching, key=lambda rid: rid, reverse=True)
    ordered.sort(key=lambda rid: docs[rid]["k"], reverse=(direction == "desc"))
    page = rest_find(module_api, {"labels": [label], "where": where, "orderBy": {"k": direction},
                                  "skip": skip, "limit": limit})
    assert page["total"] == len(matching)
    assert [r["id"] for r in page["data"]] == ordered[skip:skip + limit]


def test_protocol_order_and_offset(module_api):
    label = unique("PORD")
    ids = seed(module_api, label, [{"v": 3}, {"v": 1}, {"v": 2}])
    resp = protocol_records(module_api, {"labels": [label], "order": {"v": "asc"}, "offset": 1, "limit": 5})
    assert positions(ids, resp["records"]) == [2, 0]
    assert resp["total"] == 3
    resp = protocol_records(module_api, {"labels": [label], "order": "asc"})
    assert positions(ids, resp["records"]) == [0, 1, 2]
    rec = resp["records"][0]
    assert set(rec) == {"id", "label", "properties", "propertyTypes"}
    assert rec["properties"] == {"v": 3} and rec["propertyTypes"] == {"v": "number"}


# ---------------------------------------------------------------------------------------
# validation errors
# ---------------------------------------------------------------------------------------

INVALID = [
    ("unknown-field-operator", {"where": {"age": {"$foo": 1}}}, "where.age.$foo"),
    ("unknown-top-operator", {"where": {"$foo": [{"a": 1}]}}, "where.$foo"),
    ("unknown-operator-nested", {"where": {"$or": [{"a": 1}, {"age": {"$regex": "x"}}]}}, "where.$or[1].age.$regex"),
    ("$gt-string-not-datetime", {"where": {"age": {"$gt": "abc"}}}, "where.age.$gt"),
    ("$gte-bool", {"where": {"age": {"$gte": True}}}, "where.age.$gte"),
    ("$lt-array", {"where": {"age": {"$lt": [1]}}}, "where.age.$lt"),
    ("$lte-null", {"where": {"age": {"$lte": None}}}, "where.age.$lte"),
    ("$in-string", {"where": {"age": {"$in": "x"}}}, "where.age.$in"),
    ("$in-empty", {"where": {"age": {"$in": []}}}, "where.age.$in"),
    ("$in-nested-array", {"where": {"age": {"$in": [[1]]}}}, "where.age.$in"),
    ("$nin-number", {"where": {"age": {"$nin": 5}}}, "where.age.$nin"),
    ("$exists-string", {"where": {"age": {"$exists": "yes"}}}, "where.age.$exists"),
    ("$exists-number", {"where": {"age": {"$exists": 1}}}, "where.age.$exists"),
    ("$contains-number", {"where": {"name": {"$contains": 5}}}, "where.name.$contains"),
    ("$startsWith-null", {"where": {"name": {"$startsWith": None}}}, "where.name.$startsWith"),
    ("$endsWith-array", {"where": {"name": {"$endsWith": ["x"]}}}, "where.name.$endsWith"),
    ("$type-unknown", {"where": {"age": {"$type": "integer"}}}, "where.age.$type"),
    ("$and-number", {"where": {"$and": 5}}, "where.$and"),
    ("$id-not-uuid", {"where": {"$id": "not-a-uuid"}}, "where.$id"),
    ("$id-$in-empty", {"where": {"$id": {"$in": []}}}, "where.$id.$in"),
    ("component-out-of-range", {"where": {"born": {"$gte": {"$year": 2023, "$month": 13}}}}, "where.born.$gte.$month"),
    ("component-day-past-month", {"where": {"born": {"$year": 2023, "$month": 2, "$day": 29}}}, "where.born.$day"),
    ("component-day-31-of-30", {"where": {"born": {"$lt": {"$year": 2024, "$month": 4, "$day": 31}}}}, "where.born.$lt.$day"),
    ("array-as-value", {"where": {"age": [1, 2]}}, "where.age"),
    ("unknown-operator-under-field-$not", {"where": {"age": {"$not": {"$foo": 1}}}}, "where.age.$not.$foo"),
    ("unknown-operator-under-$not", {"where": {"$not": {"age": {"$bar": 1}}}}, "where.$not.age.$bar"),
    ("where-not-object", {"where": "age = 1"}, "where"),
    ("limit-1001", {"limit": 1001}, "limit"),
    ("limit-0", {"limit": 0}, "limit"),
    ("limit-0-with-where", {"limit": 0, "where": {"a": 1}}, "limit"),
    ("skip-negative", {"skip": -1}, "skip"),
    ("orderBy-unknown-direction-string", {"orderBy": "sideways"}, "orderBy"),
    ("orderBy-unknown-direction-field", {"orderBy": {"age": "up"}}, "orderBy.age"),
    ("orderBy-array-bad-item", {"orderBy": [{"a": "asc"}, "x"]}, "orderBy[1]"),
    ("orderBy-number", {"orderBy": 5}, "orderBy"),
    ("groupBy-string", {"groupBy": "$record.genre", "aggregate": {"n": {"fn": "count"}}}, "groupBy"),
    ("groupBy-number-item", {"groupBy": [5], "aggregate": {"n": {"fn": "count"}}}, "groupBy"),
    ("groupBy-empty-field", {"groupBy": ["$record."], "aggregate": {"n": {"fn": "count"}}}, "groupBy[0]"),
    ("groupBy-unknown-output", {"groupBy": ["nothing"], "aggregate": {"n": {"fn": "count"}}}, "groupBy[0]"),
    ("groupBy-bad-second", {"groupBy": ["$record.a", ""], "aggregate": {"n": {"fn": "count"}}}, "groupBy[1]"),
    ("aggregate-and-select", {"aggregate": {"n": {"fn": "count"}}, "select": {"m": {"$count": "*"}}}, "select"),
    ("aggregate-unknown-fn", {"aggregate": {"n": {"fn": "median", "field": "a"}}}, "aggregate.n.fn"),
    ("aggregate-sum-no-field", {"aggregate": {"n": {"fn": "sum"}}}, "aggregate.n"),
    ("timeBucket-bad-granularity", {"aggregate": {"b": {"fn": "timeBucket", "field": "at", "granularity": "fortnight"}}},
     "aggregate.b.granularity"),
]


@pytest.mark.parametrize("path", [SEARCH, FIND])
@pytest.mark.parametrize("body,needle", [(b, n) for _, b, n in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_search_is_400_naming_the_path(module_api, path, body, needle):
    body = {"labels": [unique("INV")], **body}
    assert_rest_error(module_api.post(path, body), 400, "invalid_argument", message_contains=[needle])


def test_invalid_where_on_protocol_is_400(module_api):
    r = module_api.protocol({"kind": "query", "query": {"kind": "records", "query": {
        "labels": ["X"], "predicate": {"age": {"$foo": 1}}}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["$foo"])
    r = module_api.protocol({"kind": "query", "query": {"kind": "records", "query": {"limit": 1001}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["limit"])


def test_invalid_where_does_not_delete(module_api):
    label = unique("INVDEL")
    ids = seed(module_api, label, [{"a": 1}, {"a": 2}])
    r = module_api.post("/api/v1/records/delete", {"labels": [label], "where": {"a": {"$foo": 1}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["where.a.$foo"])
    r = module_api.post("/api/v1/records/delete", {"labels": [label], "where": {"a": {"$in": []}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["where.a.$in"])
    assert positions(ids, rest_find(module_api, {"labels": [label], "orderBy": "asc"})["data"]) == [0, 1]


TRAVERSALS = [
    ("related-label-block", {"AUTHOR": {"name": "x"}}),
    ("related-block-empty", {"AUTHOR": {}}),
    ("related-block-in-or", {"$or": [{"a": 1}, {"AUTHOR": {"name": "x"}}]}),
    ("related-block-with-alias", {"AUTHOR": {"$alias": "$author", "name": "x"}}),
    ("$relation", {"AUTHOR": {"$relation": "WROTE", "name": "x"}}),
]


@pytest.mark.parametrize("name,where", TRAVERSALS, ids=[t[0] for t in TRAVERSALS])
def test_traversal_blocks_parse_on_every_route(module_api, name, where):
    """Blocks are accepted by search, find and Protocol v1 (test_relationships.py checks
    what they match); with no related AUTHOR records nothing matches the block."""
    label = unique("TRB")
    seed(module_api, label, [{"a": 1}, {"a": 2}])
    expected = 1 if name == "related-block-in-or" else 0
    assert rest_find(module_api, {"labels": [label], "where": where})["total"] == expected
    assert rest_find(module_api, {"labels": [label], "where": where}, FIND)["total"] == expected
    r = module_api.protocol({"kind": "query", "query": {"kind": "records", "query": {"labels": [label], "predicate": where}}})
    assert r.status_code == 200 and r.json()["response"]["total"] == expected


@pytest.mark.parametrize("where,path", [
    ({"$relation": {"type": "WROTE", "direction": "out"}}, "where.$relation"),
    ({"$alias": "$author"}, "where.$alias"),
    ({"AUTHOR": {"$relation": {"direction": "up"}}}, "where.AUTHOR.$relation.direction"),
    ({"AUTHOR": {"$relation": {"hops": {"min": 3, "max": 2}}}}, "where.AUTHOR.$relation.hops"),
    ({"AUTHOR": {"$relation": {"hops": 0}}}, "where.AUTHOR.$relation.hops"),
    ({"AUTHOR": {"$relation": {"kind": "x"}}}, "where.AUTHOR.$relation.kind"),
    ({"AUTHOR": {"$alias": "record"}}, "where.AUTHOR.$alias"),
])
def test_bad_traversal_is_400_naming_the_path(module_api, where, path):
    assert_rest_error(module_api.post(SEARCH, {"where": where}), 400, "invalid_argument", message_contains=[path])


def test_traversal_block_in_delete_deletes_only_matches(module_api):
    label = unique("TRDEL")
    ids = seed(module_api, label, [{"a": 1}])
    r = module_api.post("/api/v1/records/delete", {"labels": [label], "where": {"AUTHOR": {"a": 1}}})
    assert r.status_code == 201, r.text
    assert positions(ids, rest_find(module_api, {"labels": [label]})["data"]) == [0]


def test_aggregate_over_undeclared_alias_is_400(module_api):
    body = {"labels": ["BOOK"], "aggregate": {"n": {"fn": "count", "alias": "$author"}}}
    assert_rest_error(module_api.post(SEARCH, body), 400, "invalid_argument", message_contains=["$author"])


# ---------------------------------------------------------------------------------------
# bulk delete by query
# ---------------------------------------------------------------------------------------


def _delete(api, body):
    r = api.post("/api/v1/records/delete", body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["success"] is True
    return out["data"]["message"]


def test_delete_by_where(module_api):
    label, other = unique("DEL"), unique("DELO")
    ids = seed(module_api, label, [{"n": i} for i in range(5)])
    kept_other = seed(module_api, other, [{"n": 4}])
    assert _delete(module_api, {"labels": [label], "where": {"n": {"$gte": 3}}}) == "2 record(s) deleted"
    assert positions(ids, rest_find(module_api, {"labels": [label], "orderBy": "asc"})["data"]) == [0, 1, 2]
    for i in (3, 4):
        assert_rest_error(module_api.get(f"/api/v1/records/{ids[i]}"), 404, "not_found")
    # the other label's record with n=4 is untouched
    assert module_api.record(kept_other[0])["n"] == 4
    assert module_api.labels()[label] == 3
    # nothing left to match
    assert _delete(module_api, {"labels": [label], "where": {"n": {"$gte": 3}}}) == "0 record(s) deleted"


def test_delete_ignores_paging(module_api):
    label = unique("DELPG")
    seed(module_api, label, [{"n": i} for i in range(6)])
    assert _delete(module_api, {"labels": [label], "where": {"n": {"$lt": 4}}, "limit": 1, "skip": 2}) \
        == "4 record(s) deleted"
    assert sorted(r["n"] for r in rest_find(module_api, {"labels": [label]})["data"]) == [4, 5]


def test_delete_labels_without_where_deletes_all_of_them(module_api):
    a, b, c = unique("DELA"), unique("DELB"), unique("DELC")
    seed(module_api, a, [{"x": 1}, {"x": 2}])
    seed(module_api, b, [{"x": 3}])
    kept = seed(module_api, c, [{"x": 1}])
    assert _delete(module_api, {"labels": [a, b]}) == "3 record(s) deleted"
    labels = module_api.labels()
    assert a not in labels and b not in labels and labels[c] == 1
    assert module_api.record(kept[0])["x"] == 1


def test_delete_where_without_labels_spans_labels(module_api):
    marker = unique("m")
    a, b = unique("DWA"), unique("DWB")
    ia = seed(module_api, a, [{marker: 1}, {marker: 2}])
    ib = seed(module_api, b, [{marker: 1}, {"other": 1}])
    assert _delete(module_api, {"where": {marker: 1}}) == "2 record(s) deleted"
    assert positions(ia, rest_find(module_api, {"labels": [a]})["data"]) == [1]
    assert positions(ib, rest_find(module_api, {"labels": [b]})["data"]) == [1]


def test_delete_everything_is_refused(module_api):
    label = unique("DELALL")
    seed(module_api, label, [{"a": 1}])
    before = module_api.search({"limit": 1})["total"]
    for body in ({}, {"where": {}}, {"labels": []}, {"limit": 5}):
        assert_rest_error(module_api.post("/api/v1/records/delete", body), 400, "invalid_argument")
    assert module_api.search({"limit": 1})["total"] == before


def test_delete_updates_property_counts(module_api):
    label, prop = unique("DELPC"), unique("pc")
    seed(module_api, label, [{prop: 1}, {prop: 2}, {prop: 3}])
    _delete(module_api, {"labels": [label], "where": {prop: {"$ne": 2}}})
    p = module_api.property_by(prop, "number")
    assert p is not None and p["recordsCount"] == 1


def test_protocol_delete_records(module_api):
    label = unique("PDEL")
    ids = seed(module_api, label, [{"n": 1}, {"n": 2}, {"n": 3}])
    r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "deleteRecords", "query": {
        "labels": [label], "predicate": {"n": {"$in": [1, 3]}}}}})
    assert r.status_code == 200, r.text
    assert r.json()["response"] == {"kind": "mutation", "affected": 2}
    assert positions(ids, rest_find(module_api, {"labels": [label]})["data"]) == [1]
    r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "deleteRecords", "query": {}}})
    assert_protocol_error(r, 400, "invalid_argument")
    assert positions(ids, rest_find(module_api, {"labels": [label]})["data"]) == [1]


# ---------------------------------------------------------------------------------------
# labels/search and properties/search with where
# ---------------------------------------------------------------------------------------


def test_labels_search_with_where(module_api):
    flag = unique("flag")
    a, b, c = unique("LWA"), unique("LWB"), unique("LWC")
    seed(module_api, a, [{flag: True}, {flag: True}, {flag: False}])
    seed(module_api, b, [{flag: True}, {"x": 1}])
    seed(module_api, c, [{flag: False}])
    assert module_api.labels({"where": {flag: True}}) == {a: 2, b: 1}
    assert module_api.labels({"where": {flag: {"$exists": True}}}) == {a: 3, b: 1, c: 1}
    assert module_api.labels({"where": {flag: True}, "labels": [a]}) == {a: 2}
    assert module_api.labels({"where": {flag: False}, "labels": [b]}) == {}
    assert module_api.labels({"where": {"$or": [{flag: False}, {"x": 1, flag: None}]}, "labels": [a, b, c]}) \
        == {a: 1, b: 1, c: 1}
    # without where: the label counters
    all_labels = module_api.labels({"labels": [a, c]})
    assert all_labels == {a: 3, c: 1}


def test_labels_search_invalid_where(module_api):
    assert_rest_error(module_api.post("/api/v1/labels/search", {"where": {"a": {"$foo": 1}}}),
                      400, "invalid_argument", message_contains=["where.a.$foo"])


def _props(api, body):
    r = api.post("/api/v1/properties/search", body)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert set(data) == {"data", "total"}
    assert data["total"] == len(data["data"])
    for p in data["data"]:
        assert set(p) == {"id", "name", "type", "metadata", "recordsCount"}, p
    return data["data"]


def test_properties_search_with_where(module_api):
    label = unique("PW")
    pa, pb, pc = unique("pa"), unique("pb"), unique("pc")
    seed(module_api, label, [{pa: 1, pb: "x"}, {pa: 2}, {pc: True}, {pa: "two", pb: "y"}])
    mine = {pa, pb, pc}

    def summary(body):
        return {(p["name"], p["type"]): p["recordsCount"] for p in _props(module_api, body) if p["name"] in mine}

    # without where: every property with its full count
    assert summary({}) == {(pa, "number"): 2, (pa, "string"): 1, (pb, "string"): 2, (pc, "boolean"): 1}
    # with where: properties held by matching records, counted over them
    assert summary({"where": {pa: {"$gte": 1}}}) == {(pa, "number"): 2, (pb, "string"): 1}
    assert summary({"where": {pa: 2}}) == {(pa, "number"): 1}
    assert summary({"where": {pb: {"$exists": True}}}) == {(pa, "number"): 1, (pa, "string"): 1, (pb, "string"): 2}
    assert summary({"where": {pc: True}, "labels": [label]}) == {(pc, "boolean"): 1}
    assert summary({"where": {pa: 99}}) == {}
    # the ids are the tenant-wide property ids
    ids = {(p["name"], p["type"]): p["id"] for p in _props(module_api, {}) if p["name"] in mine}
    for p in _props(module_api, {"where": {pa: {"$gte": 1}}}):
        if p["name"] in mine:
            assert p["id"] == ids[(p["name"], p["type"])]


def test_properties_search_with_labels_only(module_api):
    a, b = unique("PLA"), unique("PLB")
    p = unique("pl")
    seed(module_api, a, [{p: 1}, {p: 2}])
    seed(module_api, b, [{p: 3}])
    got = [x for x in _props(module_api, {"labels": [a]}) if x["name"] == p]
    assert [(x["type"], x["recordsCount"]) for x in got] == [("number", 2)]


# ---------------------------------------------------------------------------------------
# property values
# ---------------------------------------------------------------------------------------


def _values(api, pid, body):
    r = api.post(f"/api/v1/properties/{pid}/values", body)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert set(data) == {"values", "min", "max", "type"}
    return data


def test_property_values_numbers(module_api):
    label, prop = unique("PV"), unique("pv")
    seed(module_api, label, [{prop: 5}, {prop: 3}, {prop: 5}, {prop: [1, 9]}, {prop: 12}, {prop: 2.5}])
    pid = module_api.property_by(prop, "number")["id"]
    out = _values(module_api, pid, {})
    assert out == {"values": [1, 2.5, 3, 5, 9, 12], "min": 1, "max": 12, "type": "number"}
    assert _values(module_api, pid, {"orderBy": "desc"})["values"] == [12, 9, 5, 3, 2.5, 1]
    assert _values(module_api, pid, {"orderBy": "asc", "skip": 1, "limit": 2})["values"] == [2.5, 3]
    paged = _values(module_api, pid, {"orderBy": "desc", "skip": 4, "limit": 10})
    assert paged["values"] == [2.5, 1]
    assert (paged["min"], paged["max"]) == (1, 12)
    # values of an integral number come back without a fraction
    r = module_api.post(f"/api/v1/properties/{pid}/values", {})
    assert '"values":[1,2.5,3,5,9,12]' in r.text.replace(" ", "")


def test_property_values_strings_query(module_api):
    label, prop = unique("PVS"), unique("pvs")
    seed(module_api, label, [{prop: "Apple"}, {prop: "banana"}, {prop: "apricot"}, {prop: "Cherry"},
                             {prop: ["banana", "grape"]}, {prop: "A.p"}])
    pid = module_api.property_by(prop, "string")["id"]
    out = _values(module_api, pid, {})
    # code point order: "A.p" < "Apple" < "Cherry" < "apricot" < "banana" < "grape"
    assert out["values"] == ["A.p", "Apple", "Cherry", "apricot", "banana", "grape"]
    assert (out["min"], out["max"], out["type"]) == ("A.p", "grape", "string")
    # query: case-insensitive substring, literal text
    assert _values(module_api, pid, {"query": "AP"})["values"] == ["Apple", "apricot", "grape"]
    assert _values(module_api, pid, {"query": "ap", "orderBy": "desc"})["values"] == ["grape", "apricot", "Apple"]
    assert _values(module_api, pid, {"query": "a.p"})["values"] == ["A.p"]
    assert _values(module_api, pid, {"query": "zzz"})["values"] == []


def test_property_values_same_name_two_types(module_api):
    label, prop = unique("PV2"), unique("pv2")
    seed(module_api, label, [{prop: 3}, {prop: "3"}, {prop: "b"}, {prop: 1}])
    num = _values(module_api, module_api.property_by(prop, "number")["id"], {})
    text = _values(module_api, module_api.property_by(prop, "string")["id"], {})
    assert num == {"values": [1, 3], "min": 1, "max": 3, "type": "number"}
    assert text == {"values": ["3", "b"], "min": "3", "max": "b", "type": "string"}


def test_property_values_datetimes(module_api):
    label, prop = unique("PVD"), unique("pvd")
    seed(module_api, label, [{prop: "2024-01-01T05:00:00+08:00"}, {prop: "2023-12-31T22:00:00Z"},
                             {prop: "2020-02-02"}])
    pid = module_api.property_by(prop, "datetime")["id"]
    out = _values(module_api, pid, {})
    # instants: 2020-02-02, 2023-12-31T21:00Z, 2023-12-31T22:00Z; returned as written
    assert out["values"] == ["2020-02-02", "2024-01-01T05:00:00+08:00", "2023-12-31T22:00:00Z"]
    assert (out["min"], out["max"], out["type"]) == ("2020-02-02", "2023-12-31T22:00:00Z", "datetime")


def test_property_values_where_and_labels(module_api):
    # The SDK sends a SearchDto's labels and where with the values query; they narrow the
    # records whose values are listed, as in Protocol v1 propertyValues.
    a, b, prop = unique("PVW"), unique("PVW"), unique("pvw")
    seed(module_api, a, [{prop: "x", "year": 2010}, {prop: "y", "year": 2020}, {prop: "z", "year": 2021}])
    seed(module_api, b, [{prop: "w", "year": 2022}])
    pid = module_api.property_by(prop, "string")["id"]
    assert _values(module_api, pid, {})["values"] == ["w", "x", "y", "z"]
    assert _values(module_api, pid, {"labels": [a]})["values"] == ["x", "y", "z"]
    assert _values(module_api, pid, {"where": {"year": {"$gt": 2015}}})["values"] == ["w", "y", "z"]
    out = _values(module_api, pid, {"labels": [a], "where": {"year": {"$gt": 2015}}, "orderBy": "desc"})
    assert out["values"] == ["z", "y"]
    assert_rest_error(module_api.post(f"/api/v1/properties/{pid}/values", {"labels": "A"}), 400,
                      "invalid_argument", message_contains=["labels"])
    assert_rest_error(module_api.post(f"/api/v1/properties/{pid}/values", {"where": {"year": {"$near": 1}}}),
                      400, "invalid_argument", message_contains=["$near"])


def test_property_values_distinct_when_one_instant_is_written_several_ways(module_api):
    label, prop = unique("PVI"), unique("pvi")
    written = ["2021-05-05", "2021-05-05T00:00:00Z", "2021-05-05", "2021-05-05T02:00:00+02:00",
               "2021-05-05T00:00:00Z", "2021-05-06"]
    seed(module_api, label, [{prop: v} for v in written])
    pid = module_api.property_by(prop, "datetime")["id"]
    out = _values(module_api, pid, {})
    # one of each text; texts of one instant in code point order
    assert out["values"] == ["2021-05-05", "2021-05-05T00:00:00Z", "2021-05-05T02:00:00+02:00", "2021-05-06"]


def test_property_values_validation(module_api):
    label, prop = unique("PVV"), unique("pvv")
    seed(module_api, label, [{prop: 1}])
    pid = module_api.property_by(prop, "number")["id"]
    for body, needle in (({"limit": 1001}, "limit"), ({"limit": 0}, "limit"), ({"skip": -1}, "skip"),
                         ({"orderBy": "up"}, "orderBy")):
        assert_rest_error(module_api.post(f"/api/v1/properties/{pid}/values", body), 400, "invalid_argument",
                          message_contains=[needle])
    # an unknown property id
    r = module_api.post("/api/v1/properties/0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f/values", {})
    assert_rest_error(r, 404, "not_found")
    # the path names a property by id: a name, a non-UUID or another UUID version is a 400
    for bad in (prop, "xyz", "0d8f6c1e-7a4b-4c2e-9f3d-2a1b3c4d5e6f"):
        assert_rest_error(module_api.post(f"/api/v1/properties/{bad}/values", {}), 400, "invalid_argument",
                          message_contains=["property id"])


def test_protocol_property_values(module_api):
    label, prop = unique("PPV"), unique("ppv")
    seed(module_api, label, [{prop: "b", "k": 1}, {prop: "a", "k": 2}, {prop: "c", "k": 1}])
    r = module_api.protocol({"kind": "query", "query": {"kind": "propertyValues", "property": prop, "query": {
        "order": "desc", "predicate": {"k": 1}, "labels": [label]}}})
    assert r.status_code == 200, r.text
    resp = r.json()["response"]
    assert resp["kind"] == "propertyValues"
    assert resp["values"] == ["c", "b"]


# ---------------------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codes(module_api):
    label = unique("EXP")
    docs = [{"code": i % 10, "name": f"n{i}"} for i in range(50)]
    ids = seed(module_api, label, docs)
    return label, ids


def _plan_shape(plan):
    assert set(plan) >= {"access", "estimatedRows", "actualRows", "examinedRows", "covered", "indexOrder",
                         "returnedRows"}, plan


def test_explain_equality_uses_the_index(module_api, codes):
    label, _ = codes
    plan = explain(module_api, {"labels": [label], "predicate": {"code": 7}, "limit": 2})
    _plan_shape(plan)
    assert "index" in plan["access"] and "scan" not in plan["access"], plan
    assert plan["actualRows"] == 5
    assert plan["examinedRows"] <= 5
    assert plan["returnedRows"] == 2
    # the same query answers the same
    page = rest_find(module_api, {"labels": [label], "where": {"code": 7}, "limit": 2})
    assert page["total"] == 5 and len(page["data"]) == 2


def test_explain_in_and_range_use_the_index(module_api, codes):
    label, _ = codes
    plan = explain(module_api, {"labels": [label], "predicate": {"code": {"$in": [1, 2]}}})
    assert "index" in plan["access"] and plan["actualRows"] == 10 and plan["returnedRows"] == 10, plan
    plan = explain(module_api, {"labels": [label], "predicate": {"code": {"$gte": 8}}})
    assert "index" in plan["access"] and plan["actualRows"] == 10, plan
    assert plan["examinedRows"] <= 10


def test_explain_residual_filter_counts(module_api, codes):
    label, _ = codes
    plan = explain(module_api, {"labels": [label], "predicate": {"code": 3, "name": {"$contains": "3"}}})
    # code 3: n3, n13, n23, n33, n43; all contain "3"
    assert plan["actualRows"] == 5, plan
    plan = explain(module_api, {"labels": [label], "predicate": {"code": 3, "name": {"$endsWith": "3"}, "x": None}})
    assert plan["actualRows"] == 5, plan
    plan = explain(module_api, {"labels": [label], "predicate": {"code": 3, "name": "n13"}})
    assert plan["actualRows"] == 1, plan


def test_explain_label_scan_without_where(module_api, codes):
    label, _ = codes
    plan = explain(module_api, {"labels": [label], "limit": 10})
    _plan_shape(plan)
    assert "label scan" in plan["access"], plan
    assert plan["actualRows"] == 50 and plan["returnedRows"] == 10
    plan = explain(module_api, {"labels": [label], "predicate": {"name": {"$ne": "n4"}}})
    assert "label scan" in plan["access"], plan
    assert plan["actualRows"] == 49
    # $contains walks the name index by value instead of reading records
    plan = explain(module_api, {"labels": [label], "predicate": {"name": {"$contains": "4"}}})
    assert plan["access"] == "index value walk on name", plan
    # n4, n14, n24, n34 and n40..n49
    assert plan["actualRows"] == 14 and plan["examinedRows"] == 14


def test_explain_unknown_label_and_no_match(module_api, codes):
    label, _ = codes
    plan = explain(module_api, {"labels": [label], "predicate": {"code": 99}})
    assert plan["actualRows"] == 0 and plan["returnedRows"] == 0
    plan = explain(module_api, {"labels": [unique("NOPE")]})
    assert plan["actualRows"] == 0


def test_explain_invalid_query_is_400(module_api):
    r = module_api.protocol({"kind": "describe", "describe": {"kind": "explain", "query": {
        "predicate": {"a": {"$gt": "abc"}}}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["$gt"])


# ---------------------------------------------------------------------------------------
# $contains / $endsWith answered by a value walk of the property index
# ---------------------------------------------------------------------------------------

WALK_CITIES = ["Lima", "Malmö", "Amsterdam", "MANILA", "Oslo", "Rome", "Tampa", "Ñuñoa", "Kraków",
               "Omaha", "Boston", "Dakar"]


@pytest.fixture(scope="module")
def walk(module_api):
    """(label, docs, ids): long runs of equal cities (so failing runs are skipped, not read),
    plus arrays, numbers and missing values that a text predicate must not match."""
    label = unique("WALK")
    docs = []
    for i in range(230):
        if i % 23 == 5:
            doc = {"n": i, "city": [WALK_CITIES[i % 12], WALK_CITIES[(i + 3) % 12]]}
        elif i % 23 == 7:
            doc = {"n": i, "city": i}
        elif i % 23 == 9:
            doc = {"n": i}
        else:
            # quadratic skew: a few long runs and several short ones
            doc = {"n": i, "city": WALK_CITIES[(i * i) % 12]}
        docs.append(doc)
    ids = seed(module_api, label, docs)
    # Same property under another label: must stay out of a labelled search.
    seed(module_api, unique("WALKX"), [{"city": "Lima"}, {"city": "Malmö"}])
    return label, docs, ids


def _texts(doc):
    c = doc.get("city")
    vals = c if isinstance(c, list) else [c]
    return [v for v in vals if isinstance(v, str)]


@pytest.mark.parametrize("op,needle", [
    ("$contains", "ma"), ("$contains", "MA"), ("$contains", "ö"), ("$contains", "ÑU"),
    ("$contains", "zzz"), ("$contains", ""), ("$endsWith", "a"), ("$endsWith", "Lima"),
    ("$endsWith", "ow"),
])
def test_text_predicates_walk_the_index(module_api, walk, op, needle):
    label, docs, ids = walk

    def match(doc):
        if op == "$contains":
            return any(needle.lower() in t.lower() for t in _texts(doc))
        return any(t.endswith(needle) for t in _texts(doc))

    want = [ids[i] for i, d in enumerate(docs) if match(d)]
    where = {"city": {op: needle}}
    page = rest_find(module_api, {"labels": [label], "where": where, "limit": 1000})
    assert page["total"] == len(want)
    assert [r["__id"] for r in page["data"]] == sorted(want, reverse=True)
    # paged, default order (newest first)
    page = rest_find(module_api, {"labels": [label], "where": where, "skip": 3, "limit": 5})
    assert page["total"] == len(want)
    assert [r["__id"] for r in page["data"]] == sorted(want, reverse=True)[3:8]
    # ordered by another field: the walk feeds the top-k
    page = rest_find(module_api, {"labels": [label], "where": where, "orderBy": {"n": "asc"},
                                  "skip": 2, "limit": 4})
    assert page["total"] == len(want)
    assert [r["__id"] for r in page["data"]] == want[2:6]
    plan = explain(module_api, {"labels": [label], "predicate": where})
    assert plan["access"] == "index value walk on city", plan
    assert plan["covered"] is True and plan["actualRows"] == len(want), plan


def test_text_walk_in_index_order_on_the_same_field(module_api):
    label = unique("WALKO")
    names = ["Lima", "Malmö", "Amsterdam", "MANILA", "Oslo", "Tampa", "Omaha"]
    docs = [{"city": names[(i * 3) % len(names)]} for i in range(70)]
    ids = seed(module_api, label, docs)
    where = {"city": {"$contains": "ma"}}
    rows = [(d["city"], ids[i]) for i, d in enumerate(docs) if "ma" in d["city"].lower()]
    for direction in ("asc", "desc"):
        # values in code-point order, ties by id descending (BEHAVIOUR.md §2)
        order = sorted(rows, key=lambda r: r[1], reverse=True)
        order = sorted(order, key=lambda r: r[0], reverse=direction == "desc")
        page = rest_find(module_api, {"labels": [label], "where": where,
                                      "orderBy": {"city": direction}, "skip": 4, "limit": 11})
        assert page["total"] == len(rows)
        assert [r["__id"] for r in page["data"]] == [i for _, i in order[4:15]], direction
        plan = explain(module_api, {"labels": [label], "predicate": where,
                                    "order": {"city": direction}, "limit": 3})
        assert plan["indexOrder"] is True, plan


def test_text_walk_not_used_when_a_datetime_shares_the_name(module_api):
    label = unique("WALKD")
    ids = seed(module_api, label, [{"when": "2024-01-02T00:00:00Z"}, {"when": "May 2024"},
                                   {"when": "never"}])
    page = rest_find(module_api, {"labels": [label], "where": {"when": {"$contains": "2024"}}})
    assert sorted(r["__id"] for r in page["data"]) == sorted(ids[:2])
    plan = explain(module_api, {"labels": [label], "predicate": {"when": {"$contains": "2024"}}})
    assert "walk" not in plan["access"], plan


def test_negative_paging_names_the_field_each_surface_uses(module_api):
    r = module_api.post("/api/v1/records/search", {"skip": -1})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["skip"])
    r = module_api.protocol({"kind": "query", "query": {"kind": "records", "query": {"offset": -1}}})
    assert_protocol_error(r, 400, "invalid_argument", message_contains=["offset"])
