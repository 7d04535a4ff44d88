//! What an authorization decides: the action asked for, and who was allowed or why
//! not. Shared by every backend (the server's users, signed URLs, hook; JWTs here).

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Publish a stream.
    Publish,
    /// Play a stream or read a file.
    Read,
    /// The HTTP API and `/metrics`.
    Api,
}

impl Action {
    /// The action's name, as permissions and signed URLs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Read => "read",
            Action::Api => "api",
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Denial {
    /// Authorization is required and none was given.
    NoCredentials,
    /// No such user, or a wrong password.
    BadCredentials,
    /// The user may not do this on this path.
    NotPermitted,
    /// The user may not connect from this address.
    AddressNotAllowed,
    /// A signed URL whose signature does not match.
    BadSignature,
    /// A signed URL, JWT or viewer token past its expiry.
    Expired,
    /// The auth hook answered, and not with a 2xx.
    HookDenied,
    /// The auth hook did not answer in time (or at all).
    HookUnavailable,
}

impl Denial {
    /// The reason's name, as logs and metrics spell it.
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NoCredentials => "no_credentials",
            Denial::BadCredentials => "bad_credentials",
            Denial::NotPermitted => "not_permitted",
            Denial::AddressNotAllowed => "address_not_allowed",
            Denial::BadSignature => "bad_signature",
            Denial::Expired => "expired",
            Denial::HookDenied => "hook_denied",
            Denial::HookUnavailable => "hook_unavailable",
        }
    }

    /// Every reason, in the order of their discriminants (`denial as usize` indexes
    /// a counter per reason).
    pub const ALL: [Denial; 8] = [
        Denial::NoCredentials,
        Denial::BadCredentials,
        Denial::NotPermitted,
        Denial::AddressNotAllowed,
        Denial::BadSignature,
        Denial::Expired,
        Denial::HookDenied,
        Denial::HookUnavailable,
    ];
}

/// Who was allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Authorization is not required for this action.
    Open,
    /// A signed URL.
    Signed,
    /// A user of `[[users]]`.
    User(String),
    /// A JWT, with its subject.
    Token(String),
    /// The auth hook, for the user name given (if any).
    Hook(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_discriminant_order() {
        for (i, d) in Denial::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i, "{}", d.reason());
        }
    }
}
