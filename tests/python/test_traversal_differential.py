"""Traversal differential test: a random graph and random where trees with related-label
blocks ($relation type / direction / hops, nesting, $and / $or / $not), answered by the
engine and by a reference evaluator written here from BEHAVIOUR.md §2 and docs/search.md:

    a record r satisfies a block when some record t != r with the block's label that
    satisfies the block's where tree lies at distance d (fewest relationships, each of an
    allowed type, each in the allowed direction) with min <= d <= max.

Both plans of the engine (from the related side and from each record's side) are exercised:
the trees vary in how selective each side is.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

import pytest

LABELS = ["A", "B", "C"]
TYPES = ["T1", "T2"]
WORDS = ["red", "green", "blue"]
SEED = 20261122
TREES = 250


def neighbours(edges, node, direction, types):
    for s, t, ty in edges:
        if types and ty not in types:
            continue
        if direction in (None, "out") and s == node:
            yield t
        if direction in (None, "in") and t == node:
            yield s


def targets(edges, root, rel):
    lo, hi = rel["hops"]
    seen, frontier, out = {root}, [root], []
    for depth in range(1, hi + 1):
        nxt = []
        for n in frontier:
            for o in neighbours(edges, n, rel["direction"], rel["types"]):
                if o not in seen:
                    seen.add(o)
                    nxt.append(o)
        if depth >= lo:
            out.extend(nxt)
        frontier = nxt
    return out


def evaluate(tree: Dict[str, Any], rid: str, recs, edges) -> bool:
    for key, value in tree.items():
        if key == "$and":
            ok = all(evaluate(t, rid, recs, edges) for t in value)
        elif key == "$or":
            ok = any(evaluate(t, rid, recs, edges) for t in value)
        elif key == "$not":
            ok = not evaluate(value, rid, recs, edges)
        elif key in LABELS:
            inner = {k: v for k, v in value.items() if k != "$relation"}
            rel = {"types": [], "direction": None, "hops": (1, 1)}
            spec = value.get("$relation")
            if isinstance(spec, str):
                rel["types"] = [spec]
            elif isinstance(spec, dict):
                rel["types"] = [spec["type"]] if "type" in spec else []
                rel["direction"] = spec.get("direction")
                h = spec.get("hops", 1)
                rel["hops"] = (h, h) if isinstance(h, int) else (h.get("min", 1), h.get("max", 10))
            ok = any(recs[t]["label"] == key and evaluate(inner, t, recs, edges)
                     for t in targets(edges, rid, rel))
        elif key == "v":
            have = recs[rid]["v"]
            ok = have > value["$gt"] if isinstance(value, dict) else have == value
        elif key == "w":
            ok = recs[rid]["w"] == value
        else:
            raise AssertionError(key)
        if not ok:
            return False
    return True


def random_relation(rng):
    pick = rng.random()
    if pick < 0.3:
        return None
    if pick < 0.45:
        return rng.choice(TYPES)
    spec: Dict[str, Any] = {}
    if rng.random() < 0.5:
        spec["type"] = rng.choice(TYPES)
    if rng.random() < 0.6:
        spec["direction"] = rng.choice(["in", "out"])
    r = rng.random()
    if r < 0.3:
        spec["hops"] = rng.randint(1, 3)
    elif r < 0.5:
        lo = rng.randint(1, 2)
        spec["hops"] = {"min": lo, "max": lo + rng.randint(0, 2)}
    return spec


def random_tree(rng, depth):
    parts: Dict[str, Any] = {}
    for _ in range(rng.randint(1, 2)):
        r = rng.random()
        if r < 0.3:
            parts["v"] = {"$gt": rng.randint(0, 9)} if rng.random() < 0.6 else rng.randint(0, 9)
        elif r < 0.4:
            parts["w"] = rng.choice(WORDS)
        elif r < 0.8 and depth < 2:
            block = random_tree(rng, depth + 1) if rng.random() < 0.7 else {}
            rel = random_relation(rng)
            if rel is not None:
                block["$relation"] = rel
            parts[rng.choice(LABELS)] = block
        elif depth < 2:
            op = rng.choice(["$and", "$or", "$not"])
            if op == "$not":
                parts[op] = random_tree(rng, depth + 1)
            else:
                parts[op] = [random_tree(rng, depth + 1) for _ in range(2)]
    return parts


@pytest.fixture(scope="module")
def graph(module_api):
    rng = random.Random(SEED)
    recs: Dict[str, Dict[str, Any]] = {}
    ids: List[str] = []
    for i in range(45):
        label = LABELS[i % 3]
        doc = {"v": rng.randint(0, 9), "w": rng.choice(WORDS)}
        rid = module_api.create(label, doc)
        recs[rid] = {"label": label, **doc}
        ids.append(rid)
    edges: List[Tuple[str, str, str]] = []
    seen = set()
    while len(edges) < 80:
        s, t, ty = rng.choice(ids), rng.choice(ids), rng.choice(TYPES)
        if (s, t, ty) in seen:
            continue
        seen.add((s, t, ty))
        r = module_api.post(f"/api/v1/relationships/{s}", {"targetIds": t, "type": ty})
        assert r.status_code == 201, r.text
        edges.append((s, t, ty))
    return recs, edges


def check_random_tree(api, rng, recs, edges, what: str):
    """Draws a random tree and label scope, asks the engine, and checks its records and total
    against the reference; returns the expected ids."""
    tree = random_tree(rng, 0)
    labels = [] if rng.random() < 0.5 else [rng.choice(LABELS)]
    expected = {rid for rid, rec in recs.items()
                if (not labels or rec["label"] in labels) and evaluate(tree, rid, recs, edges)}
    r = api.protocol({"kind": "query", "query": {"kind": "records", "query": {
        "labels": labels, "predicate": tree, "limit": 1000}}})
    assert r.status_code == 200, f"{what}: {tree} -> {r.text}"
    body = r.json()["response"]
    got = {rec["id"] for rec in body["records"]}
    assert got == expected, (f"{what}: labels={labels} where={tree}\n"
                             f"missing={expected - got}\nextra={got - expected}")
    assert body["total"] == len(expected)
    return expected


def test_traversal_matches_reference(module_api, graph):
    recs, edges = graph
    rng = random.Random(SEED + 1)
    nonempty = 0
    for n in range(TREES):
        expected = check_random_tree(module_api, rng, recs, edges, f"tree {n}")
        nonempty += bool(expected) and len(expected) < len(recs)
    # The trees must discriminate: most answers are neither empty nor everything.
    assert nonempty > TREES // 4


def memo_hits(api) -> int:
    for line in api.metrics().splitlines():
        if line.startswith("engine_key_memo_hits_total "):
            return int(line.split()[1])
    raise AssertionError("engine_key_memo_hits_total missing from /metrics")


def test_traversal_follows_writes(module_api, graph):
    """After the trees above (which fill the engine's key memo of adjacency and index runs),
    the graph changes one write at a time: relationships attached and detached, property
    values changed (index entries move), records relabelled and deleted. After each write,
    random trees are answered again and must match the reference on the changed graph: a
    remembered run is never used once a write has touched it."""
    recs, edges = graph
    recs = {k: dict(v) for k, v in recs.items()}
    edges = list(edges)
    rng = random.Random(SEED + 2)
    hits_before = memo_hits(module_api)
    for step in range(60):
        ids = list(recs)
        kind = rng.choice(["attach", "detach", "value", "relabel", "delete"] if step % 10 == 9
                          else ["attach", "detach", "value", "value"])
        if kind == "attach":
            s, t, ty = rng.choice(ids), rng.choice(ids), rng.choice(TYPES)
            if (s, t, ty) not in edges:
                r = module_api.post(f"/api/v1/relationships/{s}", {"targetIds": t, "type": ty})
                assert r.status_code == 201, r.text
                edges.append((s, t, ty))
        elif kind == "detach" and edges:
            s, t, ty = rng.choice(edges)
            r = module_api.put(f"/api/v1/records/{s}/relationships",
                               {"targetIds": t, "typeOrTypes": ty, "direction": "out"})
            assert r.status_code == 200, r.text
            edges = [e for e in edges if e != (s, t, ty)]
        elif kind == "value":
            rid = rng.choice(ids)
            doc = {"v": rng.randint(0, 9), "w": rng.choice(WORDS)}
            r = module_api.patch(f"/api/v1/records/{rid}", {"data": doc})
            assert r.status_code in (200, 201), r.text
            recs[rid].update(doc)
        elif kind == "relabel":
            rid = rng.choice(ids)
            label = rng.choice(LABELS)
            r = module_api.patch(f"/api/v1/records/{rid}", {"label": label})
            assert r.status_code in (200, 201), r.text
            recs[rid]["label"] = label
        elif kind == "delete" and len(recs) > 30:
            rid = rng.choice(ids)
            assert module_api.delete(f"/api/v1/records/{rid}").status_code == 200
            del recs[rid]
            edges = [e for e in edges if rid not in (e[0], e[1])]
        for n in range(4):
            check_random_tree(module_api, rng, recs, edges, f"step {step} ({kind}), tree {n}")
    # The trees were answered through the memo, not around it.
    assert memo_hits(module_api) > hits_before
