//! Transaction leases: a transaction that ends by commit or rollback leaves no lease (no timer,
//! no task) behind, and one whose ttl elapses expires on time even when the lease keeper was
//! sleeping until a later deadline.

use engine::engine::{Engine, Outcome};
use serde_json::{json, Value};
use std::time::Duration;

async fn tx(e: &Engine, body: Value) -> Outcome {
    crate::run_protocol(e, json!({"kind": "transaction", "transaction": body}))
        .await
        .unwrap()
}

async fn begin(e: &Engine, ttl_ms: u64) -> String {
    match tx(e, json!({"kind": "begin", "ttlMs": ttl_ms})).await {
        Outcome::TransactionBegun { id, .. } => id.to_string(),
        other => panic!("begin answered {other:?}"),
    }
}

async fn commit_status(e: &Engine, id: &str) -> &'static str {
    match tx(e, json!({"kind": "commit", "transactionId": id})).await {
        Outcome::TransactionOutcome(o) => o.status,
        other => panic!("commit answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_transactions_leave_no_lease_and_due_ones_expire_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let e = crate::in_process_engine(dir.path());
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(begin(&e, 30_000).await);
    }
    assert_eq!(e.transactions.leases(), 200);
    for (i, id) in ids.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(commit_status(&e, id).await, "committed");
        } else {
            tx(&e, json!({"kind": "rollback", "transactionId": id})).await;
        }
    }
    assert_eq!(
        e.transactions.leases(),
        0,
        "commit and rollback take the lease out"
    );

    // The keeper sleeps until the 30 s lease; a shorter one taken after must wake it.
    let long = begin(&e, 30_000).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let short = begin(&e, 100).await;
    assert_eq!(e.transactions.leases(), 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(e.transactions.leases(), 1, "the short lease expired");
    assert_eq!(commit_status(&e, &short).await, "expired");
    assert_eq!(commit_status(&e, &long).await, "committed");
    assert_eq!(e.transactions.leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_keeper_does_not_keep_a_dropped_engine_alive() {
    let dir = tempfile::tempdir().unwrap();
    let e = crate::in_process_engine(dir.path());
    begin(&e, 30_000).await; // starts the keeper, which then sleeps
    let store = e.store.clone();
    drop(e);
    // The keeper holds the store only weakly and looks again within a second, then ends.
    let mut alone = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if std::sync::Arc::strong_count(&store) == 1 && std::sync::Arc::weak_count(&store) == 0 {
            alone = true;
            break;
        }
    }
    assert!(
        alone,
        "something still refers to the store 4 s after the engine was dropped"
    );
}
