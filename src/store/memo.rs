//! The key memo: runs of keys that snapshots read from the store once and then from memory.
//!
//! Graph searches read the same short key runs over and over: a node's adjacency entries of
//! one type and direction, the index entries of one property value. Each read from redb is a
//! B-tree descent and a cursor step per key (~55% of a one-hop search's CPU). The memo keeps
//! such a run's keys (without values) after a snapshot read it whole, and later snapshots read
//! it from memory while nothing has changed under it.
//!
//! Which runs: a prefix range (`end == keys::prefix_end(start)`) inside one *domain*:
//! - the index entries of one property: `PROP_INDEX` + property id (runs: one label and
//!   value, or a label);
//! - the adjacency entries of one relationship type: `ADJACENCY` + node + direction + type
//!   (run: one node's relationships of that type in that direction);
//! - the adjacency entries of one node: `ADJACENCY` + node [+ direction] (runs of every
//!   type: a record's relationships as its listing reads them). A relationship written
//!   elsewhere leaves these runs valid.
//!
//! Invariant (why a memo answer equals the snapshot's own): the store calls [`KeyMemo::note`]
//! with every batch before the batch is published, so `modified[domain]` read after a snapshot
//! was taken is at least the sequence of every batch in that snapshot that wrote into the
//! domain. A run is used or remembered only when that value `m` is at most the snapshot's
//! sequence: then the snapshot holds the domain exactly as it has been since the batch `m`,
//! and a run remembered with `m` is the domain's state after `m`. A later snapshot uses the
//! run only when it reads the same `m`: no batch has written into the domain since.
//! A domain never written since the process started reads 0 (its state is the one redb had at
//! startup, and any write after that raises it). The map is bounded: past `MODIFIED_MAX`
//! domains it starts over with a floor, the sequence of the batch being noted, which every
//! domain not in it then reads. The floor is at least every forgotten entry, so a run read
//! before reads a larger value and is read again, and a domain's value only ever grows.
//! Without a lookup in `modified` or a node slot: `last` is the sequence of the last noted
//! batch that wrote into any domain or node (set after them, also before publishing). A run
//! read while `last` was `g` by a snapshot holding batch `g` (hence every noted batch) is its
//! domain's state for as long as `last` stays `g`, so a snapshot that holds batch `g` uses it
//! while `last == g`. The same holds of a run such a snapshot finds valid by `modified`: its
//! table slot keeps the `g` it is known valid for (the latest one found, stored while the
//! table is read; a stale one only costs a check), so after a write elsewhere each run is
//! checked in `modified` once, not at every use.
//! Node domains are not in the map (a bulk link writes into hundreds of thousands): each
//! hashes to a slot of `nodes`, which holds the largest sequence noted for any node of the
//! slot and is never forgotten. Two nodes sharing a slot read each other's writes too: a run
//! is read again for nothing, never used when stale (the value is still at least the
//! sequence of every batch that wrote into the node).
//!
//! Values: an adjacency run is also kept with its values when a snapshot reads it with them
//! (listing a record's relationships reads each relationship from its adjacency value). Runs
//! with values hold at most half of a shard and never start one over (when their half is
//! full, the shard's runs with values are dropped, key runs stay), so listings do not push
//! out the key runs graph searches reread. A run is not copied past its part of a shard. An adjacency value changes only by a write of its key, so such a
//! run is valid exactly when its keys are. A run with values answers key-only reads too, and
//! is handed out whole to a listing that reads it in place (`KeyMemo::values_run`, by the
//! same rules as a scan: `KeyMemo::find`).
//!
//! Labels: a record's label (what a listing of its relationships reads besides its adjacency)
//! is kept by its record key, in a node domain of its own (`RECORD` + node), whose slot every
//! batch writing the record raises. The same rule applies: a label read by a snapshot of
//! sequence `seq` after the slot read `m <= seq` is the record's label since `m`, used while
//! the slot still reads `m`, and, as for runs, while `last` stays at a value a snapshot that
//! holds it found the label valid for (a batch writing a record moves `last` too): a hit
//! then reads the label's table slot only. Labels take at most 1/[`LABEL_SHARE`] of the
//! budget; a shard of them that is full starts over. An entry sits whole in its table slot
//! (record key inline), and the records of one label in a shard share one copy of its text:
//! a hit reads the slot only, and answers without allocating.
//!
//! Tables: runs and labels are filed by hash in [`Slots`] tables (store/slots.rs), where a
//! lookup reads one cache line, then (for a run) the run. A caller about to list a record's
//! relationships asks for those lines first (`prefetch_label`, `prefetch_run`), so that the
//! label's and the run's lookups wait for memory once, together, rather than one after the
//! other; a run with values found for a listing has its lines asked for at once.
//!
//! Memory: the runs' keys (and values) are counted against a budget (`storage.key_memo_mb`), split evenly
//! over the memo's shards; remembering a run that would exceed its shard's part starts that
//! shard over. A budget of 0 turns the memo off.

use super::keys::{self, prefix_end};
use super::kv::Visit;
use super::slots::{self, Hashed, Slots};
use crate::error::Result;
use crate::model::{hash_bytes, IdHash};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Default budget of remembered keys, MiB.
pub const DEFAULT_KEY_MEMO_MB: u64 = 256;

/// The `last` an entry is known valid for when it is known valid for none: read by a snapshot
/// that lacked some noted batch (`KeyMemo::known_for`).
const NOT_LAST: u64 = u64::MAX;

/// Bytes a remembered run costs besides its encoding (its table slot, 32 bytes in a table at
/// most half full; its allocation's header).
const RUN_OVERHEAD: usize = 80;

/// Where a tenant key's kind byte is: after the keyspace byte and the tenant id.
const KIND_AT: usize = 1 + 8;
/// Where an adjacency key's direction byte is (after the node id), and its type starts.
const ADJ_DIR_AT: usize = KIND_AT + 1 + 16;
/// Where a property index key's property id ends.
const PROP_END: usize = KIND_AT + 1 + 16;

/// One remembered run in one allocation (a lookup touches its table slot and this, nothing
/// else): a header (the domain's `modified` when it was read, the prefix's length with
/// `WITH_VALUES` set when the run holds values), the prefix, then each key's suffix after
/// the prefix, in key order, each preceded by its length (u16, little-endian), and in a run
/// with values followed by the value's length (u32, little-endian) and the value.
#[derive(Clone)]
struct Run(Arc<[u8]>);

const HEADER: usize = 8 + 4;
/// Bit of the header's prefix length: the run holds each key's value as well.
const WITH_VALUES: u32 = 1 << 31;

/// Bytes of a run with values asked for at once when it is found (a listing's run is
/// mostly a few hundred bytes; past this the CPU's own prefetching follows the reads).
const PREFETCH_MAX: usize = 2048;

// A table slot lies within one cache line (store/slots.rs): its entry's size and alignment.
const _: () = assert!(std::mem::size_of::<Option<RunSlot>>() == 32);
const _: () = assert!(std::mem::size_of::<Option<Label>>() == 64);

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Run {
    fn seq(&self) -> u64 {
        read_u64(&self.0, 0)
    }

    fn prefix(&self) -> &[u8] {
        let len = read_u32(&self.0, 8).unwrap_or(0) & !WITH_VALUES;
        &self.0[HEADER..HEADER + len as usize]
    }

    fn has_values(&self) -> bool {
        read_u32(&self.0, 8).unwrap_or(0) & WITH_VALUES != 0
    }

    /// Each entry in key order: where its suffix starts and ends, and where its value starts
    /// and ends (an empty range at the suffix's end in a run without values). An entry's
    /// encoding is `self.0[suffix start - 2 .. value end]`.
    fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        let values = self.has_values();
        let mut at = HEADER + self.prefix().len();
        std::iter::from_fn(move || {
            let len = *self.0.get(at)? as usize | (*self.0.get(at + 1)? as usize) << 8;
            let key = (at + 2, at + 2 + len);
            at = key.1;
            let value = if values {
                let vlen = read_u32(&self.0, at)? as usize;
                at += 4 + vlen;
                (at - vlen, at)
            } else {
                (at, at)
            };
            Some(Entry { key, value })
        })
    }

    fn cost(&self) -> usize {
        self.0.len() + RUN_OVERHEAD
    }
}

/// Where a snapshot reads a run (`KeyMemo::find`).
enum Found {
    /// From memory.
    Run(Run),
    /// From the store, remembering it as read by a snapshot that found the domain at `m` and
    /// `last` (`NOT_LAST` when it lacks a noted batch); `h`: the prefix's hash.
    Miss { h: u64, m: u64, last: u64 },
    /// From the store, not remembered.
    Read,
}

/// A remembered run with values as `KeyMemo::values_run` hands it out: shared, read in
/// place (the run stays valid for the snapshot that asked, whatever the memo does next).
#[derive(Clone)]
pub struct ValuesRun(Run);

impl ValuesRun {
    /// The whole encoding, which `entries` positions values in.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.0 .0
    }

    /// Each entry in key order: its key after the run's prefix, and where its value is in
    /// `bytes`.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], std::ops::Range<usize>)> + '_ {
        self.0
            .entries()
            .map(|e| (&self.0 .0[e.key.0..e.key.1], e.value.0..e.value.1))
    }
}

/// Where one entry of a run is in its encoding: its key's suffix, its value.
#[derive(Clone, Copy)]
struct Entry {
    key: (usize, usize),
    value: (usize, usize),
}

/// Encodes a run while its keys (and values) are read.
struct RunBuilder {
    buf: Vec<u8>,
    prefix_len: usize,
    values: bool,
    /// Every key had the prefix and a suffix of at most `u16::MAX` bytes, every value at most
    /// `u32::MAX` bytes, the prefix is shorter than `WITH_VALUES`, and the run stayed within
    /// `limit`.
    fits: bool,
    /// The most bytes the run may take: past it nothing more is copied and `over` is set.
    limit: usize,
    over: bool,
}

impl RunBuilder {
    fn new(seq: u64, prefix: &[u8], values: bool, limit: usize) -> RunBuilder {
        let mut buf = Vec::with_capacity(HEADER + prefix.len() + 64);
        buf.extend_from_slice(&seq.to_le_bytes());
        let fits = prefix.len() < WITH_VALUES as usize;
        let flag = if values { WITH_VALUES } else { 0 };
        buf.extend_from_slice(&(prefix.len() as u32 | flag).to_le_bytes());
        buf.extend_from_slice(prefix);
        RunBuilder {
            buf,
            prefix_len: prefix.len(),
            values,
            fits,
            limit,
            over: false,
        }
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        if !self.fits {
            return;
        }
        let value_len = if self.values { 4 + value.len() } else { 0 };
        if self.buf.len() + 2 + key.len() - self.prefix_len.min(key.len()) + value_len > self.limit
        {
            self.fits = false;
            self.over = true;
            return;
        }
        match key.strip_prefix(&self.buf[HEADER..HEADER + self.prefix_len]) {
            Some(suffix)
                if self.fits
                    && suffix.len() <= u16::MAX as usize
                    && value.len() <= u32::MAX as usize =>
            {
                self.buf
                    .extend_from_slice(&(suffix.len() as u16).to_le_bytes());
                self.buf.extend_from_slice(suffix);
                if self.values {
                    self.buf
                        .extend_from_slice(&(value.len() as u32).to_le_bytes());
                    self.buf.extend_from_slice(value);
                }
            }
            _ => self.fits = false,
        }
    }

    /// The run, in key order (`reverse`: the keys were pushed last first).
    fn finish(self, reverse: bool) -> Run {
        let run = Run(self.buf.into());
        if !reverse {
            return run;
        }
        let head = HEADER + run.prefix().len();
        let mut buf = Vec::with_capacity(run.0.len());
        buf.extend_from_slice(&run.0[..head]);
        let parts: Vec<Entry> = run.entries().collect();
        for e in parts.into_iter().rev() {
            buf.extend_from_slice(&run.0[e.key.0 - 2..e.value.1]);
        }
        Run(buf.into())
    }
}

/// Hashes of prefixes are the map's keys: used as they are.
#[derive(Default, Clone, Copy)]
struct PreHashed;

struct PreHasher(u64);

impl std::hash::BuildHasher for PreHashed {
    type Hasher = PreHasher;
    fn build_hasher(&self) -> PreHasher {
        PreHasher(0)
    }
}

impl std::hash::Hasher for PreHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 ^= hash_bytes(bytes);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Remembered runs by `hash_bytes` of their prefix (a run whose prefix differs from the one
/// looked up is not a match: two prefixes with one hash share a slot, the later one wins).
#[derive(Default)]
struct Runs {
    map: Slots<RunSlot>,
    bytes: usize,
    /// The part of `bytes` in runs with values (at most half the shard's budget).
    value_bytes: usize,
    /// Hashes of prefixes whose run was read whole and found larger than the shard's budget.
    oversized: std::collections::HashSet<u64, PreHashed>,
}

/// A run in its table slot, with the hash it is filed under and the value of `last` for
/// which it is known to be its domain's state (`NOT_LAST`: none yet; see the module comment)
/// (32 bytes: a slot is within one cache line).
#[repr(align(32))]
struct RunSlot {
    h: u64,
    last: AtomicU64,
    run: Run,
}

impl Hashed for RunSlot {
    fn hash(&self) -> u64 {
        self.h
    }
}

/// Remembered record labels by `hash_bytes` of the record key, and what they cost. Each
/// entry is held in the table's own slot (a lookup reads the slot, nothing else); its text is
/// shared with every entry of the same label through `names` (a shard of one label holds
/// one copy of it).
#[derive(Default)]
struct Labels {
    map: Slots<Label>,
    names: std::collections::HashSet<Arc<str>>,
    bytes: usize,
}

/// A record's label as read by a snapshot: the record's slot (`KeyMemo::node_slot` of its
/// key) read `seq` then, the value of `last` for which it is known to be the record's label
/// (`NOT_LAST`: none yet), and the record key it was read by (`RecordKey`), filed under `h`,
/// the key's hash (64 bytes: one cache line).
#[repr(align(64))]
struct Label {
    h: u64,
    seq: u64,
    last: AtomicU64,
    key: RecordKey,
    label: Arc<str>,
}

/// A record key as a label is filed by: the tenant id and the record id (the keyspace and
/// kind bytes, the same in every record key, left out so that the entry fits its line).
type RecordKey = [u8; ADJ_DIR_AT - 2];

impl Hashed for Label {
    fn hash(&self) -> u64 {
        self.h
    }
}

/// Bytes a remembered label costs: its slot in a table at most half full, and its text once
/// per shard.
const LABEL_COST: usize = 2 * std::mem::size_of::<Label>() + 16;

/// Labels take at most this part of the budget (1/8: 32 MiB by default, ~230,000 labels at
/// `LABEL_COST` each).
const LABEL_SHARE: usize = 8;

/// One of [`SHARDS`] parts of the labels, on lines of its own (away from the runs' locks).
#[derive(Default)]
#[repr(align(128))]
struct LabelShard(RwLock<Labels>);

/// Oversized prefixes a shard remembers before it starts that list over.
const OVERSIZED_MAX: usize = 4096;

/// One of [`SHARDS`] parts of the memo, by the prefix's hash: threads walking a frontier
/// together mostly take different locks.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    runs: RwLock<Runs>,
}

/// Runs answered from memory, counted on one of [`HIT_STRIPES`] cache lines by thread: a
/// count on the shard's own line (beside its lock) made each hit of two threads walking a
/// frontier together move that line between their cores (~8% of a W5 2-hop query).
#[derive(Default)]
#[repr(align(128))]
struct HitStripe(AtomicU64);

const HIT_STRIPES: usize = 16;

/// This thread's hit stripe: threads take stripes in turn as they first count a hit.
fn hit_stripe() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static STRIPE: usize = (NEXT.fetch_add(1, Ordering::Relaxed) as usize) % HIT_STRIPES;
    }
    STRIPE.with(|s| *s)
}

const SHARDS: usize = 16;

/// The shard of hash `h` (runs and labels): bits a shard's table (which files by the low
/// bits, store/slots.rs) does not use at any size it reaches.
fn shard_of(h: u64) -> usize {
    (h >> 32) as usize % SHARDS
}

/// Whether a remembered run or label is valid for a snapshot whose `known_for` is given
/// (`KeyMemo::known_for`): it is known valid for that value of `last` (`entry_last`), or
/// `by_domain` finds it is its domain's state in the snapshot, and then it is known valid for
/// that value, stored in the entry (while its table is read: the latest finding wins, and a
/// stale one only costs a check). The rule is the module comment's.
fn valid_for(known_for: u64, entry_last: &AtomicU64, by_domain: impl FnOnce() -> bool) -> bool {
    if known_for != NOT_LAST && entry_last.load(Ordering::Relaxed) == known_for {
        return true;
    }
    let valid = by_domain();
    if valid && known_for != NOT_LAST {
        entry_last.store(known_for, Ordering::Relaxed);
    }
    valid
}

pub struct KeyMemo {
    budget: usize,
    /// Domains `modified` holds before it starts over with a floor.
    modified_max: usize,
    /// The sequence of the last noted batch that wrote into each domain.
    modified: Mutex<Modified>,
    /// Node domains, by slot (`node_slot`): the largest sequence noted for a node of the slot.
    nodes: Box<[AtomicU64]>,
    /// The sequence of the last noted batch that wrote into any domain. A run read while it
    /// was `g`, by a snapshot holding every batch up to `g`, is the state of its domain for as
    /// long as `last` stays `g`: then no lookup in `modified` is needed.
    last: AtomicU64,
    /// Each shard holds at most `budget / SHARDS` bytes.
    shards: Box<[Shard]>,
    /// Record labels; each shard holds at most `budget / LABEL_SHARE / SHARDS` bytes.
    labels: Box<[LabelShard]>,
    hits: Box<[HitStripe]>,
}

/// The sequence of the last noted batch that wrote into each domain; `floor` for a domain
/// not in the map.
#[derive(Default)]
struct Modified {
    map: HashMap<Vec<u8>, u64, IdHash>,
    floor: u64,
}

/// Domains `Modified` keeps before it starts over (property ids and relationship types of
/// every tenant written since the start: ~100 bytes each).
pub const MODIFIED_MAX: usize = 100_000;

impl Modified {
    fn of(&self, domain: &[u8]) -> u64 {
        self.map.get(domain).copied().unwrap_or(self.floor)
    }
}

/// What the memo holds and has done (metrics, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoStats {
    pub runs: usize,
    pub bytes: usize,
    pub hits: u64,
}

/// Whether the memo may hold the run of keys under `prefix`: see the module comment.
fn eligible(prefix: &[u8]) -> bool {
    if prefix.len() <= KIND_AT || prefix[0] != keys::TENANT {
        return false;
    }
    match prefix[KIND_AT] {
        keys::PROP_INDEX => prefix.len() >= PROP_END,
        keys::ADJACENCY => match prefix.len() {
            n if n == ADJ_DIR_AT || n == ADJ_DIR_AT + 1 => true,
            // A type must end right at the prefix's end.
            n if n > ADJ_DIR_AT + 1 => {
                type_len(&prefix[ADJ_DIR_AT + 1..]) == Some(n - ADJ_DIR_AT - 1)
            }
            _ => false,
        },
        _ => false,
    }
}

/// The length of the escaped string (with its terminator) at the start of `b`.
fn type_len(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (0x00, 0x01) => return Some(i + 2),
            (0x00, _) => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// The node an eligible run's prefix covers every type of (keyspace, tenant, kind and node),
/// or None when the run's domain is in `Modified`.
fn run_node(prefix: &[u8]) -> Option<&[u8]> {
    (prefix[KIND_AT] == keys::ADJACENCY && prefix.len() <= ADJ_DIR_AT + 1)
        .then(|| &prefix[..ADJ_DIR_AT])
}

/// The `Modified` domain of an eligible run's prefix that has no `run_node`.
fn run_domain(prefix: &[u8]) -> Vec<u8> {
    match prefix[KIND_AT] {
        keys::PROP_INDEX => prefix[..PROP_END].to_vec(),
        _ => adjacency_type_domain(prefix),
    }
}

/// Node slots of a memo of `budget` bytes: one per 64 bytes of budget (8 bytes each, 1/8 of
/// the budget), a power of two from 16 to 2^22. A hit reads its node's slot only once after
/// each write (module comment), so their number costs memory, not lookups; fewer would let
/// a bulk write elsewhere make many runs stale (a slot is shared: 200,000 nodes written raise
/// ~5% of 2^22 slots, ~18% of 2^20).
fn node_slots(budget: usize) -> usize {
    (budget / 64).clamp(16, 1 << 22).next_power_of_two()
}

/// Tenant and kind, then the escaped type with its terminator, of an adjacency key (or of a
/// prefix reaching past its type).
fn adjacency_type_domain(key: &[u8]) -> Vec<u8> {
    let ty = &key[ADJ_DIR_AT + 1..];
    let len = type_len(ty).unwrap_or(ty.len());
    let mut d = Vec::with_capacity(KIND_AT + 1 + len);
    d.extend_from_slice(&key[..=KIND_AT]);
    d.extend_from_slice(&ty[..len]);
    d
}

/// Whether `end` is `keys::prefix_end(start)`.
pub fn is_prefix_end(start: &[u8], end: &[u8]) -> bool {
    match start.iter().rposition(|b| *b < 0xFF) {
        Some(i) => end.len() == i + 1 && end[..i] == start[..i] && end[i] == start[i] + 1,
        None => end == prefix_end(start).as_slice(),
    }
}

impl KeyMemo {
    pub fn new(budget_mb: u64) -> KeyMemo {
        Self::with_limits(
            usize::try_from(budget_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
            MODIFIED_MAX,
        )
    }

    /// A memo of `budget` bytes that keeps the last write of up to `modified_max` domains.
    pub fn with_limits(budget: usize, modified_max: usize) -> KeyMemo {
        KeyMemo {
            budget,
            modified_max,
            modified: Mutex::new(Modified::default()),
            nodes: match budget {
                0 => Box::new([]),
                b => (0..node_slots(b)).map(|_| AtomicU64::new(0)).collect(),
            },
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            labels: (0..SHARDS).map(|_| LabelShard::default()).collect(),
            hits: (0..HIT_STRIPES).map(|_| HitStripe::default()).collect(),
            last: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// The slot of a node domain (keyspace, tenant, kind and node); only when enabled.
    fn node_slot(&self, node: &[u8]) -> &AtomicU64 {
        self.slot_of_hash(hash_bytes(node))
    }

    /// The node slot of a domain whose `hash_bytes` is `h`.
    fn slot_of_hash(&self, h: u64) -> &AtomicU64 {
        &self.nodes[h as usize & (self.nodes.len() - 1)]
    }

    /// The sequence of the last noted batch that wrote into the domain of the run `prefix`.
    fn domain_seq(&self, prefix: &[u8]) -> u64 {
        match run_node(prefix) {
            Some(node) => self.node_slot(node).load(Ordering::Acquire),
            None => self
                .modified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .of(&run_domain(prefix)),
        }
    }

    /// Records that the batch `seq` writes `keys`. Must be called before the batch is
    /// published (see the module comment), by the one committer, in sequence order: then
    /// `seq` is at least every value a slot holds, and raising a slot is a plain store (no
    /// read-modify-write stalling on each slot's cache miss: a bulk link raises ~200,000).
    pub fn note<'k>(&self, seq: u64, keys: impl Iterator<Item = &'k [u8]>) {
        if !self.enabled() {
            return;
        }
        debug_assert!(
            seq >= self.last.load(Ordering::Relaxed),
            "noted out of order"
        );
        let mut raised = false;
        let mut raise = |slot: &AtomicU64| {
            slot.store(seq, Ordering::Release);
            raised = true;
        };
        // Domains of one batch, deduplicated; keys come sorted, so a domain's keys are mostly
        // consecutive (a node's always are: its slot is raised once per run of its keys).
        let mut domains: Vec<Vec<u8>> = Vec::new();
        let mut node: &[u8] = &[];
        // A domain is `head ++ tail`; allocated only when new to this batch.
        let mut add = |head: &[u8], tail: &[u8]| {
            let same = |d: &Vec<u8>| {
                d.len() == head.len() + tail.len() && d.starts_with(head) && d.ends_with(tail)
            };
            if !domains.iter().rev().any(same) {
                domains.push([head, tail].concat());
            }
        };
        for k in keys {
            if k.len() <= KIND_AT || k[0] != keys::TENANT {
                continue;
            }
            match k[KIND_AT] {
                keys::PROP_INDEX if k.len() >= PROP_END => add(&k[..PROP_END], &[]),
                keys::ADJACENCY if k.len() > ADJ_DIR_AT + 1 => {
                    let ty = &k[ADJ_DIR_AT + 1..];
                    let len = type_len(ty).unwrap_or(ty.len());
                    if k[..ADJ_DIR_AT] != *node {
                        node = &k[..ADJ_DIR_AT];
                        raise(self.node_slot(node));
                    }
                    add(&k[..=KIND_AT], &ty[..len]);
                }
                // A record's own domain: its label (no run reads it, so `last` need not move).
                keys::RECORD if k.len() == ADJ_DIR_AT => {
                    raise(self.node_slot(k));
                }
                _ => {}
            }
        }
        if domains.is_empty() && !raised {
            return;
        }
        if !domains.is_empty() {
            let mut m = self.modified.lock().unwrap_or_else(|p| p.into_inner());
            if m.map.len() + domains.len() > self.modified_max {
                m.map.clear();
                m.floor = seq;
            }
            for d in domains {
                m.map.insert(d, seq);
            }
        }
        // Every batch that wrote into a domain or a node (a record's label included) moves
        // `last`: runs and labels known valid for the value before are checked again.
        self.last.store(seq, Ordering::Release);
    }

    /// Whether [`KeyMemo::scan_prefix`] may answer the keys under `prefix` from memory (now
    /// or once it has read them).
    pub fn covers(&self, prefix: &[u8]) -> bool {
        self.enabled() && eligible(prefix)
    }

    /// Whether [`KeyMemo::scan_prefix`] may answer the keys and values under `prefix`: the
    /// adjacency runs it covers (a node's relationships, read with their values to list
    /// them). Index entries are only read for their keys.
    pub fn covers_values(&self, prefix: &[u8]) -> bool {
        self.covers(prefix) && prefix[KIND_AT] == keys::ADJACENCY
    }

    /// Whether `scan_prefix` of `prefix` is answered from memory or may be: covered, and not
    /// found too large for the memo the last time it was read whole. A caller that would
    /// otherwise split the read over threads reads it through the memo only then.
    pub fn holds_or_fits(&self, prefix: &[u8]) -> bool {
        if !self.covers(prefix) {
            return false;
        }
        let h = hash_bytes(prefix);
        !self
            .shard(h)
            .runs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .oversized
            .contains(&h)
    }

    /// The keys under `prefix` in a snapshot of sequence `seq`, from memory when the memo
    /// holds the run unchanged since, else through `read` (the snapshot's own scan of the
    /// prefix), which fills the memo when it reads the whole run. With `values` (only where
    /// [`KeyMemo::covers_values`]) `visit` gets each key's value, and only runs that hold
    /// values answer; without, it may get `&[]` or the value, and must not look at it.
    pub fn scan_prefix(
        &self,
        seq: u64,
        start: &[u8],
        reverse: bool,
        visit: Visit,
        read: &dyn Fn(Visit) -> Result<()>,
        values: bool,
    ) -> Result<()> {
        let (h, m, last) = match self.find(seq, start, values) {
            Found::Read => return read(visit),
            Found::Run(run) => return self.serve(&run, reverse, visit),
            Found::Miss { h, m, last } => (h, m, last),
        };
        // Read it through the snapshot, keeping the keys while the caller reads them all.
        // A run past its shard's part of the budget (half of it for runs with values) is not
        // copied further.
        let shard_budget = self.budget / SHARDS;
        let part = if values {
            shard_budget / 2
        } else {
            shard_budget
        };
        let mut run = RunBuilder::new(m, start, values, part.saturating_sub(RUN_OVERHEAD));
        let mut whole = true;
        read(&mut |k, v| {
            let go = visit(k, v)?;
            whole &= go;
            if go {
                run.push(k, v);
            }
            Ok(go)
        })?;
        if whole && run.fits {
            self.remember(h, run.finish(reverse), last);
        } else if whole && run.over && !values {
            self.mark_oversized(h);
        }
        Ok(())
    }

    /// Where a snapshot of sequence `seq` reads the run `start` (with its values when
    /// `values`): a remembered run, or the store (remembering the run as it reads it when
    /// `Miss`). The rules are the module comment's.
    fn find(&self, seq: u64, start: &[u8], values: bool) -> Found {
        let covered = match values {
            true => self.covers_values(start),
            false => self.covers(start),
        };
        if !covered {
            return Found::Read;
        }
        // Read after the snapshot was taken (see the module comment), `last` before `modified`.
        let known_for = self.known_for(seq);
        let h = hash_bytes(start);
        let runs = self.shard(h).runs.read().unwrap_or_else(|p| p.into_inner());
        let held = runs
            .map
            .get(h)
            // A run with values is about to be read whole (a listing): its lines are asked
            // for together, while its header is checked.
            .inspect(|s| {
                if values {
                    slots::prefetch_bytes(&s.run.0, 64, PREFETCH_MAX);
                }
            })
            .filter(|s| s.run.prefix() == start && (s.run.has_values() || !values));
        let mut domain = None;
        if let Some(s) = held {
            let by_domain = || {
                let m = *domain.insert(self.domain_seq(start));
                m <= seq && s.run.seq() == m
            };
            if valid_for(known_for, &s.last, by_domain) {
                return Found::Run(s.run.clone());
            }
        }
        let m = domain.unwrap_or_else(|| self.domain_seq(start));
        if m > seq {
            // The domain changed after this snapshot: its state is not the remembered one.
            return Found::Read;
        }
        Found::Miss {
            h,
            m,
            last: known_for,
        }
    }

    /// What an entry a snapshot of sequence `seq` finds valid is known valid for (its
    /// `last`): `last` as read now, after the snapshot was taken, when the snapshot holds it
    /// (and so every noted batch), else `NOT_LAST`.
    fn known_for(&self, seq: u64) -> u64 {
        match self.last.load(Ordering::Acquire) {
            last if last <= seq => last,
            _ => NOT_LAST,
        }
    }

    /// `key` as the record key whose label the memo keeps, when it is one and the memo is on.
    fn label_key(&self, key: &[u8]) -> Option<RecordKey> {
        if !(self.enabled()
            && key.len() == ADJ_DIR_AT
            && key[0] == keys::TENANT
            && key[KIND_AT] == keys::RECORD)
        {
            return None;
        }
        let mut record_key = [0; ADJ_DIR_AT - 2];
        record_key[..KIND_AT - 1].copy_from_slice(&key[1..KIND_AT]);
        record_key[KIND_AT - 1..].copy_from_slice(&key[KIND_AT + 1..]);
        Some(record_key)
    }

    /// A hint before looking up the label of the record under `key` ([`KeyMemo::label`]):
    /// asks for the line that lookup reads first (its table slot), so that it arrives while
    /// the caller does other work, or other lookups. (The record's node slot is read only
    /// when `last` has moved since the label was last found valid.)
    pub fn prefetch_label(&self, key: &[u8]) {
        if self.label_key(key).is_none() {
            return;
        }
        let h = hash_bytes(key);
        let shard = &self.labels[shard_of(h)].0;
        shard
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .prefetch(h);
    }

    /// A hint before reading the run `prefix` with its values ([`KeyMemo::values_run`]): asks
    /// for the line of its table slot.
    pub fn prefetch_run(&self, prefix: &[u8]) {
        if !self.covers_values(prefix) {
            return;
        }
        let h = hash_bytes(prefix);
        let runs = self.shard(h).runs.read().unwrap_or_else(|p| p.into_inner());
        runs.map.prefetch(h);
    }

    /// The run `start` with its values, read in place, when a snapshot of sequence `seq` may
    /// read it from memory (counted as a hit); None otherwise, and the caller scans (which
    /// reads the store and remembers the run).
    pub fn values_run(&self, seq: u64, start: &[u8]) -> Option<ValuesRun> {
        match self.find(seq, start, true) {
            Found::Run(run) => {
                self.hits[hit_stripe()].0.fetch_add(1, Ordering::Relaxed);
                Some(ValuesRun(run))
            }
            Found::Read | Found::Miss { .. } => None,
        }
    }

    /// The label of the record under `key` in a snapshot of sequence `seq`: from memory when
    /// the memo holds it unchanged since, else through `read` (the snapshot's own), which is
    /// remembered (a missing record is not).
    pub fn label(
        &self,
        seq: u64,
        key: &[u8],
        read: &dyn Fn() -> Result<Option<Arc<str>>>,
    ) -> Result<Option<Arc<str>>> {
        let Some(record_key) = self.label_key(key) else {
            return read();
        };
        // Read after the snapshot was taken (see the module comment).
        let known_for = self.known_for(seq);
        let h = hash_bytes(key);
        let slot = self.slot_of_hash(h);
        let shard = &self.labels[shard_of(h)].0;
        // (In a block: its read lock is let go before the write below.)
        {
            let labels = shard.read().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = labels.map.get(h).filter(|l| l.key == record_key) {
                let by_slot = || {
                    let m = slot.load(Ordering::Acquire);
                    m <= seq && l.seq == m
                };
                if valid_for(known_for, &l.last, by_slot) {
                    self.hits[hit_stripe()].0.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(l.label.clone()));
                }
            }
        }
        let m = slot.load(Ordering::Acquire);
        if m > seq {
            return read();
        }
        let Some(text) = read()? else {
            return Ok(None);
        };
        let budget = self.budget / LABEL_SHARE / SHARDS;
        let mut labels = shard.write().unwrap_or_else(|p| p.into_inner());
        let mut name = labels.names.get(&*text).cloned();
        let text_cost = |name: &Option<Arc<str>>| match name {
            Some(_) => 0,
            None => text.len() + RUN_OVERHEAD,
        };
        if labels.bytes + LABEL_COST + text_cost(&name) > budget {
            *labels = Labels::default();
            name = None;
        }
        let cost = LABEL_COST + text_cost(&name);
        if labels.bytes + cost <= budget {
            let label = name.unwrap_or_else(|| {
                labels.names.insert(text.clone());
                text
            });
            labels.bytes += cost;
            let l = Label {
                h,
                seq: m,
                last: AtomicU64::new(known_for),
                key: record_key,
                label: label.clone(),
            };
            if labels.map.insert(l).is_some() {
                labels.bytes -= LABEL_COST;
            }
            return Ok(Some(label));
        }
        Ok(Some(text))
    }

    /// Visits a remembered run's keys (with their values when it holds them).
    fn serve(&self, run: &Run, reverse: bool, visit: Visit) -> Result<()> {
        self.hits[hit_stripe()].0.fetch_add(1, Ordering::Relaxed);
        let prefix = run.prefix();
        let mut key = Vec::with_capacity(prefix.len() + 48);
        key.extend_from_slice(prefix);
        let mut one = |e: Entry| {
            key.truncate(prefix.len());
            key.extend_from_slice(&run.0[e.key.0..e.key.1]);
            visit(&key, &run.0[e.value.0..e.value.1])
        };
        if reverse {
            let parts: Vec<Entry> = run.entries().collect();
            for part in parts.into_iter().rev() {
                if !one(part)? {
                    break;
                }
            }
        } else {
            for part in run.entries() {
                if !one(part)? {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Keeps `run`, read by a snapshot that holds every batch up to `last` (or `NOT_LAST`).
    fn remember(&self, h: u64, run: Run, last: u64) {
        let cost = run.cost();
        let budget = self.budget / SHARDS;
        if !run.has_values() && cost > budget {
            return self.mark_oversized(h);
        }
        let mut runs = self
            .shard(h)
            .runs
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if run.has_values() {
            // Runs with values take at most half a shard and never start it over: listing
            // many records' relationships does not push out the key runs searches reread.
            // When their half is full, the shard's runs with values (only) are dropped.
            if cost > budget / 2 {
                return;
            }
            let old_values = runs
                .map
                .get(h)
                .filter(|o| o.run.has_values())
                .map_or(0, |o| o.run.cost());
            if runs.value_bytes - old_values + cost > budget / 2 {
                let mut freed = 0;
                runs.map.retain(|s| {
                    freed += if s.run.has_values() { s.run.cost() } else { 0 };
                    !s.run.has_values()
                });
                runs.bytes -= freed;
                runs.value_bytes = 0;
            }
        }
        // The run it replaces leaves the shard either way.
        let old = runs.map.get(h).map_or(0, |o| o.run.cost());
        if runs.bytes - old + cost > budget {
            if run.has_values() {
                return;
            }
            runs.map.clear();
            runs.bytes = 0;
            runs.value_bytes = 0;
        }
        let values = if run.has_values() { cost } else { 0 };
        let slot = RunSlot {
            h,
            last: AtomicU64::new(last),
            run,
        };
        if let Some(RunSlot { run: old, .. }) = runs.map.insert(slot) {
            runs.bytes -= old.cost();
            if old.has_values() {
                runs.value_bytes -= old.cost();
            }
        }
        runs.bytes += cost;
        runs.value_bytes += values;
    }

    /// Remembers that the key run of prefix hash `h` is larger than its shard's part:
    /// callers that would split its reads over threads do so again (`holds_or_fits`).
    fn mark_oversized(&self, h: u64) {
        let mut runs = self
            .shard(h)
            .runs
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if runs.oversized.len() >= OVERSIZED_MAX {
            runs.oversized.clear();
        }
        runs.oversized.insert(h);
    }

    fn shard(&self, h: u64) -> &Shard {
        &self.shards[shard_of(h)]
    }

    pub fn stats(&self) -> MemoStats {
        let mut st = MemoStats {
            runs: 0,
            bytes: 0,
            hits: 0,
        };
        for shard in self.shards.iter() {
            let runs = shard.runs.read().unwrap_or_else(|p| p.into_inner());
            st.runs += runs.map.len();
            st.bytes += runs.bytes;
        }
        for shard in self.labels.iter() {
            st.bytes += shard.0.read().unwrap_or_else(|p| p.into_inner()).bytes;
        }
        st.hits = self.hits.iter().map(|h| h.0.load(Ordering::Relaxed)).sum();
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `n` keys under `prefix` (values of 20 bytes when `values`).
    fn run(prefix: &[u8], n: u32, values: bool) -> Run {
        let mut b = RunBuilder::new(1, prefix, values, usize::MAX);
        for i in 0..n {
            let key = [prefix, &i.to_be_bytes()].concat();
            b.push(&key, if values { &[7u8; 20] } else { &[] });
        }
        b.finish(false)
    }

    fn held(memo: &KeyMemo, prefix: &[u8]) -> bool {
        let h = hash_bytes(prefix);
        let runs = memo.shard(h).runs.read().unwrap();
        runs.map.get(h).is_some_and(|s| s.run.prefix() == prefix)
    }

    /// Replacing a run already held is weighed without the run it replaces: a shard with
    /// room for the new run once the old one leaves is not started over.
    #[test]
    fn a_run_replacing_one_held_is_weighed_without_it() {
        let memo = KeyMemo::with_limits(16 * 1000, 100);
        // Three prefixes that fall in one shard.
        let mut same = Vec::new();
        let first = memo.shard(hash_bytes(b"p0")) as *const Shard;
        for i in 0..10_000u32 {
            let p = format!("p{i}").into_bytes();
            if std::ptr::eq(memo.shard(hash_bytes(&p)), first) {
                same.push(p);
            }
            if same.len() == 3 {
                break;
            }
        }
        let (a, b, c) = (&same[0], &same[1], &same[2]);
        memo.remember(hash_bytes(a), run(a, 60, false), 1);
        memo.remember(hash_bytes(b), run(b, 50, false), 1);
        let bytes = || memo.shard(hash_bytes(a)).runs.read().unwrap().bytes;
        assert!(bytes() <= 1000 && bytes() > 700, "{}", bytes());
        // b grows by a few keys: the shard holds a and the new b without starting over.
        memo.remember(hash_bytes(b), run(b, 56, false), 1);
        assert!(held(&memo, a) && held(&memo, b));
        // b read with values, as a listing: it replaces b's key run the same way.
        memo.remember(hash_bytes(b), run(b, 10, true), 1);
        assert!(held(&memo, a) && held(&memo, b));
        // A run that does not fit beside them starts the shard over (key runs only).
        memo.remember(hash_bytes(c), run(c, 60, false), 1);
        assert!(held(&memo, c) && !held(&memo, a));
    }

    /// A run stays answered from memory across writes elsewhere (each checked against its
    /// domain once after a write, then known valid again), and is read from the store again
    /// once its own node is written, never for a snapshot older than that write.
    #[test]
    fn a_run_is_checked_again_after_a_write_elsewhere() {
        use std::cell::Cell;
        let memo = KeyMemo::with_limits(1 << 20, 100);
        let id = |n: u128| uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n);
        let node = |n: u128| keys::Key::tenant(1, keys::ADJACENCY).uuid(&id(n));
        let edge = |n: u128, i: u32| node(n).u8(0).str("T").uuid(&id(1000 + i as u128)).0;
        let reads = Cell::new(0);
        // (keys, store reads) of node `n`'s run by a snapshot of `seq` whose store holds
        // `held` relationships of it.
        let scan = |seq: u64, n: u128, held: u32| {
            let before = reads.get();
            let read = |visit: Visit| {
                reads.set(reads.get() + 1);
                for i in 0..held {
                    if !visit(&edge(n, i), b"v")? {
                        break;
                    }
                }
                Ok(())
            };
            let mut got = 0;
            let mut count = |_: &[u8], _: &[u8]| {
                got += 1;
                Ok(true)
            };
            memo.scan_prefix(seq, &node(n).0, false, &mut count, &read, true)
                .unwrap();
            (got, reads.get() - before)
        };
        assert_eq!(scan(1, 0, 3), (3, 1), "first read: the store");
        assert_eq!(scan(1, 0, 3), (3, 0), "then memory");
        // Another node's relationship, then a record's write: still memory each time.
        memo.note(2, std::iter::once(edge(7, 0).as_slice()));
        assert_eq!(scan(2, 0, 3), (3, 0));
        assert_eq!(scan(2, 0, 3), (3, 0));
        let record = keys::Key::tenant(1, keys::RECORD).uuid(&id(8)).0;
        memo.note(3, std::iter::once(record.as_slice()));
        assert_eq!(
            memo.last.load(Ordering::Relaxed),
            3,
            "a record write moves last"
        );
        assert_eq!(scan(3, 0, 3), (3, 0));
        // Its own node written: the store, and never memory for the older snapshot.
        memo.note(4, std::iter::once(edge(0, 3).as_slice()));
        assert_eq!(scan(3, 0, 3), (3, 1), "older snapshot");
        assert_eq!(scan(3, 0, 3), (3, 1), "older snapshot, not remembered");
        assert_eq!(scan(4, 0, 4), (4, 1));
        assert_eq!(scan(4, 0, 4), (4, 0));
    }

    /// A record's label is answered from memory until a batch writes the record (or another
    /// record of its slot), never to a snapshot older than that write, and a missing record
    /// is read every time.
    #[test]
    fn a_label_is_kept_until_its_record_is_written() {
        use std::cell::Cell;
        let memo = KeyMemo::with_limits(1 << 20, 100);
        let id = |n: u128| uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n);
        let key = |n: u128| keys::Key::tenant(1, keys::RECORD).uuid(&id(n)).0;
        let reads = Cell::new(0);
        // (label, store reads) of record `n` by a snapshot of `seq` whose record reads `label`.
        let label = |seq: u64, n: u128, label: Option<&str>| {
            let before = reads.get();
            let read = || {
                reads.set(reads.get() + 1);
                Ok(label.map(Arc::from))
            };
            let l = memo.label(seq, &key(n), &read).unwrap();
            (l, reads.get() - before)
        };
        let some = |s: &str| Some(Arc::<str>::from(s));
        assert_eq!(
            label(1, 0, Some("A")),
            (some("A"), 1),
            "first read: the store"
        );
        assert_eq!(label(1, 0, Some("A")), (some("A"), 0), "then memory");
        // Another record's write and a relationship of this one leave it.
        let adjacency = keys::Key::tenant(1, keys::ADJACENCY).uuid(&id(0)).u8(0).0;
        memo.note(2, [key(1).as_slice(), adjacency.as_slice()].into_iter());
        assert_eq!(label(2, 0, Some("A")), (some("A"), 0));
        // Its own write (a relabel): read again, not by a snapshot older than the write.
        memo.note(3, std::iter::once(key(0).as_slice()));
        assert_eq!(label(2, 0, Some("A")), (some("A"), 1), "older snapshot");
        assert_eq!(label(2, 0, Some("A")), (some("A"), 1), "not remembered");
        assert_eq!(label(3, 0, Some("B")), (some("B"), 1));
        assert_eq!(label(3, 0, Some("B")), (some("B"), 0));
        // Records of one label (in one shard) share its text.
        let shard = |n: u128| shard_of(hash_bytes(&key(n)));
        let other = (6..).find(|&n| shard(n) == shard(5)).unwrap();
        let (a, b) = (label(3, 5, Some("B")).0, label(3, other, Some("B")).0);
        assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
        // Deleted: None, read each time.
        memo.note(4, std::iter::once(key(0).as_slice()));
        assert_eq!(label(4, 0, None), (None, 1));
        assert_eq!(label(4, 0, None), (None, 1));
        // A memo without a budget reads every time.
        let off = KeyMemo::with_limits(0, 100);
        let read = || Ok(some("A"));
        assert_eq!(off.label(1, &key(0), &read).unwrap(), some("A"));
        assert_eq!(off.stats().bytes, 0);
    }
}
