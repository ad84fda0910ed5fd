//! Front-ends. Each decodes its protocol into an [`crate::engine::Envelope`], calls
//! `Engine::execute`, and renders the outcome or the error. None of them touches the store,
//! checks a permission or picks a tenant.

pub mod grpc;
pub mod http;
pub mod stall;

use crate::error::{Error, Result};

/// The next connection on `listener`, with Nagle off (small answers must not wait for the
/// client's delayed ACK). A failed accept (out of descriptors, a connection reset before it
/// was taken) is logged and retried after 50 ms; it never ends the listener.
pub async fn accept(listener: &tokio::net::TcpListener, what: &str) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(e) => {
                crate::log::warn(&format!("{what} accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// A header's value as text. A tenant name may be any UTF-8 string; a value that is not UTF-8
/// is a 400 naming the header. It is never read as if the header were absent (a transaction
/// header that cannot be read must not let its write commit outside the transaction).
pub fn header_text<'a>(name: &str, value: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(value)
        .map_err(|_| Error::invalid(format!("{name}: the header's value is not valid UTF-8")))
}

/// The one value a request gives for something it may name only once (a credential, a
/// tenant, a transaction), from every value it sent under `names`: None when it sent none; a
/// 400 naming the headers when it sent different ones (the server would otherwise pick one,
/// and a proxy in front of it might have picked another).
pub fn one_value(names: &str, values: Vec<String>) -> Result<Option<String>> {
    match first_of(names, values) {
        (first, None) => Ok(first),
        (_, Some(e)) => Err(e),
    }
}

/// [`one_value`] that keeps the first value when they differ (it stands for them while the
/// request is checked), with the error to refuse the request with.
pub fn first_of(names: &str, values: Vec<String>) -> (Option<String>, Option<Error>) {
    let differ = values.iter().skip(1).any(|v| *v != values[0]);
    let wrong = differ.then(|| {
        Error::invalid(format!(
            "{names}: the request carries different values; send one"
        ))
    });
    (values.into_iter().next(), wrong)
}

/// Every credential a request sends: the tokens of its `Authorization: Bearer` values, then
/// the `extra` values (HTTP's `X-Service-Token` and `token`), in that order; and what is wrong
/// with them, if anything, for the caller to refuse once the credential is checked: a value
/// that is not text, or an `Authorization` of another scheme beside a credential (the server
/// would pick one, a proxy in front of it perhaps the other). An `Authorization` of another
/// scheme alone is no credential (the request answers 401 as without one).
pub fn credentials<'a>(
    authorization: impl IntoIterator<Item = &'a hyper::header::HeaderValue>,
    extra: impl IntoIterator<Item = (&'static str, &'a hyper::header::HeaderValue)>,
) -> (Vec<String>, Option<Error>) {
    let (mut all, mut wrong, mut other_scheme) = (Vec::new(), None, false);
    let unreadable = |name: &str| {
        Error::invalid(format!(
            "{name}: the header's value is not readable text (visible ASCII)"
        ))
    };
    for v in authorization {
        match v.to_str().map(bearer_token) {
            Ok(Some(t)) => all.push(t),
            Ok(None) => other_scheme = true,
            Err(_) => wrong = wrong.or(Some(unreadable("Authorization"))),
        }
    }
    for (name, v) in extra {
        match v.to_str() {
            Ok(t) => all.push(t.to_string()),
            Err(_) => wrong = wrong.or(Some(unreadable(name))),
        }
    }
    if other_scheme && !all.is_empty() && wrong.is_none() {
        wrong = Some(Error::invalid(
            "Authorization: only the Bearer scheme is taken, and the request carries another credential beside it; send one",
        ));
    }
    (all, wrong)
}

/// A `Bearer` token from an authorization value, the scheme in any case.
pub fn bearer_token(value: &str) -> Option<String> {
    let (scheme, t) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| t.trim().to_string())
}

/// The error of a request that ran past its time budget (`limits.request_timeout_ms`), the
/// same on every front-end.
pub fn over_budget(budget: std::time::Duration) -> Error {
    Error::new(
        crate::error::ErrorCode::Timeout,
        format!("request exceeded its {} ms time budget", budget.as_millis()),
    )
}

/// Rejects JSON nested deeper than `max` before parsing (a bounded scan, no recursion).
pub(crate) fn check_depth(body: &[u8], max: usize) -> Result<()> {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for &b in body {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(Error::invalid(format!(
                        "JSON is nested deeper than {max} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_depth;

    #[test]
    fn depth_check_ignores_brackets_in_strings() {
        assert!(check_depth(br#"{"a": "[[[[[[[[[[[[["}"#, 2).is_ok());
        assert!(check_depth(br#"{"a": [[1]]}"#, 2).is_err());
        assert!(check_depth(br#"{"a": "\"[[[", "b": [1]}"#, 2).is_ok());
    }
}
