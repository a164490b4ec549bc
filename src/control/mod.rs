//! The control plane of one weir: the table store every writer goes
//! through, and the admin HTTP API in front of it.

pub mod store;
