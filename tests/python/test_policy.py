"""The data-access policy (SPEC.md "Data-access policy", BEHAVIOUR.md §7): every policy element
under PolicyEnforced for capability tokens (allowed labels, denied relationship types, visible
properties, max results), the fail-closed list, and the bootstrap token and BoundaryOnly mode
left unbound."""

from __future__ import annotations

import pytest

from conftest import DEV_TOKEN, assert_protocol_error, assert_rest_error, unique
from test_security import SECRET, call, claims, mint

T = "policy-tenant"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from conftest import EngineProcess

    tmp = tmp_path_factory.mktemp("policy")
    e = EngineProcess(tmp / "data", tmp, extra_args=["--capability-secret", SECRET, "--multitenant"]).start()
    boot = lambda m, p, b=None: call(e, DEV_TOKEN, m, p, b, tenant=T)
    mk = lambda label, data: boot("POST", "/api/v1/records", {"label": label, "data": data, "options": {"returnResult": True}}).json()["data"]["__id"]
    people = [mk("PERSON", {"name": f"p{i}", "ssn": f"ssn-{i}", "age": 20 + i}) for i in range(5)]
    company = mk("COMPANY", {"name": "acme"})
    secret = mk("SECRET", {"x": 1})
    for p in people:
        assert boot("POST", f"/api/v1/records/{p}/relationships", {"targetIds": [company], "type": "WORKS_AT"}).status_code == 201
    assert boot("POST", f"/api/v1/records/{people[0]}/relationships", {"targetIds": [people[1]], "type": "KNOWS"}).status_code == 201
    r = protocol(e, DEV_TOKEN, {"kind": "policy", "policy": {"kind": "set", "mode": "PolicyEnforced", "policy": {
        "allowedLabels": ["PERSON", "COMPANY"], "deniedRelationshipTypes": ["KNOWS"],
        "visibleProperties": {"PERSON": ["name", "age"]}, "maxResults": 3}}})
    assert r.status_code == 200, r.text
    yield {"engine": e, "people": people, "company": company, "secret": secret, "token": mint(claims("read write", tenant=T))}
    assert e.stop() == 0


def protocol(e, token, op, tenant=T):
    return e.client().session.post(e.url + "/protocol/v1/execute", json={"protocolVersion": 1, "context": {"scope": tenant}, "operation": op},
                                   headers={"Authorization": f"Bearer {token}", "X-Service-Tenant": tenant})


def cap(world, method, path, body=None):
    return call(world["engine"], world["token"], method, path, body, tenant=T)


def test_policy_get_shows_what_was_set(world):
    r = protocol(world["engine"], DEV_TOKEN, {"kind": "policy", "policy": {"kind": "get"}})
    got = r.json()["response"]
    assert got["mode"] == "PolicyEnforced"
    assert got["policy"]["allowedLabels"] == ["PERSON", "COMPANY"] and got["policy"]["maxResults"] == 3
    assert_protocol_error(protocol(world["engine"], DEV_TOKEN, {"kind": "policy", "policy": {"kind": "set", "mode": "Loose"}}),
                          400, "invalid_argument")
    # Names no record or relationship could carry are refused, and the policy stays as it was.
    for bad, where in (({"allowedLabels": ["PERSON", ""]}, "policy.allowedLabels[1]"),
                       ({"allowedLabels": ["L" * 1025]}, "policy.allowedLabels[0]"),
                       ({"deniedRelationshipTypes": [""]}, "policy.deniedRelationshipTypes[0]"),
                       ({"visibleProperties": {"": ["name"]}}, "policy.visibleProperties")):
        r = protocol(world["engine"], DEV_TOKEN, {"kind": "policy", "policy": {"kind": "set", "mode": "PolicyEnforced",
                                                                               "policy": bad}})
        assert_protocol_error(r, 400, "invalid_argument", message_contains=[where])
    again = protocol(world["engine"], DEV_TOKEN, {"kind": "policy", "policy": {"kind": "get"}}).json()["response"]
    assert again == got


def test_allowed_labels_and_max_results(world):
    r = cap(world, "POST", "/api/v1/records/search", {"limit": 100})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["total"] == 3 and len(data["data"]) == 3
    assert {x["__label"] for x in data["data"]} <= {"PERSON", "COMPANY"}
    assert_rest_error(cap(world, "POST", "/api/v1/records/search", {"labels": ["SECRET"]}), 403, "unauthorized")
    assert_rest_error(cap(world, "GET", f"/api/v1/records/{world['secret']}"), 403, "unauthorized")
    assert_rest_error(cap(world, "POST", "/api/v1/records", {"label": "SECRET", "data": {"y": 1}}), 403, "unauthorized")
    assert_rest_error(cap(world, "PATCH", f"/api/v1/records/{world['secret']}", {"x": 2}), 403, "unauthorized")
    assert_rest_error(cap(world, "DELETE", f"/api/v1/records/{world['secret']}"), 403, "unauthorized")
    assert_rest_error(cap(world, "POST", "/api/v1/records/import/json", {"label": "PERSON", "data": {"name": "n", "SECRET": {"x": 1}}}),
                      403, "unauthorized")
    assert cap(world, "POST", "/api/v1/records", {"label": "COMPANY", "data": {"name": "new"}}).status_code == 201
    # the bootstrap token is not bound
    r = call(world["engine"], DEV_TOKEN, "GET", f"/api/v1/records/{world['secret']}", tenant=T)
    assert r.status_code == 200


def test_visible_properties(world):
    p = world["people"][0]
    rec = cap(world, "GET", f"/api/v1/records/{p}").json()["data"]
    assert rec["name"] == "p0" and rec["age"] == 20 and "ssn" not in rec and "ssn" not in rec["__proptypes"]
    rows = cap(world, "POST", "/api/v1/records/search", {"labels": ["PERSON"]}).json()["data"]["data"]
    assert rows and all("ssn" not in r for r in rows)
    for body in [
        {"labels": ["PERSON"], "where": {"ssn": "ssn-1"}},
        {"labels": ["PERSON"], "orderBy": {"ssn": "asc"}},
        {"labels": ["PERSON"], "aggregate": {"ids": {"fn": "collect", "field": "ssn"}}},
        {"labels": ["PERSON"], "select": {"n": {"$count": "*"}}, "groupBy": ["$record.ssn"]},
        {"labels": ["COMPANY"], "where": {"PERSON": {"$relation": "WORKS_AT", "ssn": "ssn-1"}}},
    ]:
        assert_rest_error(cap(world, "POST", "/api/v1/records/search", body), 403, "unauthorized", message_contains=["ssn"])
    r = cap(world, "POST", "/api/v1/records/search", {"labels": ["PERSON"], "where": {"age": {"$gte": 21}}, "orderBy": {"age": "asc"}})
    assert [x["name"] for x in r.json()["data"]["data"]] == ["p1", "p2", "p3"]
    assert_rest_error(cap(world, "POST", "/api/v1/records/export/csv", {"labels": ["PERSON"]}), 403, "unauthorized")
    text = cap(world, "POST", "/api/v1/records/export/csv", {"labels": ["COMPANY"]}).json()["data"]["fileContent"]
    assert "acme" in text


def test_denied_relationship_types(world):
    ok = cap(world, "POST", "/api/v1/records/search", {"labels": ["PERSON"], "where": {"COMPANY": {"$relation": {"type": "WORKS_AT"}, "name": "acme"}}})
    assert ok.status_code == 200 and ok.json()["data"]["total"] == 3
    for where in [{"PERSON": {"$relation": "KNOWS"}}, {"PERSON": {}}, {"SECRET": {"$relation": "WORKS_AT"}}]:
        assert_rest_error(cap(world, "POST", "/api/v1/records/search", {"labels": ["PERSON"], "where": where}), 403, "unauthorized")
    p0, p2 = world["people"][0], world["people"][2]
    assert_rest_error(cap(world, "POST", f"/api/v1/records/{p0}/relationships", {"targetIds": [p2], "type": "KNOWS"}), 403, "unauthorized")


def test_imports_link_only_as_the_policy_allows(world):
    """An import links nested documents to their children and `parentId` to its roots with
    its relationship type: a denied type is refused like an attach of it, and `parentId` is a
    record written by id, so a label outside the policy is refused (not told apart from a
    missing record by a 404). Nothing is written."""
    e, p0, secret = world["engine"], world["people"][0], world["secret"]
    before = protocol(e, DEV_TOKEN, {"kind": "query", "query": {"kind": "relationships", "query": {}}}).json()["response"]["total"]
    knows = {"relationshipType": "KNOWS"}
    for method, path, body in [
        ("POST", "/api/v1/records/import/json", {"label": "PERSON", "data": [{"name": "z", "COMPANY": {"name": "c"}}], "options": knows}),
        ("POST", "/api/v1/records/import/json", {"label": "COMPANY", "data": [{"name": "c"}], "parentId": p0, "options": knows}),
        ("POST", "/api/v1/records/import/csv", {"label": "COMPANY", "data": "name\nc\n", "parentId": p0, "options": knows}),
        ("POST", "/api/v1/records/import/json", {"label": "COMPANY", "data": [{"name": "c"}], "parentId": secret}),
        ("POST", "/api/v1/records/import/csv", {"label": "COMPANY", "data": "name\nc\n", "parentId": secret}),
    ]:
        assert_rest_error(cap(world, method, path, body), 403, "unauthorized")
    r = protocol(e, world["token"], {"kind": "ingest", "ingest": {"kind": "documents", "label": "PERSON", "options": knows,
                                                                  "documents": [{"name": "w", "COMPANY": {"name": "k"}}]}})
    assert_protocol_error(r, 403, "unauthorized", message_contains=["KNOWS"])
    r = protocol(e, world["token"], {"kind": "ingest", "ingest": {"kind": "documents", "label": "COMPANY", "parentId": secret,
                                                                  "documents": [{"name": "k"}]}})
    assert_protocol_error(r, 403, "unauthorized", message_contains=["SECRET"])
    after = protocol(e, DEV_TOKEN, {"kind": "query", "query": {"kind": "relationships", "query": {}}}).json()["response"]["total"]
    assert after == before
    # An import without links, or linked with an allowed type to an allowed parent, is taken.
    r = cap(world, "POST", "/api/v1/records/import/json", {"label": "COMPANY", "data": [{"name": "ok"}], "parentId": p0})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("op", [
    {"kind": "describe", "describe": {"kind": "labels"}},
    {"kind": "describe", "describe": {"kind": "properties"}},
    {"kind": "describe", "describe": {"kind": "schema"}},
    {"kind": "describe", "describe": {"kind": "explain", "query": {"labels": ["PERSON"]}}},
    {"kind": "query", "query": {"kind": "relationships", "query": {}}},
    {"kind": "query", "query": {"kind": "propertyValues", "property": "ssn", "query": {}}},
    {"kind": "query", "query": {"kind": "statement", "language": "cypher", "statement": "MATCH (n) RETURN n", "parameters": {}}},
    {"kind": "backup", "backup": {"kind": "snapshot"}},
], ids=["labels", "properties", "schema", "explain", "relationships", "propertyValues", "statement", "backup"])
def test_fail_closed(world, op):
    assert_protocol_error(protocol(world["engine"], world["token"], op), 403, "unauthorized")
    # REST routes of the same operations too
    assert_rest_error(cap(world, "POST", "/api/v1/labels/search", {}), 403, "unauthorized")


def test_ordering_by_a_hidden_property_is_refused_in_aggregations_too(world):
    """A collect of records ordered by a property, and the per-record rows of an aggregation
    without groupBy ordered by a field, read that field as a sort does: a hidden one is
    refused (the order would tell its values though the answer leaves them out)."""
    for body in [
        {"labels": ["PERSON"], "groupBy": ["$record.age"],
         "aggregate": {"c": {"fn": "collect", "alias": "$record", "orderBy": {"ssn": "desc"}, "limit": 1}}},
        {"labels": ["PERSON"], "aggregate": {"n": {"fn": "count", "alias": "$record"}}, "orderBy": {"ssn": "asc"}},
    ]:
        assert_rest_error(cap(world, "POST", "/api/v1/records/search", body), 403, "unauthorized")
    ok = {"labels": ["PERSON"], "groupBy": ["$record.age"],
          "aggregate": {"c": {"fn": "collect", "alias": "$record", "orderBy": {"name": "desc"}}}}
    assert cap(world, "POST", "/api/v1/records/search", ok).status_code == 200


def test_boundary_only_is_unrestricted(world):
    other = "policy-free"
    token = mint(claims("*", tenant=other))
    r = protocol(world["engine"], DEV_TOKEN, {"kind": "policy", "policy": {"kind": "set", "mode": "BoundaryOnly",
                                                                          "policy": {"allowedLabels": ["NONE"]}}}, tenant=other)
    assert r.status_code == 200, r.text
    assert call(world["engine"], token, "POST", "/api/v1/records", {"label": "ANY", "data": {"s": 1}}, tenant=other).status_code == 201
    assert call(world["engine"], token, "POST", "/api/v1/labels/search", {}, tenant=other).json()["data"] == {"ANY": 1}


def test_hidden_properties_leak_through_no_other_door(world):
    """Hidden properties stay hidden in the records `collect` gathers (of an alias and of
    `$record`) and in the records an upsert import returns; and matching on one (an upsert's
    mergeBy, a bulk link's key or where) is refused like filtering on it."""
    def no_ssn(v):
        if isinstance(v, dict):
            assert "ssn" not in v and "ssn" not in v.get("__proptypes", {}), v
            for x in v.values():
                no_ssn(x)
        elif isinstance(v, list):
            for x in v:
                no_ssn(x)

    for body in [
        {"labels": ["COMPANY"], "where": {"PERSON": {"$relation": "WORKS_AT", "$alias": "$p"}},
         "aggregate": {"s": {"fn": "collect", "alias": "$p"}}},
        {"labels": ["COMPANY"], "where": {"PERSON": {"$relation": "WORKS_AT", "$alias": "$p"}},
         "select": {"s": {"$collect": "$p"}}},
        {"labels": ["PERSON"], "aggregate": {"c": {"fn": "collect", "alias": "$record"}}, "groupBy": ["$record.age"]},
    ]:
        r = cap(world, "POST", "/api/v1/records/search", body)
        assert r.status_code == 200, r.text
        rows = r.json()["data"]["data"]
        assert rows and any(isinstance(v, list) and v for row in rows for v in row.values()), rows
        no_ssn(rows)
    for path, body in [
        ("/api/v1/records/import/json", {"label": "PERSON", "data": [{"name": "p4", "g": "g1"}],
                                         "options": {"mergeBy": ["name"], "returnResult": True}}),
        ("/api/v1/records/import/csv", {"label": "PERSON", "data": "name,g\np4,g2",
                                        "options": {"mergeBy": ["name"], "returnResult": True}}),
    ]:
        r = cap(world, "POST", path, body)
        assert r.status_code in (200, 201), r.text
        assert r.json()["data"], r.text
        no_ssn(r.json()["data"])
    r = protocol(world["engine"], world["token"], {"kind": "ingest", "ingest": {
        "kind": "documents", "label": "PERSON", "documents": [{"name": "p4", "g": "g3"}],
        "options": {"mergeBy": ["name"], "returnResult": True}}})
    assert r.status_code == 200, r.text
    no_ssn(r.json()["response"])
    for path, body in [
        ("/api/v1/records", {"label": "PERSON", "data": {"ssn": "ssn-3"}, "options": {"mergeBy": ["ssn"], "returnResult": True}}),
        ("/api/v1/records", {"label": "PERSON", "data": {"ssn": "ssn-3"}, "options": {"mergeStrategy": "append"}}),
        ("/api/v1/records/import/json", {"label": "PERSON", "data": [{"ssn": "ssn-3"}], "options": {"mergeBy": ["ssn"]}}),
        ("/api/v1/records/import/csv", {"label": "PERSON", "data": "ssn\nssn-3", "options": {"mergeBy": ["ssn"]}}),
        ("/api/v1/records/import/csv", {"label": "PERSON", "data": "name\np4", "options": {"mergeStrategy": "append"}}),
        ("/api/v1/relationships/create-many", {"source": {"label": "COMPANY", "key": "name"},
                                               "target": {"label": "PERSON", "key": "ssn"}, "type": "X"}),
        ("/api/v1/relationships/delete-many", {"source": {"label": "COMPANY", "where": {"name": "acme"}},
                                               "target": {"label": "PERSON", "where": {"ssn": "ssn-1"}},
                                               "manyToMany": True}),
    ]:
        assert_rest_error(cap(world, "POST", path, body), 403, "unauthorized")
    # nothing was written by the refused requests
    r = call(world["engine"], DEV_TOKEN, "POST", "/api/v1/records/search",
             {"labels": ["PERSON"], "where": {"ssn": "ssn-3"}}, tenant=T)
    assert r.json()["data"]["total"] == 1
