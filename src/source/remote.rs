//! Talking to a remote during one fetch: the deadline, credentials (a token
//! as the password of a basic credential, sent only to the configured
//! origin; an ssh key with an optional passphrase) and host checks (ssh keys
//! against known_hosts, parsed by tend; TLS left to libgit2's verification
//! against the system roots plus `auth.ca_file`). Errors leaving here are
//! scrubbed of secrets.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{
    CertificateCheckStatus, Cred, CredentialType, ErrorClass, ErrorCode, FetchOptions,
    RemoteCallbacks,
};

use super::known_hosts::{describe_key, host_name, HostKeyCheck, KnownHosts};
use super::ssh_key;
use super::url::{Origin, RepoUrl, Transport};
use super::{Auth, SourceError};

/// The credential files' contents, read once per fetch. Never printed: the
/// type has no Debug.
struct Secrets {
    token: Option<String>,
    ssh_key: Option<(PathBuf, String)>,
    passphrase: Option<String>,
}

/// A credential tend has already handed to libgit2 in this fetch; being
/// asked for the same kind again means the remote rejected it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Offered {
    Token,
    SshKey,
}

/// The state of one fetch, shared by the callbacks libgit2 calls.
pub(crate) struct Session<'a> {
    url: &'a RepoUrl,
    timeout: Duration,
    deadline: Instant,
    secrets: Secrets,
    known_hosts: Option<(PathBuf, KnownHosts)>,
    timed_out: Cell<bool>,
    /// Why we refused a credential request or a host key; libgit2's own
    /// message for the abort it then reports is less telling.
    refusal: RefCell<Option<SourceError>>,
    offered: Cell<Option<Offered>>,
}

impl<'a> Session<'a> {
    /// Reads the credential and known_hosts files up front, so that a
    /// missing file is reported as such instead of as a rejected login.
    pub(crate) fn new(
        url: &'a RepoUrl,
        auth: &'a Auth,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        let read = |path: &Path, setting: &str| {
            read_secret_file(path, setting).map_err(|e| auth_error(url, e.to_string()))
        };
        let mut secrets = Secrets {
            token: None,
            ssh_key: None,
            passphrase: None,
        };
        let mut known_hosts = None;
        match url.transport {
            Transport::Http => {
                if let Some(path) = &auth.token_file {
                    secrets.token = Some(read(path, "auth.token_file")?.trim().to_string());
                }
            }
            Transport::Ssh => {
                if let Some(path) = &auth.ssh_key_passphrase_file {
                    let text = read(path, "auth.ssh_key_passphrase_file")?;
                    secrets.passphrase = Some(text.trim_end_matches(['\n', '\r']).to_string());
                }
                if let Some(path) = &auth.ssh_key {
                    let key = read(path, "auth.ssh_key")?;
                    if ssh_key::is_encrypted(&key) == Some(true) && secrets.passphrase.is_none() {
                        return Err(auth_error(
                            url,
                            format!(
                                "the ssh key {} (auth.ssh_key) is encrypted and \
                                 auth.ssh_key_passphrase_file is not set",
                                path.display()
                            ),
                        ));
                    }
                    secrets.ssh_key = Some((path.clone(), key));
                }
                known_hosts = Some(load_known_hosts(url, auth)?);
            }
            Transport::Local | Transport::Git => {}
        }
        Ok(Session {
            url,
            timeout,
            deadline: Instant::now() + timeout,
            secrets,
            known_hosts,
            timed_out: Cell::new(false),
            refusal: RefCell::new(None),
            offered: Cell::new(None),
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
        // A remote that sends nothing at all is cut off by the socket timeouts
        // (see `configure_transport`).
        callbacks.transfer_progress(|_| !self.expired());
        callbacks.sideband_progress(|_| !self.expired());
        callbacks.credentials(|url, user, allowed| self.credentials(url, user, allowed));
        callbacks.certificate_check(|cert, host| self.certificate(cert, host));
        callbacks
    }

    pub(crate) fn fetch_options(&self) -> FetchOptions<'_> {
        let mut options = FetchOptions::new();
        options.remote_callbacks(self.callbacks());
        options
    }

    fn refuse<T>(&self, error: SourceError) -> Result<T, git2::Error> {
        let message = error.to_string();
        *self.refusal.borrow_mut() = Some(error);
        Err(git2::Error::from_str(&message))
    }

    fn refuse_auth<T>(&self, reason: String) -> Result<T, git2::Error> {
        self.refuse(auth_error(self.url, reason))
    }

    /// Whether `kind` was handed out before in this fetch; records it if not.
    fn offered_before(&self, kind: Offered) -> bool {
        let before = self.offered.get() == Some(kind);
        self.offered.set(Some(kind));
        before
    }

    fn credentials(
        &self,
        url: &str,
        user: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        if self.expired() {
            return Err(git2::Error::from_str("deadline passed"));
        }
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user.unwrap_or("git"));
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            let Some((path, key)) = &self.secrets.ssh_key else {
                return self.refuse_auth(
                    "the remote asks for an ssh key and auth.ssh_key is not set".into(),
                );
            };
            if self.offered_before(Offered::SshKey) {
                return self.refuse_auth(format!(
                    "the remote rejected the ssh key {} (auth.ssh_key)",
                    path.display()
                ));
            }
            let passphrase = self.secrets.passphrase.as_deref();
            return Cred::ssh_key_from_memory(user.unwrap_or("git"), None, key, passphrase)
                .or_else(|_| {
                    self.refuse_auth(format!(
                        "the ssh key {} (auth.ssh_key) could not be loaded",
                        path.display()
                    ))
                });
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            // libgit2 follows a redirect of the first request to any host and
            // then asks again for the new address; a token belongs to the
            // host it was issued for and goes nowhere else.
            if let Some(expected) = self.url.http_origin() {
                let asking = Origin::of(url);
                if asking.as_ref() != Some(&expected) {
                    let asking = asking.map_or_else(|| "another address".into(), |o| o.to_string());
                    return self.refuse_auth(format!(
                        "the remote redirected to {asking}, which asks for credentials; \
                         they are only sent to {expected}"
                    ));
                }
            }
            let Some(token) = &self.secrets.token else {
                let reason = if self.url.has_password() {
                    "the remote rejected the credentials in the repository address"
                } else {
                    "the remote asks for credentials and auth.token_file is not set"
                };
                return self.refuse_auth(reason.into());
            };
            if self.offered_before(Offered::Token) {
                return self.refuse_auth("the remote rejected the token (auth.token_file)".into());
            }
            return Cred::userpass_plaintext(user.unwrap_or("tend"), token);
        }
        self.refuse_auth("the remote asks for a kind of credential tend does not support".into())
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
            // TLS: libgit2 has verified the chain and the name against the
            // system's roots and auth.ca_file; keep its verdict.
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let (url_host, port) = self
            .url
            .ssh_host_port()
            .unwrap_or_else(|| (host.to_string(), 22));
        let name = host_name(&url_host, port);
        let untrusted = |reason: String| SourceError::Untrusted {
            url: self.url.redacted().to_string(),
            reason,
        };
        let (Some(key), Some((path, known))) = (hostkey.hostkey(), &self.known_hosts) else {
            return self.refuse(untrusted(format!(
                "host {name} offered no host key tend can check"
            )));
        };
        let offered = describe_key(key);
        let path = path.display();
        let reason = match known.check(&url_host, port, key) {
            HostKeyCheck::Trusted => return Ok(CertificateCheckStatus::CertificateOk),
            HostKeyCheck::Unknown => format!(
                "host {name} is not in known_hosts {path}; it offered {offered} \
                 (check that fingerprint with the host's owner before adding the key)"
            ),
            HostKeyCheck::Changed => format!(
                "host {name} offered {offered}, which is not the key known_hosts {path} \
                 lists for it; if the host's key was not replaced on purpose, someone \
                 may be intercepting the connection"
            ),
            HostKeyCheck::Revoked => {
                format!("host {name} offered {offered}, which known_hosts {path} marks as revoked")
            }
        };
        self.refuse(untrusted(reason))
    }

    /// Turns a libgit2 failure during this fetch into a typed error: our own
    /// reason when a callback refused, a timeout when the deadline passed,
    /// otherwise libgit2's message scrubbed of the address and secrets.
    pub(crate) fn error(&self, error: git2::Error) -> SourceError {
        if let Some(refusal) = self.refusal.borrow_mut().take() {
            return refusal;
        }
        // libssh2 reports its socket timeout with no code, and measures it
        // in whole seconds, so it can fire a little before the deadline.
        let socket_timeout = matches!(error.class(), ErrorClass::Ssh | ErrorClass::Net)
            && error.message().to_ascii_lowercase().contains("timed out");
        if self.timed_out.get()
            || Instant::now() >= self.deadline
            || error.code() == ErrorCode::Timeout
            || socket_timeout
        {
            return self.timeout_error();
        }
        let secrets: Vec<&str> = [&self.secrets.token, &self.secrets.passphrase]
            .into_iter()
            .filter_map(|s| s.as_deref())
            .collect();
        let message = self.url.scrub(error.message(), &secrets);
        let url = self.url.redacted().to_string();
        // libssh2 failing to use the key (a wrong passphrase, an unknown
        // format) is not a network problem, though libgit2 gives it no code.
        let ssh_auth = error.class() == ErrorClass::Ssh && message.contains("authenticat");
        // A certificate libgit2 did not verify comes back with a generic code.
        let bad_certificate = error.code() == ErrorCode::Certificate
            || (error.class() == ErrorClass::Ssl && message.contains("certificate"));
        match error.code() {
            ErrorCode::Auth => SourceError::Auth {
                url,
                reason: message,
            },
            _ if ssh_auth => SourceError::Auth {
                url,
                reason: self.ssh_key_problem(&message).unwrap_or(message),
            },
            _ if bad_certificate => SourceError::Untrusted {
                url,
                reason: format!(
                    "its TLS certificate could not be verified ({message}); \
                     a private CA belongs in auth.ca_file"
                ),
            },
            _ => SourceError::Fetch { url, message },
        }
    }
}

impl Session<'_> {
    /// libssh2 says "unsupported key format" for a wrong passphrase too;
    /// name the files to check instead.
    fn ssh_key_problem(&self, message: &str) -> Option<String> {
        let (path, _) = self.secrets.ssh_key.as_ref()?;
        if !message.contains("private key") {
            return None;
        }
        let cause = if self.secrets.passphrase.is_some() {
            "a wrong passphrase (auth.ssh_key_passphrase_file) or a key format libssh2 cannot read"
        } else {
            "a key format libssh2 cannot read"
        };
        Some(format!(
            "the ssh key {} (auth.ssh_key) could not be used: {cause} ({message})",
            path.display()
        ))
    }
}

fn auth_error(url: &RepoUrl, reason: String) -> SourceError {
    SourceError::Auth {
        url: url.redacted().to_string(),
        reason,
    }
}

/// The configured known_hosts file, which must exist; or `~/.ssh/known_hosts`,
/// which may be missing (then every host is unknown, and the refusal shows
/// the offered fingerprint).
fn load_known_hosts(url: &RepoUrl, auth: &Auth) -> Result<(PathBuf, KnownHosts), SourceError> {
    if let Some(path) = &auth.known_hosts {
        let text = read_secret_file(path, "auth.known_hosts")
            .map_err(|e| auth_error(url, e.to_string()))?;
        return Ok((path.clone(), KnownHosts::parse(&text)));
    }
    let home = std::env::var_os("HOME").ok_or_else(|| {
        auth_error(
            url,
            "ssh needs a known_hosts file (auth.known_hosts) and $HOME is not set".into(),
        )
    })?;
    let path = PathBuf::from(home).join(".ssh/known_hosts");
    let text = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        _ => read_secret_file(&path, "known_hosts").map_err(|e| auth_error(url, e.to_string()))?,
    };
    Ok((path, KnownHosts::parse(&text)))
}

/// Why a credential or trust file was not read: it names the setting and
/// the path, never the content.
#[derive(Debug, thiserror::Error)]
enum SecretFileError {
    #[error("{setting} {}: {source}", path.display())]
    Read {
        setting: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{setting} {} is larger than 1 MiB", path.display())]
    TooLarge { setting: String, path: PathBuf },
}

/// Reads a small credential or trust file.
fn read_secret_file(path: &Path, setting: &str) -> Result<String, SecretFileError> {
    const MAX: u64 = 1 << 20;
    let failed = |source| SecretFileError::Read {
        setting: setting.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(failed)?;
    if meta.len() > MAX {
        return Err(SecretFileError::TooLarge {
            setting: setting.to_string(),
            path: path.to_path_buf(),
        });
    }
    std::fs::read_to_string(path).map_err(failed)
}
