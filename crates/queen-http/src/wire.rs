//! What every handler shares about the wire: the one name rule for queue,
//! partition and consumer-group names (`queen_engine::naming::name_problem`),
//! which the route table applies to the names a path carries before any
//! handler runs, and handlers to the names query strings and bodies carry; and
//! the one ISO-8601 parser and the two formats timestamps go out in; the
//! coercion of integers and booleans in JSON bodies; and the one rule for
//! text that reaches a PostgreSQL `text` or `jsonb` column ([`text`]: no
//! NUL, which PostgreSQL refuses with an error that would otherwise be a
//! 500), applied by the router to every path parameter and query value and
//! by the body reader to every string of every JSON body ([`body_text`]).

use std::time::SystemTime;

use serde_json::Value;

use crate::error::HttpError;

/// An ISO-8601 / RFC 3339 timestamp, with an offset or `Z`; without one
/// (`2026-01-02T03:04:05`, `T` or a space), UTC, the broker's time zone.
/// Surrounding whitespace is ignored. Every route that reads a timestamp
/// (pop's `subscriptionFrom`, seek, subscription) reads it here.
pub(crate) fn parse_timestamp(text: &str) -> Option<SystemTime> {
    use time::format_description::well_known::Rfc3339;
    let text = text.trim();
    if let Ok(at) = time::OffsetDateTime::parse(text, &Rfc3339) {
        return Some(at.into());
    }
    const NAIVE: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day][first [T][ ]][hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    time::PrimitiveDateTime::parse(text, NAIVE)
        .ok()
        .map(|at| at.assume_utc().into())
}

/// An optional string field of a JSON body: absent or `null` is `None`,
/// anything but a string is refused naming `field`.
pub(crate) fn optional_string<'a>(
    body: &'a Value,
    field: &str,
) -> Result<Option<&'a str>, HttpError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(HttpError::Validation(format!("{field} must be a string"))),
    }
}

/// A timestamp field of a JSON body: an ISO-8601 string, with an offset or
/// `Z` (without one, UTC is assumed); `field` names it in the error.
pub(crate) fn timestamp(value: &Value, field: &str) -> Result<SystemTime, HttpError> {
    value
        .as_str()
        .and_then(parse_timestamp)
        .ok_or_else(|| HttpError::Validation(format!("{field} must be an ISO-8601 timestamp")))
}

/// `2026-01-01T00:00:00.123456Z`: UTC with microseconds, as messages,
/// dead letters and leases answer.
pub(crate) fn format_micros(at: SystemTime) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    time::OffsetDateTime::from(at)
        .format(FORMAT)
        .unwrap_or_default()
}

/// `2026-01-01T00:00:00.123Z`: UTC with milliseconds, as the consumer-group
/// views answer.
pub(crate) fn format_millis(at: SystemTime) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from(at)
        .format(FORMAT)
        .unwrap_or_default()
}

/// Refuse `value` as the `field` name unless it follows the name rule.
pub(crate) fn name(field: &str, value: &str) -> Result<(), HttpError> {
    match queen_engine::naming::name_problem(value) {
        Some(rule) => Err(HttpError::Validation(format!("{field} {rule}"))),
        None => Ok(()),
    }
}

/// The rule for text a request hands to PostgreSQL: it must not hold NUL
/// (U+0000), which `text` and `jsonb` cannot store. `field` names it in the
/// error.
pub(crate) fn text(field: &str, value: &str) -> Result<(), HttpError> {
    if value.contains('\0') {
        return Err(HttpError::Validation(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// Where a push item's payload sits in a body: the one string subtree of a
/// JSON body that is stored as bytes (a segment frame, a dead letter's
/// `bytea`), never as text, so a NUL in it is data.
///
/// A batch ack's transaction ids are only hashed, never stored as text
/// (a dead letter stores the frame's own id, with NUL replaced), so a
/// message stored with a NUL in its id before pushes refused one can still
/// be acked and dead-lettered through `/api/v1/ack/batch`.
const PAYLOADS: &[&[&str]] = &[
    &["items", "[]", "payload"],
    &["operations", "[]", "items", "[]", "payload"],
    &["push_items", "[]", "payload"],
    &["acknowledgments", "[]", "transactionId"],
];

/// [`text`] over every string of a JSON body, object keys included, but the
/// push payloads ([`PAYLOADS`]). Every request body passes here
/// (`body::read`). JSON can carry a NUL only as the escape `\u0000`, so a
/// body without that sequence is passed after one scan; one with it is
/// parsed and walked (a body that is not JSON is left to its handler's
/// parser, which names the problem).
pub(crate) fn body_text(bytes: &[u8]) -> Result<(), HttpError> {
    if !contains_nul_escape(bytes) {
        return Ok(());
    }
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    let mut path = Vec::new();
    walk_text(&value, &mut path)
}

/// Whether `bytes` hold `\u0000` (possibly as the tail of an escaped
/// backslash, which the walk then finds harmless).
fn contains_nul_escape(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    while let Some(at) = rest.iter().position(|&byte| byte == b'\\') {
        rest = &rest[at + 1..];
        if rest.starts_with(b"u0000") {
            return true;
        }
    }
    false
}

/// One step of a path into a JSON body.
enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

/// `items[0].transactionId`, for an error.
fn render_path(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Step::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    if out.is_empty() {
        out.push_str("body");
    }
    out
}

fn is_payload(path: &[Step<'_>]) -> bool {
    PAYLOADS.iter().any(|payload| {
        payload.len() == path.len()
            && payload.iter().zip(path).all(|(want, step)| match step {
                Step::Key(key) => want == key,
                Step::Index(_) => *want == "[]",
            })
    })
}

fn walk_text<'v>(value: &'v Value, path: &mut Vec<Step<'v>>) -> Result<(), HttpError> {
    if is_payload(path) {
        return Ok(());
    }
    match value {
        Value::String(text_value) => text(&render_path(path), text_value),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Step::Index(index));
                walk_text(item, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                if key.contains('\0') {
                    let field = format!("{} keys", render_path(path));
                    return text(&field, key);
                }
                path.push(Step::Key(key));
                walk_text(item, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// An integer in a JSON body: a JSON integer, a float with no fraction, or a
/// string holding an integer; non-negative and within `i32`. `field` names
/// it in the error (`options.leaseTime`, `seconds`).
pub(crate) fn integer(field: &str, value: &Value) -> Result<i32, HttpError> {
    let parsed = match value {
        Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(int), _, _) => from_i64(int),
            // Only integers past i64::MAX are u64 and not i64.
            (None, Some(_), _) => Err(Problem::TooLarge),
            (None, None, Some(float)) => from_f64(float),
            (None, None, None) => Err(Problem::NotInteger),
        },
        Value::String(text) => from_text(text),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => {
            Err(Problem::NotInteger)
        }
    };
    parsed.map_err(|problem| {
        let rule = match problem {
            Problem::NotInteger => "must be an integer".to_owned(),
            Problem::Negative => "must not be negative".to_owned(),
            Problem::TooLarge => format!("must be at most {}", i32::MAX),
        };
        HttpError::Validation(format!("{field} {rule}"))
    })
}

/// A boolean in a JSON body: a JSON boolean or the string `"true"` /
/// `"false"`.
pub(crate) fn boolean(field: &str, value: &Value) -> Result<bool, HttpError> {
    match value {
        Value::Bool(flag) => Ok(*flag),
        Value::String(text) if text == "true" => Ok(true),
        Value::String(text) if text == "false" => Ok(false),
        _ => Err(HttpError::Validation(format!("{field} must be a boolean"))),
    }
}

/// Why a value is not an acceptable integer option.
#[derive(Debug, PartialEq, Eq)]
enum Problem {
    NotInteger,
    Negative,
    TooLarge,
}

fn from_i64(int: i64) -> Result<i32, Problem> {
    if int < 0 {
        return Err(Problem::Negative);
    }
    i32::try_from(int).map_err(|_| Problem::TooLarge)
}

fn from_f64(float: f64) -> Result<i32, Problem> {
    if !float.is_finite() || float.fract() != 0.0 {
        return Err(Problem::NotInteger);
    }
    if float < 0.0 {
        return Err(Problem::Negative);
    }
    if float > f64::from(i32::MAX) {
        return Err(Problem::TooLarge);
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "float is integral and within 0..=i32::MAX, checked above"
    )]
    Ok(float as i32)
}

/// An integer written as text, as PostgreSQL's `integer` input reads it:
/// surrounding whitespace, an optional sign, decimal digits.
fn from_text(text: &str) -> Result<i32, Problem> {
    let trimmed = text.trim_ascii();
    let (negative, digits) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(Problem::NotInteger);
    }
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(Problem::Negative);
    }
    // Ten digits hold i32::MAX; more cannot fit, and must not overflow a parse.
    if significant.len() > 10 {
        return Err(Problem::TooLarge);
    }
    significant
        .parse::<i64>()
        .map_err(|_| Problem::NotInteger)
        .and_then(from_i64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check_integer(value: &Value, expected: Result<i32, &str>) {
        let got = integer("options.leaseTime", value).map_err(|error| error.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "{value}");
    }

    #[test]
    fn integer_options_accept_integers_integral_floats_and_integer_strings() {
        check_integer(&json!(30), Ok(30));
        check_integer(&json!(0), Ok(0));
        check_integer(&json!(2_147_483_647), Ok(i32::MAX));
        check_integer(&json!(30.0), Ok(30));
        check_integer(&json!(-0.0), Ok(0));
        check_integer(&json!("30"), Ok(30));
        check_integer(&json!(" 30 "), Ok(30));
        check_integer(&json!("+30"), Ok(30));
        check_integer(&json!("007"), Ok(7));
        check_integer(&json!("-0"), Ok(0));
        check_integer(&json!("2147483647"), Ok(i32::MAX));
    }

    #[test]
    fn integer_options_refuse_everything_else_naming_the_option() {
        let not_integer = Err("options.leaseTime must be an integer");
        let negative = Err("options.leaseTime must not be negative");
        let too_large = Err("options.leaseTime must be at most 2147483647");
        check_integer(&json!(1.5), not_integer);
        check_integer(&json!("abc"), not_integer);
        check_integer(&json!(""), not_integer);
        check_integer(&json!("-"), not_integer);
        check_integer(&json!("1.0"), not_integer);
        check_integer(&json!("1e3"), not_integer);
        check_integer(&json!("0x10"), not_integer);
        check_integer(&json!(true), not_integer);
        check_integer(&json!([1]), not_integer);
        check_integer(&json!({"n": 1}), not_integer);
        check_integer(&json!(-1), negative);
        check_integer(&json!(-1.0), negative);
        check_integer(&json!("-5"), negative);
        check_integer(&json!(i64::MIN), negative);
        check_integer(&json!(2_147_483_648_i64), too_large);
        check_integer(&json!(1_u64 << 40), too_large);
        check_integer(&json!(u64::MAX), too_large);
        check_integer(&json!(1e12), too_large);
        check_integer(&json!("2147483648"), too_large);
        check_integer(&json!("99999999999999999999999999"), too_large);
    }

    #[test]
    fn boolean_options_accept_booleans_and_their_strings_only() {
        let check = |value: Value, expected: Result<bool, &str>| {
            let got =
                boolean("options.encryptionEnabled", &value).map_err(|error| error.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "{value}");
        };
        check(json!(true), Ok(true));
        check(json!(false), Ok(false));
        check(json!("true"), Ok(true));
        check(json!("false"), Ok(false));
        let refused = Err("options.encryptionEnabled must be a boolean");
        for value in [
            json!("yes"),
            json!("TRUE"),
            json!(1),
            json!(0),
            json!([]),
            json!({}),
        ] {
            check(value, refused);
        }
    }

    #[test]
    fn a_nul_anywhere_but_a_push_payload_is_refused_naming_where() {
        let check = |body: Value| body_text(body.to_string().as_bytes()).map_err(|e| e.to_string());
        assert_eq!(
            check(json!({"items": [{"queue": "q", "transactionId": "a\u{0}"}]})),
            Err("items[0].transactionId must not contain NUL characters".to_owned())
        );
        assert_eq!(
            check(json!({"data": {"k\u{0}": 1}})),
            Err("data keys must not contain NUL characters".to_owned())
        );
        assert_eq!(
            check(json!({"traceNames": ["ok", "\u{0}"]})),
            Err("traceNames[1] must not contain NUL characters".to_owned())
        );
        assert_eq!(
            check(json!({"data": {"items": [{"payload": "\u{0}"}]}})),
            Err("data.items[0].payload must not contain NUL characters".to_owned())
        );
        assert!(check(json!({"items": [{"queue": "q", "payload": {"a\u{0}": "\u{0}"}}]})).is_ok());
        assert!(check(json!({"operations": [{"items": [{"payload": "\u{0}"}]}]})).is_ok());
        assert!(check(json!({"push_items": [{"payload": ["\u{0}"]}]})).is_ok());
        assert!(check(json!({"text": "a\\u0000 is an escaped backslash"})).is_ok());
        assert!(body_text(b"not json \\u0000").is_ok());
        assert_eq!(
            text("hostname", "a\0").unwrap_err().to_string(),
            "hostname must not contain NUL characters"
        );
    }

    #[test]
    fn timestamps_parse_with_an_offset_a_z_or_none() {
        let z = parse_timestamp("2026-01-02T03:04:05.678Z").unwrap();
        assert_eq!(format_millis(z), "2026-01-02T03:04:05.678Z");
        assert_eq!(format_micros(z), "2026-01-02T03:04:05.678000Z");
        let offset = parse_timestamp("2026-01-02T05:04:05.678+02:00").unwrap();
        assert_eq!(offset, z);
        assert_eq!(parse_timestamp("2026-01-02T03:04:05.678").unwrap(), z);
        assert_eq!(parse_timestamp(" 2026-01-02 03:04:05.678 ").unwrap(), z);
        assert!(parse_timestamp("yesterday").is_none());
        assert!(parse_timestamp("").is_none());
    }
}
