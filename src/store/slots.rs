//! A table of entries filed by a 64-bit hash their owner computed, laid out so that a lookup
//! reads one cache line, which a caller can ask for ahead of the lookup (`Slots::prefetch`).
//!
//! The key memo (store/memo.rs) keeps its runs and labels in these. A `HashMap` lookup reads
//! a group of control bytes, then the bucket they point to, from two arrays: two dependent
//! cache misses before the entry, and no way to start them early. Here an entry sits in its
//! slot whole; with open addressing and linear probing at most half full, a lookup mostly
//! finds it in the slot its hash names. An entry type aligned to its size (32 or 64 bytes)
//! keeps each slot within one line.
//!
//! Invariants: one entry per hash (`insert` of an entry whose hash is held replaces it); no
//! free slot between an entry's home slot (`hash & mask`) and the slot holding it, which
//! holds because entries leave only all at once (`clear`) or through `retain`, which files
//! the kept ones again; the table is at most half full.

/// An entry of a [`Slots`] table: the hash it is filed under.
pub(super) trait Hashed {
    fn hash(&self) -> u64;
}

pub(super) struct Slots<V> {
    /// A power of two long, or empty.
    slots: Box<[Option<V>]>,
    len: usize,
}

impl<V> Default for Slots<V> {
    fn default() -> Self {
        Slots {
            slots: Box::new([]),
            len: 0,
        }
    }
}

impl<V: Hashed> Slots<V> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn home(&self, h: u64) -> usize {
        h as usize & (self.slots.len() - 1)
    }

    /// The entry filed under `h`.
    pub(super) fn get(&self, h: u64) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(h);
        loop {
            match &self.slots[i] {
                None => return None,
                Some(v) if v.hash() == h => return Some(v),
                Some(_) => i = (i + 1) & (self.slots.len() - 1),
            }
        }
    }

    /// Files `v` under its hash; the entry it replaces, if one was filed there.
    pub(super) fn insert(&mut self, v: V) -> Option<V> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.refile((self.slots.len() * 2).max(16), |_| true);
        }
        let h = v.hash();
        let mut i = self.home(h);
        loop {
            match &mut self.slots[i] {
                slot @ None => {
                    *slot = Some(v);
                    self.len += 1;
                    return None;
                }
                Some(old) if old.hash() == h => return Some(std::mem::replace(old, v)),
                Some(_) => i = (i + 1) & (self.slots.len() - 1),
            }
        }
    }

    /// Keeps the entries `keep` answers true for.
    pub(super) fn retain(&mut self, keep: impl FnMut(&V) -> bool) {
        self.refile(self.slots.len(), keep);
    }

    /// Drops every entry; the table keeps its size.
    pub(super) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
        self.len = 0;
    }

    /// A table of `size` slots holding the entries `keep` answers true for.
    fn refile(&mut self, size: usize, mut keep: impl FnMut(&V) -> bool) {
        let old = std::mem::replace(&mut self.slots, (0..size).map(|_| None).collect());
        self.len = 0;
        for v in old.into_vec().into_iter().flatten() {
            if keep(&v) {
                self.insert(v);
            }
        }
    }

    /// Asks for the line of `h`'s home slot, where a lookup of `h` will mostly end.
    pub(super) fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            prefetch(std::ptr::from_ref(&self.slots[self.home(h)]).cast());
        }
    }
}

/// Asks the CPU to bring the line holding `p` into its caches, without waiting for it. A hint
/// only: nothing is read that the program sees, and an address not mapped is not an error.
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no effect the program can observe; it does not fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the lines of `b` after its first `from` bytes, at most `max` bytes of them: a
/// caller about to read all of `b` in order has them arrive together rather than one by one.
pub(super) fn prefetch_bytes(b: &[u8], from: usize, max: usize) {
    let end = b.len().min(from.saturating_add(max));
    let mut at = from;
    while at < end {
        prefetch(b[at..].as_ptr());
        at += 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct E(u64, u32);

    impl Hashed for E {
        fn hash(&self) -> u64 {
            self.0
        }
    }

    /// Hashes with one home slot in a table of 16 (and of 32, 64): they probe on.
    fn crowded(n: u64) -> Vec<u64> {
        (0..n).map(|i| 5 + (i << 8)).collect()
    }

    #[test]
    fn entries_are_found_replaced_and_kept_through_growth() {
        let mut t: Slots<E> = Slots::default();
        assert_eq!(t.get(7), None);
        let hs = crowded(40);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.insert(E(*h, i as u32)), None);
        }
        assert_eq!(t.len(), 40);
        assert!(t.slots.len() >= 80, "at most half full");
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h), Some(&E(*h, i as u32)));
        }
        assert_eq!(t.get(5 + (41 << 8)), None);
        assert_eq!(t.insert(E(hs[3], 99)), Some(E(hs[3], 3)));
        assert_eq!(t.len(), 40);
        assert_eq!(t.get(hs[3]), Some(&E(hs[3], 99)));
    }

    #[test]
    fn retain_refiles_what_it_keeps_and_clear_drops_all() {
        let mut t: Slots<E> = Slots::default();
        let hs = crowded(30);
        for (i, h) in hs.iter().enumerate() {
            t.insert(E(*h, i as u32));
        }
        // Dropping every other entry of one probe chain: the ones after a gap are still found.
        t.retain(|e| e.1 % 2 == 1);
        assert_eq!(t.len(), 15);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h).is_some(), i % 2 == 1, "entry {i}");
        }
        let size = t.slots.len();
        t.clear();
        assert_eq!((t.len(), t.slots.len()), (0, size));
        assert!(hs.iter().all(|h| t.get(*h).is_none()));
        t.insert(E(hs[0], 1));
        assert_eq!(t.get(hs[0]), Some(&E(hs[0], 1)));
    }
}
