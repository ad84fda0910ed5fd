//! `Engine::execute`: the single entry of every front-end. It authenticates the credential,
//! checks the permission the operation needs, resolves the tenant keyspace and runs the
//! operation. Wire modules only decode and render; every decision is made here, once.

mod ingest;
pub mod policy;
mod records;
mod relationships;
mod search;
pub mod transactions;

use crate::error::{Error, ErrorCode, Result};
use crate::model::Record;
use crate::protocol::{
    DescribeOp, Mutation, Operation, Permission, QueryOp, StagedMutation, TransactionOp,
};
use crate::store::records::PropertyInfo;
use crate::store::{Store, TenancyMode, Tenant};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Keys deleted per write batch when reclaiming a purged tenant.
pub const RECLAIM_CHUNK: usize = 10_000;

/// Longest tenant string (SPEC.md "Tenant").
pub const MAX_TENANT_BYTES: usize = 1024;

/// The rules a new tenant name follows, on every transport and in `engine token mint`: at
/// most `MAX_TENANT_BYTES`, and no space or tab at either end (HTTP drops those from a
/// header's value, so such a name would reach one tenant over REST and another over gRPC).
pub fn check_tenant_name(name: &str) -> Result<()> {
    if name.len() > MAX_TENANT_BYTES {
        return Err(Error::invalid(format!(
            "tenant is longer than {MAX_TENANT_BYTES} bytes"
        )));
    }
    if name.starts_with([' ', '\t']) || name.ends_with([' ', '\t']) {
        return Err(Error::invalid(
            "tenant must not begin or end with a space or tab (HTTP headers cannot carry them)",
        ));
    }
    Ok(())
}

/// Settings the engine decides with (a subset of the server configuration).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub bootstrap_token: String,
    pub capability_secret: Option<Vec<u8>>,
}

/// Which transport built the envelope; it decides how the tenant is named (SPEC.md
/// "Tenant selection").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// REST routes: the tenant header alone names the tenant.
    Rest,
    /// The Protocol v1 envelope: the header (where the transport has one) must equal `context.scope`.
    Protocol,
    /// Protocol v1 over gRPC: as `Protocol` (metadata `x-service-tenant`), bootstrap token only.
    Grpc,
}

/// What every front-end hands to the engine.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub credential: Option<String>,
    /// `credential` as the engine verified it earlier in the same request
    /// ([`Engine::verify_for`]), when the front-end had it checked before reading the body:
    /// it is not verified again.
    pub verified: Option<Verified>,
    pub tenant_header: Option<String>,
    pub scope: Option<String>,
    pub transport: Transport,
    pub transaction: Option<String>,
    pub operation: Operation,
}

/// A credential the engine verified for one request ([`Engine::verify_for`]), which the
/// front-end carries into that request's envelopes beside the credential itself. Only the
/// engine makes one (its field is private).
#[derive(Debug, Clone)]
pub struct Verified(Principal);

/// Who is calling, once the credential is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The bootstrap token: every operation on every tenant.
    Operator,
    /// A verified capability token: its scopes, on its one tenant (or the single keyspace).
    Capability(crate::auth::Claims),
}

impl Principal {
    /// Whether this principal holds `permission` (SPEC.md "Permissions").
    pub fn allows(&self, permission: Permission) -> bool {
        match (self, permission) {
            (Principal::Operator, _) => true,
            (Principal::Capability(_), Permission::Operator) => false,
            (Principal::Capability(c), Permission::Read) => c.scopes.read,
            (Principal::Capability(c), Permission::Write) => c.scopes.write,
        }
    }
}

#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub storage_format_version: u64,
    pub multitenant: bool,
}

/// The result of an operation, before a front-end renders it.
#[derive(Debug, Clone)]
pub enum Outcome {
    Record(Box<Record>),
    Records {
        records: Vec<Record>,
        total: u64,
    },
    Affected(u64),
    BuildInfo(BuildInfo),
    Labels(Vec<(String, u64)>),
    Properties(Vec<PropertyInfo>),
    Property(PropertyInfo),
    /// Aggregation rows (flat JSON objects).
    Rows {
        rows: Vec<serde_json::Value>,
        total: u64,
    },
    Explain(serde_json::Value),
    /// Relationships with their endpoints' labels (they serialize as relationship JSON).
    Relationships {
        relationships: Vec<crate::protocol::render::RelationshipView>,
        total: u64,
    },
    Schema(serde_json::Value),
    /// `describe indexes` / `vectorIndexes`: the declared indexes.
    Indexes(Vec<serde_json::Value>),
    /// An ingest: records written (created or upserted), relationships created, and the
    /// records themselves when `returnResult` asked for them and there are at most 1000.
    Ingested {
        count: u64,
        relationships: u64,
        records: Option<Vec<Record>>,
    },
    /// CSV export text and the number of records in it.
    Csv {
        content: String,
        count: u64,
    },
    /// `policy get` / `set`: the rendered policy.
    Policy(serde_json::Value),
    Purged {
        tenant: String,
        records: u64,
        relationships: u64,
    },
    /// `backup snapshot`: the tenant as a graph snapshot (JSON Lines, `store::snapshot`).
    Backup {
        content: String,
    },
    TransactionBegun {
        id: uuid::Uuid,
        ttl: u64,
    },
    TransactionInfo {
        id: uuid::Uuid,
        staged: u64,
    },
    TransactionStaged,
    TransactionGet(Box<Record>),
    TransactionOutcome(transactions::TxOutcome),
    TransactionRolledBack {
        id: uuid::Uuid,
    },
    PropertyValues {
        property: serde_json::Value,
        values: Vec<serde_json::Value>,
        min: serde_json::Value,
        max: serde_json::Value,
        ty: &'static str,
    },
}

/// Where a write goes: committed at once, or staged into an open client transaction.
pub(crate) enum Sink<'a> {
    Store,
    Staged(&'a mut transactions::Open),
}

impl Sink<'_> {
    /// Refuses, inside a transaction, a write that BEHAVIOUR.md §5 does not stage.
    fn refuse(&self, what: &str) -> Result<()> {
        match self {
            Sink::Store => Ok(()),
            Sink::Staged(_) => Err(transactions::not_staged(what)),
        }
    }
}

/// An operation's answer to come (`Engine::execute`), boxed.
pub type BoxedOutcome<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Outcome>> + Send + 'a>>;

/// What [`Engine::execute_now`] hands back. Moved once, to its caller: boxing the answer to
/// even out the variants would cost an allocation on every read answered at once.
#[allow(clippy::large_enum_variant)]
pub enum Executed<'a> {
    /// Answered on the calling task.
    Now(Result<Outcome>),
    /// To be awaited.
    Later(BoxedOutcome<'a>),
}

pub struct Engine {
    pub store: Arc<Store>,
    pub transactions: Arc<transactions::Transactions>,
    config: EngineConfig,
    /// SHA-256 of the bootstrap token: comparing digests keeps the comparison constant-time
    /// whatever the presented token's length.
    bootstrap_digest: [u8; 32],
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// The largest snapshot one `backup` answer carries (bigger tenants: `engine export`).
pub const MAX_BACKUP_BYTES: usize = 64 << 20;

/// A buffer that refuses to grow past `MAX_BACKUP_BYTES`; `over` tells a refusal from any
/// other failure of the writing.
#[derive(Default)]
struct Capped {
    buf: Vec<u8>,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + buf.len() > MAX_BACKUP_BYTES {
            self.over = true;
            return Err(std::io::Error::other("the backup answer's cap"));
        }
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An operation past its checks ([`Engine::admit_operation`]), ready to run.
struct Run {
    tenant: Tenant,
    op: Operation,
    /// The transaction it runs in.
    tx: Option<String>,
    transport: Transport,
    after: After,
}

/// What an operation's outcome passes through before it is answered.
struct After {
    /// The tenant's policy, which filters what a capability token is shown.
    guard: Option<policy::Guard>,
    /// A Protocol v1 `stage`: Some(true) when it staged a `getRecord`.
    staged_get: Option<bool>,
}

impl After {
    fn finish(&self, out: Outcome) -> Result<Outcome> {
        let out = match &self.guard {
            Some(g) => g.filter(out)?,
            None => out,
        };
        Ok(match (self.staged_get, out) {
            (None, out) => out,
            (Some(true), Outcome::Record(r)) => Outcome::TransactionGet(r),
            (Some(_), _) => Outcome::TransactionStaged,
        })
    }
}

/// How [`Engine::answer_now`] took an operation. Moved once, from `answer_now` to `execute`:
/// boxing the common answers to even out the variants would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Now {
    /// Answered on the calling task.
    Answered(Result<Outcome>),
    /// A listing too large to answer on the calling task: it runs on the blocking pool.
    Blocking(Box<relationships::BlockingListing>),
    /// Not one of the reads answered on the calling task.
    Not(Operation),
}

impl Engine {
    pub fn new(store: Store, config: EngineConfig) -> Engine {
        let bootstrap_digest = digest(&config.bootstrap_token);
        Engine {
            store: Arc::new(store),
            transactions: Arc::default(),
            config,
            bootstrap_digest,
        }
    }

    pub fn multitenant(&self) -> bool {
        self.store.mode == TenancyMode::Multi
    }

    /// Verifies a credential (constant-time for the bootstrap token).
    pub fn authenticate(&self, credential: Option<&str>) -> Result<Principal> {
        let token = credential.filter(|t| !t.is_empty()).ok_or_else(|| {
            Error::new(
                ErrorCode::Unauthenticated,
                "missing credential: send Authorization: Bearer <token>",
            )
        })?;
        if bool::from(digest(token).ct_eq(&self.bootstrap_digest)) {
            return Ok(Principal::Operator);
        }
        let invalid = || Error::new(ErrorCode::Unauthenticated, "invalid credential");
        let Some(secret) = &self.config.capability_secret else {
            return Err(invalid());
        };
        let claims = crate::auth::verify(secret, token, crate::auth::now()).map_err(|why| {
            Error::new(
                ErrorCode::Unauthenticated,
                format!("invalid capability token: {why}"),
            )
        })?;
        // A tenant claim is required on a multitenant engine and refused on a single-tenant one.
        match (self.multitenant(), &claims.tenant) {
            (true, None) => Err(Error::new(
                ErrorCode::Unauthenticated,
                "invalid capability token: a multitenant engine needs a tenant claim",
            )),
            (false, Some(_)) => Err(Error::new(
                ErrorCode::Unauthenticated,
                "invalid capability token: a single-tenant engine takes no tenant claim",
            )),
            _ => Ok(Principal::Capability(claims)),
        }
    }

    /// [`Engine::authenticate`] for a request that names a tenant in a header: a capability
    /// token bound to another tenant is a 401 on every route (SPEC.md "Errors"), before
    /// anything else about the request is looked at.
    pub fn authenticate_for(
        &self,
        credential: Option<&str>,
        tenant_header: Option<&str>,
    ) -> Result<Principal> {
        let principal = self.authenticate(credential)?;
        if let (true, Some(name)) = (self.multitenant(), tenant_header.filter(|h| !h.is_empty())) {
            self.check_binding(&principal, &Tenant::Named(name.to_string()))?;
        }
        Ok(principal)
    }

    /// [`Engine::authenticate_for`], answering what the request's envelopes carry so that the
    /// credential is not verified again (`Envelope::verified`).
    pub fn verify_for(
        &self,
        credential: Option<&str>,
        tenant_header: Option<&str>,
    ) -> Result<Verified> {
        self.authenticate_for(credential, tenant_header)
            .map(Verified)
    }

    /// A request whose body cannot be parsed needs `write` (SPEC.md "Permissions"): a
    /// principal without it gets 403, not a parse error.
    pub fn authorize_unparseable(&self, credential: Option<&str>) -> Result<()> {
        self.authorize(&self.authenticate(credential)?, Permission::Write)
    }

    /// `GET /metrics`: `read` permission (SPEC.md); the bootstrap token on a multitenant
    /// engine, since its figures span tenants (BEHAVIOUR.md §7). A tenant header is checked
    /// with the credential first, as on every route (another tenant's is a 401).
    pub fn authorize_metrics(
        &self,
        credential: Option<&str>,
        tenant_header: Option<&str>,
    ) -> Result<()> {
        match self.authenticate_for(credential, tenant_header)? {
            Principal::Capability(_) if self.multitenant() => Err(Error::new(
                ErrorCode::PermissionDenied,
                "GET /metrics on a multitenant engine needs the bootstrap token (its figures span tenants)",
            )),
            p => self.authorize(&p, Permission::Read),
        }
    }

    fn authorize(&self, principal: &Principal, permission: Permission) -> Result<()> {
        if principal.allows(permission) {
            return Ok(());
        }
        let what = match permission {
            Permission::Read => "the read permission",
            Permission::Write => "the write permission",
            Permission::Operator => "the bootstrap token",
        };
        Err(Error::new(
            ErrorCode::PermissionDenied,
            format!("this operation needs {what}"),
        ))
    }

    /// A capability token is bound to its tenant: another tenant is a 401 (SPEC.md "Errors").
    fn check_binding(&self, principal: &Principal, tenant: &Tenant) -> Result<()> {
        match (principal, tenant) {
            (Principal::Capability(c), Tenant::Named(name))
                if c.tenant.as_deref() != Some(name.as_str()) =>
            {
                Err(Error::new(
                    ErrorCode::Unauthenticated,
                    "this capability token is bound to another tenant",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Picks the keyspace the envelope addresses.
    fn tenant(&self, env: &Envelope) -> Result<Tenant> {
        let header = env.tenant_header.as_deref().filter(|h| !h.is_empty());
        let scope = env.scope.as_deref();
        if !self.multitenant() {
            if scope.is_some() || header.is_some() {
                return Err(Error::new(
                    ErrorCode::ScopeMismatch,
                    "this engine is single-tenant: requests must not name a tenant (context.scope or X-Service-Tenant)",
                ));
            }
            return Ok(Tenant::Single);
        }
        // A name a store already holds is let through: builds before the space rule let gRPC
        // create such tenants, and their data must stay reachable (and purgeable).
        for n in header.into_iter().chain(scope) {
            if let Err(e) = check_tenant_name(n) {
                if self
                    .store
                    .tenant_id(&Tenant::Named(n.to_string()))
                    .is_none()
                {
                    return Err(e);
                }
            }
        }
        let name = match env.transport {
            Transport::Rest => header,
            Transport::Protocol | Transport::Grpc => match (header, scope) {
                (Some(h), Some(s)) if h == s => Some(s),
                (Some(_), Some(_)) => {
                    return Err(Error::new(
                        ErrorCode::ScopeMismatch,
                        "the X-Service-Tenant header and context.scope name different tenants",
                    ))
                }
                _ => None,
            },
        };
        let name = name.ok_or_else(|| {
            Error::invalid("this engine is multitenant: every request must name its tenant (X-Service-Tenant header and context.scope)")
        })?;
        Ok(Tenant::Named(name.to_string()))
    }

    /// The single entry point of every front-end. Boxed: the operation's future is ~2 KiB,
    /// and held inline it made every caller's future that much larger (each route's, the
    /// routes', the request's), each copied whole when it is awaited or boxed (docs/design.md
    /// "Connections"). A read answered by a few point reads (a record or a property by id, one
    /// record's relationships) is answered here, on the calling task, and no operation future
    /// is built ([`Engine::answer_now`]).
    pub fn execute(&self, env: Envelope) -> BoxedOutcome<'_> {
        match self.execute_now(env) {
            Executed::Now(out) => Box::pin(std::future::ready(out)),
            Executed::Later(work) => work,
        }
    }

    /// [`Engine::execute`] for a caller that can use an answer at once: the outcome when the
    /// operation was answered on the calling task (refusals, and the reads of
    /// [`Engine::answer_now`]), else the future that answers it.
    pub fn execute_now(&self, env: Envelope) -> Executed<'_> {
        if let Operation::Describe(DescribeOp::BuildInfo(_)) = &env.operation {
            return Executed::Now(self.answer_build_info(&env));
        }
        let mut run = match self.admit_operation(env) {
            Ok(run) => run,
            Err(e) => return Executed::Now(Err(e)),
        };
        if run.tx.is_none() {
            match self.answer_now(&run.tenant, run.op) {
                Now::Answered(out) => return Executed::Now(out.and_then(|o| run.after.finish(o))),
                Now::Blocking(listing) => {
                    let after = run.after;
                    return Executed::Later(Box::pin(
                        async move { after.finish(listing.run().await?) },
                    ));
                }
                Now::Not(op) => run.op = op,
            }
        }
        Executed::Later(Box::pin(self.run_admitted(run)))
    }

    /// `describe buildInfo`: tenant-less (BEHAVIOUR.md §7), so not admitted as the others.
    fn answer_build_info(&self, env: &Envelope) -> Result<Outcome> {
        self.credential(env)?;
        if !self.multitenant() {
            // Still an envelope: naming a tenant on a single-tenant engine is refused.
            self.tenant(env)?;
        }
        Ok(Outcome::BuildInfo(self.build_info()))
    }

    /// What every other operation passes before it runs: the envelope's checks
    /// ([`Engine::admit`]), a staged operation unwrapped from its `stage`, the tenant's policy.
    fn admit_operation(&self, env: Envelope) -> Result<Run> {
        let (principal, tenant) = self.admit(&env)?;
        let transport = env.transport;
        // A Protocol v1 `stage` is the staged operation run inside its transaction.
        let (mut op, mut tx, mut staged_get) = (env.operation, env.transaction, None);
        if let Operation::Transaction(TransactionOp::Stage(s)) = op {
            staged_get = Some(matches!(s.mutation, StagedMutation::GetRecord(_)));
            // A transaction header naming another transaction than the payload is refused,
            // as two different headers are (the one would silently win over the other).
            if let Some(h) = tx.as_deref() {
                let id = |s: &str| uuid::Uuid::parse_str(s.trim()).ok();
                let same = h == s.transaction_id
                    || id(h).is_some_and(|h| Some(h) == id(&s.transaction_id));
                if !same {
                    return Err(Error::invalid(format!(
                        "X-Transaction-Id names transaction {h} but stage names {}: send one, or the same",
                        s.transaction_id
                    )));
                }
            }
            tx = Some(s.transaction_id);
            op = transactions::staged_operation(s.mutation)?;
        }
        // The data-access policy binds capability tokens (BEHAVIOUR.md §7).
        let guard = match principal {
            Principal::Capability(_) => self.policy_guard(&tenant)?,
            Principal::Operator => None,
        };
        if let Some(g) = &guard {
            op = g.admit(op, &|id| self.label_of(&tenant, id))?;
        }
        Ok(Run {
            tenant,
            op,
            tx,
            transport,
            after: After { guard, staged_get },
        })
    }

    /// The reads answered on the calling task: a few point reads each (`Now::Not` gives any
    /// other operation back).
    fn answer_now(&self, tenant: &Tenant, op: Operation) -> Now {
        match op {
            Operation::Query(QueryOp::Record(q)) => Now::Answered(self.get_record(tenant, &q.id)),
            Operation::Describe(DescribeOp::Property(p)) => {
                Now::Answered(self.describe_property(tenant, &p.id))
            }
            Operation::Query(QueryOp::Relationships(q)) => {
                match self.find_relationships(tenant, q.query) {
                    Ok(relationships::Listing::Answered(out)) => Now::Answered(Ok(out)),
                    Ok(relationships::Listing::Blocking(b)) => Now::Blocking(b),
                    Err(e) => Now::Answered(Err(e)),
                }
            }
            other => Now::Not(other),
        }
    }

    /// Runs an admitted operation: in its transaction, or on its own.
    async fn run_admitted(&self, run: Run) -> Result<Outcome> {
        let Run {
            tenant,
            op,
            tx,
            transport,
            after,
        } = run;
        // Boxed: each is ~2.7 KiB, and held inline it would make this future, which
        // `execute` boxes, that much larger to build and copy for every operation.
        let out = match &tx {
            Some(tx) => Box::pin(self.in_transaction(tenant, tx, op)).await?,
            None => Box::pin(self.dispatch(tenant, op, transport)).await?,
        };
        after.finish(out)
    }

    /// The checks every operation passes, in SPEC.md's order: credential (and the transport
    /// it may use), permission, tenant, and the credential's tenant binding.
    fn admit(&self, env: &Envelope) -> Result<(Principal, Tenant)> {
        let principal = self.credential(env)?;
        let tenant = self.tenant(env)?;
        self.check_binding(&principal, &tenant)?;
        Ok((principal, tenant))
    }

    /// The credential, valid on this transport and holding the operation's permission.
    fn credential(&self, env: &Envelope) -> Result<Principal> {
        let principal = match &env.verified {
            Some(Verified(p)) => p.clone(),
            None => self.authenticate(env.credential.as_deref())?,
        };
        self.check_transport(&principal, env.transport)?;
        self.authorize(&principal, env.operation.permission())?;
        if env.operation.echoes_stored_data() && !principal.allows(Permission::Read) {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                "an upsert with returnResult answers the stored record, which needs the read permission too (leave returnResult out to upsert without it)",
            ));
        }
        Ok(principal)
    }

    /// SPEC.md: capability tokens are for HTTP; gRPC takes the bootstrap token only.
    fn check_transport(&self, principal: &Principal, transport: Transport) -> Result<()> {
        match (principal, transport) {
            (Principal::Capability(_), Transport::Grpc) => Err(Error::new(
                ErrorCode::Unauthenticated,
                "gRPC accepts the bootstrap token only (capability tokens are for HTTP)",
            )),
            _ => Ok(()),
        }
    }

    /// A `query records` answered whole, for streaming (gRPC `ExecuteStream`): not bound by
    /// the 1000-row `limit` cap; without `limit` every match, in the query's order.
    pub async fn query_all(&self, env: Envelope) -> Result<(Vec<Record>, u64)> {
        let (_, tenant) = self.admit(&env)?;
        let Operation::Query(QueryOp::Records(q)) = env.operation else {
            return Err(Error::invalid(
                "ExecuteStream streams `query records` operations; send others to Execute",
            ));
        };
        let mut doc = q.query;
        if doc.asks_for_rows() {
            return Err(Error::invalid(
                "ExecuteStream streams records: aggregate, select and groupBy go to Execute",
            ));
        }
        let offset = doc.offset.unwrap_or(0);
        let limit = doc.limit;
        if offset < 0 || limit.is_some_and(|l| l < 1) {
            return Err(Error::invalid("query: offset must be >= 0 and limit >= 1"));
        }
        doc.offset = None;
        doc.limit = None;
        let q = crate::query::lower(&doc, false)?;
        self.require_anchor(&tenant, &q)?;
        let mut spec = q.spec;
        spec.offset = offset as usize;
        spec.limit = limit.map(|l| l as usize);
        let Some(t) = self.store.tenant_id(&tenant) else {
            return Ok((vec![], 0));
        };
        let store = self.store.clone();
        let out = tokio::task::spawn_blocking(move || {
            crate::query::exec::search(&store.snapshot()?, t, &spec)
        })
        .await
        .map_err(|e| Error::internal(format!("stream query task failed: {e}")))??;
        Ok((out.records, out.total))
    }

    /// The tenant's policy guard, when its policy is enforced.
    fn policy_guard(&self, tenant: &Tenant) -> Result<Option<policy::Guard>> {
        let Some(t) = self.store.tenant_id(tenant) else {
            return Ok(None);
        };
        Ok(policy::load(&self.store.snapshot()?, t)?.and_then(policy::Guard::new))
    }

    /// The label of a stored record, for policy checks of writes by id (None: unknown).
    fn label_of(&self, tenant: &Tenant, id: &str) -> Result<Option<String>> {
        let (Some(t), Ok(id)) = (
            self.store.tenant_id(tenant),
            crate::model::parse_uuid_v7(id, "id"),
        ) else {
            return Ok(None);
        };
        Ok(crate::store::records::get_record(&self.store.snapshot()?, t, &id)?.map(|r| r.label))
    }

    /// `policy get` / `policy set` (bootstrap token only; see `Operation::permission`).
    async fn policy(&self, tenant: Tenant, op: crate::protocol::PolicyOp) -> Result<Outcome> {
        match op {
            crate::protocol::PolicyOp::Get(_) => {
                let installed = match self.store.tenant_id(&tenant) {
                    Some(t) => policy::load(&self.store.snapshot()?, t)?,
                    None => None,
                };
                Ok(Outcome::Policy(policy::to_json(installed.as_ref())))
            }
            crate::protocol::PolicyOp::Set(s) => {
                let installed = policy::from_request(&s.mode, s.policy.as_ref())?;
                let bytes = serde_json::to_vec(&installed)
                    .map_err(|e| Error::internal(format!("policy encoding: {e}")))?;
                self.store
                    .write(
                        tenant,
                        vec![crate::store::records::WriteOp::SetPolicy(Some(bytes))],
                    )
                    .await?;
                Ok(Outcome::Policy(policy::to_json(Some(&installed))))
            }
        }
    }

    /// Runs an operation outside any transaction.
    async fn dispatch(
        &self,
        tenant: Tenant,
        op: Operation,
        transport: Transport,
    ) -> Result<Outcome> {
        let sink = &mut Sink::Store;
        match op {
            Operation::Policy(p) => self.policy(tenant, p).await,
            Operation::Transaction(op) => self.transaction(tenant, op, transport).await,
            Operation::Query(QueryOp::Records(q)) => self.find_records(&tenant, &q.query).await,
            Operation::Query(QueryOp::PropertyValues(p)) => {
                self.property_values(&tenant, &p.property, &p.query).await
            }
            Operation::Describe(DescribeOp::Labels(q)) => {
                self.describe_labels(&tenant, q.query.as_ref()).await
            }
            Operation::Describe(DescribeOp::Properties(q)) => {
                self.describe_properties(&tenant, q.query.as_ref()).await
            }
            Operation::Describe(DescribeOp::Schema(q)) => {
                self.describe_schema(&tenant, q.query.as_ref()).await
            }
            Operation::Describe(DescribeOp::Explain(q)) => {
                self.explain(&tenant, q.query.as_ref()).await
            }
            Operation::Mutate(Mutation::DeleteRecords(q)) => {
                self.delete_records(tenant, &q.query).await
            }
            // No text or vector index can be declared yet (`index` answers unsupported): the
            // listings are truthfully empty, and a named vector index is unknown.
            Operation::Describe(DescribeOp::Indexes(_) | DescribeOp::VectorIndexes(_)) => {
                Ok(Outcome::Indexes(Vec::new()))
            }
            Operation::Describe(DescribeOp::VectorIndex(n)) => Err(Error::not_found(format!(
                "vector index {} not found (no vector index can be declared yet)",
                n.name
            ))),
            Operation::Mutate(Mutation::PutRecord(p)) => self.put_record(tenant, p, sink).await,
            Operation::Mutate(Mutation::RetypeRecord(r)) => {
                self.retype_record(tenant, r.id, r.record, r.from_label, r.to_label, sink)
                    .await
            }
            Operation::Mutate(Mutation::DeleteRecord(d)) => {
                self.delete_record(tenant, d.id, d.record, sink).await
            }
            Operation::Mutate(Mutation::DeleteProperty(d)) => {
                self.delete_property(tenant, d.name, d.id).await
            }
            Operation::Mutate(Mutation::LinkRecordsById(c)) => {
                self.link_by_id(tenant, c.command, sink).await
            }
            Operation::Mutate(Mutation::UnlinkRecordsById(c)) => {
                self.unlink_by_id(tenant, c.command, sink).await
            }
            Operation::Mutate(Mutation::LinkRecords(c)) => {
                self.link_many(tenant, c.command, false).await
            }
            Operation::Mutate(Mutation::UnlinkRecords(c)) => {
                self.link_many(tenant, c.command, true).await
            }
            Operation::Ingest(i) => self.ingest(tenant, i, sink).await,
            Operation::PurgeTenant(p) => self.purge_tenant(tenant, p).await,
            Operation::Backup(b) => self.backup(&tenant, b).await,
            Operation::Query(QueryOp::ExportCsv(q)) => self.export_csv(&tenant, &q.query).await,
            // The reads `answer_now` takes (`execute` asks it first).
            other => match self.answer_now(&tenant, other) {
                Now::Answered(out) => out,
                Now::Blocking(listing) => listing.run().await,
                Now::Not(op) => Err(Error::unsupported(op.name())),
            },
        }
    }

    /// `backup {kind: "snapshot"}`: the envelope's own tenant in the format of `engine export`
    /// (a whole snapshot of one tenant, restorable with `engine restore`), read on one
    /// snapshot off the runtime's workers. Answers up to `MAX_BACKUP_BYTES`; a larger tenant
    /// is exported with `engine export`.
    async fn backup(&self, tenant: &Tenant, b: crate::protocol::BackupOp) -> Result<Outcome> {
        use crate::store::snapshot;
        if b.kind != "snapshot" {
            return Err(Error::invalid(format!(
                "backup.kind: '{}' is not one of: snapshot",
                crate::model::truncate(&b.kind, 64)
            )));
        }
        let snap = self.store.snapshot()?;
        let (id, name, multi) = match tenant {
            Tenant::Named(n) => (self.store.tenant_id(tenant), Some(n.clone()), true),
            _ => (Some(crate::store::keys::SINGLE_TENANT), None, false),
        };
        let content = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let mut out = Capped::default();
            let written = snapshot::header_line(&mut out, multi).and_then(|_| {
                let mut counts = snapshot::Counts::default();
                match id {
                    Some(id) => {
                        snapshot::export_tenant(&snap, id, name.as_deref(), &mut out, &mut counts)?
                    }
                    // A tenant never written: just its tenant line.
                    None => snapshot::tenant_line(&mut out, name.as_deref(), &mut counts)?,
                }
                snapshot::end(&mut out, counts)
            });
            match written {
                Ok(()) => Ok(out.buf),
                Err(_) if out.over => Err(Error::new(
                    ErrorCode::PayloadTooLarge,
                    format!("the tenant's snapshot is larger than {MAX_BACKUP_BYTES} bytes, the most one backup answer carries: export it with `engine export` (server stopped)"),
                )),
                Err(e) => Err(e),
            }
        })
        .await
        .map_err(|e| Error::internal(format!("backup task failed: {e}")))??;
        let content =
            String::from_utf8(content).map_err(|_| Error::internal("snapshot is not UTF-8"))?;
        Ok(Outcome::Backup { content })
    }

    /// `purgeTenant`: the envelope's own tenant becomes invisible in one small write; its keys
    /// are reclaimed in the background in chunks, interleaved with other tenants' writes.
    async fn purge_tenant(
        &self,
        tenant: Tenant,
        p: crate::protocol::PurgeTenantOp,
    ) -> Result<Outcome> {
        let Tenant::Named(name) = &tenant else {
            return Err(Error::invalid(
                "purgeTenant needs a multitenant engine (a single-tenant engine has no tenant to purge)",
            ));
        };
        if &p.confirm != name {
            return Err(Error::invalid(
                "purgeTenant.confirm must repeat the envelope's own tenant",
            ));
        }
        let Some(t) = self.store.tenant_id(&tenant) else {
            return Ok(Outcome::Purged {
                tenant: name.clone(),
                records: 0,
                relationships: 0,
            });
        };
        let snap = self.store.snapshot()?;
        let records = crate::store::records::label_counts(&snap, t)?
            .iter()
            .map(|c| c.1)
            .sum();
        let relationships = crate::store::relationships::rel_counts(&snap, t)?
            .iter()
            .map(|c| c.3)
            .sum();
        drop(snap);
        self.store
            .write(
                tenant.clone(),
                vec![crate::store::records::WriteOp::PurgeTenant],
            )
            .await?;
        self.reclaim(t);
        Ok(Outcome::Purged {
            tenant: name.clone(),
            records,
            relationships,
        })
    }

    /// Deletes a purged tenant's keys, [`RECLAIM_CHUNK`] per write batch, in the background.
    pub fn reclaim(&self, id: u64) {
        let store = self.store.clone();
        tokio::spawn(async move {
            loop {
                let op = crate::store::records::WriteOp::Reclaim { max: RECLAIM_CHUNK };
                match store.write(Tenant::Purged(id), vec![op]).await {
                    Ok(out) => {
                        if matches!(out.first(), Some(crate::store::records::WriteOutcome::Affected(n)) if (*n as usize) < RECLAIM_CHUNK)
                        {
                            crate::log::info(&format!("reclaimed the keys of purged tenant {id}"));
                            return;
                        }
                    }
                    Err(e) => {
                        crate::log::warn(&format!(
                            "reclaiming purged tenant {id} stopped: {}; it resumes at the next start",
                            e.message
                        ));
                        return;
                    }
                }
            }
        });
    }

    /// Resumes the reclamation of tenants purged before a restart.
    pub fn resume_reclaims(&self) -> Result<()> {
        for id in self.store.purging()? {
            self.reclaim(id);
        }
        Ok(())
    }

    /// Commits `ops` (one durable batch) or stages them into the transaction.
    async fn apply_writes(
        &self,
        tenant: Tenant,
        ops: Vec<crate::store::records::WriteOp>,
        sink: &mut Sink<'_>,
    ) -> Result<Vec<crate::store::records::WriteOutcome>> {
        match sink {
            Sink::Store => self.store.write(tenant, ops).await,
            Sink::Staged(open) => self.stage(open, ops),
        }
    }

    pub fn build_info(&self) -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            storage_format_version: crate::store::STORAGE_FORMAT_VERSION,
            multitenant: self.multitenant(),
        }
    }

    /// Store-wide figures for `/metrics`: (records, tenants).
    pub fn totals(&self) -> Result<(u64, u64)> {
        let snap = self.store.snapshot()?;
        let mut records = 0;
        for t in self.store.tenant_ids() {
            records += crate::store::records::label_counts(&snap, t)?
                .iter()
                .map(|(_, c)| c)
                .sum::<u64>();
        }
        Ok((records, self.store.tenant_count() as u64))
    }

    /// What the store's key memo holds and has answered (metrics).
    pub fn key_memo(&self) -> crate::store::memo::MemoStats {
        self.store.memo_stats()
    }
}
