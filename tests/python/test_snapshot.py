"""Graph snapshots: `engine export` / `engine restore` (and `--export` / `--restore`), the
migration path between storage format versions (SPEC.md "Versioning"), and Protocol v1
`backup {kind: "snapshot"}` (one tenant, the same format). A restore must give back every
record, relationship, property id, vector and policy exactly, in the same order."""
from __future__ import annotations

import json
import subprocess

import requests

from conftest import DEV_TOKEN, ENGINE_BIN, EngineProcess, assert_protocol_error, engine_env, run_engine


def _seed(api):
    """Every kind of value, two labels, parallel relationships with properties, a vector."""
    a = api.create_record("PERSON", {"n": 1, "f": 0.1, "third": 1 / 3, "big": 1e300, "tiny": 5e-324,
                                     "neg": -2 ** 63, "arr": [1, 2.5], "empty": [], "b": True,
                                     "d": "2021-05-05T02:00:00+02:00", "day": "2020-02-02", "s": "x"})
    r = api.post("/api/v1/records", {"label": "PERSON", "properties": [
        {"name": "s", "type": "string", "value": "5"}, {"name": "tags", "type": "string", "value": "a,b", "valueSeparator": ","}],
        "vectors": [{"propertyName": "emb", "vector": [0.1, -2.5, 1e-9]}], "options": {"returnResult": True}})
    assert r.status_code == 201, r.text
    b = r.json()["data"]
    c = api.create_record("CITY", {"name": "Oslo", "n": "1"})
    ids = [a["__id"], b["__id"], c["__id"]]
    for target, props in ((ids[1], {"since": 2020}), (ids[2], {})):
        r = api.post(f"/api/v1/records/{ids[0]}/relationships", {"targetIds": target, "type": "KNOWS", "properties": props})
        assert r.status_code == 201, r.text
    r = api.post(f"/api/v1/records/{ids[2]}/relationships", {"targetIds": [ids[0], ids[1]], "type": "HOME_OF", "direction": "in"})
    assert r.status_code == 201, r.text
    # many records, so batches and row order matter
    r = api.post("/api/v1/records/import/json", {"label": "ITEM", "data": [{"i": i, "w": i * 0.5} for i in range(2500)]})
    assert r.status_code in (200, 201), r.text
    return ids


def _state(api):
    """Everything a client sees, in the engine's own orders."""
    default_order = api.search({"labels": ["ITEM"], "limit": 1000, "skip": 1200})["data"]
    rels = api.post("/api/v1/relationships/search", {"limit": 1000}).json()["data"]
    schema = api.protocol({"kind": "describe", "describe": {"kind": "schema"}}).json()["response"]
    return {
        "records": api.all_records(),
        "default_order": [r["__id"] for r in default_order],
        "labels": api.labels(),
        "properties": sorted(api.properties(), key=lambda p: p["id"]),
        "relationships": sorted(rels["data"], key=lambda r: r["id"]),
        "schema": schema,
    }


def _export(args, timeout=60):
    return subprocess.run([ENGINE_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=engine_env())


def test_export_restore_round_trip_is_exact(engine_factory, tmp_path):
    src = engine_factory.start()
    api = src.client()
    ids = _seed(api)
    before = _state(api)
    # a kill -9 right after the writes: the export reads what the redo log holds too
    src.kill9()
    snap = tmp_path / "snap.jsonl"
    p = _export(["export", str(snap), "--data-dir", str(src.data_dir)])
    assert p.returncode == 0, p.stderr
    assert "2503 record(s), 4 relationship(s), 1 vector(s)" in p.stderr
    lines = snap.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "graph-snapshot-v1" and header["multitenant"] is False
    assert json.loads(lines[-1])["kind"] == "end"
    assert not (tmp_path / "snap.jsonl.partial").exists()

    dst_dir = tmp_path / "restored"
    p = _export(["restore", str(snap), "--data-dir", str(dst_dir)])
    assert p.returncode == 0, p.stderr
    dst = engine_factory.start(data_dir=dst_dir)
    after = _state(dst.client())
    assert after == before
    rec = dst.client().record(ids[0])
    assert rec["f"] == 0.1 and rec["third"] == 1 / 3 and rec["tiny"] == 5e-324 and rec["neg"] == -2 ** 63
    assert rec["empty"] == [] and rec["__proptypes"]["empty"] == "string"
    assert dst.client().record(ids[1])["s"] == "5"
    # the restored store exports to the same snapshot (ids, order and values kept)
    dst.stop()
    again = _export(["--export", "-", "--data-dir", str(dst_dir)])
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == lines[1:]


def test_multitenant_snapshot_keeps_tenants_apart(engine_factory, tmp_path):
    e = engine_factory.start(extra_args=["--multitenant"])
    for tenant, n in (("acme", 3), ("beta co", 2)):
        h = {"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": tenant}
        for i in range(n):
            r = requests.post(f"{e.url}/api/v1/records", json={"label": "T", "data": {"i": i, "t": tenant}}, headers=h)
            assert r.status_code == 201, r.text
    # a tenant whose records were all deleted still exists, and comes back
    h = {"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": "emptied"}
    rid = requests.post(f"{e.url}/api/v1/records", json={"label": "T", "data": {"i": 0}}, headers=h).json()["data"]["id"]
    assert requests.delete(f"{e.url}/api/v1/records/{rid}", headers=h).status_code == 200
    h = {"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": "acme"}
    r = requests.post(f"{e.url}/protocol/v1/execute", headers=h, json={
        "protocolVersion": 1, "context": {"scope": "acme"},
        "operation": {"kind": "policy", "policy": {"kind": "set", "mode": "PolicyEnforced",
                                                   "policy": {"allowedLabels": ["T"], "maxResults": 2}}}})
    assert r.status_code == 200, r.text
    policy = requests.post(f"{e.url}/protocol/v1/execute", headers=h, json={
        "protocolVersion": 1, "context": {"scope": "acme"},
        "operation": {"kind": "policy", "policy": {"kind": "get"}}}).json()["response"]
    e.stop()
    snap = tmp_path / "mt.jsonl"
    p = _export(["export", str(snap), "--data-dir", str(e.data_dir)])
    assert p.returncode == 0, p.stderr
    assert json.loads(snap.read_text().splitlines()[0])["multitenant"] is True
    names = [json.loads(x)["name"] for x in snap.read_text().splitlines() if '"kind":"tenant"' in x]
    assert sorted(names) == ["acme", "beta co", "emptied"]
    dst_dir = tmp_path / "mt-restored"
    p = _export(["--restore", str(snap), "--data-dir", str(dst_dir)])
    assert p.returncode == 0, p.stderr
    # the restored directory is multitenant: a single-tenant start is refused
    refused = run_engine(["serve", "--data-dir", str(dst_dir), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
    assert refused.returncode != 0 and "multitenant" in refused.stderr
    d = engine_factory.start(data_dir=dst_dir, extra_args=["--multitenant"])
    for tenant, n in (("acme", 3), ("beta co", 2)):
        h = {"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": tenant}
        body = requests.post(f"{d.url}/api/v1/records/search", json={"orderBy": {"i": "asc"}}, headers=h).json()["data"]
        assert body["total"] == n and [r["i"] for r in body["data"]] == list(range(n))
        assert {r["t"] for r in body["data"]} == {tenant}
    h = {"Authorization": f"Bearer {DEV_TOKEN}", "X-Service-Tenant": "acme"}
    got = requests.post(f"{d.url}/protocol/v1/execute", headers=h, json={
        "protocolVersion": 1, "context": {"scope": "acme"},
        "operation": {"kind": "policy", "policy": {"kind": "get"}}}).json()["response"]
    assert got == policy
    d.stop()
    again = _export(["export", "-", "--data-dir", str(dst_dir)])
    assert again.stdout.splitlines()[1:] == snap.read_text().splitlines()[1:]


def test_backup_operation_is_the_tenants_snapshot(engine_factory, tmp_path):
    e = engine_factory.start()
    api = e.client()
    _seed(api)
    before = _state(api)
    r = api.protocol({"kind": "backup", "backup": {"kind": "snapshot"}})
    assert r.status_code == 200, r.text
    resp = r.json()["response"]
    assert resp["kind"] == "backup" and resp["format"] == "graph-snapshot-v1"
    snap = tmp_path / "backup.jsonl"
    snap.write_text(resp["content"])
    assert_protocol_error(api.protocol({"kind": "backup", "backup": {"kind": "full"}}), 400, "invalid_argument",
                          message_contains=["backup.kind"])
    e.stop()
    offline = _export(["export", "-", "--data-dir", str(e.data_dir)])
    assert offline.stdout.splitlines()[1:] == resp["content"].splitlines()[1:]
    dst_dir = tmp_path / "from-backup"
    p = _export(["restore", str(snap), "--data-dir", str(dst_dir)])
    assert p.returncode == 0, p.stderr
    assert _state(engine_factory.start(data_dir=dst_dir).client()) == before


def test_export_and_restore_refusals(engine_factory, tmp_path):
    e = engine_factory.start()
    e.client().create("A", {"x": 1})
    # a running server holds the directory
    p = _export(["export", str(tmp_path / "s.jsonl"), "--data-dir", str(e.data_dir)])
    assert p.returncode == 1 and "in use" in p.stderr, p.stderr
    assert not (tmp_path / "s.jsonl").exists()
    e.stop()
    # no store there
    p = _export(["export", str(tmp_path / "s.jsonl"), "--data-dir", str(tmp_path / "nothing")])
    assert p.returncode == 1 and "no store" in p.stderr
    assert not (tmp_path / "nothing").exists()
    p = _export(["export", str(tmp_path / "s.jsonl"), "--data-dir", str(e.data_dir)])
    assert p.returncode == 0, p.stderr
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    # restore into a directory that holds something
    p = _export(["restore", str(tmp_path / "s.jsonl"), "--data-dir", str(e.data_dir)])
    assert p.returncode == 1 and "not empty" in p.stderr
    # flags: both, or with a command
    assert _export(["--export", "a", "--restore", "b"]).returncode == 2
    assert _export(["--export", "a", "version"]).returncode == 2

    def refused(text, *needles):
        f = tmp_path / "bad.jsonl"
        f.write_text(text)
        d = tmp_path / "bad-restore"
        p = _export(["restore", str(f), "--data-dir", str(d)])
        assert p.returncode == 1, p.stderr
        for n in needles:
            assert n in p.stderr, p.stderr
        assert not d.exists(), "a failed restore leaves no directory behind"
        assert not (tmp_path / "bad-restore.restoring").exists()

    body = "\n".join(lines) + "\n"
    refused("\n".join(lines[:-1]) + "\n", "without its end line")              # truncated
    refused(body.replace("graph-snapshot-v1", "graph-snapshot-v9"), "graph-snapshot-v9")
    refused("", "empty")
    bad_type = [json.loads(x) for x in lines]
    rec = next(x for x in bad_type if x.get("kind") == "record")
    rec["propertyTypes"]["x"] = "number"
    rec["properties"]["x"] = "one"
    refused("\n".join(json.dumps(x) for x in bad_type) + "\n", "line", "properties.x", "number")
    refused(body.replace('"kind":"end","tenants":1,"records":1', '"kind":"end","tenants":1,"records":2'), "end line counts")
    refused(body + json.dumps({"kind": "tenant", "name": None}) + "\n", "after the end line")


def test_restore_is_placed_whole_and_clears_an_interrupted_one(engine_factory, tmp_path):
    """The store is built beside the target and moved into place at the end: a leftover of a
    killed restore is removed by the next one, and an existing empty directory is taken."""
    e = engine_factory.start()
    e.client().create("A", {"x": 1})
    e.stop()
    snap = tmp_path / "s.jsonl"
    assert _export(["export", str(snap), "--data-dir", str(e.data_dir)]).returncode == 0
    target = tmp_path / "new"
    target.mkdir()
    leftover = tmp_path / "new.restoring"
    leftover.mkdir()
    (leftover / "engine.redb").write_bytes(b"half a store")
    p = _export(["restore", str(snap), "--data-dir", str(target)])
    assert p.returncode == 0, p.stderr
    assert "interrupted restore" in p.stderr
    assert not leftover.exists() and (target / "engine.redb").exists()
    assert engine_factory.start(data_dir=target).client().labels() == {"A": 1}


def test_backup_over_its_cap_is_413(engine_factory):
    e = engine_factory.start()
    api = e.client()
    # inline vectors (not indexed): 65,536 floats of ~19 characters each, ~1.25 MB a record
    vector = [0.1234567890123456 + i * 1e-9 for i in range(65536)]
    for i in range(56):
        r = api.post("/api/v1/records", {"label": "BIG", "data": {"i": i},
                                         "vectors": [{"propertyName": "emb", "vector": vector}]})
        assert r.status_code == 201, r.text
    r = api.protocol({"kind": "backup", "backup": {"kind": "snapshot"}})
    assert_protocol_error(r, 413, "payload_too_large", message_contains=["engine export"])


def test_restore_checks_lines_and_targets(engine_factory, tmp_path):
    import fcntl
    e = engine_factory.start()
    e.client().create("A", {"x": 1})
    e.stop()
    snap = tmp_path / "s.jsonl"
    assert _export(["export", str(snap), "--data-dir", str(e.data_dir)]).returncode == 0
    lines = snap.read_text().splitlines()
    # blank lines (a trailing one included) are skipped
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n\n")
    p = _export(["restore", str(blank), "--data-dir", str(tmp_path / "b")])
    assert p.returncode == 0, p.stderr
    # a policy the engine could not read back is refused at its line
    bad = [lines[0], lines[1], json.dumps({"kind": "policy", "policy": {"garbage": 1}}), *lines[2:]]
    (tmp_path / "p.jsonl").write_text("\n".join(bad) + "\n")
    p = _export(["restore", str(tmp_path / "p.jsonl"), "--data-dir", str(tmp_path / "p")])
    assert p.returncode == 1 and "line 3" in p.stderr and "policy" in p.stderr, p.stderr
    # a write the store refuses names the lines of its batch (a record id twice)
    rec = next(x for x in lines if '"kind":"record"' in x)
    dup = [*lines[:-1], rec, lines[-1].replace('"records":1', '"records":2')]
    (tmp_path / "d.jsonl").write_text("\n".join(dup) + "\n")
    p = _export(["restore", str(tmp_path / "d.jsonl"), "--data-dir", str(tmp_path / "d")])
    assert p.returncode == 1 and "lines " in p.stderr and "already exists" in p.stderr, p.stderr
    assert not (tmp_path / "d").exists()
    # tampered lines: refused at their line, nothing left behind
    objs = [json.loads(x) for x in lines]
    rec_obj = next(o for o in objs if o.get("kind") == "record")
    prop_obj = next(o for o in objs if o.get("kind") == "property")
    rid = rec_obj["id"]
    rel = {"kind": "relationship", "id": "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e6f", "type": "T", "source": rid,
           "target": rid, "properties": {}, "propertyTypes": {}}

    def with_lines(extra_after_records, end_changes, needle, name, after_tenant=()):
        body = [o for o in objs if o.get("kind") != "end"] + extra_after_records
        body = body[:2] + list(after_tenant) + body[2:]  # header, tenant line, then these
        end = dict(objs[-1], **end_changes)
        f = tmp_path / f"{name}.jsonl"
        f.write_text("\n".join(json.dumps(o) for o in body + [end]) + "\n")
        p = _export(["restore", str(f), "--data-dir", str(tmp_path / name)])
        assert p.returncode == 1 and needle in p.stderr, (name, p.stderr)
        assert not (tmp_path / name).exists() and not (tmp_path / f"{name}.restoring").exists()

    with_lines([rel, rel], {"relationships": 2}, "appears twice", "duprel")
    with_lines([rel, rec_obj | {"id": "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e60"}], {"relationships": 1, "records": 2},
               "out of order", "order")
    with_lines([{"kind": "tenant", "name": None}], {"tenants": 2}, "tenant appears twice", "duptenant")
    with_lines([], {}, "unknown variant", "policy1", after_tenant=[{"kind": "policy", "policy": {"mode": "Bogus"}}])
    stored_form = {"mode": "PolicyEnforced", "allowedLabels": None, "deniedRelationshipTypes": [],
                   "visibleProperties": {}, "maxResults": 5}
    with_lines([], {}, "maxResults", "policy0",
               after_tenant=[{"kind": "policy", "policy": dict(stored_form, maxResults=0)}])
    with_lines([], {}, "out of order", "policy2", after_tenant=[{"kind": "policy", "policy": stored_form}] * 2)
    for i, bad_policy in enumerate(({"mode": "PolicyEnforced", "maxResults": 5, "bogus": 1},
                                    {"mode": "PolicyEnforced", "max_results": 3},
                                    ["PolicyEnforced", ["A"], [], {}, 1],
                                    dict(stored_form, allowedLabels=[""]))):
        needle = "label or relationship type is empty" if i == 3 else "not a data-access policy"
        with_lines([], {}, needle, f"policy3-{i}", after_tenant=[{"kind": "policy", "policy": bad_policy}])
    # a policy naming a label longer than new labels may be (the store may hold one) is kept
    long_label = dict(stored_form, allowedLabels=["L" * 1500])
    body = [*lines[:2], json.dumps({"kind": "policy", "policy": long_label}), *lines[2:]]
    (tmp_path / "longpolicy.jsonl").write_text("\n".join(body) + "\n")
    p = _export(["restore", str(tmp_path / "longpolicy.jsonl"), "--data-dir", str(tmp_path / "longpolicy")])
    assert p.returncode == 0, p.stderr
    with_lines([], {"properties": 2}, "line 3: property 0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e61 (ghost string) is declared", "unheld",
               after_tenant=[{"kind": "property", "id": "0190d5c2-8e3a-7b4c-9d2e-1a2b3c4d5e61", "name": "ghost", "type": "string"}])
    typed = [dict(o, propertyTypes=dict(o["propertyTypes"], extra="string")) if o is rec_obj else o for o in objs]
    (tmp_path / "typed.jsonl").write_text("\n".join(json.dumps(o) for o in typed) + "\n")
    p = _export(["restore", str(tmp_path / "typed.jsonl"), "--data-dir", str(tmp_path / "typed")])
    assert p.returncode == 1 and "propertyTypes.extra" in p.stderr, p.stderr
    # names a store may hold from before the limits on new names are kept
    long = "p" * 1500
    renamed = [dict(o, name=long) if o is prop_obj else o for o in objs]
    renamed = [dict(o, properties={long: o["properties"]["x"]}, propertyTypes={long: "number"}) if o is rec_obj else o
               for o in renamed]
    (tmp_path / "long.jsonl").write_text("\n".join(json.dumps(o) for o in renamed) + "\n")
    p = _export(["restore", str(tmp_path / "long.jsonl"), "--data-dir", str(tmp_path / "long")])
    assert p.returncode == 0, p.stderr
    # a file where the directory should be is refused before anything is read
    (tmp_path / "afile").write_text("x")
    p = _export(["restore", str(snap), "--data-dir", str(tmp_path / "afile")])
    assert p.returncode == 1 and "not a directory" in p.stderr
    # another restore beside it holds the parent directory's lock
    import os
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = _export(["restore", str(snap), "--data-dir", str(tmp_path / "held")])
        assert p.returncode == 1 and "another restore" in p.stderr, p.stderr
    finally:
        os.close(fd)
    p = _export(["restore", str(snap), "--data-dir", str(tmp_path / "held")])
    assert p.returncode == 0, p.stderr
    # a missing parent is created
    p = _export(["restore", str(snap), "--data-dir", str(tmp_path / "new" / "parent" / "data")])
    assert p.returncode == 0, p.stderr
    # a symbolic link as the target is refused before anything is read
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    p = _export(["restore", str(snap), "--data-dir", str(tmp_path / "link")])
    assert p.returncode == 1 and "symbolic link" in p.stderr
