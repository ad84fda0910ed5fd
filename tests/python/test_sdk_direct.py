"""The published `rushdb` 3.0 Python SDK in direct mode (Protocol v1) against the engine.

Every write made through the SDK is also checked through REST, so a test fails when the SDK
merely echoes what it sent.
"""

import pytest
from rushdb import RushDB, RushDBError

from conftest import DEV_TOKEN, is_uuid_v7, unique


@pytest.fixture(scope="module")
def db(module_engine):
    return RushDB(DEV_TOKEN, direct=True, engine_url=module_engine.url)


def test_ping(db, module_engine):
    assert db.ping() is True
    assert RushDB("wrong-token", direct=True, engine_url=module_engine.url).ping() is False


def test_ping_false_when_engine_unreachable(engine_factory):
    e = engine_factory.start()
    url = e.url
    assert e.stop() == 0
    assert RushDB(DEV_TOKEN, direct=True, engine_url=url).ping() is False


def test_create_returns_record_and_is_stored(db, module_api):
    label = unique("MOVIE")
    rec = db.records.create(label, {"title": "Inception", "year": 2010, "rating": 8.8,
                                    "released": "2010-07-16", "tags": ["sci-fi", "heist"], "seen": True})
    assert is_uuid_v7(rec.id)
    assert rec.label == label
    assert rec["title"] == "Inception"
    assert rec.data["year"] == 2010 and isinstance(rec.data["year"], int)
    assert rec.data["__proptypes"] == {"title": "string", "year": "number", "rating": "number",
                                       "released": "datetime", "tags": "string", "seen": "boolean"}
    stored = module_api.record(rec.id)
    assert stored["label"] == label and stored["__label"] == label
    assert stored["title"] == "Inception"
    assert stored["year"] == 2010
    assert stored["rating"] == 8.8
    assert stored["released"] == "2010-07-16"
    assert stored["tags"] == ["sci-fi", "heist"]
    assert stored["seen"] is True


def test_find_by_id(db, module_api):
    label = unique("BOOK")
    rid = module_api.create(label, {"name": "Dune", "pages": 412})
    rec = db.records.find_by_id(rid)
    assert rec.id == rid
    assert rec.label == label
    assert rec["name"] == "Dune"
    assert rec.data["pages"] == 412
    assert rec.data["__proptypes"] == {"name": "string", "pages": "number"}


def test_update_merges(db, module_api):
    label = unique("MOVIE")
    rec = db.records.create(label, {"title": "Alien", "year": 1979, "rating": 8.5})
    out = db.records.update(rec.id, {"year": 1980, "director": "Scott"})
    assert out["success"] is True
    data = out["data"]
    assert data["__id"] == rec.id
    assert data["year"] == 1980 and data["director"] == "Scott" and data["title"] == "Alien"
    stored = module_api.record(rec.id)
    assert stored["year"] == 1980
    assert stored["director"] == "Scott"
    assert stored["title"] == "Alien"
    assert stored["rating"] == 8.5
    assert stored["label"] == label


def test_update_null_removes_property(db, module_api):
    rec = db.records.create(unique("MOVIE"), {"title": "Alien", "rating": 8.5})
    db.records.update(rec.id, {"rating": None})
    stored = module_api.record(rec.id)
    assert "rating" not in stored
    assert "rating" not in stored["__proptypes"]
    assert stored["title"] == "Alien"


def test_set_replaces(db, module_api):
    label = unique("MOVIE")
    rec = db.records.create(label, {"title": "Alien", "year": 1979})
    out = db.records.set(rec.id, {"name": "Replaced", "flag": False})
    assert out["success"] is True
    assert out["data"]["__id"] == rec.id
    stored = module_api.record(rec.id)
    assert stored["name"] == "Replaced" and stored["flag"] is False
    assert "title" not in stored and "year" not in stored
    assert stored["__proptypes"] == {"name": "string", "flag": "boolean"}
    assert stored["label"] == label


def test_delete_by_id(db, module_api):
    rec = db.records.create(unique("MOVIE"), {"title": "Gone"})
    out = db.records.delete_by_id(rec.id)
    assert out["success"] is True
    r = module_api.get(f"/api/v1/records/{rec.id}")
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


@pytest.mark.parametrize("call", ["find_by_id", "update", "set", "delete_by_id"])
def test_missing_record_is_rushdb_error_404(db, module_api, call):
    rid = module_api.create(unique("TMP"), {"a": 1})
    module_api.delete(f"/api/v1/records/{rid}")
    method = getattr(db.records, call)
    args = (rid,) if call in ("find_by_id", "delete_by_id") else (rid, {"a": 2})
    with pytest.raises(RushDBError) as exc:
        method(*args)
    assert exc.value.status == 404
    # nothing was created or resurrected
    assert module_api.get(f"/api/v1/records/{rid}").status_code == 404


def test_find_with_labels_and_limit(db, module_api):
    label = unique("SERIES")
    other = unique("OTHER")
    ids = [module_api.create(label, {"n": i}) for i in range(5)]
    module_api.create(other, {"n": 99})
    res = db.records.find({"labels": [label], "limit": 3})
    assert res.total == 5
    assert len(res.data) == 3
    got = [r.id for r in res.data]
    assert all(r.label == label for r in res.data)
    # default order: newest first (ids are time-ordered UUIDv7)
    assert got == list(reversed(ids))[:3]
    everything = db.records.find({"labels": [label], "limit": 10})
    assert sorted(r.id for r in everything.data) == sorted(ids)
    assert {r.data["n"] for r in everything.data} == set(range(5))


def test_find_unknown_label_is_empty(db):
    res = db.records.find({"labels": [unique("NOPE")], "limit": 10})
    assert res.total == 0
    assert list(res.data) == []


def test_wrong_token_create_refused_and_nothing_written(module_engine, module_api):
    label = unique("DENIED")
    bad = RushDB("not-the-token", direct=True, engine_url=module_engine.url)
    with pytest.raises(RushDBError) as exc:
        bad.records.create(label, {"a": 1})
    assert exc.value.status == 401
    assert label not in module_api.labels()


def test_sdk_write_visible_to_rest_search(db, module_api):
    label = unique("VISIBLE")
    created = [db.records.create(label, {"i": i}).id for i in range(3)]
    page = module_api.search({"labels": [label], "orderBy": "asc"})
    assert page["total"] == 3
    assert [r["id"] for r in page["data"]] == created
