//! Searching one owner's documents, whatever keeps them: the server's own
//! [`SearchIndex`] (beside the embedded store), or a database that indexes
//! them itself (see [`super::Store::doc_search`]). The store depends on
//! [`crate::search`] for what a query, a hit and a ranking are; search knows
//! nothing of the store.

use async_trait::async_trait;

use super::StoreResult;
use crate::search::{Hit, OwnerKey, Query, SearchError, SearchIndex};

/// Every implementation answers the same [`Query`] with the same ranking
/// (BM25 with search's analysis, cosine, [`crate::search::fuse_hits`]),
/// which the tests check across backends.
#[async_trait]
pub trait DocSearch: Send + Sync {
    /// Best hits first, as [`SearchIndex::search`]. The outer error is the
    /// store's (unavailable); the inner one the query's.
    async fn search_owner(&self, owner: OwnerKey, q: &Query) -> StoreResult<Result<Vec<Hit>, SearchError>>;

    /// How many snippets of the owner's documents a search ranks.
    async fn owner_snippets(&self, owner: OwnerKey) -> StoreResult<usize>;

    /// The dimension of the owner's vectors; `None` while it has none.
    async fn owner_dimension(&self, owner: OwnerKey) -> StoreResult<Option<usize>>;
}

#[async_trait]
impl DocSearch for SearchIndex {
    async fn search_owner(&self, owner: OwnerKey, q: &Query) -> StoreResult<Result<Vec<Hit>, SearchError>> {
        Ok(self.search(owner, q))
    }

    async fn owner_snippets(&self, owner: OwnerKey) -> StoreResult<usize> {
        Ok(self.snippet_count(owner))
    }

    async fn owner_dimension(&self, owner: OwnerKey) -> StoreResult<Option<usize>> {
        Ok(self.dimension(owner))
    }
}
