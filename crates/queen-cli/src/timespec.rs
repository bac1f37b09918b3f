//! The times flags accept (`replay --to`, `dlq --from/--to`, `tail --since`),
//! the reference CLI's forms: `now`; `beginning` (also `earliest`,
//! `start`); a duration ago, `15m ago` or bare `15m` (humantime units:
//! `s`, `m`, `h`, `d`, `w`, combinations such as `1h30m`); Unix seconds;
//! RFC 3339 (`2026-05-06T12:00:00Z`, any offset); `YYYY-MM-DD` (UTC
//! midnight); `YYYY-MM-DDTHH:MM:SS` (UTC).

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

use crate::error::CliError;

/// A point in time as the user wrote it, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Instant {
    /// Before every message.
    Beginning,
    /// This moment.
    Now,
    /// A moment.
    At(OffsetDateTime),
}

/// Parse `text` (see the module doc), relative forms against `now`.
pub(crate) fn parse(text: &str, now: OffsetDateTime) -> Result<Instant, CliError> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    match lower.as_str() {
        "" => return Err(CliError::Usage("empty time".to_owned())),
        "now" => return Ok(Instant::Now),
        "beginning" | "earliest" | "start" => return Ok(Instant::Beginning),
        _ => {}
    }
    // ASCII lowercasing keeps byte offsets; the duration keeps its case
    // (humantime's `M` is months, `m` minutes).
    let relative = if lower.ends_with(" ago") {
        trimmed[..trimmed.len() - " ago".len()].trim()
    } else {
        trimmed
    };
    if let Ok(ago) = humantime::parse_duration(relative) {
        return before(now, ago, trimmed);
    }
    if let Ok(seconds) = trimmed.parse::<i64>() {
        return OffsetDateTime::from_unix_timestamp(seconds)
            .map(Instant::At)
            .map_err(|_| CliError::Usage(format!("time {trimmed:?} is out of range")));
    }
    if let Ok(at) = OffsetDateTime::parse(trimmed, &Rfc3339) {
        return Ok(Instant::At(at));
    }
    let naive = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    if let Ok(at) = PrimitiveDateTime::parse(trimmed, naive) {
        return Ok(Instant::At(at.assume_offset(UtcOffset::UTC)));
    }
    let day = format_description!("[year]-[month]-[day]");
    if let Ok(date) = time::Date::parse(trimmed, day) {
        return Ok(Instant::At(date.midnight().assume_offset(UtcOffset::UTC)));
    }
    Err(CliError::Usage(format!(
        "unrecognised time {trimmed:?}: expected '15m ago', 'now', 'beginning', RFC 3339 \
         (2026-05-06T12:00:00Z), YYYY-MM-DD or Unix seconds"
    )))
}

fn before(now: OffsetDateTime, ago: Duration, text: &str) -> Result<Instant, CliError> {
    time::Duration::try_from(ago)
        .ok()
        .and_then(|ago| now.checked_sub(ago))
        .map(Instant::At)
        .ok_or_else(|| CliError::Usage(format!("time {text:?} is out of range")))
}

/// `at` as the broker reads timestamps: RFC 3339 in UTC with milliseconds.
pub(crate) fn format(at: OffsetDateTime) -> String {
    let utc = at.to_offset(UtcOffset::UTC);
    let description =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    utc.format(description)
        .unwrap_or_else(|_| utc.unix_timestamp().to_string())
}

/// `instant` as a timestamp (`beginning` is the Unix epoch).
pub(crate) fn timestamp(instant: Instant, now: OffsetDateTime) -> String {
    match instant {
        Instant::Beginning => format(OffsetDateTime::UNIX_EPOCH),
        Instant::Now => format(now),
        Instant::At(at) => format(at),
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn every_form_resolves() {
        let now = datetime!(2026-05-06 12:00:00 UTC);
        let at = |text: &str| match parse(text, now).unwrap() {
            Instant::At(at) => format(at),
            other => format!("{other:?}"),
        };
        assert_eq!(at("15m ago"), "2026-05-06T11:45:00.000Z");
        assert_eq!(at("2h"), "2026-05-06T10:00:00.000Z");
        assert_eq!(at("1d ago"), "2026-05-05T12:00:00.000Z");
        assert_eq!(at("1h30m ago"), "2026-05-06T10:30:00.000Z");
        assert_eq!(at("now"), "Now");
        assert_eq!(at("Beginning"), "Beginning");
        assert_eq!(at("1778068800"), "2026-05-06T12:00:00.000Z");
        assert_eq!(at("2026-05-06T14:00:00+02:00"), "2026-05-06T12:00:00.000Z");
        assert_eq!(at("2026-05-06T12:34:56.789Z"), "2026-05-06T12:34:56.789Z");
        assert_eq!(at("2026-05-06T01:02:03"), "2026-05-06T01:02:03.000Z");
        assert_eq!(at("2026-05-06"), "2026-05-06T00:00:00.000Z");
        assert_eq!(
            timestamp(Instant::Beginning, now),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn nonsense_is_refused_with_the_accepted_forms() {
        let now = datetime!(2026-05-06 12:00:00 UTC);
        for text in ["", "yesterday", "15 parsecs ago", "2026-13-40"] {
            let err = parse(text, now).unwrap_err().to_string();
            assert!(err.contains("time"), "{text}: {err}");
        }
    }
}
