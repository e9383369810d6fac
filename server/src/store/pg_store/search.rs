//! Search in the database: documents are indexed by the transactions that
//! write them, and ranked by PostgreSQL, with the embedded store's analysis
//! and formulas (so both backends answer a query alike; the conformance tests
//! compare them).
//!
//! * **Writing** ([`put_doc`], [`delete_doc`], [`delete_owner`], called by
//!   [`super::commit`] in the commit's transaction): one `search_snippets` row
//!   per snippet — its distinct terms as a `tsvector` (for the GIN index), the
//!   same terms with their frequencies (for BM25), its length, its vector
//!   scaled to unit length — and per owner a `search_owners` row with BM25's
//!   corpus statistics and the vectors' dimension. The text analysis happens
//!   before the transaction begins ([`prepare`]).
//! * **Text** ([`text_side`]): one statement. The GIN index finds the
//!   owner's snippets holding any query term; BM25 (k1, b and idf as in
//!   [`crate::search`]) is computed for those only, ordered and cut in the
//!   database.
//! * **Vectors**: cosine is the inner product of unit vectors, computed by
//!   pgvector (`<#>`) when the database has the extension, else here over the
//!   owner's rows that have a vector (exact either way).
//! * **Hybrid**: both sides, unlimited, fused here by [`search::fuse_hits`].
//! * **Filters** narrow in the database (`@>` on the record's
//!   `metadata_index`) and are decided here by the one definition of a match.

use std::collections::HashMap;

use deadpool_postgres::{ClientWrapper, Transaction};
use serde::Deserialize;
use serde_json::Value;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::errors::Fault;
use super::rows::{self, kind_code};
use crate::metadata::metadata_matches;
use crate::search::{self, AnalysedSnippet, DocEntry, Hit, Mode, OwnerKey, Query, SearchError};
use crate::store::{DocLayout, Expect, Kind, Metadata, Op, StoreError, StoreResult};

/// Longer terms are indexed by a digest: a tsvector lexeme holds at most
/// 2,046 bytes. The digest starts with `~`, which no term does (the analysis
/// keeps only the letters, digits and joiners of words).
const LONGEST_LEXEME: usize = 256;

/// A term as the database holds it.
fn lexeme(term: &str) -> String {
    if term.len() <= LONGEST_LEXEME {
        return term.to_string();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(term.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("~{hex}")
}

/// A term as a `tsquery` literal (quoted, so any character is the term's).
fn tsquery_literal(term: &str) -> String {
    format!("'{}'", lexeme(term).replace('\\', "\\\\").replace('\'', "''"))
}

/// A doc's snippets and their embeddings, if given.
type DocFields = (Vec<String>, Option<Vec<Vec<f32>>>);

/// The snippets and embeddings of a doc record's data, laid out as `layout`
/// says; a record without them (the store's own tests write such), or with
/// either unreadable, has nothing to search.
fn doc_fields(data: &Value, layout: &DocLayout) -> DocFields {
    let read = || -> Option<DocFields> {
        let snippets = match data.get(layout.snippets) {
            Some(v) => Vec::<String>::deserialize(v).ok()?,
            None => Vec::new(),
        };
        let embeddings = match data.get(layout.embeddings) {
            Some(v) => Option::<Vec<Vec<f32>>>::deserialize(v).ok()?,
            None => None,
        };
        Some((snippets, embeddings))
    };
    read().unwrap_or_default()
}

/// The docs written by `ops`, by id, analysed (off the async workers: it is
/// the costly part of a doc's write).
pub(super) async fn prepare(
    ops: &[Op],
    layout: &DocLayout,
) -> StoreResult<HashMap<Uuid, Vec<AnalysedSnippet>>> {
    let mut entries = Vec::new();
    for op in ops {
        if let Op::Put { record, .. } = op
            && record.kind == Kind::Doc
        {
            let (snippets, embeddings) = doc_fields(&record.data, layout);
            entries.push(DocEntry { id: record.id, snippets, embeddings, metadata: None });
        }
    }
    if entries.is_empty() {
        return Ok(HashMap::new());
    }
    tokio::task::spawn_blocking(move || entries.into_iter().map(|e| (e.id, search::analyse(e))).collect())
        .await
        .map_err(|e| StoreError::Io(format!("indexing docs failed: {e}")))
}

/// Indexes a doc put by a commit (replacing what a replaced version had).
pub(super) async fn put_doc(
    tx: &Transaction<'_>,
    tenant: Uuid,
    doc: Uuid,
    owner: Uuid,
    expect: Expect,
    snippets: &[AnalysedSnippet],
) -> Result<(), Fault> {
    if matches!(expect, Expect::Version(_)) {
        delete_doc(tx, tenant, doc).await?;
    }
    // Creates the owner's row, or locks it: the owner's statistics and
    // dimension are changed by one transaction at a time.
    let st = tx
        .prepare_cached(
            "INSERT INTO search_owners AS o (tenant, owner, snippets, total_len, vectors, dim) \
             VALUES ($1, $2, 0, 0, 0, NULL) \
             ON CONFLICT (tenant, owner) DO UPDATE SET snippets = o.snippets \
             RETURNING o.vectors, o.dim",
        )
        .await?;
    let row = tx.query_one(&st, &[&tenant, &owner]).await?;
    let (vectors, dim): (i64, Option<i32>) = (row.get(0), row.get(1));
    let mut dim = if vectors > 0 { dim.and_then(|d| usize::try_from(d).ok()) } else { None };

    let n = snippets.len();
    let (mut idx, mut lens, mut starts, mut counts, mut vstarts) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut terms, mut tfs, mut floats) = (Vec::new(), Vec::new(), Vec::<f32>::new());
    let (mut total_len, mut added_vectors) = (0i64, 0i64);
    for (i, s) in snippets.iter().enumerate() {
        idx.push(to_i32(i));
        lens.push(to_i32(s.len as usize));
        total_len += i64::from(s.len);
        starts.push(to_i32(terms.len() + 1));
        counts.push(to_i32(s.terms.len()));
        terms.extend(s.terms.iter().map(|t| lexeme(t)));
        tfs.extend(s.tfs.iter().map(|&tf| to_i32(tf as usize)));
        // Lenient, as the embedded index: a vector of another dimension than
        // the owner's is left out (the snippet stays text-searchable).
        let vector = s.vector.as_deref().filter(|v| *dim.get_or_insert(v.len()) == v.len());
        match vector {
            Some(v) => {
                vstarts.push(Some(to_i32(floats.len() + 1)));
                floats.extend_from_slice(v);
                added_vectors += 1;
            }
            None => vstarts.push(None),
        }
    }
    let dim_len = dim.map(to_i32);
    let st = tx
        .prepare_cached(
            "INSERT INTO search_snippets (tenant, doc, idx, owner, len, terms, tfs, tsv, embedding) \
             SELECT $1, $2, s.idx, $3, s.len, \
                    ($4::text[])[s.start : s.start + s.n - 1], ($5::int[])[s.start : s.start + s.n - 1], \
                    array_to_tsvector(($4::text[])[s.start : s.start + s.n - 1]), \
                    CASE WHEN s.vstart IS NULL THEN NULL \
                         ELSE ($6::real[])[s.vstart : s.vstart + $7::int - 1] END \
             FROM unnest($8::int[], $9::int[], $10::int[], $11::int[], $12::int[]) AS s(idx, len, start, n, vstart)",
        )
        .await?;
    tx.execute(
        &st,
        &[&tenant, &doc, &owner, &terms, &tfs, &floats, &dim_len, &idx, &lens, &starts, &counts, &vstarts],
    )
    .await?;
    let st = tx
        .prepare_cached(
            "UPDATE search_owners SET snippets = snippets + $3, total_len = total_len + $4, \
             vectors = vectors + $5, dim = CASE WHEN vectors + $5 > 0 THEN $6::int END \
             WHERE tenant = $1 AND owner = $2",
        )
        .await?;
    tx.execute(&st, &[&tenant, &owner, &(n as i64), &total_len, &added_vectors, &dim_len]).await?;
    // Document frequencies, in term order (so that concurrent writers lock
    // the rows they share in one order).
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for term in &terms {
        *counts.entry(term.as_str()).or_default() += 1;
    }
    let mut counts: Vec<(&str, i64)> = counts.into_iter().collect();
    counts.sort_unstable();
    let (names, dfs): (Vec<&str>, Vec<i64>) = counts.into_iter().unzip();
    let st = tx
        .prepare_cached(
            "INSERT INTO search_terms AS t (tenant, owner, term, df) \
             SELECT $1, $2, u.term, u.df FROM unnest($3::text[], $4::bigint[]) AS u(term, df) ORDER BY u.term \
             ON CONFLICT (tenant, owner, term) DO UPDATE SET df = t.df + excluded.df",
        )
        .await?;
    tx.execute(&st, &[&tenant, &owner, &names, &dfs]).await?;
    Ok(())
}

/// Unindexes a doc deleted by a commit.
pub(super) async fn delete_doc(tx: &Transaction<'_>, tenant: Uuid, doc: Uuid) -> Result<(), Fault> {
    // The owner's row first, then its terms': the order of a doc's put.
    let st = tx
        .prepare_cached(
            "WITH gone AS ( \
               DELETE FROM search_snippets WHERE tenant = $1 AND doc = $2 \
               RETURNING owner, len, terms, embedding IS NOT NULL AS has_vector \
             ), sums AS ( \
               SELECT owner, count(*) AS n, sum(len) AS len, count(*) FILTER (WHERE has_vector) AS v \
               FROM gone GROUP BY owner \
             ), owners AS ( \
               UPDATE search_owners o SET snippets = o.snippets - sums.n, total_len = o.total_len - sums.len, \
                 vectors = o.vectors - sums.v, dim = CASE WHEN o.vectors - sums.v > 0 THEN o.dim END \
               FROM sums WHERE o.tenant = $1 AND o.owner = sums.owner \
               RETURNING o.owner \
             ) \
             SELECT owners.owner, t.term, count(*) AS n \
             FROM owners, gone CROSS JOIN LATERAL unnest(gone.terms) AS t(term) \
             GROUP BY owners.owner, t.term ORDER BY t.term",
        )
        .await?;
    let rows = tx.query(&st, &[&tenant, &doc]).await?;
    let Some(owner) = rows.first().map(|r| r.get::<_, Uuid>(0)) else {
        return Ok(());
    };
    let names: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
    let counts: Vec<i64> = rows.iter().map(|r| r.get(2)).collect();
    let st = tx
        .prepare_cached(
            "WITH lower AS ( \
               UPDATE search_terms t SET df = t.df - u.n \
               FROM unnest($3::text[], $4::bigint[]) AS u(term, n) \
               WHERE t.tenant = $1 AND t.owner = $2 AND t.term = u.term \
               RETURNING t.term, t.df \
             ) \
             DELETE FROM search_terms t USING lower \
             WHERE t.tenant = $1 AND t.owner = $2 AND t.term = lower.term AND lower.df <= 0",
        )
        .await?;
    tx.execute(&st, &[&tenant, &owner, &names, &counts]).await?;
    Ok(())
}

/// Unindexes every doc of an owner (its docs' scope is deleted by a commit).
pub(super) async fn delete_owner(tx: &Transaction<'_>, tenant: Uuid, owner: Uuid) -> Result<(), Fault> {
    let st = tx.prepare_cached("DELETE FROM search_snippets WHERE tenant = $1 AND owner = $2").await?;
    tx.execute(&st, &[&tenant, &owner]).await?;
    let st = tx.prepare_cached("DELETE FROM search_owners WHERE tenant = $1 AND owner = $2").await?;
    tx.execute(&st, &[&tenant, &owner]).await?;
    let st = tx.prepare_cached("DELETE FROM search_terms WHERE tenant = $1 AND owner = $2").await?;
    tx.execute(&st, &[&tenant, &owner]).await?;
    Ok(())
}

/// Indexes, in transactions of at most `BATCH` docs, the docs written before
/// the search tables existed (listed in `search_backfill` by the migration
/// that made them). Several servers starting at once share the work.
pub(super) async fn backfill(client: &mut ClientWrapper, layout: &DocLayout) -> Result<u64, Fault> {
    const BATCH: i64 = 50;
    let mut done = 0;
    loop {
        let tx = client.transaction().await?;
        let batch = tx
            .query(
                "SELECT tenant, doc FROM search_backfill ORDER BY tenant, doc LIMIT $1 FOR UPDATE SKIP LOCKED",
                &[&BATCH],
            )
            .await?;
        if batch.is_empty() {
            return Ok(done);
        }
        for row in &batch {
            let (tenant, doc): (Uuid, Uuid) = (row.get(0), row.get(1));
            // Locked, so that a concurrent delete of the doc waits for this index.
            let rec = tx
                .query_opt(
                    "SELECT scope, data FROM records WHERE tenant = $1 AND kind = $2 AND id = $3 FOR KEY SHARE",
                    &[&tenant, &kind_code(Kind::Doc), &doc],
                )
                .await?;
            if let Some(rec) = rec {
                let (owner, data): (Uuid, &str) = (rec.get(0), rec.get(1));
                let data: Value = serde_json::from_str(data)
                    .map_err(|e| StoreError::Io(format!("corrupt record (data): {e}")))?;
                let record = crate::store::Record::new(Kind::Doc, doc, owner, data);
                let mut prepared = prepare(&[Op::Put { record, expect: Expect::Absent }], layout).await?;
                if let Some(p) = prepared.remove(&doc) {
                    put_doc(&tx, tenant, doc, owner, Expect::Version(0), &p).await?;
                }
            }
            tx.execute("DELETE FROM search_backfill WHERE tenant = $1 AND doc = $2", &[&tenant, &doc])
                .await?;
            done += 1;
        }
        tx.commit().await?;
    }
}

/// Whether the database has pgvector, creating the extension when it is
/// available and this user may (else vectors are ranked in the server).
pub(super) async fn pgvector(client: &ClientWrapper) -> Option<String> {
    let available = client
        .query_opt("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'", &[])
        .await
        .ok()
        .flatten()
        .is_some();
    if available {
        // Several servers may try at once, or the user may lack the right: either way, check below.
        let _ = client.batch_execute("CREATE EXTENSION IF NOT EXISTS vector").await;
    }
    client
        .query_opt("SELECT extversion FROM pg_extension WHERE extname = 'vector'", &[])
        .await
        .ok()
        .flatten()
        .map(|row| row.get(0))
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How many snippets of the owner's documents a search ranks.
pub(super) async fn owner_snippets(c: &ClientWrapper, owner: OwnerKey) -> Result<usize, Fault> {
    let st = c.prepare_cached("SELECT snippets FROM search_owners WHERE tenant = $1 AND owner = $2").await?;
    let n: Option<i64> = c.query_opt(&st, &[&owner.tenant, &owner.owner]).await?.map(|r| r.get(0));
    Ok(n.map_or(0, |n| usize::try_from(n).unwrap_or(0)))
}

/// The dimension of the owner's vectors; `None` while it has none.
pub(super) async fn owner_dimension(c: &ClientWrapper, owner: OwnerKey) -> Result<Option<usize>, Fault> {
    let st = c.prepare_cached("SELECT dim FROM search_owners WHERE tenant = $1 AND owner = $2").await?;
    let dim: Option<i32> = c.query_opt(&st, &[&owner.tenant, &owner.owner]).await?.and_then(|r| r.get(0));
    Ok(dim.and_then(|d| usize::try_from(d).ok()))
}

/// A filter, for the database (which narrows) and for the exact decision here.
struct Filter<'q> {
    exact: Option<&'q Metadata>,
    narrowing: Option<Json<Value>>,
}

impl<'q> Filter<'q> {
    fn of(q: &'q Query) -> Self {
        let exact = q.metadata_filter.as_ref().filter(|f| !f.is_empty());
        // A filter jsonb cannot hold narrows nothing (`{}` is in every object).
        let narrowing =
            exact.map(|f| Json(rows::index_form(f).unwrap_or_else(|| Value::Object(Metadata::new()))));
        Filter { exact, narrowing }
    }

    /// Whether a candidate whose record's metadata is this JSON text matches.
    fn passes(&self, metadata: Option<&str>) -> Result<bool, Fault> {
        let Some(filter) = self.exact else {
            return Ok(true);
        };
        let metadata: Option<Metadata> = match metadata {
            Some(m) => serde_json::from_str(m)
                .map_err(|e| StoreError::Io(format!("corrupt record (metadata): {e}")))?,
            None => None,
        };
        Ok(metadata_matches(filter, metadata.as_ref()))
    }
}

/// The part of the candidates' statements that joins the record's metadata
/// (`r`) when there is a filter (`f`: the narrowing filter or NULL; `doc`:
/// the candidate's doc column; $1 is the tenant).
fn metadata_join(f: &str, doc: &str) -> String {
    format!(
        "LEFT JOIN records r ON {f}::jsonb IS NOT NULL AND r.tenant = $1 AND r.kind = {} AND r.id = {doc}",
        kind_code(Kind::Doc)
    )
}

fn metadata_narrowing(f: &str) -> String {
    format!("({f}::jsonb IS NULL OR r.metadata_index @> {f}::jsonb OR r.metadata_index IS NULL)")
}

/// A candidate: doc, snippet index, raw score.
type Scored = (Uuid, usize, f64);

/// Runs a candidates' statement (its last parameter the limit, or NULL for
/// all) and keeps the rows the filter matches. A cut page that lost rows to
/// the filter is read again without the cut, so the best `limit` are exact.
async fn candidates(
    c: &ClientWrapper,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    filter: &Filter<'_>,
    limit: Option<usize>,
    score: impl Fn(&tokio_postgres::Row) -> f64,
) -> Result<Vec<Scored>, Fault> {
    let st = c.prepare_cached(sql).await?;
    let mut cut = limit.map(|l| l as i64);
    loop {
        let mut all = params.to_vec();
        all.push(&cut);
        let rows = c.query(&st, &all).await?;
        let mut out = Vec::with_capacity(rows.len());
        let mut rejected = false;
        for row in &rows {
            if filter.passes(row.get(3))? {
                let idx: i32 = row.get(1);
                out.push((row.get(0), usize::try_from(idx).unwrap_or(0), score(row)));
            } else {
                rejected = true;
            }
        }
        match cut {
            Some(n) if rejected && rows.len() as i64 >= n => cut = None,
            _ => return Ok(out),
        }
    }
}

/// Queries with at most this many distinct terms are scored by a statement
/// written out for their number of terms (a column per term); longer ones by
/// one statement for all, with the terms in arrays (slower per snippet).
const UNROLLED_TERMS: usize = 16;

/// A top-k text search first scores only the snippets holding its rarest
/// terms, as long as these hold at most this many snippets in all (see
/// [`text_side`]). The unit tests' corpora are small: there it is small too,
/// so that they go both ways.
const PRUNED_CANDIDATES: i64 = if cfg!(test) { 12 } else { 5_000 };

/// The statement scoring the snippets that hold any of a set of terms with
/// the BM25 of all `k` terms of a query. Parameters: $1 tenant, $2 owner, $3
/// the query's terms (sorted), $4 the tsquery of the set, $5 the terms' idf,
/// $6 k1, $7 b, $8 the owner's average snippet length, $9 the narrowing
/// filter (or NULL), $10 the limit (or NULL). The sum is in term order, as
/// the embedded store's index sums it.
fn text_sql(k: usize) -> String {
    let tf = |i: &str| format!("s.tfs[array_position(s.terms, ($3::text[])[{i}])]::float8");
    let term = |i: &str, tf: &str| {
        format!("coalesce(($5::float8[])[{i}] * ({tf} * ($6::float8 + 1)) / ({tf} + nm.norm), 0)")
    };
    let (tfs, sum) = if k <= UNROLLED_TERMS {
        let tfs = (1..=k).map(|i| format!("{} AS tf{i}", tf(&i.to_string()))).collect::<Vec<_>>().join(", ");
        let sum = (1..=k).map(|i| term(&i.to_string(), &format!("f.tf{i}"))).collect::<Vec<_>>().join(" + ");
        (tfs, sum)
    } else {
        let tfs = format!(
            "ARRAY(SELECT {} FROM generate_series(1, cardinality($3::text[])) AS i ORDER BY i) AS tf",
            tf("i")
        );
        let sum = format!(
            "(SELECT sum({}) FROM generate_series(1, cardinality($3::text[])) AS i)",
            term("i", "f.tf[i]")
        );
        (tfs, sum)
    };
    format!(
        "SELECT s.doc, s.idx, sc.score, r.metadata \
         FROM search_snippets s \
         CROSS JOIN LATERAL (SELECT $6::float8 * (1 - $7::float8 + $7::float8 * s.len / $8::float8) AS norm) nm \
         CROSS JOIN LATERAL (SELECT {tfs}) f \
         CROSS JOIN LATERAL (SELECT {sum} AS score) sc \
         {join} \
         WHERE s.tenant = $1 AND s.owner = $2 AND s.tsv @@ $4::text::tsquery AND {narrow} \
         ORDER BY sc.score DESC, s.doc, s.idx \
         LIMIT $10",
        join = metadata_join("$9", "s.doc"),
        narrow = metadata_narrowing("$9"),
    )
}

/// The owner's snippets holding a query term, with their BM25 score: the
/// best `limit` (or all).
///
/// BM25's statistics come from `search_owners` and `search_terms`. A top-k
/// search whose rarest terms are held by few snippets scores those first
/// (MaxScore): a snippet holding none of them scores less than the sum of
/// the other terms' `idf * (k1 + 1)`, so when the k-th best of the first
/// round beats that sum, the first round is the answer; else every snippet
/// holding any term is scored. Either way the answer is exact.
async fn text_side(
    c: &ClientWrapper,
    owner: OwnerKey,
    text: &str,
    filter: &Filter<'_>,
    limit: Option<usize>,
) -> Result<Vec<Scored>, Fault> {
    let terms = search::query_terms(text);
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let lexemes: Vec<String> = terms.iter().map(|t| lexeme(t)).collect();
    let st = c
        .prepare_cached(
            "SELECT o.snippets, o.total_len, ARRAY( \
               SELECT coalesce(t.df, 0) FROM unnest($3::text[]) WITH ORDINALITY AS u(term, i) \
               LEFT JOIN search_terms t ON t.tenant = $1 AND t.owner = $2 AND t.term = u.term ORDER BY u.i \
             ) FROM search_owners o WHERE o.tenant = $1 AND o.owner = $2 AND o.snippets > 0",
        )
        .await?;
    let Some(row) = c.query_opt(&st, &[&owner.tenant, &owner.owner, &lexemes]).await? else {
        return Ok(Vec::new());
    };
    let (snippets, total_len, dfs): (i64, i64, Vec<i64>) = (row.get(0), row.get(1), row.get(2));
    let n = usize::try_from(snippets).unwrap_or(0);
    let idfs: Vec<f64> = dfs
        .iter()
        .map(|&df| if df > 0 { search::bm25_idf(n, u32::try_from(df).unwrap_or(u32::MAX)) } else { 0.0 })
        .collect();
    let avgdl = total_len as f64 / snippets as f64;
    // The terms some snippet holds, rarest first.
    let mut held: Vec<usize> = (0..terms.len()).filter(|&i| dfs[i] > 0).collect();
    if held.is_empty() {
        return Ok(Vec::new());
    }
    held.sort_by_key(|&i| (dfs[i], i));
    let sql = text_sql(terms.len().min(UNROLLED_TERMS + 1));
    let (k1, b) = (search::BM25_K1, search::BM25_B);
    let score = async |holding: &[usize], limit: Option<usize>| {
        let any = holding.iter().map(|&i| tsquery_literal(&terms[i])).collect::<Vec<_>>().join(" | ");
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] =
            [&owner.tenant, &owner.owner, &lexemes, &any, &idfs, &k1, &b, &avgdl, &filter.narrowing];
        candidates(c, &sql, &params, filter, limit, |row| row.get(2)).await
    };
    if let Some(limit) = limit {
        let mut first = 0;
        let mut held_by = 0;
        while first < held.len() && held_by + dfs[held[first]] <= PRUNED_CANDIDATES {
            held_by += dfs[held[first]];
            first += 1;
        }
        if first > 0 && first < held.len() {
            let others: f64 = held[first..].iter().map(|&i| idfs[i] * (k1 + 1.0)).sum();
            let top = score(&held[..first], Some(limit)).await?;
            if top.len() == limit && top.last().is_some_and(|&(_, _, s)| s > others) {
                return Ok(top);
            }
        }
    }
    score(&held, limit).await
}

/// The owner's snippets with a vector, with their cosine similarity to `unit`
/// (a unit vector of the owner's dimension `dim`).
async fn vector_side(
    c: &ClientWrapper,
    owner: OwnerKey,
    unit: &[f32],
    dim: i32,
    pgvector: bool,
    filter: &Filter<'_>,
    limit: Option<usize>,
) -> Result<Vec<Scored>, Fault> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&owner.tenant, &owner.owner, &unit, &dim, &filter.narrowing];
    // Rows of another dimension (written while the owner's changed) are skipped.
    let rows = "FROM search_snippets s {join} \
                WHERE s.tenant = $1 AND s.owner = $2 AND s.embedding IS NOT NULL \
                AND array_length(s.embedding, 1) = $4 AND {narrow}"
        .replace("{join}", &metadata_join("$5", "s.doc"))
        .replace("{narrow}", &metadata_narrowing("$5"));
    if pgvector {
        let sql = format!(
            "SELECT s.doc, s.idx, -(s.embedding::vector <#> $3::real[]::vector) AS score, r.metadata {rows} \
             ORDER BY score DESC, s.doc, s.idx LIMIT $6"
        );
        return candidates(c, &sql, &params, filter, limit, |row| {
            let cosine: f64 = row.get(2);
            if cosine == 0.0 { 0.0 } else { cosine }
        })
        .await;
    }
    // The same statement with the vectors instead of their score, and no cut:
    // every vector is compared here.
    let sql = format!(
        "SELECT s.doc, s.idx, s.embedding, r.metadata {rows} \
         AND $3::real[] IS NOT NULL ORDER BY s.doc, s.idx LIMIT $6"
    );
    let all = candidates(c, &sql, &params, filter, None, |row| {
        let v: Vec<f32> = row.get(2);
        search::cosine_of_units(unit, &v)
    })
    .await?;
    Ok(match limit {
        Some(limit) => {
            search::top_hits(all, limit).into_iter().map(|h| (h.doc_id, h.snippet_index, h.score)).collect()
        }
        None => all,
    })
}

/// Answers `q` (validated by the caller) over `owner`'s documents.
pub(super) async fn search(
    c: &ClientWrapper,
    owner: OwnerKey,
    q: &Query,
    pgvector: bool,
) -> Result<Result<Vec<Hit>, SearchError>, Fault> {
    let filter = Filter::of(q);
    let text = q.text.as_deref().unwrap_or_default();
    // The owner's dimension, for the modes that compare vectors.
    let vector = match (q.mode, q.vector.as_deref()) {
        (Mode::Vector | Mode::Hybrid, Some(v)) => match owner_dimension(c, owner).await? {
            None => None,
            Some(expected) if expected != v.len() => {
                return Ok(Err(SearchError::DimensionMismatch { expected, got: v.len() }));
            }
            Some(d) => Some((search::unit_vector(v), to_i32(d))),
        },
        _ => None,
    };
    let hit = |(doc_id, snippet_index, score): Scored| Hit { doc_id, snippet_index, score };
    Ok(Ok(match q.mode {
        Mode::Text => text_side(c, owner, text, &filter, Some(q.limit)).await?.into_iter().map(hit).collect(),
        Mode::Vector => match &vector {
            Some((unit, dim)) => vector_side(c, owner, unit, *dim, pgvector, &filter, Some(q.limit))
                .await?
                .into_iter()
                .map(hit)
                .collect(),
            None => Vec::new(),
        },
        Mode::Hybrid => {
            let keyed = |mut side: Vec<Scored>| {
                side.sort_unstable_by_key(|&(doc, idx, _)| (doc, idx));
                side.into_iter().map(|(doc, idx, score)| ((doc, idx), score)).collect::<Vec<_>>()
            };
            let texts = keyed(text_side(c, owner, text, &filter, None).await?);
            let vectors = match &vector {
                Some((unit, dim)) => keyed(vector_side(c, owner, unit, *dim, pgvector, &filter, None).await?),
                None => Vec::new(),
            };
            search::fuse_hits(&texts, &vectors, q.alpha, q.limit)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_terms_are_indexed_by_a_digest_and_quotes_are_escaped() {
        assert_eq!(lexeme("run"), "run");
        let long = "x".repeat(LONGEST_LEXEME + 1);
        assert!(lexeme(&long).starts_with('~') && lexeme(&long).len() == 65);
        assert_ne!(lexeme(&long), lexeme(&"x".repeat(LONGEST_LEXEME + 2)));
        assert_eq!(tsquery_literal("don't"), "'don''t'");
        assert_eq!(tsquery_literal("a\\b"), "'a\\\\b'");
    }
}
