//! Differential test of the search engine: random records (all four types, arrays, missing
//! fields, mixed types under one name) and thousands of random where trees with ordering and
//! paging, answered by the engine and by a reference evaluator written here from
//! BEHAVIOUR.md §2 alone. Pages and totals must match exactly.

use engine::model::datetime;
use engine::model::infer::{infer_map, InferOptions};
use engine::protocol::QueryDocument;
use engine::query::{exec, lower};
use engine::store::records::{PutMode, PutRecord, WriteOp};
use engine::store::{Store, TenancyMode, Tenant};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

const WORDS: [&str; 6] = ["alpha", "Beta", "gamma", "alphabet", "", "ZETA"];
const DATES: [&str; 5] = [
    "2023-01-15",
    "2023-06-30T12:00:00Z",
    "2024-02-29T23:59:59.5+01:00",
    "2022-12-31T23:00:00-01:00",
    "2024-01-01T00:00",
];

fn random_scalar(rng: &mut Rng, kind: u64) -> Value {
    match kind {
        0 => json!(rng.below(7) as i64 - 3),
        1 => json!((rng.below(13) as f64 - 6.0) / 2.0),
        2 => json!(*rng.pick(&WORDS)),
        3 => json!(*rng.pick(&DATES)),
        _ => json!(rng.chance(50)),
    }
}

fn random_record(rng: &mut Rng) -> Map<String, Value> {
    let mut m = Map::new();
    for field in ["n", "s", "d", "b", "arr", "mix"] {
        if rng.chance(20) {
            continue;
        }
        let v = match field {
            "n" => {
                let k = rng.below(2);
                random_scalar(rng, k)
            }
            "s" => random_scalar(rng, 2),
            "d" => random_scalar(rng, 3),
            "b" => random_scalar(rng, 4),
            "arr" => {
                let kind = *rng.pick(&[0, 2, 3]);
                Value::Array(
                    (0..rng.below(4))
                        .map(|_| random_scalar(rng, kind))
                        .collect(),
                )
            }
            _ => {
                let k = rng.below(5);
                random_scalar(rng, k)
            }
        };
        m.insert(field.to_string(), v);
    }
    m
}

// ---------- Reference evaluator (BEHAVIOUR.md §2), over the REST-shaped JSON record ----------

#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    Num,
    Dt,
    Str,
    Bool,
}

struct RefRecord {
    id: String,
    label: String,
    fields: Map<String, Value>,
    types: Map<String, Value>,
}

fn ty_of(r: &RefRecord, f: &str) -> Option<Ty> {
    match r.types.get(f)?.as_str()? {
        "number" => Some(Ty::Num),
        "datetime" => Some(Ty::Dt),
        "string" => Some(Ty::Str),
        _ => Some(Ty::Bool),
    }
}

fn elems(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        v => vec![v.clone()],
    }
}

fn inst(s: &str) -> Option<(i64, u32)> {
    datetime::parse(s).map(|i| (i.secs, i.nanos))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Equality, type-strict; a string operand that is a datetime matches datetimes by instant.
fn ref_eq(t: Ty, e: &Value, op: &Value) -> bool {
    match (t, op) {
        (Ty::Num, Value::Number(_)) => num(e) == num(op),
        (Ty::Str, Value::String(o)) => e.as_str() == Some(o),
        (Ty::Bool, Value::Bool(o)) => e.as_bool() == Some(*o),
        (Ty::Dt, Value::String(o)) => {
            inst(o).is_some() && inst(e.as_str().unwrap_or("")) == inst(o)
        }
        _ => false,
    }
}

fn ref_range(t: Ty, e: &Value, op: &str, bound: &Value) -> bool {
    let ord = match (t, bound) {
        (Ty::Num, Value::Number(_)) => num(e).unwrap().partial_cmp(&num(bound).unwrap()).unwrap(),
        (Ty::Dt, Value::String(b)) => inst(e.as_str().unwrap()).cmp(&inst(b)),
        _ => return false,
    };
    match op {
        "$gt" => ord == Ordering::Greater,
        "$gte" => ord != Ordering::Less,
        "$lt" => ord == Ordering::Less,
        _ => ord != Ordering::Greater,
    }
}

fn ref_field(r: &RefRecord, f: &str, cond: &Value) -> bool {
    let v = r.fields.get(f);
    let ops: Vec<(String, Value)> = match cond {
        Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Value::Null => return v.is_none(),
        other => vec![("$eq".into(), other.clone())],
    };
    ops.iter().all(|(op, arg)| {
        if op == "$exists" {
            return v.is_some() == arg.as_bool().unwrap();
        }
        if op == "$not" {
            return !ref_field(r, f, arg);
        }
        let Some(v) = v else { return false };
        let t = ty_of(r, f).unwrap();
        let es = elems(v);
        let text = |e: &Value| match t {
            Ty::Str | Ty::Dt => e.as_str().map(str::to_string),
            _ => None,
        };
        match op.as_str() {
            "$eq" => es.iter().any(|e| ref_eq(t, e, arg)),
            "$ne" => !es.iter().any(|e| ref_eq(t, e, arg)),
            "$in" => es
                .iter()
                .any(|e| arg.as_array().unwrap().iter().any(|o| ref_eq(t, e, o))),
            "$nin" => !es
                .iter()
                .any(|e| arg.as_array().unwrap().iter().any(|o| ref_eq(t, e, o))),
            "$gt" | "$gte" | "$lt" | "$lte" => es.iter().any(|e| ref_range(t, e, op, arg)),
            "$contains" => {
                let n = arg.as_str().unwrap().to_lowercase();
                es.iter()
                    .any(|e| text(e).is_some_and(|s| s.to_lowercase().contains(&n)))
            }
            "$startsWith" => es
                .iter()
                .any(|e| text(e).is_some_and(|s| s.starts_with(arg.as_str().unwrap()))),
            "$endsWith" => es
                .iter()
                .any(|e| text(e).is_some_and(|s| s.ends_with(arg.as_str().unwrap()))),
            "$type" => r.types.get(f) == Some(arg),
            _ => panic!("reference evaluator: no operator {op}"),
        }
    })
}

fn ref_where(r: &RefRecord, w: &Value) -> bool {
    w.as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| match k.as_str() {
            "$and" => v.as_array().unwrap().iter().all(|x| ref_where(r, x)),
            "$or" => v.as_array().unwrap().iter().any(|x| ref_where(r, x)),
            "$nor" => !v.as_array().unwrap().iter().any(|x| ref_where(r, x)),
            "$xor" => {
                v.as_array()
                    .unwrap()
                    .iter()
                    .filter(|x| ref_where(r, x))
                    .count()
                    == 1
            }
            "$not" => !ref_where(r, v),
            "$id" => match v {
                Value::String(s) => r.id == *s,
                _ => v["$in"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x.as_str() == Some(&r.id)),
            },
            f => ref_field(r, f, v),
        })
}

/// Cross-type sort element: (type rank, number, instant, text, bool).
type SortKey = (u8, f64, (i64, u32), String, bool);

fn sort_key(r: &RefRecord, f: &str, desc: bool) -> Option<SortKey> {
    let t = ty_of(r, f)?;
    let keys: Vec<_> = elems(r.fields.get(f)?)
        .iter()
        .map(|e| match t {
            Ty::Num => (0, num(e).unwrap(), (0, 0), String::new(), false),
            Ty::Dt => (
                1,
                0.0,
                inst(e.as_str().unwrap()).unwrap(),
                String::new(),
                false,
            ),
            Ty::Str => (2, 0.0, (0, 0), e.as_str().unwrap().to_string(), false),
            Ty::Bool => (3, 0.0, (0, 0), String::new(), e.as_bool().unwrap()),
        })
        .collect();
    let cmp = |a: &&(u8, f64, (i64, u32), String, bool),
               b: &&(u8, f64, (i64, u32), String, bool)| {
        a.0.cmp(&b.0)
            .then(a.1.partial_cmp(&b.1).unwrap())
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
            .then(a.4.cmp(&b.4))
    };
    let best = if desc {
        keys.iter().max_by(cmp)
    } else {
        keys.iter().min_by(cmp)
    };
    best.cloned()
}

fn ref_order(a: &RefRecord, b: &RefRecord, keys: &[(String, bool)]) -> Ordering {
    for (f, desc) in keys {
        let o = if f == "id" {
            let o = a.id.cmp(&b.id);
            if *desc {
                o.reverse()
            } else {
                o
            }
        } else {
            match (sort_key(a, f, *desc), sort_key(b, f, *desc)) {
                (None, None) => Ordering::Equal,
                (None, _) => Ordering::Greater,
                (_, None) => Ordering::Less,
                (Some(x), Some(y)) => {
                    let o =
                        x.0.cmp(&y.0)
                            .then(x.1.partial_cmp(&y.1).unwrap())
                            .then(x.2.cmp(&y.2))
                            .then(x.3.cmp(&y.3))
                            .then(x.4.cmp(&y.4));
                    if *desc {
                        o.reverse()
                    } else {
                        o
                    }
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    b.id.cmp(&a.id)
}

// ---------- Random where trees ----------

fn random_operand(rng: &mut Rng) -> Value {
    let k = rng.below(5);
    random_scalar(rng, k)
}

fn random_condition(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => random_operand(rng),
        1 => Value::Null,
        2 => json!({"$ne": random_operand(rng)}),
        3 => json!({"$in": (0..1 + rng.below(3)).map(|_| random_operand(rng)).collect::<Vec<_>>()}),
        4 => {
            json!({"$nin": (0..1 + rng.below(3)).map(|_| random_operand(rng)).collect::<Vec<_>>()})
        }
        5 | 6 => {
            let op = *rng.pick(&["$gt", "$gte", "$lt", "$lte"]);
            let k = if rng.chance(50) { rng.below(2) } else { 3 };
            let b = random_scalar(rng, k);
            let mut m = Map::new();
            m.insert(op.into(), b);
            if rng.chance(40) {
                let op2 = *rng.pick(&["$lt", "$lte"]);
                m.insert(
                    op2.into(),
                    if rng.chance(50) {
                        json!(2)
                    } else {
                        json!("2024-01-01")
                    },
                );
            }
            Value::Object(m)
        }
        7 => json!({"$contains": *rng.pick(&["ALPHA", "a", "et", "2023", ""])}),
        8 => json!({"$startsWith": *rng.pick(&["alpha", "B", "2023", ""])}),
        9 => json!({"$endsWith": *rng.pick(&["bet", "a", "Z"])}),
        10 => json!({"$exists": rng.chance(50)}),
        11 => json!({"$type": *rng.pick(&["number", "string", "datetime", "boolean"])}),
        12 => json!({"$not": {"$eq": random_operand(rng)}}),
        _ => json!({"$eq": random_operand(rng)}),
    }
}

fn random_where(rng: &mut Rng, depth: u32, ids: &[String]) -> Value {
    let mut m = Map::new();
    for _ in 0..1 + rng.below(2) {
        if depth < 2 && rng.chance(25) {
            let subs: Vec<Value> = (0..1 + rng.below(3))
                .map(|_| random_where(rng, depth + 1, ids))
                .collect();
            let op = *rng.pick(&["$and", "$or", "$nor", "$xor"]);
            m.insert(op.into(), Value::Array(subs));
        } else if depth < 2 && rng.chance(8) {
            m.insert("$not".into(), random_where(rng, depth + 1, ids));
        } else if rng.chance(5) {
            let pick: Vec<Value> = (0..1 + rng.below(4))
                .map(|_| json!(rng.pick(ids)))
                .collect();
            m.insert("$id".into(), json!({"$in": pick}));
        } else {
            let f = *rng.pick(&["n", "s", "d", "b", "arr", "mix", "absent"]);
            m.insert(f.into(), random_condition(rng));
        }
    }
    Value::Object(m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_matches_the_reference_evaluator() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut ops = Vec::new();
    for _ in 0..400 {
        let data = random_record(&mut rng);
        let props = infer_map(&data, InferOptions::default()).unwrap();
        let label = rng.pick(&["A", "B", "C"]).to_string();
        ops.push(WriteOp::Put(PutRecord {
            id: uuid::Uuid::now_v7(),
            mode: PutMode::Create,
            label: Some(label),
            props,
        }));
    }
    store.write(Tenant::Single, ops).await.unwrap();
    let snap = store.snapshot().unwrap();
    // The reference reads the records as the REST layer shows them.
    let all = exec::search(
        &snap,
        0,
        &lower(
            &QueryDocument {
                limit: Some(1000),
                ..Default::default()
            },
            true,
        )
        .unwrap()
        .spec,
    )
    .unwrap();
    assert_eq!(all.total, 400);
    let refs: Vec<RefRecord> = all
        .records
        .iter()
        .map(|r| {
            let flat = engine::protocol::render::flat_record(r);
            let mut fields = flat.as_object().unwrap().clone();
            let types = fields
                .remove("__proptypes")
                .unwrap()
                .as_object()
                .unwrap()
                .clone();
            fields.retain(|k, _| types.contains_key(k));
            RefRecord {
                id: r.id.to_string(),
                label: r.label.clone(),
                fields,
                types,
            }
        })
        .collect();
    let ids: Vec<String> = refs.iter().map(|r| r.id.clone()).collect();
    let mut checked = 0;
    let mut nonempty = 0;
    for case in 0..3000 {
        let w = random_where(&mut rng, 0, &ids);
        let labels: Vec<String> = match rng.below(3) {
            0 => vec![],
            1 => vec![rng.pick(&["A", "B", "C"]).to_string()],
            _ => vec!["A".into(), "C".into()],
        };
        let order: Vec<(String, bool)> = match rng.below(4) {
            0 => vec![],
            1 => vec![("id".into(), rng.chance(50))],
            2 => vec![(
                rng.pick(&["n", "s", "d", "arr", "mix", "b"]).to_string(),
                rng.chance(50),
            )],
            _ => vec![("mix".into(), rng.chance(50)), ("n".into(), rng.chance(50))],
        };
        let order_json = if order.is_empty() {
            Value::Null
        } else {
            Value::Array(
                order
                    .iter()
                    .map(|(f, d)| json!({f.clone(): if *d { "desc" } else { "asc" }}))
                    .collect(),
            )
        };
        let (skip, limit) = (rng.below(30) as i64, 1 + rng.below(60) as i64);
        let doc = QueryDocument {
            labels: Some(labels.clone()),
            predicate: Some(w.clone()),
            order: Some(order_json),
            offset: Some(skip),
            limit: Some(limit),
            ..Default::default()
        };
        let q = lower(&doc, true).unwrap_or_else(|e| panic!("case {case}: {w} rejected: {e}"));
        let got = exec::search(&snap, 0, &q.spec).unwrap();
        let mut want: Vec<&RefRecord> = refs
            .iter()
            .filter(|r| (labels.is_empty() || labels.contains(&r.label)) && ref_where(r, &w))
            .collect();
        let effective = if order.is_empty() {
            vec![("id".to_string(), true)]
        } else {
            order.clone()
        };
        want.sort_by(|a, b| ref_order(a, b, &effective));
        let want_page: Vec<&str> = want
            .iter()
            .skip(skip as usize)
            .take(limit as usize)
            .map(|r| r.id.as_str())
            .collect();
        let got_page: Vec<String> = got.records.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(
            got.total,
            want.len() as u64,
            "case {case}: total for labels {labels:?} where {w} (plan {:?})",
            got.explain
        );
        assert_eq!(got_page, want_page, "case {case}: page for labels {labels:?} where {w} order {order:?} skip {skip} limit {limit} (plan {:?})", got.explain);
        checked += 1;
        if !want.is_empty() {
            nonempty += 1;
        }
    }
    assert_eq!(checked, 3000);
    assert!(
        nonempty > 1000,
        "the generator should produce many non-empty results, got {nonempty}"
    );
}

/// A traversal search whose root index run is long enough for ids to be decided on several
/// threads (at least 20,000 keys: the planner's estimate cap) counts the same with the key
/// memo cold (the run read from the store and remembered) and warm (read from memory), its
/// ids decided on several threads, and again after writes change the run, the gating
/// block's targets and the adjacency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_gated_index_runs_count_the_same_cold_and_warm() {
    let dir = tempfile::tempdir().unwrap();
    let e = crate::in_process_engine(dir.path());
    let ingest = |label: &str, docs: Vec<Value>| json!({"kind": "ingest", "ingest": {"kind": "documents", "label": label, "documents": docs}});
    let customers: Vec<Value> = (0..300)
        .map(|c| json!({"cid": c, "country": if c % 3 == 0 { "DE" } else { "FR" }}))
        .collect();
    crate::run_protocol(&e, ingest("CUSTOMER", customers))
        .await
        .unwrap();
    let orders = 30_000;
    for chunk in (0..orders).collect::<Vec<i64>>().chunks(10_000) {
        let docs = chunk
            .iter()
            .map(|o| json!({"cid": o % 300, "status": if o % 5 == 0 { "paid" } else { "shipped" }}))
            .collect();
        crate::run_protocol(&e, ingest("ORDER", docs))
            .await
            .unwrap();
    }
    let link = json!({"kind": "mutate", "mutation": {"kind": "linkRecords", "command": {
        "relationType": "PLACED_BY",
        "source": {"label": "ORDER", "property": "cid"},
        "target": {"label": "CUSTOMER", "property": "cid"}}}});
    crate::run_protocol(&e, link).await.unwrap();
    let search = json!({"kind": "query", "query": {"kind": "records", "query": {
        "labels": ["ORDER"], "limit": 1, "predicate": {"status": "shipped",
        "CUSTOMER": {"$relation": {"type": "PLACED_BY", "direction": "out"}, "country": "DE"}}}}});
    async fn count(e: &engine::engine::Engine, search: &Value) -> u64 {
        match crate::run_protocol(e, search.clone()).await.unwrap() {
            engine::engine::Outcome::Records { total, .. } => total,
            _ => panic!("not a record list"),
        }
    }
    let expected = (0..orders)
        .filter(|o| o % 5 != 0 && (o % 300) % 3 == 0)
        .count() as u64;
    let hits = e.key_memo().hits;
    for _ in 0..3 {
        assert_eq!(count(&e, &search).await, expected);
    }
    assert!(e.key_memo().hits > hits, "the warm searches read the memo");
    // Writes into both domains: one DE customer moves to FR (its orders leave the gated set),
    // and shipped orders of another DE customer become paid (they leave the index run).
    let set_country = json!({"kind": "query", "query": {"kind": "records", "query": {
        "labels": ["CUSTOMER"], "predicate": {"cid": 0}, "limit": 1}}});
    let de0 = match crate::run_protocol(&e, set_country).await.unwrap() {
        engine::engine::Outcome::Records { records, .. } => records[0].id,
        _ => panic!("not a record list"),
    };
    crate::run_protocol(
        &e,
        json!({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "merge",
            "id": de0.to_string(), "properties": {"country": "FR"}}}),
    )
    .await
    .unwrap();
    crate::run_protocol(
        &e,
        json!({"kind": "mutate", "mutation": {"kind": "deleteRecords", "query": {
            "labels": ["ORDER"], "predicate": {"cid": 3, "status": "shipped"}}}}),
    )
    .await
    .unwrap();
    let expected = (0..orders)
        .filter(|o| o % 5 != 0 && (o % 300) % 3 == 0 && o % 300 != 0 && o % 300 != 3)
        .count() as u64;
    for _ in 0..2 {
        assert_eq!(count(&e, &search).await, expected);
    }
}
