//! etcd v3 user authentication through the gateway.
//!
//! `POST /v3/auth/authenticate` with `{name, password}` answers `{token}`; every later
//! call carries the token in its `Authorization` header, which the gateway hands to etcd
//! as the `authorization` gRPC metadata etcd reads its token from. A token stops being
//! accepted when it expires (a simple token after `--auth-token-ttl` without use, a JWT
//! at its `exp`), when etcd restarts (simple tokens live in memory) or when the auth
//! store changed since it was issued; etcd then answers `Unauthenticated` ("invalid auth
//! token") or "revision of auth store is old". [`with_token`] authenticates again and
//! makes the call once more; a second refusal is returned as it is.
//!
//! The password is held only here ([`Credentials`]): its `Debug` shows a placeholder
//! and no error message ever contains it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::EtcdError;

/// An etcd user and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    username: String,
    password: String,
}

impl Credentials {
    /// `username` with `password`.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The user name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password (sent only in the authenticate call's body).
    pub(super) fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Whether etcd refused a call for its token (expired, unknown to this etcd, issued
/// before the auth store changed, or missing after authentication was switched on),
/// so that a new token may succeed.
pub fn token_refused(e: &EtcdError) -> bool {
    match e {
        EtcdError::Status { code, message, .. } => {
            *code == 16
                || message.contains("invalid auth token")
                || message.contains("revision of auth store is old")
                || message.contains("user name is empty")
        }
        _ => false,
    }
}

/// The token calls are made with. Shared by every call of one client, so that a burst
/// of calls refused together authenticates once.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    state: tokio::sync::Mutex<TokenState>,
    /// Tokens obtained after etcd refused one (not the first).
    renewals: AtomicU64,
}

#[derive(Debug, Default)]
struct TokenState {
    /// Bumped at every authentication.
    generation: u64,
    /// `None`: authenticate before the next call. `Some(None)`: etcd has
    /// authentication switched off, calls go without a token.
    token: Option<Option<Arc<str>>>,
}

/// A token and the generation it was issued in (`token` is `None` while etcd has
/// authentication switched off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Issued {
    pub(super) generation: u64,
    pub(super) token: Option<Arc<str>>,
}

impl Tokens {
    /// How many times a refused token was replaced.
    pub(super) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// The token to send, authenticating first when there is none. Callers wait for
    /// an authentication already under way instead of starting their own.
    pub(super) async fn current<F, Fut>(&self, authenticate: F) -> Result<Issued, EtcdError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<String>, EtcdError>>,
    {
        let mut st = self.state.lock().await;
        if st.token.is_none() {
            let token = authenticate().await?;
            st.generation += 1;
            st.token = Some(token.map(Arc::from));
        }
        Ok(Issued {
            generation: st.generation,
            token: st.token.clone().flatten(),
        })
    }

    /// A new token after etcd refused the one of generation `stale`; when another call
    /// already replaced it, that newer token.
    pub(super) async fn renew<F, Fut>(
        &self,
        stale: u64,
        authenticate: F,
    ) -> Result<Issued, EtcdError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<String>, EtcdError>>,
    {
        {
            let mut st = self.state.lock().await;
            if st.generation == stale {
                st.token = None;
                self.renewals.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.current(authenticate).await
    }
}

/// Makes `call` with the current token (authenticating first if needed); when etcd
/// refuses the token ([`token_refused`]), authenticates again and makes the call once
/// more.
pub(super) async fn with_token<T, A, AF, C, CF>(
    tokens: &Tokens,
    authenticate: A,
    call: C,
) -> Result<T, EtcdError>
where
    A: Fn() -> AF,
    AF: Future<Output = Result<Option<String>, EtcdError>>,
    C: Fn(Option<Arc<str>>) -> CF,
    CF: Future<Output = Result<T, EtcdError>>,
{
    let issued = tokens.current(&authenticate).await?;
    match call(issued.token).await {
        Err(e) if token_refused(&e) => {
            let fresh = tokens.renew(issued.generation, &authenticate).await?;
            call(fresh.token).await
        }
        other => other,
    }
}
