//! Writer guarantees, checked against the store directly.

use engine::model::{infer::PropWrites, PropType, PropValue, Scalar};
use engine::store::codec;
use engine::store::keys::{self, Key};
use engine::store::kv::KvRead;
use engine::store::records::{self, PutMode, PutRecord, WriteOp, WriteOutcome};
use engine::store::relationships as rels;
use engine::store::{Store, StoreOptions, TenancyMode, Tenant};
use std::sync::Arc;
use uuid::Uuid;

fn props(pairs: &[(&str, i64)]) -> PropWrites {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Some(PropValue::scalar(PropType::Number, Scalar::Int(*v))),
            )
        })
        .collect()
}

fn create(id: Uuid, label: &str, p: &[(&str, i64)]) -> WriteOp {
    WriteOp::Put(PutRecord {
        id,
        mode: PutMode::Create,
        label: Some(label.into()),
        props: props(p),
    })
}

fn count_prefix(s: &impl KvRead, prefix: Vec<u8>) -> usize {
    let mut n = 0;
    s.scan_prefix(&prefix, false, &mut |_, _| {
        n += 1;
        Ok(true)
    })
    .unwrap();
    n
}

/// Many concurrent batches land in shared group commits; the failing ones (a create of an
/// existing id, placed after a valid op in the same batch) contribute nothing, and all others
/// are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_never_poisons_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), TenancyMode::Single).unwrap());
    let taken = Uuid::now_v7();
    store
        .write(Tenant::Single, vec![create(taken, "A", &[("x", 1)])])
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..200i64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let fresh = Uuid::now_v7();
            let mut ops = vec![create(fresh, "A", &[("x", i)])];
            if i % 2 == 0 {
                ops.push(create(taken, "A", &[("x", -1)]));
            }
            (fresh, i % 2 == 0, store.write(Tenant::Single, ops).await)
        }));
    }
    let snapless: Vec<_> = futures_join(tasks).await;
    let snap = store.snapshot().unwrap();
    let mut ok = 0;
    for (fresh, should_fail, res) in snapless {
        let stored = records::get_record(&snap, 0, &fresh).unwrap();
        if should_fail {
            assert_eq!(res.unwrap_err().code, engine::error::ErrorCode::Conflict);
            assert!(stored.is_none(), "a failed batch left a record behind");
        } else {
            assert!(matches!(res.unwrap()[0], WriteOutcome::Record(_)));
            assert!(stored.is_some());
            ok += 1;
        }
    }
    assert_eq!(ok, 100);
    assert_eq!(records::label_count(&snap, 0, "A").unwrap(), 101);
    assert_eq!(
        count_prefix(&snap, Key::tenant(0, keys::LABEL_INDEX).0),
        101
    );
    assert_eq!(count_prefix(&snap, Key::tenant(0, keys::RECORD).0), 101);
}

/// A lone writer commits inline after 16 writes in a row; on a runtime with a single worker
/// that commit runs in `block_in_place`. The writes run as a task on that one worker: every
/// write is stored, nothing hangs, and another task on the runtime is polled while they go
/// on (an inline commit returns without reaching an await, so `Store::write` yields).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_lone_writer_on_a_single_worker_commits_inline_and_other_tasks_go_on() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), TenancyMode::Single).unwrap());
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    let writes = {
        let (store, ticks) = (store.clone(), ticks.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            // Past the run of 16 lone writes, so the later ones commit inline.
            let mut during_inline = 0;
            for i in 0..48i64 {
                let id = Uuid::now_v7();
                let before = ticks.load(Ordering::Relaxed);
                store
                    .write(Tenant::Single, vec![create(id, "L", &[("i", i)])])
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                if i >= 32 && ticks.load(Ordering::Relaxed) > before {
                    during_inline += 1;
                }
                ids.push(id);
            }
            (ids, during_inline)
        })
    };
    let (ids, during_inline) = tokio::time::timeout(std::time::Duration::from_secs(60), writes)
        .await
        .expect("the writes hung")
        .unwrap();
    ticker.abort();
    assert!(
        during_inline > 0,
        "the other task never ran beside inline commits"
    );
    let snap = store.snapshot().unwrap();
    for id in &ids {
        assert!(records::get_record(&snap, 0, id).unwrap().is_some());
    }
    assert_eq!(records::label_count(&snap, 0, "L").unwrap(), 48);
}

/// Every adjacency entry of `node` carries its relationship as stored and the current label of
/// the record at its other end.
fn assert_adjacency_current(store: &Store, node: &Uuid) -> usize {
    let snap = store.snapshot().unwrap();
    let mut n = 0;
    rels::adjacent(&snap, 0, node, &rels::EdgeFilter::default(), &mut |a| {
        let stored = rels::get_relationship(&snap, 0, &a.rel.id)
            .unwrap()
            .unwrap();
        assert_eq!(a.rel, stored, "adjacency body of {node}");
        let other = records::get_record(&snap, 0, &a.other).unwrap().unwrap();
        assert_eq!(a.other_label, other.label, "other label under {node}");
        n += 1;
        Ok(true)
    })
    .unwrap();
    n
}

/// Adjacency values follow re-props and retypes (a neighbour's and a self-loop's), and a store
/// of storage format 1 (marker values) is upgraded in place at startup to the same values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adjacency_values_stay_current_and_a_v1_store_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let link = |s: Uuid, t: Uuid, ty: &str, w: i64| {
        WriteOp::Link(rels::LinkRel {
            id: Uuid::now_v7(),
            seen: None,
            source: s,
            target: t,
            rel_type: ty.into(),
            props: [(
                "w".to_string(),
                PropValue::scalar(PropType::Number, Scalar::Int(w)),
            )]
            .into(),
            unique: true,
        })
    };
    {
        let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
        let w = |ops| store.write(Tenant::Single, ops);
        w(vec![
            create(a, "A", &[]),
            create(b, "B", &[]),
            create(c, "C", &[]),
        ])
        .await
        .unwrap();
        w(vec![
            link(a, b, "T", 1),
            link(c, a, "U", 1),
            link(a, a, "SELF", 1),
        ])
        .await
        .unwrap();
        w(vec![link(a, b, "T", 2)]).await.unwrap();
        w(vec![WriteOp::Retype {
            id: a,
            from: "A".into(),
            to: "A2".into(),
        }])
        .await
        .unwrap();
        assert_eq!(assert_adjacency_current(&store, &a), 4);
        assert_eq!(assert_adjacency_current(&store, &b), 1);
        assert_eq!(assert_adjacency_current(&store, &c), 1);
        let snap = store.snapshot().unwrap();
        let under_b = rels::node_edges(&snap, 0, &b).unwrap();
        assert_eq!(under_b[0].other_label, "A2");
        assert_eq!(
            under_b[0].rel.props["w"],
            PropValue::scalar(PropType::Number, Scalar::Int(2))
        );
    }
    // Turn it into what a format-1 build wrote: marker values, version 1.
    {
        let db = redb::Database::open(dir.path().join("engine.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(engine::store::kv::KV).unwrap();
            let prefix = Key::tenant(0, keys::ADJACENCY).0;
            let mut adj = Vec::new();
            t.scan_prefix(&prefix, false, &mut |k, _| {
                adj.push(k.to_vec());
                Ok(true)
            })
            .unwrap();
            assert_eq!(adj.len(), 6);
            for k in adj {
                t.insert(k.as_slice(), codec::MARKER).unwrap();
            }
            // A dangling entry (no such relationship) and a counter that drifted.
            let mut dangling = Key::tenant(0, keys::ADJACENCY).uuid(&b).u8(0).str("GONE").0;
            dangling.extend_from_slice(c.as_bytes());
            dangling.extend_from_slice(Uuid::now_v7().as_bytes());
            t.insert(dangling.as_slice(), codec::MARKER).unwrap();
            let t_count = Key::tenant(0, keys::REL_COUNT)
                .str("A2")
                .str("T")
                .str("B")
                .0;
            t.insert(t_count.as_slice(), codec::encode_u64(0).as_slice())
                .unwrap();
            t.insert(
                Key::system(keys::SYS_FORMAT).bytes(),
                codec::encode_u64(1).as_slice(),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
    // The dangling entry is gone and the counters are recomputed from the entries.
    assert_eq!(
        rels::rel_counts(&store.snapshot().unwrap(), 0).unwrap(),
        vec![
            ("A2".into(), "SELF".into(), "A2".into(), 1),
            ("A2".into(), "T".into(), "B".into(), 1),
            ("C".into(), "U".into(), "A2".into(), 1),
        ]
    );
    assert_eq!(assert_adjacency_current(&store, &a), 4);
    assert_eq!(assert_adjacency_current(&store, &b), 1);
    assert_eq!(assert_adjacency_current(&store, &c), 1);
    let snap = store.snapshot().unwrap();
    let v = snap
        .get(Key::system(keys::SYS_FORMAT).bytes())
        .unwrap()
        .unwrap();
    assert_eq!(
        codec::decode_u64(&v).unwrap(),
        engine::store::STORAGE_FORMAT_VERSION
    );
}

/// A bulk link's labels, read on a snapshot, are used only when its batch applies right on
/// that snapshot's state: after a retype in between, the writer reads the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_labels_are_used_only_on_the_state_they_were_read_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    store
        .write(
            Tenant::Single,
            vec![
                create(a, "A", &[]),
                create(b, "B", &[]),
                create(c, "B", &[]),
            ],
        )
        .await
        .unwrap();
    let as_of = || records::commit_seq(&store.snapshot().unwrap()).unwrap();
    let link = |t: Uuid, seen: u64| {
        WriteOp::Link(rels::LinkRel {
            id: Uuid::now_v7(),
            source: a,
            target: t,
            rel_type: "T".into(),
            props: Default::default(),
            unique: true,
            seen: Some(rels::SeenLabels {
                source: "A".into(),
                target: "B".into(),
                as_of: seen,
            }),
        })
    };
    // Read on the current state: taken as they are.
    let now = as_of();
    store
        .write(Tenant::Single, vec![link(b, now)])
        .await
        .unwrap();
    // A retype commits after the labels were read: the writer reads the record instead.
    let before = as_of();
    store
        .write(
            Tenant::Single,
            vec![WriteOp::Retype {
                id: a,
                from: "A".into(),
                to: "A2".into(),
            }],
        )
        .await
        .unwrap();
    store
        .write(Tenant::Single, vec![link(c, before)])
        .await
        .unwrap();
    let counts = rels::rel_counts(&store.snapshot().unwrap(), 0).unwrap();
    assert_eq!(counts, vec![("A2".into(), "T".into(), "B".into(), 2)]);
    assert_eq!(assert_adjacency_current(&store, &a), 2);
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Merge, replace, retype and delete keep every index entry and counter exact, and versions
/// grow with each write.
#[tokio::test]
async fn secondary_state_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
    let id = Uuid::now_v7();
    let w = |ops| store.write(Tenant::Single, ops);
    w(vec![create(id, "A", &[("x", 1), ("y", 2)])])
        .await
        .unwrap();
    let v1 = records::get_record(&store.snapshot().unwrap(), 0, &id)
        .unwrap()
        .unwrap()
        .version;
    let mut merge = props(&[("x", 5)]);
    merge.insert("y".into(), None);
    w(vec![WriteOp::Put(PutRecord {
        id,
        mode: PutMode::Merge,
        label: Some("B".into()),
        props: merge,
    })])
    .await
    .unwrap();
    let snap = store.snapshot().unwrap();
    let rec = records::get_record(&snap, 0, &id).unwrap().unwrap();
    assert!(rec.version > v1);
    assert_eq!(rec.label, "B");
    assert_eq!(rec.props.keys().collect::<Vec<_>>(), vec!["x"]);
    assert_eq!(
        records::label_counts(&snap, 0).unwrap(),
        vec![("B".to_string(), 1)]
    );
    let ps = records::properties(&snap, 0).unwrap();
    assert_eq!(ps.len(), 1, "y has no holder left, so its metadata is gone");
    assert_eq!((ps[0].name.as_str(), ps[0].records_count), ("x", 1));
    assert_eq!(count_prefix(&snap, Key::tenant(0, keys::PROP_INDEX).0), 1);
    w(vec![WriteOp::Delete { id }]).await.unwrap();
    let snap = store.snapshot().unwrap();
    for kind in [
        keys::RECORD,
        keys::LABEL_INDEX,
        keys::PROP_INDEX,
        keys::LABEL_COUNT,
        keys::PROP_LABEL_COUNT,
        keys::PROP_BY_ID,
    ] {
        assert_eq!(
            count_prefix(&snap, Key::tenant(0, kind).0),
            0,
            "kind {kind:#x} not empty"
        );
    }
    let err = w(vec![WriteOp::Delete { id }]).await.unwrap_err();
    assert_eq!(err.code, engine::error::ErrorCode::NotFound);
}

/// Named tenants are separate keyspaces; a tenant exists only after its first write.
#[tokio::test]
async fn tenants_are_separate_keyspaces() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), TenancyMode::Multi).unwrap();
    let a = Tenant::Named("a".into());
    let b = Tenant::Named("b".into());
    assert!(store.tenant_id(&a).is_none());
    let id = Uuid::now_v7();
    store
        .write(a.clone(), vec![create(id, "L", &[("x", 1)])])
        .await
        .unwrap();
    let (ta, snap) = (store.tenant_id(&a).unwrap(), store.snapshot().unwrap());
    assert!(records::get_record(&snap, ta, &id).unwrap().is_some());
    assert!(store.tenant_id(&b).is_none());
    let err = store
        .write(b.clone(), vec![WriteOp::Delete { id }])
        .await
        .unwrap_err();
    assert_eq!(err.code, engine::error::ErrorCode::NotFound);
    assert!(
        store.tenant_id(&b).is_none(),
        "a failed write must not create its tenant"
    );
}

/// Snapshots taken while groups are being published and drained into redb (by the applier
/// and by checkpoints, here every MiB of log, running while writes go on in the other log
/// segment) are consistent: the label counter always equals the label index and the record
/// table, and nothing acknowledged is ever missing from a later snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_stay_consistent_while_published_writes_drain() {
    let dir = tempfile::tempdir().unwrap();
    let small_checkpoints = StoreOptions {
        checkpoint_mb: 1,
        ..Default::default()
    };
    let store =
        Arc::new(Store::open_with(dir.path(), TenancyMode::Single, small_checkpoints).unwrap());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<Uuid>::new()));
    let reader = {
        let (store, done, acked) = (store.clone(), done.clone(), acked.clone());
        std::thread::spawn(move || {
            let mut checks = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) || checks < 50 {
                let before: Vec<Uuid> = acked.lock().unwrap().clone();
                let snap = store.snapshot().unwrap();
                let counted = records::label_counts(&snap, 0)
                    .unwrap()
                    .into_iter()
                    .find(|(l, _)| l == "A")
                    .map_or(0, |(_, n)| n as usize);
                let indexed = count_prefix(&snap, Key::tenant(0, keys::LABEL_INDEX).0);
                let stored = count_prefix(&snap, Key::tenant(0, keys::RECORD).0);
                assert_eq!(counted, indexed, "label counter and label index disagree");
                assert_eq!(indexed, stored, "label index and record table disagree");
                // The newest acknowledgements and a spread of older ones.
                let newest = before.len().saturating_sub(200);
                for id in before.iter().step_by(97).chain(&before[newest..]) {
                    assert!(
                        records::get_record(&snap, 0, id).unwrap().is_some(),
                        "an acknowledged record is missing from a later snapshot"
                    );
                }
                checks += 1;
            }
            checks
        })
    };
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (store, acked) = (store.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..1000i64 {
                let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
                let ops = ids
                    .iter()
                    .map(|id| create(*id, "A", &[("x", i), ("t", t)]))
                    .collect();
                store.write(Tenant::Single, ops).await.unwrap();
                acked.lock().unwrap().extend(ids);
            }
        }));
    }
    futures_join(tasks).await;
    done.store(true, std::sync::atomic::Ordering::Release);
    assert!(reader.join().unwrap() >= 50);
    let snap = store.snapshot().unwrap();
    assert_eq!(
        count_prefix(&snap, Key::tenant(0, keys::RECORD).0),
        8 * 1000 * 3
    );
    drop(snap);
    // Reopened (the shutdown checkpoint drained everything into redb), all of it is there.
    drop(Arc::try_unwrap(store).ok().expect("sole owner"));
    let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
    let snap = store.snapshot().unwrap();
    assert_eq!(
        count_prefix(&snap, Key::tenant(0, keys::RECORD).0),
        8 * 1000 * 3
    );
    assert_eq!(
        count_prefix(&snap, Key::tenant(0, keys::LABEL_INDEX).0),
        8 * 1000 * 3
    );
}
