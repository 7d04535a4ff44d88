//! A listener's address as the configuration gives it: an address, or `off`.
//!
//! Parsed where the setting is read (the file, a flag), so a bad value is refused
//! with its key before anything binds, and nothing downstream parses strings.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// Where a listener binds, or that it is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

/// A listener value that is neither an address nor `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither an address like 0.0.0.0:1935 nor \"off\"")]
pub struct ListenError(String);

impl Listen {
    pub const OFF: Listen = Listen::Off;

    /// The address, or `None` when off.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            Listen::Off => None,
            Listen::At(addr) => Some(addr),
        }
    }

    pub fn is_on(self) -> bool {
        self != Listen::Off
    }
}

impl From<Option<SocketAddr>> for Listen {
    fn from(addr: Option<SocketAddr>) -> Listen {
        addr.map_or(Listen::Off, Listen::At)
    }
}

impl FromStr for Listen {
    type Err = ListenError;
    fn from_str(s: &str) -> Result<Listen, ListenError> {
        match s.trim() {
            "off" => Ok(Listen::Off),
            addr => addr
                .parse()
                .map(Listen::At)
                .map_err(|_| ListenError(s.to_string())),
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Off => f.write_str("off"),
            Listen::At(addr) => addr.fmt(f),
        }
    }
}

/// Written as the file writes it, so `--print-config` reads back unchanged.
impl Serialize for Listen {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Listen, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_or_off_and_nothing_else() {
        assert_eq!("off".parse(), Ok(Listen::Off));
        let at: Listen = "127.0.0.1:1935".parse().unwrap();
        assert_eq!(at.addr(), Some(SocketAddr::from(([127, 0, 0, 1], 1935))));
        assert_eq!(at.to_string(), "127.0.0.1:1935");
        assert_eq!("[::]:8080".parse::<Listen>().map(Listen::is_on), Ok(true));
        for bad in ["", "1935", "localhost:1935", "on", "0.0.0.0:99999"] {
            assert!(bad.parse::<Listen>().is_err(), "{bad:?}");
        }
    }
}
