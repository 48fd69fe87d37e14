//! Talking to a remote during one fetch: the deadline, credentials (a token
//! as the password of a basic credential, an ssh key) and host checks (ssh
//! keys against known_hosts, parsed by tend; TLS left to libgit2's
//! verification). Errors leaving here are scrubbed of secrets.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use git2::{CertificateCheckStatus, Cred, CredentialType, FetchOptions, RemoteCallbacks};

use super::known_hosts::{HostKeyCheck, KnownHosts};
use super::url::{RepoUrl, Transport};
use super::{Auth, SourceError};

/// The state of one fetch, shared by the callbacks libgit2 calls.
pub(crate) struct Session<'a> {
    url: &'a RepoUrl,
    auth: &'a Auth,
    timeout: Duration,
    deadline: Instant,
    token: Option<String>,
    known_hosts: Option<KnownHosts>,
    timed_out: Cell<bool>,
    /// Why we refused a credential request or a host key; libgit2's own
    /// message for the abort it then reports is less telling.
    refusal: RefCell<Option<SourceError>>,
    credential_requests: Cell<u32>,
}

impl<'a> Session<'a> {
    /// Reads the token and known_hosts files up front, so that a missing file
    /// is reported as such instead of as a rejected login.
    pub(crate) fn new(
        url: &'a RepoUrl,
        auth: &'a Auth,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        let token = match (&auth.token_file, url.transport) {
            (Some(path), Transport::Http) => {
                let text = read_secret_file(path, "token_file")
                    .map_err(|reason| auth_error(url, reason))?;
                Some(text.trim().to_string())
            }
            _ => None,
        };
        let known_hosts = match url.transport {
            Transport::Ssh => {
                let path = auth.known_hosts.clone().or_else(default_known_hosts);
                let path = path.ok_or_else(|| {
                    auth_error(
                        url,
                        "ssh needs a known_hosts file (auth.known_hosts) and $HOME is not set"
                            .into(),
                    )
                })?;
                let text = read_secret_file(&path, "known_hosts")
                    .map_err(|reason| auth_error(url, reason))?;
                Some(KnownHosts::parse(&text))
            }
            _ => None,
        };
        Ok(Session {
            url,
            auth,
            timeout,
            deadline: Instant::now() + timeout,
            token,
            known_hosts,
            timed_out: Cell::new(false),
            refusal: RefCell::new(None),
            credential_requests: Cell::new(0),
        })
    }

    /// Whether time is up; once it is, every later callback aborts too.
    fn expired(&self) -> bool {
        if Instant::now() >= self.deadline {
            self.timed_out.set(true);
        }
        self.timed_out.get()
    }

    pub(crate) fn check_deadline(&self) -> Result<(), SourceError> {
        if self.expired() {
            return Err(self.timeout_error());
        }
        Ok(())
    }

    fn timeout_error(&self) -> SourceError {
        SourceError::Timeout {
            url: self.url.redacted().to_string(),
            timeout: self.timeout,
        }
    }

    pub(crate) fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut callbacks = RemoteCallbacks::new();
        // Returning false from a progress callback makes libgit2 abort the
        // transfer: how a remote that trickles data is cut off at the deadline.
        callbacks.transfer_progress(|_| !self.expired());
        callbacks.sideband_progress(|_| !self.expired());
        callbacks.credentials(|_url, user, allowed| self.credentials(user, allowed));
        callbacks.certificate_check(|cert, host| self.certificate(cert, host));
        callbacks
    }

    pub(crate) fn fetch_options(&self) -> FetchOptions<'_> {
        let mut options = FetchOptions::new();
        options.remote_callbacks(self.callbacks());
        options
    }

    fn credentials(
        &self,
        user: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        if self.expired() {
            return Err(git2::Error::from_str("deadline passed"));
        }
        // libgit2 asks again after a rejected credential, forever; a second
        // request for the same kind means the first was refused.
        let requests = self.credential_requests.get() + 1;
        self.credential_requests.set(requests);
        let refuse = |reason: &str| {
            *self.refusal.borrow_mut() = Some(auth_error(self.url, reason.to_string()));
            Err(git2::Error::from_str(reason))
        };
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user.unwrap_or("git"));
        }
        if requests > 2 {
            return refuse("the remote rejected the configured credentials");
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            return match &self.auth.ssh_key {
                Some(key) => Cred::ssh_key(user.unwrap_or("git"), None, key, None)
                    .or_else(|_| refuse("the ssh key (auth.ssh_key) could not be loaded")),
                None => refuse("the remote asks for an ssh key and auth.ssh_key is not set"),
            };
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            return match &self.token {
                Some(token) => Cred::userpass_plaintext(user.unwrap_or("tend"), token),
                None => refuse("the remote asks for credentials and auth.token_file is not set"),
            };
        }
        refuse("the remote asks for a kind of credential tend does not support")
    }

    fn certificate(
        &self,
        cert: &git2::cert::Cert<'_>,
        host: &str,
    ) -> Result<CertificateCheckStatus, git2::Error> {
        if self.expired() {
            return Err(git2::Error::from_str("deadline passed"));
        }
        let Some(hostkey) = cert.as_hostkey() else {
            // TLS: libgit2 verifies the chain against the system's roots.
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let (url_host, port) = self
            .url
            .ssh_host_port()
            .unwrap_or_else(|| (host.to_string(), 22));
        let verdict = match (hostkey.hostkey(), &self.known_hosts) {
            (Some(key), Some(known)) => known.check(&url_host, port, key),
            _ => HostKeyCheck::Unknown,
        };
        let reason = match verdict {
            HostKeyCheck::Trusted => return Ok(CertificateCheckStatus::CertificateOk),
            HostKeyCheck::Unknown => format!("host key of {url_host} is not in known_hosts"),
            HostKeyCheck::Changed => format!("host key of {url_host} differs from known_hosts"),
            HostKeyCheck::Revoked => format!("host key of {url_host} is revoked in known_hosts"),
        };
        *self.refusal.borrow_mut() = Some(auth_error(self.url, reason.clone()));
        Err(git2::Error::from_str(&reason))
    }

    /// Turns a libgit2 failure during this fetch into a typed error: our own
    /// reason when a callback refused, a timeout when the deadline passed,
    /// otherwise libgit2's message scrubbed of the address and secrets.
    pub(crate) fn error(&self, error: git2::Error) -> SourceError {
        if let Some(refusal) = self.refusal.borrow_mut().take() {
            return refusal;
        }
        if self.timed_out.get() || Instant::now() >= self.deadline {
            return self.timeout_error();
        }
        let secrets: Vec<&str> = self.token.as_deref().into_iter().collect();
        SourceError::Fetch {
            url: self.url.redacted().to_string(),
            message: self.url.scrub(error.message(), &secrets),
        }
    }
}

fn auth_error(url: &RepoUrl, reason: String) -> SourceError {
    SourceError::Auth {
        url: url.redacted().to_string(),
        reason,
    }
}

fn default_known_hosts() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".ssh/known_hosts"))
}

/// Reads a small credential or trust file; the message names the setting
/// and the path, never the content.
fn read_secret_file(path: &std::path::Path, setting: &str) -> Result<String, String> {
    const MAX: u64 = 1 << 20;
    let meta = std::fs::metadata(path).map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if meta.len() > MAX {
        return Err(format!("{setting} {} is larger than 1 MiB", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{setting} {}: {e}", path.display()))
}
