//! Protocol v1 types only (PROTOCOL.md): the request envelope, every operation kind and its
//! payload. Every front-end decodes into [`Operation`]; nothing here executes anything.
//!
//! Unknown fields are ignored (clients send extras); `null` for an optional field means
//! absent; a known field with the wrong type fails decoding (a 400 naming the field).

pub mod render;
pub mod strict;

use crate::model::infer::PropertyInput;
use serde::Deserialize;
use serde_json::{Map, Value};

pub const PROTOCOL_VERSION: i64 = 1;

/// Refuses an envelope of another protocol version (400 `invalid_argument`).
pub fn check_version(v: Option<i64>, shown: &dyn std::fmt::Display) -> crate::error::Result<()> {
    if v == Some(PROTOCOL_VERSION) {
        return Ok(());
    }
    Err(crate::error::Error::invalid(format!(
        "unsupported protocolVersion {shown}; this engine speaks protocolVersion {PROTOCOL_VERSION}"
    )))
}

/// Marks a nested decoding error so [`decode`] can join its path to the outer one.
const PATH_MARK: char = '\u{1}';

/// Decodes a payload with path tracking, for use inside a `Deserialize` impl.
fn sub<T: serde::de::DeserializeOwned, E: serde::de::Error>(v: Value) -> Result<T, E> {
    serde_path_to_error::deserialize(strict::Strict(v)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let (inner_path, msg) = split_marked(&inner);
        let full = join_path(if path == "." { "" } else { &path }, inner_path);
        E::custom(format!("{PATH_MARK}{full}{PATH_MARK}{msg}"))
    })
}

fn split_marked(s: &str) -> (&str, &str) {
    if let Some(rest) = s.strip_prefix(PATH_MARK) {
        if let Some((p, m)) = rest.split_once(PATH_MARK) {
            return (p, m);
        }
    }
    ("", s)
}

fn join_path(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}.{b}"),
    }
}

/// A payload-less variant.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Empty {}

/// An enum tagged by a `kind` field whose variants each hold one payload struct. Unlike
/// serde's derived internally-tagged enums, decoding errors keep the path of the field.
macro_rules! kind_enum {
    ($(#[$m:meta])* pub enum $name:ident { $( $(#[$vm:meta])* $tag:literal => $var:ident($ty:ty) ),* $(,)? }) => {
                $(#[$m])*
        // Decoded once per request and moved into the engine; boxing payloads buys nothing.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone)]
        pub enum $name { $( $(#[$vm])* $var($ty) ),* }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let v = Value::deserialize(d)?;
                let kind = match v.get("kind") {
                    Some(Value::String(k)) => k.clone(),
                    Some(_) => return Err(D::Error::custom(format!("{PATH_MARK}kind{PATH_MARK}must be a string"))),
                    None => return Err(D::Error::custom("missing field `kind`")),
                };
                match kind.as_str() {
                    $( $tag => sub::<$ty, D::Error>(v).map($name::$var), )*
                    other => Err(D::Error::custom(format!(
                        "{PATH_MARK}kind{PATH_MARK}unknown kind `{}`, expected one of: {}",
                        crate::model::truncate(other, 40), [$($tag),*].join(", ")))),
                }
            }
        }

        impl $name {
            pub fn kind_name(&self) -> &'static str {
                match self { $( $name::$var(_) => $tag ),* }
            }
        }
    };
}

/// `POST /protocol/v1/execute` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestEnvelope {
    pub protocol_version: i64,
    #[serde(default)]
    pub context: Option<Context>,
    pub operation: Operation,
}

#[derive(Debug, Default, Deserialize)]
pub struct Context {
    #[serde(default)]
    pub scope: Option<String>,
}

/// The nine operation kinds. The payload sits under a key named after the kind
/// (`mutation` for `mutate`).
#[derive(Debug, Clone)]
pub enum Operation {
    Query(QueryOp),
    Describe(DescribeOp),
    Mutate(Mutation),
    Ingest(IngestOp),
    Index(IndexOp),
    Transaction(TransactionOp),
    PurgeTenant(PurgeTenantOp),
    Backup(BackupOp),
    Policy(PolicyOp),
}

impl<'de> Deserialize<'de> for Operation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut v = Value::deserialize(d)?;
        let kind = match v.get("kind") {
            Some(Value::String(k)) => k.clone(),
            Some(_) => {
                return Err(D::Error::custom(format!(
                    "{PATH_MARK}kind{PATH_MARK}must be a string"
                )))
            }
            None => return Err(D::Error::custom("missing field `kind`")),
        };
        let key = match kind.as_str() {
            "mutate" => "mutation",
            k @ ("query" | "describe" | "ingest" | "index" | "transaction" | "purgeTenant" | "backup" | "policy") => k,
            other => {
                return Err(D::Error::custom(format!(
                    "{PATH_MARK}kind{PATH_MARK}unknown operation kind `{}`, expected one of: query, describe, mutate, ingest, index, transaction, purgeTenant, backup, policy",
                    crate::model::truncate(other, 40)
                )))
            }
        };
        let payload = v
            .as_object_mut()
            .and_then(|m| m.remove(key))
            .ok_or_else(|| D::Error::custom(format!("missing field `{key}`")))?;
        let wrap = |e: D::Error| {
            let s = e.to_string();
            let (p, m) = split_marked(&s);
            D::Error::custom(format!("{PATH_MARK}{}{PATH_MARK}{m}", join_path(key, p)))
        };
        Ok(match key {
            "query" => Operation::Query(sub(payload).map_err(wrap)?),
            "describe" => Operation::Describe(sub(payload).map_err(wrap)?),
            "mutation" => Operation::Mutate(sub(payload).map_err(wrap)?),
            "ingest" => Operation::Ingest(sub(payload).map_err(wrap)?),
            "index" => Operation::Index(sub(payload).map_err(wrap)?),
            "transaction" => Operation::Transaction(sub(payload).map_err(wrap)?),
            "purgeTenant" => Operation::PurgeTenant(sub(payload).map_err(wrap)?),
            "backup" => Operation::Backup(sub(payload).map_err(wrap)?),
            _ => Operation::Policy(sub(payload).map_err(wrap)?),
        })
    }
}

/// The permission an operation needs (SPEC.md "Permissions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Read,
    Write,
    /// Only the bootstrap token (the `policy` operation).
    Operator,
}

impl Operation {
    pub fn name(&self) -> String {
        match self {
            Operation::Query(q) => format!("query {}", q.kind_name()),
            Operation::Describe(d) => format!("describe {}", d.kind_name()),
            Operation::Mutate(m) => format!("mutate {}", m.kind_name()),
            Operation::Ingest(i) => format!("ingest {}", i.kind_name()),
            Operation::Index(i) => format!("index {}", i.kind_name()),
            Operation::Transaction(t) => format!("transaction {}", t.kind_name()),
            Operation::PurgeTenant(_) => "purgeTenant".into(),
            Operation::Backup(_) => "backup".into(),
            Operation::Policy(_) => "policy".into(),
        }
    }

    pub fn permission(&self) -> Permission {
        match self {
            Operation::Query(_) | Operation::Describe(_) | Operation::Backup(_) => Permission::Read,
            Operation::Policy(_) => Permission::Operator,
            _ => Permission::Write,
        }
    }

    /// A write whose answer shows stored data the caller did not send: an upsert with
    /// `returnResult` answers the matched record (its other properties too), so it needs
    /// `read` besides `write`.
    pub fn echoes_stored_data(&self) -> bool {
        let upsert_echo = |o: &Option<WriteOptions>| {
            o.as_ref().is_some_and(|o| {
                o.return_result == Some(true)
                    && (o.merge_by.is_some() || o.merge_strategy.is_some())
            })
        };
        match self {
            Operation::Mutate(Mutation::PutRecord(p)) => upsert_echo(&p.options),
            Operation::Ingest(IngestOp::Documents(d)) => upsert_echo(&d.options),
            Operation::Ingest(IngestOp::Csv(c)) => upsert_echo(&c.options),
            _ => false,
        }
    }
}

impl QueryDocument {
    /// Whether the query asks for rows (an aggregation or a `select`) rather than records.
    /// SearchDto's defaults (`select: {}`, `aggregate: {}`, `groupBy: []`) ask for records,
    /// and `groupBy` has an effect only with an aggregation (SPEC.md).
    pub fn asks_for_rows(&self) -> bool {
        crate::query::present(&self.aggregate) || crate::query::present(&self.select)
    }
}

/// The where-DSL document (SearchDto in protocol spelling).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryDocument {
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    #[serde(default)]
    pub predicate: Option<Value>,
    #[serde(default)]
    pub order: Option<Value>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub select: Option<Value>,
    #[serde(default)]
    pub aggregate: Option<Value>,
    #[serde(default)]
    pub group_by: Option<Vec<String>>,
    /// Engine extension: only records related (one hop, any type, either way) to this record
    /// (what REST `POST /records/{id}/search` sends).
    #[serde(default)]
    pub related_to: Option<String>,
}

kind_enum! {
    pub enum QueryOp {
        "record" => Record(RecordQuery),
        "records" => Records(DocQuery),
        "relationships" => Relationships(RelationshipsQuery),
        "propertyValues" => PropertyValues(PropertyValuesOp),
        "exportCsv" => ExportCsv(DocQuery),
        "statement" => Statement(StatementQuery),
        "vector" => Vector(VectorOp),
        "hybrid" => Hybrid(HybridOp),
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct RecordQuery {
    pub id: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DocQuery {
    #[serde(default)]
    pub query: QueryDocument,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RelationshipsQuery {
    #[serde(default)]
    pub query: RelationshipQuery,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelationshipQuery {
    #[serde(default)]
    pub source_labels: Option<Vec<String>>,
    #[serde(default)]
    pub target_labels: Option<Vec<String>>,
    #[serde(default)]
    pub predicate: Option<Value>,
    #[serde(default)]
    pub source_predicate: Option<Value>,
    #[serde(default)]
    pub target_predicate: Option<Value>,
    #[serde(default)]
    pub relation_type: Option<Value>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
    /// Engine extensions: `in` swaps the source and target selectors, `out` keeps them,
    /// absent matches either orientation; `order` as in QueryDocument (id or a relationship
    /// property); `recordId` lists the relationships of one record (REST GET).
    #[serde(default)]
    pub direction: Option<String>,
    #[serde(default)]
    pub order: Option<Value>,
    #[serde(default)]
    pub record_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PropertyValuesOp {
    pub property: String,
    #[serde(default)]
    pub query: PropertyValuesQuery,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PropertyValuesQuery {
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub order: Option<String>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    #[serde(default)]
    pub predicate: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StatementQuery {
    pub language: String,
    pub statement: String,
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct VectorOp {
    pub query: VectorQuery,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorQuery {
    #[serde(default)]
    pub index: Option<String>,
    #[serde(default)]
    pub property: Option<String>,
    pub vector: Vec<f64>,
    #[serde(default)]
    pub similarity: Option<String>,
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    #[serde(default)]
    pub predicate: Option<Value>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub score_threshold: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HybridOp {
    pub query: HybridQuery,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextQuery {
    pub index: String,
    pub query: String,
    #[serde(default)]
    pub all_terms: Option<bool>,
    #[serde(default)]
    pub phrase: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HybridQuery {
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    #[serde(default)]
    pub predicate: Option<Value>,
    #[serde(default)]
    pub vector: Option<Vec<f64>>,
    #[serde(default)]
    pub text: Option<TextQuery>,
    #[serde(default)]
    pub fusion: Option<String>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
}

kind_enum! {
    pub enum DescribeOp {
        "buildInfo" => BuildInfo(Empty),
        "labels" => Labels(DescribeQuery),
        "properties" => Properties(DescribeQuery),
        "schema" => Schema(DescribeQuery),
        "explain" => Explain(DescribeQuery),
        "indexes" => Indexes(Empty),
        "vectorIndexes" => VectorIndexes(Empty),
        "vectorIndex" => VectorIndex(NamedRef),
        /// Engine extension: one property by id (what `GET /api/v1/properties/{id}` translates to).
        "property" => Property(IdRef),
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DescribeQuery {
    #[serde(default)]
    pub query: Option<QueryDocument>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NamedRef {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IdRef {
    pub id: String,
}

/// Write options of create and imports (SPEC.md "Write options").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteOptions {
    #[serde(default)]
    pub suggest_types: Option<bool>,
    #[serde(default)]
    pub convert_numeric_values_to_numbers: Option<bool>,
    #[serde(default)]
    pub capitalize_labels: Option<bool>,
    #[serde(default)]
    pub relationship_type: Option<String>,
    #[serde(default)]
    pub return_result: Option<bool>,
    #[serde(default)]
    pub merge_by: Option<Vec<String>>,
    #[serde(default)]
    pub merge_strategy: Option<String>,
    /// What the SDK sends: empty strings and empty arrays are left out of imported records.
    #[serde(default)]
    pub skip_empty_values: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PutMode {
    Create,
    Merge,
    Replace,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InlineVector {
    #[serde(default)]
    pub property_name: Option<String>,
    pub vector: Vec<f64>,
    #[serde(default)]
    pub index: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RecordRef {
    pub id: String,
}

kind_enum! {
    pub enum Mutation {
        "putRecord" => PutRecord(PutRecordOp),
        "retypeRecord" => RetypeRecord(RetypeRecordOp),
        "deleteRecord" => DeleteRecord(DeleteRecordOp),
        "deleteRecords" => DeleteRecords(DocQuery),
        "linkRecordsById" => LinkRecordsById(Command<LinkByIdCommand>),
        "unlinkRecordsById" => UnlinkRecordsById(Command<UnlinkByIdCommand>),
        "linkRecords" => LinkRecords(Command<LinkCommand>),
        "unlinkRecords" => UnlinkRecords(Command<LinkCommand>),
        "deleteProperty" => DeleteProperty(DeletePropertyOp),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PutRecordOp {
    pub mode: PutMode,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    /// Flat property map; types are inferred (BEHAVIOUR.md §1).
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
    /// Engine extension: explicit `[{name, type, value, valueSeparator?}]` inputs that win
    /// over inference (what REST `properties` arrays translate to).
    #[serde(default)]
    pub typed_properties: Option<Vec<PropertyInput>>,
    #[serde(default)]
    pub vectors: Option<Vec<InlineVector>>,
    #[serde(default)]
    pub options: Option<WriteOptions>,
}

/// `retypeRecord` names its record as `id` at top level and as `record: {id}` when staged.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetypeRecordOp {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub record: Option<RecordRef>,
    pub from_label: String,
    pub to_label: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DeleteRecordOp {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub record: Option<RecordRef>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Command<T> {
    pub command: T,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DeletePropertyOp {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
}

/// A string or a list of strings (ids, types).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkByIdCommand {
    #[serde(default)]
    pub relation_type: Option<String>,
    #[serde(default)]
    pub direction: Option<String>,
    pub source_ids: OneOrMany,
    pub target_ids: OneOrMany,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnlinkByIdCommand {
    #[serde(default)]
    pub relation_types: Option<Vec<String>>,
    pub source_ids: OneOrMany,
    pub target_ids: OneOrMany,
    #[serde(default)]
    pub direction: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkSide {
    pub label: String,
    #[serde(default)]
    pub property: Option<String>,
    #[serde(default)]
    pub predicate: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkCommand {
    #[serde(default)]
    pub relation_type: Option<String>,
    #[serde(default)]
    pub direction: Option<String>,
    #[serde(default)]
    pub allow_cartesian: Option<bool>,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
    pub source: LinkSide,
    pub target: LinkSide,
}

kind_enum! {
    pub enum IngestOp {
        "documents" => Documents(IngestDocuments),
        "csv" => Csv(IngestCsv),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestDocuments {
    #[serde(default)]
    pub label: Option<String>,
    /// An array of documents, or one document (an object), as REST's `import/json` takes it.
    #[serde(deserialize_with = "de_documents")]
    pub documents: Vec<Value>,
    #[serde(default)]
    pub options: Option<WriteOptions>,
    /// Engine extension (REST `parentId`): link this record -> every imported root.
    #[serde(default)]
    pub parent_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestCsv {
    #[serde(default)]
    pub label: Option<String>,
    pub data: String,
    #[serde(default)]
    pub parse_config: Option<Map<String, Value>>,
    #[serde(default)]
    pub options: Option<WriteOptions>,
    /// `vectors[i]`: the inline vector entries of row i (null or [] for none).
    #[serde(default)]
    pub vectors: Option<Vec<Value>>,
    /// Engine extension (REST `parentId`): link this record -> every imported row.
    #[serde(default)]
    pub parent_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextIndexDefinition {
    #[serde(default)]
    pub name: Option<String>,
    pub label: String,
    pub property: String,
    #[serde(default)]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorIndexDefinition {
    #[serde(default)]
    pub name: Option<String>,
    pub label: String,
    pub property: String,
    pub dimensions: u32,
    #[serde(default)]
    pub similarity: Option<String>,
    #[serde(default)]
    pub source_type: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorItem {
    pub record_id: String,
    pub vector: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Definition<T> {
    pub definition: T,
}

#[derive(Debug, Clone, Deserialize)]
pub struct UpsertVectorsOp {
    pub name: String,
    pub items: Vec<VectorItem>,
}

kind_enum! {
    pub enum IndexOp {
        "create" => Create(Definition<TextIndexDefinition>),
        "drop" => Drop(NamedRef),
        "createVector" => CreateVector(Definition<VectorIndexDefinition>),
        "dropVector" => DropVector(NamedRef),
        "upsertVectors" => UpsertVectors(UpsertVectorsOp),
    }
}

kind_enum! {
    /// A mutation staged inside a client transaction.
    pub enum StagedMutation {
        "createRecord" => CreateRecord(StagedCreate),
        "updateRecord" => UpdateRecord(StagedUpdate),
        "retypeRecord" => RetypeRecord(RetypeRecordOp),
        "deleteRecord" => DeleteRecord(DeleteRecordOp),
        "createRelationship" => CreateRelationship(StagedRelationship),
        "ingest" => Ingest(StagedIngest),
        "getRecord" => GetRecord(RecordOnly),
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct StagedCreate {
    pub label: String,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
    #[serde(default)]
    pub options: Option<WriteOptions>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StagedUpdate {
    pub record: RecordRef,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
    #[serde(default)]
    pub replace: Option<bool>,
    #[serde(default)]
    pub options: Option<WriteOptions>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedRelationship {
    #[serde(default)]
    pub relation_type: Option<String>,
    pub source: RecordRef,
    pub target: RecordRef,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StagedIngest {
    pub ingest: IngestOp,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RecordOnly {
    pub record: RecordRef,
}

kind_enum! {
    pub enum TransactionOp {
        "begin" => Begin(BeginOp),
        "stage" => Stage(StageOp),
        "commit" => Commit(TransactionRef),
        "rollback" => Rollback(TransactionRef),
        /// Engine extension: whether a transaction is open (`GET /api/v1/tx/{id}`).
        "status" => Status(TransactionRef),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeginOp {
    /// `ttlMs`, or `ttl` as REST names it (both given: a duplicate field).
    #[serde(default, alias = "ttl", deserialize_with = "de_whole_ms")]
    pub ttl_ms: Option<u64>,
    #[serde(default)]
    pub autocommit: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageOp {
    pub transaction_id: String,
    pub mutation: StagedMutation,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionRef {
    pub transaction_id: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PurgeTenantOp {
    pub confirm: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct BackupOp {
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDocument {
    #[serde(default)]
    pub allowed_labels: Option<Vec<String>>,
    #[serde(default)]
    pub denied_relationship_types: Option<Vec<String>>,
    #[serde(default)]
    pub visible_properties: Option<Map<String, Value>>,
    #[serde(default)]
    pub max_results: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PolicySet {
    pub mode: String,
    #[serde(default)]
    pub policy: Option<PolicyDocument>,
}

kind_enum! {
    pub enum PolicyOp {
        "get" => Get(Empty),
        "set" => Set(PolicySet),
    }
}

/// Decodes a JSON value into a protocol type, naming the offending path on failure
/// (e.g. `body.operation.query.query.limit: invalid type: string "ten", expected i64`).
/// A string or an array of strings (ids, types); errors name `what` and the element.
pub fn string_list(v: &Value, what: &str) -> crate::error::Result<Vec<String>> {
    use crate::error::Error;
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::invalid(format!("{what}[{i}]: expected a string")))
            })
            .collect(),
        _ => Err(Error::invalid(format!(
            "{what}: expected a string or an array of strings"
        ))),
    }
}

pub fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> crate::error::Result<T> {
    serde_path_to_error::deserialize(strict::Strict(v)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let (inner_path, msg) = split_marked(&inner);
        let full = join_path(
            what,
            &join_path(if path == "." { "" } else { &path }, inner_path),
        );
        crate::error::Error::invalid(format!("{full}: {}", plain_expectation(msg)))
    })
}

/// serde's expectations in words a client knows: `expected struct QueryDocument` says "an
/// object", `expected i64` "an integer" (Rust type names mean nothing over the wire).
fn plain_expectation(msg: &str) -> String {
    let Some(at) = msg.rfind("expected ") else {
        return untagged(msg);
    };
    let (head, want) = msg.split_at(at + "expected ".len());
    let word = want.split([' ', ',']).next().unwrap_or("");
    let plain = match word {
        "struct" | "map" => Some("an object"),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => Some("an integer"),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => Some("a non-negative integer"),
        "f32" | "f64" => Some("a number"),
        _ => None,
    };
    match plain {
        // `struct Name` is two words; an integer kind one.
        Some(p) if word == "struct" => {
            let rest = want["struct ".len().min(want.len())..]
                .split_once([' ', ','])
                .map(|(_, r)| r)
                .unwrap_or("");
            format!("{head}{p}{}{rest}", if rest.is_empty() { "" } else { " " })
        }
        Some(p) => format!("{head}{p}{}", &want[word.len()..]),
        None => untagged(msg),
    }
}

fn untagged(msg: &str) -> String {
    if msg.contains("untagged enum OneOrMany") {
        "expected a string or an array of strings".into()
    } else if msg.contains("data did not match any variant of untagged enum") {
        "not one of the accepted forms (see the field's documentation)".into()
    } else {
        msg.to_string()
    }
}

/// A whole number of milliseconds: a non-negative integer, or a float without a fraction
/// (clients that hold every JSON number as a double send `5000.0`).
pub fn whole_ms(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=9.0e15).contains(f))
            .map(|f| f as u64)
    })
}

fn de_documents<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
    match Value::deserialize(d)? {
        Value::Array(docs) => Ok(docs),
        doc @ Value::Object(_) => Ok(vec![doc]),
        _ => Err(serde::de::Error::custom(
            "expected an array of documents or one document (an object)",
        )),
    }
}

fn de_whole_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_ms(&v)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("expected a whole number of milliseconds")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn serde_expectations_in_plain_words() {
        for (serde, plain) in [
            (
                "invalid type: string \"x\", expected struct QueryDocument",
                "invalid type: string \"x\", expected an object",
            ),
            (
                "invalid type: string \"ten\", expected i64",
                "invalid type: string \"ten\", expected an integer",
            ),
            (
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a non-negative integer",
            ),
            (
                "data did not match any variant of untagged enum OneOrMany",
                "expected a string or an array of strings",
            ),
            ("missing field `kind`", "missing field `kind`"),
            (
                "invalid type: map, expected a string",
                "invalid type: map, expected a string",
            ),
        ] {
            assert_eq!(super::plain_expectation(serde), plain);
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_sdk_envelopes() {
        let env: RequestEnvelope = decode(
            json!({"protocolVersion": 1, "context": {"scope": "t"}, "operation": {"kind": "mutate",
              "mutation": {"kind": "putRecord", "mode": "create", "label": "MOVIE",
              "properties": {"title": "Alien"}, "vectors": [], "options": {"returnResult": true, "extra": 1}}}}),
            "envelope",
        )
        .unwrap();
        assert!(matches!(
            env.operation,
            Operation::Mutate(Mutation::PutRecord(PutRecordOp {
                mode: PutMode::Create,
                ..
            }))
        ));
        let env: RequestEnvelope = decode(
            json!({"protocolVersion": 1, "operation": {"kind": "describe", "describe": {"kind": "buildInfo"}}}),
            "envelope",
        )
        .unwrap();
        assert!(env.context.is_none());
        let op: Operation = decode(
            json!({"kind": "transaction", "transaction": {"kind": "stage", "transactionId": "x",
                "mutation": {"kind": "updateRecord", "record": {"id": "a"}, "properties": {}, "replace": false}}}),
            "operation",
        )
        .unwrap();
        assert_eq!(op.permission(), Permission::Write);
        let op: Operation = decode(
            json!({"kind": "purgeTenant", "purgeTenant": {"confirm": "t"}}),
            "operation",
        )
        .unwrap();
        assert_eq!(op.name(), "purgeTenant");
        let op: Operation = decode(
            json!({"kind": "policy", "policy": {"kind": "get"}}),
            "operation",
        )
        .unwrap();
        assert_eq!(op.permission(), Permission::Operator);
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = decode::<RequestEnvelope>(
            json!({"protocolVersion": 1, "operation": {"kind": "query", "query": {"kind": "records", "query": {"limit": "ten"}}}}),
            "body",
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "body.operation.query.query.limit: invalid type: string \"ten\", expected an integer"
        );
        let err = decode::<RequestEnvelope>(
            json!({"protocolVersion": 1, "operation": {"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "upsert"}}}),
            "body",
        )
        .unwrap_err();
        assert!(
            err.message
                .starts_with("body.operation.mutation.mode: unknown variant"),
            "{}",
            err.message
        );
        let err = decode::<RequestEnvelope>(
            json!({"protocolVersion": 1, "operation": {"kind": "query", "query": {"kind": "nope"}}}),
            "body",
        )
        .unwrap_err();
        assert!(
            err.message
                .starts_with("body.operation.query.kind: unknown kind `nope`"),
            "{}",
            err.message
        );
        assert!(decode::<RequestEnvelope>(json!({"protocolVersion": "1", "operation": {"kind": "backup", "backup": {"kind": "snapshot"}}}), "body").is_err());
        assert!(decode::<RequestEnvelope>(
            json!({"protocolVersion": 1, "operation": {"kind": "nope"}}),
            "body"
        )
        .is_err());
    }
}
