//! The `queen-server` binary as an operator meets it: started as a process,
//! probed over HTTP, stopped with a signal.

mod boot;
mod fault_matrix;
mod faults;
mod harness;
mod inspect;
mod keys;
mod mesh;
mod metrics;
mod operator;
mod page;
mod sdk;
