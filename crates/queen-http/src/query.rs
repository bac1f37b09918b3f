//! Query strings and path segments, parsed the way the reference broker does
//! (wire-api.md §0.6): values percent-decoded with `+` as space; booleans are
//! true for `true` or `1`, anything else is the default; unparsable integers
//! are the default. Path segments are percent-decoded too (a superset of the
//! reference, which did not decode them; names are normally plain).

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::error::HttpError;

/// A parsed query string. A repeated key keeps its first value.
#[derive(Debug, Default)]
pub(crate) struct Query {
    pairs: HashMap<String, String>,
}

impl Query {
    /// Parse the query part of a URI (`None` when there is none).
    pub(crate) fn parse(query: Option<&str>) -> Query {
        let mut pairs = HashMap::new();
        if let Some(query) = query {
            for (key, value) in form_urlencoded::parse(query.as_bytes()) {
                pairs
                    .entry(key.into_owned())
                    .or_insert_with(|| value.into_owned());
            }
        }
        Query { pairs }
    }

    /// The value of `key`, if present (possibly empty).
    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        self.pairs.get(key).map(String::as_str)
    }

    /// The value of `key`, if present and non-empty.
    pub(crate) fn non_empty(&self, key: &str) -> Option<&str> {
        self.str(key).filter(|value| !value.is_empty())
    }

    /// `true` for `true` or `1`; otherwise `default`.
    pub(crate) fn bool(&self, key: &str, default: bool) -> bool {
        match self.str(key) {
            Some("true" | "1") => true,
            _ => default,
        }
    }

    /// An integer, or `default` when absent or unparsable.
    pub(crate) fn int(&self, key: &str, default: i64) -> i64 {
        self.str(key)
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(default)
    }

    /// An ISO-8601 instant, if present; anything else is 400 naming `key`.
    pub(crate) fn instant(&self, key: &str) -> Result<Option<SystemTime>, HttpError> {
        self.non_empty(key)
            .map(|text| {
                crate::wire::parse_timestamp(text).ok_or_else(|| {
                    HttpError::Validation(format!("{key} must be an ISO-8601 timestamp"))
                })
            })
            .transpose()
    }

    /// A name filter (queue, partition, ...), if present, under the one name
    /// rule.
    pub(crate) fn name(&self, key: &str) -> Result<Option<&str>, HttpError> {
        match self.non_empty(key) {
            Some(value) => {
                crate::wire::name(key, value)?;
                Ok(Some(value))
            }
            None => Ok(None),
        }
    }

    /// `from` and `to`: `to` defaults to now, `from` to `window` before
    /// `to`; `from` after `to` is 400.
    pub(crate) fn window(&self, window: Duration) -> Result<(SystemTime, SystemTime), HttpError> {
        let to = self.instant("to")?.unwrap_or_else(SystemTime::now);
        let from = self
            .instant("from")?
            .unwrap_or_else(|| to.checked_sub(window).unwrap_or(to));
        if from > to {
            return Err(HttpError::Validation(
                "from must not be after to".to_owned(),
            ));
        }
        Ok((from, to))
    }
}

/// Split a path into percent-decoded segments, dropping empty ones. A
/// segment whose escapes do not decode to UTF-8 (`%ff`) is 400: decoded
/// lossily it would name something else (U+FFFD).
pub(crate) fn segments(path: &str) -> Result<Vec<Cow<'_, str>>, HttpError> {
    path.split('/')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .map_err(|_| {
                    HttpError::Validation(
                        "path must be valid UTF-8 once percent-decoded".to_owned(),
                    )
                })
        })
        .collect()
}

/// The path as the router reads it: its decoded segments joined by `/`
/// after a leading `/` (empty segments dropped), what `JWT_SKIP_PATHS` is
/// matched against.
pub(crate) fn normalised(segments: &[&str]) -> String {
    let mut path = String::from("/");
    path.push_str(&segments.join("/"));
    path
}

/// Check a query string before any handler reads it: every key and value
/// must decode to UTF-8 (400 otherwise, instead of a lossy U+FFFD) and obey
/// the one text rule (`wire::text`: no NUL).
pub(crate) fn check(query: Option<&str>) -> Result<(), HttpError> {
    let Some(query) = query else {
        return Ok(());
    };
    let decode = |part: &str| -> Result<String, HttpError> {
        let spaced = part.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8()
            .map(Cow::into_owned)
            .map_err(|_| {
                HttpError::Validation(
                    "query string must be valid UTF-8 once percent-decoded".to_owned(),
                )
            })
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key)?;
        crate::wire::text("query parameter names", &key)?;
        crate::wire::text(&key, &decode(value)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_decoded_and_typed_like_the_reference() {
        let query = Query::parse(Some(
            "batch=10&wait=1&autoAck=yes&consumerGroup=a+b%2Fc&timeout=abc&empty=&batch=99",
        ));
        assert_eq!(
            query.int("batch", 1),
            10,
            "a repeated key keeps its first value"
        );
        assert!(query.bool("wait", false));
        assert!(!query.bool("autoAck", false), "only true or 1 are true");
        assert!(query.bool("missing", true));
        assert_eq!(query.str("consumerGroup"), Some("a b/c"));
        assert_eq!(query.int("timeout", 30_000), 30_000);
        assert_eq!(query.non_empty("empty"), None);
        assert_eq!(query.str("empty"), Some(""));
        assert_eq!(Query::parse(None).int("batch", 7), 7);
    }

    #[test]
    fn path_segments_are_percent_decoded_after_splitting() {
        let parts = segments("/api/v1/pop/queue/my%20queue/partition/a%2Fb/").unwrap();
        assert_eq!(
            parts,
            ["api", "v1", "pop", "queue", "my queue", "partition", "a/b"]
        );
        assert!(segments("/api/v1/pop/queue/%ff").is_err());
        assert!(segments("/api/v1/pop/queue/%EF%BF%BD").is_ok());
        assert_eq!(normalised(&["api", "v1"]), "/api/v1");
        assert_eq!(normalised(&[]), "/");
    }

    #[test]
    fn a_query_must_decode_to_utf8_without_nul() {
        assert!(check(None).is_ok());
        assert!(check(Some("queue=a+b&x=%E2%82%AC&flag")).is_ok());
        let error = |query: &str| check(Some(query)).unwrap_err().to_string();
        assert_eq!(
            error("queue=%ff"),
            "query string must be valid UTF-8 once percent-decoded"
        );
        assert_eq!(
            error("hostname=a%00b"),
            "hostname must not contain NUL characters"
        );
        assert_eq!(
            error("a%00=1"),
            "query parameter names must not contain NUL characters"
        );
    }
}
