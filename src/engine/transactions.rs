//! Client transactions (BEHAVIOUR.md §5): writes sent with a transaction id are staged, reads
//! sent with it see the latest committed data plus the staged writes, and commit applies
//! everything in one durable batch or nothing.
//!
//! Invariants:
//! - No redb read transaction outlives a request: every staged write and every read replays
//!   the staged ops on an overlay over a fresh snapshot (`store::staged_view`), which is also
//!   how a staged write is validated before it is accepted.
//! - Every committed record the transaction reads or writes is remembered with the version it
//!   had when first seen; commit puts a `Check` of each in front of the staged ops, so the
//!   writer refuses the whole batch (409 conflict) if any changed since: first committer wins.
//! - Relationships do not change a record's version, so the relationships the transaction
//!   lists or searches (`query relationships`) or writes are remembered apart, as digests of
//!   their adjacency entries when first seen (a listed record's whole adjacency, an attach's
//!   or a search hit's (source, type, target), a detach's pairs, a deleted record's whole
//!   adjacency); commit checks each the same way (`CheckAdjacency`). Relationships a record
//!   search only traverses (`relatedTo`, related-label blocks) are not remembered, as the
//!   records it did not return are not. Only a write's check is remembered once the write is
//!   accepted: a refused write leaves nothing behind.
//! - A transaction ends exactly once (commit, rollback or expiry), under its own lock; its id
//!   is then remembered as expired for [`EXPIRED_MEMORY`] when it ended by expiry, with how
//!   (rolled back, or committed or refused by its autocommit). An expiry records that before
//!   it lets go of the transaction, so no request finds the id unknown in between.
//! - Every open transaction has one lease (its ttl deadline) in [`Transactions`]'s ordered
//!   set until it ends; one keeper task per engine sleeps until the earliest lease and
//!   expires what is due. A transaction that commits or rolls back takes its lease out, so
//!   no timer or task outlives it (one task slept out every ttl before: at W-TX rates with
//!   a 30 s ttl, ~45,000 sleeping tasks).

use super::{Engine, Outcome, Sink};
use crate::error::{Error, ErrorCode, Result};
use crate::model::Record;
use crate::protocol::{
    self, BeginOp, LinkByIdCommand, Mutation, OneOrMany, Operation, PutMode, PutRecordOp, QueryOp,
    RecordQuery, StagedMutation, TransactionOp,
};
use crate::store::records::{self as rec, PutRecord, WriteOp, WriteOutcome};
use crate::store::relationships::{adjacency_digest, AdjScope};
use crate::store::{self, Tenant, STAGED_VERSION};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use uuid::Uuid;

pub const DEFAULT_TTL_MS: u64 = 5_000;
pub const MAX_TTL_MS: u64 = 30_000;
/// How long an expired transaction's id answers `transaction_expired`.
pub const EXPIRED_MEMORY: Duration = Duration::from_secs(600);
/// Transactions ended by commit or rollback whose outcome a Protocol v1 `commit` sent again
/// still answers (a retry after a lost answer), newest kept; each for at most
/// [`EXPIRED_MEMORY`].
pub const ENDED_MEMORY: usize = 65_536;
/// Most write ops one transaction may stage (each read replays them all).
pub const MAX_STAGED_OPS: usize = 100_000;

/// An open transaction. Guarded by its own async lock; `ops` is empty once it has ended.
pub struct Open {
    pub id: Uuid,
    tenant: Tenant,
    ops: Vec<WriteOp>,
    /// Committed records read or written, with the version first seen.
    seen: HashMap<Uuid, u64>,
    /// Committed relationships read or written, with the digest first seen.
    adjacency: HashMap<AdjScope, u64>,
    autocommit: bool,
    ended: bool,
    /// When the ttl elapses (its lease in [`Transactions::leases`]).
    deadline: Instant,
}

type Handle = Arc<tokio::sync::Mutex<Open>>;

#[derive(Default)]
pub struct Transactions {
    open: Mutex<HashMap<Uuid, Handle>>,
    /// Ids of transactions that expired, with their tenant, when and how they ended.
    expired: Mutex<HashMap<Uuid, (Tenant, Instant, Expiry)>>,
    /// The leases of open transactions, earliest deadline first.
    leases: Mutex<BTreeSet<(Instant, Uuid)>>,
    /// Wakes the keeper when a lease earlier than every other one is taken.
    earlier_lease: tokio::sync::Notify,
    /// The lease keeper's task (`keep_leases`), once started.
    keeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How transactions ended by commit or rollback ended, oldest first (bounded).
    ended: Mutex<Ended>,
}

/// Outcomes of ended transactions, by id, with their tenant and when they ended.
#[derive(Default)]
struct Ended {
    by_id: HashMap<Uuid, (Tenant, Instant, TxOutcome)>,
    order: std::collections::VecDeque<Uuid>,
}

/// How a transaction whose ttl elapsed ended.
#[derive(Debug, Clone)]
enum Expiry {
    RolledBack,
    /// Its autocommit applied it.
    Committed,
    /// Its autocommit was refused (a conflict, or a write that no longer applies).
    Refused {
        reason: String,
        retryable: bool,
    },
}

/// How a commit ended (Protocol v1 `transactionOutcome`).
#[derive(Debug, Clone)]
pub struct TxOutcome {
    pub id: Uuid,
    pub status: &'static str,
    pub retryable: bool,
    pub reason: Option<String>,
}

/// 501 for an operation a transaction does not take (BEHAVIOUR.md §5).
pub(super) fn not_staged(what: &str) -> Error {
    Error::new(
        ErrorCode::Unsupported,
        format!("{what} cannot run inside a transaction: transactions take record creates, updates, retypes and deletes by id, relationship attach and detach by id, imports, and reads by id, search and relationship lists; run it outside the transaction"),
    )
}

fn not_found(id: &Uuid) -> Error {
    Error::not_found(format!("transaction {id} not found"))
}

fn expired(id: &Uuid, how: &Expiry) -> Error {
    let how = match how {
        Expiry::RolledBack => "and was rolled back".to_string(),
        Expiry::Committed => "and was committed (autocommit)".to_string(),
        Expiry::Refused { reason, .. } => {
            format!("and its autocommit was refused, nothing applied: {reason}")
        }
    };
    Error::new(
        ErrorCode::TransactionExpired,
        format!("transaction {id} expired (its ttl elapsed) {how}"),
    )
}

/// What is remembered of an ended transaction, for its own tenant only and for at most
/// [`EXPIRED_MEMORY`].
fn recent<'a, T>(entry: Option<&'a (Tenant, Instant, T)>, tenant: &Tenant) -> Option<&'a T> {
    entry
        .filter(|(t, at, _)| t == tenant && at.elapsed() < EXPIRED_MEMORY)
        .map(|(_, _, what)| what)
}

impl Transactions {
    /// The open transaction `id`; else the error its id answers for `tenant` (expired only
    /// to its own tenant: another one is told nothing of it).
    fn lookup(&self, id: &Uuid, tenant: &Tenant) -> Result<Handle> {
        let open = self.open.lock().map_err(|_| Error::internal("tx lock"))?;
        if let Some(h) = open.get(id) {
            return Ok(h.clone());
        }
        drop(open);
        let mut exp = self
            .expired
            .lock()
            .map_err(|_| Error::internal("tx lock"))?;
        exp.retain(|_, (_, at, _)| at.elapsed() < EXPIRED_MEMORY);
        Err(match recent(exp.get(id), tenant) {
            Some(how) => expired(id, how),
            None => not_found(id),
        })
    }

    /// How the transaction `id` of `tenant` ended, when it expired less than
    /// [`EXPIRED_MEMORY`] ago.
    fn expiry(&self, id: &Uuid, tenant: &Tenant) -> Option<Expiry> {
        let exp = self.expired.lock().ok()?;
        recent(exp.get(id), tenant).cloned()
    }

    /// The lease set; a panic elsewhere while it was held does not stop expiry.
    fn lease_set(&self) -> std::sync::MutexGuard<'_, BTreeSet<(Instant, Uuid)>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends an open transaction's registration: its id and its lease.
    fn remove(&self, id: &Uuid, deadline: Instant) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(id);
        }
        self.lease_set().remove(&(deadline, *id));
    }

    /// Takes a lease; wakes the keeper when it is the earliest.
    fn lease(&self, id: Uuid, deadline: Instant) {
        let earliest = {
            let mut leases = self.lease_set();
            leases.insert((deadline, id));
            leases.first() == Some(&(deadline, id))
        };
        if earliest {
            self.earlier_lease.notify_one();
        }
    }

    /// The leases due at `now`, taken out of the set, and the next deadline after them.
    fn due(&self, now: Instant) -> (Vec<Uuid>, Option<Instant>) {
        let mut leases = self.lease_set();
        let mut due = Vec::new();
        while let Some(&(at, id)) = leases.first() {
            if at > now {
                return (due, Some(at));
            }
            leases.pop_first();
            due.push(id);
        }
        (due, None)
    }

    /// Leases held: one per open transaction.
    pub fn leases(&self) -> usize {
        self.lease_set().len()
    }

    fn handle(&self, id: &Uuid) -> Option<Handle> {
        self.open.lock().ok()?.get(id).cloned()
    }

    /// Remembers how a transaction ended by commit or rollback.
    fn record_end(&self, tenant: &Tenant, o: &TxOutcome) {
        let mut e = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        while e.order.len() >= ENDED_MEMORY {
            if let Some(old) = e.order.pop_front() {
                e.by_id.remove(&old);
            }
        }
        e.order.push_back(o.id);
        e.by_id
            .insert(o.id, (tenant.clone(), Instant::now(), o.clone()));
    }

    /// How the transaction `id` of `tenant` ended, when it ended by commit or rollback not
    /// long ago.
    fn ended_outcome(&self, tenant: &Tenant, id: &Uuid) -> Option<TxOutcome> {
        let e = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        recent(e.by_id.get(id), tenant).cloned()
    }

    fn mark_expired(&self, id: Uuid, tenant: &Tenant, how: Expiry) {
        if let Ok(mut exp) = self.expired.lock() {
            exp.retain(|_, (_, at, _)| at.elapsed() < EXPIRED_MEMORY);
            exp.insert(id, (tenant.clone(), Instant::now(), how));
        }
    }
}

/// The lease keeper (one per engine, started with the first transaction): sleeps until the
/// earliest lease, or until an earlier one is taken, and expires the transactions that are
/// due, each in its own task (an expiry waits for the transaction's lock, and an autocommit
/// for the writer). It holds the engine's parts weakly and looks again at least every
/// [`KEEPER_IDLE`], so it ends once the engine is dropped; `begin` starts another if it ended
/// (its runtime shut down while the engine lives on).
async fn keep_leases(store: Weak<store::Store>, txs: Weak<Transactions>) {
    loop {
        let Some(t) = txs.upgrade() else { return };
        let now = Instant::now();
        let (due, next) = t.due(now);
        for id in due {
            if let (Some(h), Some(s)) = (t.handle(&id), store.upgrade()) {
                tokio::spawn(expire(h, s, t.clone()));
            }
        }
        // A lease taken after `due` looked is either later than `next` or wakes this.
        let until = next.map_or(now + KEEPER_IDLE, |at| at.min(now + KEEPER_IDLE));
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = t.earlier_lease.notified() => {}
        }
    }
}

/// The longest the lease keeper sleeps before it checks that its engine still exists.
const KEEPER_IDLE: Duration = Duration::from_secs(1);

/// Ends a transaction whose ttl elapsed: rolled back (its id then answers
/// `transaction_expired`), or committed when it asked for autocommit.
async fn expire(h: Handle, store: Arc<store::Store>, txs: Arc<Transactions>) {
    let mut g = h.lock().await;
    if g.ended {
        return;
    }
    let how = if g.autocommit {
        match commit_staged(&store, &mut g).await {
            Ok(()) => Expiry::Committed,
            Err((retryable, reason)) => {
                crate::log::warn(&format!(
                    "autocommit of transaction {} at expiry failed: {reason}",
                    g.id
                ));
                Expiry::Refused { retryable, reason }
            }
        }
    } else {
        g.ended = true;
        g.ops.clear();
        Expiry::RolledBack
    };
    // Remembered before the id leaves the open set (a request in between finds one or the
    // other; one that waited for this lock looks the id up again and finds this).
    txs.mark_expired(g.id, &g.tenant, how);
    txs.remove(&g.id, g.deadline);
}

/// Commits a locked transaction's staged writes in one durable batch and records its end.
async fn finish_commit(
    store: Arc<store::Store>,
    transactions: Arc<Transactions>,
    mut g: tokio::sync::OwnedMutexGuard<Open>,
) -> TxOutcome {
    let outcome = match commit_staged(&store, &mut g).await {
        Ok(()) => TxOutcome {
            id: g.id,
            status: "committed",
            retryable: false,
            reason: None,
        },
        Err((retryable, reason)) => TxOutcome {
            id: g.id,
            status: "aborted",
            retryable,
            reason: Some(reason),
        },
    };
    // Remembered before the id leaves the open set (as an expiry is).
    transactions.record_end(&g.tenant, &outcome);
    transactions.remove(&g.id, g.deadline);
    outcome
}

/// Ends a locked transaction by committing its staged writes (with the checks of what it
/// read) in one durable batch: done, or whether it may succeed if run again and why not.
async fn commit_staged(
    store: &store::Store,
    g: &mut Open,
) -> std::result::Result<(), (bool, String)> {
    g.ended = true;
    let ops = commit_ops(g);
    store
        .write(g.tenant.clone(), ops)
        .await
        .map(|_| ())
        .map_err(commit_refusal)
}

/// Whether a transaction whose commit batch was refused may succeed if run again, and why it
/// was refused. Every staged write was checked against the committed data when it was staged
/// (a write refused then was not staged), so a refusal at commit comes from another commit in
/// between: a conflict, a record a write needs deleted, an id it creates taken. Running the
/// transaction again from its reads may then succeed: retryable. The store failing
/// (`internal`) or shutting down (`unsupported`) is not, and says so itself.
fn commit_refusal(e: Error) -> (bool, String) {
    match e.code {
        ErrorCode::Conflict => (true, e.message),
        ErrorCode::Internal | ErrorCode::Unsupported => (false, e.message),
        _ => (
            true,
            format!(
                "another commit changed what this transaction's writes need after they were staged: {}",
                e.message
            ),
        ),
    }
}

/// Record ids a write op changes (their committed versions join the transaction's set).
fn written_ids(op: &WriteOp) -> Vec<Uuid> {
    match op {
        WriteOp::Put(p) if !p.mode.creates() => vec![p.id],
        WriteOp::Retype { id, .. } | WriteOp::Delete { id } => vec![*id],
        _ => vec![],
    }
}

/// The relationships a staged write depends on: an attach replaces the properties of its
/// (source, type, target) if there is one, a detach removes what is between its records, a
/// delete removes every relationship of its record. (A link that is not unique, as an
/// import's, adds a relationship whatever is there; a retype relabels whatever is there.)
fn written_adjacency(op: &WriteOp) -> Vec<AdjScope> {
    match op {
        WriteOp::Link(l) if l.unique => vec![AdjScope::Triple {
            source: l.source,
            target: l.target,
            rel_type: l.rel_type.clone(),
        }],
        WriteOp::Unlink(u) => u
            .others
            .iter()
            .map(|o| AdjScope::Pair(u.node, *o))
            .collect(),
        WriteOp::Delete { id } => vec![AdjScope::Node(*id)],
        _ => vec![],
    }
}

/// The digests on `kv` (committed data) of the scopes not remembered yet.
fn adjacency_digests<R: store::kv::KvRead>(
    open: &Open,
    kv: &R,
    t: u64,
    scopes: impl IntoIterator<Item = AdjScope>,
) -> Result<HashMap<AdjScope, u64>> {
    let mut out = HashMap::new();
    for s in scopes {
        if !open.adjacency.contains_key(&s) && !out.contains_key(&s) {
            let d = adjacency_digest(kv, t, &s)?;
            out.insert(s, d);
        }
    }
    Ok(out)
}

pub fn parse_id(id: &str) -> Result<Uuid> {
    crate::model::parse_uuid_v7(id, "transaction id")
}

impl Engine {
    /// Parses and finds an open transaction of this tenant, locked.
    async fn locked(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<tokio::sync::OwnedMutexGuard<Open>> {
        let id = parse_id(id)?;
        let h = self.transactions.lookup(&id, tenant)?;
        let g = h.lock_owned().await;
        if g.ended {
            return Err(self
                .transactions
                .lookup(&id, tenant)
                .err()
                .unwrap_or_else(|| not_found(&id)));
        }
        if &g.tenant != tenant {
            return Err(not_found(&id));
        }
        Ok(g)
    }

    pub(super) async fn begin(&self, tenant: Tenant, b: BeginOp) -> Result<Outcome> {
        let ttl = b.ttl_ms.unwrap_or(DEFAULT_TTL_MS);
        if ttl == 0 || ttl > MAX_TTL_MS {
            return Err(Error::invalid(format!(
                "ttl (ttlMs): {ttl} ms is outside 1..={MAX_TTL_MS} ms"
            )));
        }
        let id = Uuid::now_v7();
        let deadline = Instant::now() + Duration::from_millis(ttl);
        let open = Arc::new(tokio::sync::Mutex::new(Open {
            id,
            tenant,
            ops: Vec::new(),
            seen: HashMap::new(),
            adjacency: HashMap::new(),
            autocommit: b.autocommit.unwrap_or(false),
            ended: false,
            deadline,
        }));
        self.transactions
            .open
            .lock()
            .map_err(|_| Error::internal("tx lock"))?
            .insert(id, open);
        self.transactions.lease(id, deadline);
        {
            let mut keeper = self
                .transactions
                .keeper
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if keeper.as_ref().is_none_or(|k| k.is_finished()) {
                *keeper = Some(tokio::spawn(keep_leases(
                    Arc::downgrade(&self.store),
                    Arc::downgrade(&self.transactions),
                )));
            }
        }
        Ok(Outcome::TransactionBegun { id, ttl })
    }

    /// `GET /tx/{id}`: the transaction exists and is open.
    pub(super) async fn transaction_info(&self, tenant: &Tenant, id: &str) -> Result<Outcome> {
        let g = self.locked(tenant, id).await?;
        Ok(Outcome::TransactionInfo {
            id: g.id,
            staged: g.ops.len() as u64,
        })
    }

    pub(super) async fn commit(&self, tenant: &Tenant, id: &str) -> Result<TxOutcome> {
        let g = self.locked(tenant, id).await?;
        // The commit's write and its bookkeeping run as a task of their own: once the write
        // is handed to the writer it commits whatever happens to the request (a client that
        // hangs up drops the request's future), and the transaction must then still be
        // recorded as ended. Marked here too, since the budget's mark does not cross tasks.
        crate::activity::write_handed_off();
        let (store, transactions) = (self.store.clone(), self.transactions.clone());
        tokio::spawn(finish_commit(store, transactions, g))
            .await
            .map_err(|e| Error::internal(format!("transaction commit task: {e}")))
    }

    pub(super) async fn rollback(&self, tenant: &Tenant, id: &str) -> Result<Uuid> {
        let mut g = self.locked(tenant, id).await?;
        g.ended = true;
        g.ops.clear();
        let outcome = TxOutcome {
            id: g.id,
            status: "aborted",
            retryable: false,
            reason: Some(format!("transaction {} was rolled back", g.id)),
        };
        self.transactions.record_end(&g.tenant, &outcome);
        self.transactions.remove(&g.id, g.deadline);
        Ok(g.id)
    }

    /// Protocol v1 `transaction`.
    /// `transport`: REST answers an ended transaction's id with its error (404
    /// `transaction_expired` or `not_found`); Protocol v1 (and gRPC) commit always answers
    /// with the outcome (BEHAVIOUR.md §5).
    pub(super) async fn transaction(
        &self,
        tenant: Tenant,
        op: TransactionOp,
        transport: super::Transport,
    ) -> Result<Outcome> {
        let outcome_always = transport != super::Transport::Rest;
        match op {
            TransactionOp::Begin(b) => self.begin(tenant, b).await,
            TransactionOp::Commit(r) => match self.commit(&tenant, &r.transaction_id).await {
                Ok(o) => Ok(Outcome::TransactionOutcome(o)),
                // An autocommit at expiry decided the outcome already.
                Err(e) if outcome_always && e.code == ErrorCode::TransactionExpired => {
                    let id = parse_id(&r.transaction_id)?;
                    let (status, retryable, reason) = match self.transactions.expiry(&id, &tenant) {
                        Some(Expiry::Committed) => ("committed", false, None),
                        Some(Expiry::Refused { retryable, .. }) => {
                            ("aborted", retryable, Some(e.message))
                        }
                        _ => ("expired", true, Some(e.message)),
                    };
                    Ok(Outcome::TransactionOutcome(TxOutcome {
                        id,
                        status,
                        retryable,
                        reason,
                    }))
                }
                // A commit sent again after the transaction ended (a retry after a lost
                // answer): how it ended.
                Err(e) if outcome_always && e.code == ErrorCode::NotFound => {
                    let id = parse_id(&r.transaction_id)?;
                    match self.transactions.ended_outcome(&tenant, &id) {
                        Some(o) => Ok(Outcome::TransactionOutcome(o)),
                        None => Err(e),
                    }
                }
                Err(e) => Err(e),
            },
            TransactionOp::Status(r) => self.transaction_info(&tenant, &r.transaction_id).await,
            TransactionOp::Rollback(r) => {
                let id = self.rollback(&tenant, &r.transaction_id).await?;
                Ok(Outcome::TransactionRolledBack { id })
            }
            // `execute` unwraps `stage` into the staged operation (so it is checked like any
            // other), runs it inside the transaction and renders the staged outcome.
            TransactionOp::Stage(_) => Err(Error::internal("stage reached the dispatcher")),
        }
    }

    /// An operation sent with a transaction id: staged writes, reads of the staged view, and
    /// 501 for everything else.
    pub(super) async fn in_transaction(
        &self,
        tenant: Tenant,
        tx: &str,
        op: Operation,
    ) -> Result<Outcome> {
        let refuse = |op: &Operation| Err(not_staged(&op.name()));
        // The transaction first (an unknown id is a 404 whatever the operation), then the
        // operations a transaction does not take.
        let mut g = self.locked(&tenant, tx).await?;
        match &op {
            Operation::Mutate(
                Mutation::PutRecord(_)
                | Mutation::RetypeRecord(_)
                | Mutation::DeleteRecord(_)
                | Mutation::LinkRecordsById(_)
                | Mutation::UnlinkRecordsById(_),
            )
            | Operation::Ingest(_)
            | Operation::Query(QueryOp::Record(_) | QueryOp::Relationships(_)) => {}
            // SearchDto's empty defaults ask for records (`QueryDocument::asks_for_rows`).
            Operation::Query(QueryOp::Records(q)) if !q.query.asks_for_rows() => {}
            _ => return refuse(&op),
        }
        let open = &mut *g;
        match op {
            Operation::Query(QueryOp::Record(q)) => {
                let id = crate::model::parse_uuid_v7(&q.id, "id")?;
                let rec = self.staged_read(open, |kv, t, _| rec::get_record(kv, t, &id))?;
                let rec = rec.ok_or_else(|| Error::not_found(format!("record {id} not found")))?;
                remember(open, std::slice::from_ref(&rec));
                Ok(Outcome::Record(Box::new(rec)))
            }
            Operation::Query(QueryOp::Records(q)) => {
                let q = crate::query::lower(&q.query, true)?;
                let (out, anchor) = self.staged_read(open, |kv, t, _| {
                    let noting = NotingReads::new(kv, t);
                    q.check_anchor(&noting, t)?;
                    Ok((
                        crate::query::exec::search(kv, t, &q.spec)?,
                        noting.read.into_inner(),
                    ))
                })?;
                note_versions(open, anchor);
                remember(open, &out.records);
                Ok(Outcome::Records {
                    records: out.records,
                    total: out.total,
                })
            }
            Operation::Query(QueryOp::Relationships(q)) => {
                let spec = super::relationships::RelSpec::parse(q.query)?;
                // The records a listing or search reads (its record, the endpoints a side
                // filter looks at) are read inside the transaction: remembered like any other.
                // So are the relationships it answers: a listing's record's whole adjacency,
                // each hit of a search (digests of the committed data the read saw).
                let (((relationships, total), read), digests) =
                    self.staged_read(open, |kv, t, snap| {
                        let noting = NotingReads::new(kv, t);
                        let (page, total) = spec.run(&noting, t, None)?;
                        let scopes: Vec<AdjScope> = match spec.record() {
                            Some(id) => vec![AdjScope::Node(id)],
                            None => page
                                .iter()
                                .map(|v| AdjScope::Triple {
                                    source: v.source,
                                    target: v.target,
                                    rel_type: v.rel_type.to_string(),
                                })
                                .collect(),
                        };
                        let digests = adjacency_digests(open, snap, t, scopes)?;
                        Ok((((page, total), noting.read.into_inner()), digests))
                    })?;
                note_versions(open, read);
                for (scope, d) in digests {
                    open.adjacency.entry(scope).or_insert(d);
                }
                Ok(Outcome::Relationships {
                    relationships,
                    total,
                })
            }
            Operation::Mutate(Mutation::PutRecord(p)) => {
                self.put_record(tenant, p, &mut Sink::Staged(open)).await
            }
            Operation::Mutate(Mutation::RetypeRecord(r)) => {
                self.retype_record(
                    tenant,
                    r.id,
                    r.record,
                    r.from_label,
                    r.to_label,
                    &mut Sink::Staged(open),
                )
                .await
            }
            Operation::Mutate(Mutation::DeleteRecord(d)) => {
                self.delete_record(tenant, d.id, d.record, &mut Sink::Staged(open))
                    .await
            }
            Operation::Mutate(Mutation::LinkRecordsById(c)) => {
                self.link_by_id(tenant, c.command, &mut Sink::Staged(open))
                    .await
            }
            Operation::Mutate(Mutation::UnlinkRecordsById(c)) => {
                self.unlink_by_id(tenant, c.command, &mut Sink::Staged(open))
                    .await
            }
            Operation::Ingest(i) => self.ingest(tenant, i, &mut Sink::Staged(open)).await,
            other => refuse(&other),
        }
    }

    /// Runs `read` on the transaction's view (committed data plus staged writes).
    /// `read` also gets the committed snapshot under the view (what the transaction's
    /// checks compare against).
    fn staged_read<T>(
        &self,
        open: &Open,
        read: impl FnOnce(
            &store::kv::Overlay<'_, store::kv::Snapshot>,
            u64,
            &store::kv::Snapshot,
        ) -> Result<T>,
    ) -> Result<T> {
        let snap = self.store.snapshot()?;
        store::staged_view(&snap, &open.tenant, open.ops.clone(), |kv, t, _| {
            read(kv, t, &snap)
        })
    }

    /// Stages write ops: validated by replaying the transaction with them; answers their
    /// outcomes as the transaction sees them.
    pub(super) fn stage(&self, open: &mut Open, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        if open.ops.len() + ops.len() > MAX_STAGED_OPS {
            return Err(Error::invalid(format!(
                "a transaction stages at most {MAX_STAGED_OPS} writes; commit and start another"
            )));
        }
        // Creates of new ids in a transaction of creates depend on no other staged write (the
        // id is new to the snapshot and to the transaction): checking them alone over a fresh
        // snapshot gives the same answer as replaying everything before them, and a create's
        // check is only that (records::stage_create). Only a client-given id is looked up:
        // without one, no read view is opened.
        if let Some(creates) = creates_of_new_ids(&open.ops, &ops) {
            let probed = creates.iter().any(|p| p.mode == rec::PutMode::Create);
            let view = match probed {
                true => Some((self.store.snapshot()?, self.store.tenant_id(&open.tenant))),
                false => None,
            };
            let out = creates
                .into_iter()
                .map(|p| {
                    let view = view.as_ref().map(|(snap, t)| (snap, *t));
                    rec::stage_create(view, p.clone(), STAGED_VERSION)
                        .map(|r| WriteOutcome::Record(Box::new(r)))
                })
                .collect::<Result<Vec<_>>>()?;
            open.ops.extend(ops);
            return Ok(out);
        }
        let snap = self.store.snapshot()?;
        // What the writes depend on, as committed: remembered once they are accepted.
        let (mut versions, mut digests) = (Vec::new(), HashMap::new());
        if let Some(t) = self.store.tenant_id(&open.tenant) {
            for id in ops.iter().flat_map(written_ids) {
                if !open.seen.contains_key(&id) {
                    if let Some(r) = rec::get_record(&snap, t, &id)? {
                        versions.push((id, r.version));
                    }
                }
            }
            digests = adjacency_digests(open, &snap, t, ops.iter().flat_map(written_adjacency))?;
        }
        let n = ops.len();
        let staged = open.ops.len();
        open.ops.extend(ops);
        let out =
            match store::staged_view(&snap, &open.tenant, open.ops.clone(), |_, _, out| Ok(out)) {
                Ok(out) => out,
                Err(e) => {
                    open.ops.truncate(staged); // refused: not staged, nothing remembered
                    return Err(e);
                }
            };
        for (id, v) in versions {
            open.seen.entry(id).or_insert(v);
        }
        for (scope, d) in digests {
            open.adjacency.entry(scope).or_insert(d);
        }
        let skip = out.len() - n;
        Ok(out.into_iter().skip(skip).collect())
    }
}

/// A create op's record.
fn as_create(op: &WriteOp) -> Option<&PutRecord> {
    match op {
        WriteOp::Put(p) if p.mode.creates() => Some(p),
        _ => None,
    }
}

/// `new` as creates when they are creates only, of ids no earlier op of a transaction of
/// creates used; None otherwise.
fn creates_of_new_ids<'a>(staged: &[WriteOp], new: &'a [WriteOp]) -> Option<Vec<&'a PutRecord>> {
    let mut ids = crate::model::IdSet::default();
    if !staged
        .iter()
        .all(|op| as_create(op).is_some_and(|p| ids.insert(p.id)))
    {
        return None;
    }
    new.iter()
        .map(|op| as_create(op).filter(|p| ids.insert(p.id)))
        .collect()
}

/// A view that notes the id and version of every record of `tenant` read from it by key.
struct NotingReads<'a, R> {
    inner: &'a R,
    prefix: Vec<u8>,
    read: std::cell::RefCell<Vec<(Uuid, u64)>>,
}

impl<'a, R: store::kv::KvRead> NotingReads<'a, R> {
    fn new(inner: &'a R, tenant: u64) -> Self {
        let mut prefix = rec::record_key(tenant, &Uuid::nil());
        prefix.truncate(prefix.len() - 16);
        NotingReads {
            inner,
            prefix,
            read: Default::default(),
        }
    }
}

impl<R: store::kv::KvRead> store::kv::KvRead for NotingReads<'_, R> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.inner.get(key)?;
        let id = key
            .strip_prefix(self.prefix.as_slice())
            .and_then(|id| Uuid::from_slice(id).ok());
        if let (Some(id), Some(value)) = (id, &v) {
            let r = store::codec::decode_record_fields(id, value, Some(&[]))?;
            self.read.borrow_mut().push((id, r.version));
        }
        Ok(v)
    }
    fn scan(&self, start: &[u8], end: &[u8], reverse: bool, visit: store::kv::Visit) -> Result<()> {
        self.inner.scan(start, end, reverse, visit)
    }
}

/// Remembers the committed versions of records a read returned.
fn remember(open: &mut Open, records: &[Record]) {
    note_versions(open, records.iter().map(|r| (r.id, r.version)));
}

/// Remembers committed versions (not those of records the transaction staged) of records
/// read, the first seen of each.
fn note_versions(open: &mut Open, read: impl IntoIterator<Item = (Uuid, u64)>) {
    for (id, version) in read {
        if version != STAGED_VERSION {
            open.seen.entry(id).or_insert(version);
        }
    }
}

/// The commit batch: a version check of everything seen, then the staged writes.
fn commit_ops(open: &mut Open) -> Vec<WriteOp> {
    let mut ops: Vec<WriteOp> = open
        .seen
        .iter()
        .map(|(id, version)| WriteOp::Check {
            id: *id,
            version: *version,
        })
        .collect();
    ops.extend(
        open.adjacency
            .drain()
            .map(|(scope, digest)| WriteOp::CheckAdjacency { scope, digest }),
    );
    ops.append(&mut open.ops);
    ops
}

/// A Protocol v1 staged mutation as the operation it stages.
pub(super) fn staged_operation(m: StagedMutation) -> Result<Operation> {
    Ok(match m {
        StagedMutation::CreateRecord(c) => Operation::Mutate(Mutation::PutRecord(PutRecordOp {
            mode: PutMode::Create,
            label: Some(c.label),
            id: c.id,
            properties: c.properties,
            typed_properties: None,
            vectors: None,
            options: c.options,
        })),
        StagedMutation::UpdateRecord(u) => Operation::Mutate(Mutation::PutRecord(PutRecordOp {
            mode: if u.replace.unwrap_or(false) {
                PutMode::Replace
            } else {
                PutMode::Merge
            },
            label: None,
            id: Some(u.record.id),
            properties: u.properties,
            typed_properties: None,
            vectors: None,
            options: u.options,
        })),
        StagedMutation::RetypeRecord(r) => Operation::Mutate(Mutation::RetypeRecord(r)),
        StagedMutation::DeleteRecord(d) => Operation::Mutate(Mutation::DeleteRecord(d)),
        StagedMutation::CreateRelationship(r) => {
            Operation::Mutate(Mutation::LinkRecordsById(protocol::Command {
                command: LinkByIdCommand {
                    relation_type: r.relation_type,
                    direction: None,
                    source_ids: OneOrMany::Many(vec![r.source.id]),
                    target_ids: OneOrMany::Many(vec![r.target.id]),
                    properties: r.properties,
                },
            }))
        }
        StagedMutation::Ingest(i) => Operation::Ingest(i.ingest),
        StagedMutation::GetRecord(g) => {
            Operation::Query(QueryOp::Record(RecordQuery { id: g.record.id }))
        }
    })
}
