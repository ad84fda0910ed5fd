"""Protocol v1 `describe schema`: labels with counts, properties per label with counts, array
flags, sample values and min/max; from the counters without a where filter, and from the
matching records with one."""

from conftest import unique


def schema(api, query=None):
    op = {"kind": "describe", "describe": {"kind": "schema", **({"query": query} if query is not None else {})}}
    r = api.protocol(op)
    assert r.status_code == 200, r.text
    body = r.json()["response"]
    assert body["kind"] == "schema"
    return body["schema"]


def prop(s, name, label):
    found = [p for p in s["properties"] if p["name"] == name and p["label"] == label]
    assert len(found) == 1, s["properties"]
    return found[0]


def test_schema_from_counters_and_with_a_filter(engine):
    api = engine.client()
    movie, person = unique("MOVIE"), unique("PERSON")
    for year, tags in [(1999, ["a", "b"]), (2010, ["c"]), (1972, ["a"])]:
        api.create(movie, {"year": year, "tags": tags, "title": f"t{year}"})
    api.create(person, {"name": "Ann", "born": "1980-05-01"})

    s = schema(api)
    labels = {l["name"]: l["recordsCount"] for l in s["labels"]}
    assert labels == {movie: 3, person: 1}
    year = prop(s, "year", movie)
    assert (year["type"], year["recordsCount"], year["isArray"]) == ("number", 3, False)
    assert (year["min"], year["max"]) == (1972, 2010)
    assert sorted(year["sampleValues"]) == [1972, 1999, 2010]
    tags = prop(s, "tags", movie)
    assert tags["isArray"] is True and tags["recordsCount"] == 3 and "min" not in tags
    born = prop(s, "born", person)
    assert (born["type"], born["min"], born["max"]) == ("datetime", "1980-05-01", "1980-05-01")
    assert born["id"] == api.property_by("born", "datetime")["id"]
    assert s["relationships"] == []

    only = schema(api, {"labels": [person]})
    assert [l["name"] for l in only["labels"]] == [person]
    assert {p["label"] for p in only["properties"]} == {person}

    filtered = schema(api, {"labels": [movie], "predicate": {"year": {"$gte": 1990}}})
    assert filtered["labels"] == [{"name": movie, "recordsCount": 2}]
    year = prop(filtered, "year", movie)
    assert (year["recordsCount"], year["min"], year["max"]) == (2, 1999, 2010)
    assert sorted(prop(filtered, "tags", movie)["sampleValues"]) == ["a", "b", "c"]


def test_index_listings_are_empty_and_the_sdk_schema_works(engine):
    # No text or vector index can be declared yet (`index` answers unsupported), so the
    # listings are empty rather than refused: the SDK's `ai.get_schema()` reads them.
    from rushdb import RushDB
    from conftest import DEV_TOKEN, assert_protocol_error

    api = engine.client()
    label = unique("IDX")
    api.create(label, {"n": 1})
    for kind in ("indexes", "vectorIndexes"):
        r = api.protocol({"kind": "describe", "describe": {"kind": kind}})
        assert r.status_code == 200 and r.json()["response"] == {"kind": "indexes", "indexes": []}, r.text
    r = api.protocol({"kind": "describe", "describe": {"kind": "vectorIndex", "name": "emb"}})
    assert_protocol_error(r, 404, "not_found", message_contains=["emb"])
    db = RushDB(DEV_TOKEN, direct=True, engine_url=engine.url)
    items = db.ai.get_schema().data
    [item] = [i for i in items if i.get("label") == label or i.get("name") == label]
    assert "n" in str(item), item
    assert label in str(db.ai.get_schema_markdown().data)


def test_schema_of_records_with_many_properties(engine):
    """The same few records end the value indexes of every property here: each property's
    samples, min and max still come from their own values (the schema reads each sampled
    record once; a record of 10,000 properties once held the server for over a minute)."""
    api = engine.client()
    label = unique("WIDE")
    width = 1500
    for k in range(3):
        r = api.post("/api/v1/records", {"label": label, "data": {f"p{i}": i * 10 + k for i in range(width)}})
        assert r.status_code == 201, r.text
    api.create(label, {"p7": "seven"})  # the same name with another type
    s = schema(api, {"labels": [label]})
    assert s["labels"] == [{"name": label, "recordsCount": 4}]
    numbers = {p["name"]: p for p in s["properties"] if p["type"] == "number"}
    assert len(numbers) == width
    for i in (0, 7, 777, width - 1):
        p = numbers[f"p{i}"]
        assert (p["recordsCount"], p["min"], p["max"]) == (3, i * 10, i * 10 + 2)
        assert sorted(p["sampleValues"]) == [i * 10, i * 10 + 1, i * 10 + 2]
    text = [p for p in s["properties"] if p["name"] == "p7" and p["type"] == "string"]
    assert len(text) == 1 and text[0]["sampleValues"] == ["seven"] and "min" not in text[0]
    assert api.get("/health").status_code == 200
