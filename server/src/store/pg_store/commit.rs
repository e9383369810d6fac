//! One commit as one transaction (READ COMMITTED), one statement per op.
//!
//! Every precondition is decided by the statement that writes, on the row it
//! locks, so two servers committing at once keep them all: a replace is an
//! `UPDATE … WHERE version = $v` (a concurrent writer of the row makes it
//! wait, then see the new version and touch nothing: `Stale`), an insert
//! fails on the primary key (`IdTaken`) or the unique index (`Duplicate`), a
//! `Require` takes a key-share lock on the row it needs, so the row cannot be
//! deleted until this commit ends (a concurrent delete of it makes the
//! `Require` wait, then find nothing: `NotFound`).
//!
//! The `DeleteScope`s of a commit run after its other ops, each a statement
//! of its own (under READ COMMITTED each statement sees every commit done by
//! then). So a record put in a scope the same commit deletes is gone, as on the
//! embedded store; and a commit deleting an owner and its scope removes every
//! record a concurrent commit added under a `Require` of that owner: the
//! owner's delete waited for that commit to end.
//!
//! In the same transaction: the search index of the docs written or deleted
//! ([`super::search`]) and the notification of what changed ([`super::notify`]).

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{ClientWrapper, Transaction};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use std::collections::HashMap;

use super::errors::{Fault, sqlstate, unique_violation};
use super::rows::{Columns, kind_code, version_code};
use super::search;
use super::{PKEY, UNIQUE_NAME, notify};
use crate::search::AnalysedSnippet;
use crate::store::{Change, Expect, Kind, Op, Record, StoreError};

/// Sends the notifications of a commit, in its transaction.
const NOTIFY: &str = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p";

/// Runs `ops` as one transaction on `c`. `committing` is set once the
/// `COMMIT` is sent: from then on a lost connection leaves the outcome unknown.
pub(super) async fn run(
    c: &mut ClientWrapper,
    tenant: Uuid,
    ops: &[Op],
    docs: &HashMap<Uuid, Vec<AnalysedSnippet>>,
    heard: fn(&Change) -> bool,
    committing: &AtomicBool,
) -> Result<(), Fault> {
    if pipelinable(ops) {
        return run_pipelined(c, tenant, ops, heard, committing).await;
    }
    let tx = c.transaction().await?;
    let mut changes = Vec::with_capacity(ops.len());
    let mut scopes: Vec<(Kind, Uuid)> = Vec::new();
    for op in ops {
        match op {
            Op::Put { record, expect } => {
                put(&tx, tenant, record, *expect).await?;
                if let Some(doc) = docs.get(&record.id).filter(|_| record.kind == Kind::Doc) {
                    search::put_doc(&tx, tenant, record.id, record.scope, *expect, doc).await?;
                }
                changes.push(Change::Record {
                    tenant,
                    kind: record.kind,
                    id: record.id,
                    scope: record.scope,
                });
            }
            Op::Delete { kind, id, version } => {
                let scope = delete(&tx, tenant, *kind, *id, *version).await?;
                if *kind == Kind::Doc {
                    search::delete_doc(&tx, tenant, *id).await?;
                }
                changes.push(Change::Record { tenant, kind: *kind, id: *id, scope });
            }
            Op::DeleteScope { kind, scope } => {
                if !scopes.contains(&(*kind, *scope)) {
                    scopes.push((*kind, *scope));
                }
            }
            Op::Require { kind, id } => {
                let st = tx
                    .prepare_cached(
                        "SELECT 1 FROM records WHERE tenant = $1 AND kind = $2 AND id = $3 FOR KEY SHARE",
                    )
                    .await?;
                if tx.query_opt(&st, &[&tenant, &kind_code(*kind), id]).await?.is_none() {
                    return Err(StoreError::NotFound { kind: *kind, id: *id }.into());
                }
            }
            Op::Touch { kind, id } => {
                let st = tx
                    .prepare_cached(
                        "UPDATE records SET version = version + 1 \
                         WHERE tenant = $1 AND kind = $2 AND id = $3 RETURNING scope",
                    )
                    .await?;
                let Some(row) = tx.query_opt(&st, &[&tenant, &kind_code(*kind), id]).await? else {
                    return Err(StoreError::NotFound { kind: *kind, id: *id }.into());
                };
                changes.push(Change::Record { tenant, kind: *kind, id: *id, scope: row.get(0) });
            }
        }
    }
    for (kind, scope) in scopes {
        let st =
            tx.prepare_cached("DELETE FROM records WHERE tenant = $1 AND kind = $2 AND scope = $3").await?;
        tx.execute(&st, &[&tenant, &kind_code(kind), &scope]).await?;
        if kind == Kind::Doc {
            search::delete_owner(&tx, tenant, scope).await?;
        }
        changes.push(Change::Scope { tenant, kind, scope });
    }
    let payloads = notify::payloads(tenant, &changes, heard);
    if !payloads.is_empty() {
        let st = tx.prepare_cached(NOTIFY).await?;
        tx.execute(&st, &[&notify::CHANNEL, &payloads]).await?;
    }
    committing.store(true, Ordering::Release);
    tx.commit().await?;
    Ok(())
}

/// A record's row, as the statements that write it bind it ($1 to $12).
struct Row<'a> {
    tenant: Uuid,
    r: &'a Record,
    kind: i16,
    cols: Columns,
}

impl<'a> Row<'a> {
    fn of(tenant: Uuid, r: &'a Record) -> Result<Row<'a>, Fault> {
        Ok(Row { tenant, r, kind: kind_code(r.kind), cols: Columns::of(r)? })
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 12] {
        let (r, cols) = (self.r, &self.cols);
        [
            &self.tenant,
            &self.kind,
            &r.id,
            &r.scope,
            &r.created_at,
            &r.updated_at,
            &cols.unique_name,
            &cols.unique_key,
            &r.refs,
            &cols.metadata,
            &cols.data,
            &cols.metadata_index,
        ]
    }

    /// The error a failed write of this row means.
    fn clash(&self, e: tokio_postgres::Error) -> Fault {
        match unique_violation(&e) {
            Some(PKEY) => StoreError::IdTaken { kind: self.r.kind, id: self.r.id }.into(),
            Some(UNIQUE_NAME) => {
                StoreError::Duplicate { kind: self.r.kind, name: self.r.unique.clone().unwrap_or_default() }
                    .into()
            }
            _ => Fault::Db(e),
        }
    }
}

const INSERT: &str = "INSERT INTO records (tenant, kind, id, scope, created_at, updated_at, version, \
                      unique_name, unique_key, refs, metadata, data, metadata_index) \
                      VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8, $9, $10, $11, $12)";

async fn put(tx: &Transaction<'_>, tenant: Uuid, r: &Record, expect: Expect) -> Result<(), Fault> {
    let row = Row::of(tenant, r)?;
    match expect {
        Expect::Absent => {
            let st = tx.prepare_cached(INSERT).await?;
            tx.execute(&st, &row.params()).await.map_err(|e| row.clash(e))?;
        }
        Expect::Version(v) => {
            let st = tx
                .prepare_cached(
                    "UPDATE records SET scope = $4, created_at = $5, updated_at = $6, version = version + 1, \
                     unique_name = $7, unique_key = $8, refs = $9, metadata = $10, data = $11, \
                     metadata_index = $12 \
                     WHERE tenant = $1 AND kind = $2 AND id = $3 AND version = $13",
                )
                .await?;
            let version = version_code(v);
            let mut with_version = row.params().to_vec();
            with_version.push(&version);
            let n = tx.execute(&st, &with_version).await.map_err(|e| row.clash(e))?;
            if n == 0 {
                return Err(missing_or_stale(tx, tenant, r.kind, r.id).await);
            }
        }
    }
    Ok(())
}

/// Whether every op of a commit says it failed by an error of its own
/// statement, so that all of them can be sent at once ([`run_pipelined`]):
/// inserts (but not of docs, which read the owner's search row) and `Require`s.
fn pipelinable(ops: &[Op]) -> bool {
    ops.iter().all(|op| match op {
        Op::Put { record, expect: Expect::Absent } => record.kind != Kind::Doc,
        Op::Require { .. } => true,
        _ => false,
    })
}

/// A `Require` that fails by itself: a division by zero when the row is missing.
const REQUIRE_OR_FAIL: &str = "SELECT 1 / count(*) FROM ( \
                                 SELECT 1 FROM records WHERE tenant = $1 AND kind = $2 AND id = $3 FOR KEY SHARE \
                               ) AS held";

/// Runs a [`pipelinable`] commit in one round trip: `BEGIN`, its statements,
/// the notification and `COMMIT` sent together. A statement that fails
/// aborts the transaction, so the statements after it fail too and the
/// `COMMIT` rolls back; the first failure is the commit's. `committing` is
/// set before anything is sent, since the `COMMIT` is on its way from then on.
async fn run_pipelined(
    c: &mut ClientWrapper,
    tenant: Uuid,
    ops: &[Op],
    heard: fn(&Change) -> bool,
    committing: &AtomicBool,
) -> Result<(), Fault> {
    let insert = c.prepare_cached(INSERT).await?;
    let require = c.prepare_cached(REQUIRE_OR_FAIL).await?;
    let notify_st = c.prepare_cached(NOTIFY).await?;
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    for op in ops {
        if let Op::Put { record, .. } = op {
            rows.push(Row::of(tenant, record)?);
            changes.push(Change::Record { tenant, kind: record.kind, id: record.id, scope: record.scope });
        }
    }
    let payloads = notify::payloads(tenant, &changes, heard);
    let codes: Vec<i16> = ops
        .iter()
        .map(|op| match op {
            Op::Require { kind, .. } => kind_code(*kind),
            _ => 0,
        })
        .collect();
    committing.store(true, Ordering::Release);
    let client: &ClientWrapper = c;
    let mut rows_iter = rows.iter();
    let (insert, require) = (&insert, &require);
    let statements = ops.iter().zip(&codes).map(|(op, code)| {
        let step: futures::future::BoxFuture<'_, Result<(), Fault>> = match op {
            Op::Require { kind, id } => Box::pin(async move {
                client.query_one(require, &[&tenant, code, id]).await.map(drop).map_err(|e| {
                    if sqlstate(&e) == Some(&SqlState::DIVISION_BY_ZERO) {
                        StoreError::NotFound { kind: *kind, id: *id }.into()
                    } else {
                        Fault::Db(e)
                    }
                })
            }),
            _ => {
                let row = rows_iter.next().expect("a row per put");
                Box::pin(async move {
                    client.execute(insert, &row.params()).await.map(drop).map_err(|e| row.clash(e))
                })
            }
        };
        step
    });
    let mut all: Vec<futures::future::BoxFuture<'_, Result<(), Fault>>> =
        vec![Box::pin(async { client.batch_execute("BEGIN").await.map_err(Fault::Db) })];
    all.extend(statements);
    if !payloads.is_empty() {
        all.push(Box::pin(async {
            client.execute(&notify_st, &[&notify::CHANNEL, &payloads]).await.map(drop).map_err(Fault::Db)
        }));
    }
    all.push(Box::pin(async { client.batch_execute("COMMIT").await.map_err(Fault::Db) }));
    // Polled in order, so sent in order; each answers in turn.
    let outcomes = futures::future::join_all(all).await;
    outcomes.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
/// Deletes a record (of this version, when given) and answers its scope.
async fn delete(
    tx: &Transaction<'_>,
    tenant: Uuid,
    kind: Kind,
    id: Uuid,
    version: Option<u64>,
) -> Result<Uuid, Fault> {
    let st = tx
        .prepare_cached(
            "DELETE FROM records WHERE tenant = $1 AND kind = $2 AND id = $3 \
             AND ($4::bigint IS NULL OR version = $4) RETURNING scope",
        )
        .await?;
    let version = version.map(version_code);
    match tx.query_opt(&st, &[&tenant, &kind_code(kind), &id, &version]).await? {
        Some(row) => Ok(row.get(0)),
        None if version.is_some() => Err(missing_or_stale(tx, tenant, kind, id).await),
        None => Err(StoreError::NotFound { kind, id }.into()),
    }
}

/// Why a write of a version found no row: the record is gone, or at another version.
async fn missing_or_stale(tx: &Transaction<'_>, tenant: Uuid, kind: Kind, id: Uuid) -> Fault {
    let exists = async {
        let st =
            tx.prepare_cached("SELECT 1 FROM records WHERE tenant = $1 AND kind = $2 AND id = $3").await?;
        tx.query_opt(&st, &[&tenant, &kind_code(kind), &id]).await
    };
    match exists.await {
        Ok(Some(_)) => StoreError::Stale.into(),
        Ok(None) => StoreError::NotFound { kind, id }.into(),
        Err(e) => Fault::Db(e),
    }
}
