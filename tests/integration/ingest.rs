//! Inline vectors given with imports and creates are stored with their record (key kind
//! INLINE_VECTOR) in the import's own batch, and go when the record goes.

use engine::engine::{Engine, Outcome};
use engine::store::keys::{self, Key};
use engine::store::kv::KvRead;
use serde_json::{json, Value};

fn engine(dir: &std::path::Path) -> Engine {
    crate::in_process_engine(dir)
}

async fn run(e: &Engine, op: Value) -> engine::error::Result<Outcome> {
    crate::run_protocol(e, op).await
}

/// (record id, property) -> values of every stored inline vector.
fn stored_vectors(e: &Engine) -> Vec<(String, String, Vec<f64>)> {
    let snap = e.store.snapshot().unwrap();
    let prefix = Key::tenant(keys::SINGLE_TENANT, keys::INLINE_VECTOR).0;
    let mut out = Vec::new();
    snap.scan_prefix(&prefix, false, &mut |k, v| {
        let rest = &k[prefix.len()..];
        let id = uuid::Uuid::from_slice(&rest[..16]).unwrap().to_string();
        let (name, _) = keys::read_escaped(&rest[16..]).unwrap();
        let values = v
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        out.push((id, String::from_utf8(name).unwrap(), values));
        Ok(true)
    })
    .unwrap();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_vectors_are_stored_with_their_records_and_deleted_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let out = run(
        &e,
        json!({"kind": "ingest", "ingest": {"kind": "csv", "label": "DOC", "data": "t\na\nb\nc\n",
            "options": {"returnResult": true},
            "vectors": [[{"propertyName": "emb", "vector": [1.0, 2.5]}], null, [{"propertyName": "emb2", "vector": [3, 4], "index": "ix"}]]}}),
    )
    .await
    .unwrap();
    let Outcome::Ingested {
        count,
        relationships,
        records: Some(recs),
    } = out
    else {
        panic!("unexpected {out:?}")
    };
    assert_eq!((count, relationships), (3, 0));
    let v = stored_vectors(&e);
    assert_eq!(v.len(), 2);
    assert_eq!(
        (v[0].0.as_str(), v[0].1.as_str(), v[0].2.clone()),
        (recs[0].id.to_string().as_str(), "emb", vec![1.0, 2.5])
    );
    assert_eq!(
        (v[1].0.as_str(), v[1].1.as_str(), v[1].2.clone()),
        (recs[2].id.to_string().as_str(), "emb2", vec![3.0, 4.0])
    );

    // `$vectors` in documents, and a create with vectors.
    run(
        &e,
        json!({"kind": "ingest", "ingest": {"kind": "documents", "label": "DOC", "documents": [
        {"t": "d", "$vectors": [{"propertyName": "emb3", "vector": [5]}]}]}}),
    )
    .await
    .unwrap();
    let created = run(
        &e,
        json!({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "DOC",
        "properties": {"t": "e"}, "vectors": [{"propertyName": "emb4", "vector": [6, 7]}]}}),
    )
    .await
    .unwrap();
    assert_eq!(stored_vectors(&e).len(), 4);

    // Bad vectors are 400s naming the entry, and store nothing.
    for bad in [
        json!({"kind": "csv", "label": "DOC", "data": "t\na\n", "vectors": [[{"vector": [1]}]]}),
        json!({"kind": "csv", "label": "DOC", "data": "t\na\n", "vectors": [[{"propertyName": "x", "vector": []}]]}),
        json!({"kind": "csv", "label": "DOC", "data": "t\na\n", "vectors": [[{"propertyName": "x", "vector": ["a"]}]]}),
        json!({"kind": "csv", "label": "DOC", "data": "t\na\n", "vectors": [null, null]}),
    ] {
        let err = run(&e, json!({"kind": "ingest", "ingest": bad}))
            .await
            .unwrap_err();
        assert_eq!(err.code.as_str(), "invalid_argument", "{}", err.message);
        assert!(err.message.contains("vectors"), "{}", err.message);
    }
    assert_eq!(stored_vectors(&e).len(), 4);

    // Deleting records removes their vectors.
    let Outcome::Record(rec) = created else {
        panic!()
    };
    run(
        &e,
        json!({"kind": "mutate", "mutation": {"kind": "deleteRecord", "id": rec.id.to_string()}}),
    )
    .await
    .unwrap();
    assert_eq!(stored_vectors(&e).len(), 3);
    run(&e, json!({"kind": "mutate", "mutation": {"kind": "deleteRecords", "query": {"labels": ["DOC"]}}}))
        .await
        .unwrap();
    assert!(stored_vectors(&e).is_empty());
}
