//! W1a physical reference: the keys the engine's store writes for a nested JSON import,
//! written straight into redb, with no server, HTTP, redo log or writer thread in front.
//!
//!   raw_redb_load --file orders.jsonl --dir DIR [--batch 500] [--label ORDER]
//!
//! 1. Untimed (prepare_seconds): reads the JSON Lines file and flattens each batch of `--batch`
//!    documents with the engine's own `bulk::flatten` (the nested-import rules, type inference,
//!    UUIDv7 record ids), as an `ingest` of that batch would.
//! 2. Timed (write_seconds): per batch, the keys the store writes for that import
//!    (store/records.rs, store/relationships.rs, docs/design.md "Storage format"), encoded with
//!    the engine's own key and value codecs and gathered in key order (the writer's overlay is a
//!    BTreeMap too):
//!    - per record: the record value, the label index entry, one property-index entry per
//!      property value;
//!    - per link: the relationship value and its two adjacency entries (out under the source,
//!      in under the target);
//!    - once per batch, as the writer stores them: the label, (property, label) and
//!      relationship counters, the row sequence, the commit sequence, and the metadata of
//!      properties seen for the first time;
//!
//!    then one redb write transaction per batch committed with `Durability::Immediate` (one
//!    fsynced commit per batch; quick repair off, redb's default).
//!
//! Prints one JSON line: records, relationships, keys, commits, prepare_seconds,
//! write_seconds, records_per_s, records_by_label, relationships_by_pair, db_bytes.

use engine::bulk::{flatten, FlattenOptions, Plan};
use engine::model::{Direction, PropType, Record, Relationship, DEFAULT_RELATION_TYPE};
use engine::store::codec;
use engine::store::keys::{self, Key};
use redb::{Database, Durability, TableDefinition};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;
use uuid::Uuid;

/// The engine's one table (store/kv.rs).
const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

type Writes = BTreeMap<Vec<u8>, Vec<u8>>;

fn tenant_key(kind: u8) -> Key {
    Key::tenant(keys::SINGLE_TENANT, kind)
}

/// Running totals across batches: what the store's counters and sequences hold.
#[derive(Default)]
struct State {
    row: u64,
    seq: u64,
    prop_ids: HashMap<(String, PropType), Uuid>,
    label_counts: BTreeMap<String, u64>,
    /// (property id, label) -> (records, records holding an array)
    prop_label_counts: BTreeMap<(Uuid, String), (u64, u64)>,
    /// (source label, type, target label) -> relationships
    rel_counts: BTreeMap<(String, String, String), u64>,
}

impl State {
    /// The property's id; a new property also writes its metadata (name -> id, id -> name).
    fn prop_id(&mut self, w: &mut Writes, name: &str, ty: PropType) -> Uuid {
        if let Some(id) = self.prop_ids.get(&(name.to_string(), ty)) {
            return *id;
        }
        let id = Uuid::now_v7();
        w.insert(
            tenant_key(keys::PROP_BY_NAME).str(name).u8(ty as u8).0,
            codec::encode_uuid(&id),
        );
        w.insert(
            tenant_key(keys::PROP_BY_ID).uuid(&id).0,
            codec::encode_prop_meta(name, ty),
        );
        self.prop_ids.insert((name.to_string(), ty), id);
        id
    }

    /// Every key/value write of one import batch.
    fn batch(&mut self, plan: &Plan) -> Writes {
        self.seq += 1;
        let mut w = Writes::new();
        let mut labels: HashMap<Uuid, String> = HashMap::new();
        for p in &plan.records {
            self.row += 1;
            let rec = Record {
                id: p.id,
                label: p.label.clone(),
                row: self.row,
                version: self.seq,
                props: p
                    .props
                    .iter()
                    .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
                    .collect(),
            };
            w.insert(
                tenant_key(keys::RECORD).uuid(&rec.id).0,
                codec::encode_record(&rec),
            );
            w.insert(
                tenant_key(keys::LABEL_INDEX)
                    .str(&rec.label)
                    .uuid(&rec.id)
                    .0,
                codec::MARKER.to_vec(),
            );
            *self.label_counts.entry(rec.label.clone()).or_default() += 1;
            for (name, value) in &rec.props {
                let pid = self.prop_id(&mut w, name, value.ty);
                for item in &value.items {
                    w.insert(
                        tenant_key(keys::PROP_INDEX)
                            .uuid(&pid)
                            .str(&rec.label)
                            .scalar(value.ty, item)
                            .uuid(&rec.id)
                            .0,
                        codec::MARKER.to_vec(),
                    );
                }
                let c = self
                    .prop_label_counts
                    .entry((pid, rec.label.clone()))
                    .or_default();
                c.0 += 1;
                if value.array {
                    c.1 += 1;
                }
            }
            labels.insert(rec.id, rec.label);
        }
        for &(source, target) in &plan.links {
            self.row += 1;
            let rel = Relationship {
                id: Uuid::now_v7(),
                row: self.row,
                version: self.seq,
                rel_type: DEFAULT_RELATION_TYPE.to_string(),
                source,
                target,
                props: BTreeMap::new(),
            };
            w.insert(
                tenant_key(keys::RELATIONSHIP).uuid(&rel.id).0,
                codec::encode_relationship(&rel),
            );
            w.insert(
                tenant_key(keys::ADJACENCY)
                    .uuid(&source)
                    .u8(Direction::Out as u8)
                    .str(&rel.rel_type)
                    .uuid(&target)
                    .uuid(&rel.id)
                    .0,
                codec::MARKER.to_vec(),
            );
            w.insert(
                tenant_key(keys::ADJACENCY)
                    .uuid(&target)
                    .u8(Direction::In as u8)
                    .str(&rel.rel_type)
                    .uuid(&source)
                    .uuid(&rel.id)
                    .0,
                codec::MARKER.to_vec(),
            );
            let key = (
                labels[&source].clone(),
                rel.rel_type.clone(),
                labels[&target].clone(),
            );
            *self.rel_counts.entry(key).or_default() += 1;
        }
        // Counters and sequences, stored once per batch (RecordWriter::finish).
        for (label, n) in &self.label_counts {
            w.insert(
                tenant_key(keys::LABEL_COUNT).str(label).0,
                codec::encode_u64(*n),
            );
        }
        for ((pid, label), (n, arrays)) in &self.prop_label_counts {
            w.insert(
                tenant_key(keys::PROP_LABEL_COUNT).uuid(pid).str(label).0,
                codec::encode_u64_pair(*n, *arrays),
            );
        }
        for ((s, ty, t), n) in &self.rel_counts {
            w.insert(
                tenant_key(keys::REL_COUNT).str(s).str(ty).str(t).0,
                codec::encode_u64(*n),
            );
        }
        w.insert(tenant_key(keys::ROW_SEQ).0, codec::encode_u64(self.row));
        w.insert(
            Key::system(keys::SYS_COMMIT_SEQ).0,
            codec::encode_u64(self.seq),
        );
        w
    }
}

struct Args {
    file: PathBuf,
    dir: PathBuf,
    batch: usize,
    label: String,
}

fn parse_args() -> Args {
    let mut a = Args {
        file: PathBuf::new(),
        dir: PathBuf::new(),
        batch: 500,
        label: "ORDER".to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--file" => a.file = PathBuf::from(value()),
            "--dir" => a.dir = PathBuf::from(value()),
            "--batch" => a.batch = value().parse().expect("--batch: a number"),
            "--label" => a.label = value(),
            "--bench" => {}
            "-h" | "--help" => {
                println!("usage: raw_redb_load --file FILE.jsonl --dir DIR [--batch 500] [--label ORDER]");
                std::process::exit(0);
            }
            other => {
                eprintln!("raw_redb_load: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if a.file.as_os_str().is_empty() || a.dir.as_os_str().is_empty() || a.batch == 0 {
        eprintln!("usage: raw_redb_load --file FILE.jsonl --dir DIR [--batch 500] [--label ORDER]");
        std::process::exit(2);
    }
    a
}

fn main() {
    let a = parse_args();

    // 1. Prepare: parse and flatten every batch (untimed).
    let t = Instant::now();
    let text = std::fs::read_to_string(&a.file).expect("read --file");
    let docs: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    drop(text);
    let plans: Vec<Plan> = docs
        .chunks(a.batch)
        .map(|c| {
            flatten(Some(&a.label), c, "documents", &FlattenOptions::default())
                .unwrap_or_else(|e| panic!("flatten: {e:?}"))
        })
        .collect();
    drop(docs);
    let prepare_seconds = t.elapsed().as_secs_f64();

    std::fs::create_dir_all(&a.dir).expect("create --dir");
    let path = a.dir.join("raw.redb");
    let db = Database::builder()
        .create(&path)
        .expect("create the redb file");

    // 2. Write: one durable commit per batch (timed).
    let mut st = State::default();
    let (mut keys_written, mut commits) = (0u64, 0u64);
    let t = Instant::now();
    for plan in &plans {
        let writes = st.batch(plan);
        keys_written += writes.len() as u64;
        let mut txn = db.begin_write().expect("begin_write");
        txn.set_durability(Durability::Immediate)
            .expect("set_durability");
        {
            let mut table = txn.open_table(KV).expect("open_table");
            for (k, v) in &writes {
                table.insert(k.as_slice(), v.as_slice()).expect("insert");
            }
        }
        txn.commit().expect("commit");
        commits += 1;
    }
    let write_seconds = t.elapsed().as_secs_f64();
    drop(db);

    let records: u64 = st.label_counts.values().sum();
    let relationships: u64 = st.rel_counts.values().sum();
    let mut by_pair: BTreeMap<String, u64> = BTreeMap::new();
    for ((s, _, t), n) in &st.rel_counts {
        *by_pair.entry(format!("{s}->{t}")).or_default() += n;
    }
    let db_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}",
        serde_json::json!({
            "records": records,
            "relationships": relationships,
            "keys": keys_written,
            "commits": commits,
            "batch": a.batch,
            "prepare_seconds": prepare_seconds,
            "write_seconds": write_seconds,
            "records_per_s": records as f64 / write_seconds,
            "records_by_label": st.label_counts,
            "relationships_by_pair": by_pair,
            "db_bytes": db_bytes,
        })
    );
}
