//! `engine export FILE` and `engine restore FILE` (also `engine --export FILE` and `engine
//! --restore FILE`, SPEC.md "Versioning"): a whole store to a graph snapshot and back, with
//! the server stopped. The format is `store::snapshot`'s; docs/operations.md "Export and
//! restore" tells the steps.
//!
//! Invariants: an export writes FILE only once it is whole (it writes `FILE.partial`, syncs
//! it and renames it); a restore builds the store in `DIR.restoring` and renames it to DIR
//! only once every line is restored and durable, so a DIR a restore made is complete, even
//! when the restore was killed.

use crate::config::FileConfig;
use crate::store::snapshot::{self, Counts, Item};
use crate::store::{records::WriteOp, Store, StoreOptions, TenancyMode, Tenant};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Where and how to open the store: `--data-dir` / `ENGINE_DATA_DIR` over the config file's
/// `data_dir` over `./data`; the `[storage]` settings from the config file (`--config` /
/// `ENGINE_CONFIG`).
pub fn resolve(
    data_dir: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<(PathBuf, StoreOptions), String> {
    let config = config
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("ENGINE_CONFIG").map(PathBuf::from));
    let file = match &config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    file.validate()?;
    let dir = data_dir
        .or_else(|| std::env::var_os("ENGINE_DATA_DIR").map(PathBuf::from))
        .unwrap_or(file.data_dir);
    let opts = StoreOptions {
        cache_mb: file.storage.cache_mb,
        checkpoint_mb: file.storage.checkpoint_mb,
        key_memo_mb: file.storage.key_memo_mb,
    };
    Ok((dir, opts))
}

fn summary(c: &Counts) -> String {
    format!(
        "{} tenant(s): {} record(s), {} relationship(s), {} vector(s), {} property id(s)",
        c.tenants, c.records, c.relationships, c.vectors, c.properties
    )
}

/// Writes the store in `dir` to `file` (`-`: standard output). Returns what it wrote.
pub fn export(dir: &Path, opts: StoreOptions, file: &Path) -> Result<String, String> {
    let mode = Store::stored_mode(dir)
        .map_err(|e| e.message)?
        .ok_or_else(|| format!("no store in {} (nothing to export)", dir.display()))?;
    let store = Store::open_with(dir, mode, opts).map_err(|e| e.message)?;
    let result = export_open(&store, file);
    store.shutdown();
    result.map(|c| {
        format!(
            "exported {} from {} to {}",
            summary(&c),
            dir.display(),
            file.display()
        )
    })
}

fn export_open(store: &Store, file: &Path) -> Result<Counts, String> {
    let to_stdout = file.as_os_str() == "-";
    let partial = PathBuf::from(format!("{}.partial", file.display()));
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(BufWriter::new(std::io::stdout().lock()))
    } else {
        let f = std::fs::File::create(&partial)
            .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
        Box::new(BufWriter::with_capacity(1 << 20, f))
    };
    let written = (|| -> crate::error::Result<Counts> {
        let snap = store.snapshot()?;
        let multi = store.mode() == TenancyMode::Multi;
        snapshot::header_line(&mut out, multi)?;
        let mut counts = Counts::default();
        if multi {
            for (name, id) in store.named_tenants() {
                snapshot::export_tenant(&snap, id, Some(&name), &mut out, &mut counts)?;
            }
        } else {
            snapshot::export_tenant(
                &snap,
                crate::store::keys::SINGLE_TENANT,
                None,
                &mut out,
                &mut counts,
            )?;
        }
        snapshot::end(&mut out, counts)?;
        Ok(counts)
    })();
    drop(out);
    let counts = match written {
        Ok(c) => c,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(&partial);
            }
            return Err(e.message);
        }
    };
    if !to_stdout {
        let synced = std::fs::File::open(&partial).and_then(|f| f.sync_all());
        synced
            .and_then(|_| std::fs::rename(&partial, file))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                format!("cannot write {}: {e}", file.display())
            })?;
        // The rename itself made durable: FILE survives a power cut after the summary.
        crate::store::sync_dir(&parent_of(file)).map_err(|e| {
            format!(
                "{} is written, but its directory could not be synced: {e}",
                file.display()
            )
        })?;
    }
    Ok(counts)
}

/// Ops written per batch (each batch is one durable write).
const BATCH: usize = 2000;

/// The longest snapshot line a restore reads (a record's line; edits can grow a record past
/// any one request's size). Reading and restoring a line takes several times its size in
/// memory; the cap keeps a damaged file (one without newlines) from taking the machine.
pub const MAX_LINE_BYTES: usize = 1 << 30;

/// The lines of a snapshot, each at most `MAX_LINE_BYTES` (a longer one is an error, not an
/// allocation the size of the file); a trailing `\r` is dropped.
struct Lines<R> {
    r: R,
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = std::io::Result<String>;
    fn next(&mut self) -> Option<Self::Item> {
        use std::io::Read;
        let mut buf = Vec::new();
        let read = (&mut self.r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf);
        match read {
            Ok(0) => None,
            Err(e) => Some(Err(e)),
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                } else if buf.len() > MAX_LINE_BYTES {
                    return Some(Err(std::io::Error::other(format!(
                        "a line longer than {} MiB",
                        MAX_LINE_BYTES >> 20
                    ))));
                }
                Some(
                    String::from_utf8(buf).map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8")
                    }),
                )
            }
        }
    }
}

/// The directory holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Restores `file` (`-`: standard input) into `dir`, which must not exist or be an empty
/// directory. The store is built in `DIR.restoring` beside it and renamed to `dir` once
/// whole, so an interrupted restore (even kill -9) never leaves a partial store under `dir`;
/// the next restore removes such a leftover. A lock on the parent directory keeps two
/// restores apart.
pub fn restore(dir: &Path, opts: StoreOptions, file: &Path) -> Result<String, String> {
    // `new/.` and `new/` name `new`.
    let dir: PathBuf = dir.components().collect();
    // One restore at a time into the directories of one parent: a lock on the parent (no
    // lock file to leave behind), taken before anything about the target is looked at.
    let parent = parent_of(&dir);
    std::fs::create_dir_all(&parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let lock = std::fs::File::open(&parent)
        .map_err(|e| format!("cannot open {}: {e}", parent.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(format!(
                "another restore into {} is running (it holds a lock on the directory)",
                parent.display()
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", parent.display()))
        }
    }
    match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!(
                "{} is a symbolic link: give the directory it names",
                dir.display()
            ));
        }
        Ok(m) if !m.is_dir() => {
            return Err(format!("{} is not a directory", dir.display()));
        }
        Ok(_) => {
            let mut entries = std::fs::read_dir(&dir)
                .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            if entries.next().is_some() {
                return Err(format!(
                    "{} is not empty: restore writes into a new data directory",
                    dir.display()
                ));
            }
        }
    }
    let name = dir
        .file_name()
        .ok_or_else(|| format!("{} names no directory", dir.display()))?
        .to_string_lossy()
        .into_owned();
    let result = restore_locked(&dir, &name, opts, file);
    drop(lock);
    result
}

fn restore_locked(
    dir: &Path,
    name: &str,
    opts: StoreOptions,
    file: &Path,
) -> Result<String, String> {
    let staging = dir.with_file_name(format!("{name}.restoring"));
    if staging.exists() {
        crate::log::warn(&format!(
            "removing {}, left by an interrupted restore",
            staging.display()
        ));
        std::fs::remove_dir_all(&staging)
            .map_err(|e| format!("cannot remove {}: {e}", staging.display()))?;
    }
    let input: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        Box::new(std::io::BufReader::with_capacity(1 << 20, f))
    };
    let mut lines = Lines { r: input };
    let header = match lines.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => return Err(format!("cannot read {}: {e}", file.display())),
        None => return Err(format!("{} is empty (not a snapshot)", file.display())),
    };
    let multi = snapshot::read_header(&header).map_err(|e| e.message)?;
    let mode = if multi {
        TenancyMode::Multi
    } else {
        TenancyMode::Single
    };
    let store = Store::open_with(&staging, mode, opts).map_err(|e| e.message)?;
    let result = restore_lines(&store, multi, &mut lines);
    store.shutdown();
    drop(store);
    let counts = match result {
        Ok(c) => c,
        Err(e) => {
            return Err(match std::fs::remove_dir_all(&staging) {
                Ok(()) => format!("{e}; nothing was restored"),
                Err(c) => format!(
                    "{e}; the partial restore in {} could not be removed ({c}): delete it",
                    staging.display()
                ),
            })
        }
    };
    // rename(2) replaces an empty directory; the parent's entry is then made durable.
    std::fs::rename(&staging, dir).map_err(|e| {
        format!(
            "the snapshot is restored in {}, but it could not be moved to {}: {e}",
            staging.display(),
            dir.display()
        )
    })?;
    crate::store::sync_dir(&parent_of(dir)).map_err(|e| {
        format!(
            "the snapshot is restored in {}, but its parent directory could not be synced: {e}",
            dir.display()
        )
    })?;
    Ok(format!(
        "restored {} from {} into {}",
        summary(&counts),
        file.display(),
        dir.display()
    ))
}

/// A restored tenant may not declare a property no record holds (the engine never keeps
/// one: a property goes with its last holder).
fn unheld_property(
    store: &Store,
    tenant: &Tenant,
    lines: &std::collections::HashMap<uuid::Uuid, usize>,
) -> Result<(), String> {
    let Some(t) = store.tenant_id(tenant) else {
        return Ok(());
    };
    let snap = store.snapshot().map_err(|e| e.message)?;
    let props = crate::store::records::properties(&snap, t).map_err(|e| e.message)?;
    match props.iter().find(|p| p.records_count == 0) {
        Some(p) => Err(format!(
            "line {}: property {} ({} {}) is declared but no record of the tenant holds it",
            lines.get(&p.id).copied().unwrap_or_default(),
            p.id,
            p.name,
            p.ty.name()
        )),
        None => Ok(()),
    }
}

fn restore_lines(
    store: &Store,
    multi: bool,
    lines: &mut dyn Iterator<Item = std::io::Result<String>>,
) -> Result<Counts, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut tenant: Option<Tenant> = None;
    // The pending batch and the lines it came from (a write error names them).
    let mut ops: Vec<WriteOp> = Vec::new();
    let mut first_line = 0;
    let mut seen = Counts::default();
    let flush = |tenant: &Option<Tenant>, ops: &mut Vec<WriteOp>, from: usize, to: usize| match (
        tenant,
        ops.is_empty(),
    ) {
        (Some(t), false) => rt
            .block_on(store.write(t.clone(), std::mem::take(ops)))
            .map(|_| ())
            .map_err(|e| format!("lines {from}-{to}: {}", e.message)),
        _ => Ok(()),
    };
    // Per tenant: the kinds come in the snapshot's order, and nothing twice (a repeated
    // record or relationship id is refused by the store when written).
    let mut tenants_seen = std::collections::HashSet::new();
    let mut phase = 0;
    // Property id -> its line (an unheld property is named at its line).
    let mut property_ids = std::collections::HashMap::new();
    let mut vectors = std::collections::HashSet::new();
    let mut n = 1;
    let mut ended = None;
    for l in lines {
        n += 1;
        let l = l.map_err(|e| format!("line {n}: cannot read: {e}"))?;
        if l.trim().is_empty() {
            continue;
        }
        if ended.is_some() {
            return Err(format!("line {n}: a line after the end line"));
        }
        let at = |e: crate::error::Error| format!("line {n}: {}", e.message);
        let item = snapshot::parse_item(&l).map_err(at)?;
        if !matches!(item, Item::Tenant(_) | Item::End(_)) && tenant.is_none() {
            return Err(format!("line {n}: data before the first tenant line"));
        }
        if matches!(item, Item::Tenant(_) | Item::End(_)) {
            flush(&tenant, &mut ops, first_line, n - 1)?;
            if let Some(t) = &tenant {
                unheld_property(store, t, &property_ids)?;
            }
        }
        let rank = match &item {
            Item::Tenant(_) | Item::End(_) => 0,
            Item::Policy(_) => 1,
            Item::Property { .. } => 2,
            Item::Record(_) => 3,
            Item::Vector { .. } => 4,
            Item::Relationship(_) => 5,
        };
        if rank > 0 {
            // A policy once; the other kinds may repeat, each after the kinds before it.
            if rank < phase || (rank == 1 && phase == 1) {
                return Err(format!(
                    "line {n}: out of order (a tenant's lines are its policy, properties, records, vectors, relationships)"
                ));
            }
            phase = rank;
        }
        if ops.is_empty() {
            first_line = n;
        }
        match item {
            Item::Tenant(name) => {
                if !tenants_seen.insert(name.clone()) {
                    return Err(format!("line {n}: the tenant appears twice"));
                }
                (phase, property_ids, vectors) = (0, Default::default(), Default::default());
                // A tenant exists from its first write: this one makes a tenant without
                // data (its records deleted) exist too, as it did in the store exported.
                ops.push(WriteOp::SetPolicy(None));
                tenant = Some(match (multi, name) {
                    (false, None) => Tenant::Single,
                    (true, Some(name)) => {
                        snapshot::stored_name("tenant", &name).map_err(at)?;
                        Tenant::Named(name)
                    }
                    (false, Some(_)) => {
                        return Err(format!(
                            "line {n}: a named tenant in a single-tenant snapshot"
                        ))
                    }
                    (true, None) => {
                        return Err(format!(
                            "line {n}: a tenant without a name in a multitenant snapshot"
                        ))
                    }
                });
                seen.tenants += 1;
            }
            Item::Policy(p) => {
                // Stored only in the shape the engine reads back (a policy it set itself).
                crate::engine::policy::check_stored(&p).map_err(at)?;
                ops.push(WriteOp::SetPolicy(Some(p)));
            }
            Item::Property { id, name, ty } => {
                if property_ids.insert(id, n).is_some() {
                    return Err(format!("line {n}: property {id} appears twice"));
                }
                ops.push(WriteOp::DeclareProperty { id, name, ty });
                seen.properties += 1;
            }
            Item::Record(r) => {
                ops.push(snapshot::record_op(r));
                seen.records += 1;
            }
            Item::Vector {
                record,
                property,
                values,
            } => {
                if !vectors.insert((record, property.clone())) {
                    return Err(format!(
                        "line {n}: the vector {property} of record {record} appears twice"
                    ));
                }
                ops.push(WriteOp::SetVector {
                    id: record,
                    property,
                    values,
                });
                seen.vectors += 1;
            }
            Item::Relationship(rel) => {
                ops.push(WriteOp::RestoreRelationship(rel));
                seen.relationships += 1;
            }
            Item::End(c) => {
                if c != seen {
                    return Err(format!(
                        "line {n}: the end line counts {} but the snapshot holds {}",
                        summary(&c),
                        summary(&seen)
                    ));
                }
                ended = Some(c);
            }
        }
        if ops.len() >= BATCH {
            flush(&tenant, &mut ops, first_line, n)?;
        }
    }
    ended.ok_or_else(|| {
        format!("the snapshot ends at line {n} without its end line (a truncated file?)")
    })
}
