//! Writer guarantees, checked against the store directly.

use engine::model::{infer::PropWrites, PropType, PropValue, Scalar};
use engine::store::keys::{self, Key};
use engine::store::kv::KvRead;
use engine::store::records::{self, PutMode, PutRecord, WriteOp, WriteOutcome};
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
