//! The redo log. Every writer group appends one frame holding the exact key/value writes of
//! its successful batches, then fdatasyncs, before those writes become visible (redb commit
//! without fsync) and before any caller is acknowledged. A checkpoint makes redb durable
//! (an `Immediate` commit) and then empties the log. At startup, frames whose commit sequence
//! is newer than the store's durable one are replayed.
//!
//! Invariants: frames are appended in increasing commit sequence; a frame is acknowledged
//! only after its fdatasync returned; replay stops at the first frame that is torn (short or
//! failing its checksum) or out of sequence, which can only be a frame nobody was told about.
//!
//! Frame: magic u32 | payload length u32 | crc32 of (seq, payload) u32 | seq u64 | payload.
//! Payload: entries of kind u8 (1 put, 2 delete) | key length u32 | key | [value length u32 | value].

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MAGIC: u32 = 0x4557_414C; // "EWAL"
const HEADER: usize = 20;

/// One write: a key and its new value (None deletes it).
pub type KvWrite = (Vec<u8>, Option<Vec<u8>>);

pub struct Wal {
    file: File,
    path: PathBuf,
    len: u64,
    buf: Vec<u8>,
}

/// A replayable frame.
pub struct Frame {
    pub seq: u64,
    pub writes: Vec<KvWrite>,
}

fn io(e: std::io::Error, path: &Path) -> Error {
    Error::internal(format!("redo log {}: {e}", path.display()))
}

fn decode_payload(mut p: &[u8]) -> Option<Vec<KvWrite>> {
    let mut out = Vec::new();
    let take = |p: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if p.len() < n {
            return None;
        }
        let (h, t) = p.split_at(n);
        *p = t;
        Some(h.to_vec())
    };
    let len = |p: &mut &[u8]| -> Option<usize> {
        let b = take(p, 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
    };
    while !p.is_empty() {
        let kind = take(&mut p, 1)?[0];
        let kl = len(&mut p)?;
        let key = take(&mut p, kl)?;
        let value = match kind {
            1 => {
                let vl = len(&mut p)?;
                Some(take(&mut p, vl)?)
            }
            2 => None,
            _ => return None,
        };
        out.push((key, value));
    }
    Some(out)
}

impl Wal {
    /// Opens (or creates) the log and reads its valid frames, in order.
    pub fn open(dir: &Path) -> Result<(Wal, Vec<Frame>)> {
        let path = dir.join("wal.log");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io(e, &path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| io(e, &path))?;
        let mut frames = Vec::new();
        let mut at = 0usize;
        let mut last_seq = 0u64;
        while at + HEADER <= bytes.len() {
            let h = &bytes[at..at + HEADER];
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            if word(0) != MAGIC {
                break;
            }
            let plen = word(4) as usize;
            let crc = word(8);
            let mut seq_bytes = [0u8; 8];
            seq_bytes.copy_from_slice(&h[12..20]);
            let seq = u64::from_le_bytes(seq_bytes);
            let Some(payload) = bytes.get(at + HEADER..at + HEADER + plen) else {
                break;
            };
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&seq_bytes);
            hasher.update(payload);
            if hasher.finalize() != crc || seq <= last_seq {
                break;
            }
            let Some(writes) = decode_payload(payload) else {
                break;
            };
            frames.push(Frame { seq, writes });
            last_seq = seq;
            at += HEADER + plen;
        }
        // Whatever follows the last valid frame was never acknowledged: cut it off.
        if (at as u64) < bytes.len() as u64 {
            file.set_len(at as u64).map_err(|e| io(e, &path))?;
            file.sync_all().map_err(|e| io(e, &path))?;
        }
        file.seek(SeekFrom::Start(at as u64))
            .map_err(|e| io(e, &path))?;
        Ok((
            Wal {
                file,
                path,
                len: at as u64,
                buf: Vec::new(),
            },
            frames,
        ))
    }

    /// Appends one frame and waits until it is on disk.
    pub fn append(&mut self, seq: u64, writes: &[KvWrite]) -> Result<()> {
        let buf = &mut self.buf;
        buf.clear();
        buf.extend_from_slice(&[0u8; HEADER]);
        for (k, v) in writes {
            buf.push(if v.is_some() { 1 } else { 2 });
            buf.extend_from_slice(&(k.len() as u32).to_le_bytes());
            buf.extend_from_slice(k);
            if let Some(v) = v {
                buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
                buf.extend_from_slice(v);
            }
        }
        let plen = (buf.len() - HEADER) as u32;
        let seq_bytes = seq.to_le_bytes();
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&seq_bytes);
        hasher.update(&buf[HEADER..]);
        buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        buf[4..8].copy_from_slice(&plen.to_le_bytes());
        buf[8..12].copy_from_slice(&hasher.finalize().to_le_bytes());
        buf[12..20].copy_from_slice(&seq_bytes);
        self.file.write_all(buf).map_err(|e| io(e, &self.path))?;
        self.file.sync_data().map_err(|e| io(e, &self.path))?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Bytes written since the last reset.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the log; call only once everything in it is durable in the store.
    pub fn reset(&mut self) -> Result<()> {
        self.file.set_len(0).map_err(|e| io(e, &self.path))?;
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|e| io(e, &self.path))?;
        self.file.sync_all().map_err(|e| io(e, &self.path))?;
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut w, frames) = Wal::open(dir.path()).unwrap();
            assert!(frames.is_empty());
            w.append(
                1,
                &[(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None)],
            )
            .unwrap();
            w.append(2, &[(b"c".to_vec(), Some(vec![]))]).unwrap();
        }
        // A torn third frame: a header promising more bytes than were written.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join("wal.log"))
            .unwrap();
        f.write_all(&MAGIC.to_le_bytes()).unwrap();
        f.write_all(&100u32.to_le_bytes()).unwrap();
        drop(f);
        let (mut w, frames) = Wal::open(dir.path()).unwrap();
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(
            frames[0].writes,
            vec![(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None)]
        );
        w.append(3, &[(b"d".to_vec(), None)]).unwrap();
        let (mut w, frames) = Wal::open(dir.path()).unwrap();
        assert_eq!(
            frames.len(),
            3,
            "the torn bytes were cut, so frame 3 follows frame 2"
        );
        w.reset().unwrap();
        let (_, frames) = Wal::open(dir.path()).unwrap();
        assert!(frames.is_empty());
    }

    #[test]
    fn a_corrupt_frame_ends_replay() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut w, _) = Wal::open(dir.path()).unwrap();
            w.append(1, &[(b"a".to_vec(), Some(b"1".to_vec()))])
                .unwrap();
            w.append(2, &[(b"b".to_vec(), Some(b"2".to_vec()))])
                .unwrap();
        }
        let path = dir.path().join("wal.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        std::fs::write(&path, bytes).unwrap();
        let (_, frames) = Wal::open(dir.path()).unwrap();
        assert_eq!(frames.len(), 1);
    }
}
