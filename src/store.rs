//! The tenant-keyspaced graph store on redb.
//!
//! Writes: one writer (`WriterCore`, behind a mutex) commits groups. The writer thread drains
//! queued batches (a lone writer's write commits on its own thread: `Store::write`), applies each on its own
//! overlay over the latest view (validation and mutation see the latest state, and a failing
//! batch contributes nothing), appends the group's writes to the redo log with one fdatasync,
//! publishes them (readers see them from then on), then acknowledges every caller.
//! Acknowledged therefore means durable (in the log, replayed at startup) and visible.
//!
//! Published writes: a group's writes stay in memory, in a list every snapshot reads through,
//! until the applier thread has written them into redb (a commit that does not fsync, many
//! groups at a time); redb inserts are off the acknowledged path. Invariants: a batch leaves
//! the list only after redb committed it; redb receives batches in commit order, whole, one
//! drain at a time; a snapshot takes the list before its redb read transaction and drops the
//! batches redb already holds by sequence (`kv::Snapshot::new`). Checkpoints drain the list
//! into a durable redb commit and empty the log. Reads: MVCC snapshots, never blocked by the
//! writer.

pub mod codec;
pub mod keys;
pub mod kv;
pub mod memo;
pub mod records;
pub mod relationships;
mod slots;
pub mod snapshot;
pub mod wal;

use crate::error::{Error, Result};
use keys::Key;
use kv::{Batch, KvRead, Overlay, Snapshot, KV};
use records::{RecordWriter, WriteOp, WriteOutcome};
use redb::{ReadableDatabase, ReadableTable};
use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

/// The one storage format version this build reads (see docs/design.md). Version 2 gave
/// adjacency entries their values (the other end's label, the relationship's body).
pub const STORAGE_FORMAT_VERSION: u64 = 2;
/// The older version this build upgrades in place at startup (`relationships::upgrade_adjacency_from_v1`).
const UPGRADES_FROM: u64 = 1;

/// Upper bound on batches committed together in one redb transaction.
const MAX_GROUP: usize = 512;
/// Batches that may wait in the writer's queue.
const QUEUE: usize = 4096;
/// A write commits inline (on the request's own thread) only after this many writes in a row
/// found no other write in progress: a client writing alone, one write after another. Under
/// concurrent writes an inline commit blocks a runtime worker for an fdatasync while other
/// writes wait behind it, and its groups of one displace group commit (docs/design.md).
const INLINE_AFTER_ALONE: usize = 16;
/// The most ops a write may hold to commit on the only runtime worker (`commit_inline`);
/// larger batches (imports, bulk links) take longer to apply than one fdatasync.
const ON_WORKER_MAX_OPS: usize = 16;
/// A checkpoint (a durable redb commit) takes a time that grows with the writes since the
/// previous one (measured: 0.3-1.8 s after 50-256 MiB of log). Under load it runs on the
/// applier thread while the writer goes on in the other log segment; when idle, the writer
/// runs it itself.
/// Checkpoint when the active log segment grows past `storage.checkpoint_mb` (default)...
pub const DEFAULT_CHECKPOINT_MB: u64 = 64;
/// ...or when its oldest write is this old...
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
/// ...or when no write arrived for this long.
const CHECKPOINT_IDLE: std::time::Duration = std::time::Duration::from_millis(500);
/// The writer waits for the applier before a group while this many published keys...
const MAX_PUBLISHED_KEYS: usize = 2_000_000;
/// ...or this many published batches are not in redb yet (bounds memory and the batches a
/// read looks through; a checkpoint's durable commit lets ~1,000 groups gather at W-TX rates).
const MAX_PUBLISHED_BATCHES: usize = 2048;
/// The applier lets published groups gather this long before it drains them, or until
/// APPLY_BATCHES or APPLY_KEYS are waiting, whichever comes first: a drain rewrites every
/// B-tree page it touches (copy on write), so fewer, larger drains rewrite shared pages
/// (counters, label index, upper levels) less often; acknowledgements do not wait for it.
/// While the applier keeps up, the batch cap bounds the batches a scan merges (point reads
/// skip batches by their key filters; a checkpoint's long drain lets up to
/// MAX_PUBLISHED_BATCHES gather); the key threshold, well under MAX_PUBLISHED_KEYS, starts a
/// drain of large groups (imports) before the writer has to wait for room.
const APPLY_PAUSE: std::time::Duration = std::time::Duration::from_millis(30);
const APPLY_BATCHES: usize = 64;
const APPLY_KEYS: usize = MAX_PUBLISHED_KEYS / 4;
/// Groups of at least this many writes have their key filter and memo notes made on a second
/// thread while their log write runs (~30 µs to start a thread; a 100,000-link bulk request's
/// group has ~300,000 writes, ~60 ms of such work).
const PREPARE_APART_KEYS: usize = 16_384;
/// The applier asks the kernel to start writing the store file's dirty pages back at most
/// this often, so a checkpoint's fsync finds little left to write (it held the writer for
/// 2-3 s after ~250 MiB of log without it).
const WRITEBACK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenancyMode {
    Single,
    Multi,
}

impl TenancyMode {
    fn tag(self) -> u8 {
        match self {
            TenancyMode::Single => 0,
            TenancyMode::Multi => 1,
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            TenancyMode::Single => "single-tenant mode",
            TenancyMode::Multi => "multitenant mode (--multitenant)",
        }
    }
}

/// Which keyspace an operation addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tenant {
    /// The one keyspace of a single-tenant store (tenant 0).
    Single,
    Named(String),
    /// A purged tenant's keyspace by id, for its background reclamation only (no request
    /// ever names a tenant this way; the name no longer resolves to it).
    Purged(u64),
}

struct WriteRequest {
    tenant: Tenant,
    ops: Vec<WriteOp>,
    reply: oneshot::Sender<Result<Vec<WriteOutcome>>>,
}

type TenantCache = Arc<RwLock<HashMap<String, u64>>>;

/// How a committed batch changed the tenant directory.
enum TenantChange {
    Created(String, u64),
    Dropped(String),
}

pub struct Store {
    published: Arc<Published>,
    pub mode: TenancyMode,
    tenants: TenantCache,
    sender: RwLock<Option<mpsc::Sender<WriteRequest>>>,
    core: Arc<Mutex<WriterCore>>,
    /// Calls of `write` in progress.
    writes_in_flight: std::sync::atomic::AtomicUsize,
    /// Calls of `write` in a row that found no other write in progress (reset by one that
    /// did). Only a long run of them commits inline: see `write`.
    alone_streak: std::sync::atomic::AtomicUsize,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    applier: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The data directory's lock (`lock_data_dir`), held until the store is dropped (after
    /// `shutdown`: fields drop after `Drop::drop`).
    _dir_lock: Option<std::fs::File>,
}

/// Writes acknowledged and visible but not yet in redb, and the drain that moves them there
/// (see the module comment for the invariants).
struct Published {
    /// The newest redb view a snapshot opened, shared by the snapshots after it until a drain
    /// commits (opening a read transaction and its table was ~5% of a read by id). Declared
    /// first so it is dropped before `db`. Invariant: a view is used only when its `applied`
    /// is at least `PublishedState::drained` read with the list, so it holds every batch that
    /// left the list; a drain empties it after trimming, so no read transaction outlives the
    /// next drain by more than one racing reader's refill.
    view: Mutex<Option<Arc<kv::RedbView>>>,
    db: Arc<redb::Database>,
    state: Mutex<PublishedState>,
    /// Signalled when batches are published or drained, and at stop.
    changed: Condvar,
    /// Held for a whole drain (list taken, redb commit, list trimmed): the applier thread and
    /// a checkpoint never interleave, so redb never gets an older batch after a newer one.
    draining: Mutex<()>,
    /// The store file, opened read-only, for writeback hints only.
    store_file: Option<std::fs::File>,
    /// Key runs snapshots read from memory while unchanged; told of every batch before it is
    /// published (`publish`).
    memo: Arc<memo::KeyMemo>,
}

#[derive(Default)]
struct PublishedState {
    batches: kv::Published,
    /// Keys in `batches`.
    keys: usize,
    /// The sequence of the last batch a drain committed to redb and took off the list.
    drained: u64,
    /// A drain failed: redb may lack published writes, so no more are taken (the redo log
    /// holds them; a restart replays it).
    failed: bool,
    stop: bool,
    /// A checkpoint the writer asked for (with the bytes of log it covers), not started yet.
    checkpoint_requested: Option<u64>,
    /// The applier finished the requested checkpoint: the store is durable up to the rotated
    /// log segment's last frame, which the writer may now release.
    checkpoint_done: bool,
}

impl Published {
    fn lock(&self) -> std::sync::MutexGuard<'_, PublishedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A consistent view: the published list first, redb's side second: the shared view when
    /// it holds every batch drained before the list was taken, else a new read transaction
    /// (begun after the list was taken, so it holds them), which becomes the shared view.
    fn snapshot(&self) -> Result<Snapshot> {
        let (batches, drained) = {
            let st = self.lock();
            (st.batches.clone(), st.drained)
        };
        let cached = self.views().clone();
        let view = match cached {
            Some(v) if v.applied >= drained => v,
            _ => {
                let fresh = Arc::new(kv::RedbView::new(&self.db.begin_read()?)?);
                let mut shared = self.views();
                if shared.as_ref().is_none_or(|v| v.applied < fresh.applied) {
                    *shared = Some(fresh.clone());
                }
                fresh
            }
        };
        Ok(Snapshot::new(view, &batches).with_memo(self.memo.clone()))
    }

    fn views(&self) -> std::sync::MutexGuard<'_, Option<Arc<kv::RedbView>>> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Makes a logged group visible.
    #[cfg(test)]
    fn publish(&self, batch: Batch) {
        self.note(batch.seq, &batch.writes);
        self.push(batch);
    }

    /// Tells the memo of a group's writes. Before the group is visible: the memo's invariant
    /// (store/memo.rs).
    fn note(&self, seq: u64, writes: &std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        self.memo.note(seq, writes.keys().map(|k| k.as_slice()));
    }

    /// Makes a logged group, already `note`d, visible.
    fn push(&self, batch: Batch) {
        let mut st = self.lock();
        let keys_before = st.keys;
        st.keys += batch.writes.len();
        let was_empty = st.batches.is_empty();
        Arc::make_mut(&mut st.batches).push(Arc::new(batch));
        // The applier waits for an empty list to fill, then for a full one.
        if was_empty
            || st.batches.len() == APPLY_BATCHES
            || (keys_before < APPLY_KEYS && st.keys >= APPLY_KEYS)
        {
            self.changed.notify_all();
        }
    }

    /// Lets published groups gather before a drain: until APPLY_BATCHES batches or APPLY_KEYS
    /// keys are waiting, or APPLY_PAUSE has passed, or a checkpoint or stop is asked for.
    fn gather(&self) {
        let until = std::time::Instant::now() + APPLY_PAUSE;
        let mut st = self.lock();
        while st.batches.len() < APPLY_BATCHES
            && st.keys < APPLY_KEYS
            && st.checkpoint_requested.is_none()
            && !st.stop
        {
            let now = std::time::Instant::now();
            if now >= until {
                break;
            }
            st = self
                .changed
                .wait_timeout(st, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Asks the applier for a checkpoint of everything published so far.
    fn request_checkpoint(&self, log_bytes: u64) {
        self.lock().checkpoint_requested = Some(log_bytes);
        self.changed.notify_all();
    }

    /// Whether the requested checkpoint finished (once).
    fn take_checkpoint_done(&self) -> bool {
        std::mem::take(&mut self.lock().checkpoint_done)
    }

    /// Whether a commit now would find room without waiting, with half the bounds to spare.
    fn has_room_to_spare(&self) -> bool {
        let st = self.lock();
        st.keys < MAX_PUBLISHED_KEYS / 2 && st.batches.len() < MAX_PUBLISHED_BATCHES / 2
    }

    /// Waits while the applier is too far behind; answers false if a drain failed (no more
    /// writes may be published).
    fn wait_for_room(&self) -> bool {
        let mut st = self.lock();
        while !st.failed
            && (st.keys >= MAX_PUBLISHED_KEYS || st.batches.len() >= MAX_PUBLISHED_BATCHES)
        {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        !st.failed
    }

    /// Starts writeback of the store file's dirty pages without waiting for it (what redb's
    /// commits without fsync left in the page cache); the next checkpoint's fsync then has
    /// less to write. A hint only: failures are ignored.
    fn start_writeback(&self) {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.store_file {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid open descriptor; offset 0 and length 0 mean the whole file, and
            // SYNC_FILE_RANGE_WRITE only initiates writeback (no wait, no memory passed).
            unsafe {
                libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }

    /// Writes every published batch into redb in one transaction (durable: an `Immediate`
    /// commit, even with nothing published), then takes them off the list.
    fn drain(&self, durable: bool) -> Result<()> {
        let _one = self.draining.lock().unwrap_or_else(|p| p.into_inner());
        let batches = self.lock().batches.clone();
        if batches.is_empty() && !durable {
            return Ok(());
        }
        let done = (|| -> Result<()> {
            let mut txn = self.db.begin_write()?;
            if durable {
                txn.set_quick_repair(true);
            }
            txn.set_durability(if durable {
                redb::Durability::Immediate
            } else {
                redb::Durability::None
            })
            .map_err(|e| Error::internal(format!("set durability: {e}")))?;
            {
                let mut table = txn.open_table(KV)?;
                // A counter every group rewrites lands once.
                let all = kv::newest_wins(&batches, (Bound::Unbounded, Bound::Unbounded));
                apply_in_order(&mut table, all.into_iter())?;
            }
            txn.commit()?;
            Ok(())
        })();
        let mut st = self.lock();
        match done {
            Ok(()) => {
                // The list only grew at its end meanwhile: its first entries are these.
                let keys: usize = batches.iter().map(|b| b.writes.len()).sum();
                Arc::make_mut(&mut st.batches).drain(..batches.len());
                st.keys -= keys;
                if let Some(last) = batches.last() {
                    st.drained = last.seq;
                }
            }
            Err(_) => st.failed = true,
        }
        self.changed.notify_all();
        drop(st);
        // The shared view predates this commit: let its read transaction go (redb keeps the
        // pages a live read transaction sees), outside the state lock.
        let old = self.views().take();
        drop(old);
        done
    }
}

/// Entries a cursor steps over before it seeks instead (a seek is one descent from the root).
const CURSOR_STEPS: usize = 4;

/// Writes a stream of writes in strictly ascending key order into `table` through one cursor
/// kept at the gap before the next key: a key that falls in that gap is inserted there (redb
/// buffers a run of such inserts and builds their leaves together, so keys appended one after
/// another cost far less than a descent each); an equal entry is replaced or removed; a key
/// further on moves the cursor a few entries, or seeks.
fn apply_in_order<'a>(
    table: &mut redb::Table<&'static [u8], &'static [u8]>,
    writes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<()> {
    type Cursor<'c> = redb::CursorMut<'c, &'static [u8], &'static [u8]>;
    // The key after the gap. Not asked while inserts are buffered: the entry after the gap
    // does not change then, and asking would cost a descent.
    fn after(c: &mut Cursor<'_>) -> Result<Option<Vec<u8>>> {
        Ok(c.peek_next()?.map(|(k, _)| k.value().to_vec()))
    }
    let mut writes = writes.peekable();
    let Some(&(first, _)) = writes.peek() else {
        return Ok(());
    };
    let mut cursor = table.lower_bound_mut(Bound::Included(first))?;
    let mut next = after(&mut cursor)?;
    for (k, v) in writes {
        // Invariant: every entry before the gap sorts below k; `next` is the one after it.
        let mut steps = 0;
        while next.as_deref().is_some_and(|n| n < k) {
            if steps < CURSOR_STEPS {
                cursor.next()?;
                steps += 1;
            } else {
                cursor.close()?;
                cursor = table.lower_bound_mut(Bound::Included(k))?;
            }
            next = after(&mut cursor)?;
        }
        if next.as_deref() == Some(k) {
            cursor.remove_next()?;
            next = after(&mut cursor)?;
        }
        if let Some(v) = v {
            cursor.insert_before(k, v)?;
        }
    }
    cursor.close()?;
    Ok(())
}

/// The info line every checkpoint logs.
fn log_checkpoint(log_bytes: u64, start: std::time::Instant, writes_went_on: bool) {
    crate::log::info(&format!(
        "checkpoint: {:.1} MiB of redo log made durable in the store in {} ms{}",
        log_bytes as f64 / (1 << 20) as f64,
        start.elapsed().as_millis(),
        if writes_went_on {
            " (writes went on)"
        } else {
            ""
        }
    ));
}

/// Nice levels the applier thread runs below the process (`lower_this_thread_priority`).
const APPLIER_NICE: i32 = 5;

/// Lowers the calling thread's CPU priority by `by` nice levels (Linux: a thread's nice
/// value is its own). Lowering needs no privilege. A hint only: failures are ignored.
fn lower_this_thread_priority(by: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid takes no arguments; getpriority/setpriority on this thread's id pass
    // and return plain integers (no memory).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        // getpriority returns the nice value (-20..=19); -1 is also its error value, which
        // errno tells apart.
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            return;
        }
        libc::setpriority(libc::PRIO_PROCESS, tid, (now + by).min(19));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = by;
}

/// Drains published batches into redb as they come; many groups land in one redb commit when
/// the writer outpaces it.
///
/// The applier runs `APPLIER_NICE` levels below the request and writer threads: its work
/// (copying published groups into redb, checkpoints) is off every request's path, and when
/// the CPUs are contended it yields them to the threads that are on it (W8 c=32 on two
/// cores: +~6% creates/s in interleaved pairs). It still gets idle CPU at once, and the
/// writer's room bounds (`Published::wait_for_room`) keep it from falling far behind.
fn applier_loop(p: Arc<Published>) {
    lower_this_thread_priority(APPLIER_NICE);
    let mut last_writeback = std::time::Instant::now();
    loop {
        let checkpoint = {
            let mut st = p.lock();
            // Work: batches to drain or a checkpoint to make, unless a drain failed.
            while (st.failed || st.batches.is_empty() && st.checkpoint_requested.is_none())
                && !st.stop
            {
                st = p.changed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.stop {
                return;
            }
            st.checkpoint_requested.take()
        };
        if let Some(log_bytes) = checkpoint {
            // Everything the rotated log segment holds was published before the request.
            let start = std::time::Instant::now();
            match p.drain(true) {
                Ok(()) => {
                    p.lock().checkpoint_done = true;
                    log_checkpoint(log_bytes, start, true);
                }
                Err(e) => crate::log::error(&format!(
                    "checkpoint failed ({}); refusing writes until restart (the redo log keeps them)",
                    e.message
                )),
            }
            continue;
        }
        p.gather();
        if let Err(e) = p.drain(false) {
            crate::log::error(&format!(
                "applying committed writes to the store failed ({}); refusing writes until restart (the redo log keeps them)",
                e.message
            ));
        }
        if last_writeback.elapsed() >= WRITEBACK_INTERVAL {
            p.start_writeback();
            last_writeback = std::time::Instant::now();
        }
    }
}

/// The file a server holds an exclusive lock on (`flock`) while it has the data directory
/// open; the lock goes with the process, however it ends.
const LOCK_FILE: &str = "engine.lock";

/// The name a new store file is built under before it takes its real name.
const CREATING: &str = "engine.redb.creating";

/// Takes the data directory for this process, or refuses when another process has it.
///
/// Invariant: `prepare_store_file` changes the directory's files only under this lock, so
/// no two processes ever create, set aside or remove them at once. The one case without
/// it: a directory this process cannot write to and that holds no lock file; the server
/// then runs on the store as it finds it (it could not create or move files there either)
/// and redb's own lock on the store file keeps a second server off it.
fn lock_data_dir(dir: &Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    // Anything but a regular file (or a link to one) at the name is refused before it is
    // opened: a FIFO would block the open.
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
        return Err(startup(format!(
            "{} is not a regular file; remove it",
            path.display()
        )));
    }
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        // A FIFO at the name fails at once (ENXIO) instead of waiting for a reader.
        .custom_flags(libc::O_NONBLOCK)
        .open(&path);
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            let unwritable = matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            );
            let absent = std::fs::symlink_metadata(&path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            if unwritable && absent {
                crate::log::warn(&format!(
                    "cannot create {} ({e}); serving the store as it is, without the data directory lock",
                    path.display()
                ));
                return Ok(None);
            }
            // An existing lock file that cannot be opened read-only either: refused.
            let read_only = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path);
            read_only.map_err(|_| startup(format!("cannot open {}: {e}", path.display())))?
        }
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(startup(format!(
            "data directory {} is in use by another engine process (it holds {LOCK_FILE})",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
            Err(startup(format!(
                "cannot lock {}: {e} (this platform has no file locks the engine can use)",
                path.display()
            )))
        }
        // Without the lock two servers could handle the store's files at once: refused.
        Err(std::fs::TryLockError::Error(e)) => Err(startup(format!(
            "cannot lock {}: {e} (the data directory must be on a file system with flock)",
            path.display()
        ))),
    }
}

/// Makes `path` name a whole redb file before redb opens it. `locked`: whether this process
/// holds the data directory lock; without it nothing is created, moved or removed.
///
/// Invariant: `engine.redb` names a whole redb file or something the operator put there;
/// the engine never deletes a store file. redb sizes a new file and writes its header before
/// its magic number, so a start killed inside `Database::create` used to leave a file without
/// the magic number under the store's name, which no later start could open ("magic number
/// mismatch"). Now a new store is built as `engine.redb.creating`, synced, and renamed into
/// place. A regular file without the magic number, with nothing past its header page and with
/// no redo-log segment beside it (the segments are created only after the store opened, so no
/// server ever ran on it) is what a killed first start of an older build left: it is renamed to
/// `engine.redb.unfinished.<unix ms>` and a new store is created. A missing store file with a
/// redo log beside it is refused. Anything else at the name (a dangling link, a foreign file)
/// is left for redb's open to refuse by name.
fn prepare_store_file(dir: &Path, path: &Path, locked: bool) -> Result<()> {
    if !locked {
        return match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(startup(format!(
                "cannot create store {}: the data directory is not writable",
                path.display()
            ))),
            _ => Ok(()),
        };
    }
    let leftover = dir.join(CREATING);
    match std::fs::remove_file(&leftover) {
        Ok(()) => crate::log::info(&format!(
            "removed {}, left by a start that was killed while creating the store",
            leftover.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // Only in the way of creating a store, whose error then names it.
        Err(e) => crate::log::warn(&format!("cannot remove {}: {e}", leftover.display())),
    }
    match std::fs::symlink_metadata(path) {
        // The segments are created only after the store file: a log without it is a
        // directory that lost its store, which a new empty one would silently replace.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && has_redo_log(dir) => {
            Err(startup(format!(
                "store file {} is missing but the redo log beside it is there; restore the store file, or move the wal*.log files away to start an empty store",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_store_file(dir, path),
        Ok(m) if m.is_file() && never_finished(dir, path) => {
            let aside = unused_name(dir, "engine.redb.unfinished");
            std::fs::rename(path, &aside).map_err(|e| {
                startup(format!(
                    "store file {} has no redb magic number and no redo log beside it (a first start was killed while creating it), and it cannot be set aside: {e}",
                    path.display()
                ))
            })?;
            crate::log::warn(&format!(
                "store file {} had no redb magic number and no redo log beside it (a first start was killed while creating it); set aside as {}, creating the store anew",
                path.display(),
                aside.display()
            ));
            create_store_file(dir, path)
        }
        _ => Ok(()),
    }
}

/// `<dir>/<stem>.<unix ms>`, with `.<n>` added when that name is taken.
fn unused_name(dir: &Path, stem: &str) -> std::path::PathBuf {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let base = format!("{stem}.{millis}");
    (0u32..)
        .map(|n| match n {
            0 => dir.join(&base),
            n => dir.join(format!("{base}.{n}")),
        })
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .expect("an unused name")
}

/// Whether any redo-log segment, even a dangling link, exists in `dir`.
fn has_redo_log(dir: &Path) -> bool {
    wal::SEGMENT_FILES
        .iter()
        .any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
}

/// Whether `path` is what a start killed inside redb's `Database::create` leaves: no magic
/// number (its first 9 bytes zero or missing), nothing but zeroes after the header page (redb
/// had only sized the file and written the header), and no redo-log segment beside it.
fn never_finished(dir: &Path, path: &Path) -> bool {
    use std::io::Read;
    /// redb's header page; a killed create wrote nothing past it.
    const HEADER_PAGE: usize = 4096;
    /// A killed create leaves about 1 MiB; anything much larger held data.
    const MAX_LEN: u64 = 16 << 20;
    if has_redo_log(dir) {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    if f.metadata().map_or(true, |m| m.len() > MAX_LEN) {
        return false;
    }
    // The magic number first: a whole store is read no further.
    let mut bytes = Vec::new();
    if (&mut f).take(9).read_to_end(&mut bytes).is_err() || bytes.iter().any(|&b| b != 0) {
        return false;
    }
    if f.read_to_end(&mut bytes).is_err() {
        return false;
    }
    bytes.iter().skip(HEADER_PAGE).all(|&b| b == 0)
}

/// Creates an empty redb file at `path`: built under `engine.redb.creating`, synced, then
/// renamed into place and the directory synced, so `path` never names a half-written file.
fn create_store_file(dir: &Path, path: &Path) -> Result<()> {
    let tmp = dir.join(CREATING);
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        startup(format!(
            "cannot create store {} (built as {}): {what}: {e}",
            path.display(),
            tmp.display()
        ))
    };
    drop(redb::Database::create(&tmp).map_err(|e| failed("create", &e))?);
    let synced = std::fs::File::open(&tmp).and_then(|f| f.sync_all());
    synced.map_err(|e| failed("sync", &e))?;
    std::fs::rename(&tmp, path).map_err(|e| failed("rename", &e))?;
    sync_dir(dir).map_err(|e| failed("sync the data directory", &e))
}

/// Makes the directory's entries (a file created or renamed in it) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

fn startup(msg: impl Into<String>) -> Error {
    Error::new(crate::error::ErrorCode::Internal, msg)
}

/// The store's default read cache, MiB (`storage.cache_mb`).
pub const DEFAULT_CACHE_MB: u64 = 1024;

/// Store settings (the config file's `[storage]` section).
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// redb's page cache, MiB.
    pub cache_mb: u64,
    /// Redo-log MiB after which a checkpoint starts.
    pub checkpoint_mb: u64,
    /// Budget of the key memo (store/memo.rs), MiB; 0 turns it off.
    pub key_memo_mb: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_mb: DEFAULT_CACHE_MB,
            checkpoint_mb: DEFAULT_CHECKPOINT_MB,
            key_memo_mb: memo::DEFAULT_KEY_MEMO_MB,
        }
    }
}

impl Store {
    /// Opens or creates the store in `dir`. Refuses another storage format version or the
    /// other tenancy mode with the messages SPEC.md and BEHAVIOUR.md §7 give.
    pub fn open(dir: &Path, mode: TenancyMode) -> Result<Store> {
        Self::open_with(dir, mode, StoreOptions::default())
    }

    /// `open` with the store settings of the config file's `[storage]` section.
    pub fn open_with(dir: &Path, mode: TenancyMode, opts: StoreOptions) -> Result<Store> {
        let StoreOptions {
            cache_mb,
            checkpoint_mb,
            key_memo_mb,
        } = opts;
        std::fs::create_dir_all(dir).map_err(|e| {
            startup(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let dir_lock = lock_data_dir(dir)?;
        let path = dir.join("engine.redb");
        prepare_store_file(dir, &path, dir_lock.is_some())?;
        let db = redb::Database::builder()
            .set_cache_size(usize::try_from(cache_mb << 20).unwrap_or(usize::MAX))
            .open(&path)
            .map_err(|e| startup(format!("cannot open store {}: {e}", path.display())))?;
        let (mut wal, frames) = wal::Wal::open(dir)?;
        let mut txn = db.begin_write()?;
        txn.set_quick_repair(true);
        let mut upgrade = false;
        let mut upgraded = None;
        let (last_seq, tenants, replayed) = {
            let mut t = txn.open_table(KV)?;
            let fmt = Key::system(keys::SYS_FORMAT).0;
            match KvRead::get(&t, &fmt)?.map(|v| codec::decode_u64(&v)) {
                None => {
                    if t.first()?.is_some() {
                        return Err(startup("store has data but no storage format version"));
                    }
                    t.insert(
                        fmt.as_slice(),
                        codec::encode_u64(STORAGE_FORMAT_VERSION).as_slice(),
                    )?;
                    t.insert(
                        Key::system(keys::SYS_MODE).bytes(),
                        codec::encode_u64(mode.tag() as u64).as_slice(),
                    )?;
                    t.insert(
                        Key::system(keys::SYS_COMMIT_SEQ).bytes(),
                        codec::encode_u64(0).as_slice(),
                    )?;
                    t.insert(
                        Key::system(keys::SYS_NEXT_TENANT).bytes(),
                        codec::encode_u64(1).as_slice(),
                    )?;
                }
                Some(v) => {
                    let v = v?;
                    upgrade = v == UPGRADES_FROM;
                    if v != STORAGE_FORMAT_VERSION && !upgrade {
                        return Err(startup(format!(
                            "unsupported storage format version {v}; this build uses version {STORAGE_FORMAT_VERSION}"
                        )));
                    }
                }
            }
            // Redo what the log holds beyond the store's durable commit sequence.
            let durable = records::commit_seq(&t)?;
            let mut replayed = 0;
            for f in frames.iter().filter(|f| f.seq > durable) {
                for (k, v) in &f.writes {
                    match v {
                        Some(v) => t.insert(k.as_slice(), v.as_slice())?,
                        None => t.remove(k.as_slice())?,
                    };
                }
                replayed += 1;
            }
            let stored = match KvRead::get(&t, Key::system(keys::SYS_MODE).bytes())? {
                Some(v) => codec::decode_u64(&v)?,
                None => return Err(startup("store has no tenancy mode")),
            };
            if stored != mode.tag() as u64 {
                let created = if stored == 0 {
                    TenancyMode::Single
                } else {
                    TenancyMode::Multi
                };
                return Err(startup(format!(
                    "data directory {} was created in {}; this server was started in {}; the tenancy mode cannot be changed",
                    dir.display(),
                    created.describe(),
                    mode.describe()
                )));
            }
            // After the replay (the log holds writes of the old format too) and the mode
            // check, in the same transaction: a crash leaves the old version and the log as
            // they were.
            if upgrade {
                let started = std::time::Instant::now();
                let (done, dropped) = relationships::upgrade_adjacency_from_v1(&mut t, 65_536)?;
                t.insert(
                    fmt.as_slice(),
                    codec::encode_u64(STORAGE_FORMAT_VERSION).as_slice(),
                )?;
                upgraded = Some((done, dropped, started));
            }
            let last_seq = records::commit_seq(&t)?;
            let mut tenants = HashMap::new();
            t.scan_prefix(
                &Key::system(keys::SYS_TENANT_BY_NAME).0,
                false,
                &mut |k, v| {
                    let (name, _) = keys::read_escaped(&k[2..])
                        .ok_or_else(|| Error::internal("corrupt tenant key"))?;
                    tenants.insert(
                        String::from_utf8_lossy(&name).into_owned(),
                        codec::decode_u64(v)?,
                    );
                    Ok(true)
                },
            )?;
            (last_seq, tenants, replayed)
        };
        txn.commit()?;
        wal.reset();
        if let Some((done, dropped, started)) = upgraded {
            crate::log::info(&format!(
                "upgraded the store from storage format version {UPGRADES_FROM} to {STORAGE_FORMAT_VERSION}: {done} adjacency entries rewritten, {dropped} without a relationship or endpoint removed, relationship counters recomputed, in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        if replayed > 0 {
            crate::log::info(&format!(
                "replayed {replayed} commit group(s) from the redo log"
            ));
        }
        let published = Arc::new(Published {
            view: Mutex::new(None),
            db: Arc::new(db),
            state: Mutex::default(),
            changed: Condvar::new(),
            draining: Mutex::new(()),
            store_file: std::fs::File::open(&path).ok(),
            memo: Arc::new(memo::KeyMemo::new(key_memo_mb)),
        });
        let tenants: TenantCache = Arc::new(RwLock::new(tenants));
        let (tx, rx) = mpsc::channel(QUEUE);
        let core = Arc::new(Mutex::new(WriterCore {
            published: published.clone(),
            tenants: tenants.clone(),
            wal,
            last_seq,
            oldest_unsynced: None,
            last_commit: std::time::Instant::now(),
            checkpoint_bytes: checkpoint_mb.max(1) << 20,
            checkpointing: false,
            meta: MetaCache::default(),
        }));
        let writer = {
            let core = core.clone();
            std::thread::Builder::new()
                .name("engine-writer".into())
                .spawn(move || writer_loop(core, rx))
                .map_err(|e| startup(format!("cannot start writer thread: {e}")))?
        };
        let applier = {
            let p = published.clone();
            std::thread::Builder::new()
                .name("engine-applier".into())
                .spawn(move || applier_loop(p))
                .map_err(|e| startup(format!("cannot start applier thread: {e}")))?
        };
        Ok(Store {
            published,
            mode,
            tenants,
            sender: RwLock::new(Some(tx)),
            core,
            writes_in_flight: Default::default(),
            alone_streak: Default::default(),
            writer: Mutex::new(Some(writer)),
            applier: Mutex::new(Some(applier)),
            _dir_lock: dir_lock,
        })
    }

    pub fn snapshot(&self) -> Result<Snapshot> {
        self.published.snapshot()
    }

    /// A hint before a record's relationships are listed (its label and its adjacency run):
    /// the key memo asks for the lines those lookups start with, so that they arrive together
    /// and while the snapshot is taken, rather than one after the other.
    pub fn prefetch_listing(&self, tenant: u64, node: &uuid::Uuid) {
        let memo = &self.published.memo;
        memo.prefetch_label(&records::record_key(tenant, node));
        memo.prefetch_run(&relationships::adjacency_prefix(tenant, node));
    }

    pub fn memo_stats(&self) -> memo::MemoStats {
        self.published.memo.stats()
    }

    /// The numeric id of a tenant, or None for a tenant that has never been written.
    pub fn tenant_id(&self, tenant: &Tenant) -> Option<u64> {
        match tenant {
            Tenant::Single => Some(keys::SINGLE_TENANT),
            Tenant::Purged(_) => None,
            Tenant::Named(name) => self.tenants.read().ok()?.get(name).copied(),
        }
    }

    pub fn tenant_count(&self) -> usize {
        match self.mode {
            TenancyMode::Single => 1,
            TenancyMode::Multi => self.tenants.read().map(|t| t.len()).unwrap_or(0),
        }
    }

    /// Purged tenants whose keys are not fully reclaimed yet (resumed at startup).
    pub fn purging(&self) -> Result<Vec<u64>> {
        let snap = self.snapshot()?;
        let prefix = Key::system(keys::SYS_PURGING).0;
        let mut out = Vec::new();
        snap.scan_prefix(&prefix, false, &mut |k, _| {
            let id = k
                .get(prefix.len()..prefix.len() + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| Error::internal("corrupt purge mark"))?;
            out.push(id);
            Ok(true)
        })?;
        Ok(out)
    }

    /// The tenancy mode the store was created in.
    pub fn mode(&self) -> TenancyMode {
        self.mode
    }

    /// Every named tenant with its id, by name (empty for a single-tenant store).
    pub fn named_tenants(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .tenants
            .read()
            .map(|t| t.iter().map(|(n, id)| (n.clone(), *id)).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// The tenancy mode of the store in `dir`, or None when there is no store there. Opens
    /// the store file only to read it (a server running on `dir` makes this fail).
    pub fn stored_mode(dir: &Path) -> Result<Option<TenancyMode>> {
        let path = dir.join("engine.redb");
        if !path.exists() {
            return Ok(None);
        }
        // Refuses a directory a server (or another command) holds, naming that.
        let _lock = lock_data_dir(dir)?;
        let db = redb::Database::builder()
            .open(&path)
            .map_err(|e| startup(format!("cannot open store {}: {e}", path.display())))?;
        let r = db.begin_read()?;
        let t = r.open_table(KV)?;
        let mode = t.get(Key::system(keys::SYS_MODE).bytes())?;
        match mode.map(|v| v.value().to_vec()) {
            Some(v) if codec::decode_u64(&v)? == 0 => Ok(Some(TenancyMode::Single)),
            Some(_) => Ok(Some(TenancyMode::Multi)),
            None => Err(startup("store has no tenancy mode")),
        }
    }

    /// Every tenant id in use (for store-wide figures such as metrics).
    pub fn tenant_ids(&self) -> Vec<u64> {
        match self.mode {
            TenancyMode::Single => vec![keys::SINGLE_TENANT],
            TenancyMode::Multi => self
                .tenants
                .read()
                .map(|t| t.values().copied().collect())
                .unwrap_or_default(),
        }
    }

    /// Commits a batch and returns once it is durable. The batch applies entirely or not at all.
    ///
    /// When this is the only write in progress, the last `INLINE_AFTER_ALONE` writes were
    /// too, and no group is committing, the batch commits on the calling thread as a group of
    /// one: a store written by one client at a time answers without two thread hand-offs
    /// (measured ~15% more creates/s at c=1 with two workers, ~6% with one). The worker
    /// thread is blocked meanwhile (one fdatasync, or longer while the applier is behind:
    /// `wait_for_room`); with one worker the runtime goes on elsewhere (`runtime_workers`)
    /// unless the write is a request's own small one with no other request in flight
    /// (`commit_inline`). Otherwise the batch joins the writer's queue and commits with
    /// whatever else is queued (group commit).
    pub async fn write(&self, tenant: Tenant, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        use std::sync::atomic::Ordering;
        let sender = self
            .sender
            .read()
            .map_err(|_| Error::internal("writer lock poisoned"))?
            .clone()
            .ok_or_else(|| {
                Error::new(
                    crate::error::ErrorCode::Unsupported,
                    "the server is shutting down",
                )
            })?;
        let alone = self.writes_in_flight.fetch_add(1, Ordering::AcqRel) == 0;
        let _in_flight = InFlight(&self.writes_in_flight);
        let workers = if alone {
            let streak = self.alone_streak.fetch_add(1, Ordering::Relaxed);
            runtime_workers().filter(|_| streak >= INLINE_AFTER_ALONE)
        } else {
            self.alone_streak.store(0, Ordering::Relaxed);
            None
        };
        let (reply, mut rx) = oneshot::channel();
        let req = WriteRequest { tenant, ops, reply };
        let inline = match workers {
            Some(w) => self.commit_inline(req, w),
            None => Inline::Queue(req),
        };
        if !matches!(inline, Inline::Queue(_)) {
            // Committed (synchronously, above): no budget may turn it into an error now.
            crate::activity::write_handed_off();
        }
        match inline {
            Inline::Queue(req) => {
                sender
                    .send(req)
                    .await
                    .map_err(|_| Error::internal("writer stopped"))?;
                // From here the batch commits even if the caller goes away: its request's
                // time budget no longer applies (`activity::within`).
                crate::activity::write_handed_off();
                return rx
                    .await
                    .map_err(|_| Error::internal("writer dropped a request"))?;
            }
            // Committed without reaching an await on a worker that other tasks share: yield,
            // so a caller that writes in a loop (the reclaim loop) does not hold it.
            Inline::CommittedOnWorker => tokio::task::yield_now().await,
            // The runtime moved to another thread for the commit, and this task goes on here:
            // answering now, on this thread, saves waking that thread to poll it again (a
            // hand-off on the acknowledged path). A loop of writes still yields once its
            // cooperative budget runs out.
            Inline::CommittedRuntimeMoved => tokio::task::consume_budget().await,
        }
        rx.try_recv()
            .map_err(|_| Error::internal("writer dropped a request"))?
    }

    /// Commits `req` on this thread unless a group is committing; hands it back then.
    /// `workers`: the calling runtime's worker count (`runtime_workers`).
    fn commit_inline(&self, req: WriteRequest, workers: usize) -> Inline {
        let Ok(mut core) = self.core.try_lock() else {
            return Inline::Queue(req);
        };
        // With one worker, a request's own small write while no other request is in flight
        // commits on the worker itself: nothing waits behind it but what arrives during its
        // fdatasync, and it saves the hand-offs `block_in_place` costs (a lone client's
        // create: ~3 context switches instead of ~7.5, docs/design.md "Connections"). Anything
        // else moves the runtime to another thread meanwhile: other requests in flight, a
        // background task's write (tenant reclaim, expiry), a large batch, or an applier far
        // enough behind that the commit may wait for room.
        let on_worker = workers > 1
            || (crate::activity::only_this_request()
                && req.ops.len() <= ON_WORKER_MAX_OPS
                && self.published.has_room_to_spare());
        if !on_worker {
            tokio::task::block_in_place(|| core.commit_group(vec![req]));
            Inline::CommittedRuntimeMoved
        } else {
            core.commit_group(vec![req]);
            Inline::CommittedOnWorker
        }
    }

    /// Stops accepting writes, lets the writer commit what is queued, and waits for it.
    pub fn shutdown(&self) {
        if let Ok(mut s) = self.sender.write() {
            s.take();
        }
        if let Some(h) = self.writer.lock().ok().and_then(|mut w| w.take()) {
            let _ = h.join();
        }
        // The writer's last checkpoint drained the list; the applier has nothing left.
        self.published.lock().stop = true;
        self.published.changed.notify_all();
        if let Some(h) = self.applier.lock().ok().and_then(|mut a| a.take()) {
            let _ = h.join();
        }
        self.published.views().take();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How `Store::commit_inline` went.
enum Inline {
    /// A group is committing: the request goes to the writer thread.
    Queue(WriteRequest),
    /// Committed on this worker thread, which the runtime's other tasks wait for meanwhile.
    CommittedOnWorker,
    /// Committed in `block_in_place`: the runtime went on on another thread.
    CommittedRuntimeMoved,
}

/// The worker count of the multi-thread tokio runtime the caller runs on; None elsewhere (a
/// current-thread runtime or no runtime: no write commits inline there). With two or more
/// workers an inline commit blocks one while the others serve connections; with one
/// (`config::Runtime` on 2 CPUs) it commits in `block_in_place`, which hands the runtime to
/// another thread meanwhile, unless it is a request's own small write with no other request
/// in flight (`Store::commit_inline`): then it blocks the worker, and a request arriving
/// meanwhile waits for that one commit, as it would behind any request on the one worker.
fn runtime_workers() -> Option<usize> {
    let h = tokio::runtime::Handle::try_current().ok()?;
    (h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        .then(|| h.metrics().num_workers())
}

/// One count in an in-progress counter, taken back when dropped.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The version stamped on records written by a staged view (never a committed version).
pub const STAGED_VERSION: u64 = u64::MAX;

/// A read view of `snap` plus `ops` applied on top, never committed: what a client
/// transaction sees (its staged writes over the latest committed data). `read` gets the view,
/// the tenant id in it, and the outcome of every op. Fails as the writer would on the first
/// op that cannot apply.
pub fn staged_view<T>(
    snap: &Snapshot,
    tenant: &Tenant,
    ops: Vec<WriteOp>,
    read: impl FnOnce(&Overlay<'_, Snapshot>, u64, Vec<WriteOutcome>) -> Result<T>,
) -> Result<T> {
    let mut ov = Overlay::new(snap);
    let (t, _) = resolve_tenant_for_write(&mut ov, tenant)?;
    let mut out = Vec::with_capacity(ops.len());
    {
        let mut w = RecordWriter::new(&mut ov, t, STAGED_VERSION);
        for op in ops {
            out.push(w.apply(op)?);
        }
        w.finish()?;
    }
    read(&ov, t, out)
}

/// Resolves a tenant for writing, creating it on first use.
fn resolve_tenant_for_write<R: KvRead>(
    ov: &mut Overlay<'_, R>,
    tenant: &Tenant,
) -> Result<(u64, bool)> {
    let name = match tenant {
        Tenant::Single => return Ok((keys::SINGLE_TENANT, false)),
        Tenant::Purged(id) => return Ok((*id, false)),
        Tenant::Named(n) => n,
    };
    let by_name = Key::system(keys::SYS_TENANT_BY_NAME).str(name).0;
    if let Some(v) = ov.get(&by_name)? {
        return Ok((codec::decode_u64(&v)?, false));
    }
    let next_key = Key::system(keys::SYS_NEXT_TENANT).0;
    let id = ov
        .get(&next_key)?
        .map(|v| codec::decode_u64(&v))
        .transpose()?
        .unwrap_or(1);
    ov.put(next_key, codec::encode_u64(id + 1));
    ov.put(by_name, codec::encode_u64(id));
    ov.put(
        Key::system(keys::SYS_TENANT_BY_ID).u64(id).0,
        codec::encode_str(name),
    );
    Ok((id, true))
}

/// What commits write groups: redb's write side, the redo log and the commit sequence. It is
/// behind one mutex, so exactly one group commits at a time, whether on the writer thread
/// (queued groups) or on a request's own thread (`Store::write` when nothing is queued).
struct WriterCore {
    published: Arc<Published>,
    tenants: TenantCache,
    wal: wal::Wal,
    last_seq: u64,
    /// When the oldest write not yet checkpointed was committed.
    oldest_unsynced: Option<std::time::Instant>,
    /// When the last group committed (the idle checkpoint waits for a quiet period).
    last_commit: std::time::Instant,
    /// Log bytes that start a checkpoint (`storage.checkpoint_mb`).
    checkpoint_bytes: u64,
    /// A checkpoint was requested from the applier and its log segment is not released yet.
    checkpointing: bool,
    /// Committed values of the keys nearly every batch reads (`MetaCache`).
    meta: MetaCache,
}

/// The writer's memory of the committed values of the keys nearly every write batch reads:
/// property ids by name and the counters (label, property-label, relationship counts, row
/// sequences). Read through the group's view, each costs a lookup in every layer down to
/// redb (`prop_id` was ~6% of the engine's CPU at W8 c=32).
///
/// Invariant: every entry equals that key's value in the state after the last published
/// group, which is the state the next group's view shows. Entries come from that view (the
/// layer under the group's overlays, so a batch's own writes never enter), and every
/// published group's writes to these keys replace their entries after the log append
/// succeeded and before the group is published. Only the writer publishes, under the
/// `WriterCore` lock, so nothing else changes these keys in between.
#[derive(Default)]
struct MetaCache(Mutex<HashMap<Vec<u8>, Option<Vec<u8>>>>);

/// Entries at which `MetaCache` starts over (many tenants or labels).
const META_CACHE_MAX: usize = 50_000;
/// Longer keys (long property or label names) are not remembered: with the entry cap, the
/// memory stays under ~13 MiB of keys (values are ids and counters, 8–16 bytes).
const META_KEY_MAX: usize = 256;

impl MetaCache {
    fn holds(key: &[u8]) -> bool {
        key.len() > 9
            && key.len() <= META_KEY_MAX
            && key[0] == keys::TENANT
            && matches!(
                key[9],
                keys::PROP_BY_NAME
                    | keys::LABEL_COUNT
                    | keys::PROP_LABEL_COUNT
                    | keys::ROW_SEQ
                    | keys::REL_COUNT
            )
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Option<Vec<u8>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `key`'s committed value; starts over once `META_CACHE_MAX` entries are held.
    fn remember(map: &mut HashMap<Vec<u8>, Option<Vec<u8>>>, key: &[u8], v: &Option<Vec<u8>>) {
        if map.len() >= META_CACHE_MAX {
            map.clear();
        }
        map.insert(key.to_vec(), v.clone());
    }

    /// A published group's writes replace the entries of the keys they touch.
    fn absorb(&self, writes: &std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        let mut map = self.map();
        for (k, v) in writes.iter().filter(|(k, _)| Self::holds(k)) {
            Self::remember(&mut map, k, v);
        }
    }
}

/// A group's view with the writer's `MetaCache` in front of it.
struct CachedView<'a> {
    view: &'a Snapshot,
    meta: &'a MetaCache,
}

impl KvRead for CachedView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if !MetaCache::holds(key) {
            return self.view.get(key);
        }
        if let Some(v) = self.meta.map().get(key) {
            return Ok(v.clone());
        }
        let v = self.view.get(key)?;
        MetaCache::remember(&mut self.meta.map(), key, &v);
        Ok(v)
    }
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: kv::Visit) -> Result<()> {
        self.view.scan(start, end, reverse, visit)
    }
}

impl WriterCore {
    /// Commits `group` (applies each batch, logs the successful ones with one fdatasync,
    /// publishes them) and answers every request in it.
    fn commit_group(&mut self, mut group: Vec<WriteRequest>) {
        if !self.published.wait_for_room() {
            for req in group {
                let _ = req.reply.send(Err(Error::internal(
                    "the store refused writes after a failure; restart the server",
                )));
            }
            return;
        }
        let group_start = self.last_seq;
        let mut results = Vec::with_capacity(group.len());
        let mut new_tenants = Vec::new();
        let (published, wal, last_seq) = (&self.published, &mut self.wal, &mut self.last_seq);
        let meta = &self.meta;
        let committed = (|| -> Result<()> {
            let view = published.snapshot()?;
            let view = CachedView { view: &view, meta };
            // The group's writes, merged: each batch reads through them (it sees the batches
            // before it), and a key written by several batches (a counter) is logged once.
            let mut writes = {
                let mut merged = Overlay::new(&view);
                for req in group.iter_mut() {
                    let seq = *last_seq + 1;
                    let applied = {
                        let mut ov = Overlay::new(&merged);
                        apply_batch(&mut ov, req, seq)
                            .map(|(out, created)| (out, created, ov.into_writes()))
                    };
                    match applied {
                        Ok((out, created, writes)) => {
                            merged.absorb(writes);
                            if let Some(t) = created {
                                new_tenants.push(t);
                            }
                            *last_seq = seq;
                            results.push(Ok(out));
                        }
                        Err(e) => results.push(Err(e)),
                    }
                }
                merged.into_writes()
            };
            if writes.is_empty() {
                return Ok(());
            }
            writes.insert(
                Key::system(keys::SYS_COMMIT_SEQ).0,
                Some(codec::encode_u64(*last_seq)),
            );
            // Durable first, visible second: nobody may read what a crash could lose. The key
            // filter and the memo's notes make nothing visible; a large group (a bulk request,
            // while the other cores mostly wait for it) has them made on a second thread while
            // the log write runs. Noting a group whose log write then fails is harmless: a
            // memo slot or domain raised for nothing only makes a run be read again.
            let seq = *last_seq;
            let log = |wal: &mut wal::Wal| {
                wal.append(
                    seq,
                    writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
                )
            };
            let prepare = || {
                published.note(seq, &writes);
                Batch::filter_of(&writes)
            };
            let filter = if writes.len() < PREPARE_APART_KEYS {
                log(wal)?;
                prepare()
            } else {
                std::thread::scope(|s| {
                    let prepared = s.spawn(prepare);
                    let logged = log(wal);
                    let filter = prepared
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p));
                    logged.map(|()| filter)
                })?
            };
            meta.absorb(&writes);
            published.push(Batch::with_filter(seq, writes, filter));
            Ok(())
        })();
        self.last_commit = std::time::Instant::now();
        match committed {
            Ok(()) => {
                if let Ok(mut t) = self.tenants.write() {
                    for change in new_tenants {
                        match change {
                            TenantChange::Created(name, id) => {
                                t.insert(name, id);
                            }
                            TenantChange::Dropped(name) => {
                                t.remove(&name);
                            }
                        }
                    }
                }
                for (req, res) in group.into_iter().zip(results) {
                    let _ = req.reply.send(res);
                }
            }
            Err(e) => {
                // Nothing was published: a failed append leaves the log's write position
                // where it was, so the next frame overwrites this one.
                self.last_seq = group_start;
                for req in group {
                    let _ = req.reply.send(Err(e.clone()));
                }
                return;
            }
        }
        self.finish_checkpoint();
        let since = *self.oldest_unsynced.get_or_insert(self.last_commit);
        if !self.checkpointing
            && (self.wal.len() >= self.checkpoint_bytes || since.elapsed() >= CHECKPOINT_INTERVAL)
            && self.wal.rotate()
        {
            // The applier makes the store durable up to here while groups go on into the
            // other segment.
            self.checkpointing = true;
            self.oldest_unsynced = None;
            self.published.request_checkpoint(self.wal.inactive_len());
        }
    }

    /// Releases the log segment of a checkpoint the applier finished.
    fn finish_checkpoint(&mut self) {
        if self.checkpointing && self.published.take_checkpoint_done() {
            self.wal.release_inactive();
            self.checkpointing = false;
        }
    }

    /// Makes everything committed durable in redb (the published list drained with an
    /// `Immediate` commit; the writer is held, so nothing is published meanwhile), then
    /// empties the log. Nothing to do when the log is empty or after a failure; a failed
    /// checkpoint keeps the log, which still holds every write since the last good one.
    fn checkpoint(&mut self) {
        self.finish_checkpoint();
        if self.wal.is_empty() || self.published.failed() {
            return;
        }
        let (start, logged) = (std::time::Instant::now(), self.wal.len());
        match self.published.drain(true) {
            Ok(()) => {
                self.wal.reset();
                log_checkpoint(logged, start, false);
            }
            Err(e) => crate::log::error(&format!("checkpoint failed: {e}")),
        }
        self.oldest_unsynced = None;
    }
}

fn writer_loop(core: Arc<Mutex<WriterCore>>, mut rx: mpsc::Receiver<WriteRequest>) {
    // A small runtime of its own, only to wait on the queue with a timeout.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::log::error(&format!("writer cannot start: {e}"));
            return;
        }
    };
    let lock = || core.lock().unwrap_or_else(|p| p.into_inner());
    let mut wait = CHECKPOINT_IDLE;
    loop {
        let first = match rt.block_on(async { tokio::time::timeout(wait, rx.recv()).await }) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(_) => {
                // Groups committed inline do not pass through the queue: checkpoint only
                // after a quiet period since the last commit of any kind.
                let mut core = lock();
                let quiet = core.last_commit.elapsed();
                if quiet >= CHECKPOINT_IDLE {
                    core.checkpoint();
                    wait = CHECKPOINT_IDLE;
                } else {
                    wait = CHECKPOINT_IDLE - quiet;
                }
                continue;
            }
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        lock().commit_group(group);
        wait = CHECKPOINT_IDLE;
    }
    // Shutdown: leave redb durable and the log empty.
    lock().checkpoint();
}

/// Validates and applies one batch on its overlay. Returns the outcomes and, when the batch
/// created its tenant, the tenant's name and id.
/// The batch's ops are consumed: a batch is applied once, whatever the outcome.
fn apply_batch<R: KvRead>(
    ov: &mut Overlay<'_, R>,
    req: &mut WriteRequest,
    seq: u64,
) -> Result<(Vec<WriteOutcome>, Option<TenantChange>)> {
    let (tenant, created) = resolve_tenant_for_write(ov, &req.tenant)?;
    let mut w = RecordWriter::new(ov, tenant, seq);
    let ops = std::mem::take(&mut req.ops);
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        out.push(w.apply(op)?);
    }
    w.finish()?;
    let change = match (&req.tenant, created, w.dropped.take()) {
        (_, _, Some(name)) => Some(TenantChange::Dropped(name)),
        (Tenant::Named(n), true, None) => Some(TenantChange::Created(n.clone(), tenant)),
        _ => None,
    };
    Ok((out, change))
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{ReadableDatabase, ReadableTable};
    use std::collections::BTreeMap;

    /// What `never_finished` takes for a killed first start, and what it leaves alone.
    #[test]
    fn never_finished_only_for_a_headerless_file_without_a_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.redb");
        let mut killed = vec![0u8; 1 << 20];
        killed[9..320].fill(7); // the header redb writes before its magic number
        for (bytes, expected) in [
            (vec![], true),
            (vec![0u8; 5], true),
            (killed.clone(), true),
            (b"redb\x1a\x0a\xa9\x0d\x0a".to_vec(), false),
            (
                {
                    let mut b = killed.clone();
                    b[8192] = 1;
                    b
                },
                false,
            ), // a page past the header
            (vec![1u8; 100], false),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(
                never_finished(dir.path(), &path),
                expected,
                "{:?}",
                &bytes[..bytes.len().min(12)]
            );
        }
        std::fs::write(&path, &killed).unwrap();
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("wal.1.log")).unwrap();
        assert!(
            !never_finished(dir.path(), &path),
            "a dangling log link counts as a log"
        );
    }

    /// A published list over a new, empty redb store in `dir`, reading through `memo`.
    fn published_in(dir: &Path, memo: Arc<memo::KeyMemo>) -> Published {
        let db = redb::Database::create(dir.join("t.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(KV).unwrap();
        txn.commit().unwrap();
        Published {
            view: Mutex::new(None),
            db: Arc::new(db),
            state: Mutex::default(),
            changed: Condvar::new(),
            draining: Mutex::new(()),
            store_file: None,
            memo,
        }
    }

    /// `apply_in_order` leaves the table exactly as one insert or remove per write would:
    /// runs of new keys in one gap, keys equal to existing entries (replaced, removed), keys
    /// a few entries on (stepped to) and far on (sought), removes of missing keys.
    #[test]
    fn ordered_apply_equals_one_write_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("t.redb")).unwrap();
        let key = |i: u32| i.to_be_bytes().to_vec();
        let mut expect: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(KV).unwrap();
            for i in (0..3000).step_by(3) {
                t.insert(key(i).as_slice(), b"old".as_slice()).unwrap();
                expect.insert(key(i), b"old".to_vec());
            }
        }
        txn.commit().unwrap();
        let mut writes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for i in 0..3100u32 {
            let w = match i % 7 {
                0 | 1 => Some(format!("new{i}").into_bytes()),
                2 => None,
                _ if i > 1500 && i < 2500 => Some(b"run".to_vec()),
                _ => continue,
            };
            writes.insert(key(i), w);
        }
        for (k, v) in &writes {
            match v {
                Some(v) => expect.insert(k.clone(), v.clone()),
                None => expect.remove(k),
            };
        }
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(KV).unwrap();
            let stream = writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref()));
            apply_in_order(&mut t, stream).unwrap();
        }
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let t = read.open_table(KV).unwrap();
        let got: BTreeMap<Vec<u8>, Vec<u8>> = t
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value().to_vec(), v.value().to_vec())
            })
            .collect();
        assert_eq!(got, expect);
    }

    /// Snapshots share one redb view between drains: every snapshot sees exactly the state
    /// after the last group published before it (redb plus the published list), whether its
    /// view was shared or opened afresh, and a snapshot keeps its state across later drains.
    #[test]
    fn shared_views_see_exactly_the_groups_published_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = published_in(dir.path(), Arc::new(memo::KeyMemo::new(0)));
        let seq_key = Key::system(keys::SYS_COMMIT_SEQ).0;
        let key = |i: u64| format!("k{}", i % 5).into_bytes();
        // Group `seq` writes key(seq) = seq and the commit sequence, as a group does.
        let group = |seq: u64| {
            let mut w = BTreeMap::new();
            w.insert(key(seq), Some(seq.to_be_bytes().to_vec()));
            w.insert(seq_key.clone(), Some(codec::encode_u64(seq)));
            Batch::new(seq, w)
        };
        let expect = |upto: u64| -> Vec<Option<Vec<u8>>> {
            (0..5)
                .map(|k| {
                    (1..=upto)
                        .rev()
                        .find(|s| s % 5 == k)
                        .map(|s| s.to_be_bytes().to_vec())
                })
                .collect()
        };
        let read = |snap: &Snapshot| -> Vec<Option<Vec<u8>>> {
            (0..5).map(|k| snap.get(&key(k)).unwrap()).collect()
        };
        let mut kept = Vec::new();
        for seq in 1..=40u64 {
            p.publish(group(seq));
            let snap = p.snapshot().unwrap();
            assert_eq!(read(&snap), expect(seq), "after group {seq}");
            assert_eq!(records::commit_seq(&snap).unwrap(), seq);
            // Drain after some groups (the shared view goes stale), not after others.
            if seq % 3 == 0 {
                p.drain(seq % 9 == 0).unwrap();
                assert!(p.views().is_none(), "a drain lets the shared view go");
                if seq % 2 == 0 {
                    // A reader that opened its view before the drain shares it after: the
                    // next snapshot must not use it (the drained groups left the list).
                    *p.views() = Some(snap.redb_view());
                }
            }
            if seq % 10 == 0 {
                kept.push((seq, snap));
            }
        }
        for (seq, snap) in &kept {
            assert_eq!(read(snap), expect(*seq), "kept snapshot of group {seq}");
        }
        // Everything drained: redb alone answers, through a fresh view that is then shared.
        p.drain(true).unwrap();
        let a = p.snapshot().unwrap();
        assert_eq!(read(&a), expect(40));
        let b = p.snapshot().unwrap();
        assert!(
            Arc::ptr_eq(&a.redb_view(), &b.redb_view()),
            "no drain between: shared"
        );
    }

    /// Through random writes to adjacency, property index and record keys, drains, snapshots
    /// kept from before later writes and a memo small enough to start over often (its runs and
    /// its record of which domains were written), every key scan through the memo visits
    /// exactly the keys the snapshot's own scan does, in both directions, read whole or
    /// stopped early, and every record label read through it is the snapshot's.
    #[test]
    fn key_memo_answers_as_the_snapshot_does() {
        // The small memo also forgets which domains were written every few batches.
        for (budget, modified_max) in [(16384usize, 4usize), (1 << 20, memo::MODIFIED_MAX)] {
            let dir = tempfile::tempdir().unwrap();
            let memo = Arc::new(memo::KeyMemo::with_limits(budget, modified_max));
            let p = published_in(dir.path(), memo.clone());
            let mut next = kv::test_rng(0x2545_F491_4F6C_DD1D);
            let id = |i: u64| {
                uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i as u128)
            };
            let types = ["KNOWS", "LIKES", "A\u{0}B"];
            let adj = |node: u64, dir: u64, ty: u64, other: u64, rel: u64| {
                Key::tenant(1, keys::ADJACENCY)
                    .uuid(&id(node))
                    .u8(dir as u8)
                    .str(types[ty as usize])
                    .uuid(&id(other))
                    .uuid(&id(rel))
                    .0
            };
            let idx = |pid: u64, value: u64, rec: u64| {
                Key::tenant(1, keys::PROP_INDEX)
                    .uuid(&id(1000 + pid))
                    .str("L")
                    .str(&format!("v{value}"))
                    .uuid(&id(rec))
                    .0
            };
            let rec = |node: u64| Key::tenant(1, keys::RECORD).uuid(&id(node)).0;
            // A record's value is its label here: the memo's answer must be the snapshot's.
            let label_of = |snap: &Snapshot, node: u64, memo: bool| {
                let decode = |v: &[u8]| Ok(String::from_utf8(v.to_vec()).unwrap());
                match memo {
                    true => snap.record_label(&rec(node), &decode).unwrap(),
                    false => snap
                        .get(&rec(node))
                        .unwrap()
                        .map(|v| decode(&v).unwrap().into()),
                }
            };
            let prefixes: Vec<Vec<u8>> = {
                let mut v = Vec::new();
                for node in 0..4 {
                    let n = Key::tenant(1, keys::ADJACENCY).uuid(&id(node));
                    v.push(n.clone().0);
                    for dir in 0..2u8 {
                        v.push(n.clone().u8(dir).0);
                        for ty in types {
                            v.push(n.clone().u8(dir).str(ty).0);
                        }
                    }
                }
                for pid in 0..2 {
                    let b = Key::tenant(1, keys::PROP_INDEX).uuid(&id(1000 + pid));
                    v.push(b.clone().0);
                    for value in 0..3 {
                        v.push(b.clone().str("L").str(&format!("v{value}")).0);
                    }
                }
                v
            };
            // How a run is read: through the memo for keys (values not compared), through the
            // memo with values (adjacency runs only: `scan_prefix`), or straight (no memo).
            #[derive(Clone, Copy, PartialEq)]
            enum How {
                Keys,
                Values,
                Straight,
            }
            let read = |snap: &Snapshot, pre: &[u8], reverse: bool, stop: usize, how: How| {
                let mut out = Vec::new();
                let end = keys::prefix_end(pre);
                let mut visit = |k: &[u8], v: &[u8]| {
                    out.push((k.to_vec(), (how != How::Keys).then(|| v.to_vec())));
                    Ok(out.len() < stop)
                };
                match how {
                    How::Keys => snap.scan_keys(pre, &end, reverse, &mut visit).unwrap(),
                    How::Values => snap.scan_prefix(pre, reverse, &mut visit).unwrap(),
                    How::Straight => snap.scan(pre, &end, reverse, &mut visit).unwrap(),
                }
                out
            };
            let keys_of = |snap: &Snapshot, pre: &[u8], reverse: bool, stop: usize, memo: bool| {
                let how = if memo { How::Keys } else { How::Straight };
                let out = read(snap, pre, reverse, stop, how);
                out.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
            };
            let mut kept: Vec<Snapshot> = Vec::new();
            let (mut checks, mut in_place) = (0, 0);
            for seq in 1..=300u64 {
                let mut w = BTreeMap::new();
                for _ in 0..1 + next(4) {
                    let k = match next(3) {
                        0 => adj(next(4), next(2), next(3), next(4), next(3)),
                        1 => idx(next(2), next(3), next(6)),
                        _ => rec(next(4)),
                    };
                    // A value names its batch: rewriting a key changes what a run holds.
                    w.insert(k, (next(3) > 0).then(|| format!("v{seq}").into_bytes()));
                }
                w.insert(
                    Key::system(keys::SYS_COMMIT_SEQ).0,
                    Some(codec::encode_u64(seq)),
                );
                p.publish(Batch::new(seq, w));
                if seq % 7 == 0 {
                    p.drain(false).unwrap();
                }
                kept.push(p.snapshot().unwrap());
                if kept.len() > 6 {
                    kept.remove(next(kept.len() as u64) as usize);
                }
                for _ in 0..20 {
                    let snap = &kept[next(kept.len() as u64) as usize];
                    let pre = &prefixes[next(prefixes.len() as u64) as usize];
                    let reverse = next(2) == 0;
                    let stop = if next(4) == 0 {
                        1 + next(3) as usize
                    } else {
                        usize::MAX
                    };
                    assert_eq!(
                        keys_of(snap, pre, reverse, stop, true),
                        keys_of(snap, pre, reverse, stop, false),
                        "group {seq}, snapshot {}, prefix {pre:?}, reverse {reverse}",
                        snap.seq()
                    );
                    assert_eq!(
                        read(snap, pre, reverse, stop, How::Values),
                        read(snap, pre, reverse, stop, How::Straight),
                        "values: group {seq}, snapshot {}, prefix {pre:?}, reverse {reverse}",
                        snap.seq()
                    );
                    // A run read in place holds what a whole forward scan visits.
                    if let Some(run) = snap.values_run(pre) {
                        let held: Vec<_> = run
                            .entries()
                            .map(|(k, v)| {
                                ([pre.as_slice(), k].concat(), Some(run.bytes()[v].to_vec()))
                            })
                            .collect();
                        assert_eq!(
                            held,
                            read(snap, pre, false, usize::MAX, How::Straight),
                            "values run: group {seq}, snapshot {}, prefix {pre:?}",
                            snap.seq()
                        );
                        in_place += 1;
                    }
                    let node = next(4);
                    assert_eq!(
                        label_of(snap, node, true),
                        label_of(snap, node, false),
                        "label: group {seq}, snapshot {}, record {node}",
                        snap.seq()
                    );
                    checks += 1;
                }
            }
            assert_eq!(checks, 6000);
            assert!(in_place > 100, "runs read in place: {in_place}");
            let stats = memo.stats();
            assert!(stats.runs > 0 && stats.bytes <= budget, "{stats:?}");
            // Forgetting which domains were written makes most runs read again.
            let min_hits = if modified_max < 10 { 20 } else { 100 };
            assert!(
                stats.hits > min_hits,
                "runs were answered from memory: {stats:?}"
            );
            // The second read of a run is answered from memory.
            let snap = p.snapshot().unwrap();
            let pre = &prefixes[2];
            let first = keys_of(&snap, pre, false, usize::MAX, true);
            let hits = memo.stats().hits;
            assert_eq!(keys_of(&snap, pre, false, usize::MAX, true), first);
            assert_eq!(memo.stats().hits, hits + 1);
            // So is a record's label, once there is room for labels.
            let node = (0..4)
                .find(|n| label_of(&snap, *n, false).is_some())
                .unwrap();
            let first = label_of(&snap, node, true);
            let hits = memo.stats().hits;
            assert_eq!(label_of(&snap, node, true), first);
            assert_eq!(memo.stats().hits, hits + u64::from(budget >= 1 << 20));
            // An adjacency run read with values is then answered from memory with them, and
            // serves key-only reads as well (a node's whole run fits the larger memo).
            if budget < 1 << 20 {
                continue;
            }
            let node = &prefixes[0];
            let with = read(&snap, node, false, usize::MAX, How::Values);
            let hits = memo.stats().hits;
            assert_eq!(read(&snap, node, false, usize::MAX, How::Values), with);
            assert_eq!(
                read(&snap, node, true, usize::MAX, How::Values).len(),
                with.len()
            );
            let keys: Vec<Vec<u8>> = with.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(keys_of(&snap, node, false, usize::MAX, true), keys);
            assert_eq!(memo.stats().hits, hits + 3);
            assert!(with
                .iter()
                .any(|(_, v)| v.as_ref().is_some_and(|v| !v.is_empty())));
        }
    }

    /// A run found too large for its shard's part of the memo once is not offered as a memo
    /// read again (its readers go back to splitting it over threads); others still are.
    #[test]
    fn runs_too_large_for_the_memo_are_not_offered_again() {
        let dir = tempfile::tempdir().unwrap();
        // 16 shards of 200 bytes: a run of one 16-byte suffix fits (~115 bytes with its prefix
        // and header), one of twenty does not.
        let p = published_in(
            dir.path(),
            Arc::new(memo::KeyMemo::with_limits(16 * 200, 10)),
        );
        let base = |pid: u128| {
            Key::tenant(1, keys::PROP_INDEX)
                .uuid(&uuid::Uuid::from_u128(pid))
                .str("L")
        };
        let mut w = BTreeMap::new();
        for i in 0..20u128 {
            w.insert(base(1).uuid(&uuid::Uuid::from_u128(i)).0, Some(Vec::new()));
        }
        w.insert(base(2).uuid(&uuid::Uuid::from_u128(0)).0, Some(Vec::new()));
        w.insert(
            Key::system(keys::SYS_COMMIT_SEQ).0,
            Some(codec::encode_u64(1)),
        );
        p.publish(Batch::new(1, w));
        let snap = p.snapshot().unwrap();
        for pid in [1, 2] {
            let pre = base(pid).0;
            let end = keys::prefix_end(&pre);
            assert!(snap.memoizes(&pre, &end), "offered before it is read");
            let mut n = 0;
            snap.scan_prefix_keys(&pre, false, &mut |_, _| {
                n += 1;
                Ok(true)
            })
            .unwrap();
            assert_eq!(n, if pid == 1 { 20 } else { 1 });
            assert_eq!(snap.memoizes(&pre, &end), pid == 2, "property {pid}");
        }
    }

    /// Runs with values (relationship listings) take at most half of a shard and never start
    /// it over: after many listings, a key run read before is still answered from memory.
    #[test]
    fn listings_do_not_push_key_runs_out_of_the_memo() {
        let dir = tempfile::tempdir().unwrap();
        // 16 shards of 4 KiB; each listing run below is ~300 bytes, a key run ~100.
        let memo = Arc::new(memo::KeyMemo::with_limits(16 * 4096, 100));
        let p = published_in(dir.path(), memo.clone());
        let id = |i: u128| uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i);
        let node = |n: u128| Key::tenant(1, keys::ADJACENCY).uuid(&id(n));
        let index = Key::tenant(1, keys::PROP_INDEX)
            .uuid(&id(9_000_000))
            .str("L");
        let mut w = BTreeMap::new();
        for n in 0..2_000u128 {
            for e in 0..2u128 {
                let k = node(n).u8(0).str("T").uuid(&id(n + e)).uuid(&id(n * 2 + e));
                w.insert(k.0, Some(vec![7u8; 100]));
            }
        }
        w.insert(index.clone().uuid(&id(1)).0, Some(Vec::new()));
        w.insert(
            Key::system(keys::SYS_COMMIT_SEQ).0,
            Some(codec::encode_u64(1)),
        );
        p.publish(Batch::new(1, w));
        let snap = p.snapshot().unwrap();
        let count = |pre: &[u8], values: bool| {
            let mut n = 0;
            let mut visit = |_: &[u8], v: &[u8]| {
                assert!(!values || v.len() == 100);
                n += 1;
                Ok(true)
            };
            match values {
                true => snap.scan_prefix(pre, false, &mut visit).unwrap(),
                false => snap.scan_prefix_keys(pre, false, &mut visit).unwrap(),
            }
            n
        };
        assert_eq!(count(&index.0, false), 1);
        // Key runs of some nodes first: their listings then replace runs already held.
        for n in 0..64 {
            assert_eq!(count(&node(n).0, false), 2);
        }
        let hits = memo.stats().hits;
        for n in 0..2_000 {
            assert_eq!(count(&node(n).0, true), 2);
        }
        let st = memo.stats();
        assert!(st.bytes <= 16 * 4096, "{st:?}");
        assert!(st.runs > 16, "listings were remembered: {st:?}");
        assert_eq!(count(&index.0, false), 1);
        assert_eq!(memo.stats().hits, hits + 1, "the key run is still held");
        // The latest listing is remembered (a full half for values makes room among runs with
        // values) and answered from memory, with its values.
        let before = memo.stats().hits;
        assert_eq!(count(&node(1_999).0, true), 2);
        assert_eq!(memo.stats().hits, before + 1);
    }

    /// A record's listing (its adjacency run of every type) stays answered from memory while
    /// relationships of other records are written, and is read again, with the new entry,
    /// once one of its own is.
    #[test]
    fn a_listing_outlives_relationship_writes_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let memo = Arc::new(memo::KeyMemo::with_limits(1 << 20, 100));
        let p = published_in(dir.path(), memo.clone());
        let id = |i: u128| uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i);
        let node = |n: u128| Key::tenant(1, keys::ADJACENCY).uuid(&id(n));
        let edge = |n: u128, ty: &str, other: u128| {
            node(n)
                .u8(0)
                .str(ty)
                .uuid(&id(other))
                .uuid(&id(1000 + other))
                .0
        };
        let publish = |seq: u64, keys: Vec<Vec<u8>>| {
            let mut w: BTreeMap<_, _> = keys.into_iter().map(|k| (k, Some(vec![7u8]))).collect();
            w.insert(
                Key::system(keys::SYS_COMMIT_SEQ).0,
                Some(codec::encode_u64(seq)),
            );
            p.publish(Batch::new(seq, w));
        };
        // (entries, hits added) of listing node `n` on a fresh snapshot.
        let list = |n: u128| {
            let hits = memo.stats().hits;
            let mut count = 0;
            p.snapshot()
                .unwrap()
                .scan_prefix(&node(n).0, false, &mut |_, _| {
                    count += 1;
                    Ok(true)
                })
                .unwrap();
            (count, memo.stats().hits - hits)
        };
        publish(1, vec![edge(0, "T", 5), edge(1, "T", 6)]);
        assert_eq!(list(0), (1, 0), "first listing reads the store");
        assert_eq!(list(0), (1, 1), "then memory");
        // Other records' relationships, of the same type and of another.
        publish(2, vec![edge(1, "T", 7), edge(2, "U", 8)]);
        assert_eq!(list(0), (1, 1), "unchanged: still from memory");
        assert_eq!(list(1), (2, 0), "node 1 changed: read again");
        publish(3, vec![edge(0, "U", 9)]);
        assert_eq!(
            list(0),
            (2, 0),
            "its own write: read again, with the new entry"
        );
        assert_eq!(list(0), (2, 1));
    }

    /// A group large enough to have its key filter and memo notes made on a second thread
    /// (`PREPARE_APART_KEYS`) is visible whole, tells the memo (a key run read before it is not
    /// answered stale after it) and is in the store after a restart.
    #[test]
    fn a_large_group_is_noted_visible_and_kept() {
        use crate::model::{PropType, PropValue, Scalar};
        use records::{PutMode, PutRecord};
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let put = |i: i64| {
            let num = |n: i64| {
                Some(PropValue {
                    ty: PropType::Number,
                    array: false,
                    items: vec![Scalar::Int(n)],
                })
            };
            WriteOp::Put(PutRecord {
                id: uuid::Uuid::now_v7(),
                mode: PutMode::CreateNew,
                label: Some("L".into()),
                props: ["a", "b", "c"]
                    .iter()
                    .map(|n| (n.to_string(), num(i)))
                    .collect(),
            })
        };
        // The index entries of property `a` on label L, through the memo.
        let count = |store: &Store| {
            let snap = store.snapshot().unwrap();
            let by_name = Key::tenant(keys::SINGLE_TENANT, keys::PROP_BY_NAME)
                .str("a")
                .0;
            let mut pids = Vec::new();
            snap.scan_prefix(&by_name, false, &mut |_, v| {
                pids.push(codec::decode_uuid(v)?);
                Ok(true)
            })
            .unwrap();
            let mut n = 0;
            for pid in pids {
                let run = Key::tenant(keys::SINGLE_TENANT, keys::PROP_INDEX)
                    .uuid(&pid)
                    .str("L")
                    .0;
                snap.scan_prefix_keys(&run, false, &mut |_, _| {
                    n += 1;
                    Ok(true)
                })
                .unwrap();
            }
            n
        };
        {
            let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
            rt.block_on(store.write(Tenant::Single, vec![put(-1)]))
                .unwrap();
            assert_eq!((count(&store), count(&store)), (1, 1));
            assert!(
                store.memo_stats().hits > 0,
                "the run was answered from the memo"
            );
            let big: Vec<WriteOp> = (0..6000).map(put).collect();
            rt.block_on(store.write(Tenant::Single, big)).unwrap();
            assert_eq!(count(&store), 6001);
        }
        let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
        assert_eq!(count(&store), 6001);
    }

    /// The writer's `MetaCache` holds exactly the committed value of every key it has an
    /// entry for, through creates and deletes that add and drop property ids and counters,
    /// batches that fail after writing new property metadata into their overlay, property
    /// deletes, merges that change a property's type, and writes from the writer thread and
    /// inline alike.
    #[test]
    fn the_writer_meta_cache_holds_committed_values_only() {
        use crate::model::{PropType, PropValue, Scalar};
        use records::{PutMode, PutRecord};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let put = |id: uuid::Uuid, mode: PutMode, label: &str, props: &[(&str, Scalar)]| {
            WriteOp::Put(PutRecord {
                id,
                mode,
                label: Some(label.into()),
                props: props
                    .iter()
                    .map(|(n, v)| {
                        let ty = match v {
                            Scalar::Int(_) => PropType::Number,
                            _ => PropType::String,
                        };
                        let value = PropValue {
                            ty,
                            array: false,
                            items: vec![v.clone()],
                        };
                        (n.to_string(), Some(value))
                    })
                    .collect(),
            })
        };
        let check = |store: &Store, step: usize| {
            let snap = store.snapshot().unwrap();
            let core = store.core.lock().unwrap();
            let map = core.meta.map();
            for (k, v) in map.iter() {
                assert_eq!(&snap.get(k).unwrap(), v, "step {step}: key {k:?}");
            }
            map.len()
        };
        let mut x = 7u64;
        let mut live: Vec<uuid::Uuid> = Vec::new();
        let names = ["a", "b", "c", "d"];
        for step in 0..300 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as usize;
            let label = ["L1", "L2"][r % 2];
            let ops = match r % 7 {
                // Delete a record: its properties may lose their last holder (ids dropped).
                0 | 1 if !live.is_empty() => vec![WriteOp::Delete {
                    id: live.swap_remove(r % live.len()),
                }],
                // New metadata in the overlay, then a failing create: nothing commits.
                2 if !live.is_empty() => vec![
                    put(
                        uuid::Uuid::now_v7(),
                        PutMode::Create,
                        label,
                        &[("fresh", Scalar::Int(1))],
                    ),
                    put(live[0], PutMode::Create, label, &[]),
                ],
                // A merge that changes a property's type.
                3 if !live.is_empty() => vec![put(
                    live[r % live.len()],
                    PutMode::Merge,
                    label,
                    &[(names[r % 4], Scalar::Str("s".into()))],
                )],
                _ => {
                    let id = uuid::Uuid::now_v7();
                    live.push(id);
                    let props: Vec<(&str, Scalar)> = names
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| (r >> i) & 1 == 1)
                        .map(|(i, n)| (*n, Scalar::Int(i as i64)))
                        .collect();
                    vec![put(id, PutMode::CreateNew, label, &props)]
                }
            };
            let failing = ops.len() == 2;
            let out = rt.block_on(store.write(Tenant::Single, ops));
            assert_eq!(out.is_err(), failing, "step {step}: {out:?}");
            check(&store, step);
        }
        // The cache was used, and a property that was never committed has no id in it.
        let n = check(&store, 300);
        assert!(n > 5, "{n} entries");
        let fresh = Key::tenant(keys::SINGLE_TENANT, keys::PROP_BY_NAME)
            .str("fresh")
            .0;
        let core = store.core.lock().unwrap();
        assert!(core
            .meta
            .map()
            .iter()
            .all(|(k, v)| !k.starts_with(&fresh) || v.is_none()));
    }
}
