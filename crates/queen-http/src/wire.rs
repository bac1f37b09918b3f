//! What every handler shares about the wire: the one name rule for queue,
//! partition and consumer-group names (`queen_engine::naming::name_problem`),
//! applied to the names a path carries before any handler runs, and to the
//! names query strings and bodies carry by the handlers that read them.

use crate::error::HttpError;

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
