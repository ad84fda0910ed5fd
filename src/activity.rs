//! What the process is serving right now: requests in flight on every front end (an HTTP
//! request from the moment its handler starts until its answer is built; a gRPC call until it
//! answers; a server-streaming call until its first answer). The store reads it to decide
//! whether a lone write may block the only runtime worker for its fdatasync
//! (`store::Store::write`): only a request's own write, when no other request is being
//! served, so nothing waits behind it. Writes from background tasks (tenant reclaim,
//! transaction expiry, and a transaction's commit, which runs as a task of its own) are not
//! requests and never block the worker.
//!
//! Invariant: the count is the number of live `Serving` guards; every front end runs each
//! request inside `serve`, which holds one until the request is answered, so a request being
//! handled is never missing from it (it may briefly count one that is already answered).
//!
//! It also runs requests within their time budget (`within`), which never cancels a write
//! the writer has been handed.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

tokio::task_local! {
    /// Set for the future of a request run by `serve` (not for tasks it spawns).
    static IN_REQUEST: ();
    /// Set for work run by `within`: whether it has handed a write to the writer.
    static HANDED_OFF: Cell<bool>;
}

/// `work` within the time budget `budget`, or `None` once the budget has passed.
///
/// Invariant: a budget never turns a write into an error answer. Once `work` has handed a
/// write to the writer (`write_handed_off`), the write commits whatever happens to the
/// request, so the budget is waived and `work` runs to its answer, which tells the write's
/// outcome. A request that answers `None` (the front ends' 408 `timeout`) wrote nothing.
pub async fn within<F: Future>(budget: Duration, work: F) -> Option<F::Output> {
    HANDED_OFF
        .scope(Cell::new(false), async move {
            let mut work = std::pin::pin!(work);
            match tokio::time::timeout(budget, &mut work).await {
                Ok(out) => Some(out),
                Err(_) if HANDED_OFF.with(Cell::get) => Some(work.await),
                Err(_) => None,
            }
        })
        .await
}

/// Marks the caller's budgeted work (`within`) as having handed a write to the writer; a
/// no-op outside one (background tasks, the CLI).
pub fn write_handed_off() {
    let _ = HANDED_OFF.try_with(|h| h.set(true));
}

/// Runs a request's future counted as in flight, and marked as a request's own work.
pub async fn serve<F: Future>(request: F) -> F::Output {
    let _serving = serving();
    IN_REQUEST.scope((), request).await
}

/// Whether the caller is a request's own work (inside `serve`) and no other request is in
/// flight.
pub fn only_this_request() -> bool {
    IN_REQUEST.try_with(|_| ()).is_ok() && requests_in_flight() == 1
}

/// One request in flight; counted until dropped.
pub struct Serving(());

/// Counts a request in flight until the returned guard is dropped (`serve` takes one).
fn serving() -> Serving {
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    Serving(())
}

impl Drop for Serving {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Requests in flight on every front end, the caller's own included.
pub fn requests_in_flight() -> usize {
    IN_FLIGHT.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_request_alone_may_block_the_worker() {
        // Outside any request (a background task): never.
        assert!(!only_this_request());
        // Inside one: only while no other is in flight (other tests' requests may run
        // meanwhile, so the alone case is asserted only when the count allows it).
        serve(async {
            let other = serving();
            assert!(!only_this_request());
            drop(other);
            assert_eq!(only_this_request(), requests_in_flight() == 1);
        })
        .await;
        // A task spawned by a request is not the request's own work.
        serve(async {
            let spawned = tokio::spawn(async { only_this_request() }).await.unwrap();
            assert!(!spawned);
        })
        .await;
    }

    #[tokio::test]
    async fn a_budget_is_waived_once_a_write_is_handed_off() {
        let budget = Duration::from_millis(10);
        let slow = || tokio::time::sleep(Duration::from_millis(50));
        // Past the budget without a write: no answer.
        assert_eq!(
            within(budget, async {
                slow().await;
                1
            })
            .await,
            None
        );
        // A write handed off before the budget passed: the work runs to its answer.
        let wrote = async {
            write_handed_off();
            slow().await;
            2
        };
        assert_eq!(within(budget, wrote).await, Some(2));
        // Each budget starts clean: a nested one does not inherit the outer one's mark.
        let outer = async {
            write_handed_off();
            within(budget, async {
                slow().await;
                3
            })
            .await
        };
        assert_eq!(within(Duration::from_secs(1), outer).await, Some(None));
        // Outside any budget the mark is a no-op.
        write_handed_off();
    }

    #[test]
    fn guards_count_while_alive() {
        let before = requests_in_flight();
        let a = serving();
        let b = serving();
        assert!(requests_in_flight() >= before + 2);
        drop(a);
        drop(b);
    }
}
