//! One gRPC (HTTP/2) connection, served on one task.
//!
//! hyper's HTTP/2 server hands every request stream to an executor. With tokio's, each
//! stream is a task of its own: it runs on whichever worker picks it up and wakes the
//! connection task once per frame it queues (headers, data, trailers), so the connection
//! often flushed a unary answer in two writes (headers and data, then the trailers) and
//! every call paid cross-thread wake-ups. HTTP/1.1 answers on the connection's own task in
//! one write.
//!
//! Here the executor is the connection's own inbox: hyper queues a stream's future in it,
//! and the connection's task polls those futures itself between polls of the connection.
//! Invariants:
//! - a stream future is only ever polled on its connection's task, so the answers of every
//!   stream that finished in one turn go out in one flush;
//! - work that may take long (a search past its inline read budget, scans, a write queued
//!   behind others) waits off the task (the blocking pool, the writer), so one connection's
//!   slow call does not hold up its other streams; what runs on the task is bounded (a point
//!   read, a search of at most 256 key reads, a commit that found the store idle);
//! - when the connection ends, its unfinished streams are dropped, as hyper drops an
//!   HTTP/1.1 request future whose connection closed.

use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection: it only queues the stream futures hyper hands it.
#[derive(Clone, Default)]
pub struct StreamInbox(Arc<Mutex<Vec<StreamFuture>>>);

impl<F> hyper::rt::Executor<F> for StreamInbox
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::pin(fut));
    }
}

impl StreamInbox {
    fn take(&self) -> Vec<StreamFuture> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Turns (connection, then its streams) per task turn before the task yields to others.
const TURNS_PER_POLL: usize = 16;

/// Drives a connection and the streams it spawned into `inbox`, on the task that awaits it.
/// Resolves when the connection ends.
pub struct Driven<C> {
    conn: Pin<Box<C>>,
    inbox: StreamInbox,
    streams: FuturesUnordered<StreamFuture>,
}

impl<C: Future> Driven<C> {
    pub fn new(conn: C, inbox: StreamInbox) -> Self {
        Driven {
            conn: Box::pin(conn),
            inbox,
            streams: FuturesUnordered::new(),
        }
    }

    /// The connection future, for graceful shutdown.
    pub fn conn(&mut self) -> Pin<&mut C> {
        self.conn.as_mut()
    }
}

impl<C: Future> Future for Driven<C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let me = &mut *self;
        for _ in 0..TURNS_PER_POLL {
            // The connection reads what arrived (queueing new streams in the inbox) and
            // flushes every frame the streams queued since its last turn.
            if let Poll::Ready(out) = me.conn.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            let new = me.inbox.take();
            let mut progressed = !new.is_empty();
            me.streams.extend(new);
            // Streams run until each waits (for the engine, for send capacity, for more
            // request body); a finished stream has queued its whole answer.
            while let Poll::Ready(Some(())) = me.streams.poll_next_unpin(cx) {
                progressed = true;
            }
            if !progressed {
                return Poll::Pending;
            }
        }
        // Still busy: let the worker run other tasks, then continue.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A connection's socket, presented to h2 as one without vectored writes. h2 copies a DATA
/// payload into its write buffer only below a threshold (256 bytes on a vectored socket, 1
/// KiB on this one) and flushes the buffer before any payload it does not copy; a typical
/// unary answer (300–1000 bytes) therefore cost a write(2) of its own on the vectored
/// socket, while here the answers of every stream finished in one turn leave in one write.
pub struct Unvectored<T>(pub T);

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Unvectored<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for Unvectored<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}
