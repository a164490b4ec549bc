//! The raw schema of the `cluster:` block's etcd security: `etcdTls` and
//! `etcdAuth`. Kept beside `raw` (which re-exports it and holds `RawCluster`);
//! the rules of `raw` hold here too (raw strings, unknown fields rejected).

use serde::{Deserialize, Serialize};

/// `cluster.etcdTls`: TLS to `https://` etcd endpoints. Every file is PEM and
/// relative to the config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEtcdTls {
    /// The CA (one or more certificates) that signed etcd's server certificate;
    /// absent: the Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// weir's client certificate (etcd `--client-cert-auth`); with `keyFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// The client certificate's private key; with `certFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// `cluster.etcdAuth`: an etcd v3 user. The password lives in a file of its
/// own, never in the config.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEtcdAuth {
    /// The etcd user name.
    #[serde(default)]
    pub username: String,
    /// A file holding the user's password (one trailing newline is ignored).
    #[serde(default)]
    pub password_file: String,
}
