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

    /// Host and port of an ssh address, for the known_hosts check.
    pub(crate) fn ssh_host_port(&self) -> Option<(String, u16)> {
        if self.transport != Transport::Ssh {
            return None;
        }
        let authority = match self.raw.find("://") {
            Some(i) => {
                let rest = &self.raw[i + 3..];
                &rest[..rest.find('/').unwrap_or(rest.len())]
            }
            None => {
                // scp-like: everything before the first `:` outside brackets.
                let end = if self.raw.contains("@[") || self.raw.starts_with('[') {
                    self.raw.find("]:").map(|i| i + 1)?
                } else {
                    self.raw.find(':')?
                };
                &self.raw[..end]
            }
        };
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port) = match host_port.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed.split_once(']')?;
                (host, after.strip_prefix(':'))
            }
            None => match host_port.rsplit_once(':') {
                Some((h, p)) if self.raw.contains("://") => (h, Some(p)),
                _ => (host_port, None),
            },
        };
        let port = match port {
            Some(p) if !p.is_empty() => p.parse().ok()?,
            _ => 22,
        };
        Some((host.to_string(), port))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password_and_token_but_keeps_ssh_user() {
        let r = redact_url("https://alice:s3cret-token@git.example.com/ops/hosts.git");
        assert_eq!(r, "https://***@git.example.com/ops/hosts.git");
        assert!(!r.contains("s3cret") && !r.contains("alice"));
        assert_eq!(
            redact_url("https://ghp_abc123@github.com/o/r"),
            "https://***@github.com/o/r"
        );
        assert_eq!(
            redact_url("ssh://git@host/o/r.git"),
            "ssh://git@host/o/r.git"
        );
        assert_eq!(
            redact_url("ssh://git:pw@host/o/r.git"),
            "ssh://***@host/o/r.git"
        );
        assert_eq!(redact_url("git@host:o/r.git"), "git@host:o/r.git");
        assert_eq!(redact_url("https://host/a@b"), "https://host/a@b");
        assert_eq!(redact_url("/srv/repo"), "/srv/repo");
    }

    #[test]
    fn classifies_addresses_like_git() {
        let t = |s: &str| RepoUrl::parse(s).unwrap().transport;
        assert_eq!(t("https://h/r.git"), Transport::Http);
        assert_eq!(t("ssh://git@h/r.git"), Transport::Ssh);
        assert_eq!(t("git@h:r.git"), Transport::Ssh);
        assert_eq!(t("file:///srv/r"), Transport::Local);
        assert_eq!(t("./dir:with-colon"), Transport::Local);
        assert_eq!(t("git://h/r"), Transport::Git);
        assert!(RepoUrl::parse("ftp://h/r").is_err());
        assert!(RepoUrl::parse("").is_err());
        assert!(RepoUrl::parse("https://h/r\nx").is_err());
    }

    #[test]
    fn ssh_host_and_port() {
        let hp = |s: &str| RepoUrl::parse(s).unwrap().ssh_host_port();
        assert_eq!(hp("git@h.example:o/r.git"), Some(("h.example".into(), 22)));
        assert_eq!(
            hp("ssh://git@h.example:2222/o/r.git"),
            Some(("h.example".into(), 2222))
        );
        assert_eq!(
            hp("ssh://h.example/o/r.git"),
            Some(("h.example".into(), 22))
        );
        assert_eq!(hp("ssh://git@[::1]:2200/r"), Some(("::1".into(), 2200)));
        assert_eq!(hp("https://h/r"), None);
    }

    #[test]
    fn relative_paths_become_absolute() {
        let url = RepoUrl::parse("some/repo").unwrap();
        assert!(Path::new(url.raw()).is_absolute());
        assert!(url.raw().ends_with("some/repo"));
    }

    #[test]
    fn mirror_name_follows_the_address_not_the_password() {
        let a = RepoUrl::parse("https://u:one@h/ops/hosts.git").unwrap();
        let b = RepoUrl::parse("https://u:two@h/ops/hosts.git").unwrap();
        let c = RepoUrl::parse("https://h/ops/other.git").unwrap();
        assert_eq!(a.mirror_dir_name(), b.mirror_dir_name());
        assert_ne!(a.mirror_dir_name(), c.mirror_dir_name());
        assert!(a.mirror_dir_name().starts_with("hosts.git-"));
        assert!(!a.mirror_dir_name().contains("one"));
    }

    #[test]
    fn scrub_removes_raw_secrets_from_messages() {
        let url = RepoUrl::parse("https://alice:p%40ss@h/r.git").unwrap();
        let msg = "failed https://alice:p%40ss@h/r.git with p@ss and tok-9";
        let scrubbed = url.scrub(msg, &["tok-9"]);
        assert!(!scrubbed.contains("p%40ss") && !scrubbed.contains("p@ss"));
        assert!(!scrubbed.contains("tok-9"));
        assert!(scrubbed.contains("https://***@h/r.git"));
    }
}
