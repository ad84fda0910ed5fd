//! The one engine-wide error table. Every front-end renders an [`Error`] from its
//! [`ErrorCode`] alone (HTTP status here; gRPC, SQLSTATE and Neo4j codes in their wire
//! modules), so a code means the same thing on every transport.

use std::fmt;

/// Stable snake_case codes (BEHAVIOUR.md §4). Adding a code is an interface change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    Unauthenticated,
    PermissionDenied,
    Unauthorized,
    ScopeMismatch,
    Conflict,
    TransactionExpired,
    PayloadTooLarge,
    Timeout,
    TooManyRequests,
    Unsupported,
    Internal,
}

impl ErrorCode {
    /// Every code of the table.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::Unauthorized,
        ErrorCode::ScopeMismatch,
        ErrorCode::Conflict,
        ErrorCode::TransactionExpired,
        ErrorCode::PayloadTooLarge,
        ErrorCode::Timeout,
        ErrorCode::TooManyRequests,
        ErrorCode::Unsupported,
        ErrorCode::Internal,
    ];

    /// The code named `code` (its `as_str`), if the table has it.
    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::ScopeMismatch => "scope_mismatch",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TransactionExpired => "transaction_expired",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Timeout => "timeout",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP rendering of the table (BEHAVIOUR.md §4).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::ScopeMismatch => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::Unauthorized => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::TransactionExpired => 404,
            ErrorCode::Timeout => 408,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::Internal => 500,
            ErrorCode::Unsupported => 501,
        }
    }
}

/// An error as the client sees it: a code from the table and a message that names what is
/// wrong. Internal errors carry a generic message; their details go to the log only.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

/// The longest error message answered, in bytes. Messages quote the input they refuse
/// (a value of the wrong type, an unknown name); a quote of a large input is cut in the middle
/// so the message still says what was expected, and an error answer stays small.
pub const MAX_MESSAGE_BYTES: usize = 4096;

fn bounded(mut m: String) -> String {
    if m.len() <= MAX_MESSAGE_BYTES {
        return m;
    }
    const TAIL: usize = 512;
    let mut head = MAX_MESSAGE_BYTES - TAIL - 64;
    while !m.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = m.len() - TAIL;
    while !m.is_char_boundary(tail) {
        tail += 1;
    }
    let cut = tail - head;
    let end = m.split_off(tail);
    m.truncate(head);
    format!("{m} ...[{cut} bytes left out]... {end}")
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: bounded(message.into()),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn unsupported(what: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::Unsupported,
            format!("{what} is not supported by this engine build yet"),
        )
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    /// Logs the detail and returns an error that does not leak it.
    pub fn internal(detail: impl fmt::Display) -> Self {
        crate::log::error(&format!("internal error: {detail}"));
        Self::new(ErrorCode::Internal, "internal error")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

macro_rules! internal_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self { Error::internal(e) }
        }
    )*};
}
internal_from!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::CursorError,
    std::io::Error
);

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn every_code_is_listed_once_and_parses_back() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{} twice", c.as_str());
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }

    #[test]
    fn long_messages_are_cut_in_the_middle() {
        let m = format!(
            "body.labels: invalid type: string \"{}\", expected a sequence",
            "é".repeat(20_000)
        );
        let e = super::Error::invalid(m);
        assert!(e.message.len() <= super::MAX_MESSAGE_BYTES);
        assert!(e.message.starts_with("body.labels: invalid type: string"));
        assert!(e.message.ends_with("expected a sequence"));
        assert!(e.message.contains("bytes left out"));
        assert_eq!(super::Error::invalid("short").message, "short");
    }
}
