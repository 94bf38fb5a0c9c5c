//! At most so many of something per key, each given back when its holder drops it: how a
//! server keeps one stranger (an address, a domain) from holding what all strangers share.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts what each key holds, at most `each` at once. A key is in the map only while it holds
/// something (the last [`Share`] dropped removes it), so the map never holds more keys than
/// shares are held: the caller's own cap on those (connections, fetches) bounds it.
#[derive(Debug)]
pub struct PerKey<K: Hash + Eq> {
    each: usize,
    held: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Hash + Eq + Clone> PerKey<K> {
    /// At most `each` per key.
    pub fn new(each: usize) -> Self {
        Self {
            each,
            held: Arc::default(),
        }
    }

    /// One more for `key`, if it holds fewer than its share; given back when dropped.
    pub fn take(&self, key: K) -> Option<Share<K>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.get(&key).copied().unwrap_or(0);
        if count >= self.each {
            return None;
        }
        held.insert(key.clone(), count + 1);
        Some(Share {
            key,
            held: self.held.clone(),
        })
    }

    /// How many keys hold something now.
    pub fn keys(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// One of a key's share, held until dropped.
#[derive(Debug)]
pub struct Share<K: Hash + Eq> {
    key: K,
    held: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Hash + Eq> Share<K> {
    /// The key it counts against.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq> Drop for Share<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_share_and_a_dropped_one_is_given_back() {
        let shares = PerKey::new(2);
        let a = shares.take("a").unwrap();
        let _b = shares.take("a").unwrap();
        assert!(shares.take("a").is_none());
        assert!(shares.take("other").is_some(), "another key");
        assert_eq!(a.key(), &"a");
        drop(a);
        assert!(shares.take("a").is_some());
    }

    #[test]
    fn a_key_that_holds_nothing_is_forgotten() {
        let shares = PerKey::new(1);
        drop(shares.take("a").unwrap());
        assert_eq!(shares.keys(), 0);
        assert!(PerKey::new(0).take("a").is_none(), "a share of none");
        assert_eq!(shares.keys(), 0);
    }
}
