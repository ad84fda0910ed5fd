"""REST surface: record CRUD, type inference and explicit types, properties, labels,
search paging and order, settings, metrics, authentication headers and route table.

Tests share one engine per module; each uses its own labels and property names.
"""

import re

import pytest
import requests

from conftest import (DEV_TOKEN, REASON, assert_protocol_error, assert_rest_error, is_uuid_v7,
                      unchanged, unique)

SYSTEM_KEYS = {"id", "label", "__id", "__label", "__proptypes"}


# ---------------------------------------------------------------------------------------
# open routes
# ---------------------------------------------------------------------------------------


def test_health_is_open(module_api):
    r = module_api.get("/health", auth=False)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_head_is_get_without_the_body(module_api):
    """RFC 9110: a server answers HEAD wherever it answers GET (load balancers probe with it)."""
    r = requests.head(module_api.engine.url + "/health", timeout=10)
    assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "15"
    rid = module_api.create(unique("HEAD"), {"a": 1})
    h = {"Authorization": f"Bearer {DEV_TOKEN}"}
    r = requests.head(f"{module_api.engine.url}/api/v1/records/{rid}", headers=h, timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len(module_api.get(f"/api/v1/records/{rid}").content)
    assert requests.head(f"{module_api.engine.url}/api/v1/records/{rid}", timeout=10).status_code == 401
    assert requests.head(f"{module_api.engine.url}/api/v1/tx", headers=h, timeout=10).status_code == 404


def test_settings_is_open(module_api):
    r = module_api.get("/api/v1/settings", auth=False)
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    assert body["data"]["selfHosted"] is True
    # The features this build serves: gRPC listens beside HTTP; SQL wire and Bolt are not built.
    features = body["data"]["features"]
    assert features["grpc"] is True and features["transactions"] is True
    assert features["sql"] is False and features["bolt"] is False


def test_sdk_settings_needs_token(module_api):
    assert_rest_error(module_api.get("/api/v1/sdk/settings", auth=False), 401, "unauthenticated")
    r = module_api.get("/api/v1/sdk/settings")
    assert r.status_code == 200
    assert r.json()["success"] is True and r.json()["data"]["selfHosted"] is True


# ---------------------------------------------------------------------------------------
# create / read shape
# ---------------------------------------------------------------------------------------


def test_create_without_return_result(module_api):
    label = unique("MOVIE")
    r = module_api.post("/api/v1/records", {"label": label, "data": {"title": "Inception"}})
    assert r.status_code == 201
    body = r.json()
    assert body["success"] is True
    assert set(body["data"]) == {"id", "message"}
    assert is_uuid_v7(body["data"]["id"])
    assert isinstance(body["data"]["message"], str) and body["data"]["message"]
    rec = module_api.record(body["data"]["id"])
    assert rec["title"] == "Inception" and rec["label"] == label


def test_record_shape(module_api):
    label = unique("MOVIE")
    rid = module_api.create(label, {"title": "Inception", "year": 2010})
    r = module_api.get(f"/api/v1/records/{rid}")
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    rec = body["data"]
    assert set(rec) == SYSTEM_KEYS | {"title", "year"}
    assert rec["id"] == rec["__id"] == rid
    assert rec["label"] == rec["__label"] == label
    assert rec["__proptypes"] == {"title": "string", "year": "number"}
    assert rec["title"] == "Inception" and rec["year"] == 2010


def test_create_return_result_equals_read(module_api):
    label = unique("MOVIE")
    r = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1, "b": "x"},
                                            "options": {"returnResult": True}})
    assert r.status_code == 201
    created = r.json()["data"]
    assert is_uuid_v7(created["id"])
    assert created == module_api.record(created["id"])
    assert set(created) == SYSTEM_KEYS | {"a", "b"}


def test_ids_are_distinct_lowercase_uuid_v7(module_api):
    label = unique("IDS")
    ids = [module_api.create(label) for _ in range(10)]
    assert len(set(ids)) == 10
    assert all(is_uuid_v7(i) and i == i.lower() for i in ids)


def test_uppercase_id_in_path_is_accepted(module_api):
    rid = module_api.create(unique("CASE"), {"a": 1})
    r = module_api.get(f"/api/v1/records/{rid.upper()}")
    assert r.status_code == 200
    assert r.json()["data"]["id"] == rid
    r = module_api.patch(f"/api/v1/records/{rid.upper()}", {"data": {"b": 2}})
    assert r.status_code == 201
    assert r.json()["data"]["id"] == rid
    assert module_api.record(rid)["b"] == 2


def test_user_properties_named_id_and_label(module_api):
    label = unique("SHADOW")
    rec = module_api.create_record(label, {"id": "mine", "label": "user-label", "x": 1})
    rid = rec["__id"]
    assert is_uuid_v7(rid)
    stored = module_api.record(rid)
    assert stored["id"] == "mine"
    assert stored["label"] == "user-label"
    assert stored["__id"] == rid
    assert stored["__label"] == label
    assert stored["__proptypes"] == {"id": "string", "label": "string", "x": "number"}
    # identity is intact: the label count moved to the real label
    assert module_api.labels()[label] == 1


def test_labels_are_case_sensitive(module_api):
    base = unique("case")
    module_api.create(base.upper())
    module_api.create(base.upper())
    module_api.create(base)
    labels = module_api.labels()
    assert labels[base.upper()] == 2
    assert labels[base] == 1


@pytest.mark.parametrize("body", [{"data": {"a": 1}}, {"label": "", "data": {"a": 1}},
                                  {"label": "L" * 1025, "data": {"a": 1}}], ids=["missing", "empty", "too-long"])
def test_create_needs_a_label(module_api, body):
    before = module_api.search({"limit": 1})["total"]
    assert_rest_error(module_api.post("/api/v1/records", body), 400, "invalid_argument",
                      message_contains=["label"])
    assert module_api.search({"limit": 1})["total"] == before


# ---------------------------------------------------------------------------------------
# type inference (BEHAVIOUR.md §1)
# ---------------------------------------------------------------------------------------

INFERENCE = [
    # (value written, type, value read back)
    ("hello", "string", "hello"),
    ("", "string", ""),
    ("42", "string", "42"),
    (42, "number", 42),
    (-7, "number", -7),
    (0, "number", 0),
    (2.0, "number", 2),
    (204.0, "number", 204),
    (8.8, "number", 8.8),
    (-1.5, "number", -1.5),
    (1.5e-7, "number", 1.5e-7),
    (9007199254740993, "number", 9007199254740993),
    (-9223372036854775808, "number", -9223372036854775808),
    (True, "boolean", True),
    (False, "boolean", False),
    ("2024-01-02", "datetime", "2024-01-02"),
    ("2024-01-02T10:00", "datetime", "2024-01-02T10:00"),
    ("2024-01-02T10:00:00Z", "datetime", "2024-01-02T10:00:00Z"),
    ("2024-02-29T12:00:00.123456789-05:30", "datetime", "2024-02-29T12:00:00.123456789-05:30"),
    ("2010-07-16T03:04:05.5+01:00", "datetime", "2010-07-16T03:04:05.5+01:00"),
    ("2023-02-29", "string", "2023-02-29"),
    ("2024-01-02 10:00", "string", "2024-01-02 10:00"),
    ("2024-13-01", "string", "2024-13-01"),
    (["a", "b"], "string", ["a", "b"]),
    ([1, 2.5, 3.0], "number", [1, 2.5, 3]),
    ([True, False], "boolean", [True, False]),
    (["2024-01-01", "2024-02-01T00:00:00Z"], "datetime", ["2024-01-01", "2024-02-01T00:00:00Z"]),
    ([1, "a", True], "string", ["1", "a", "true"]),
    (["2024-01-01", "x"], "string", ["2024-01-01", "x"]),
    ([1, 1.5, "2"], "string", ["1", "1.5", "2"]),
    ([], "string", []),
]


@pytest.mark.parametrize("value,type_,expected", INFERENCE, ids=[repr(v[0]) for v in INFERENCE])
def test_inference(module_api, value, type_, expected):
    label = unique("INFER")
    created = module_api.create_record(label, {"p": value})
    for rec in (created, module_api.record(created["id"])):
        assert rec["__proptypes"] == {"p": type_}
        assert rec["p"] == expected
        assert type(rec["p"]) is type(expected)
        if isinstance(expected, list):
            assert [type(x) for x in rec["p"]] == [type(x) for x in expected]


def test_integral_numbers_are_written_without_fraction(module_api):
    rid = module_api.create(unique("NUM"), {"a": 204, "b": 204.0, "c": 2.0, "d": [1.0, 2.0]})
    text = module_api.get(f"/api/v1/records/{rid}").text
    assert re.search(r'"a":204[,}]', text), text
    assert re.search(r'"b":204[,}]', text), text
    assert re.search(r'"c":2[,}]', text), text
    assert re.search(r'"d":\[1,2\]', text), text
    assert "204.0" not in text and "2.0" not in text


def test_non_finite_or_huge_numbers(module_api):
    rec = module_api.create_record(unique("NUM"), {"huge": 1e300, "past_i64": 9223372036854775808})
    assert rec["__proptypes"] == {"huge": "number", "past_i64": "number"}
    assert rec["huge"] == 1e300
    assert rec["past_i64"] == pytest.approx(9.223372036854776e18)


def test_suggest_types_false_stores_strings(module_api):
    label = unique("NOSUGGEST")
    data = {"n": 12, "f": 1.5, "b": True, "d": "2024-01-02", "s": "x", "arr": [1, 2]}
    rec = module_api.create_record(label, data, suggestTypes=False)
    stored = module_api.record(rec["id"])
    for r in (rec, stored):
        assert r["__proptypes"] == {k: "string" for k in data}
        assert r["n"] == "12"
        assert r["f"] == "1.5"
        assert r["b"] == "true"
        assert r["d"] == "2024-01-02"
        assert r["s"] == "x"
        assert r["arr"] == ["1", "2"]


def test_convert_numeric_values_to_numbers(module_api):
    data = {"i": "12", "neg": "-1.5", "zero": "0", "exp": "1e5", "text": "12abc", "plus": "+3",
            "dot": "1.", "real": 7, "arr": ["1", "2.5"]}
    rec = module_api.create_record(unique("CONV"), data, convertNumericValuesToNumbers=True)
    stored = module_api.record(rec["id"])
    for r in (rec, stored):
        assert r["i"] == 12 and type(r["i"]) is int
        assert r["neg"] == -1.5
        assert r["zero"] == 0
        assert r["exp"] == "1e5"
        assert r["text"] == "12abc"
        assert r["plus"] == "+3"
        assert r["dot"] == "1."
        assert r["real"] == 7
        assert r["arr"] == [1, 2.5]
        assert r["__proptypes"] == {"i": "number", "neg": "number", "zero": "number", "exp": "string",
                                    "text": "string", "plus": "string", "dot": "string",
                                    "real": "number", "arr": "number"}


def test_without_convert_numeric_strings_stay_strings(module_api):
    rec = module_api.create_record(unique("CONV"), {"i": "12"})
    assert rec["i"] == "12" and rec["__proptypes"] == {"i": "string"}


def test_capitalize_labels(module_api):
    base = unique("movie").lower()
    rec = module_api.create_record(base, {"a": 1}, capitalizeLabels=True)
    assert rec["label"] == base.upper()
    assert module_api.record(rec["id"])["label"] == base.upper()
    plain = module_api.create_record(base, {"a": 1})
    assert plain["label"] == base
    labels = module_api.labels()
    assert labels[base.upper()] == 1 and labels[base] == 1


@pytest.mark.parametrize("value", [{"a": 1}, [[1]], [1, None], [{"a": 1}]])
def test_nested_values_rejected(module_api, value):
    label = unique("NESTED")
    assert_rest_error(module_api.post("/api/v1/records", {"label": label, "data": {"p": value}}),
                      400, "invalid_argument", message_contains=["p"])
    assert label not in module_api.labels()


def test_null_in_create_data_sets_nothing(module_api):
    rec = module_api.create_record(unique("NULL"), {"a": None, "b": 1})
    assert "a" not in rec and rec["__proptypes"] == {"b": "number"}


# ---------------------------------------------------------------------------------------
# explicit property types
# ---------------------------------------------------------------------------------------


def _create_typed(api, props, data=None, label=None):
    body = {"label": label or unique("TYPED"), "properties": props, "options": {"returnResult": True}}
    if data is not None:
        body["data"] = data
    return api.post("/api/v1/records", body)


def test_explicit_types(module_api):
    r = _create_typed(module_api, [
        {"name": "n", "type": "number", "value": "12"},
        {"name": "f", "type": "number", "value": "-2.5"},
        {"name": "b", "type": "boolean", "value": "true"},
        {"name": "b2", "type": "boolean", "value": False},
        {"name": "d", "type": "datetime", "value": "2024-05-05"},
        {"name": "s", "type": "string", "value": 5},
        {"name": "s2", "type": "string", "value": "2024-05-05"},
        {"name": "tags", "type": "string", "value": "a,b,c", "valueSeparator": ","},
        {"name": "nums", "type": "number", "value": "1;2;3.5", "valueSeparator": ";"},
        {"name": "arr", "type": "number", "value": [1, "2"]},
    ])
    assert r.status_code == 201, r.text
    rec = r.json()["data"]
    stored = module_api.record(rec["id"])
    for x in (rec, stored):
        assert x["n"] == 12 and type(x["n"]) is int
        assert x["f"] == -2.5
        assert x["b"] is True and x["b2"] is False
        assert x["d"] == "2024-05-05"
        assert x["s"] == "5"
        assert x["s2"] == "2024-05-05"
        assert x["tags"] == ["a", "b", "c"]
        assert x["nums"] == [1, 2, 3.5]
        assert x["arr"] == [1, 2]
        assert x["__proptypes"] == {"n": "number", "f": "number", "b": "boolean", "b2": "boolean",
                                    "d": "datetime", "s": "string", "s2": "string", "tags": "string",
                                    "nums": "number", "arr": "number"}


def test_explicit_type_wins_over_data(module_api):
    r = _create_typed(module_api, [{"name": "x", "type": "string", "value": "7"}], data={"x": 7, "y": 1})
    assert r.status_code == 201, r.text
    rec = module_api.record(r.json()["data"]["id"])
    assert rec["x"] == "7" and rec["__proptypes"]["x"] == "string"
    assert rec["y"] == 1


@pytest.mark.parametrize("props,needle", [
    ([{"name": "rating", "type": "number", "value": "abc"}], "rating"),
    ([{"name": "when", "type": "datetime", "value": "yesterday"}], "when"),
    ([{"name": "when", "type": "datetime", "value": "2024-01-02 10:00"}], "when"),
    ([{"name": "flag", "type": "boolean", "value": "yes"}], "flag"),
    ([{"name": "flag", "type": "boolean", "value": 1}], "flag"),
    ([{"name": "nums", "type": "number", "value": "1,x", "valueSeparator": ","}], "nums"),
    ([{"name": "blobby", "type": "blob", "value": "abc"}], "blob"),
    ([{"name": "twice", "type": "number", "value": 1}, {"name": "twice", "type": "string", "value": "a"}], "twice"),
    ([{"name": "__sys", "type": "string", "value": "a"}], "__sys"),
], ids=["number", "datetime-word", "datetime-space", "boolean-word", "boolean-int", "separated",
        "unknown-type", "twice-different-types", "reserved-name"])
def test_explicit_type_errors(module_api, props, needle):
    label = unique("BADTYPE")
    r = _create_typed(module_api, props, label=label)
    assert_rest_error(r, 400, "invalid_argument", message_contains=[needle])
    assert label not in module_api.labels()


def test_reserved_name_in_data_rejected(module_api):
    label = unique("RESERVED")
    assert_rest_error(module_api.post("/api/v1/records", {"label": label, "data": {"__x": 1}}),
                      400, "invalid_argument", message_contains=["__x"])
    assert label not in module_api.labels()


def test_reserved_name_in_patch_rejected(module_api):
    rid = module_api.create(unique("RESERVED"), {"a": 1})
    before = module_api.record(rid)
    assert_rest_error(module_api.patch(f"/api/v1/records/{rid}", {"data": {"__proptypes": 1}}),
                      400, "invalid_argument")
    assert module_api.record(rid) == before


# ---------------------------------------------------------------------------------------
# PATCH / PUT / DELETE
# ---------------------------------------------------------------------------------------


def test_patch_merges(module_api):
    label = unique("EDIT")
    rid = module_api.create(label, {"a": 1, "b": "x", "c": True})
    r = module_api.patch(f"/api/v1/records/{rid}", {"data": {"a": 2, "d": "2024-01-01"}})
    assert r.status_code == 201
    body = r.json()
    assert body["success"] is True
    assert body["data"] == module_api.record(rid)
    rec = body["data"]
    assert (rec["a"], rec["b"], rec["c"], rec["d"]) == (2, "x", True, "2024-01-01")
    assert rec["__proptypes"] == {"a": "number", "b": "string", "c": "boolean", "d": "datetime"}
    assert rec["label"] == label


def test_patch_null_removes_property(module_api):
    rid = module_api.create(unique("EDIT"), {"a": 1, "b": "x"})
    r = module_api.patch(f"/api/v1/records/{rid}", {"data": {"b": None}})
    assert r.status_code == 201
    rec = module_api.record(rid)
    assert "b" not in rec and "b" not in rec["__proptypes"]
    assert rec["a"] == 1


def test_patch_changes_type(module_api):
    rid = module_api.create(unique("EDIT"), {"a": 1})
    module_api.patch(f"/api/v1/records/{rid}", {"data": {"a": "one"}})
    rec = module_api.record(rid)
    assert rec["a"] == "one" and rec["__proptypes"]["a"] == "string"


def test_patch_changes_label(module_api):
    old, new = unique("OLD"), unique("NEW")
    rid = module_api.create(old, {"a": 1})
    keep = module_api.create(old, {"a": 2})
    r = module_api.patch(f"/api/v1/records/{rid}", {"label": new, "data": {"b": 2}})
    assert r.status_code == 201
    rec = module_api.record(rid)
    assert rec["label"] == rec["__label"] == new
    assert rec["a"] == 1 and rec["b"] == 2
    labels = module_api.labels()
    assert labels[old] == 1 and labels[new] == 1
    assert [x["id"] for x in module_api.search({"labels": [new]})["data"]] == [rid]
    assert [x["id"] for x in module_api.search({"labels": [old]})["data"]] == [keep]


def test_edit_fields_sent_as_null_are_absent(module_api):
    """`data`, `properties` and `options` sent as null count as absent on an edit, as they do
    on a create."""
    old, new = unique("NUL"), unique("NUL2")
    rid = module_api.create(old, {"a": 1})
    r = module_api.patch(f"/api/v1/records/{rid}", {"label": new, "data": None, "properties": None, "options": None})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert rec["label"] == new and rec["a"] == 1
    r = module_api.post("/api/v1/records", {"label": old, "data": None})
    assert r.status_code == 201, r.text
    # A null `data` beside flat keys: the body is the flat form.
    r = module_api.patch(f"/api/v1/records/{rid}", {"data": None, "b": 2})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert {k: v for k, v in rec.items() if k not in SYSTEM_KEYS} == {"a": 1, "b": 2}


def test_patch_flat_body(module_api):
    label = unique("FLAT")
    rid = module_api.create(label, {"a": 1, "b": "x"})
    r = module_api.patch(f"/api/v1/records/{rid}", {"a": 5, "z": "new", "b": None})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert rec["a"] == 5 and rec["z"] == "new" and "b" not in rec
    assert rec["label"] == label


def test_patch_flat_body_with_label_and_options(module_api):
    old, new = unique("FLAT"), unique("FLAT2")
    rid = module_api.create(old, {"a": 1})
    r = module_api.patch(f"/api/v1/records/{rid}", {"label": new, "options": {"suggestTypes": False}, "n": 3})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert rec["label"] == new
    assert "options" not in rec
    assert rec["n"] == "3" and rec["__proptypes"] == {"a": "number", "n": "string"}


def test_concurrent_patches_lose_no_update(module_api):
    from concurrent.futures import ThreadPoolExecutor
    rid = module_api.create(unique("RACE"), {"base": 0})

    def patch(i):
        return module_api.engine.client().patch(f"/api/v1/records/{rid}", {"data": {f"k{i}": i}}).status_code

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(patch, range(64))) == {201}
    rec = module_api.record(rid)
    assert {k: rec[k] for k in rec if k.startswith("k")} == {f"k{i}": i for i in range(64)}
    assert rec["base"] == 0


def test_put_replaces(module_api):
    label = unique("PUT")
    rid = module_api.create(label, {"a": 1, "b": "x"})
    r = module_api.put(f"/api/v1/records/{rid}", {"data": {"c": True}})
    assert r.status_code == 201
    assert r.json()["success"] is True
    assert r.json()["data"] == module_api.record(rid)
    rec = module_api.record(rid)
    assert set(rec) == SYSTEM_KEYS | {"c"}
    assert rec["c"] is True and rec["label"] == label


def test_put_flat_body_and_label(module_api):
    old, new = unique("PUT"), unique("PUT2")
    rid = module_api.create(old, {"a": 1, "b": "x"})
    r = module_api.put(f"/api/v1/records/{rid}", {"label": new, "only": 1})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert set(rec) == SYSTEM_KEYS | {"only"}
    assert rec["label"] == new and rec["only"] == 1
    labels = module_api.labels()
    assert new in labels and old not in labels


def test_put_with_explicit_properties(module_api):
    rid = module_api.create(unique("PUT"), {"a": 1})
    r = module_api.put(f"/api/v1/records/{rid}", {"properties": [{"name": "n", "type": "number", "value": "9"}]})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert set(rec) == SYSTEM_KEYS | {"n"} and rec["n"] == 9


def test_edit_type_error_leaves_record_unchanged(module_api):
    rid = module_api.create(unique("EDIT"), {"a": 1})
    before = module_api.record(rid)
    r = module_api.patch(f"/api/v1/records/{rid}", {"data": {"b": 2},
                                                   "properties": [{"name": "c", "type": "number", "value": "x"}]})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["c"])
    assert module_api.record(rid) == before


def test_delete(module_api):
    label = unique("DEL")
    rid = module_api.create(label, {"a": 1})
    other = module_api.create(label, {"a": 2})
    r = module_api.delete(f"/api/v1/records/{rid}")
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    assert isinstance(body["data"]["message"], str) and body["data"]["message"]
    assert_rest_error(module_api.get(f"/api/v1/records/{rid}"), 404, "not_found")
    assert module_api.labels()[label] == 1
    assert [x["id"] for x in module_api.search({"labels": [label]})["data"]] == [other]


@pytest.mark.parametrize("method", ["GET", "PATCH", "PUT", "DELETE"])
def test_unknown_record_is_404(module_api, method):
    rid = module_api.create(unique("GONE"))
    assert module_api.delete(f"/api/v1/records/{rid}").status_code == 200
    body = {"data": {"a": 1}} if method in ("PATCH", "PUT") else None
    r = module_api.request(method, f"/api/v1/records/{rid}", body)
    assert_rest_error(r, 404, "not_found")
    assert r.json()["error"] == REASON[404]
    # an edit of a missing record must not create it
    assert_rest_error(module_api.get(f"/api/v1/records/{rid}"), 404, "not_found")


# ---------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------


def test_property_get_shape_and_count(module_api):
    label = unique("PROP")
    name = unique("prop")
    ids = [module_api.create(label, {name: i}) for i in range(3)]
    p = module_api.property_by(name, "number")
    assert p is not None
    r = module_api.get(f"/api/v1/properties/{p['id']}")
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    prop = body["data"]
    assert set(prop) == {"id", "name", "type", "metadata", "recordsCount"}
    assert is_uuid_v7(prop["id"])
    assert prop["name"] == name and prop["type"] == "number" and prop["recordsCount"] == 3
    # PUT without the property, PATCH null and DELETE each lower the count
    module_api.put(f"/api/v1/records/{ids[0]}", {"data": {"other": 1}})
    assert module_api.get(f"/api/v1/properties/{p['id']}").json()["data"]["recordsCount"] == 2
    module_api.patch(f"/api/v1/records/{ids[1]}", {"data": {name: None}})
    assert module_api.get(f"/api/v1/properties/{p['id']}").json()["data"]["recordsCount"] == 1
    module_api.create(unique("PROP2"), {name: 5})
    assert module_api.get(f"/api/v1/properties/{p['id']}").json()["data"]["recordsCount"] == 2


def test_property_counts_follow_edits(module_api):
    name = unique("counted")
    rid = module_api.create(unique("COUNT"), {name: 1})
    for i in range(3):  # rewriting the same property does not inflate its count
        module_api.patch(f"/api/v1/records/{rid}", {"data": {name: i}})
    module_api.patch(f"/api/v1/records/{rid}", {"data": {name: [4, 5]}})
    assert module_api.property_by(name, "number")["recordsCount"] == 1
    module_api.patch(f"/api/v1/records/{rid}", {"label": unique("COUNT2")})
    assert module_api.property_by(name, "number")["recordsCount"] == 1
    # a type change moves the record from (name, number) to (name, string)
    module_api.patch(f"/api/v1/records/{rid}", {"data": {name: "text"}})
    num = module_api.property_by(name, "number")
    assert num is None or num["recordsCount"] == 0
    assert module_api.property_by(name, "string")["recordsCount"] == 1
    module_api.delete(f"/api/v1/records/{rid}")
    s = module_api.property_by(name, "string")
    assert s is None or s["recordsCount"] == 0


def test_same_name_two_types_are_two_properties(module_api):
    name = unique("dual")
    module_api.create(unique("DUAL"), {name: 1})
    module_api.create(unique("DUAL"), {name: "one"})
    module_api.create(unique("DUAL"), {name: "two"})
    mine = [p for p in module_api.properties() if p["name"] == name]
    assert {p["type"]: p["recordsCount"] for p in mine} == {"number": 1, "string": 2}
    assert len({p["id"] for p in mine}) == 2


def test_properties_search_shape(module_api):
    name = unique("listed")
    module_api.create(unique("LIST"), {name: True})
    r = module_api.post("/api/v1/properties/search", {})
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    assert body["data"]["total"] == len(body["data"]["data"])
    mine = [p for p in body["data"]["data"] if p["name"] == name]
    assert len(mine) == 1
    assert set(mine[0]) == {"id", "name", "type", "metadata", "recordsCount"}
    assert mine[0]["type"] == "boolean" and mine[0]["recordsCount"] == 1


def test_property_delete_removes_it_from_all_records(module_api):
    l1, l2 = unique("PDEL"), unique("PDEL")
    name = unique("doomed")
    a = module_api.create(l1, {name: 1, "keep": "a"})
    b = module_api.create(l2, {name: 2, "keep": "b"})
    c = module_api.create(l1, {name: "text", "keep": "c"})  # same name, other type: another property
    p = module_api.property_by(name, "number")
    assert p["recordsCount"] == 2
    r = module_api.delete(f"/api/v1/properties/{p['id']}")
    assert r.status_code == 200
    assert r.json()["success"] is True
    assert isinstance(r.json()["data"]["message"], str)
    for rid, keep in ((a, "a"), (b, "b")):
        rec = module_api.record(rid)
        assert name not in rec and name not in rec["__proptypes"]
        assert rec["keep"] == keep
    rec_c = module_api.record(c)
    assert rec_c[name] == "text" and rec_c["__proptypes"][name] == "string"
    assert_rest_error(module_api.get(f"/api/v1/properties/{p['id']}"), 404, "not_found")
    assert module_api.property_by(name, "number") is None
    assert module_api.property_by(name, "string")["recordsCount"] == 1
    # records and labels survive
    labels = module_api.labels()
    assert labels[l1] == 2 and labels[l2] == 1
    assert_rest_error(module_api.delete(f"/api/v1/properties/{p['id']}"), 404, "not_found")


def test_property_delete_reaches_records_holding_an_empty_array(module_api):
    # An empty array has no entry in the value index; the delete still finds its records
    # (in several labels), and the property's metadata goes with the last holder.
    l1, l2, name = unique("PDE"), unique("PDE"), unique("ea")
    a = module_api.create(l1, {name: [], "keep": 1})
    b = module_api.create(l1, {name: ["v"], "keep": 2})
    c = module_api.create(l2, {name: [], "keep": 3})
    p = module_api.property_by(name, "string")
    assert p["recordsCount"] == 3
    r = module_api.delete(f"/api/v1/properties/{p['id']}")
    assert r.status_code == 200, r.text
    assert "3 record" in r.json()["data"]["message"]
    for rid, keep in ((a, 1), (b, 2), (c, 3)):
        rec = module_api.record(rid)
        assert name not in rec and name not in rec["__proptypes"] and rec["keep"] == keep
    assert_rest_error(module_api.get(f"/api/v1/properties/{p['id']}"), 404, "not_found")
    assert module_api.property_by(name, "string") is None


def test_unknown_property_is_404(module_api):
    name = unique("ghost")
    module_api.create(unique("GHOST"), {name: 1})
    p = module_api.property_by(name, "number")
    module_api.delete(f"/api/v1/properties/{p['id']}")
    assert_rest_error(module_api.get(f"/api/v1/properties/{p['id']}"), 404, "not_found")


# ---------------------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------------------


def test_labels_search_counts(module_api):
    a, b = unique("LA"), unique("LB")
    ids = [module_api.create(a) for _ in range(3)] + [module_api.create(b)]
    r = module_api.post("/api/v1/labels/search", {})
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    assert body["data"][a] == 3 and body["data"][b] == 1
    assert all(isinstance(v, int) and v > 0 for v in body["data"].values())
    module_api.delete(f"/api/v1/records/{ids[0]}")
    assert module_api.labels()[a] == 2
    module_api.delete(f"/api/v1/records/{ids[3]}")
    assert b not in module_api.labels()


def test_labels_search_filter_and_empty_body(module_api):
    a, b = unique("LF"), unique("LF")
    module_api.create(a)
    module_api.create(b)
    assert module_api.labels({"labels": [a]}) == {a: 1}
    r = module_api.post("/api/v1/labels/search", data=b"")
    assert r.status_code == 200
    assert r.json()["data"][a] == 1 and r.json()["data"][b] == 1


def test_labels_total_matches_records(module_api):
    labels = module_api.labels()
    assert sum(labels.values()) == module_api.search({"limit": 1})["total"]


# ---------------------------------------------------------------------------------------
# records/search: paging, total, order
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def series(module_api):
    """Seven records created one after another, and their ids in creation order."""
    label = unique("SERIES")
    return label, [module_api.create(label, {"n": i}) for i in range(7)]


def test_search_envelope(module_api, series):
    label, ids = series
    r = module_api.post("/api/v1/records/search", {"labels": [label]})
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True
    assert set(body["data"]) == {"data", "total"}
    assert body["data"]["total"] == 7
    assert all(set(x) >= SYSTEM_KEYS for x in body["data"]["data"])


def test_ids_are_time_ordered(series):
    _, ids = series
    assert ids == sorted(ids)


def test_search_order_asc_desc_default(module_api, series):
    label, ids = series
    asc = [x["id"] for x in module_api.search({"labels": [label], "orderBy": "asc"})["data"]]
    desc = [x["id"] for x in module_api.search({"labels": [label], "orderBy": "desc"})["data"]]
    default = [x["id"] for x in module_api.search({"labels": [label]})["data"]]
    assert asc == ids
    assert desc == ids[::-1]
    assert default == desc
    by_id = [x["id"] for x in module_api.search({"labels": [label], "orderBy": {"id": "asc"}})["data"]]
    assert by_id == ids
    assert [x["n"] for x in module_api.search({"labels": [label], "orderBy": "asc"})["data"]] == list(range(7))


@pytest.mark.parametrize("skip,limit", [(0, 3), (3, 3), (6, 3), (2, 1), (0, 7), (0, 1000), (7, 5), (50, 5)])
def test_search_paging(module_api, series, skip, limit):
    label, ids = series
    for order, expected in (("asc", ids), ("desc", ids[::-1])):
        page = module_api.search({"labels": [label], "orderBy": order, "skip": skip, "limit": limit})
        assert page["total"] == 7
        assert [x["id"] for x in page["data"]] == expected[skip:skip + limit]


def test_search_several_labels_is_union(module_api, series):
    label, ids = series
    other = unique("OTHER")
    extra = [module_api.create(other) for _ in range(2)]
    page = module_api.search({"labels": [label, other], "orderBy": "asc", "limit": 100})
    assert page["total"] == 9
    assert [x["id"] for x in page["data"]] == sorted(ids + extra)
    page = module_api.search({"labels": [other, label], "orderBy": "desc", "skip": 1, "limit": 3})
    assert [x["id"] for x in page["data"]] == sorted(ids + extra, reverse=True)[1:4]


def test_search_unknown_label_is_empty(module_api):
    assert module_api.search({"labels": [unique("NOPE")]}) == {"data": [], "total": 0}


def test_search_default_limit_is_100(module_api):
    label = unique("MANY")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: module_api.engine.client().create(label, {"i": i}), range(105)))
    page = module_api.search({"labels": [label]})
    assert page["total"] == 105
    assert len(page["data"]) == 100
    assert [x["id"] for x in page["data"]] == sorted(ids, reverse=True)[:100]
    rest = module_api.search({"labels": [label], "skip": 100})
    assert [x["id"] for x in rest["data"]] == sorted(ids, reverse=True)[100:]


def test_search_without_labels_counts_everything(module_api):
    total = module_api.search({"limit": 1})["total"]
    module_api.create(unique("ANY"))
    assert module_api.search({"limit": 1})["total"] == total + 1
    assert total + 1 == sum(module_api.labels().values())


@pytest.mark.parametrize("body,needle", [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"limit": -1}, "limit"),
    ({"skip": -1}, "skip"), ({"orderBy": "sideways"}, "orderBy"), ({"limit": "ten"}, "limit"),
    ({"labels": "MOVIE"}, "labels"),
])
def test_search_validation(module_api, body, needle):
    assert_rest_error(module_api.post("/api/v1/records/search", body), 400, "invalid_argument",
                      message_contains=[needle])


def test_search_with_where_filters(module_api, series):
    label, _ = series
    r = module_api.post("/api/v1/records/search", {"labels": [label], "where": {"n": 1}})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["total"] == 1
    assert [rec["n"] for rec in data["data"]] == [1]


# ---------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------


def _counter(text, route, method, status):
    m = re.search(r'^engine_http_requests_total\{route="%s",method="%s",status="%s"\} (\d+)$'
                  % (re.escape(route), method, status), text, re.M)
    return int(m.group(1)) if m else 0


def test_metrics_requires_token(module_api):
    assert_rest_error(module_api.get("/metrics", auth=False), 401, "unauthenticated")
    assert_rest_error(module_api.get("/metrics", auth=False, headers={"Authorization": "Bearer nope"}),
                      401, "unauthenticated")


def test_metrics_contents(module_api):
    label = unique("MET")
    rid = module_api.create(label, {"a": 1})
    before = module_api.metrics()
    module_api.get(f"/api/v1/records/{rid}")
    module_api.get(f"/api/v1/records/{rid}")
    module_api.post("/api/v1/records/search", {"limit": 0})
    r = module_api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.text
    assert "# TYPE engine_http_requests_total counter" in text
    assert "# TYPE engine_records gauge" in text
    assert _counter(text, "/api/v1/records/{id}", "GET", 200) == _counter(before, "/api/v1/records/{id}", "GET", 200) + 2
    assert _counter(text, "/api/v1/records/search", "POST", 400) == _counter(before, "/api/v1/records/search", "POST", 400) + 1
    assert _counter(text, "/api/v1/records", "POST", 201) >= 1
    # labelled by route template, never by id
    assert rid not in text
    m = re.search(r"^engine_records (\d+)$", text, re.M)
    assert m, text
    assert int(m.group(1)) == module_api.search({"limit": 1})["total"]


def test_metrics_records_gauge_tracks_writes(module_api):
    def gauge():
        return int(re.search(r"^engine_records (\d+)$", module_api.metrics(), re.M).group(1))
    n = gauge()
    rid = module_api.create(unique("GAUGE"))
    assert gauge() == n + 1
    module_api.delete(f"/api/v1/records/{rid}")
    assert gauge() == n


# ---------------------------------------------------------------------------------------
# authentication
# ---------------------------------------------------------------------------------------

TOKEN_HEADERS = [
    {"Authorization": f"Bearer {DEV_TOKEN}"},
    {"Authorization": f"bearer {DEV_TOKEN}"},
    {"X-Service-Token": DEV_TOKEN},
    {"token": DEV_TOKEN},
]


@pytest.mark.parametrize("headers", TOKEN_HEADERS, ids=["bearer", "bearer-lowercase", "x-service-token", "token"])
def test_token_headers(module_api, headers):
    label = unique("AUTH")
    r = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1}}, auth=False, headers=headers)
    assert r.status_code == 201, r.text
    rid = r.json()["data"]["id"]
    r = module_api.get(f"/api/v1/records/{rid}", auth=False, headers=headers)
    assert r.status_code == 200 and r.json()["data"]["a"] == 1
    assert module_api.get("/metrics", auth=False, headers=headers).status_code == 200
    r = module_api.protocol({"kind": "query", "query": {"kind": "record", "id": rid}}, auth=False, headers=headers)
    assert r.status_code == 200 and r.json()["response"]["record"]["id"] == rid


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {DEV_TOKEN}x"},
    {"Authorization": "Bearer "},
    {"Authorization": f"Basic {DEV_TOKEN}"},
    {"Authorization": DEV_TOKEN},
    {"X-Service-Token": "wrong"},
    {"token": "wrong"},
    {"token": ""},
], ids=["none", "wrong", "suffix", "empty-bearer", "basic", "no-scheme", "x-service-wrong", "token-wrong", "token-empty"])
def test_bad_credentials_401(module_api, headers):
    label = unique("DENY")
    r = module_api.post("/api/v1/records", {"label": label, "data": {"a": 1}}, auth=False, headers=headers)
    body = assert_rest_error(r, 401, "unauthenticated")
    assert body["error"] == REASON[401]
    assert label not in module_api.labels()


def test_custom_token(engine_factory):
    e = engine_factory.start(token="s3cret-token")
    good, dev = e.client(), e.client(token=DEV_TOKEN)
    assert_rest_error(dev.post("/api/v1/labels/search", {}), 401, "unauthenticated")
    assert_rest_error(dev.get("/metrics"), 401, "unauthenticated")
    assert good.labels() == {}
    rid = good.create("T", {"a": 1})
    assert good.record(rid)["a"] == 1
    assert_rest_error(dev.get(f"/api/v1/records/{rid}"), 401, "unauthenticated")
    assert dev.get("/health", auth=False).status_code == 200


# ---------------------------------------------------------------------------------------
# route table
# ---------------------------------------------------------------------------------------


def test_percent_encoded_path_segments_name_the_same_record(module_api):
    """RFC 3986 section 2.1: `%2D` in a path is `-`; a malformed encoding is kept as sent."""
    rid = module_api.create(unique("PCT"), {"v": 1})
    for path in (rid.replace("-", "%2D"), rid.replace("-", "%2d", 1), "%30" + rid[1:]):
        r = module_api.get(f"/api/v1/records/{path}")
        assert r.status_code == 200 and r.json()["data"]["__id"] == rid, (path, r.text)
    r = module_api.patch(f"/api/v1/records/{rid.replace('-', '%2D')}", {"v": 2})
    assert r.status_code in (200, 201) and module_api.record(rid)["v"] == 2, r.text
    for bad in (rid[:-2] + "%zz", rid[:-2] + "%2", rid[:-3] + "%FF"):
        assert_rest_error(module_api.get(f"/api/v1/records/{bad}"), 400, "invalid_argument")


def test_plain_reads_answer_alike_on_both_paths(module_api):
    """A body-less GET of a record, a property or a record's relationships is answered
    without the request's future when the engine answers it at once; a percent-encoded path
    takes the router. Both answer the same, errors included (status, headers, body)."""
    label, name = unique("BOTH"), unique("both")
    rid = module_api.create(label, {name: 1})
    others = [module_api.create(label, {name: i}) for i in range(2, 5)]
    r = module_api.post(f"/api/v1/records/{rid}/relationships", {"targetIds": others, "type": "BOTH"})
    assert r.status_code in (200, 201), r.text
    prop = module_api.property_by(name, "number")["id"]
    missing = "0190a4d2-0000-7000-8000-000000000000"
    for path in (f"/records/{rid}", f"/records/{rid}/relationships",
                 f"/records/{rid}/relationships?skip=1&limit=2", f"/records/{rid}/relationships?limit=x",
                 f"/properties/{prop}", f"/records/{missing}", f"/records/{missing}/relationships",
                 f"/properties/{missing}"):
        plain = module_api.get("/api/v1" + path)
        routed = module_api.get("/api/v1/%" + format(ord(path[1]), "02X") + path[2:])
        assert (plain.status_code, plain.content) == (routed.status_code, routed.content), path
        assert plain.headers["content-type"] == routed.headers["content-type"], path
        assert plain.status_code in (200, 400, 404), (path, plain.text)
    listed = module_api.get(f"/api/v1/records/{rid}/relationships").json()["data"]
    assert listed["total"] == 3 and {x["targetId"] for x in listed["data"]} == set(others)


@pytest.mark.parametrize("method,path", [
    ("GET", "/nope"), ("GET", "/api/v1/nope"), ("POST", "/api/v1/records/a/b/c"),
    ("GET", "/api/v1/records"), ("DELETE", "/health"), ("GET", "/protocol/v1/execute"),
    ("POST", "/api/v2/records"),
])
def test_unknown_route_404(module_api, method, path):
    r = module_api.request(method, path, {} if method == "POST" else None)
    # Under /protocol/ in the Protocol v1 envelope, as every answer there.
    check = assert_protocol_error if path.startswith("/protocol/") else assert_rest_error
    check(r, 404, "not_found")


LATER_ROUTES = [
    ("GET", "/api/v1/relationships/patterns", None),
]


@pytest.mark.parametrize("method,path,body", LATER_ROUTES, ids=[p for _, p, _ in LATER_ROUTES])
def test_later_routes_501(module_api, method, path, body):
    before = module_api.search({"limit": 1})["total"]
    r = module_api.request(method, path, body)
    assert_rest_error(r, 501, "unsupported")
    assert module_api.search({"limit": 1})["total"] == before
    # authentication still comes first
    assert_rest_error(module_api.request(method, path, body, auth=False), 401, "unauthenticated")


# ---------------------------------------------------------------------------------------
# Protocol v1 on the same store
# ---------------------------------------------------------------------------------------


def test_protocol_build_info(module_api):
    r = module_api.protocol({"kind": "describe", "describe": {"kind": "buildInfo"}})
    assert r.status_code == 200
    body = r.json()
    assert body["protocolVersion"] == 1
    build = body["response"]["build"]
    assert body["response"]["kind"] == "buildInfo"
    assert build["protocolVersion"] == 1 and build["multitenant"] is False
    assert isinstance(build["version"], str) and build["version"]


def test_protocol_put_and_read_shares_store_with_rest(module_api):
    label = unique("PROTO")
    r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": label,
                                                            "properties": {"t": "x", "n": 2.0}}})
    assert r.status_code == 200, r.text
    rec = r.json()["response"]["record"]
    assert r.json()["response"]["kind"] == "record"
    assert set(rec) == {"id", "label", "properties", "propertyTypes"}
    assert rec["properties"] == {"t": "x", "n": 2} and rec["propertyTypes"] == {"t": "string", "n": "number"}
    rest = module_api.record(rec["id"])
    assert rest["t"] == "x" and rest["n"] == 2 and rest["label"] == label
    r = module_api.protocol({"kind": "query", "query": {"kind": "records", "query": {"labels": [label], "limit": 5}}})
    assert r.status_code == 200
    assert r.json()["response"]["total"] == 1
    assert [x["id"] for x in r.json()["response"]["records"]] == [rec["id"]]
    r = module_api.protocol({"kind": "describe", "describe": {"kind": "labels", "query": {"labels": [label]}}})
    assert r.json()["response"]["counts"] == {label: 1} and r.json()["response"]["labels"] == [label]


def test_protocol_unknown_record_404(module_api):
    rid = module_api.create(unique("PGONE"))
    module_api.delete(f"/api/v1/records/{rid}")
    r = module_api.protocol({"kind": "query", "query": {"kind": "record", "id": rid}})
    assert_protocol_error(r, 404, "not_found")


@pytest.mark.parametrize("operation", [
    {"kind": "index", "index": {"kind": "create", "definition": {"label": "X", "property": "a", "kind": "text"}}},
], ids=["index"])
def test_protocol_unimplemented_501(module_api, operation):
    before = module_api.search({"limit": 1})["total"]
    assert_protocol_error(module_api.protocol(operation), 501, "unsupported")
    assert module_api.search({"limit": 1})["total"] == before


def test_put_without_a_body_is_refused_not_an_emptying(module_api):
    rid = module_api.create(unique("PUTB"), {"a": 1, "b": "x"})
    with unchanged(module_api):
        for data in (None, b"", b"  \n"):
            r = module_api.request("PUT", f"/api/v1/records/{rid}", data=data)
            assert_rest_error(r, 400, "invalid_argument", message_contains=["PUT needs a JSON body"])
    r = module_api.put(f"/api/v1/records/{rid}", {})
    assert r.status_code == 201, r.text
    rec = module_api.record(rid)
    assert "a" not in rec and "b" not in rec


def test_protocol_id_and_record_id_must_agree(module_api):
    label = unique("IDR")
    a, b = module_api.create(label, {"n": 1}), module_api.create(label, {"n": 2})
    with unchanged(module_api):
        for extra in ({"kind": "deleteRecord"}, {"kind": "retypeRecord", "fromLabel": label, "toLabel": label + "X"}):
            r = module_api.protocol({"kind": "mutate", "mutation": {**extra, "id": a, "record": {"id": b}}})
            assert_protocol_error(r, 400, "invalid_argument", message_contains=["record.id"])
        r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "deleteRecord", "record": {"id": "nope"}}})
        assert_protocol_error(r, 400, "invalid_argument", message_contains=["record.id"])
        # A replace that gives no properties at all is refused; `{}` empties the record.
        r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "replace", "id": a}})
        assert_protocol_error(r, 400, "invalid_argument", message_contains=["properties is required"])
    r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "replace", "id": b,
                                                             "properties": {}}})
    assert r.status_code == 200 and module_api.record(b).get("n") is None, r.text
    r = module_api.protocol({"kind": "mutate", "mutation": {"kind": "deleteRecord", "id": a, "record": {"id": a.upper()}}})
    assert r.status_code == 200 and r.json()["response"]["affected"] == 1, r.text
    assert module_api.get(f"/api/v1/records/{b}").status_code == 200
