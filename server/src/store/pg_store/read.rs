//! The store's reads, each one statement on a pooled connection, prepared
//! once per connection: a record by id, a page of a scope (in either order,
//! from the scope's time index), the records referring to an id, the holder
//! of a unique name, and every record of a kind.

use std::sync::LazyLock;

use deadpool_postgres::ClientWrapper;
use uuid::Uuid;

use super::errors::Fault;
use super::rows::{self, COLUMNS, SIZE, count, kind_code};
use crate::metadata::metadata_matches;
use crate::store::{Direction, Kind, ListQuery, Metadata, Record, SortBy};

static GET: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM records WHERE tenant = $1 AND kind = $2 AND id = $3"));

/// The statements of an unfiltered page, by order (see [`order`]) and
/// then by variant: all of it, bounded by its size, after a cursor, both.
/// Parameters: tenant, kind, scope, limit, offset, then the cursor's time
/// and id (when after one), then the bound.
static PAGES: LazyLock<[[String; 4]; 4]> = LazyLock::new(|| {
    [
        (SortBy::CreatedAt, Direction::Asc),
        (SortBy::CreatedAt, Direction::Desc),
        (SortBy::UpdatedAt, Direction::Asc),
        (SortBy::UpdatedAt, Direction::Desc),
    ]
    .map(|(sort_by, direction)| {
        let (column, order, after) = order(sort_by, direction);
        [(false, false), (true, false), (false, true), (true, true)].map(|(sized, cursor)| {
            let mut select = "tenant = $1 AND kind = $2 AND scope = $3".to_owned();
            if cursor {
                select.push_str(&format!(" AND ({column}, id) {after} ($6, $7)"));
            }
            if !sized {
                return format!(
                    "SELECT {COLUMNS} FROM records WHERE {select} ORDER BY {order} LIMIT $4 OFFSET $5"
                );
            }
            let bound = if cursor { "$8" } else { "$6" };
            format!(
                "SELECT {COLUMNS} FROM ( \
                   SELECT *, sum(size) OVER (ORDER BY {order} ROWS UNBOUNDED PRECEDING) - size AS before \
                   FROM (SELECT {COLUMNS}, {SIZE} AS size FROM records WHERE {select} \
                         ORDER BY {order} LIMIT $4 OFFSET $5) AS page \
                 ) AS sized \
                 WHERE before = 0 OR before + size <= {bound} ORDER BY {order}"
            )
        })
    })
});

pub(super) async fn get(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    id: Uuid,
) -> Result<Option<Record>, Fault> {
    let st = c.prepare_cached(&GET).await?;
    let row = c.query_opt(&st, &[&tenant, &kind_code(kind), &id]).await?;
    Ok(row.map(|r| rows::record(kind, &r, 0)).transpose()?)
}

/// The time column of a page's order, its `ORDER BY`, and the comparison
/// that continues after a row.
fn order(sort_by: SortBy, direction: Direction) -> (&'static str, String, &'static str) {
    let column = match sort_by {
        SortBy::CreatedAt => "created_at",
        SortBy::UpdatedAt => "updated_at",
    };
    let (dir, after) = match direction {
        Direction::Asc => ("ASC", ">"),
        Direction::Desc => ("DESC", "<"),
    };
    (column, format!("{column} {dir}, id {dir}"), after)
}

pub(super) async fn list(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    scope: Uuid,
    q: &ListQuery,
) -> Result<Vec<Record>, Fault> {
    if q.limit == 0 {
        return Ok(Vec::new());
    }
    match q.metadata_filter.as_ref().filter(|f| !f.is_empty()) {
        None => page(c, tenant, kind, scope, q).await,
        Some(filter) => filtered(c, tenant, kind, scope, q, filter).await,
    }
}

/// An unfiltered page: `LIMIT`/`OFFSET` over the scope's time index, and,
/// when bounded, only the rows whose running size stays within `max_bytes`
/// (counted in the database, so rows past the bound are never sent).
async fn page(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    scope: Uuid,
    q: &ListQuery,
) -> Result<Vec<Record>, Fault> {
    let sqls =
        &PAGES[2 * usize::from(q.sort_by == SortBy::UpdatedAt) + usize::from(q.direction == Direction::Desc)];
    let (limit, offset) = (count(q.limit), count(q.offset));
    let kind_code = kind_code(kind);
    let max_bytes = q.max_bytes.map(count);
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        vec![&tenant, &kind_code, &scope, &limit, &offset];
    if let Some((at, id)) = &q.after {
        params.push(at);
        params.push(id);
    }
    if let Some(max_bytes) = &max_bytes {
        params.push(max_bytes);
    }
    let variant = usize::from(max_bytes.is_some()) + 2 * usize::from(q.after.is_some());
    let st = c.prepare_cached(&sqls[variant]).await?;
    let rows = c.query(&st, &params).await?;
    Ok(rows.iter().map(|r| rows::record(kind, r, 0)).collect::<Result<_, _>>()?)
}

/// A filtered page: the scope read in order, in chunks (each continuing after
/// the last row of the one before), narrowed in the database by `@>` on
/// `metadata_index` and decided here by the one definition of a match.
async fn filtered(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    scope: Uuid,
    q: &ListQuery,
    filter: &Metadata,
) -> Result<Vec<Record>, Fault> {
    let (column, order, after) = order(q.sort_by, q.direction);
    let at = match q.sort_by {
        SortBy::CreatedAt => 2,
        SortBy::UpdatedAt => 3,
    };
    let select = format!(
        "SELECT {COLUMNS}, {SIZE} FROM records WHERE tenant = $1 AND kind = $2 AND scope = $3 \
         AND (metadata_index @> $4 OR metadata_index IS NULL)"
    );
    let first = c.prepare_cached(&format!("{select} ORDER BY {order} LIMIT $5")).await?;
    let next = c
        .prepare_cached(&format!("{select} AND ({column}, id) {after} ($6, $7) ORDER BY {order} LIMIT $5"))
        .await?;
    // A filter jsonb cannot hold narrows nothing (`{}` is in every object).
    let narrowing = tokio_postgres::types::Json(
        rows::index_form(filter).unwrap_or_else(|| serde_json::Value::Object(Metadata::new())),
    );
    let chunk = count(q.offset.saturating_add(q.limit).clamp(16, 256));
    let kind_code = kind_code(kind);
    let mut out = Vec::with_capacity(q.limit.min(256));
    let (mut skipped, mut bytes) = (0usize, 0usize);
    let mut cursor: Option<(chrono::DateTime<chrono::Utc>, Uuid)> = q.after;
    loop {
        let rows = match cursor {
            None => c.query(&first, &[&tenant, &kind_code, &scope, &narrowing, &chunk]).await?,
            Some((t, id)) => {
                c.query(&next, &[&tenant, &kind_code, &scope, &narrowing, &chunk, &t, &id]).await?
            }
        };
        for row in &rows {
            let metadata: Option<&str> = row.get(7);
            let metadata: Option<Metadata> = match metadata {
                Some(m) => serde_json::from_str(m)
                    .map_err(|e| crate::store::StoreError::Io(format!("corrupt record (metadata): {e}")))?,
                None => None,
            };
            if !metadata_matches(filter, metadata.as_ref()) {
                continue;
            }
            if skipped < q.offset {
                skipped += 1;
                continue;
            }
            let size: i32 = row.get(9);
            bytes += usize::try_from(size).unwrap_or(0);
            if q.max_bytes.is_some_and(|max| bytes > max) && !out.is_empty() {
                return Ok(out);
            }
            out.push(rows::record(kind, row, 0)?);
            if out.len() >= q.limit {
                return Ok(out);
            }
        }
        if (rows.len() as i64) < chunk {
            return Ok(out);
        }
        let last = rows.last().expect("a full chunk has a last row");
        cursor = Some((last.get(at), last.get(0)));
    }
}

pub(super) async fn referencing(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    target: Uuid,
) -> Result<Vec<Uuid>, Fault> {
    let st = c
        .prepare_cached(
            "SELECT id FROM records WHERE tenant = $1 AND kind = $2 AND refs @> ARRAY[$3::uuid] ORDER BY id",
        )
        .await?;
    let rows = c.query(&st, &[&tenant, &kind_code(kind), &target]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub(super) async fn lookup_unique(
    c: &ClientWrapper,
    tenant: Uuid,
    kind: Kind,
    scope: Uuid,
    name: &str,
) -> Result<Option<Uuid>, Fault> {
    let st = c
        .prepare_cached(
            "SELECT id FROM records WHERE tenant = $1 AND kind = $2 AND scope = $3 AND unique_key = $4",
        )
        .await?;
    let row = c.query_opt(&st, &[&tenant, &kind_code(kind), &scope, &rows::unique_key(name)]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// How many records one statement of [`scan_kind_after`] reads.
pub(super) const SCAN_CHUNK: i64 = 1000;

/// The next records of a kind across tenants, in (tenant, id) order, after
/// `(tenant, id)` when given: a scan in chunks, each a short statement (a
/// whole table in one would outlast any statement timeout).
pub(super) async fn scan_kind_after(
    c: &ClientWrapper,
    kind: Kind,
    after: Option<(Uuid, Uuid)>,
) -> Result<Vec<(Uuid, Record)>, Fault> {
    let kind_code = kind_code(kind);
    let rows = match after {
        None => {
            let st = c
                .prepare_cached(&format!(
                    "SELECT tenant, {COLUMNS} FROM records WHERE kind = $1 ORDER BY tenant, kind, id LIMIT $2"
                ))
                .await?;
            c.query(&st, &[&kind_code, &SCAN_CHUNK]).await?
        }
        // The primary key's order, (tenant, kind, id), is (tenant, id) within one kind.
        Some((tenant, id)) => {
            let st = c
                .prepare_cached(&format!(
                    "SELECT tenant, {COLUMNS} FROM records WHERE kind = $1 AND (tenant, kind, id) > ($3, $1, $4) \
                     ORDER BY tenant, kind, id LIMIT $2"
                ))
                .await?;
            c.query(&st, &[&kind_code, &SCAN_CHUNK, &tenant, &id]).await?
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push((r.get(0), rows::record(kind, r, 1)?));
    }
    Ok(out)
}
