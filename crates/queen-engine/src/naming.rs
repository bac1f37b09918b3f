//! Names: the tenant, and namespace/task derived from a queue name.

/// The tenant of every queue while authentication is off.
pub const DEFAULT_TENANT: &str = "default";

/// [`DEFAULT_TENANT`], shared: cloning it costs no allocation.
pub fn default_tenant() -> std::sync::Arc<str> {
    static DEFAULT: std::sync::LazyLock<std::sync::Arc<str>> =
        std::sync::LazyLock::new(|| std::sync::Arc::from(DEFAULT_TENANT));
    std::sync::Arc::clone(&DEFAULT)
}

/// What separates the tenant from the queue name in a [`queue_key`]: a
/// control character, which neither a tenant nor a queue name can hold
/// ([`name_problem`]), so a key names exactly one (tenant, queue).
const KEY_SEPARATOR: char = '\u{1f}';

/// The key of queue `(tenant, queue)` in the broker's in-memory state (the
/// hot-list rings, wake gates, configuration, encryption and dedup caches,
/// statistics): the bare name for the default tenant, `tenant` + U+001F +
/// `queue` otherwise. Two tenants' queues of one name never share a key.
pub fn queue_key<'a>(tenant: &str, queue: &'a str) -> std::borrow::Cow<'a, str> {
    if tenant == DEFAULT_TENANT {
        std::borrow::Cow::Borrowed(queue)
    } else {
        std::borrow::Cow::Owned(format!("{tenant}{KEY_SEPARATOR}{queue}"))
    }
}

/// The (tenant, queue) a [`queue_key`] names.
pub fn split_queue_key(key: &str) -> (&str, &str) {
    key.split_once(KEY_SEPARATOR)
        .unwrap_or((DEFAULT_TENANT, key))
}

/// A queue as a request names it: the tenant and the name (what SQL is
/// given) and the [`queue_key`] (what the in-memory state is keyed by).
#[derive(Debug, Clone)]
pub(crate) struct QueueRef<'a> {
    /// The tenant owning the queue.
    pub(crate) tenant: &'a str,
    /// The queue's name.
    pub(crate) name: &'a str,
    /// `queue_key(tenant, name)`.
    pub(crate) key: std::borrow::Cow<'a, str>,
}

impl<'a> QueueRef<'a> {
    /// Queue `name` of `tenant`.
    pub(crate) fn new(tenant: &'a str, name: &'a str) -> QueueRef<'a> {
        QueueRef {
            tenant,
            name,
            key: queue_key(tenant, name),
        }
    }
}

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
    use super::*;

    #[test]
    fn queue_keys_name_one_tenant_and_queue_and_split_back() {
        assert_eq!(queue_key(DEFAULT_TENANT, "q"), "q");
        assert_eq!(split_queue_key("q"), (DEFAULT_TENANT, "q"));
        let pairs = [("a", "b.c"), ("a.b", "c"), ("x", "q"), ("y", "q")];
        let keys: Vec<String> = pairs
            .iter()
            .map(|(tenant, queue)| queue_key(tenant, queue).into_owned())
            .collect();
        for (key, pair) in keys.iter().zip(pairs) {
            assert_eq!(split_queue_key(key), pair);
            assert_ne!(key, "q");
        }
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len());
    }

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
