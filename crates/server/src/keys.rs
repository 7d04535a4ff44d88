//! Stream keys: the patterns (`sluice_access::Pattern`, re-exported) that say which
//! streams a setting covers, and settings that depend on the key ([`PerStream`]). A
//! leaf that every floor of the server may use.

pub use sluice_access::{Pattern, PatternError};

/// A setting that depends on the stream's key (an `[[apps]]` entry's, else the
/// default): what a floor below the configuration asks for each new stream, without
/// knowing the configuration.
pub struct PerStream<T>(std::sync::Arc<dyn Fn(&str) -> T + Send + Sync>);

impl<T> PerStream<T> {
    pub fn new(f: impl Fn(&str) -> T + Send + Sync + 'static) -> Self {
        PerStream(std::sync::Arc::new(f))
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
        (self.0)(key)
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
