//! Bounded top-k selection with a total, deterministic order.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use uuid::Uuid;

use super::Hit;

/// A scored candidate. `Ord` is "better is greater": higher `primary`, then
/// higher `secondary`, then smaller `doc_id`, then smaller `snippet_index`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ranked {
    /// The score reported to the caller.
    pub primary: f64,
    /// Tie-breaker on equal `primary` (constant outside hybrid search).
    pub secondary: f64,
    pub doc_id: Uuid,
    pub snippet_index: usize,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.primary
            .total_cmp(&other.primary)
            .then_with(|| self.secondary.total_cmp(&other.secondary))
            .then_with(|| other.doc_id.cmp(&self.doc_id))
            .then_with(|| other.snippet_index.cmp(&self.snippet_index))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// Keeps the `k` best [`Ranked`] values seen so far (min-heap of size `k`).
pub(super) struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<Ranked>>,
}

impl TopK {
    pub(super) fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k.min(1024)) }
    }

    /// Cheap pre-check: could a candidate with this primary score get in?
    /// (Lets callers skip building the full candidate for hopeless scores.)
    pub(super) fn admits(&self, primary: f64) -> bool {
        if self.heap.len() < self.k {
            return true;
        }
        self.heap.peek().is_some_and(|Reverse(worst)| primary.total_cmp(&worst.primary).is_ge())
    }

    pub(super) fn push(&mut self, candidate: Ranked) {
        if self.heap.len() < self.k {
            self.heap.push(Reverse(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate > worst.0
        {
            *worst = Reverse(candidate);
        }
    }

    /// Best first.
    pub(super) fn into_hits(self) -> Vec<Hit> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(r)| Hit { doc_id: r.doc_id, snippet_index: r.snippet_index, score: r.primary })
            .collect()
    }
}
