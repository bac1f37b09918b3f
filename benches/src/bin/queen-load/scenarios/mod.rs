//! The scenarios: each file one workload, its settings and its result rows
//! (`case.rs` has what they share: the [`case::Scenario`] trait, the window,
//! the case loop and the worker phases). They use the client, measure and
//! output layers; nothing here imports `derived.rs`.

pub(crate) mod case;
pub(crate) mod ceiling;
pub(crate) mod latency;
pub(crate) mod matrix;
pub(crate) mod observe;
pub(crate) mod pop;
pub(crate) mod push;
pub(crate) mod scale;
pub(crate) mod soak;
pub(crate) mod streams;

use case::Scenario;

/// `all`: every scenario's settings for a whole run on one cluster.
pub(crate) fn all(quick: bool, duration: Option<f64>) -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(ceiling::CeilingOpts::for_all(quick, duration)),
        Box::new(push::PushOpts::for_all(quick, duration)),
        Box::new(pop::PopOpts::for_all(quick, duration)),
        Box::new(latency::LatencyOpts::for_all(quick, duration)),
    ]
}

/// `mesh`: push, consume and cross-broker latency with 1, 2 and 3 brokers
/// on one database.
pub(crate) fn mesh(quick: bool, duration: Option<f64>) -> Vec<Box<dyn Scenario>> {
    let brokers = vec![1, 2, 3];
    let mut push = push::PushOpts::for_all(quick, duration);
    push.brokers.clone_from(&brokers);
    // Single messages and batches of 100 over 100 partitions, 16
    // producers spread over the brokers.
    push.axes = matrix::Axes {
        batches: vec![1, 100],
        partitions: vec![100],
        producers: vec![16],
    };
    let mut pop = pop::PopOpts::for_all(quick, duration);
    pop.brokers.clone_from(&brokers);
    pop.consumers = vec![32];
    pop.modes = vec![pop::Mode::Ack];
    let mut latency = latency::LatencyOpts::for_all(quick, duration);
    latency.brokers = brokers;
    latency.rates = vec![100];
    latency.partitions = vec![1];
    latency.modes = vec![latency::Mode::Auto];
    vec![Box::new(push), Box::new(pop), Box::new(latency)]
}
