//! The `queen-server` binary as an operator meets it: started as a process,
//! probed over HTTP, stopped with a signal.

mod boot;
mod harness;
mod inspect;
mod sdk;
