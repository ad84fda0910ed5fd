//! HTTP front-end: REST under `/api/v1`, the Protocol v1 envelope at `/protocol/v1/execute`,
//! `/health`, `/metrics`, and the settings routes.

mod rest;

use crate::config::Limits;
use crate::engine::{Engine, Envelope, Transport};
use crate::error::{Error, ErrorCode, Result};
use crate::metrics::Metrics;
use crate::protocol::{self, render, RequestEnvelope, PROTOCOL_VERSION};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type HttpResponse = Response<Full<Bytes>>;

/// Everything a request handler needs; shared by all connections.
pub struct HttpState {
    pub engine: Arc<Engine>,
    pub metrics: Metrics,
    pub limits: Limits,
    /// List results flat (`data: [...], total`) instead of SPEC.md's `data: {data, total}`.
    pub flat_lists: bool,
}

/// Serves one accepted connection until it closes.
pub fn connection_builder() -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(1024 * 1024);
    b
}

fn json_response<T: serde::Serialize + ?Sized>(status: u16, body: &T) -> HttpResponse {
    bytes_response(status, serde_json::to_vec(body).unwrap_or_default())
}

fn bytes_response(status: u16, bytes: Vec<u8>) -> HttpResponse {
    let mut r = Response::new(Full::new(Bytes::from(bytes)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn text_response(status: u16, body: String, content_type: &'static str) -> HttpResponse {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// REST error body (BEHAVIOUR.md §4).
fn rest_error(e: &Error) -> HttpResponse {
    let status = e.code.http_status();
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    json_response(
        status,
        &json!({"success": false, "statusCode": status, "error": reason, "code": e.code.as_str(), "message": e.message}),
    )
}

fn protocol_error(e: &Error) -> HttpResponse {
    json_response(e.code.http_status(), &render::error(e))
}

/// The headers `RequestMeta` reads: the tenant (two names), the transaction, the credential
/// (three names, `Authorization` first).
const NAMES_READ: [&str; 6] = [
    "x-service-tenant",
    "x-rushdb-tenant",
    "x-transaction-id",
    "authorization",
    "x-service-token",
    "token",
];

/// Parts of a request that travel into the envelope.
pub struct RequestMeta {
    credential: Option<String>,
    /// The credential once the engine verified it (`verify`): the envelopes carry it.
    verified: Option<crate::engine::Verified>,
    tenant: Option<String>,
    transaction: Option<String>,
    /// A tenant or transaction header whose value is not UTF-8, or a credential, tenant or
    /// transaction sent with different values: the request is refused (`readable`) once its
    /// credential is checked.
    unreadable: Option<Error>,
}

impl RequestMeta {
    fn from_headers(h: &HeaderMap) -> Self {
        // One pass over the headers (a request has a handful; a lookup by name hashes the
        // name each time), each value of a name read here kept in the order sent.
        let mut by_name: [Vec<&HeaderValue>; NAMES_READ.len()] = Default::default();
        for (name, value) in h {
            if let Some(i) = NAMES_READ.iter().position(|n| *n == name.as_str()) {
                by_name[i].push(value);
            }
        }
        let mut unreadable = None;
        let mut text = |of: std::ops::Range<usize>, label: &str| {
            let mut values = Vec::new();
            for i in of {
                for v in &by_name[i] {
                    match crate::wire::header_text(NAMES_READ[i], v.as_bytes()) {
                        Ok(s) => values.push(s.to_string()),
                        Err(e) => {
                            unreadable.get_or_insert(e);
                            return None;
                        }
                    }
                }
            }
            crate::wire::one_value(label, values)
                .map_err(|e| unreadable.get_or_insert(e).clone())
                .ok()
                .flatten()
        };
        let tenant = text(0..2, "X-Service-Tenant and X-RushDB-Tenant");
        let transaction = text(2..3, "X-Transaction-Id");
        // Every credential sent, `Authorization: Bearer` first. Different or unreadable
        // credentials are refused once the credential is checked; the first one sent stands
        // for them meanwhile (a wrong one answers 401 as usual).
        let extra =
            (4..NAMES_READ.len()).flat_map(|i| by_name[i].iter().map(move |v| (NAMES_READ[i], *v)));
        let (all, wrong) = crate::wire::credentials(by_name[3].iter().copied(), extra);
        if let Some(e) = wrong {
            unreadable.get_or_insert(e);
        }
        let (credential, differ) =
            crate::wire::first_of("Authorization, X-Service-Token and token", all);
        if let Some(e) = differ {
            unreadable.get_or_insert(e);
        }
        RequestMeta {
            credential,
            verified: None,
            tenant,
            transaction,
            unreadable,
        }
    }

    /// Has the engine verify the credential (with the tenant header, as every route's first
    /// check) and keeps the answer for this request's envelopes; then refuses a request whose
    /// headers could not be read.
    fn verify(&mut self, engine: &Engine) -> Result<()> {
        self.verified =
            Some(engine.verify_for(self.credential.as_deref(), self.tenant.as_deref())?);
        self.readable()
    }

    /// Refuses a request whose tenant or transaction header could not be read.
    fn readable(&self) -> Result<()> {
        match &self.unreadable {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn envelope(
        &self,
        transport: Transport,
        scope: Option<String>,
        operation: protocol::Operation,
    ) -> Envelope {
        Envelope {
            credential: self.credential.clone(),
            verified: self.verified.clone(),
            tenant_header: self.tenant.clone(),
            scope,
            transport,
            transaction: self.transaction.clone(),
            operation,
        }
    }

    /// The same request without a transaction id (the `/tx` routes address theirs by path).
    fn outside_transaction(&self) -> RequestMeta {
        RequestMeta {
            credential: self.credential.clone(),
            verified: self.verified.clone(),
            tenant: self.tenant.clone(),
            transaction: None,
            unreadable: self.unreadable.clone(),
        }
    }
}

/// Reads the whole body within the size cap (413 above it, checked on `Content-Length`
/// before reading and while reading). Every request's body is read before routing, so a
/// response that refuses the request early still leaves the connection reusable.
async fn read_body(headers: &HeaderMap, body: Incoming, limits: &Limits) -> Result<Bytes> {
    let too_large = || {
        Error::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request body is larger than {} bytes",
                limits.max_body_bytes
            ),
        )
    };
    if declared_length(headers).is_some_and(|len| len > limits.max_body_bytes) {
        return Err(too_large());
    }
    // A request without a body (most GETs) has nothing to collect.
    if hyper::body::Body::is_end_stream(&body) {
        return Ok(Bytes::new());
    }
    Ok(Limited::new(body, limits.max_body_bytes as usize)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                too_large()
            } else {
                Error::invalid(format!("could not read the request body: {e}"))
            }
        })?
        .to_bytes())
}

/// Parses a body as a JSON object (an empty body is `{}`), after the depth check.
pub(crate) fn parse_json(body: &Bytes, limits: &Limits) -> Result<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    super::check_depth(body, limits.max_json_depth)?;
    match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(Error::invalid("body must be a JSON object")),
        Err(e) => Err(Error::invalid(format!("malformed JSON body: {e}"))),
    }
}

/// Decodes a request body that must be a JSON object into `T`. Straight from the bytes when
/// that succeeds; any failure takes the two-step path (`parse_json`, then
/// `protocol::decode`), which names what is wrong, so an error reads the same whichever path
/// ran. Invariant: the direct path accepts nothing the two-step path refuses. It runs only on
/// a body that starts with `{`, passes the depth cap and is [`plain_json`]; serde_json then
/// decodes a struct from the bytes as it does from the parsed value.
pub(crate) fn decode_json_body<T: serde::de::DeserializeOwned>(
    body: &Bytes,
    limits: &Limits,
) -> Result<T> {
    // serde_json refuses a value nested 128 deep when it keeps it but not when it skips an
    // ignored field: the direct path takes only bodies less deep than that.
    if direct_decodable(body, limits.max_json_depth.min(127)) {
        if let Ok(v) = serde_json::from_slice(body) {
            return Ok(v);
        }
    }
    protocol::decode(parse_json(body, limits)?, "body")
}

/// Whether `decode_json_body` may decode `body` straight from the bytes; one pass. It must:
/// - start with `{` (after whitespace) and hold no `[` anywhere: serde's structs also read an
///   array by position, and only the two-step path refuses one given for an object
///   (`protocol::strict`);
/// - nest at most `max_depth` deep;
/// - hold none of what serde_json checks only in a value it keeps, which the two-step path
///   refuses even in a field the target struct ignores, where the direct path only skips
///   them: invalid UTF-8, a `\u` escape (a lone surrogate is refused when kept), a number
///   that might be out of range (an exponent, or more than 18 digits in a row).
///
/// Conservative: false sends a body down the two-step path, which decides.
fn direct_decodable(body: &[u8], max_depth: usize) -> bool {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
        || std::str::from_utf8(body).is_err()
    {
        return false;
    }
    let (mut i, mut depth, mut digits) = (0, 0usize, 0);
    while let Some(&b) = body.get(i) {
        i += 1;
        match b {
            b'"' => loop {
                // Inside a string, up to its closing quote.
                let Some(&c) = body.get(i) else {
                    return false;
                };
                i += 1;
                match c {
                    b'"' => break,
                    b'[' => return false,
                    b'\\' => match body.get(i) {
                        Some(b'u') | None => return false,
                        Some(_) => i += 1,
                    },
                    _ => {}
                }
            },
            b'0'..=b'9' => {
                digits += 1;
                if digits > 18 {
                    return false;
                }
                continue;
            }
            b'e' | b'E' if digits > 0 => return false,
            b'[' => return false,
            b'{' => {
                depth += 1;
                if depth > max_depth {
                    return false;
                }
            }
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        digits = 0;
    }
    true
}

/// Entry of every HTTP request: routes, times, counts.
pub async fn handle(
    state: Arc<HttpState>,
    req: Request<Incoming>,
) -> std::result::Result<HttpResponse, std::convert::Infallible> {
    let start = Instant::now();
    let method = method_name(req.method());
    let timeout = Duration::from_millis(state.limits.request_timeout_ms);
    // Errors found before routing answer in the path's own envelope.
    let protocol_path = req.uri().path().starts_with("/protocol/");
    let early_error = |e: &Error| {
        if protocol_path {
            protocol_error(e)
        } else {
            rest_error(e)
        }
    };
    // A plain read without a body that the engine answers on this task (a record, a
    // property, a modest listing) needs none of what follows: no request future is built,
    // boxed or timed. Anything else about it (a refusal, a framing error) is left to the
    // usual path, which answers it as ever. (Not counted in flight: it is over before this
    // task could run anything else.)
    let now = if declared_length(req.headers()) == Some(0)
        && check_framing(req.headers(), req.version()).is_ok()
    {
        rest::answer_now(&state, req.method(), req.uri(), req.headers())
    } else {
        None
    };
    // Boxed where it is made (a local holding it would be kept in this future's state too):
    // each wrapper below, and hyper, which moves this handler's future into its connection
    // state, would otherwise copy it again. It is ~1.2 KiB: `route` boxes the routers' own
    // futures (REST's is ~2.3 KiB, the largest of its routes' held inline).
    let work: Pin<Box<dyn Future<Output = (&'static str, HttpResponse)> + Send + '_>> = match now {
        Some(rest::Now::Answered(route, resp)) => {
            state
                .metrics
                .observe(route, method, resp.status().as_u16(), start.elapsed());
            return Ok(resp);
        }
        Some(rest::Now::Pending(route, answer)) => Box::pin(async move { (route, answer.await) }),
        None => Box::pin(async {
            let (parts, body) = req.into_parts();
            if let Err(e) = check_framing(&parts.headers, parts.version)
                .and_then(|_| credential_before_large_body(&state, &parts))
            {
                let route = if protocol_path {
                    "/protocol/v1/execute"
                } else {
                    "/api/v1"
                };
                let mut resp = early_error(&e);
                // The body was not read, so the connection cannot be reused.
                resp.headers_mut()
                    .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                return (route, resp);
            }
            match read_body(&parts.headers, body, &state.limits).await {
                Ok(bytes) => route(&state, Request::from_parts(parts, bytes)).await,
                Err(e) => ("body", early_error(&e)),
            }
        }),
    };
    let work = crate::activity::serve(crate::activity::within(timeout, work));
    let (route, resp) = match work.await {
        Some(r) => r,
        None => ("timeout", early_error(&super::over_budget(timeout))),
    };
    let mut resp = resp;
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
        // The rest of the body was not read, so the connection cannot be reused.
        resp.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    state
        .metrics
        .observe(route, method, resp.status().as_u16(), start.elapsed());
    Ok(resp)
}

/// A body past this many bytes (or of unknown length) is read only after the request's
/// credential passed: an unauthenticated client cannot make the server take in up to the
/// body cap. Smaller bodies are read first, and the route checks the credential as before
/// (checking it twice on every request would cost the hot paths).
const UNCHECKED_BODY_BYTES: u64 = 64 * 1024;

/// The body length a request declares: its Content-Length, or 0 without Content-Length and
/// Transfer-Encoding (HTTP/1.1: no body, as a GET's); None when unknown (chunked, unreadable).
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    match headers.get(CONTENT_LENGTH) {
        Some(v) => v.to_str().ok()?.parse::<u64>().ok(),
        None if !headers.contains_key(hyper::header::TRANSFER_ENCODING) => Some(0),
        None => None,
    }
}

/// The credential check of an authenticated route, made before a large body is read.
fn credential_before_large_body(
    state: &HttpState,
    parts: &hyper::http::request::Parts,
) -> Result<()> {
    if declared_length(&parts.headers).is_some_and(|n| n <= UNCHECKED_BODY_BYTES) {
        return Ok(());
    }
    let path = parts.uri.path();
    let open = path.trim_end_matches('/') == "/api/v1/settings";
    if open || !(path.starts_with("/api/v1/") || path.starts_with("/protocol/")) {
        return Ok(());
    }
    let meta = RequestMeta::from_headers(&parts.headers);
    state
        .engine
        .authenticate_for(meta.credential.as_deref(), meta.tenant.as_deref())?;
    meta.readable()
}

fn method_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The method a request is routed as: HEAD is GET without the body (RFC 9110 §9.3.2), and
/// hyper, which read the request line, sends the answer's headers only.
fn routed_as(method: &Method) -> &Method {
    if method == Method::HEAD {
        &Method::GET
    } else {
        method
    }
}

/// Dispatches on path; returns the route template (for metrics) and the response.
async fn route(state: &HttpState, mut req: Request<Bytes>) -> (&'static str, HttpResponse) {
    let method = routed_as(req.method()).clone();
    *req.method_mut() = method;
    // A clone of the URI shares its bytes (the request moves into the router).
    let uri = req.uri().clone();
    let path = match uri.path().trim_end_matches('/') {
        "" => "/",
        p => p,
    };
    // The routers' futures are boxed apart: held inline, the largest sized every request's
    // future (~9.4 KiB), which `handle` copies whole into its box on every request.
    match (req.method().clone(), path) {
        (Method::GET, "/health") => ("/health", json_response(200, &json!({"status": "ok"}))),
        (Method::GET, "/api/v1/settings") => ("/api/v1/settings", settings(state)),
        (Method::GET, "/metrics") => ("/metrics", metrics(state, req.headers()).await),
        (Method::POST, "/protocol/v1/execute") => (
            "/protocol/v1/execute",
            Box::pin(execute_protocol(state, req)).await,
        ),
        (_, p) if p.starts_with("/.well-known/") || p.starts_with("/oauth/") => (
            "/oauth",
            rest_error(&Error::unsupported("the OAuth 2.1 authorization server")),
        ),
        (_, p) if p.starts_with("/api/v1/") => Box::pin(rest::route(state, req)).await,
        (_, p) => {
            let e = Error::not_found(format!(
                "no route for {} {}",
                req.method(),
                crate::model::truncate(path, 200)
            ));
            // Under /protocol/ in the Protocol v1 error envelope, as every answer there
            // (the path as sent: `/protocol/` itself trims to `/protocol`).
            let resp = if p.starts_with("/protocol/") || req.uri().path().starts_with("/protocol/")
            {
                protocol_error(&e)
            } else {
                rest_error(&e)
            };
            ("unmatched", resp)
        }
    }
}

/// What RFC 9112 asks of a request's framing that hyper leaves to the server: an HTTP/1.1
/// request carries exactly one `Host` (§3.2: 400), and a request body is coded with nothing
/// but `chunked` (§6.1: 501 for a transfer coding the server does not know; hyper would pass
/// the body on still coded).
fn check_framing(headers: &HeaderMap, version: hyper::Version) -> Result<()> {
    let hosts = headers.get_all(hyper::header::HOST).iter().count();
    if hosts > 1 || (hosts == 0 && version == hyper::Version::HTTP_11) {
        return Err(Error::invalid(
            "Host: an HTTP/1.1 request carries exactly one Host header (RFC 9112, section 3.2)",
        ));
    }
    for v in headers.get_all(hyper::header::TRANSFER_ENCODING) {
        let codings = v.to_str().unwrap_or("?");
        if let Some(c) = codings
            .split(',')
            .map(str::trim)
            .find(|c| !c.eq_ignore_ascii_case("chunked"))
        {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                format!(
                    "Transfer-Encoding {}: only chunked is supported",
                    crate::model::truncate(c, 100)
                ),
            ));
        }
    }
    Ok(())
}

fn settings(state: &HttpState) -> HttpResponse {
    let b = state.engine.build_info();
    json_response(
        200,
        &json!({"success": true, "data": {
            "selfHosted": true,
            "version": b.version,
            "protocolVersion": PROTOCOL_VERSION,
            "storageFormatVersion": b.storage_format_version,
            "multitenant": b.multitenant,
            "restEnvelope": if state.flat_lists { "flat" } else { "spec" },
            "features": {
                "records": true, "search": true, "relationships": true, "transactions": true,
                "import": true, "export": true, "vectorSearch": false, "sql": false, "bolt": false, "grpc": true
            }
        }}),
    )
}

async fn metrics(state: &HttpState, headers: &HeaderMap) -> HttpResponse {
    let meta = RequestMeta::from_headers(headers);
    if let Err(e) = state
        .engine
        .authorize_metrics(meta.credential.as_deref(), meta.tenant.as_deref())
        .and_then(|_| meta.readable())
    {
        return rest_error(&e);
    }
    match state.engine.totals() {
        Ok((records, tenants)) => text_response(
            200,
            state
                .metrics
                .render(records, tenants, state.engine.key_memo()),
            "text/plain; version=0.0.4",
        ),
        Err(e) => rest_error(&e),
    }
}

/// SPEC.md: a request whose body cannot be parsed requires `write`; without it the answer is
/// 403, not the parse error.
pub(crate) fn unparseable(state: &HttpState, meta: &RequestMeta, e: Error) -> Error {
    match state
        .engine
        .authorize_unparseable(meta.credential.as_deref())
    {
        Err(denied) => denied,
        Ok(()) => e,
    }
}

async fn execute_protocol(state: &HttpState, req: Request<Bytes>) -> HttpResponse {
    let mut meta = RequestMeta::from_headers(req.headers());
    let result = async {
        // The credential is checked before the body is read or parsed.
        meta.verify(&state.engine)?;
        let body =
            parse_json(req.body(), &state.limits).map_err(|e| unparseable(state, &meta, e))?;
        if let Some(v) = body.get("protocolVersion") {
            protocol::check_version(v.as_i64(), v)?;
        }
        let env: RequestEnvelope =
            protocol::decode(body, "body").map_err(|e| unparseable(state, &meta, e))?;
        let scope = env.context.and_then(|c| c.scope);
        let outcome = state
            .engine
            .execute(meta.envelope(Transport::Protocol, scope, env.operation))
            .await?;
        Ok(bytes_response(200, render::success_bytes(&outcome)))
    }
    .await;
    result.unwrap_or_else(|e| protocol_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::Map;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Options {
        return_result: Option<bool>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Body {
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        data: Option<Map<String, Value>>,
        #[serde(default)]
        limit: Option<i64>,
        #[serde(default)]
        ids: Option<Vec<String>>,
        #[serde(default)]
        options: Option<Options>,
        #[serde(default, rename = "where")]
        where_: Option<Value>,
    }

    /// `body` decodes on the direct path (`decode_json_body`) exactly as on the two-step path
    /// (`parse_json`, then `protocol::decode`): the same value, or an error with the same
    /// message.
    fn assert_same_on_both_paths(body: Bytes, limits: &crate::config::Limits) {
        let b = String::from_utf8_lossy(&body).to_string();
        let fast = decode_json_body::<Body>(&body, limits);
        let slow = parse_json(&body, limits).and_then(|v| protocol::decode::<Body>(v, "body"));
        match (&fast, &slow) {
            (Ok(f), Ok(s)) => assert_eq!(f, s, "{b}"),
            (Err(f), Err(s)) => assert_eq!(f.message, s.message, "{b}"),
            _ => panic!("{b}: fast {fast:?}, two-step {slow:?}"),
        }
    }

    /// The fast path answers exactly what the two-step path answers: the same value, or an
    /// error with the same message.
    #[test]
    fn a_body_decodes_the_same_straight_from_bytes_and_through_a_value() {
        let limits = crate::config::Limits {
            max_body_bytes: 1 << 20,
            max_json_depth: 4,
            request_timeout_ms: 1000,
            max_hops: 10,
        };
        let bodies: &[&str] = &[
            r#"{"label":"ORDER","data":{"total":12.5,"n":18446744073709551616,"s":"\u00e9"}}"#,
            r#"  {"label":"A","unknown":[1,2],"options":{"returnResult":true,"x":1}}"#,
            r#"{"label":null,"data":null,"where":null,"ids":["a","b"]}"#,
            r#"{"limit":10}"#,
            r#"{"limit":1.5}"#,
            r#"{"limit":"10"}"#,
            r#"{"label":1}"#,
            r#"{"ids":"a"}"#,
            r#"{"options":{"returnResult":"yes"}}"#,
            r#"{"label":"A","label":"B"}"#,
            r#"{"where":{"a":{"b":{"c":{"d":1}}}}}"#,
            r#"{"label":"A"} trailing"#,
            r#"{"label":"X","ignored":1e400}"#,
            r#"{"label":"X","ignored":1E4}"#,
            r#"{"label":"X","data":{"a":1.5e3}}"#,
            r#"{"label":"X","ignored":"\ud800"}"#,
            r#"{"label":"\u00e9\n","ignored":"\""}"#,
            r#"{"label":"X","ignored":123456789012345678901234567890}"#,
            r#"{"label":"X","ignored":[true,false,-0.5,"e1"]}"#,
            r#"{"label":"A""#,
            r#"["A",null]"#,
            r#""text""#,
            "   ",
            "",
        ];
        let mut bodies: Vec<Vec<u8>> = bodies.iter().map(|b| b.as_bytes().to_vec()).collect();
        bodies.push(b"{\"label\":\"X\",\"ignored\":\"\xc3\x28\"}".to_vec());
        bodies.push(b"{\"label\":\"\xc3\xa9\"}".to_vec());
        for raw in bodies {
            assert_same_on_both_paths(Bytes::from(raw), &limits);
        }
        // At the largest depth cap, 128 levels in an ignored field: serde_json refuses them
        // when it builds the value, so the direct path must not take the body.
        let deep = crate::config::Limits {
            max_json_depth: 128,
            ..limits
        };
        let body = Bytes::from(format!(r#"{{"x":{}{}}}"#, "[".repeat(127), "]".repeat(127)));
        assert!(parse_json(&body, &deep).is_err());
        assert_same_on_both_paths(body, &deep);
    }

    /// Random bodies pieced from fragments that touch every rule of `direct_decodable`
    /// (escapes, brackets inside and outside strings, digit runs, exponents, nesting, cut
    /// strings) decode the same on both paths; plain bodies take the direct path.
    #[test]
    fn random_bodies_decode_the_same_on_both_paths() {
        let limits = crate::config::Limits {
            max_body_bytes: 1 << 20,
            max_json_depth: 3,
            request_timeout_ms: 1000,
            max_hops: 10,
        };
        let values = [
            "1",
            "-0.5",
            "12345678901234567890",
            "1e3",
            "2E+1",
            "\"e1\"",
            "\"[x]\"",
            "\"a\\\"b\"",
            "\"\\u00e9\"",
            "\"\\ud800\"",
            "\"\\[\"",
            "[1,2]",
            "[]",
            "null",
            "true",
            "{}",
            "{\"k\":1}",
            "{\"k\":{\"j\":{\"i\":1}}}",
            "\"unterminated",
            "\"x\\",
        ];
        let keys = ["label", "data", "limit", "ids", "options", "where", "zz"];
        let mut rng = crate::store::kv::test_rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..4000 {
            let mut body = String::from("{");
            for f in 0..rng(4) {
                if f > 0 {
                    body.push(',');
                }
                let key = keys[rng(keys.len() as u64) as usize];
                let value = if key == "data" && rng(2) == 0 {
                    format!("{{\"a\":{}}}", values[rng(values.len() as u64) as usize])
                } else {
                    values[rng(values.len() as u64) as usize].to_string()
                };
                body.push_str(&format!("\"{key}\":{value}"));
            }
            body.push('}');
            assert_same_on_both_paths(Bytes::from(body), &limits);
        }
        let plain = br#"{"label":"ORDER","data":{"status":"paid","total":12.5,"n":"a\"b"}}"#;
        assert!(direct_decodable(plain, 3));
        assert!(!direct_decodable(plain, 1));
        assert!(!direct_decodable(br#"{"a":"x\u0041"}"#, 3));
        assert!(!direct_decodable(br#"{"a":"[x]"}"#, 3));
        assert!(!direct_decodable(br#"{"a":1e3}"#, 3));
        assert!(!direct_decodable(br#"{"a":1234567890123456789}"#, 3));
        assert!(direct_decodable(br#"{"a":123456789012345678,"e":"e1"}"#, 3));
    }
}
