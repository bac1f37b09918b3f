//! Names: the tenant, and namespace/task derived from a queue name.

/// The tenant of every queue while authentication is off.
pub const DEFAULT_TENANT: &str = "default";

/// The partition a push lands in when it names none.
pub const DEFAULT_PARTITION: &str = "Default";

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
    use super::derive_namespace_task;

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
