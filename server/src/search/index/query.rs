//! Searching one owner: text (BM25 over the owner's own statistics, the
//! tail scored alike), vectors (every one compared, or the owner's graph),
//! and both fused; metadata filters narrow by indexed terms and are decided
//! by the one definition of a match.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value};
use tantivy::collector::{Collector, DocSetCollector, SegmentCollector, TopDocs};
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query as TQuery,
    TermQuery,
};
use tantivy::schema::{Field, IndexRecordOption, Value as _};
use tantivy::{
    DocAddress, DocId, DocSet, Executor, Score, Searcher, SegmentReader, TERMINATED, TantivyDocument, Term,
};
use uuid::Uuid;

use super::reader::{Columns, OwnerStats, read_vector};
use super::schema::{Fields, OWNER_TEXT_LEN, meta_term_text, oseq_text, owner_text};
use super::writer::TailDoc;
use super::{Shared, index_error};
use crate::metadata::metadata_matches;
use crate::search::ann::{self, Graph};
use crate::search::rank::{Ranked, TopK};
use crate::search::score::{canonical, dot, fuse, unit};
use crate::search::{Hit, Mode, OwnerKey, Query, SearchError, query_terms};

/// The most threads one query's segments are searched on.
const SEARCH_THREADS: usize = 4;
/// An owner with at least this many snippets has a text query's segments
/// searched side by side. A smaller owner's query takes well under a
/// millisecond on one thread, of which waking the pool would be a good part.
pub(super) const PARALLEL_MIN_SNIPPETS: u64 = 250_000;

impl Shared {
    /// Best hits first; the query is valid and its limit above zero.
    pub(in crate::search) fn search(&self, owner: OwnerKey, q: &Query) -> Result<Vec<Hit>, SearchError> {
        // What the searcher sees and the tail beside it, as of one moment.
        let (st, searcher, tail) = {
            let w = self.loaded();
            if let Some(e) = &w.broken {
                return Err(SearchError::Index(e.clone()));
            }
            (
                w.stats.get(&owner).copied().unwrap_or_default(),
                self.reader.searcher(),
                w.tail.get(&owner).cloned().unwrap_or_default(),
            )
        };
        if st.snippets == 0 {
            return Ok(Vec::new());
        }
        let unit_query = match (&q.vector, q.mode) {
            (Some(v), Mode::Vector | Mode::Hybrid) => {
                if let Some(expected) = st.dim
                    && expected != v.len()
                {
                    return Err(SearchError::DimensionMismatch { expected, got: v.len() });
                }
                st.dim.map(|_| unit(v))
            }
            _ => None,
        };
        let s = Search {
            f: self.fields,
            searcher: &searcher,
            tail: &tail,
            owner,
            stats: st,
            filter: q.metadata_filter.as_ref(),
            parallel: st.snippets >= self.parallel_min_snippets.load(Ordering::Relaxed),
        };
        let text = q.text.as_deref().unwrap_or("");
        match q.mode {
            Mode::Text => s.text(text, q.limit),
            Mode::Vector => match unit_query {
                Some(u) => match self.graphs.graph(owner, st.vectors, u.len()).filter(|_| s.filter.is_none())
                {
                    Some(graph) => {
                        let (hits, stale) = s.vector_graph(&graph, &u, q.limit)?;
                        if stale {
                            self.graphs.rebuild(owner);
                        }
                        Ok(hits)
                    }
                    None => s.vector(&u, q.limit),
                },
                None => Ok(Vec::new()),
            },
            Mode::Hybrid => s.hybrid(text, unit_query.as_deref(), q.alpha, q.limit),
        }
    }
}

/// BM25's statistics of one owner: its live snippets, their total length,
/// and how many of them hold a term (the terms are the owner's own).
struct OwnerBm25<'a> {
    searcher: &'a Searcher,
    tail: &'a [Arc<TailDoc>],
    stats: OwnerStats,
}

impl Bm25StatisticsProvider for OwnerBm25<'_> {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        Ok(self.stats.tokens)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.stats.snippets)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let mut df = 0u64;
        for seg in self.searcher.segment_readers() {
            let inverted = seg.inverted_index(term.field())?;
            let Some(info) = inverted.get_term_info(term)? else { continue };
            match seg.alive_bitset() {
                None => df += u64::from(info.doc_freq),
                Some(alive) => {
                    let mut postings =
                        inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
                    let mut doc = postings.doc();
                    while doc != TERMINATED {
                        df += u64::from(alive.is_alive(doc));
                        doc = postings.advance();
                    }
                }
            }
        }
        if !self.tail.is_empty()
            && let Some(t) = term.value().as_str().and_then(|text| text.get(OWNER_TEXT_LEN..))
        {
            for doc in self.tail {
                df += doc.snippets.iter().filter(|s| s.analysed.tf(t).is_some()).count() as u64;
            }
        }
        Ok(df.min(self.stats.snippets))
    }
}

/// Every match with its score: (segment, doc, score).
struct Every;

struct EverySegment {
    segment: u32,
    hits: Vec<(u32, DocId, Score)>,
}

impl Collector for Every {
    type Fruit = Vec<(u32, DocId, Score)>;
    type Child = EverySegment;

    fn for_segment(&self, segment: u32, _: &SegmentReader) -> tantivy::Result<EverySegment> {
        Ok(EverySegment { segment, hits: Vec::new() })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(u32, DocId, Score)>>) -> tantivy::Result<Self::Fruit> {
        Ok(fruits.concat())
    }
}

impl SegmentCollector for EverySegment {
    type Fruit = Vec<(u32, DocId, Score)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        self.hits.push((self.segment, doc, score));
    }

    fn harvest(self) -> Self::Fruit {
        self.hits
    }
}

/// The threads a big owner's text query searches its segments on, side by
/// side: one per core, at most [`SEARCH_THREADS`]; `None` on one core (or if
/// the threads cannot be started: searches then run on the caller's thread).
fn parallel_search() -> Option<&'static Executor> {
    static POOL: std::sync::OnceLock<Option<Executor>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(SEARCH_THREADS);
        (threads > 1).then(|| Executor::multi_thread(threads, "search-query-").ok()).flatten()
    })
    .as_ref()
}

/// One search of one owner.
struct Search<'a> {
    f: Fields,
    searcher: &'a Searcher,
    /// The owner's docs added since the last commit.
    tail: &'a [Arc<TailDoc>],
    owner: OwnerKey,
    stats: OwnerStats,
    filter: Option<&'a Map<String, Value>>,
    /// Whether a text query searches the segments side by side (a big owner).
    parallel: bool,
}

impl Search<'_> {
    fn owner_term(&self) -> Term {
        Term::from_field_text(self.f.owner, &owner_text(self.owner))
    }

    /// The query's terms, as this owner's, as a query scoring any of them.
    fn text_query(&self, text: &str) -> Option<Box<dyn TQuery>> {
        let prefix = owner_text(self.owner);
        let mut clauses: Vec<(Occur, Box<dyn TQuery>)> = query_terms(text)
            .into_iter()
            .map(|t| {
                let term = Term::from_field_text(self.f.text, &format!("{prefix}{t}"));
                (
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn TQuery>,
                )
            })
            .collect();
        match clauses.len() {
            0 => None,
            1 => clauses.pop().map(|(_, q)| q),
            _ => Some(Box::new(BooleanQuery::new(clauses))),
        }
    }

    /// The filter as a query matching (with score 0) the owner's snippets
    /// whose metadata has every pair; `None` without a filter.
    fn filter_query(&self) -> Option<Box<dyn TQuery>> {
        let filter = self.filter.filter(|m| !m.is_empty())?;
        let mut clauses: Vec<(Occur, Box<dyn TQuery>)> =
            vec![(Occur::Must, Box::new(TermQuery::new(self.owner_term(), IndexRecordOption::Basic)))];
        for (k, v) in filter {
            let term = Term::from_field_text(self.f.meta, &meta_term_text(k, v));
            clauses.push((Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic))));
        }
        Some(Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(clauses)), 0.0)))
    }

    fn bm25(&self) -> OwnerBm25<'_> {
        OwnerBm25 { searcher: self.searcher, tail: self.tail, stats: self.stats }
    }

    /// Whether a doc of the tail passes the filter.
    fn tail_passes(&self, doc: &TailDoc) -> bool {
        self.filter.filter(|m| !m.is_empty()).is_none_or(|f| metadata_matches(f, doc.metadata.as_ref()))
    }

    /// Every snippet of the tail (passing the filter) holding a term of the
    /// query, scored as tantivy scores the committed ones: the same BM25
    /// weights over the same statistics, summed over the terms.
    fn tail_text(&self, text: &str, mut each: impl FnMut((Uuid, usize), Score)) -> Result<(), SearchError> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let prefix = owner_text(self.owner);
        let bm25 = self.bm25();
        let weights = query_terms(text)
            .into_iter()
            .map(|t| {
                let term = Term::from_field_text(self.f.text, &format!("{prefix}{t}"));
                Bm25Weight::for_terms(&bm25, &[term]).map(|w| (t, w))
            })
            .collect::<tantivy::Result<Vec<_>>>()
            .map_err(index_error)?;
        for doc in self.tail.iter().filter(|d| self.tail_passes(d)) {
            for (i, s) in doc.snippets.iter().enumerate() {
                let mut score: Option<Score> = None;
                for (t, w) in &weights {
                    if let Some(tf) = s.analysed.tf(t) {
                        *score.get_or_insert(0.0) += w.score(s.fieldnorm_id, tf);
                    }
                }
                if let Some(score) = score {
                    each((doc.id, i), score);
                }
            }
        }
        Ok(())
    }

    /// Whether the snippet's doc passes the filter, by the one definition of
    /// a match (the indexed terms only narrow the candidates). Cached per doc.
    fn passes(
        &self,
        addr: DocAddress,
        id: Uuid,
        cache: &mut HashMap<Uuid, bool>,
    ) -> Result<bool, SearchError> {
        let Some(filter) = self.filter.filter(|m| !m.is_empty()) else { return Ok(true) };
        if let Some(v) = cache.get(&id) {
            return Ok(*v);
        }
        let doc: TantivyDocument = self.searcher.doc(addr).map_err(index_error)?;
        let metadata: Option<Map<String, Value>> =
            match doc.get_first(self.f.meta_json).and_then(|v| v.as_bytes()) {
                Some(json) => Some(serde_json::from_slice(json).map_err(index_error)?),
                None => None,
            };
        let verdict = metadata_matches(filter, metadata.as_ref());
        cache.insert(id, verdict);
        Ok(verdict)
    }

    /// The columns of `segment`, opened once per search.
    fn columns<'c>(
        &self,
        cache: &'c mut HashMap<u32, Columns>,
        segment: u32,
    ) -> Result<&'c Columns, SearchError> {
        Ok(match cache.entry(segment) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Columns::open(self.searcher.segment_reader(segment))?)
            }
        })
    }

    fn text(&self, text: &str, limit: usize) -> Result<Vec<Hit>, SearchError> {
        let Some(query) = self.text_query(text) else { return Ok(Vec::new()) };
        let query: Box<dyn TQuery> = match self.filter_query() {
            Some(filter) => Box::new(BooleanQuery::new(vec![(Occur::Must, query), (Occur::Must, filter)])),
            None => query,
        };
        // Some more than asked, so that equal scores at the cut are ordered as everywhere.
        let fetch = limit.saturating_add(limit.max(16));
        let bm25 = self.bm25();
        let scoring = EnableScoring::enabled_from_statistics_provider(&bm25, self.searcher);
        // The pool is asked for (and so started) only by a big owner's query.
        let pool =
            (self.parallel && self.searcher.segment_readers().len() > 1).then(parallel_search).flatten();
        let executor = pool.unwrap_or(&Executor::SingleThread);
        let top = self
            .searcher
            .search_with_executor(&*query, &TopDocs::with_limit(fetch).order_by_score(), executor, scoring)
            .map_err(index_error)?;
        let mut ranked = TopK::new(limit);
        let mut cache = HashMap::new();
        let mut columns: HashMap<u32, Columns> = HashMap::new();
        for (score, addr) in top {
            let (doc_id, snippet_index) = self.columns(&mut columns, addr.segment_ord)?.key(addr.doc_id);
            if !self.passes(addr, doc_id, &mut cache)? {
                continue;
            }
            ranked.push(Ranked {
                primary: canonical(f64::from(score)),
                secondary: 0.0,
                doc_id,
                snippet_index,
            });
        }
        self.tail_text(text, |(doc_id, snippet_index), score| {
            ranked.push(Ranked {
                primary: canonical(f64::from(score)),
                secondary: 0.0,
                doc_id,
                snippet_index,
            });
        })?;
        Ok(ranked.into_hits())
    }

    /// The owner's snippets passing the filter, when there is one.
    fn allowed(&self) -> Result<Option<HashSet<DocAddress>>, SearchError> {
        let Some(filter) = self.filter_query() else { return Ok(None) };
        let candidates = self.searcher.search(&*filter, &DocSetCollector).map_err(index_error)?;
        let mut cache = HashMap::new();
        let mut columns = HashMap::new();
        let mut allowed = HashSet::with_capacity(candidates.len());
        for addr in candidates {
            let (id, _) = self.columns(&mut columns, addr.segment_ord)?.key(addr.doc_id);
            if self.passes(addr, id, &mut cache)? {
                allowed.insert(addr);
            }
        }
        Ok(Some(allowed))
    }

    /// Cosine similarity of every vector of the owner (that passes the filter).
    fn for_each_vector(
        &self,
        unit_query: &[f32],
        allowed: Option<&HashSet<DocAddress>>,
        mut each: impl FnMut((Uuid, usize), f64),
    ) -> Result<(), SearchError> {
        let owner_term = self.owner_term();
        let mut vector: Vec<f32> = Vec::new();
        let mut found: Vec<(u64, DocId)> = Vec::new();
        let mut ords: Vec<u64> = Vec::new();
        for (ord, seg) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = seg.inverted_index(self.f.owner).map_err(index_error)?;
            let Some(mut postings) =
                inverted.read_postings(&owner_term, IndexRecordOption::Basic).map_err(index_error)?
            else {
                continue;
            };
            let cols = Columns::open(seg)?;
            let Some(vectors) = seg.fast_fields().bytes("vec").map_err(index_error)? else { continue };
            let alive = seg.alive_bitset();
            // The vectors' ords first, then their bytes in ord order: one pass
            // over the column's dictionary instead of a lookup per vector.
            found.clear();
            let mut doc = postings.doc();
            while doc != TERMINATED {
                let addr = DocAddress::new(ord as u32, doc);
                if alive.is_none_or(|a| a.is_alive(doc))
                    && cols.dim.first(doc).unwrap_or(0) as usize == unit_query.len()
                    && allowed.is_none_or(|a| a.contains(&addr))
                    && let Some(vord) = vectors.term_ords(doc).next()
                {
                    found.push((vord, doc));
                }
                doc = postings.advance();
            }
            found.sort_unstable();
            ords.clear();
            ords.extend(found.iter().map(|(vord, _)| *vord));
            let mut docs = found.iter().map(|(_, doc)| *doc);
            vectors
                .dictionary()
                .sorted_ords_to_term_cb(&ords, |bytes| {
                    vector.clear();
                    vector
                        .extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
                    if let Some(doc) = docs.next() {
                        each(cols.key(doc), canonical(dot(unit_query, &vector)));
                    }
                })
                .map_err(index_error)?;
        }
        for doc in self.tail.iter().filter(|d| self.tail_passes(d)) {
            for (i, s) in doc.snippets.iter().enumerate() {
                if let Some(v) = s.analysed.vector.as_deref().filter(|v| v.len() == unit_query.len()) {
                    each((doc.id, i), canonical(dot(unit_query, v)));
                }
            }
        }
        Ok(())
    }

    /// Vector search with the owner's graph (see [`ann`]): its candidates
    /// still in the index and every vector staged after it, scored exactly.
    /// The second value says the graph is due to be built again (a quarter
    /// of its candidates were gone, or its tail outgrew a quarter of it).
    fn vector_graph(
        &self,
        graph: &Graph,
        unit_query: &[f32],
        limit: usize,
    ) -> Result<(Vec<Hit>, bool), SearchError> {
        let asked = ann::candidates(limit).min(graph.size as usize);
        let keys = graph.nearest(unit_query, asked)?;
        let prefix = owner_text(self.owner);
        let mut top = TopK::new(limit);
        let mut bytes = Vec::new();
        let mut vector: Vec<f32> = Vec::new();
        let mut found = 0usize;
        let mut tail = 0u64;
        let mut score = |cols: &Columns, vectors: &tantivy::columnar::BytesColumn, doc: DocId| {
            let Some(vord) = vectors.term_ords(doc).next() else { return Ok::<_, SearchError>(()) };
            if cols.dim.first(doc).unwrap_or(0) as usize != unit_query.len() {
                return Ok(());
            }
            read_vector(vectors, vord, &mut bytes, &mut vector)?;
            let cosine = canonical(dot(unit_query, &vector));
            if top.admits(cosine) {
                let (doc_id, snippet_index) = cols.key(doc);
                top.push(Ranked { primary: cosine, secondary: 0.0, doc_id, snippet_index });
            }
            Ok(())
        };
        let first_after = oseq_text(&prefix, graph.watermark.saturating_add(1));
        let past_owner = oseq_text(&prefix, u64::MAX);
        for seg in self.searcher.segment_readers() {
            let Some(vectors) = seg.fast_fields().bytes("vec").map_err(index_error)? else { continue };
            let cols = Columns::open(seg)?;
            let alive = seg.alive_bitset();
            let inverted = seg.inverted_index(self.f.oseq).map_err(index_error)?;
            let live = |postings: &mut tantivy::postings::SegmentPostings,
                        each: &mut dyn FnMut(DocId) -> Result<(), SearchError>| {
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if alive.is_none_or(|a| a.is_alive(doc)) {
                        each(doc)?;
                    }
                    doc = postings.advance();
                }
                Ok::<_, SearchError>(())
            };
            // The graph's candidates still here.
            for &key in &keys {
                let term = Term::from_field_text(self.f.oseq, &oseq_text(&prefix, key));
                if let Some(mut postings) =
                    inverted.read_postings(&term, IndexRecordOption::Basic).map_err(index_error)?
                {
                    live(&mut postings, &mut |doc| {
                        found += 1;
                        score(&cols, &vectors, doc)
                    })?;
                }
            }
            // Everything staged after the graph.
            let mut range = inverted
                .terms()
                .range()
                .ge(first_after.as_bytes())
                .le(past_owner.as_bytes())
                .into_stream()
                .map_err(index_error)?;
            while range.advance() {
                let mut postings = inverted
                    .read_postings_from_terminfo(range.value(), IndexRecordOption::Basic)
                    .map_err(index_error)?;
                live(&mut postings, &mut |doc| {
                    tail += 1;
                    score(&cols, &vectors, doc)
                })?;
            }
        }
        for doc in self.tail.iter() {
            for (i, s) in doc.snippets.iter().enumerate() {
                if let Some(v) = s.analysed.vector.as_deref().filter(|v| v.len() == unit_query.len()) {
                    top.push(Ranked {
                        primary: canonical(dot(unit_query, v)),
                        secondary: 0.0,
                        doc_id: doc.id,
                        snippet_index: i,
                    });
                }
            }
        }
        let stale = found * 4 < keys.len() * 3 || tail * 4 > graph.size;
        Ok((top.into_hits(), stale))
    }

    fn vector(&self, unit_query: &[f32], limit: usize) -> Result<Vec<Hit>, SearchError> {
        let allowed = self.allowed()?;
        let mut top = TopK::new(limit);
        self.for_each_vector(unit_query, allowed.as_ref(), |(doc_id, snippet_index), cosine| {
            if top.admits(cosine) {
                top.push(Ranked { primary: cosine, secondary: 0.0, doc_id, snippet_index });
            }
        })?;
        Ok(top.into_hits())
    }

    /// Text and vector sides over every candidate, fused (see [`fuse`]).
    fn hybrid(
        &self,
        text: &str,
        unit_query: Option<&[f32]>,
        alpha: f64,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let allowed = self.allowed()?;
        let mut text_hits = Vec::new();
        if let Some(query) = self.text_query(text) {
            let every = self
                .searcher
                .search_with_statistics_provider(&*query, &Every, &self.bm25())
                .map_err(index_error)?;
            let mut columns: HashMap<u32, Columns> = HashMap::new();
            for (segment, doc, score) in every {
                if allowed.as_ref().is_some_and(|a| !a.contains(&DocAddress::new(segment, doc))) {
                    continue;
                }
                text_hits.push((self.columns(&mut columns, segment)?.key(doc), canonical(f64::from(score))));
            }
            self.tail_text(text, |key, score| text_hits.push((key, canonical(f64::from(score)))))?;
        }
        let mut vector_hits = Vec::new();
        if let Some(u) = unit_query {
            self.for_each_vector(u, allowed.as_ref(), |key, cosine| vector_hits.push((key, cosine)))?;
        }
        text_hits.sort_unstable_by_key(|a| a.0);
        vector_hits.sort_unstable_by_key(|a| a.0);
        Ok(fuse(&text_hits, &vector_hits, alpha, limit, |key| key))
    }
}
