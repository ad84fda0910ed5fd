//! Connections whose peer stopped reading. An answer is written to the socket as fast as the
//! peer reads it; a peer that never reads would otherwise hold the connection, and the whole
//! answer in memory, for as long as it likes. `SendTimeout` fails a write that has made no
//! progress for the request time budget (`limits.request_timeout_ms`), which ends the
//! connection and frees what it held.
//!
//! It sees the socket only. On HTTP/1.1 a peer that stops reading stops the socket writes;
//! an HTTP/2 (gRPC) peer can go on reading the socket while granting no flow-control window,
//! and then no write is ever attempted: that stall is not caught here (docs/security.md).
//!
//! Invariant: a write, vectored write or flush that returns `Pending` starts (or goes on
//! with) one timer; any of them completing stops it. So the timer measures time without
//! progress, never a slow but moving transfer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A connection's IO whose writes fail with `TimedOut` after `limit` without progress.
pub struct SendTimeout<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> SendTimeout<T> {
    pub fn new(io: T, limit: Duration) -> Self {
        SendTimeout {
            io,
            limit,
            stalled: None,
        }
    }

    /// After the inner IO answered `Pending`: still waiting, or failed once the stall timer
    /// has run out.
    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer read nothing of the answer within the request time budget",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Passes a finished write on, and stops the stall timer.
    fn done<R>(&mut self, r: io::Result<R>) -> Poll<io::Result<R>> {
        self.stalled = None;
        Poll::Ready(r)
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for SendTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for SendTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => this.done(r),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => this.done(r),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(r) => this.done(r),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
