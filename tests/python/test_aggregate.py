"""Aggregation and grouping (BEHAVIOUR.md §2), in the `aggregate` form and the `select`
form, over REST `/records/search`, `/query/records/find` and Protocol v1 (`rows`).

Every expected value is worked out by hand from the small datasets below.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from conftest import assert_rest_error, unique
from search_helpers import FIND, SEARCH, positions, protocol_records, rest_find, seed

# UTC instants of `released`:
#   0: 2024-01-01T10:00Z (Mon)    1: 2024-01-07T23:59:59Z (Sun)   2: 2024-01-08T00:00Z (Mon)
#   3: 2024-03-31T22:00Z (Sun)    4: 2024-01-01T04:00Z (Mon)      5: 2025-06-15T00:00Z (Sun)
#   6: 2024-02-29T12:00Z (Thu)
MOVIES = [
    {"title": "A", "genre": "drama", "rating": 8, "released": "2024-01-01T10:00:00Z", "tags": ["x", "y"]},
    {"title": "B", "genre": "drama", "rating": 6, "released": "2024-01-07T23:59:59Z", "tags": ["y"]},
    {"title": "C", "genre": "comedy", "rating": 7.5, "released": "2024-01-08T00:00:00Z", "tags": ["x"]},
    {"title": "D", "genre": "comedy", "rating": 5, "released": "2024-04-01T00:00:00+02:00", "tags": ["z", "x"]},
    {"title": "E", "genre": "horror", "released": "2023-12-31T23:00:00-05:00"},
    {"title": "F", "rating": 9, "released": "2025-06-15", "tags": ["y"]},
    {"title": "A", "genre": "drama", "rating": 7, "released": "2024-02-29T12:00:00Z"},
]
RATING = {0: 8, 1: 6, 2: 7.5, 3: 5, 5: 9, 6: 7}
WITH_GENRE = {"genre": {"$exists": True}}


@pytest.fixture(scope="module")
def movies(module_api):
    label = unique("MOVIE")
    return label, seed(module_api, label, MOVIES)


def rows_of(api, body, path=SEARCH):
    return rest_find(api, body, path)


def by(rows, key):
    out = {}
    for r in rows:
        assert r[key] not in out, f"two rows for {key}={r[key]!r}: {rows}"
        out[r[key]] = r
    return out


def utc(text):
    """The instant of an ISO-8601 UTC string (checking that it is UTC)."""
    assert isinstance(text, str), text
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert t.utcoffset() is not None and t.utcoffset().total_seconds() == 0, text
    return t


def ms(text):
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


# ---------------------------------------------------------------------------------------
# grouped: count, sum, avg, min, max, collect
# ---------------------------------------------------------------------------------------

AGG_FORM = {
    "count": {"fn": "count", "alias": "$record"},
    "total": {"fn": "sum", "field": "rating", "alias": "$record"},
    "avg": {"fn": "avg", "field": "rating", "alias": "$record"},
    "lo": {"fn": "min", "field": "rating", "alias": "$record"},
    "hi": {"fn": "max", "field": "rating", "alias": "$record"},
    "titles": {"fn": "collect", "field": "title", "alias": "$record"},
}
SELECT_FORM = {
    "count": {"$count": "*"},
    "total": {"$sum": "$record.rating"},
    "avg": {"$avg": "$record.rating"},
    "lo": {"$min": "$record.rating"},
    "hi": {"$max": "$record.rating"},
    "titles": {"$collect": "$record.title"},
}


@pytest.mark.parametrize("form", ["aggregate", "select"])
@pytest.mark.parametrize("path", [SEARCH, FIND])
def test_group_by_genre(module_api, movies, form, path):
    label, _ = movies
    spec = AGG_FORM if form == "aggregate" else SELECT_FORM
    out = rows_of(module_api, {"labels": [label], "where": WITH_GENRE, form: spec,
                               "groupBy": ["$record.genre"]}, path)
    rows = by(out["data"], "genre")
    assert set(rows) == {"drama", "comedy", "horror"}
    for r in rows.values():
        # the bare dimension name and the computed keys, nothing else
        assert set(r) == {"genre", "count", "total", "avg", "lo", "hi", "titles"}, r
    d, c, h = rows["drama"], rows["comedy"], rows["horror"]
    assert (d["count"], d["total"], d["avg"], d["lo"], d["hi"]) == (3, 21, 7, 6, 8)
    assert sorted(d["titles"]) == ["A", "B"]  # unique by default
    assert (c["count"], c["total"], c["avg"], c["lo"], c["hi"]) == (2, 12.5, 6.25, 5, 7.5)
    assert sorted(c["titles"]) == ["C", "D"]
    # an empty group: sum 0, min/max null
    assert (h["count"], h["total"], h["lo"], h["hi"]) == (1, 0, None, None)
    assert h["titles"] == ["E"]
    for r in rows.values():
        assert type(r["count"]) is int


def test_group_by_over_protocol(module_api, movies):
    label, _ = movies
    resp = protocol_records(module_api, {"labels": [label], "predicate": WITH_GENRE,
                                         "select": {"n": {"$count": "*"}, "s": {"$sum": "$record.rating"}},
                                         "groupBy": ["$record.genre"]})
    assert resp["kind"] == "rows"
    rows = by(resp["rows"], "genre")
    assert {g: (r["n"], r["s"]) for g, r in rows.items()} == {"drama": (3, 21), "comedy": (2, 12.5), "horror": (1, 0)}
    resp = protocol_records(module_api, {"labels": [label], "predicate": WITH_GENRE,
                                         "aggregate": {"n": {"fn": "count"}}, "groupBy": ["$record.genre"]})
    assert resp["kind"] == "rows"
    assert {r["genre"]: r["n"] for r in resp["rows"]} == {"drama": 3, "comedy": 2, "horror": 1}


def test_group_by_respects_where_and_labels(module_api, movies):
    label, _ = movies
    other = unique("OTHERMOVIE")
    seed(module_api, other, [{"genre": "drama", "rating": 100}])
    out = rows_of(module_api, {"labels": [label], "where": {"rating": {"$gte": 7}},
                               "aggregate": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "rating"}},
                               "groupBy": ["$record.genre"]})
    rows = {r["genre"]: (r["n"], r["s"]) for r in out["data"]}
    # rating >= 7: A (drama 8), C (comedy 7.5), F (no genre, 9), A (drama 7)
    assert rows["drama"] == (2, 15) and rows["comedy"] == (1, 7.5)
    assert "horror" not in rows
    out = rows_of(module_api, {"labels": [label], "where": {"rating": 999},
                               "aggregate": {"n": {"fn": "count"}}, "groupBy": ["$record.genre"]})
    assert out["data"] == []


@pytest.mark.parametrize("form", ["aggregate", "select"])
def test_group_by_with_where_on_fields_the_aggregation_does_not_read(module_api, movies, form):
    """The where filter applies in full, also to fields that are neither a dimension nor an
    aggregate input."""
    label, _ = movies
    spec = {"n": {"fn": "count"}} if form == "aggregate" else {"n": {"$count": "*"}}
    out = rows_of(module_api, {"labels": [label], "where": {"title": {"$in": ["A", "C", "E"]}},
                               form: spec, "groupBy": ["$record.genre"]})
    # A (drama, twice), C (comedy), E (horror)
    assert {r["genre"]: r["n"] for r in out["data"]} == {"drama": 2, "comedy": 1, "horror": 1}
    tb = ({"m": {"fn": "timeBucket", "field": "released", "granularity": "month"}, "n": {"fn": "count"}}
          if form == "aggregate" else
          {"m": {"$timeBucket": {"field": "$record.released", "granularity": "month"}}, "n": {"$count": "*"}})
    out = rows_of(module_api, {"labels": [label], "where": {"genre": "comedy", "tags": "x"}, form: tb,
                               "groupBy": ["m"], "orderBy": {"m": "asc"}})
    # comedy with tag x: C (2024-01-08), D (2024-03-31T22Z)
    assert [r["n"] for r in out["data"]] == [1, 1]
    starts = [utc(r["m"]) if form == "aggregate" else r["m"] for r in out["data"]]
    if form == "aggregate":
        assert starts == [datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2024, 3, 1, tzinfo=timezone.utc)]
    else:
        assert starts == [ms("2024-01-01T00:00:00"), ms("2024-03-01T00:00:00")]


def test_avg_precision(module_api):
    label = unique("PREC")
    seed(module_api, label, [{"g": "a", "v": 1}, {"g": "a", "v": 2}, {"g": "a", "v": 2},
                             {"g": "b", "v": 10}, {"g": "b", "v": 20},
                             {"g": "c", "v": 0.1}, {"g": "c", "v": 0.2}])

    def avgs(**opts):
        out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.g"],
                                   "aggregate": {"m": {"fn": "avg", "field": "v", **opts}}})
        return {r["g"]: r["m"] for r in out["data"]}

    raw = avgs()
    assert raw["a"] == pytest.approx(5 / 3) and raw["b"] == 15 and raw["c"] == pytest.approx(0.15)
    assert avgs(precision=2) == {"a": 1.67, "b": 15, "c": 0.15}
    assert avgs(precision=0) == {"a": 2, "b": 15, "c": 0}
    assert avgs(precision=4)["a"] == 1.6667
    out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.g"],
                               "select": {"m": {"$avg": {"field": "$record.v", "precision": 1}}}})
    assert {r["g"]: r["m"] for r in out["data"]} == {"a": 1.7, "b": 15, "c": 0.2}


def test_sums_and_averages_at_the_ends_of_the_float_range(module_api):
    """A sum beyond the float range has no JSON number: refused naming the output, never a
    silent null. The average of the same values is answered, and a precision too fine for
    a large value leaves it as it is."""
    label = unique("HUGE")
    seed(module_api, label, [{"g": "a", "v": 1e308}, {"g": "a", "v": 1.5e308}, {"g": "b", "v": 1e308}])

    def rows(aggregate):
        return rows_of(module_api, {"labels": [label], "groupBy": ["$record.g"], "aggregate": aggregate})

    out = {r["g"]: r for r in rows({"m": {"fn": "avg", "field": "v"}, "p": {"fn": "avg", "field": "v", "precision": 15}})["data"]}
    assert out["a"]["m"] == pytest.approx(1.25e308) and out["a"]["p"] == pytest.approx(1.25e308)
    assert out["b"]["m"] == 1e308 and out["b"]["p"] == 1e308
    r = module_api.post(SEARCH, {"labels": [label], "groupBy": ["$record.g"], "aggregate": {"total": {"fn": "sum", "field": "v"}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["total", "float range"])
    # past the range on the way, back inside at the end: answered, whatever the order
    back = unique("BACK")
    seed(module_api, back, [{"g": "a", "v": 1e308}, {"g": "a", "v": 1e308}, {"g": "a", "v": -1e308}])
    out = rows_of(module_api, {"labels": [back], "groupBy": ["$record.g"], "aggregate": {"s": {"fn": "sum", "field": "v"}}})
    assert out["data"][0]["s"] == 1e308
    # within the range a large sum is answered
    out = rows_of(module_api, {"labels": [label], "where": {"g": "b"}, "groupBy": ["$record.g"],
                               "aggregate": {"total": {"fn": "sum", "field": "v"}}})
    assert out["data"][0]["total"] == 1e308


def test_time_buckets_outside_four_digit_years_are_iso_8601(module_api):
    label = unique("FAR")
    seed(module_api, label, [{"d": "0000-01-01T00:00:00+01:00"}, {"d": "9999-12-31T23:59:59-23:00"}])
    seed(module_api, label, [{"d": "2020-05-05"}])
    out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.t"],
                               "aggregate": {"t": {"fn": "timeBucket", "field": "d", "granularity": "day"}, "n": {"fn": "count"}}})
    # grouped rows come in time order (as texts, "+10000" would sort first)
    assert [r["t"] for r in out["data"]] == ["-0001-12-31T00:00:00Z", "2020-05-05T00:00:00Z", "+10000-01-01T00:00:00Z"]
    # a string property whose values merely look like such texts groups in text order
    odd = unique("ODD")
    values = ["2020-01-01T00:00:00Z", "+10000-01-01T00:00:00Z", "1", "-0001x", "02024-01-01Tx", "zz"] * 3
    seed(module_api, odd, [{"s": v} for v in values])
    out = rows_of(module_api, {"labels": [odd], "groupBy": ["$record.s"], "aggregate": {"n": {"fn": "count"}}})
    assert [r["s"] for r in out["data"]] == sorted(set(values)) and all(r["n"] == 3 for r in out["data"])


def test_min_max_datetimes_by_instant(module_api):
    label = unique("EVT")
    seed(module_api, label, [{"g": "a", "at": "2024-01-01T03:00:00Z"},
                             {"g": "a", "at": "2023-12-31T23:00:00-05:00"},    # 04:00Z, latest
                             {"g": "a", "at": "2024-01-01T03:30:00+01:00"}])   # 02:30Z, earliest
    out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.g"],
                               "aggregate": {"lo": {"fn": "min", "field": "at"}, "hi": {"fn": "max", "field": "at"}}})
    [row] = out["data"]
    assert utc_instant(row["lo"]) == datetime(2024, 1, 1, 2, 30, tzinfo=timezone.utc)
    assert utc_instant(row["hi"]) == datetime(2024, 1, 1, 4, 0, tzinfo=timezone.utc)


def utc_instant(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def test_collect_options(module_api, movies):
    label, _ = movies

    def collect(form, **opts):
        if form == "aggregate":
            spec = {"aggregate": {"c": {"fn": "collect", "field": opts.pop("field", "title"), **opts}}}
        else:
            spec = {"select": {"c": {"$collect": {"field": "$record." + opts.pop("field", "title"), **opts}}}}
        out = rows_of(module_api, {"labels": [label], "where": {"genre": "drama"}, "groupBy": ["$record.genre"], **spec})
        [row] = out["data"]
        return row["c"]

    for form in ("aggregate", "select"):
        assert sorted(collect(form)) == ["A", "B"]
        assert sorted(collect(form, unique=True)) == ["A", "B"]
        assert sorted(collect(form, unique=False)) == ["A", "A", "B"]
        assert collect(form, orderBy="asc") == ["A", "B"]
        assert collect(form, orderBy="desc") == ["B", "A"]
        assert collect(form, orderBy="asc", unique=False) == ["A", "A", "B"]
        assert collect(form, orderBy="desc", unique=False) == ["B", "A", "A"]
        assert collect(form, orderBy="asc", limit=1) == ["A"]
        assert collect(form, orderBy="asc", skip=1) == ["B"]
        assert collect(form, orderBy="asc", unique=False, skip=1, limit=1) == ["A"]
        assert collect(form, field="rating", orderBy="desc") == [8, 7, 6]
        assert collect(form, field="rating", orderBy="asc", limit=2) == [6, 7]
        # the general form names the collected field
        assert collect(form, field="rating", orderBy={"rating": "desc"}) == [8, 7, 6]
        assert collect(form, orderBy={"$record.title": "asc"}) == ["A", "B"]


def test_collect_of_records_is_ordered_by_a_property_or_by_id(module_api, movies):
    """`orderBy` of a `collect` of records: `{property: direction}` orders them by that
    property (missing last), "asc" / "desc" by id; it had been ignored."""
    label, ids = movies
    drama = [0, 1, 6]   # ratings 8, 6, 7

    def collect(order, **more):
        body = {"labels": [label], "where": {"genre": "drama"}, "groupBy": ["$record.genre"],
                "aggregate": {"c": {"fn": "collect", "alias": "$record", "orderBy": order, **more}}}
        [row] = rows_of(module_api, body)["data"]
        return [r["__id"] for r in row["c"]]

    assert collect({"rating": "asc"}) == [ids[1], ids[6], ids[0]]
    assert collect({"rating": "desc"}, limit=2) == [ids[0], ids[6]]
    assert collect("asc") == sorted(ids[i] for i in drama)
    assert collect("desc") == sorted((ids[i] for i in drama), reverse=True)
    every = {"labels": [label], "aggregate": {"c": {"fn": "collect", "alias": "$record", "orderBy": {"genre": "asc"}}},
             "groupBy": ["$record.title"], "where": {"title": "F"}}
    [row] = rows_of(module_api, every)["data"]
    assert [r["title"] for r in row["c"]] == ["F"]   # no genre: still collected
    r = module_api.post(SEARCH, {"labels": [label], "groupBy": ["$record.genre"], "aggregate": {
        "c": {"fn": "collect", "field": "title", "alias": "$record", "orderBy": {"rating": "asc"}}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["aggregate.c.orderBy.rating"])


def test_grouped_rows_take_a_list_of_order_keys_and_refuse_unknown_ones(module_api, movies):
    """`orderBy` as a list of objects (SPEC.md SearchDto) orders grouped rows by several
    outputs; a name that is no output of the grouping is a 400 (it was ignored, and the rows
    lost their default order)."""
    label, _ = movies
    base = {"labels": [label], "where": WITH_GENRE, "groupBy": ["$record.genre"],
            "aggregate": {"n": {"fn": "count", "alias": "$record"}}}
    rows = rows_of(module_api, {**base, "orderBy": [{"n": "desc"}, {"genre": "asc"}]})["data"]
    assert [(r["genre"], r["n"]) for r in rows] == [("drama", 3), ("comedy", 2), ("horror", 1)]
    rows = rows_of(module_api, {**base, "orderBy": [{"n": "asc"}, {"genre": "desc"}]})["data"]
    assert [(r["genre"], r["n"]) for r in rows] == [("horror", 1), ("comedy", 2), ("drama", 3)]
    # directions in any case and dimensions by their groupBy spelling, as for records
    rows = rows_of(module_api, {**base, "orderBy": [{"n": "DESC"}, {"$record.genre": "Asc"}]})["data"]
    assert [(r["genre"], r["n"]) for r in rows] == [("drama", 3), ("comedy", 2), ("horror", 1)]
    r = module_api.post(SEARCH, {**base, "orderBy": {"zzz": "desc"}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["orderBy.zzz", "genre", "n"])
    r = module_api.post(SEARCH, {**base, "orderBy": [{"n": "desc"}, 3]})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["orderBy[1]"])


@pytest.mark.parametrize("form", ["aggregate", "select"])
def test_collect_without_a_field_collects_the_records(module_api, movies, form):
    """`field` is optional (SPEC.md Aggregation): `collect` of `$record` gathers each group's
    records, whole (not only the fields the grouping reads)."""
    label, _ = movies
    spec = ({"aggregate": {"c": {"fn": "collect", "alias": "$record"}}} if form == "aggregate"
            else {"select": {"c": {"$collect": "$record"}}})
    out = rows_of(module_api, {"labels": [label], "where": {"genre": "drama"},
                               "groupBy": ["$record.genre"], **spec})
    [row] = out["data"]
    assert row["genre"] == "drama" and len(row["c"]) == 3
    assert sorted((r["title"], r["rating"]) for r in row["c"]) == [("A", 7), ("A", 8), ("B", 6)]
    assert all(r["__label"] == label and r["__proptypes"]["released"] == "datetime" for r in row["c"])


def test_collect_array_elements(module_api, movies):
    label, _ = movies
    out = rows_of(module_api, {"labels": [label], "where": {"genre": "comedy"}, "groupBy": ["$record.genre"],
                               "aggregate": {"u": {"fn": "collect", "field": "tags"},
                                             "all": {"fn": "collect", "field": "tags", "unique": False}}})
    [row] = out["data"]
    # comedy tags: ["x"] and ["z", "x"]
    assert sorted(row["u"]) == ["x", "z"]
    assert sorted(row["all"]) == ["x", "x", "z"]


def test_group_by_array_property_one_group_per_element(module_api, movies):
    label, _ = movies
    out = rows_of(module_api, {"labels": [label], "where": {"tags": {"$exists": True}},
                               "aggregate": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "rating"},
                                             "t": {"fn": "collect", "field": "title", "orderBy": "asc"}},
                               "groupBy": ["$record.tags"]})
    rows = by(out["data"], "tags")
    # x: A, C, D   y: A, B, F   z: D
    assert {k: (r["n"], r["s"], r["t"]) for k, r in rows.items()} == {
        "x": (3, 20.5, ["A", "C", "D"]), "y": (3, 23, ["A", "B", "F"]), "z": (1, 5, ["D"])}


def test_group_by_two_dimensions(module_api, movies):
    label, _ = movies
    out = rows_of(module_api, {"labels": [label], "where": {"tags": {"$exists": True}, "genre": {"$exists": True}},
                               "select": {"n": {"$count": "*"}}, "groupBy": ["$record.genre", "$record.tags"]})
    got = {(r["genre"], r["tags"]): r["n"] for r in out["data"]}
    assert got == {("drama", "x"): 1, ("drama", "y"): 2, ("comedy", "x"): 2, ("comedy", "z"): 1}
    assert all(set(r) == {"genre", "tags", "n"} for r in out["data"])


def test_group_by_without_aggregation_has_no_effect(module_api, movies):
    """SPEC.md: groupBy has an effect only with at least one aggregation."""
    label, ids = movies
    out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.genre"], "where": {"genre": "drama"}})
    assert out["total"] == 3
    assert positions(ids, out["data"]) == [6, 1, 0]
    assert all(r["__label"] == label and "title" in r for r in out["data"])


# ---------------------------------------------------------------------------------------
# rows: orderBy, skip, limit
# ---------------------------------------------------------------------------------------


def test_grouped_rows_order_skip_limit(module_api, movies):
    label, _ = movies
    base = {"labels": [label], "where": WITH_GENRE, "groupBy": ["$record.genre"],
            "aggregate": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "rating"}}}

    def genres(**extra):
        return [r["genre"] for r in rows_of(module_api, {**base, **extra})["data"]]

    assert genres(orderBy={"n": "desc"}) == ["drama", "comedy", "horror"]
    assert genres(orderBy={"n": "asc"}) == ["horror", "comedy", "drama"]
    assert genres(orderBy={"s": "asc"}) == ["horror", "comedy", "drama"]
    assert genres(orderBy={"genre": "asc"}) == ["comedy", "drama", "horror"]
    assert genres(orderBy={"genre": "desc"}) == ["horror", "drama", "comedy"]
    assert genres(orderBy={"n": "desc"}, skip=1, limit=1) == ["comedy"]
    assert genres(orderBy={"n": "desc"}, skip=2) == ["horror"]
    assert genres(orderBy={"n": "desc"}, skip=3) == []
    assert genres(orderBy={"n": "desc"}, limit=2) == ["drama", "comedy"]


def test_grouped_rows_multi_key_order(module_api):
    label = unique("ROWORD")
    seed(module_api, label, [{"g": "a", "h": 1}, {"g": "b", "h": 1}, {"g": "b", "h": 2}, {"g": "c", "h": 1},
                             {"g": "c", "h": 2}, {"g": "d", "h": 3}])
    out = rows_of(module_api, {"labels": [label], "groupBy": ["$record.g"],
                               "aggregate": {"n": {"fn": "count"}, "mx": {"fn": "max", "field": "h"}},
                               "orderBy": {"n": "desc", "mx": "asc"}})
    # n: a1 b2 c2 d1; mx: a1 b2 c2 d3 -> n desc, then mx asc: b(2,2) c(2,2) tie..., a(1,1), d(1,3)
    got = [r["g"] for r in out["data"]]
    assert set(got[:2]) == {"b", "c"} and got[2:] == ["a", "d"]


def test_grouped_rows_default_limit_100(module_api):
    label = unique("MANYGROUPS")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: module_api.engine.client().create(label, {"k": i}), range(105)))
    body = {"labels": [label], "groupBy": ["$record.k"], "aggregate": {"n": {"fn": "count"}},
            "orderBy": {"k": "asc"}}
    out = rows_of(module_api, body)
    assert [r["k"] for r in out["data"]] == list(range(100))
    assert all(r["n"] == 1 for r in out["data"])
    out = rows_of(module_api, {**body, "limit": 1000})
    assert [r["k"] for r in out["data"]] == list(range(105))
    out = rows_of(module_api, {**body, "skip": 100})
    assert [r["k"] for r in out["data"]] == list(range(100, 105))


# ---------------------------------------------------------------------------------------
# without groupBy: one row per record
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["aggregate", "select"])
def test_without_group_by_one_row_per_record(module_api, movies, form):
    label, ids = movies
    if form == "aggregate":
        spec = {"n": {"fn": "count"}, "r": {"fn": "sum", "field": "rating"},
                "lo": {"fn": "min", "field": "rating"}}
    else:
        spec = {"n": {"$count": "*"}, "r": {"$sum": "$record.rating"}, "lo": {"$min": "$record.rating"}}
    out = rows_of(module_api, {"labels": [label], form: spec})
    assert out["total"] == 7
    rows = out["data"]
    assert sorted(positions(ids, rows)) == list(range(7))
    for row in rows:
        i = ids.index(row["__id"])
        # the record ...
        assert row["__label"] == label and row["title"] == MOVIES[i]["title"]
        for k, v in MOVIES[i].items():
            assert row[k] == v
        # ... plus the computed keys over that record
        assert row["n"] == 1 and type(row["n"]) is int
        assert row["r"] == RATING.get(i, 0)
        assert row["lo"] == RATING.get(i)


def test_without_group_by_rows_order_skip_limit(module_api, movies):
    label, ids = movies
    body = {"labels": [label], "aggregate": {"r": {"fn": "sum", "field": "rating"}}}
    # r: 9 (5), 8 (0), 7.5 (2), 7 (6), 6 (1), 5 (3), 0 (4)
    out = rows_of(module_api, {**body, "orderBy": {"r": "desc"}})
    assert positions(ids, out["data"]) == [5, 0, 2, 6, 1, 3, 4]
    out = rows_of(module_api, {**body, "orderBy": {"r": "desc"}, "skip": 1, "limit": 2})
    assert positions(ids, out["data"]) == [0, 2]
    assert out["total"] == 7
    out = rows_of(module_api, {**body, "orderBy": {"r": "asc"}, "limit": 3})
    assert positions(ids, out["data"]) == [4, 3, 1]
    # default: record order (newest first), paged
    out = rows_of(module_api, {**body, "skip": 2, "limit": 2})
    assert positions(ids, out["data"]) == [4, 3]
    assert out["total"] == 7


def test_without_group_by_rows_order_by_id(module_api, movies):
    label, ids = movies
    body = {"labels": [label], "aggregate": {"r": {"fn": "sum", "field": "rating"}}}
    out = rows_of(module_api, {**body, "orderBy": "asc", "limit": 3})
    assert positions(ids, out["data"]) == [0, 1, 2]
    out = rows_of(module_api, {**body, "orderBy": "desc", "limit": 3})
    assert positions(ids, out["data"]) == [6, 5, 4]


def test_without_group_by_rows_ordered_by_record_datetime_field(module_api):
    """Rows that are records order by a datetime field as instants (BEHAVIOUR.md §2 orderBy)."""
    label = unique("ROWDT")
    ids = seed(module_api, label, [{"at": "2023-12-31T22:00:00Z"},
                                   {"at": "2024-01-01T05:00:00+08:00"},   # 2023-12-31T21:00Z
                                   {"at": "2023-12-31T23:30:00Z"}])
    body = {"labels": [label], "aggregate": {"n": {"fn": "count"}}}
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"at": "asc"}})["data"]) == [1, 0, 2]
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"at": "desc"}})["data"]) == [2, 0, 1]


def test_without_group_by_rows_ordered_by_record_array_field(module_api):
    """Rows that are records order an array by its smallest element ascending and its
    largest descending (BEHAVIOUR.md §2 orderBy)."""
    label = unique("ROWARR")
    ids = seed(module_api, label, [{"a": [5, 1]}, {"a": 3}, {"a": 2}, {"a": [4, 0.5, 6]}])
    body = {"labels": [label], "aggregate": {"n": {"fn": "count"}}}
    # smallest: 1, 3, 2, 0.5    largest: 5, 3, 2, 6
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"a": "asc"}})["data"]) == [3, 0, 2, 1]
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"a": "desc"}})["data"]) == [3, 0, 1, 2]


def test_without_group_by_rows_ordered_across_types(module_api):
    """numbers < datetimes < strings < booleans, missing last (BEHAVIOUR.md §2 orderBy)."""
    label = unique("ROWMIX")
    ids = seed(module_api, label, [{"v": "apple"}, {"v": True}, {"v": "2020-01-01"}, {"w": 1}, {"v": 7},
                                   {"v": "1999"}])
    body = {"labels": [label], "aggregate": {"n": {"fn": "count"}}}
    # 7 (number) < 2020-01-01 (datetime) < "1999" < "apple" (strings) < true; 3 lacks v
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"v": "asc"}})["data"]) == [4, 2, 5, 0, 1, 3]
    assert positions(ids, rows_of(module_api, {**body, "orderBy": {"v": "desc"}})["data"]) == [1, 0, 5, 2, 4, 3]


def test_no_match_gives_no_rows(module_api, movies):
    label, _ = movies
    for extra in ({}, {"groupBy": ["$record.genre"]}):
        out = rows_of(module_api, {"labels": [label], "where": {"title": "nope"},
                                   "aggregate": {"n": {"fn": "count"}}, **extra})
        assert out["data"] == []
        if not extra:
            assert out["total"] == 0


# ---------------------------------------------------------------------------------------
# timeBucket
# ---------------------------------------------------------------------------------------

BUCKETS = {
    ("day", None): {"2024-01-01": 2, "2024-01-07": 1, "2024-01-08": 1, "2024-03-31": 1, "2025-06-15": 1,
                    "2024-02-29": 1},
    # weeks start on Monday
    ("week", None): {"2024-01-01": 3, "2024-01-08": 1, "2024-02-26": 1, "2024-03-25": 1, "2025-06-09": 1},
    ("month", None): {"2024-01-01": 4, "2024-02-01": 1, "2024-03-01": 1, "2025-06-01": 1},
    ("quarter", None): {"2024-01-01": 6, "2025-04-01": 1},
    ("year", None): {"2024-01-01": 6, "2025-01-01": 1},
    ("months", 6): {"2024-01-01": 6, "2025-01-01": 1},
    ("quarters", 2): {"2024-01-01": 6, "2025-01-01": 1},
    ("years", 1): {"2024-01-01": 6, "2025-01-01": 1},
    ("months", 3): {"2024-01-01": 6, "2025-04-01": 1},
    ("hours", 6): {"2024-01-01T06:00:00": 1, "2024-01-01T00:00:00": 1, "2024-01-07T18:00:00": 1,
                   "2024-01-08T00:00:00": 1, "2024-03-31T18:00:00": 1, "2025-06-15T00:00:00": 1,
                   "2024-02-29T12:00:00": 1},
    ("hour", None): {"2024-01-01T10:00:00": 1, "2024-01-01T04:00:00": 1, "2024-01-07T23:00:00": 1,
                     "2024-01-08T00:00:00": 1, "2024-03-31T22:00:00": 1, "2025-06-15T00:00:00": 1,
                     "2024-02-29T12:00:00": 1},
}


def _start(key):
    return datetime.fromisoformat(key if "T" in key else key + "T00:00:00").replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("granularity,size", list(BUCKETS), ids=[f"{g}-{s}" for g, s in BUCKETS])
def test_time_bucket_aggregate_form_iso_utc(module_api, movies, granularity, size):
    label, _ = movies
    tb = {"fn": "timeBucket", "field": "released", "granularity": granularity, "alias": "$record"}
    if size is not None:
        tb["size"] = size
    out = rows_of(module_api, {"labels": [label], "aggregate": {"bucket": tb, "n": {"fn": "count"}},
                               "groupBy": ["bucket"], "limit": 1000})
    got = {}
    for r in out["data"]:
        assert set(r) == {"bucket", "n"}, r
        got[utc(r["bucket"])] = r["n"]
    assert got == {_start(k): v for k, v in BUCKETS[(granularity, size)].items()}


@pytest.mark.parametrize("granularity,size", [("week", None), ("month", None), ("quarters", 2), ("day", None)])
def test_time_bucket_select_form_epoch_ms(module_api, movies, granularity, size):
    label, _ = movies
    tb = {"field": "$record.released", "granularity": granularity}
    if size is not None:
        tb["size"] = size
    out = rows_of(module_api, {"labels": [label], "select": {"bucket": {"$timeBucket": tb}, "n": {"$count": "*"}},
                               "groupBy": ["bucket"], "orderBy": {"bucket": "asc"}})
    expected = sorted((int(_start(k).timestamp() * 1000), v) for k, v in BUCKETS[(granularity, size)].items())
    got = [(r["bucket"], r["n"]) for r in out["data"]]
    assert all(type(b) is int for b, _ in got), got
    assert got == expected


@pytest.mark.parametrize("granularity", ["seconds", "minutes", "hours", "weeks", "months", "years"])
def test_time_bucket_size_is_bounded(module_api, movies, granularity):
    # A size whose width overflows (2^60 hours) was a division by zero (a panic, 500).
    label, _ = movies
    for size in (2 ** 60, 2 ** 62, 1_000_001):
        for body in ({"labels": [label], "aggregate": {"b": {"fn": "timeBucket", "field": "released", "alias": "$record",
                                                             "granularity": granularity, "size": size}},
                      "groupBy": ["b"]},
                     {"labels": [label], "select": {"b": {"$timeBucket": {"field": "$record.released",
                                                                          "granularity": granularity, "size": size}}},
                      "groupBy": ["b"]}):
            r = module_api.post("/api/v1/records/search", body)
            assert_rest_error(r, 400, "invalid_argument", message_contains=["size", "1000000"])
    out = rows_of(module_api, {"labels": [label], "aggregate": {"b": {"fn": "timeBucket", "field": "released",
                                                                     "alias": "$record", "granularity": granularity,
                                                                     "size": 1_000_000}, "n": {"fn": "count"}},
                               "groupBy": ["b"]})
    assert sum(r["n"] for r in out["data"]) == 7


def test_time_bucket_with_other_aggregates(module_api, movies):
    label, _ = movies
    out = rows_of(module_api, {"labels": [label], "where": {"rating": {"$exists": True}},
                               "aggregate": {"m": {"fn": "timeBucket", "field": "released", "granularity": "month"},
                                             "s": {"fn": "sum", "field": "rating"},
                                             "t": {"fn": "collect", "field": "title", "orderBy": "asc", "unique": False}},
                               "groupBy": ["m"]})
    got = {utc(r["m"]): (r["s"], r["t"]) for r in out["data"]}
    # January: A 8, B 6, C 7.5 (E has no rating); February: A 7; March: D 5; June 2025: F 9
    assert got == {_start("2024-01-01"): (21.5, ["A", "B", "C"]), _start("2024-02-01"): (7, ["A"]),
                   _start("2024-03-01"): (5, ["D"]), _start("2025-06-01"): (9, ["F"])}


def test_time_bucket_with_property_dimension(module_api, movies):
    label, _ = movies
    out = rows_of(module_api, {"labels": [label], "where": WITH_GENRE,
                               "aggregate": {"q": {"fn": "timeBucket", "field": "released", "granularity": "month"},
                                             "n": {"fn": "count"}},
                               "groupBy": ["$record.genre", "q"]})
    got = {(r["genre"], utc(r["q"])): r["n"] for r in out["data"]}
    assert got == {("drama", _start("2024-01-01")): 2, ("drama", _start("2024-02-01")): 1,
                   ("comedy", _start("2024-01-01")): 1, ("comedy", _start("2024-03-01")): 1,
                   ("horror", _start("2024-01-01")): 1}


def test_time_bucket_without_group_by_per_record(module_api, movies):
    label, ids = movies
    out = rows_of(module_api, {"labels": [label], "aggregate": {
        "m": {"fn": "timeBucket", "field": "released", "granularity": "week"}}})
    weeks = {0: "2024-01-01", 1: "2024-01-01", 2: "2024-01-08", 3: "2024-03-25", 4: "2024-01-01",
             5: "2025-06-09", 6: "2024-02-26"}
    assert len(out["data"]) == 7
    for row in out["data"]:
        assert utc(row["m"]) == _start(weeks[ids.index(row["__id"])])
    out = rows_of(module_api, {"labels": [label], "select": {
        "m": {"$timeBucket": {"field": "$record.released", "granularity": "year"}}}})
    for row in out["data"]:
        assert row["m"] == ms("2025-01-01T00:00:00" if ids.index(row["__id"]) == 5 else "2024-01-01T00:00:00")


@pytest.mark.parametrize("tb,needle", [
    ({"fn": "timeBucket", "field": "released"}, "granularity"),
    ({"fn": "timeBucket", "field": "released", "granularity": "months"}, "size"),
    ({"fn": "timeBucket", "field": "released", "granularity": "months", "size": 0}, "size"),
    ({"fn": "timeBucket", "granularity": "day"}, "b"),
], ids=["no-granularity", "plural-without-size", "size-zero", "no-field"])
def test_time_bucket_validation(module_api, tb, needle):
    r = module_api.post(SEARCH, {"labels": ["X"], "aggregate": {"b": tb}, "groupBy": ["b"]})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["aggregate.b", needle])


# ---------------------------------------------------------------------------------------
# the three grouping paths agree: parallel scan of borrowed fields (no where), decoded
# records (with a where), and the general grouper (collect forces it)
# ---------------------------------------------------------------------------------------

def _status(i):
    k = i % 11
    if k == 0:
        return ["new", "paid", "new"]      # duplicate element: counted once for "new"
    if k == 1:
        return []                          # empty array: the null group
    if k == 2:
        return 3                           # a number that is not the string "3"
    if k == 3:
        return "3"
    if k == 4:
        return True
    if k == 5:
        return None                        # property left out
    return ["new", "paid", "shipped", "void"][i % 4]


def _total(i):
    k = i % 7
    if k == 0:
        return None
    if k == 1:
        return "n/a"                       # not a number: counted, not summed
    if k == 2:
        return i + 0.25
    return -i if i % 5 == 0 else i


def _reference(docs):
    import json as _json
    groups = {}
    for d in docs:
        st = d.get("status")
        vals = st if isinstance(st, list) else [st]
        keys = []
        for v in vals or [None]:
            k = _json.dumps(v)
            if k not in keys:
                keys.append(k)
        for k in keys:
            g = groups.setdefault(k, {"count": 0, "nums": [], "texts": 0})
            g["count"] += 1
            t = d.get("total")
            if isinstance(t, (int, float)) and not isinstance(t, bool):
                g["nums"].append(t)
            elif isinstance(t, str):
                g["texts"] += 1
    return groups


@pytest.mark.parametrize("with_collect", [False, True])
@pytest.mark.parametrize("scoped", ["none", "labels", "where"])
def test_grouping_paths_agree_with_a_reference(with_collect, scoped):
    import json as _json
    from conftest import _factory
    with _factory() as f:
        api = f.start().client()
        docs = []
        for i in range(400):
            d = {"i": i}
            if _status(i) is not None:
                d["status"] = _status(i)
            if _total(i) is not None:
                d["total"] = _total(i)
            docs.append(d)
        for lo in range(0, 400, 100):
            r = api.post("/api/v1/records/import/json", {"label": "G", "data": docs[lo:lo + 100]})
            assert r.status_code == 201, r.text
        # another label, a small share, must stay out of a labelled query
        r = api.post("/api/v1/records/import/json",
                     {"label": "H", "data": [{"status": "new", "total": 1000}] * 20})
        assert r.status_code == 201, r.text
        agg = {"n": {"fn": "count", "alias": "$record"},
               "sum": {"fn": "sum", "field": "total", "alias": "$record"},
               "avg": {"fn": "avg", "field": "total", "alias": "$record"},
               "lo": {"fn": "min", "field": "total", "alias": "$record"},
               "hi": {"fn": "max", "field": "total", "alias": "$record"}}
        if with_collect:
            agg["is"] = {"fn": "collect", "field": "i", "alias": "$record", "unique": True}
        body = {"aggregate": agg, "groupBy": ["$record.status"], "limit": 1000}
        want_docs = docs
        if scoped == "labels":
            body["labels"] = ["G"]
        elif scoped == "where":
            body["labels"] = ["G"]
            body["where"] = {"i": {"$gte": 0}}
        else:
            want_docs = docs + [{"status": "new", "total": 1000}] * 20
        rows = rest_find(api, body)["data"]
        want = _reference(want_docs)
        got = {_json.dumps(r["status"]): r for r in rows}
        assert set(got) == set(want), (sorted(got), sorted(want))
        for k, g in want.items():
            row = got[k]
            assert row["n"] == g["count"], (k, row, g)
            if g["nums"]:
                assert row["sum"] == pytest.approx(sum(g["nums"])), (k, row)
                assert row["avg"] == pytest.approx(sum(g["nums"]) / len(g["nums"])), (k, row)
                assert row["lo"] == min(g["nums"]), (k, row)
                # across types strings rank above numbers (BEHAVIOUR.md §2 ordering)
                assert row["hi"] == ("n/a" if g["texts"] else max(g["nums"])), (k, row)
                if all(isinstance(x, int) for x in g["nums"]):
                    assert isinstance(row["sum"], int), row
            else:
                assert row["sum"] == 0 and row["avg"] is None, row
                text = "n/a" if g["texts"] else None
                assert row["lo"] == text and row["hi"] == text, row


def test_output_names_starting_with_two_underscores_are_reserved(module_api, movies):
    # They sat beside the record's keys in a row and replaced its `__id` / `__label`.
    label, _ = movies
    for body in ({"labels": [label], "aggregate": {"__id": {"fn": "count", "alias": "$record"}}},
                 {"labels": [label], "select": {"__label": {"$count": "*"}}},
                 {"labels": [label], "aggregate": {"": {"fn": "count", "alias": "$record"}}}):
        assert_rest_error(module_api.post("/api/v1/records/search", body), 400, "invalid_argument")
    r = module_api.post("/api/v1/records/search", {"labels": [label], "aggregate": {"__id": {"fn": "count"}}})
    assert_rest_error(r, 400, "invalid_argument", message_contains=["aggregate.__id", "reserved"])
