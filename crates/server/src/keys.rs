//! Stream keys: the patterns (`sluice_access::Pattern`, re-exported) that say which
//! streams a setting covers, and settings that depend on the key ([`PerStream`]). A
//! leaf that every floor of the server may use.

pub use sluice_access::{Pattern, PatternError};

use arc_swap::ArcSwap;
use std::sync::Arc;

/// The rule a [`PerStream`] asks.
type Rule<T> = Box<dyn Fn(&str) -> T + Send + Sync>;

/// A setting that depends on the stream's key (an `[[apps]]` entry's, else the
/// default): what a floor below the configuration asks for each new stream, without
/// knowing the configuration. Its clones share one rule, which a reload replaces for
/// all of them at once ([`PerStream::set`]); streams made before keep what they got.
pub struct PerStream<T>(Arc<ArcSwap<Rule<T>>>);

impl<T> PerStream<T> {
    pub fn new(f: impl Fn(&str) -> T + Send + Sync + 'static) -> Self {
        PerStream(Arc::new(ArcSwap::from_pointee(Box::new(f) as Rule<T>)))
    }

    /// From now on, every clone of this one answers as `other` does.
    pub fn set(&self, other: &PerStream<T>) {
        self.0.store(other.0.load_full());
    }

    /// The same value for every stream.
    pub fn fixed(value: T) -> Self
    where
        T: Clone + Send + Sync + 'static,
    {
        PerStream::new(move |_| value.clone())
    }

    /// The value for the stream `key`.
    pub fn of(&self, key: &str) -> T {
        (self.0.load())(key)
    }
}

impl<T> Clone for PerStream<T> {
    fn clone(&self) -> Self {
        PerStream(self.0.clone())
    }
}

impl<T> std::fmt::Debug for PerStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerStream(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_set_anew_is_what_every_clone_answers() {
        let a = PerStream::new(|key: &str| key.starts_with("live/"));
        let b = a.clone();
        assert!(b.of("live/x") && !b.of("tv/x"));
        a.set(&PerStream::fixed(true));
        assert!(b.of("tv/x") && a.of("tv/x"));
    }
}
