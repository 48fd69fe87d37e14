//! Repository addresses: which transport `--repo` names, the redacted form
//! shown in messages, the secrets to scrub from error text, and the mirror
//! directory name derived from the address.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::SourceError;

/// How libgit2 will reach the repository; decides which callbacks apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// file:// or a path on this host.
    Local,
    Http,
    Ssh,
    /// git:// (unauthenticated, no certificate).
    Git,
}

/// A parsed `--repo` value.
#[derive(Clone)]
pub(crate) struct RepoUrl {
    /// What libgit2 is given; may carry credentials, so never printed.
    raw: String,
    redacted: String,
    pub(crate) transport: Transport,
}

impl std::fmt::Debug for RepoUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl RepoUrl {
    /// Classifies `repo` the way git does: `scheme://...` is a URL;
    /// `[user@]host:path` with no `/` before the first `:` is scp-like ssh;
    /// anything else is a local path, made absolute against the current
    /// directory so the mirror does not depend on where tend was started.
    pub(crate) fn parse(repo: &str) -> Result<RepoUrl, SourceError> {
        let invalid = |reason: &str| SourceError::InvalidRepo {
            repo: redact_url(repo),
            reason: reason.to_string(),
        };
        if repo.trim().is_empty() {
            return Err(invalid("the repository address is empty"));
        }
        if repo.chars().any(|c| c.is_control()) {
            return Err(invalid(
                "the repository address contains control characters",
            ));
        }
        if let Some(i) = repo.find("://") {
            let scheme = repo[..i].to_ascii_lowercase();
            let transport = match scheme.as_str() {
                "file" => Transport::Local,
                "http" | "https" => Transport::Http,
                "ssh" | "git+ssh" | "ssh+git" => Transport::Ssh,
                "git" => Transport::Git,
                _ => return Err(invalid(&format!("unsupported scheme {scheme:?}"))),
            };
            if repo.len() == i + 3 {
                return Err(invalid("the URL has nothing after the scheme"));
            }
            return Ok(RepoUrl::new(repo.to_string(), transport));
        }
        if is_scp_like(repo) {
            return Ok(RepoUrl::new(repo.to_string(), Transport::Ssh));
        }
        let absolute = std::path::absolute(Path::new(repo)).map_err(|e| invalid(&e.to_string()))?;
        let raw = absolute
            .to_str()
            .ok_or_else(|| invalid("the path is not valid UTF-8"))?
            .to_string();
        Ok(RepoUrl::new(raw, Transport::Local))
    }

    fn new(raw: String, transport: Transport) -> RepoUrl {
        RepoUrl {
            redacted: redact_url(&raw),
            raw,
            transport,
        }
    }

    pub(crate) fn raw(&self) -> &str {
        &self.raw
    }

    /// The address as shown to people and stored in the mirror's config.
    pub(crate) fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The mirror directory name: a readable hint from the last path
    /// component, then a hash of the redacted address. Keying on the redacted
    /// form lets a rotated password reuse the mirror, while any other change of
    /// address gets a fresh one.
    pub(crate) fn mirror_dir_name(&self) -> String {
        let digest = Sha256::digest(self.redacted.as_bytes());
        let hint: String = self
            .redacted
            .trim_end_matches('/')
            .rsplit(['/', ':'])
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .take(40)
            .collect();
        let hint = hint.trim_start_matches('.');
        let hash = hex::encode(&digest[..12]);
        if hint.is_empty() {
            hash
        } else {
            format!("{hint}-{hash}")
        }
    }

    /// Whether the address itself carries a password (`user:password@`).
    pub(crate) fn has_password(&self) -> bool {
        userinfo(&self.raw).is_some_and(|u| u.contains(':'))
    }

    /// Host and port of an ssh address, for the known_hosts check.
    pub(crate) fn ssh_host_port(&self) -> Option<(String, u16)> {
        if self.transport != Transport::Ssh {
            return None;
        }
        let (host, port) = match self.raw.find("://") {
            Some(_) => authority_host_port(&self.raw)?,
            None => scp_host_port(&self.raw)?,
        };
        Some((host, port.unwrap_or(22)))
    }

    /// Scheme, host and port of an http(s) address: the only place a token
    /// may be sent.
    pub(crate) fn http_origin(&self) -> Option<Origin> {
        if self.transport != Transport::Http {
            return None;
        }
        Origin::of(&self.raw)
    }

    /// Replaces the raw address and any secret it carries in a message from
    /// libgit2, which may echo them back.
    pub(crate) fn scrub(&self, message: &str, extra_secrets: &[&str]) -> String {
        let mut out = message.replace(&self.raw, &self.redacted);
        let mut secrets: Vec<String> = extra_secrets.iter().map(|s| s.to_string()).collect();
        if let Some(userinfo) = userinfo(&self.raw) {
            if self.redacted != self.raw {
                secrets.push(userinfo.to_string());
                if let Some((_, password)) = userinfo.split_once(':') {
                    secrets.push(password.to_string());
                    secrets.push(percent_decode(password));
                }
            }
        }
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }
}

/// Where an http(s) request goes: what decides whether a credential may
/// follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an `http://` or `https://` URL; `None` for anything else.
    pub(crate) fn of(url: &str) -> Option<Origin> {
        let scheme = url[..url.find("://")?].to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return None,
        };
        let (host, port) = authority_host_port(url)?;
        Some(Origin {
            scheme,
            host: host.to_ascii_lowercase(),
            port: port.unwrap_or(default_port),
        })
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

/// Host and port of a `scheme://[user[:password]@]host[:port]/...` URL.
fn authority_host_port(url: &str) -> Option<(String, Option<u16>)> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) if !p.is_empty() => Some(p.parse().ok()?),
        _ => None,
    };
    Some((host.to_string(), port))
}

/// Host and port of an scp-like address, read the way libgit2 reads it:
/// `[user@]host:path`, `[user@][v6addr]:path`, and the bracketed form with a
/// port, `[[user@]host:port]:path`. A user is only what comes before an `@`
/// that precedes the first `:`.
fn scp_host_port(raw: &str) -> Option<(String, Option<u16>)> {
    if let Some(bracketed) = raw.strip_prefix('[') {
        let (inner, rest) = bracketed.split_once(']')?;
        rest.strip_prefix(':')?;
        let inner = inner.rsplit_once('@').map_or(inner, |(_, h)| h);
        // More than one `:` inside the brackets is an IPv6 address.
        return match inner.split_once(':') {
            Some((host, port)) if !port.contains(':') => {
                Some((host.to_string(), Some(port.parse().ok()?)))
            }
            _ => Some((inner.to_string(), None)),
        };
    }
    let colon = raw.find(':')?;
    let host_start = raw[..colon].find('@').map_or(0, |at| at + 1);
    let rest = &raw[host_start..];
    let host = match rest.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            after.strip_prefix(':')?;
            host
        }
        None => &rest[..rest.find(':')?],
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), None))
}

/// git's rule: a `:` before any `/` makes `host:path` an ssh address.
fn is_scp_like(repo: &str) -> bool {
    match (repo.find(':'), repo.find('/')) {
        (Some(0), _) => false,
        (Some(colon), Some(slash)) => colon < slash,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The `user[:password]` part of a `scheme://` URL, if any.
fn userinfo(url: &str) -> Option<&str> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    Some(&rest[..at])
}

/// Hides credentials in a repository address. Any `user:password@` or
/// `token@` of a `scheme://` URL becomes `***@`; only a bare ssh user name
/// (`ssh://git@host/...`, which is not a secret) is kept. scp-like addresses
/// cannot carry a password and are returned unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(userinfo) = userinfo(url) else {
        return url.to_string();
    };
    let scheme_end = url.find("://").expect("userinfo found a scheme");
    let scheme = url[..scheme_end].to_ascii_lowercase();
    let ssh = matches!(scheme.as_str(), "ssh" | "git+ssh" | "ssh+git");
    if ssh && !userinfo.contains(':') {
        return url.to_string();
    }
    let host_start = scheme_end + 3 + userinfo.len() + 1;
    format!("{}://***@{}", &url[..scheme_end], &url[host_start..])
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
