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
/// `data_dir` over `./data`; the `[storage]` settings from the config file.
pub fn resolve(
    data_dir: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<(PathBuf, StoreOptions), String> {
    let file = match config {
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
        serde_json::to_writer(&mut out, &snapshot::header(multi))
            .map_err(|e| crate::error::Error::internal(e.to_string()))?;
        out.write_all(b"\n")
            .map_err(|e| crate::error::Error::internal(format!("cannot write: {e}")))?;
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
    }
    Ok(counts)
}

/// Ops written per batch (each batch is one durable write).
const BATCH: usize = 2000;

/// Restores `file` (`-`: standard input) into `dir`, which must not exist or be empty.
/// The store is built in `DIR.restoring` beside it and renamed to `dir` once whole, so an
/// interrupted restore (even kill -9) never leaves a partial store under `dir`; the next
/// restore removes such a leftover.
pub fn restore(dir: &Path, opts: StoreOptions, file: &Path) -> Result<String, String> {
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "{} is not empty: restore writes into a new data directory",
            dir.display()
        ));
    }
    let name = dir
        .file_name()
        .ok_or_else(|| format!("{} names no directory", dir.display()))?;
    let staging = dir.with_file_name(format!("{}.restoring", name.to_string_lossy()));
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
    let mut lines = input.lines();
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
    let placed = result.and_then(|c| {
        // rename(2) replaces an empty directory; the parent's entry is then made durable.
        std::fs::rename(&staging, dir)
            .and_then(
                |_| match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    Some(p) => std::fs::File::open(p).and_then(|d| d.sync_all()),
                    None => std::fs::File::open(".").and_then(|d| d.sync_all()),
                },
            )
            .map_err(|e| {
                format!(
                    "cannot move {} to {}: {e}",
                    staging.display(),
                    dir.display()
                )
            })?;
        Ok(c)
    });
    match placed {
        Ok(c) => Ok(format!(
            "restored {} from {} into {}",
            summary(&c),
            file.display(),
            dir.display()
        )),
        Err(e) => Err(match std::fs::remove_dir_all(&staging) {
            Ok(()) => format!("{e}; nothing was restored"),
            Err(c) if c.kind() == std::io::ErrorKind::NotFound => {
                format!("{e}; nothing was restored")
            }
            Err(c) => format!(
                "{e}; the partial restore in {} could not be removed ({c}): delete it",
                staging.display()
            ),
        }),
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
    let mut ops: Vec<WriteOp> = Vec::new();
    let mut seen = Counts::default();
    let flush = |tenant: &Option<Tenant>, ops: &mut Vec<WriteOp>| -> Result<(), String> {
        if let (Some(t), false) = (tenant, ops.is_empty()) {
            rt.block_on(store.write(t.clone(), std::mem::take(ops)))
                .map_err(|e| e.message)?;
        }
        Ok(())
    };
    let mut n = 1;
    let mut ended = None;
    for l in lines {
        n += 1;
        let l = l.map_err(|e| format!("line {n}: cannot read: {e}"))?;
        if ended.is_some() {
            return Err(format!("line {n}: a line after the end line"));
        }
        let at = |e: crate::error::Error| format!("line {n}: {}", e.message);
        let item = snapshot::parse_item(&l).map_err(at)?;
        if !matches!(item, Item::Tenant(_) | Item::End(_)) && tenant.is_none() {
            return Err(format!("line {n}: data before the first tenant line"));
        }
        match item {
            Item::Tenant(name) => {
                flush(&tenant, &mut ops).map_err(|e| format!("line {n}: {e}"))?;
                tenant = Some(match (multi, name) {
                    (false, None) => Tenant::Single,
                    (true, Some(name)) => {
                        crate::engine::check_tenant_name(&name).map_err(at)?;
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
            Item::Policy(p) => ops.push(WriteOp::SetPolicy(Some(p))),
            Item::Property { id, name, ty } => {
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
                ops.push(WriteOp::SetVector {
                    id: record,
                    property,
                    values,
                });
                seen.vectors += 1;
            }
            Item::Relationship(rel) => {
                ops.push(WriteOp::Link(rel));
                seen.relationships += 1;
            }
            Item::End(c) => {
                flush(&tenant, &mut ops).map_err(|e| format!("line {n}: {e}"))?;
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
            flush(&tenant, &mut ops).map_err(|e| format!("line {n}: {e}"))?;
        }
    }
    ended.ok_or_else(|| {
        format!("the snapshot ends at line {n} without its end line (a truncated file?)")
    })
}
