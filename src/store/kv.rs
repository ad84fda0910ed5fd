//! The small ordered key-value interface the store is written against (get, range, batch
//! write, commit, snapshot). redb is the embedded implementation; a distributed ordered
//! transactional store would implement the same surface.

use super::memo::{is_prefix_end, KeyMemo};
use crate::error::Result;
use crate::model::{hash_bytes, Bloom};
use redb::{ReadableTable, TableDefinition};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// All engine keys live in one ordered table; the key layout (store/keys.rs) separates them.
pub const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// Scan callback: return Ok(false) to stop.
pub type Visit<'f> = &'f mut dyn FnMut(&[u8], &[u8]) -> Result<bool>;

/// Reads through a consistent view.
pub trait KvRead {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Visits keys in `[start, end)` in order (or reverse order).
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()>;

    fn scan_prefix(&self, prefix: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.scan(prefix, &super::keys::prefix_end(prefix), reverse, visit)
    }
    /// The label of the record stored under `key`, which `decode` reads from its value (None:
    /// no such key). A snapshot may answer it from its key memo (store/memo.rs, "Labels").
    fn record_label(
        &self,
        key: &[u8],
        decode: &dyn Fn(&[u8]) -> Result<String>,
    ) -> Result<Option<Arc<str>>> {
        stored_label(self, key, decode)
    }
    /// The entries under `prefix` with their values, read in place, when this view's key memo
    /// holds them as `scan_prefix` would visit them; None otherwise (the caller scans).
    fn values_run(&self, _prefix: &[u8]) -> Option<super::memo::ValuesRun> {
        None
    }
    /// `scan` for a caller that reads keys only: it must not read the values passed (a
    /// snapshot may answer from its key memo, passing `&[]`: store/memo.rs).
    fn scan_keys(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.scan(start, end, reverse, visit)
    }
    fn scan_prefix_keys(&self, prefix: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.scan_keys(prefix, &super::keys::prefix_end(prefix), reverse, visit)
    }
    /// Whether `scan_keys` of `[start, end)` goes through a key memo (a caller then reads the
    /// range on one thread rather than split over several).
    fn memoizes(&self, _start: &[u8], _end: &[u8]) -> bool {
        false
    }
    /// This view, when several threads may read it at once (a snapshot); None otherwise.
    fn shared(&self) -> Option<&(dyn KvRead + Sync)> {
        None
    }
    fn has_prefix(&self, prefix: &[u8]) -> Result<bool> {
        let mut found = false;
        self.scan_prefix(prefix, false, &mut |_, _| {
            found = true;
            Ok(false)
        })?;
        Ok(found)
    }
}

/// The first and last keys in `[start, end)` (None: the range is empty): two descents.
pub fn range_ends<R: KvRead + ?Sized>(
    kv: &R,
    start: &[u8],
    end: &[u8],
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut ends = [None::<Vec<u8>>, None];
    for (i, rev) in [false, true].into_iter().enumerate() {
        kv.scan(start, end, rev, &mut |k, _| {
            ends[i] = Some(k.to_vec());
            Ok(false)
        })?;
    }
    let [first, last] = ends;
    Ok(first.zip(last))
}

fn scan_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    t: &T,
    start: &[u8],
    end: &[u8],
    reverse: bool,
    visit: Visit,
) -> Result<()> {
    let range = t.range::<&[u8]>((Bound::Included(start), Bound::Excluded(end)))?;
    if reverse {
        for item in range.rev() {
            let (k, v) = item?;
            if !visit(k.value(), v.value())? {
                break;
            }
        }
    } else {
        for item in range {
            let (k, v) = item?;
            if !visit(k.value(), v.value())? {
                break;
            }
        }
    }
    Ok(())
}

/// The label of the record under `key` as `kv` itself stores it (`KvRead::record_label`
/// without a memo).
fn stored_label<R: KvRead + ?Sized>(
    kv: &R,
    key: &[u8],
    decode: &dyn Fn(&[u8]) -> Result<String>,
) -> Result<Option<Arc<str>>> {
    kv.get(key)?.map(|v| decode(&v).map(Arc::from)).transpose()
}

/// One commit group's writes, durable in the redo log and visible to readers, kept in memory
/// until the applier has written them into redb (store.rs, "Published writes").
pub struct Batch {
    /// The commit sequence of the group's last batch (its `SYS_COMMIT_SEQ` write).
    pub seq: u64,
    pub writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Which keys `writes` may hold: a point read skips a batch whose filter rules its key
    /// out, so a read looks through many published batches for about the cost of one.
    filter: Bloom,
}

impl Batch {
    /// A batch with its filter made here (tests; the writer makes the filter apart).
    #[cfg(test)]
    pub fn new(seq: u64, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Batch {
        let filter = Batch::filter_of(&writes);
        Batch::with_filter(seq, writes, filter)
    }

    /// The key filter of `writes`, to make apart from the batch (`with_filter`).
    pub fn filter_of(writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Bloom {
        Bloom::new(writes.keys().map(|k| hash_bytes(k)), writes.len())
    }

    /// A batch of `writes` with their `filter_of`.
    pub fn with_filter(
        seq: u64,
        writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        filter: Bloom,
    ) -> Batch {
        Batch {
            seq,
            writes,
            filter,
        }
    }
}

/// Published batches, oldest first: the writes of every group acknowledged but not yet in
/// redb (possibly a few that already are: see [`Snapshot::new`]).
pub type Published = Arc<Vec<Arc<Batch>>>;

/// The writes of `batches` (oldest first) whose keys fall in `range`, merged in key order: a
/// newer batch's write wins on an equal key. A k-way merge of the batches' sorted runs.
pub fn newest_wins<'a>(
    batches: &'a [Arc<Batch>],
    range: (Bound<&[u8]>, Bound<&[u8]>),
) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    type Run<'a> = std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>;
    if let [one] = batches {
        // One sorted run: nothing to merge.
        return one
            .writes
            .range::<[u8], _>(range)
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
    }
    let mut runs: Vec<Run<'a>> = batches
        .iter()
        .map(|b| b.writes.range::<[u8], _>(range))
        .collect();
    // (key, batch, value), smallest key first; on equal keys the newest batch (largest
    // index) first.
    type Head<'a> = Reverse<(&'a [u8], Reverse<usize>, Option<&'a [u8]>)>;
    let mut heap: BinaryHeap<Head<'a>> = BinaryHeap::with_capacity(runs.len());
    for (i, run) in runs.iter_mut().enumerate() {
        if let Some((k, v)) = run.next() {
            heap.push(Reverse((k.as_slice(), Reverse(i), v.as_deref())));
        }
    }
    let mut out: Vec<(&'a [u8], Option<&'a [u8]>)> = Vec::new();
    while let Some(Reverse((k, Reverse(i), v))) = heap.pop() {
        if out.last().is_none_or(|(last, _)| *last != k) {
            out.push((k, v));
        }
        // Batch i goes on while its keys stay below every other run's head: one comparison
        // per key instead of a trip through the heap. Record ids grow with time, so a group's
        // keys of one kind (records, one property's index entries) come in runs. Such a key
        // is above `k` (its run ascends) and below every head, so it is new and the smallest.
        let mut next = runs[i].next();
        while let Some((nk, nv)) = next {
            if heap
                .peek()
                .is_some_and(|Reverse((head, _, _))| nk.as_slice() >= *head)
            {
                break;
            }
            out.push((nk.as_slice(), nv.as_deref()));
            next = runs[i].next();
        }
        if let Some((nk, nv)) = next {
            heap.push(Reverse((nk.as_slice(), Reverse(i), nv.as_deref())));
        }
    }
    out
}

/// redb's side of a snapshot: one read transaction's table and the commit sequence redb
/// held in it (the sequence of the last published batch drained into redb). Shared by the
/// snapshots taken while no drain has committed since (`store::Published::snapshot`): the
/// table is read-only, so many readers may use it at once.
pub struct RedbView {
    table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub applied: u64,
}

impl RedbView {
    pub fn new(txn: &redb::ReadTransaction) -> Result<RedbView> {
        let table = txn.open_table(KV)?;
        let applied = ReadableTable::get(
            &table,
            super::keys::Key::system(super::keys::SYS_COMMIT_SEQ).bytes(),
        )?
        .map(|v| super::codec::decode_u64(v.value()))
        .transpose()?
        .unwrap_or(0);
        Ok(RedbView { table, applied })
    }
}

/// An MVCC snapshot: sees exactly the commits that completed before it was opened: redb's
/// view plus the published batches redb does not hold yet.
pub struct Snapshot {
    redb: Arc<RedbView>,
    /// Batches newer than redb's applied sequence, oldest first.
    mem: Vec<Arc<Batch>>,
    /// The store's key memo, which `scan_keys` (and `scan_prefix` of adjacency runs) reads
    /// through.
    memo: Option<Arc<KeyMemo>>,
}

impl Snapshot {
    /// `redb` must hold every batch that left `published` before the list was taken (true of
    /// a read transaction begun after the list was taken, as batches leave the list only
    /// after redb committed them, and of any view whose `applied` is at least the last
    /// drained sequence). The batches redb already holds are dropped here by their sequence,
    /// so the view is exactly the state after the newest of the two.
    pub fn new(redb: Arc<RedbView>, published: &Published) -> Snapshot {
        let mem = published
            .iter()
            .filter(|b| b.seq > redb.applied)
            .cloned()
            .collect();
        Snapshot {
            redb,
            mem,
            memo: None,
        }
    }

    /// This snapshot, reading key runs through `memo` (`memo` must be told of every batch
    /// before it is published: store/memo.rs).
    pub fn with_memo(mut self, memo: Arc<KeyMemo>) -> Snapshot {
        self.memo = memo.enabled().then_some(memo);
        self
    }

    /// The commit sequence of the newest batch this snapshot holds.
    pub fn seq(&self) -> u64 {
        self.mem.last().map_or(self.redb.applied, |b| b.seq)
    }

    #[cfg(test)]
    pub fn redb_view(&self) -> Arc<RedbView> {
        self.redb.clone()
    }
}

impl KvRead for Snapshot {
    fn shared(&self) -> Option<&(dyn KvRead + Sync)> {
        Some(self)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if !self.mem.is_empty() {
            let h = hash_bytes(key);
            for b in self.mem.iter().rev() {
                if !b.filter.may_hold(h) {
                    continue;
                }
                if let Some(v) = b.writes.get(key) {
                    return Ok(v.clone());
                }
            }
        }
        Ok(self.redb.table.get(key)?.map(|g| g.value().to_vec()))
    }
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        if self.mem.is_empty() {
            return scan_table(&self.redb.table, start, end, reverse, visit);
        }
        let mut pending = newest_wins(&self.mem, (Bound::Included(start), Bound::Excluded(end)));
        if reverse {
            pending.reverse();
        }
        merge_scan(&pending, reverse, visit, &mut |v| {
            scan_table(&self.redb.table, start, end, reverse, v)
        })
    }
    fn values_run(&self, prefix: &[u8]) -> Option<super::memo::ValuesRun> {
        self.memo.as_ref()?.values_run(self.seq(), prefix)
    }
    fn scan_prefix(&self, prefix: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        let read = |v: Visit| self.scan(prefix, &super::keys::prefix_end(prefix), reverse, v);
        match &self.memo {
            // The memo reads through `read` what it does not hold with values.
            Some(m) => m.scan_prefix(self.seq(), prefix, reverse, visit, &read, true),
            None => read(visit),
        }
    }
    fn record_label(
        &self,
        key: &[u8],
        decode: &dyn Fn(&[u8]) -> Result<String>,
    ) -> Result<Option<Arc<str>>> {
        let read = || stored_label(self, key, decode);
        match &self.memo {
            Some(m) => m.label(self.seq(), key, &read),
            None => read(),
        }
    }
    fn scan_keys(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        match &self.memo {
            Some(m) if is_prefix_end(start, end) => {
                let read = |v: Visit| self.scan(start, end, reverse, v);
                m.scan_prefix(self.seq(), start, reverse, visit, &read, false)
            }
            _ => self.scan(start, end, reverse, visit),
        }
    }
    fn scan_prefix_keys(&self, prefix: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        let read = |v: Visit| self.scan(prefix, &super::keys::prefix_end(prefix), reverse, v);
        match &self.memo {
            Some(m) => m.scan_prefix(self.seq(), prefix, reverse, visit, &read, false),
            None => read(visit),
        }
    }
    fn memoizes(&self, start: &[u8], end: &[u8]) -> bool {
        self.memo
            .as_ref()
            .is_some_and(|m| is_prefix_end(start, end) && m.holds_or_fits(start))
    }
}

/// A view that allows `budget` key reads (a get, or a key a scan visits) and fails every read
/// after that. Lets a caller try work on the calling thread and hand it elsewhere once it
/// proves large. Invariant: a result computed while [`Budgeted::exceeded`] is false saw every
/// read answered by `inner`; once it is true the result must be discarded, even an `Ok` one
/// (a caller may have dropped a failed read).
pub struct Budgeted<'a, R: ?Sized> {
    inner: &'a R,
    left: std::cell::Cell<u32>,
    exceeded: std::cell::Cell<bool>,
}

impl<'a, R: KvRead + ?Sized> Budgeted<'a, R> {
    pub fn new(inner: &'a R, budget: u32) -> Self {
        Budgeted {
            inner,
            left: std::cell::Cell::new(budget),
            exceeded: std::cell::Cell::new(false),
        }
    }

    pub fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    fn spend(&self) -> Result<()> {
        match self.left.get() {
            0 => {
                self.exceeded.set(true);
                // Not `Error::internal`: running out is expected and is not logged.
                Err(crate::error::Error::new(
                    crate::error::ErrorCode::Internal,
                    "read budget exceeded",
                ))
            }
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }
}

impl<R: KvRead + ?Sized> KvRead for Budgeted<'_, R> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.spend()?;
        self.inner.get(key)
    }
    fn record_label(
        &self,
        key: &[u8],
        decode: &dyn Fn(&[u8]) -> Result<String>,
    ) -> Result<Option<Arc<str>>> {
        self.spend()?;
        self.inner.record_label(key, decode)
    }
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.spend()?; // the descent, even when the range is empty
        self.inner.scan(start, end, reverse, &mut |k, v| {
            self.spend()?;
            visit(k, v)
        })
    }
    fn scan_keys(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.spend()?;
        self.inner.scan_keys(start, end, reverse, &mut |k, v| {
            self.spend()?;
            visit(k, v)
        })
    }
    fn scan_prefix_keys(&self, prefix: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.spend()?;
        self.inner.scan_prefix_keys(prefix, reverse, &mut |k, v| {
            self.spend()?;
            visit(k, v)
        })
    }
    fn memoizes(&self, start: &[u8], end: &[u8]) -> bool {
        self.inner.memoizes(start, end)
    }
}

impl KvRead for redb::Table<'_, &'static [u8], &'static [u8]> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(ReadableTable::get(self, key)?.map(|g| g.value().to_vec()))
    }
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        scan_table(self, start, end, reverse, visit)
    }
}

/// Pending writes over a base view. A write batch mutates only its overlay; the writer copies
/// the overlay into the redb transaction only when the whole batch succeeded, so a failing
/// batch never leaves a partial write in its commit group.
///
/// Writes land in `fresh`, in write order, and move into the sorted `writes` at the next read
/// (or `into_writes`): a run of writes with no read between them (a bulk link) is sorted
/// once instead of inserted into the map one by one. Invariant: every read first settles
/// `fresh`, so reads see every earlier write; a later write of a key wins.
pub struct Overlay<'b, R: KvRead> {
    base: &'b R,
    writes: std::cell::RefCell<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    fresh: std::cell::RefCell<Vec<KeyWrite>>,
}

/// A key and its new value (None: deleted).
type KeyWrite = (Vec<u8>, Option<Vec<u8>>);

impl<'b, R: KvRead> Overlay<'b, R> {
    pub fn new(base: &'b R) -> Self {
        Overlay {
            base,
            writes: Default::default(),
            fresh: Default::default(),
        }
    }
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.fresh.get_mut().push((key, Some(value)));
    }
    pub fn delete(&mut self, key: Vec<u8>) {
        self.fresh.get_mut().push((key, None));
    }
    /// Moves `fresh` into `writes`. No-op (and no mutable borrow of `writes`) when `fresh` is
    /// empty, which it always is while a scan of this overlay runs (writing needs `&mut`).
    fn settle(&self) {
        let mut fresh = self.fresh.borrow_mut();
        if fresh.is_empty() {
            return;
        }
        let mut writes = self.writes.borrow_mut();
        if fresh.len() == 1 || !writes.is_empty() {
            writes.extend(fresh.drain(..));
            return;
        }
        let order = write_order(&fresh);
        let mut sorted: Vec<KeyWrite> = Vec::with_capacity(fresh.len());
        for i in order {
            let (k, v) = std::mem::take(&mut fresh[i]);
            match sorted.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => sorted.push((k, v)),
            }
        }
        fresh.clear();
        *writes = sorted.into_iter().collect();
    }
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.settle();
        self.writes.into_inner()
    }
    /// Takes another overlay's pending writes over this one (theirs win on equal keys).
    pub fn absorb(&mut self, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        self.settle();
        let mine = self.writes.get_mut();
        if mine.is_empty() {
            *mine = writes;
        } else {
            mine.extend(writes);
        }
    }
}

/// The positions of `writes` ordered by (key, position): equal keys stay in write order.
/// Each key is compared first by the 16 bytes after the prefix all the keys share (zero-padded:
/// where two such words differ, they order as the keys do), so most comparisons are one u128
/// comparison; equal words fall back to the whole keys. The (word, key, position) items are
/// sorted unstably in place (the position makes every item distinct).
fn write_order(writes: &[KeyWrite]) -> Vec<usize> {
    let first = writes.first().map_or(&[][..], |w| w.0.as_slice());
    let shared = writes.iter().fold(first.len(), |n, w| {
        first[..n]
            .iter()
            .zip(&w.0)
            .take_while(|(a, b)| a == b)
            .count()
    });
    let word = |k: &[u8]| {
        let mut w = [0u8; 16];
        let tail = &k[shared.min(k.len())..];
        let n = tail.len().min(16);
        w[..n].copy_from_slice(&tail[..n]);
        u128::from_be_bytes(w)
    };
    let mut by_key: Vec<(u128, &[u8], usize)> = writes
        .iter()
        .enumerate()
        .map(|(i, w)| (word(&w.0), w.0.as_slice(), i))
        .collect();
    by_key.sort_unstable();
    by_key.into_iter().map(|(_, _, i)| i).collect()
}

impl<R: KvRead> KvRead for Overlay<'_, R> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.settle();
        let hit = self.writes.borrow().get(key).cloned();
        match hit {
            Some(v) => Ok(v),
            None => self.base.get(key),
        }
    }

    /// Merges the base range with the pending writes (pending wins on equal keys).
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
        self.settle();
        let writes = self.writes.borrow();
        let pending: Vec<(&[u8], Option<&[u8]>)> = {
            let r = writes
                .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
                .map(|(k, v)| (k.as_slice(), v.as_deref()));
            if reverse {
                r.rev().collect()
            } else {
                r.collect()
            }
        };
        merge_scan(&pending, reverse, visit, &mut |v| {
            self.base.scan(start, end, reverse, v)
        })
    }
}

/// Visits a base range merged with `pending` writes (in scan order; `None` deletes): pending
/// wins on equal keys. `base` runs the base scan with the callback it is given.
fn merge_scan(
    pending: &[(&[u8], Option<&[u8]>)],
    reverse: bool,
    visit: Visit,
    base: &mut dyn FnMut(Visit) -> Result<()>,
) -> Result<()> {
    let mut p = 0;
    let before = |a: &[u8], b: &[u8]| if reverse { a > b } else { a < b };
    let mut stopped = false;
    base(&mut |k, v| {
        while p < pending.len() && before(pending[p].0, k) {
            if let Some(pv) = pending[p].1 {
                if !visit(pending[p].0, pv)? {
                    stopped = true;
                    return Ok(false);
                }
            }
            p += 1;
        }
        if p < pending.len() && pending[p].0 == k {
            let entry = pending[p].1;
            p += 1;
            return match entry {
                Some(pv) => {
                    let go = visit(k, pv)?;
                    stopped = !go;
                    Ok(go)
                }
                None => Ok(true),
            };
        }
        let go = visit(k, v)?;
        stopped = !go;
        Ok(go)
    })?;
    if !stopped {
        for (k, v) in &pending[p..] {
            if let Some(v) = v {
                if !visit(k, v)? {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// A seeded xorshift generator for tests: each call gives a number below its argument.
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = seed;
    move |n| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    }
}

#[cfg(test)]
mod tests {
    /// `write_order` orders as a stable sort by key does: keys sharing long prefixes, keys
    /// that are prefixes of others (also by a zero byte), duplicates, the empty key.
    #[test]
    fn write_order_is_a_stable_sort_by_key() {
        let mut rng = super::test_rng(0x2545_F491_4F6C_DD1D);
        let mut next = move || rng(u64::MAX);
        for round in 0..200 {
            let n = (next() % 60) as usize;
            let common: Vec<u8> = (0..round % 24).map(|i| i as u8).collect();
            let writes: Vec<super::KeyWrite> = (0..n)
                .map(|i| {
                    let mut k = common.clone();
                    // Half the keys share a run of 16-20 more bytes (words equal past the
                    // shared prefix: the whole keys decide), the rest may differ at once.
                    if i % 2 == 0 {
                        k.extend(std::iter::repeat_n(7u8, 16 + (round % 5)));
                    }
                    for _ in 0..next() % 40 {
                        // Few distinct bytes (zero among them): many shared prefixes and ties.
                        k.push([0u8, 1, 0xFF][(next() % 3) as usize]);
                    }
                    (k, Some(vec![i as u8]))
                })
                .collect();
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by(|&a, &b| writes[a].0.cmp(&writes[b].0));
            assert_eq!(super::write_order(&writes), want, "round {round}");
        }
        assert!(super::write_order(&[]).is_empty());
    }

    use super::*;

    struct Mem(BTreeMap<Vec<u8>, Vec<u8>>);
    impl KvRead for Mem {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(self.0.get(key).cloned())
        }
        fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: Visit) -> Result<()> {
            let r = self
                .0
                .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
            let items: Vec<_> = if reverse {
                r.rev().collect()
            } else {
                r.collect()
            };
            for (k, v) in items {
                if !visit(k, v)? {
                    break;
                }
            }
            Ok(())
        }
    }

    /// Writes kept unsorted until a read see the same as writes inserted one by one: the last
    /// write of a key wins, in reads, scans and the writes handed on, with and without reads
    /// in between.
    #[test]
    fn overlay_reads_see_every_earlier_write_and_the_last_wins() {
        let base = Mem((0u8..6).map(|i| (vec![i], vec![i])).collect());
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut ov = Overlay::new(&base);
        let mut x = 7u32;
        for step in 0..400u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let k = vec![((x >> 8) % 12) as u8];
            if (x >> 4).is_multiple_of(3) {
                ov.delete(k.clone());
                model.insert(k, None);
            } else {
                let v = vec![(step % 251) as u8, 9];
                ov.put(k.clone(), v.clone());
                model.insert(k, Some(v));
            }
            if step % 37 == 36 {
                // A read settles the writes so far; the model says what it must see.
                let want: Vec<(Vec<u8>, Vec<u8>)> = (0u8..12)
                    .filter_map(|i| {
                        let k = vec![i];
                        match model.get(&k) {
                            Some(v) => v.clone().map(|v| (k, v)),
                            None => base.0.get(&k).map(|v| (k, v.clone())),
                        }
                    })
                    .collect();
                let mut got = Vec::new();
                ov.scan(&[0], &[12], false, &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    Ok(true)
                })
                .unwrap();
                assert_eq!(got, want, "step {step}");
                for (k, v) in &want {
                    assert_eq!(ov.get(k).unwrap().as_ref(), Some(v));
                }
            }
        }
        // Writes with no read at all are sorted once when handed on.
        let mut unread = Overlay::new(&base);
        for (k, v) in [(3u8, 1u8), (1, 2), (3, 3), (2, 4), (1, 5)] {
            unread.put(vec![k], vec![v]);
        }
        unread.delete(vec![2]);
        let expect_unread: BTreeMap<Vec<u8>, Option<Vec<u8>>> = [
            (vec![1], Some(vec![5])),
            (vec![2], None),
            (vec![3], Some(vec![3])),
        ]
        .into();
        assert_eq!(unread.into_writes(), expect_unread);
        let mut merged = Overlay::new(&base);
        merged.put(vec![1], vec![42]);
        merged.absorb(ov.into_writes());
        let mut expect = model.clone();
        expect.entry(vec![1]).or_insert(Some(vec![42]));
        assert_eq!(merged.into_writes(), expect);
    }

    #[test]
    fn a_budgeted_view_answers_until_its_reads_run_out() {
        let m = Mem((0u8..10).map(|i| (vec![i], vec![i])).collect());
        let view = Budgeted::new(&m, 5);
        assert_eq!(view.get(&[3]).unwrap(), Some(vec![3])); // 1 read
        let mut seen = Vec::new();
        view.scan(&[0], &[3], false, &mut |k, _| {
            seen.push(k[0]);
            Ok(true)
        })
        .unwrap(); // the descent and 3 keys: 4 reads, none left
        assert_eq!(seen, [0, 1, 2]);
        assert!(!view.exceeded());
        assert!(view.get(&[1]).is_err());
        assert!(view.exceeded());

        // A scan that outruns the budget fails mid-way; a caller that drops the error still
        // sees `exceeded`.
        let view = Budgeted::new(&m, 4);
        let mut n = 0;
        let _ = view.scan_prefix(&[], false, &mut |_, _| {
            n += 1;
            Ok(true)
        });
        assert_eq!(n, 3);
        assert!(view.exceeded());
    }

    #[test]
    fn a_bloom_filter_holds_every_key_it_was_built_from() {
        let key = |i: u32| format!("key-{}-{i}", i % 7).into_bytes();
        let f = Bloom::new((0..10_000).map(|i| hash_bytes(&key(i))), 10_000);
        assert!((0..10_000).all(|i| f.may_hold(hash_bytes(&key(i)))));
        // Keys it was not built from are mostly ruled out (~1.4% expected).
        let false_hits = (10_000..20_000)
            .filter(|&i| f.may_hold(hash_bytes(&key(i))))
            .count();
        assert!(false_hits < 500, "{false_hits} false positives of 10,000");
        // An empty filter rules everything out.
        let empty = Bloom::new(std::iter::empty(), 0);
        assert!(!empty.may_hold(hash_bytes(b"x")));
    }

    #[test]
    fn a_snapshot_reads_the_newest_batch_holding_a_key_then_redb() {
        use redb::ReadableDatabase;
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("kv.redb")).unwrap();
        let key = |i: u64| format!("k{i:05}").into_bytes();
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(KV).unwrap();
            for i in 0..300 {
                t.insert(&key(i)[..], &b"redb"[..]).unwrap();
                model.insert(key(i), Some(b"redb".to_vec()));
            }
        }
        txn.commit().unwrap();
        // 100 batches: each writes or deletes a pseudo-random handful of keys 0..400.
        let mut x = 12345u64;
        let mut batches = Vec::new();
        for seq in 1..=100u64 {
            let mut writes = BTreeMap::new();
            for _ in 0..8 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = key((x >> 33) % 400);
                let v = (!(x >> 20).is_multiple_of(5)).then(|| format!("b{seq}").into_bytes());
                writes.insert(k.clone(), v.clone());
                model.insert(k, v);
            }
            batches.push(Arc::new(Batch::new(seq, writes)));
        }
        let view = Arc::new(RedbView::new(&db.begin_read().unwrap()).unwrap());
        let snap = Snapshot::new(view, &Arc::new(batches));
        for i in 0..450 {
            assert_eq!(
                snap.get(&key(i)).unwrap(),
                model.get(&key(i)).cloned().flatten(),
                "key {i}"
            );
        }
    }

    #[test]
    fn newest_batch_wins_in_key_order() {
        let batch = |seq: u64, w: &[(u8, Option<u8>)]| {
            Arc::new(Batch::new(
                seq,
                w.iter()
                    .map(|(k, v)| (vec![*k], v.map(|v| vec![v])))
                    .collect(),
            ))
        };
        let batches = vec![
            batch(1, &[(1, Some(1)), (2, Some(1)), (4, Some(1))]),
            batch(2, &[(2, Some(2)), (3, None)]),
            batch(3, &[(1, None), (4, Some(3))]),
        ];
        let all = newest_wins(&batches, (Bound::Unbounded, Bound::Unbounded));
        let want: Vec<(&[u8], Option<&[u8]>)> = vec![
            (&[1], None),
            (&[2], Some(&[2])),
            (&[3], None),
            (&[4], Some(&[3])),
        ];
        assert_eq!(all, want);
        let some = newest_wins(
            &batches,
            (Bound::Included(&[2][..]), Bound::Excluded(&[4][..])),
        );
        assert_eq!(some, want[1..3].to_vec());
        let first = newest_wins(&batches[..1], (Bound::Excluded(&[1][..]), Bound::Unbounded));
        let want: Vec<(&[u8], Option<&[u8]>)> = vec![(&[2], Some(&[1])), (&[4], Some(&[1]))];
        assert_eq!(first, want);
    }

    /// The merge against a reference (later batches overwrite earlier ones in a map), on
    /// batches with interleaved runs, shared keys and deletions.
    #[test]
    fn newest_wins_matches_a_map_of_every_batch_in_order() {
        let mut next = test_rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..200 {
            let batches: Vec<Arc<Batch>> = (0..1 + next(8))
                .map(|seq| {
                    let writes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..next(30))
                        .map(|_| {
                            let key = vec![next(3) as u8, next(40) as u8];
                            let value = (next(4) != 0).then(|| vec![seq as u8]);
                            (key, value)
                        })
                        .collect();
                    Arc::new(Batch::new(seq, writes))
                })
                .collect();
            let mut want: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
            for b in &batches {
                for (k, v) in &b.writes {
                    want.insert(k, v.as_deref());
                }
            }
            let got = newest_wins(&batches, (Bound::Unbounded, Bound::Unbounded));
            assert_eq!(got, want.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
            // A range, as an overlay's scan asks for one.
            let (a, b) = (
                vec![next(3) as u8, next(40) as u8],
                vec![next(3) as u8, next(40) as u8],
            );
            let (lo, hi) = (a.clone().min(b.clone()), a.max(b));
            let range = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
            let got = newest_wins(&batches, range);
            let want: Vec<_> = want
                .range::<[u8], _>(range)
                .map(|(k, v)| (*k, *v))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn overlay_merges_scans_in_both_directions() {
        let base = Mem([(vec![1], vec![1]), (vec![3], vec![3]), (vec![5], vec![5])]
            .into_iter()
            .collect());
        let mut ov = Overlay::new(&base);
        ov.put(vec![2], vec![20]);
        ov.delete(vec![3]);
        ov.put(vec![5], vec![50]);
        ov.put(vec![6], vec![60]);
        for reverse in [false, true] {
            let mut seen = Vec::new();
            ov.scan(&[0], &[9], reverse, &mut |k, v| {
                seen.push((k[0], v[0]));
                Ok(true)
            })
            .unwrap();
            let mut want = vec![(1, 1), (2, 20), (5, 50), (6, 60)];
            if reverse {
                want.reverse();
            }
            assert_eq!(seen, want);
        }
        let mut first = None;
        ov.scan(&[0], &[9], true, &mut |k, _| {
            first = Some(k[0]);
            Ok(false)
        })
        .unwrap();
        assert_eq!(first, Some(6));
        assert_eq!(ov.get(&[3]).unwrap(), None);
        assert_eq!(ov.get(&[1]).unwrap(), Some(vec![1]));
    }
}
