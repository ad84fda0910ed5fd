"""Helpers shared by the search tests (test_search_rest.py, test_search_sdk.py,
test_aggregate.py): seeding small hand-made datasets and mapping search results back to
the positions of the documents that created them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from conftest import Api

SEARCH = "/api/v1/records/search"
FIND = "/api/v1/query/records/find"


def seed(api: Api, label: str, docs: Sequence[Dict[str, Any]]) -> List[str]:
    """Creates one record per document, one after another, so ids ascend with the index."""
    ids = [api.create(label, doc) for doc in docs]
    assert ids == sorted(ids), "UUIDv7 ids must ascend in creation order"
    return ids


def rest_find(api: Api, body: Dict[str, Any], path: str = SEARCH) -> Dict[str, Any]:
    r = api.post(path, body)
    assert r.status_code == 200, f"{body} -> {r.status_code} {r.text}"
    out = r.json()
    assert out["success"] is True, out
    assert set(out["data"]) == {"data", "total"}, out
    return out["data"]


def protocol_records(api: Api, query: Dict[str, Any]) -> Dict[str, Any]:
    r = api.protocol({"kind": "query", "query": {"kind": "records", "query": query}})
    assert r.status_code == 200, f"{query} -> {r.status_code} {r.text}"
    body = r.json()
    assert body["protocolVersion"] == 1, body
    return body["response"]


def positions(ids: Sequence[str], records: Sequence[Dict[str, Any]]) -> List[int]:
    """The dataset positions of the records, in response order (a record not in the dataset
    fails the test)."""
    where = {rid: i for i, rid in enumerate(ids)}
    out = []
    for rec in records:
        rid = rec.get("__id", rec.get("id"))
        assert rid in where, f"record {rid} is not part of the dataset: {rec}"
        out.append(where[rid])
    return out


def by_id_desc(ids: Sequence[str], members: Sequence[int]) -> List[int]:
    """Dataset positions ordered by record id descending (the tie order)."""
    return sorted(members, key=lambda i: ids[i], reverse=True)


def explain(api: Api, query: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    describe: Dict[str, Any] = {"kind": "explain"}
    if query is not None:
        describe["query"] = query
    r = api.protocol({"kind": "describe", "describe": describe})
    assert r.status_code == 200, r.text
    resp = r.json()["response"]
    assert resp["kind"] == "explain", resp
    return resp["plan"]
