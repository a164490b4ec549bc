//! The gateway's JSON: answers and watch messages as proto3 maps them (64-bit integers
//! as strings, `bytes` as base64, zero values omitted), and the base64 codec.

use super::*;

/// Takes one complete JSON value off the front of `buf`, if there is one.
pub(super) fn parse_one(buf: &mut BytesMut) -> Result<Option<Value>, EtcdError> {
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<Value>();
    match it.next() {
        None => {
            buf.clear(); // only whitespace
            Ok(None)
        }
        Some(Ok(v)) => {
            let used = it.byte_offset();
            buf.advance(used);
            Ok(Some(v))
        }
        Some(Err(e)) if e.is_eof() => Ok(None),
        Some(Err(e)) => Err(EtcdError::Decode(format!("watch stream: {e}"))),
    }
}

pub(super) fn watch_message(msg: Value) -> Result<Vec<WatchEvent>, EtcdError> {
    let m: WatchJson = serde_json::from_value(msg).map_err(|e| EtcdError::Decode(e.to_string()))?;
    if let Some(err) = m.error {
        return Err(EtcdError::Status {
            http: 200,
            code: err.code,
            message: err.message,
        });
    }
    let Some(r) = m.result else {
        return Ok(Vec::new());
    };
    if r.canceled {
        let (code, reason) = grpc_status(&r.cancel_reason);
        return Err(EtcdError::Status {
            http: 200,
            code,
            message: format!(
                "watch cancelled{}",
                if r.compact_revision > 0 {
                    format!(" (compacted at revision {})", r.compact_revision)
                } else {
                    format!(": {reason}")
                }
            ),
        });
    }
    r.events
        .into_iter()
        .map(|e| {
            Ok(WatchEvent {
                deleted: e.kind == "DELETE",
                kv: decode_kv(e.kv)?,
            })
        })
        .collect()
}

/// The gRPC code and message of a status rendered as text (a watch's cancel reason,
/// `rpc error: code = Unauthenticated desc = etcdserver: invalid auth token`); code 0
/// and the text itself when it is not one.
pub(super) fn grpc_status(text: &str) -> (i64, String) {
    const CODES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    let parsed = text
        .strip_prefix("rpc error: code = ")
        .and_then(|rest| rest.split_once(" desc = "))
        .and_then(|(name, desc)| {
            let code = CODES.iter().position(|c| *c == name)?;
            Some((i64::try_from(code).ok()?, desc.to_string()))
        });
    parsed.unwrap_or_else(|| (0, text.to_string()))
}

pub(super) fn decode_answer<T: DeserializeOwned>(
    status: StatusCode,
    bytes: &[u8],
) -> Result<T, EtcdError> {
    if !status.is_success() {
        let err: ErrorJson = serde_json::from_slice(bytes).unwrap_or_else(|_| ErrorJson {
            code: 0,
            message: String::from_utf8_lossy(bytes).chars().take(300).collect(),
        });
        return Err(EtcdError::Status {
            http: status.as_u16(),
            code: err.code,
            message: err.message,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| EtcdError::Decode(e.to_string()))
}

/// The `{key, range_end}` of a key or a prefix.
pub(super) fn range_json(key: &str, prefix: bool) -> Value {
    let mut v = json!({"key": b64(key.as_bytes())});
    if prefix {
        v["range_end"] = json!(b64(&prefix_end(key.as_bytes())));
    }
    v
}

/// The first key after every key starting with `prefix` (etcd's `range_end` of a
/// prefix): the prefix with its last byte below 0xff incremented; `\0` (every key)
/// when there is none.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

pub(super) fn decode_kvs(kvs: Vec<KvJson>) -> Result<Vec<KeyValue>, EtcdError> {
    kvs.into_iter().map(decode_kv).collect()
}

pub(super) fn decode_kv(kv: KvJson) -> Result<KeyValue, EtcdError> {
    let key = unb64(&kv.key).map_err(EtcdError::Decode)?;
    Ok(KeyValue {
        key: String::from_utf8_lossy(&key).into_owned(),
        value: unb64(&kv.value).map_err(EtcdError::Decode)?,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    })
}

// ------------------------------------------------------------- JSON shapes

/// proto3 JSON writes 64-bit integers as strings; accept numbers too.
pub(super) fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        S(String),
        I(i64),
    }
    match N::deserialize(d)? {
        N::S(s) => s.parse().map_err(serde::de::Error::custom),
        N::I(i) => Ok(i),
    }
}

#[derive(Deserialize, Default)]
pub(super) struct HeaderJson {
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) revision: i64,
}

#[derive(Deserialize)]
pub(super) struct HeaderOnly {
    #[serde(default)]
    pub(super) header: HeaderJson,
}

#[derive(Deserialize)]
pub(super) struct KvJson {
    #[serde(default)]
    pub(super) key: String,
    #[serde(default)]
    pub(super) value: String,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) create_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) mod_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) version: i64,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) lease: i64,
}

#[derive(Deserialize)]
pub(super) struct RangeJson {
    #[serde(default)]
    pub(super) header: HeaderJson,
    #[serde(default)]
    pub(super) kvs: Vec<KvJson>,
}

#[derive(Deserialize)]
pub(super) struct DeleteJson {
    #[serde(default)]
    pub(super) header: HeaderJson,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) deleted: i64,
}

#[derive(Deserialize)]
pub(super) struct TxnJson {
    #[serde(default)]
    pub(super) header: HeaderJson,
    #[serde(default)]
    pub(super) succeeded: bool,
    #[serde(default)]
    pub(super) responses: Vec<TxnOpJson>,
}

#[derive(Deserialize)]
pub(super) struct TxnOpJson {
    #[serde(default)]
    pub(super) response_range: Option<RangeJson>,
    #[serde(default)]
    pub(super) response_delete_range: Option<DeleteJson>,
}

#[derive(Deserialize)]
pub(super) struct GrantJson {
    #[serde(default, rename = "ID", deserialize_with = "de_i64")]
    pub(super) id: i64,
    #[serde(default, rename = "TTL", deserialize_with = "de_i64")]
    pub(super) ttl: i64,
    #[serde(default)]
    pub(super) error: String,
}

#[derive(Deserialize)]
pub(super) struct KeepAliveJson {
    #[serde(default)]
    pub(super) result: Option<KeepAliveResult>,
    #[serde(default)]
    pub(super) error: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct KeepAliveResult {
    #[serde(default, rename = "TTL", deserialize_with = "de_i64")]
    pub(super) ttl: i64,
}

#[derive(Deserialize)]
pub(super) struct AuthJson {
    #[serde(default)]
    pub(super) token: String,
}

#[derive(Deserialize)]
pub(super) struct ErrorJson {
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) code: i64,
    #[serde(default)]
    pub(super) message: String,
}

#[derive(Deserialize)]
pub(super) struct WatchJson {
    #[serde(default)]
    pub(super) result: Option<WatchResult>,
    #[serde(default)]
    pub(super) error: Option<ErrorJson>,
}

#[derive(Deserialize)]
pub(super) struct WatchResult {
    #[serde(default)]
    pub(super) canceled: bool,
    #[serde(default, deserialize_with = "de_i64")]
    pub(super) compact_revision: i64,
    #[serde(default)]
    pub(super) cancel_reason: String,
    #[serde(default)]
    pub(super) events: Vec<EventJson>,
}

#[derive(Deserialize)]
pub(super) struct EventJson {
    #[serde(default, rename = "type")]
    pub(super) kind: String,
    pub(super) kv: KvJson,
}

// ------------------------------------------------------------------ base64

pub(super) const ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what proto3 JSON writes for `bytes`).
pub fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard or URL-safe base64, padded or not (proto3 JSON parsers accept
/// both).
pub fn unb64(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for (i, c) in s.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => {
                if s[i..].bytes().all(|p| p == b'=') {
                    break;
                }
                return Err(format!("invalid base64 padding at {i}"));
            }
            _ => return Err(format!("invalid base64 character at {i}")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}
