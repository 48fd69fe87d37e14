//! The etcd target's connection: a small runtime of its own on one thread
//! (the pass is synchronous and has none), a client made on first use and
//! made again after a failure, and every call bounded by the timeout.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::runtime::Handle;

use super::config::ClusterConfig;

/// Largest answer read: a range read of the whole prefix comes in one.
const MAX_MESSAGE: usize = 256 << 20;

/// Why a call did not answer: the keys it was about are unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("etcd {endpoints}: {reason}")]
pub struct Unreachable {
    pub endpoints: String,
    pub reason: String,
}

/// Why the client could not be made, or its files read.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot start the etcd client's {what}: {source}")]
    Start {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not UTF-8", .0.display())]
    NotUtf8(std::path::PathBuf),
}

/// The runtime's thread ends when this is dropped (with the target).
struct Runtime {
    handle: Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub struct Connection {
    config: ClusterConfig,
    runtime: Runtime,
    client: Mutex<Option<Client>>,
}

impl Connection {
    /// A connection that connects on first use: an unreachable cluster at
    /// start makes keys unknown, not the target fail to build.
    pub fn new(config: &ClusterConfig) -> Result<Arc<Connection>, ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| ClientError::Start {
                what: "runtime",
                source,
            })?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("tend-etcd".into())
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })
            .map_err(|source| ClientError::Start {
                what: "thread",
                source,
            })?;
        Ok(Arc::new(Connection {
            config: config.clone(),
            runtime: Runtime {
                handle,
                _stop: stop,
            },
            client: Mutex::new(None),
        }))
    }

    pub fn timeout(&self) -> Duration {
        self.config.timeout.0
    }

    pub fn handle(&self) -> &Handle {
        &self.runtime.handle
    }

    fn unreachable(&self, reason: impl Into<String>) -> Unreachable {
        Unreachable {
            endpoints: self.config.endpoints.join(","),
            reason: reason.into(),
        }
    }

    /// Runs `f` with a client on the runtime's thread and waits for it, at
    /// most the timeout. Callable from any thread: the pass's, or a
    /// blocking task of the daemon's.
    pub fn call<T, F, Fut>(&self, f: F) -> Result<T, Unreachable>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let client = self.client()?;
        let timeout = self.timeout();
        let (tx, rx) = std::sync::mpsc::channel();
        self.runtime.handle.spawn(async move {
            let answer = tokio::time::timeout(timeout, f(client)).await;
            let _ = tx.send(answer);
        });
        let answer = rx
            .recv_timeout(timeout + Duration::from_secs(1))
            .map_err(|_| self.unreachable("no answer in time"))?;
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                // A broken client is made again next time; an answer that
                // is an error (a refused permission) keeps it.
                if broken(&e) {
                    *self.client.lock().expect("client lock") = None;
                }
                Err(self.unreachable(describe(&e)))
            }
            Err(_) => {
                *self.client.lock().expect("client lock") = None;
                Err(self.unreachable(format!("no answer within {timeout:?}")))
            }
        }
    }

    /// The client, connecting (and authenticating) first when there is none.
    pub fn client(&self) -> Result<Client, Unreachable> {
        let mut slot = self.client.lock().expect("client lock");
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let connect = self.connect();
        self.runtime.handle.spawn(async move {
            let _ = tx.send(connect.await);
        });
        let client = rx
            .recv_timeout(self.timeout() + Duration::from_secs(1))
            .map_err(|_| self.unreachable("no answer in time"))??;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// A new client of its own (the watch's), to be awaited on the
    /// runtime's thread.
    pub fn connect(&self) -> impl Future<Output = Result<Client, Unreachable>> + Send + 'static {
        let options = self.options();
        let endpoints = self.config.endpoints.clone();
        let timeout = self.timeout();
        let unreachable = self.unreachable("");
        async move {
            let fail = |reason: String| Unreachable {
                reason,
                ..unreachable.clone()
            };
            let options = options.map_err(|e| fail(e.to_string()))?;
            match tokio::time::timeout(timeout, Client::connect(endpoints, Some(options))).await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(fail(describe(&e))),
                Err(_) => Err(fail(format!("cannot connect within {timeout:?}"))),
            }
        }
    }

    /// Connect options from the config; reads the password and TLS files.
    fn options(&self) -> Result<ConnectOptions, ClientError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|source| ClientError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        let mut o = ConnectOptions::new()
            .with_connect_timeout(self.timeout())
            .with_timeout(self.timeout())
            .with_keep_alive(Duration::from_secs(5), self.timeout())
            // Without a leader there is no quorum: a watch is ended rather
            // than left silent, and calls fail rather than wait.
            .with_require_leader(true);
        if let Some(a) = &self.config.auth {
            let password = String::from_utf8(read(&a.password_file)?)
                .map_err(|_| ClientError::NotUtf8(a.password_file.clone()))?;
            o = o.with_user(a.user.clone(), password.trim_end_matches(['\n', '\r']));
        }
        if let Some(t) = &self.config.tls {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &t.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            if let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            o = o.with_tls(tls);
        }
        Ok(o)
    }

    /// The client's options for the range reads of a whole prefix.
    pub fn max_message() -> usize {
        MAX_MESSAGE
    }
}

/// Whether the error says the connection is broken rather than the call
/// refused: a member that restarted leaves HTTP/2 connections that fail
/// with gRPC's Unknown or Unavailable, not a transport error.
fn broken(e: &etcd_client::Error) -> bool {
    // gRPC's codes: Cancelled 1, Unknown 2, DeadlineExceeded 4, Unavailable 14.
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(s.code() as i32, 1 | 2 | 4 | 14),
        _ => false,
    }
}

/// The error's words, with gRPC's status message rather than its debug form.
pub fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    }
}
