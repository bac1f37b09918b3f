//! Queue configuration: create a queue or fully replace its settings.
//!
//! [`Queues::configure`] checks the request against the engine's own rules
//! (the ones that hold whatever the front end: name lengths, no NUL bytes, no
//! negative option), derives namespace and task when the caller has none,
//! applies the `lease_time` rule, and upserts the queue row and its `Default`
//! partition in one round trip. Every check runs before any I/O, so a refused
//! request writes nothing. Wire parsing (JSON types, option names, defaults for
//! omitted options, the echo) is the front end's job.

use std::sync::Arc;

use uuid::Uuid;

use crate::bounded::Bounded;
use crate::lifecycle::Db;
use crate::mesh::Changes;
use crate::naming::derive_namespace_task;
use crate::naming::queue_key;
use crate::EngineError;

pub use queen_sql::queues::QueueSettings;

pub use crate::naming::MAX_NAME_BYTES;

/// Create queue `(tenant, queue)`, or fully replace its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigureQueue {
    /// The tenant owning the queue (`"default"` while there is no auth).
    pub tenant: String,
    /// The queue name; non-empty, at most [`MAX_NAME_BYTES`].
    pub queue: String,
    /// The namespace to store, or `None` to derive it from the queue name
    /// (see [`derive_namespace_task`]).
    pub namespace: Option<String>,
    /// The task to store, or `None` to derive it from the queue name.
    pub task: Option<String>,
    /// Every option, all of them replaced: an option the client left out must
    /// already hold its default here (`QueueSettings::CONFIGURE_DEFAULTS`).
    /// A `lease_time` of 0 means "the default lease" and is stored as the
    /// lease actually granted, 60 (the storage page's truth rule).
    pub settings: QueueSettings,
}

/// A configured queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    /// The queue's id; unchanged when the queue already existed.
    pub queue_id: Uuid,
    /// The id of its partition `Default`; unchanged when it already existed.
    pub partition_id: Uuid,
    /// The namespace stored (given or derived).
    pub namespace: String,
    /// The task stored (given or derived).
    pub task: String,
    /// The settings stored (a requested `lease_time` of 0 shows here as 60).
    pub settings: QueueSettings,
}

/// Queues: configuring and deleting them. Both tell the caches here and
/// the peers (`mesh::Changes`); a configure also records whether the queue
/// is bounded (`maxSize`), which decides its push path.
pub struct Queues {
    db: Db,
    bounded: Arc<Bounded>,
    changes: Arc<Changes>,
}

impl Queues {
    pub(crate) fn new(db: Db, bounded: Arc<Bounded>, changes: Arc<Changes>) -> Queues {
        Queues {
            db,
            bounded,
            changes,
        }
    }

    /// Create queue `(tenant, queue)` or fully replace its configuration, and
    /// make sure its partition `Default` exists.
    ///
    /// Fails with [`EngineError::InvalidConfiguration`] before any I/O when
    /// the request breaks a rule (see [`ConfigureQueue`]), and with
    /// [`EngineError::EncryptionKeyRequired`] when it enables encryption on
    /// a broker without a key.
    pub async fn configure(&self, request: ConfigureQueue) -> Result<Configured, EngineError> {
        let plan = Plan::check(request)?;
        if plan.settings.encryption_enabled && !self.db.has_key() {
            return Err(EngineError::EncryptionKeyRequired { queue: plan.queue });
        }
        let client = self.db.client().await?;
        let ids = queen_sql::queues::configure_queue(
            &**client,
            &plan.tenant,
            &plan.queue,
            &plan.namespace,
            &plan.task,
            &plan.settings,
        )
        .await?;
        drop(client);
        let bounded = plan.settings.max_queue_size > 0;
        self.bounded
            .set(&queue_key(&plan.tenant, &plan.queue), bounded);
        self.changes.queue_configured(&plan.tenant, &plan.queue);
        Ok(Configured {
            queue_id: ids.queue_id,
            partition_id: ids.partition_id,
            namespace: plan.namespace,
            task: plan.task,
            settings: plan.settings,
        })
    }

    /// Delete `queue` with everything it owns (partitions, segments, sidecar,
    /// cursors, subscriptions, dead letters, traces) in one transaction, then
    /// forget it in every cache; parked pops on it answer empty at once.
    /// Returns whether it existed (deleting a missing queue succeeds).
    pub async fn delete(&self, tenant: &str, queue: &str) -> Result<bool, EngineError> {
        let existed = self
            .db
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::delete_queue(&**client, tenant, queue).await
            })
            .await?;
        self.changes.queue_deleted(tenant, queue);
        Ok(existed)
    }
}

/// A checked request, with namespace and task resolved and the stored
/// `lease_time` decided.
struct Plan {
    tenant: String,
    queue: String,
    namespace: String,
    task: String,
    settings: QueueSettings,
}

impl Plan {
    fn check(request: ConfigureQueue) -> Result<Plan, EngineError> {
        check_name("tenant", &request.tenant)?;
        check_name("queue", &request.queue)?;
        let (derived_namespace, derived_task) = derive_namespace_task(&request.queue);
        let namespace = request
            .namespace
            .unwrap_or_else(|| derived_namespace.to_owned());
        let task = request.task.unwrap_or_else(|| derived_task.to_owned());
        check_label("namespace", &namespace)?;
        check_label("task", &task)?;
        check_settings(&request.settings)?;
        let mut settings = request.settings;
        if settings.lease_time == 0 {
            settings.lease_time = QueueSettings::COLUMN_DEFAULTS.lease_time;
        }
        Ok(Plan {
            tenant: request.tenant,
            queue: request.queue,
            namespace,
            task,
            settings,
        })
    }
}

/// A name that identifies something: required, plus the one name rule
/// (`naming::name_problem`).
fn check_name(field: &'static str, value: &str) -> Result<(), EngineError> {
    if value.is_empty() {
        return Err(invalid(field, "is required"));
    }
    match crate::naming::name_problem(value) {
        Some(rule) => Err(invalid(field, rule)),
        None => Ok(()),
    }
}

/// Text stored in a `text` column: bounded, and free of NUL, which PostgreSQL
/// text cannot hold (it would fail in the database as a 500 instead of here).
fn check_label(field: &'static str, value: &str) -> Result<(), EngineError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(invalid(field, "must be at most 255 bytes"));
    }
    if value.contains('\0') {
        return Err(invalid(field, "must not contain NUL characters"));
    }
    Ok(())
}

/// No option is negative: every integer option is a duration, a count or a size.
fn check_settings(settings: &QueueSettings) -> Result<(), EngineError> {
    let integers = [
        ("lease_time", settings.lease_time),
        ("retry_limit", settings.retry_limit),
        ("retry_delay", settings.retry_delay),
        ("max_queue_size", settings.max_queue_size),
        ("ttl", settings.ttl),
        ("priority", settings.priority),
        ("delayed_processing", settings.delayed_processing),
        ("window_buffer", settings.window_buffer),
        ("retention_seconds", settings.retention_seconds),
        (
            "completed_retention_seconds",
            settings.completed_retention_seconds,
        ),
        ("max_wait_time_seconds", settings.max_wait_time_seconds),
        ("min_pop_wait_time", settings.min_pop_wait_time),
        ("dedup_window_seconds", settings.dedup_window_seconds),
    ];
    match integers.into_iter().find(|(_, value)| *value < 0) {
        Some((field, _)) => Err(invalid(field, "must not be negative")),
        None => Ok(()),
    }
}

fn invalid(field: &'static str, rule: &'static str) -> EngineError {
    EngineError::InvalidConfiguration { field, rule }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(queue: &str) -> ConfigureQueue {
        ConfigureQueue {
            tenant: "default".to_owned(),
            queue: queue.to_owned(),
            namespace: None,
            task: None,
            settings: QueueSettings::CONFIGURE_DEFAULTS,
        }
    }

    fn refusal(request: ConfigureQueue) -> String {
        match Plan::check(request) {
            Ok(_) => panic!("the request was accepted"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn given_namespace_and_task_win_over_derived_ones_even_when_empty() {
        let mut given = request("billing.invoices");
        given.namespace = Some(String::new());
        given.task = Some("t".to_owned());
        let plan = Plan::check(given).unwrap();
        assert_eq!((plan.namespace.as_str(), plan.task.as_str()), ("", "t"));

        let plan = Plan::check(request("billing.invoices")).unwrap();
        assert_eq!(
            (plan.namespace.as_str(), plan.task.as_str()),
            ("billing", "invoices")
        );
    }

    #[test]
    fn lease_time_zero_is_stored_as_the_granted_default() {
        let mut zero = request("q");
        zero.settings.lease_time = 0;
        assert_eq!(Plan::check(zero).unwrap().settings.lease_time, 60);
        let mut thirty = request("q");
        thirty.settings.lease_time = 30;
        assert_eq!(Plan::check(thirty).unwrap().settings.lease_time, 30);
    }

    #[test]
    fn names_follow_the_name_rule_and_labels_are_bounded_and_nul_free() {
        assert_eq!(refusal(request("")), "queue is required");
        assert_eq!(
            refusal(request(&"q".repeat(256))),
            "queue must be at most 255 bytes"
        );
        assert!(Plan::check(request(&"q".repeat(255))).is_ok());
        assert_eq!(
            refusal(request("a\0b")),
            "queue must not contain control characters"
        );
        assert_eq!(
            refusal(request("a\nb")),
            "queue must not contain control characters"
        );
        let mut no_tenant = request("q");
        no_tenant.tenant = String::new();
        assert_eq!(refusal(no_tenant), "tenant is required");
        let mut long_task = request("q");
        long_task.task = Some("t".repeat(256));
        assert_eq!(refusal(long_task), "task must be at most 255 bytes");
        let mut nul_namespace = request("q");
        nul_namespace.namespace = Some("\0".to_owned());
        assert_eq!(
            refusal(nul_namespace),
            "namespace must not contain NUL characters"
        );
    }

    #[test]
    fn negative_options_are_refused() {
        let mut negative = request("q");
        negative.settings.dedup_window_seconds = -1;
        assert_eq!(
            refusal(negative),
            "dedup_window_seconds must not be negative"
        );
        let mut negative = request("q");
        negative.settings.lease_time = i32::MIN;
        assert_eq!(refusal(negative), "lease_time must not be negative");
    }
}
