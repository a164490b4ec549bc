//! The admin API's JSON documents as types, defined once for the server and its
//! clients (`weir ctl`, the remote data plane, the cluster view), each deriving both
//! `Serialize` and `Deserialize`.
//!
//! A client reads a document by parsing it into its type, never by walking untyped
//! JSON: a missing or renamed required field is a parse error naming the field, so
//! it cannot read as a default ("ready", "no members"). A field the server may leave
//! out is an `Option`.
//!
//! This module sits low in the layering: besides serde and std it uses only the
//! value types below it (`config::raw` for the table, `stats` for windows).

pub mod access;
pub mod canary;
pub mod cluster;
pub mod error;
pub mod probe;
pub mod providers;
pub mod rolling;
pub mod table;

#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod tests;
