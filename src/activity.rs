//! What the process is serving right now: requests in flight on every front end (an HTTP
//! request from the moment its handler starts until its answer is built; a gRPC call until it
//! answers). The store reads it to decide whether a lone write may block the only runtime
//! worker for its fdatasync (`store::Store::write`): when no other request is being served,
//! nothing waits behind it.
//!
//! Invariant: the count is the number of live `Serving` guards; every front end takes one per
//! request and holds it until the request is answered, so a request being handled is never
//! missing from it (it may briefly count one that is already answered).

use std::sync::atomic::{AtomicUsize, Ordering};

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One request in flight; counted until dropped.
pub struct Serving(());

/// Counts a request in flight until the returned guard is dropped.
pub fn serving() -> Serving {
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
