//! Names: the tenant, and namespace/task derived from a queue name.

/// The tenant of every queue while authentication is off.
pub const DEFAULT_TENANT: &str = "default";

/// The partition a push lands in when it names none.
pub const DEFAULT_PARTITION: &str = "Default";

/// The longest queue, partition or consumer-group name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// The one rule for queue, partition and consumer-group names, on every
/// route and through every entry point: non-empty, at most
/// [`MAX_NAME_BYTES`] bytes, no control characters (PostgreSQL text cannot
/// hold NUL, and the others would make names that do not print or log
/// safely). Returns what is wrong with `name`, `None` when it is fine.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return Some("must be at most 255 bytes");
    }
    if name.chars().any(char::is_control) {
        return Some("must not contain control characters");
    }
    None
}

/// Namespace and task derived from a queue name when they are not configured
/// (decisions.md §1): the text before the first dot, and the second
/// dot-separated segment. A name without a dot has neither.
///
/// `billing.invoices.v2` → (`billing`, `invoices`); `plain` → (``, ``).
pub fn derive_namespace_task(queue: &str) -> (&str, &str) {
    let mut parts = queue.split('.');
    match (parts.next(), parts.next()) {
        (Some(namespace), Some(task)) => (namespace, task),
        _ => ("", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::{derive_namespace_task, name_problem, MAX_NAME_BYTES};

    #[test]
    fn one_name_rule_empty_long_and_control_characters() {
        assert_eq!(name_problem(""), Some("must not be empty"));
        assert_eq!(name_problem(&"x".repeat(MAX_NAME_BYTES)), None);
        assert_eq!(
            name_problem(&"x".repeat(MAX_NAME_BYTES + 1)),
            Some("must be at most 255 bytes")
        );
        for bad in ["a\0b", "a\nb", "tab\t", "\u{7f}", "\u{85}"] {
            assert_eq!(
                name_problem(bad),
                Some("must not contain control characters"),
                "{bad:?}"
            );
        }
        assert_eq!(name_problem("billing.invoices-v2/é 1"), None);
    }

    #[test]
    fn namespace_and_task_come_from_the_first_two_dot_segments() {
        assert_eq!(
            derive_namespace_task("billing.invoices.v2"),
            ("billing", "invoices")
        );
        assert_eq!(
            derive_namespace_task("billing.invoices"),
            ("billing", "invoices")
        );
        assert_eq!(derive_namespace_task("billing."), ("billing", ""));
        assert_eq!(derive_namespace_task("plain"), ("", ""));
        assert_eq!(derive_namespace_task(""), ("", ""));
    }
}
