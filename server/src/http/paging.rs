//! A list's query parameters as the store's list query.

use crate::api::types::{Direction, LIST_PAGE_MAX_BYTES, ListParams, SortBy};
use crate::store;

/// The store's query for a list's parameters. The bounds of `limit` and
/// `offset` are their types': the extractor has already enforced them.
pub fn list_query(p: &ListParams) -> store::ListQuery {
    store::ListQuery {
        limit: p.limit.get(),
        offset: p.offset.get(),
        sort_by: match p.sort_by {
            SortBy::CreatedAt => store::SortBy::CreatedAt,
            SortBy::UpdatedAt => store::SortBy::UpdatedAt,
        },
        direction: match p.direction {
            Direction::Asc => store::Direction::Asc,
            Direction::Desc => store::Direction::Desc,
        },
        metadata_filter: p.filter(),
        // Room for `{"items":[` and `]}` around the items.
        max_bytes: Some(LIST_PAGE_MAX_BYTES - 16),
        after: None,
    }
}
