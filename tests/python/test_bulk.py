"""Bulk data through REST, Protocol v1 and the `rushdb` 3.0 SDK in direct mode: nested JSON
import (every shape and write option), CSV import (every parseConfig option, header rules,
malformed input), CSV export (columns, CRLF, quoting) and its round trip, upsert (append,
rewrite, mergeBy, nested remapping, concurrency), atomic failure, and a 50,000-document ingest.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import threading

import pytest
from rushdb import RushDB

from conftest import DEV_TOKEN, ENGINE_BIN, assert_protocol_error, assert_rest_error, engine_env, is_uuid_v7, unchanged, unique

DEFAULT_TYPE = "__SERVICE__RELATION__DEFAULT__"


def import_json(api, body, status=201):
    r = api.post("/api/v1/records/import/json", body)
    assert r.status_code == status, f"{body} -> {r.text}"
    return r.json()["data"]


def import_csv(api, body, status=201):
    r = api.post("/api/v1/records/import/csv", body)
    assert r.status_code == status, f"{body} -> {r.text}"
    return r.json()["data"]


def export(api, body):
    r = api.post("/api/v1/records/export/csv", body)
    assert r.status_code == 200, f"{body} -> {r.text}"
    data = r.json()["data"]
    assert set(data) == {"fileContent", "dateTime"}
    assert data["dateTime"].endswith("Z") and data["dateTime"][4] == "-"
    return data["fileContent"]


def records_of(api, label, **extra):
    return api.search({"labels": [label], "limit": 1000, **extra})["data"]


def props(rec):
    return {k: v for k, v in rec.items() if not k.startswith("__") and k not in ("id", "label")}


def rels_of(api, rid):
    r = api.get(f"/api/v1/records/{rid}/relationships")
    assert r.status_code == 200, r.text
    return r.json()["data"]["data"]


def children(api, rid, type_=DEFAULT_TYPE):
    """Ids of the records `rid` points to with `type_`."""
    return {x["targetId"] for x in rels_of(api, rid) if x["sourceId"] == rid and x["type"] == type_}


# ---------------------------------------------------------------------------------------
# JSON import: shapes
# ---------------------------------------------------------------------------------------


def test_import_single_object_with_nested_object_and_array(module_api):
    order = unique("ORDER")
    out = import_json(module_api, {"label": order, "data": {
        "number": 7, "paid": True, "tags": ["a", "b"],
        "customer": {"name": "Ada", "address": {"city": "Berlin"}},
        "items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}],
    }})
    assert out == {"message": "5 record(s) imported", "count": 5}
    [root] = records_of(module_api, order)
    assert props(root) == {"number": 7, "paid": True, "tags": ["a", "b"]}
    kids = children(module_api, root["__id"])
    assert len(kids) == 3
    labels = sorted(module_api.record(k)["__label"] for k in kids)
    assert labels == ["customer", "items", "items"]
    [cust] = [k for k in kids if module_api.record(k)["__label"] == "customer"]
    assert props(module_api.record(cust)) == {"name": "Ada"}
    [addr] = children(module_api, cust)
    assert module_api.record(addr)["__label"] == "address"
    assert props(module_api.record(addr)) == {"city": "Berlin"}
    skus = sorted(module_api.record(k)["sku"] for k in kids if module_api.record(k)["__label"] == "items")
    assert skus == ["x", "y"]


def test_import_array_needs_label_and_makes_one_root_each(module_api):
    label = unique("ROW")
    assert_rest_error(module_api.post("/api/v1/records/import/json", {"data": [{"a": 1}]}),
                      400, "invalid_argument", message_contains=["label"])
    out = import_json(module_api, {"label": label, "data": [{"a": 1}, {"a": 2}, {"a": 3}]})
    assert out["count"] == 3
    assert sorted(r["a"] for r in records_of(module_api, label)) == [1, 2, 3]


def test_import_container_object_uses_keys_as_labels(module_api):
    author, publisher = unique("AUTHOR"), unique("PUBLISHER")
    out = import_json(module_api, {"data": {
        author: [{"name": "A1", "books": [{"title": "B1"}, {"title": "B2"}]}, {"name": "A2"}],
        publisher: {"name": "P"},
    }})
    assert out["count"] == 5
    assert sorted(r["name"] for r in records_of(module_api, author)) == ["A1", "A2"]
    assert [r["name"] for r in records_of(module_api, publisher)] == ["P"]
    [a1] = [r for r in records_of(module_api, author) if r["name"] == "A1"]
    assert len(children(module_api, a1["__id"])) == 2
    # a container with a primitive at top level names the key
    assert_rest_error(module_api.post("/api/v1/records/import/json", {"data": {"x": 1}}),
                      400, "invalid_argument", message_contains=["documents[0].x"])


def test_import_deep_nesting_links_every_level(module_api):
    label = unique("L0")
    doc = {"level": 0}
    node = doc
    for depth in range(1, 8):
        node["next"] = {"level": depth}
        node = node["next"]
    assert import_json(module_api, {"label": label, "data": doc})["count"] == 8
    [cur] = records_of(module_api, label)
    seen = [cur["level"]]
    while True:
        kids = children(module_api, cur["__id"])
        if not kids:
            break
        [k] = kids
        cur = module_api.record(k)
        assert cur["__label"] == "next"
        seen.append(cur["level"])
    assert seen == list(range(8))


def test_import_string_payloads_by_format(module_api):
    label = unique("FMT")
    assert import_json(module_api, {"label": label, "data": json.dumps([{"a": 1}, {"a": 2}])})["count"] == 2
    assert import_json(module_api, {"label": label, "data": '{"a": 3}\n\n{"a": 4}\n', "format": "jsonl"})["count"] == 2
    assert import_json(module_api, {"label": label, "data": '{"a": 5}\r\n{"a": 6}', "format": "ndjson"})["count"] == 2
    assert sorted(r["a"] for r in records_of(module_api, label)) == [1, 2, 3, 4, 5, 6]
    with unchanged(module_api):
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "data": '{"a": 1}\n{oops', "format": "jsonl"}),
                          400, "invalid_argument", message_contains=["line 2"])
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "data": "[1,", "format": "json"}),
                          400, "invalid_argument", message_contains=["malformed JSON"])
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "data": "{}", "format": "xml"}),
                          400, "invalid_argument", message_contains=["format"])
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "data": 5}),
                          400, "invalid_argument", message_contains=["data"])


def test_import_parent_id_attaches_roots(module_api):
    parent = module_api.create(unique("PARENT"), {"n": 1})
    label = unique("KID")
    import_json(module_api, {"label": label, "parentId": parent, "data": [{"k": 1}, {"k": 2, "sub": {"s": 1}}],
                             "options": {"relationshipType": "HAS"}})
    kids = children(module_api, parent, "HAS")
    assert sorted(module_api.record(k)["k"] for k in kids) == [1, 2]
    with unchanged(module_api):
        missing = "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f"
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "parentId": missing, "data": {"k": 3}}),
                          404, "not_found")
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "parentId": "nope", "data": {"k": 3}}),
                          400, "invalid_argument", message_contains=["parentId"])


# ---------------------------------------------------------------------------------------
# JSON import: write options
# ---------------------------------------------------------------------------------------


def test_option_suggest_types_false_stores_strings(module_api):
    label = unique("ST")
    import_json(module_api, {"label": label, "data": {"n": 5, "b": True, "d": "2024-01-02"},
                             "options": {"suggestTypes": False}})
    [r] = records_of(module_api, label)
    assert props(r) == {"n": "5", "b": "true", "d": "2024-01-02"}
    assert set(r["__proptypes"].values()) == {"string"}


def test_option_suggest_types_default_infers(module_api):
    label = unique("SI")
    import_json(module_api, {"label": label, "data": {"n": 5, "b": True, "d": "2024-01-02", "s": "x"}})
    [r] = records_of(module_api, label)
    assert r["__proptypes"] == {"n": "number", "b": "boolean", "d": "datetime", "s": "string"}


def test_option_convert_numeric_values(module_api):
    label = unique("CN")
    import_json(module_api, {"label": label, "data": [{"v": "42"}, {"v": "-1.5"}, {"v": "4x"}],
                             "options": {"convertNumericValuesToNumbers": True}})
    got = sorted((r["v"], r["__proptypes"]["v"]) for r in records_of(module_api, label) if r["__proptypes"]["v"] == "number")
    assert got == [(-1.5, "number"), (42, "number")]
    assert [r["v"] for r in records_of(module_api, label) if r["__proptypes"]["v"] == "string"] == ["4x"]


def test_option_capitalize_labels_applies_to_inferred_labels(module_api):
    label = unique("Cap")
    kid = unique("child")
    import_json(module_api, {"label": label, "data": {"a": 1, kid: {"b": 2}}, "options": {"capitalizeLabels": True}})
    labels = module_api.labels({})
    assert labels.get(label) == 1 and labels.get(kid.upper()) == 1 and kid not in labels


def test_option_relationship_type_and_sdk_default_alias(module_api):
    label = unique("RT")
    import_json(module_api, {"label": label, "data": {"a": 1, "k": {"b": 1}}, "options": {"relationshipType": "OWNS"}})
    [root] = records_of(module_api, label)
    assert [x["type"] for x in rels_of(module_api, root["__id"])] == ["OWNS"]
    label2 = unique("RT")
    import_json(module_api, {"label": label2, "data": {"a": 1, "k": {"b": 1}},
                             "options": {"relationshipType": "__RUSHDB__RELATION__DEFAULT__"}})
    [root2] = records_of(module_api, label2)
    assert [x["type"] for x in rels_of(module_api, root2["__id"])] == [DEFAULT_TYPE]
    assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": label, "data": {"a": 1}, "options": {"relationshipType": ""}}),
                      400, "invalid_argument", message_contains=["relationshipType"])


def test_option_return_result_up_to_1000(module_api):
    label = unique("RR")
    out = import_json(module_api, {"label": label, "data": [{"i": i} for i in range(3)], "options": {"returnResult": True}})
    assert isinstance(out, list) and sorted(r["i"] for r in out) == [0, 1, 2]
    assert all(is_uuid_v7(r["__id"]) and r["__label"] == label for r in out)
    big = unique("RR")
    out = import_json(module_api, {"label": big, "data": [{"i": i} for i in range(1001)], "options": {"returnResult": True}})
    assert out == {"message": "1001 record(s) imported", "count": 1001}
    assert module_api.labels({})[big] == 1001


def test_option_skip_empty_values(module_api):
    label = unique("SE")
    import_json(module_api, {"label": label, "data": {"a": "", "b": [], "c": 0, "d": False},
                             "options": {"skipEmptyValues": True}})
    [r] = records_of(module_api, label)
    assert props(r) == {"c": 0, "d": False}


def test_option_skip_empty_values_on_create_upsert_and_edit(module_api):
    label = unique("SEC")
    r = module_api.post("/api/v1/records", {"label": label, "data": {"a": "", "b": [], "c": 0, "e": "x"},
                                            "options": {"skipEmptyValues": True, "returnResult": True}})
    assert r.status_code == 201, r.text
    rec = r.json()["data"]
    assert props(rec) == {"c": 0, "e": "x"}
    # an edit with the option keeps the stored value where the given one is empty
    r = module_api.patch(f"/api/v1/records/{rec['__id']}", {"data": {"e": "", "f": "y"}, "options": {"skipEmptyValues": True}})
    assert r.status_code == 201, r.text
    assert props(r.json()["data"]) == {"c": 0, "e": "x", "f": "y"}
    # without it an empty string is a value
    r = module_api.patch(f"/api/v1/records/{rec['__id']}", {"data": {"e": ""}})
    assert props(r.json()["data"])["e"] == ""
    # an upsert with the option
    r = module_api.post("/api/v1/records", {"label": label, "data": {"k": 7, "g": []},
                                            "options": {"skipEmptyValues": True, "mergeBy": ["k"], "returnResult": True}})
    assert r.status_code in (200, 201), r.text
    assert props(r.json()["data"]) == {"k": 7}


def test_option_types_are_checked(module_api):
    with unchanged(module_api):
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": "X", "data": {"a": 1}, "options": {"mergeStrategy": "merge"}}),
                          400, "invalid_argument", message_contains=["mergeStrategy"])
        assert_rest_error(module_api.post("/api/v1/records/import/json", {"label": "X", "data": {"a": 1}, "options": {"suggestTypes": "yes"}}),
                          400, "invalid_argument", message_contains=["suggestTypes"])


# ---------------------------------------------------------------------------------------
# Atomicity and bad documents
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad,needle", [
    ({"n": 1, "mixed": [{"a": 1}, 2]}, "documents[3].mixed"),
    ({"__id": "x"}, "documents[3].__id"),
    ({"n": [1, None]}, "documents[3]"),
    ("not an object", "documents[3]"),
    ({"kid": {"": 1}}, "documents[3].kid"),
], ids=["mixed-array", "reserved-name", "null-in-array", "scalar-document", "empty-name"])
def test_failing_document_fails_whole_import(module_api, bad, needle):
    label = unique("ATOM")
    docs = [{"n": 0, "kid": {"k": 1}}, {"n": 1}, {"n": 2}, bad, {"n": 4}]
    with unchanged(module_api):
        r = module_api.post("/api/v1/records/import/json", {"label": label, "data": docs})
        assert_rest_error(r, 400, "invalid_argument", message_contains=[needle])
    assert label not in module_api.labels({})


def test_failing_upsert_import_leaves_existing_records(module_api):
    label = unique("ATOMU")
    rid = module_api.create(label, {"key": "k1", "v": 1})
    with unchanged(module_api):
        r = module_api.post("/api/v1/records/import/json", {"label": label, "data": [{"key": "k1", "v": 2}, {"key": {"bad": [1, {"x": 1}]}}],
                                                             "options": {"mergeBy": ["key"]}})
        assert r.status_code == 400, r.text
    assert module_api.record(rid)["v"] == 1


# ---------------------------------------------------------------------------------------
# Upsert
# ---------------------------------------------------------------------------------------


def test_upsert_append_keeps_other_fields(module_api):
    label = unique("UPA")
    rid = module_api.create(label, {"email": "a@x", "name": "A", "age": 30})
    r = module_api.post("/api/v1/records", {"label": label, "data": {"email": "a@x", "age": 31},
                                            "options": {"mergeBy": ["email"], "mergeStrategy": "append", "returnResult": True}})
    assert r.status_code == 201, r.text
    assert r.json()["data"]["__id"] == rid
    assert props(module_api.record(rid)) == {"email": "a@x", "name": "A", "age": 31}
    assert len(records_of(module_api, label)) == 1


def test_upsert_import_null_unsets_a_property(module_api):
    """null means unset (BEHAVIOUR.md §1) in an import as in a create: an upsert that matches
    removes the property, and a new record simply does not get it."""
    label = unique("UPN")
    import_json(module_api, {"label": label, "data": [{"k": 1, "v": 5, "w": 6}, {"k": 2, "v": None}]})
    rids = {r["k"]: r["__id"] for r in records_of(module_api, label)}
    assert props(module_api.record(rids[2])) == {"k": 2}
    import_json(module_api, {"label": label, "data": [{"k": 1, "v": None}], "options": {"mergeBy": ["k"]}})
    assert props(module_api.record(rids[1])) == {"k": 1, "w": 6}
    r = module_api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": label,
                                                          "documents": [{"k": 1, "w": None}], "options": {"mergeBy": ["k"]}}})
    assert r.status_code == 200, r.text
    assert props(module_api.record(rids[1])) == {"k": 1}
    assert len(records_of(module_api, label)) == 2


def test_upsert_rewrite_removes_unmentioned_fields(module_api):
    label = unique("UPR")
    rid = module_api.create(label, {"email": "a@x", "name": "A", "age": 30})
    r = module_api.post("/api/v1/records", {"label": label, "data": {"email": "a@x", "age": 32},
                                            "options": {"mergeBy": ["email"], "mergeStrategy": "rewrite"}})
    assert r.status_code == 201, r.text
    assert r.json()["data"]["id"] == rid
    assert props(module_api.record(rid)) == {"email": "a@x", "age": 32}


def test_upsert_merge_by_empty_matches_all_incoming_keys(module_api):
    label = unique("UPE")
    rid = module_api.create(label, {"a": 1, "b": 2, "c": 3})
    same = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1, "b": 2}, "options": {"mergeBy": [], "returnResult": True}})
    assert same.json()["data"]["__id"] == rid
    other = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1, "b": 5}, "options": {"mergeBy": [], "returnResult": True}})
    assert other.json()["data"]["__id"] != rid
    # mergeStrategy alone triggers upsert on all incoming keys too
    again = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1, "b": 5}, "options": {"mergeStrategy": "append", "returnResult": True}})
    assert again.json()["data"]["__id"] == other.json()["data"]["__id"]
    assert len(records_of(module_api, label)) == 2


def test_upsert_matches_type_strictly_within_label(module_api):
    label = unique("UPT")
    rid = module_api.create(label, {"code": 30})
    other_label = module_api.post("/api/v1/records", {"label": unique("UPT"), "data": {"code": 30}, "options": {"mergeBy": ["code"], "returnResult": True}})
    assert other_label.json()["data"]["__id"] != rid
    text = module_api.post("/api/v1/records", {"label": label, "data": {"code": "30"}, "options": {"mergeBy": ["code"], "returnResult": True}})
    assert text.json()["data"]["__id"] != rid
    num = module_api.post("/api/v1/records", {"label": label, "data": {"code": 30, "x": 1}, "options": {"mergeBy": ["code"], "returnResult": True}})
    assert num.json()["data"]["__id"] == rid


def test_upsert_with_several_matches_updates_the_oldest(module_api):
    label = unique("UPO")
    first = module_api.create(label, {"k": "dup", "n": 1})
    second = module_api.create(label, {"k": "dup", "n": 2})
    r = module_api.post("/api/v1/records", {"label": label, "data": {"k": "dup", "n": 9}, "options": {"mergeBy": ["k"], "returnResult": True}})
    assert r.json()["data"]["__id"] == first
    assert module_api.record(first)["n"] == 9 and module_api.record(second)["n"] == 2


def test_import_upsert_remaps_nested_relationships(module_api):
    order, item = unique("UORD"), unique("UITEM")
    doc = {"no": 1, "status": "new", item: [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}
    import_json(module_api, {"label": order, "data": doc, "options": {"mergeBy": ["no", "sku"]}})
    doc2 = {"no": 1, "status": "paid", item: [{"sku": "a", "qty": 5}, {"sku": "c", "qty": 1}]}
    out = import_json(module_api, {"label": order, "data": doc2, "options": {"mergeBy": ["no", "sku"], "returnResult": True}})
    assert len(out) == 3
    [o] = records_of(module_api, order)
    assert o["status"] == "paid"
    items = {r["sku"]: r for r in records_of(module_api, item)}
    assert set(items) == {"a", "b", "c"} and items["a"]["qty"] == 5 and items["b"]["qty"] == 2
    # one relationship per (order, item): the matched item was not linked twice
    assert children(module_api, o["__id"]) == {items[s]["__id"] for s in "abc"}
    assert len(rels_of(module_api, o["__id"])) == 3


def test_concurrent_upserts_of_one_key_make_one_record(module_api):
    label = unique("UPC")
    errors = []

    def worker(i):
        try:
            r = module_api.post("/api/v1/records", {"label": label, "data": {"key": "same", f"w{i}": i},
                                                    "options": {"mergeBy": ["key"]}})
            assert r.status_code == 201, r.text
        except Exception as e:  # pragma: no cover - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    [r] = records_of(module_api, label)
    assert {f"w{i}" for i in range(16)} <= set(r)


# ---------------------------------------------------------------------------------------
# CSV import
# ---------------------------------------------------------------------------------------


def csv_rows(api, label):
    return sorted((props(r) for r in records_of(api, label)), key=lambda p: json.dumps(p, sort_keys=True))


def test_csv_defaults(module_api):
    label = unique("CSV")
    out = import_csv(module_api, {"label": label, "data": "name,age,active,joined,note\r\nAda,36,true,2024-01-02,\r\n\r\n\"Lovelace, A\",1.5,FALSE,x,\"say \"\"hi\"\"\"\r\n"})
    assert out["count"] == 2
    rows = {r["name"]: r for r in records_of(module_api, label)}
    assert props(rows["Ada"]) == {"name": "Ada", "age": 36, "active": True, "joined": "2024-01-02"}
    assert rows["Ada"]["__proptypes"] == {"name": "string", "age": "number", "active": "boolean", "joined": "datetime"}
    assert props(rows["Lovelace, A"]) == {"name": "Lovelace, A", "age": 1.5, "active": False, "joined": "x", "note": 'say "hi"'}


@pytest.mark.parametrize("config,data,expected", [
    ({"delimiter": ";"}, "a;b\n1;x\n", [{"a": 1, "b": "x"}]),
    ({"delimiter": "\t"}, "a\tb\n1\tx\n", [{"a": 1, "b": "x"}]),
    ({"header": False}, "1,x\n2,y\n", [{"column_1": 1, "column_2": "x"}, {"column_1": 2, "column_2": "y"}]),
    ({"skipEmptyLines": True}, "a\n1\n\n2\n", [{"a": 1}, {"a": 2}]),
    ({"skipEmptyLines": False}, "a\n1\n\n2\n", [{}, {"a": 1}, {"a": 2}]),
    ({"skipEmptyLines": "greedy"}, "a,b\n1,2\n , \n", [{"a": 1, "b": 2}]),
    ({"dynamicTyping": False}, "a,b,c\n1,true,\n", [{"a": "1", "b": "true", "c": ""}]),
    ({"dynamicTyping": True}, "a,b,c\n1,true,\n", [{"a": 1, "b": True}]),
    ({"quoteChar": "'"}, "a,b\n'x,y',2\n", [{"a": "x,y", "b": 2}]),
    ({"escapeChar": "\\"}, 'a\n"x\\"y"\n', [{"a": 'x"y'}]),
    ({"newline": "\r"}, "a\r1\r2\r", [{"a": 1}, {"a": 2}]),
    ({"newline": "\n"}, "a\n1\n", [{"a": 1}]),
], ids=["delimiter", "tab", "header-false", "skip-true", "skip-false", "skip-greedy", "typing-off",
        "typing-on", "quote", "escape", "newline-cr", "newline-lf"])
def test_csv_parse_config_options(module_api, config, data, expected):
    label = unique("PC")
    import_csv(module_api, {"label": label, "data": data, "parseConfig": config})
    assert csv_rows(module_api, label) == sorted(expected, key=lambda p: json.dumps(p, sort_keys=True))


def test_csv_headers_are_normalised_and_system_columns_skipped(module_api):
    label = unique("HDR")
    import_csv(module_api, {"label": label, "data": "__id,__label, first name ,,a-b,a_b,a_b\nX,Y,Ada,e,1,2,3\n"})
    [r] = records_of(module_api, label)
    assert props(r) == {"first_name": "Ada", "column_4": "e", "a_b": 1, "a_b_2": 2, "a_b_3": 3}
    # Headers that only come to start with `__` by the replacement are kept, not dropped.
    label = unique("HDU")
    import_csv(module_api, {"label": label, "data": "名前,--x,é,ok\nA,B,C,D\n"})
    [r] = records_of(module_api, label)
    assert props(r) == {"_": "A", "_x": "B", "_2": "C", "ok": "D"}


def test_csv_bad_input(module_api):
    label = unique("BAD")
    with unchanged(module_api):
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a,b\n1,2\n3,4,5\n"}),
                          400, "invalid_argument", message_contains=["line 3"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a,b\r\n1,2\r\n\"open,4\r\n5,6\r\n"}),
                          400, "invalid_argument", message_contains=["line 3", "not closed"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"data": "a\n1\n"}),
                          400, "invalid_argument", message_contains=["label"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label}),
                          400, "invalid_argument", message_contains=["data"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a\n1", "parseConfig": {"delimiter": ";;"}}),
                          400, "invalid_argument", message_contains=["parseConfig.delimiter"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a\n1", "parseConfig": {"header": "yes"}}),
                          400, "invalid_argument", message_contains=["parseConfig.header"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a\n1", "vectors": [[{"propertyName": "v", "vector": [1, "x"]}]]}),
                          400, "invalid_argument", message_contains=["vectors[0][0].vector"])
        assert_rest_error(module_api.post("/api/v1/records/import/csv", {"label": label, "data": "a\n1", "vectors": [None, None]}),
                          400, "invalid_argument", message_contains=["vectors has 2 entries"])


def test_csv_options_and_upsert(module_api):
    label = unique("CSVU")
    import_csv(module_api, {"label": label, "data": "sku,qty\na,1\nb,2\n"})
    import_csv(module_api, {"label": label, "data": "sku,qty\na,5\nc,1\n", "options": {"mergeBy": ["sku"]}})
    assert {r["sku"]: r["qty"] for r in records_of(module_api, label)} == {"a": 5, "b": 2, "c": 1}
    out = import_csv(module_api, {"label": label, "data": "sku,qty\nd,07\n",
                                  "parseConfig": {"dynamicTyping": False}, "options": {"convertNumericValuesToNumbers": True, "returnResult": True}})
    assert out[0]["qty"] == 7 and out[0]["__proptypes"]["qty"] == "number"


def test_inline_vectors_are_accepted(module_api):
    # (the SDK resolves a vector index first, so it needs the vector issue; REST does not)
    label = unique("VEC")
    out = import_csv(module_api, {"label": label, "data": "t\na\nb\n",
                                  "vectors": [[{"propertyName": "emb", "vector": [0.1, 0.2]}], None]})
    assert out["count"] == 2
    out = import_json(module_api, {"label": label, "data": [{"t": "c", "$vectors": [{"propertyName": "emb", "vector": [1, 2]}]}]})
    assert out["count"] == 1
    assert [props(r) for r in sorted(records_of(module_api, label), key=lambda r: r["t"])] == [{"t": "a"}, {"t": "b"}, {"t": "c"}]


def test_csv_parent_id(module_api):
    parent = module_api.create(unique("CP"), {})
    label = unique("CK")
    import_csv(module_api, {"label": label, "parentId": parent, "data": "a\n1\n2\n"})
    assert len(children(module_api, parent)) == 2


# ---------------------------------------------------------------------------------------
# CSV export and round trip
# ---------------------------------------------------------------------------------------


def test_export_columns_crlf_and_quoting(module_api):
    label = unique("EXP")
    a = module_api.create(label, {"name": "plain", "n": 1})
    b = module_api.create(label, {"name": 'has, comma "and quotes"\nand newline', "tags": ["x", "y"], "flag": True})
    text = export(module_api, {"labels": [label], "orderBy": "asc"})
    assert text.endswith("\r\n")
    # the only bare LF is the one inside the quoted cell
    assert text.replace("\r\n", "").count("\n") == 1
    lines = text.split("\r\n")
    assert lines[0] == "__id,__label,flag,n,name,tags"
    assert lines[1] == f"{a},{label},,1,plain,"
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    assert parsed[2] == [b, label, "true", "", 'has, comma "and quotes"\nand newline', '["x","y"]']
    assert len(parsed) == 3


def test_export_search_options(module_api):
    label = unique("EXS")
    for i in range(5):
        module_api.create(label, {"i": i, "even": i % 2 == 0})
    text = export(module_api, {"labels": [label], "where": {"even": True}, "orderBy": {"i": "desc"}, "skip": 1, "limit": 1})
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [r["i"] for r in rows] == ["2"]
    assert export(module_api, {"labels": [unique("NONE")]}) == "__id,__label\r\n"
    assert_rest_error(module_api.post("/api/v1/records/export/csv", {"labels": [label], "limit": 1001}),
                      400, "invalid_argument", message_contains=["limit"])
    assert_rest_error(module_api.post("/api/v1/records/export/csv", {"labels": [label], "aggregate": {"c": {"fn": "count"}}}),
                      400, "invalid_argument")


def test_export_import_round_trip_preserves_scalars_and_types(module_api):
    label = unique("TRIP")
    originals = [
        {"name": "Ada", "age": 36, "score": 9.5, "member": True, "since": "2021-03-04T05:06:07Z"},
        {"name": "Bob, Jr.", "age": -2, "member": False, "since": "1999-12-31"},
        {"name": 'Quote "Q"', "score": 0.25},
    ]
    ids = [module_api.create(label, o) for o in originals]
    before = {r["__id"]: (props(r), r["__proptypes"]) for r in records_of(module_api, label)}
    text = export(module_api, {"labels": [label]})
    module_api.post("/api/v1/records/delete", {"labels": [label]})
    import_csv(module_api, {"label": label, "data": text})
    after = sorted((json.dumps(props(r), sort_keys=True), json.dumps(r["__proptypes"], sort_keys=True)) for r in records_of(module_api, label))
    expected = sorted((json.dumps(p, sort_keys=True), json.dumps(t, sort_keys=True)) for p, t in before.values())
    assert after == expected
    assert len(ids) == 3


# ---------------------------------------------------------------------------------------
# Protocol v1: ingest and exportCsv
# ---------------------------------------------------------------------------------------


def test_protocol_ingest_documents_and_csv(module_api):
    label = unique("ING")
    r = module_api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": label, "documents": [
        {"a": 1, "kid": {"b": 1}}, {"a": 2}], "options": {"returnResult": True}}})
    assert r.status_code == 200, r.text
    resp = r.json()["response"]
    assert resp["kind"] == "ingested" and resp["count"] == 3 and resp["relationships"] == 1
    assert {x["label"] for x in resp["records"]} == {label, "kid"}
    assert set(resp["records"][0]) == {"id", "label", "properties", "propertyTypes"}
    r = module_api.protocol({"kind": "ingest", "ingest": {"kind": "csv", "label": label, "data": "a\n3\n4\n"}})
    assert r.json()["response"] == {"kind": "ingested", "count": 2, "relationships": 0}
    r = module_api.protocol({"kind": "query", "query": {"kind": "exportCsv", "query": {"labels": [label], "order": {"a": "asc"}}}})
    resp = r.json()["response"]
    assert resp["kind"] == "csv" and resp["count"] == 4
    assert [row["a"] for row in csv.DictReader(io.StringIO(resp["content"], newline=""))] == ["1", "2", "3", "4"]
    bad = module_api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": label, "documents": [{"a": 1}, {"a": {"b": [1, {"c": 2}]}}]}})
    assert_protocol_error(bad, 400, "invalid_argument", message_contains=["documents[1].a.b"])


def test_ingest_of_50000_small_documents(module_api):
    label = unique("BIG")
    docs = [{"i": i, "name": f"n{i}", "even": i % 2 == 0} for i in range(50_000)]
    r = module_api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": label, "documents": docs}})
    assert r.status_code == 200, r.text[:500]
    assert r.json()["response"]["count"] == 50_000
    assert module_api.labels({})[label] == 50_000
    found = module_api.search({"labels": [label], "where": {"i": {"$gte": 49_998}}, "orderBy": {"i": "asc"}})
    assert [x["name"] for x in found["data"]] == ["n49998", "n49999"]


# ---------------------------------------------------------------------------------------
# The rushdb SDK in direct mode
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def db(module_engine):
    return RushDB(DEV_TOKEN, direct=True, engine_url=module_engine.url)


def test_sdk_import_json_nested(db, module_api):
    label = unique("SDKJ")
    result = db.records.import_json({label: [{"name": "A", "pets": [{"kind": "cat"}]}, {"name": "B"}]})
    assert sorted(r.label for r in result.data) == sorted([label, label, "pets"])
    [a] = [r for r in records_of(module_api, label) if r["name"] == "A"]
    [pet] = children(module_api, a["__id"])
    assert module_api.record(pet)["kind"] == "cat"


def test_sdk_import_json_of_one_object(db, module_api):
    # The SDK passes `data` through as `documents`: one object is one document, as in REST.
    label = unique("SDKO")
    result = db.records.import_json({"name": "Acme", "hq": {"city": "Oslo"}}, label=label)
    assert sorted(r.label for r in result.data) == sorted([label, "hq"])
    [acme] = records_of(module_api, label)
    assert acme["name"] == "Acme"
    [hq] = children(module_api, acme["__id"])
    assert module_api.record(hq)["city"] == "Oslo"
    bad = module_api.protocol({"kind": "ingest", "ingest": {"kind": "documents", "label": label, "documents": "x"}})
    assert_protocol_error(bad, 400, "invalid_argument", message_contains=["documents"])


def test_sdk_create_many_and_upsert(db, module_api):
    label = unique("SDKM")
    result = db.records.create_many(label, [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}])
    assert len(result.data) == 2 and all(is_uuid_v7(r.id) for r in result.data)
    db.records.create_many(label, [{"sku": "a", "qty": 9}], options={"mergeBy": ["sku"], "mergeStrategy": "append"})
    assert {r["sku"]: r["qty"] for r in records_of(module_api, label)} == {"a": 9, "b": 2}
    rec = db.records.upsert({"sku": "b", "qty": 3}, label=label, options={"mergeBy": ["sku"], "mergeStrategy": "rewrite"})
    assert rec["qty"] == 3 and rec.id == [r for r in records_of(module_api, label) if r["sku"] == "b"][0]["__id"]
    new = db.records.upsert({"sku": "z"}, label=label)
    assert new["sku"] == "z" and len(records_of(module_api, label)) == 3


def test_sdk_import_csv_and_export(db, module_api):
    label = unique("SDKC")
    result = db.records.import_csv(label, "name,age\nAda,36\nBob,40\n", parse_config={"delimiter": ","})
    assert sorted(r["age"] for r in result.data) == [36, 40]
    text = db.records.export({"labels": [label], "orderBy": {"age": "asc"}})
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [(r["name"], r["age"]) for r in rows] == [("Ada", "36"), ("Bob", "40")]
    assert list(rows[0]) == ["__id", "__label", "age", "name"]


# ---------------------------------------------------------------------------------------
# The CLI loader (`engine import`)
# ---------------------------------------------------------------------------------------


def loader(module_engine, *args, env_extra=None):
    env = engine_env()
    env.update(env_extra or {})
    return subprocess.run([ENGINE_BIN, "import", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv"])
def test_cli_loader_imports_in_batches(module_engine, module_api, tmp_path, fmt):
    label = unique("CLI")
    n = 1234
    path = tmp_path / f"data.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps([{"i": i, "kid": {"k": i}} for i in range(n)]))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"i": i, "kid": {"k": i}}) + "\n" for i in range(n)))
    else:
        path.write_text("i,name\n" + "".join(f"{i},n{i}\n" for i in range(n)))
    out = loader(module_engine, "--label", label, str(path), "--url", module_engine.url, "--batch-size", "100",
                 env_extra={"SERVICE_TOKEN": DEV_TOKEN})
    assert out.returncode == 0, out.stderr
    nested = fmt != "csv"
    assert f"imported {n} document(s)" in out.stdout
    assert f"as {n * (2 if nested else 1)} record(s) and {n if nested else 0} relationship(s)" in out.stdout
    assert "records/s" in out.stdout
    assert module_api.labels({})[label] == n
    found = module_api.search({"labels": [label], "where": {"i": {"$gte": n - 2}}, "orderBy": {"i": "asc"}})
    assert [r["i"] for r in found["data"]] == [n - 2, n - 1]


class _StubServer:
    """A local HTTP server that is not the engine: answers every POST with `answer`
    (status, body), or never answers when `answer` is None."""

    def __init__(self, answer):
        import http.server

        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                if stub.answer is None:
                    stub.release.wait(30)
                    return
                status, body = stub.answer
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.answer = answer
        self.release = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _load_against_stub(tmp_path, answer, timeout):
    """Ten documents loaded into a `_StubServer` answering `answer`."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(10)))
    stub = _StubServer(answer)
    try:
        return loader(None, "--label", "X", str(path), "--url", stub.url, "--timeout", str(timeout), "--quiet")
    finally:
        stub.close()


@pytest.mark.parametrize("answer", [(200, b"<html>ok</html>"), (200, b"{}"),
                                    (200, b'{"error":{"code":"internal","message":"boom"}}'), None],
                         ids=["html", "empty-object", "error-body", "no-answer"])
def test_cli_loader_claims_nothing_it_was_not_told(tmp_path, answer):
    """A 2xx page that is not the engine's ingest result, or no answer within --timeout,
    fails the load, and the loader says the batch may or may not have been written."""
    out = _load_against_stub(tmp_path, answer, timeout=1)
    assert out.returncode == 1, out
    assert "imported 0 document(s)" in out.stdout
    assert "may or may not have been written" in out.stderr, out.stderr
    assert ("no answer within 1 s" if answer is None else "not an ingest result") in out.stderr


@pytest.mark.parametrize("answer,refused", [
    ((504, b"<html>504 Gateway Time-out</html>"), False),
    ((502, b'{"error":{"code":"invalid_argument","message":"from a proxy"}}'), False),
    ((500, b'{"protocolVersion":1,"error":{"code":"internal","message":"boom"}}'), False),
    ((400, b'{"protocolVersion":1,"error":{"code":"timeout","message":"408 is not 400"}}'), False),
    ((408, b'{"protocolVersion":1,"error":{"code":"timeout","message":"request exceeded its budget"}}'), True),
    ((400, b'{"protocolVersion":1,"error":{"code":"invalid_argument","message":"documents[0]: bad"}}'), True),
], ids=["proxy-504", "proxy-502-json", "engine-500", "code-status-mismatch", "engine-408", "engine-400"])
def test_cli_loader_counts_only_engine_refusals_as_nothing_written(tmp_path, answer, refused):
    """Only a 4xx in the engine's error envelope (its code rendered as that status) says the
    batch wrote nothing; a 5xx or another server's page leaves it unknown."""
    out = _load_against_stub(tmp_path, answer, timeout=5)
    assert out.returncode == 1, out
    assert f"failed: HTTP {answer[0]}" in out.stderr, out.stderr
    expected = "the failing batch wrote nothing" if refused else "may or may not have been written"
    assert expected in out.stderr, out.stderr


def test_cli_loader_names_the_body_cap_for_a_batch_too_large(engine_factory, tmp_path):
    """A batch over the server's body cap is refused with 413 before it is read; a client
    still sending may see only the dropped connection, and the loader then names the batch's
    size and --batch-size."""
    e = engine_factory.start(extra_args=["--max-body-bytes", "1500000"])
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({"i": i, "pad": "p" * 100_000}) + "\n" for i in range(40)))
    out = loader(e, "--label", "BIG", str(path), "--url", e.url, "--batch-size", "40", "--quiet")
    assert out.returncode == 1, out
    assert ("HTTP 413 payload_too_large" in out.stderr and "wrote nothing" in out.stderr) or (
        "lower --batch-size" in out.stderr and "may or may not" in out.stderr), out.stderr
    assert e.client().labels({}).get("BIG", 0) == 0


def test_a_timed_out_write_wrote_nothing(engine_factory, tmp_path):
    """408 `timeout` means nothing was written: a request that has handed its write to the
    writer when its budget runs out is answered with the write's outcome. Imports of many
    sizes under a 30 ms budget: every 200 is counted and every 408 left nothing behind."""
    import time
    cfg = tmp_path / "engine.toml"
    cfg.write_text("schema_version = 1\n[limits]\nrequest_timeout_ms = 30\n")
    e = engine_factory.start(extra_args=["--config", str(cfg)])
    api = e.client()

    def total():
        for _ in range(100):  # the count itself may run out of budget
            r = api.post("/api/v1/labels/search", {})
            if r.status_code == 200:
                return r.json()["data"].get("BUDGET", 0)
            assert r.status_code == 408, r.text
        raise AssertionError("no label count within 100 tries")

    accepted, answers = 0, {200: 0, 408: 0}
    for n in [200, 500, 1000, 2000, 4000, 8000, 32000] * 3:
        r = api.post("/protocol/v1/execute", {"protocolVersion": 1, "operation": {"kind": "ingest", "ingest": {
            "kind": "documents", "label": "BUDGET", "documents": [{"i": i, "s": "x%d" % i} for i in range(n)]}}})
        assert r.status_code in (200, 408), r.text
        answers[r.status_code] += 1
        if r.status_code == 200:
            assert r.json()["response"]["count"] == n
            accepted += n
        else:
            assert r.json()["error"]["code"] == "timeout"
    time.sleep(0.5)  # a write cut off from its answer would land by now
    assert total() == accepted, answers
    assert answers[408] > 0, answers  # the budget did cut some imports short


def test_cli_loader_interrupted_reports_how_far_it_got(module_engine, module_api, tmp_path):
    """Ctrl-C stops sending; the batches in flight finish, and the summary says how many
    documents were imported, which the store then holds."""
    import signal
    import time
    label = unique("SIGINT")
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"i": i, "pad": "p" * 200}) + "\n" for i in range(200_000)))
    p = subprocess.Popen([ENGINE_BIN, "import", "--label", label, str(path), "--url", module_engine.url,
                          "--batch-size", "500", "--concurrency", "1", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=engine_env())
    deadline = time.time() + 60
    while time.time() < deadline and module_api.labels({}).get(label, 0) < 1000:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert "interrupted:" in err
    done = int(out.split("imported ")[1].split(" document")[0])
    assert 1000 <= done < 200_000
    assert module_api.labels({})[label] == done


def test_cli_loader_reads_json_lines_with_a_byte_order_mark(module_engine, module_api, tmp_path):
    label = unique("BOM")
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps({"i": i}) + "\n" for i in range(5)).encode())
    out = loader(module_engine, "--label", label, str(path), "--url", module_engine.url)
    assert out.returncode == 0, out.stderr
    assert module_api.labels({})[label] == 5


def test_cli_loader_reports_the_failing_batch(module_engine, module_api, tmp_path):
    label = unique("CLIF")
    path = tmp_path / "bad.jsonl"
    docs = [{"i": i} for i in range(10)]
    docs[7] = {"i": [1, {"x": 1}]}
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = loader(module_engine, "--label", label, str(path), "--url", module_engine.url, "--batch-size", "3",
                 "--concurrency", "1")
    assert out.returncode == 1
    assert "batch 3 (documents 6..9 of the file) failed: HTTP 400 invalid_argument" in out.stderr
    assert "imported 6 document(s)" in out.stdout
    assert module_api.labels({})[label] == 6
    wrong = loader(module_engine, "--label", label, str(path), "--url", module_engine.url, "--token", "nope")
    assert wrong.returncode == 1 and "401 unauthenticated" in wrong.stderr
    missing = loader(module_engine, "--label", label, str(tmp_path / "none.json"), "--url", module_engine.url)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    unknown = tmp_path / "data.txt"
    unknown.write_text("x")
    bad_ext = loader(module_engine, "--label", label, str(unknown), "--url", module_engine.url)
    assert bad_ext.returncode == 2 and "--format" in bad_ext.stderr
    # Only plain http is spoken: another scheme, or none, is refused up front by name.
    for url, why in [("https://127.0.0.1:1", "plain http only, not https://"),
                     ("127.0.0.1:3000", "no scheme"), ("http://", "not a URL")]:
        out = loader(module_engine, "--label", label, str(path), "--url", url)
        assert out.returncode == 2 and f"--url {url}: " in out.stderr and why in out.stderr, out.stderr
    # A quoted cell left open is refused whole, naming its line, as the server refuses it
    # (the rows after it would otherwise become part of that cell).
    open_quote = tmp_path / "open.csv"
    open_quote.write_text('a,b\n1,x\n2,"oops\n3,""y\n4,z\n')
    out = loader(module_engine, "--label", label + "Q", str(open_quote), "--url", module_engine.url,
                 env_extra={"SERVICE_TOKEN": DEV_TOKEN})
    assert out.returncode == 2 and "line 3: a quoted field is not closed" in out.stderr, out.stderr
    assert (label + "Q") not in module_api.labels({})
    # A row longer than the header is refused with its line, as the server words it; a short
    # row is imported with its missing cells absent, as the server reads it.
    long_row = tmp_path / "long.csv"
    long_row.write_text("a,b\n1,2\n3,4,5\n")
    out = loader(module_engine, "--label", label + "L", str(long_row), "--url", module_engine.url,
                 env_extra={"SERVICE_TOKEN": DEV_TOKEN})
    assert out.returncode == 2 and "malformed CSV at line 3: the row has 3 fields, the header 2" in out.stderr, out.stderr
    # Lines end in \r\n or \r as well: the loader names the same line as the server does.
    for text, line in [(b"a,b\r\n1,2\r\n4,5,6\r\n", 3), (b"a,b\r1,2\r4,5,6\r", 3),
                       (b'a,b\r\n1,2\r\n"x\r\ny",3\r\n\r\n4,5,6\r\n', 6)]:
        crlf = tmp_path / "crlf.data"
        crlf.write_bytes(text)
        out = loader(module_engine, "--label", label + "L", "--format", "CSV", str(crlf), "--url", module_engine.url,
                     env_extra={"SERVICE_TOKEN": DEV_TOKEN})
        expected = f"malformed CSV at line {line}: the row has 3 fields, the header 2"
        assert out.returncode == 2 and expected in out.stderr, (text, out.stderr)
        r = module_api.post("/api/v1/records/import/csv", {"label": label + "L", "data": text.decode()})
        assert r.status_code == 400 and expected in r.json()["message"], (text, r.text)
    short_row = tmp_path / "short.csv"
    short_row.write_text("a,b\n1,2\n3\n")
    out = loader(module_engine, "--label", label + "S", str(short_row), "--url", module_engine.url,
                 env_extra={"SERVICE_TOKEN": DEV_TOKEN})
    assert out.returncode == 0, out.stderr
    rows = module_api.search({"labels": [label + "S"], "orderBy": {"a": "asc"}})["data"]
    assert [(r["a"], r.get("b")) for r in rows] == [(1, 2), (3, None)]
