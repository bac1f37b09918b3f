//! What every handler shares about the wire: the one name rule for queue,
//! partition and consumer-group names (`queen_engine::naming::name_problem`),
//! applied to the names a path carries before any handler runs, and to the
//! names query strings and bodies carry by the handlers that read them; and
//! the one ISO-8601 parser and the two formats timestamps go out in.

use std::time::SystemTime;

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

/// The name kind of each path segment that follows a static one: in every
/// route a parameter comes right after the word saying what it is
/// (`queue/<name>`, `queues/<name>`, `partition/<name>`,
/// `partitions/<name>`, `consumer-groups/<name>`). The static words that
/// follow such a word (`consumer-groups/lagging`) are not names.
fn path_name_kind(previous: &str, segment: &str) -> Option<&'static str> {
    match previous {
        "queue" | "queues" => Some("queue"),
        "partition" | "partitions" => Some("partition"),
        "consumer-groups" if segment != "lagging" => Some("consumerGroup"),
        _ => None,
    }
}

/// Check every name a request path carries.
pub(crate) fn path_names(segments: &[&str]) -> Result<(), HttpError> {
    for pair in segments.windows(2) {
        if let [previous, segment] = pair {
            if let Some(kind) = path_name_kind(previous, segment) {
                name(kind, segment)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_name_in_a_path_is_checked_and_static_words_are_not() {
        let ok = [
            "api",
            "v1",
            "consumer-groups",
            "g",
            "queues",
            "q",
            "partitions",
            "p",
            "seek",
        ];
        assert!(path_names(&ok).is_ok());
        assert!(path_names(&["api", "v1", "consumer-groups", "lagging"]).is_ok());
        for (path, field) in [
            (&["api", "v1", "pop", "queue", "a\u{1}"][..], "queue"),
            (
                &["api", "v1", "pop", "queue", "q", "partition", "\n"][..],
                "partition",
            ),
            (&["api", "v1", "resources", "queues", "a\u{0}"][..], "queue"),
            (
                &["api", "v1", "consumer-groups", "g\u{7f}"][..],
                "consumerGroup",
            ),
        ] {
            let Err(HttpError::Validation(message)) = path_names(path) else {
                panic!("{path:?} passed");
            };
            assert_eq!(
                message,
                format!("{field} must not contain control characters")
            );
        }
    }
}
