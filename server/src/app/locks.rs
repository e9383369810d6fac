//! In-process locks by key: one async mutex per key that someone holds or
//! waits for, forgotten as soon as nobody does.
//!
//! Used to queue the writers of one record (read-modify-commit under the
//! record's lock, so optimistic commits practically never go stale) and the
//! requests that carry one Idempotency-Key.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Above this many entries, a lock first forgets the entries nobody uses.
const FORGET_ABOVE: usize = 1024;

/// A set of locks, one per key. Clones share the set.
pub struct KeyedLocks<K> {
    map: Arc<Mutex<HashMap<K, Arc<AsyncMutex<()>>>>>,
}

impl<K> Clone for KeyedLocks<K> {
    fn clone(&self) -> Self {
        KeyedLocks { map: self.map.clone() }
    }
}

impl<K> Default for KeyedLocks<K> {
    fn default() -> Self {
        KeyedLocks { map: Arc::default() }
    }
}

/// Holds the lock of one key; dropping it releases the lock and, when nobody
/// waits for it, removes the key's entry.
pub struct KeyedGuard<K: Hash + Eq> {
    guard: Option<OwnedMutexGuard<()>>,
    key: K,
    map: Arc<Mutex<HashMap<K, Arc<AsyncMutex<()>>>>>,
}

impl<K: Hash + Eq + Clone> KeyedLocks<K> {
    /// Waits for the other holders of `key`, in turn, then holds it.
    pub async fn lock(&self, key: K) -> KeyedGuard<K> {
        let lock = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() >= FORGET_ABOVE {
                // A waiter that gave up (a timeout) can leave its entry behind when
                // the holder left first: forget the entries nobody holds or waits for.
                map.retain(|_, l| Arc::strong_count(l) > 1);
            }
            map.entry(key.clone()).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        KeyedGuard { guard: Some(guard), key, map: self.map.clone() }
    }

    /// How many keys are held or waited for (for tests: entries do not pile up).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq> Drop for KeyedGuard<K> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Only the map holds it: nobody holds or waits, and nobody can reach it
        // without the map's lock, which we have.
        if map.get(&self.key).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn holders_of_one_key_take_turns_and_leave_no_entry_behind() {
        let locks = Arc::new(KeyedLocks::<u32>::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (locks, inside) = (locks.clone(), inside.clone());
                tokio::spawn(async move {
                    let _g = locks.lock(i % 2).await;
                    assert!(inside.fetch_add(1, Ordering::SeqCst) < 2, "two holders of one key at once");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(locks.is_empty(), "entries of released keys are removed");
    }
}
