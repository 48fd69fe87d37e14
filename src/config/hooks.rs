//! Hooks as written in the config (a command, an HTTP call or a signal,
//! SPEC §3 and §10) and as the pass runs them, checked without I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::problem::Problems;
use crate::duration::Dur;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    pub run: Option<Vec<String>>,
    pub http: Option<HttpHookConfig>,
    pub signal: Option<SignalHookConfig>,
    pub timeout: Option<Dur>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpHookConfig {
    pub url: String,
    pub method: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalHookConfig {
    pub pidfile: PathBuf,
    pub signal: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Hook {
    pub action: HookAction,
    pub timeout: Duration,
}

/// What a hook does.
#[derive(Debug, Clone)]
pub enum HookAction {
    /// A command (argv), run without a shell.
    Run(Vec<String>),
    Http(HttpHook),
    /// A signal to the process whose id the pidfile holds.
    Signal {
        pidfile: PathBuf,
        signal: rustix::process::Signal,
    },
}

/// An `http://` URL, parsed once; no TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHook {
    /// As written, for messages.
    pub url: String,
    pub method: String,
    pub host: String,
    pub port: u16,
    /// Path and query, as sent on the request line.
    pub target: String,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The config's hooks that are sound; each problem of the others goes to
/// `problems` under its key (`hooks.NAME...`).
pub(super) fn resolve(
    hooks: Option<BTreeMap<String, HookConfig>>,
    problems: &mut Problems,
) -> BTreeMap<String, Hook> {
    let mut out = BTreeMap::new();
    for (name, h) in hooks.unwrap_or_default() {
        let key = format!("hooks.{name}");
        let action = match (h.run, h.http, h.signal) {
            (Some(run), None, None) if run.is_empty() => {
                Err((format!("{key}.run"), "`run` is empty".to_string()))
            }
            (Some(run), None, None) => Ok(HookAction::Run(run)),
            (None, Some(http), None) => parse_http(&http.url, http.method.as_deref())
                .map(HookAction::Http)
                .map_err(|m| (format!("{key}.http"), m.to_string())),
            (None, None, Some(s)) => parse_signal(s.signal.as_deref().unwrap_or("HUP"))
                .map(|signal| HookAction::Signal {
                    signal,
                    pidfile: s.pidfile,
                })
                .map_err(|m| (format!("{key}.signal"), m.to_string())),
            (None, None, None) => Err((key, "give one of `run`, `http` or `signal`".to_string())),
            _ => Err((
                key,
                "give only one of `run`, `http` or `signal`".to_string(),
            )),
        };
        match action {
            Ok(action) => {
                let timeout = h.timeout.map(|d| d.0).unwrap_or(DEFAULT_TIMEOUT);
                out.insert(name, Hook { action, timeout });
            }
            Err((key, message)) => problems.at(key, message),
        }
    }
    out
}

/// Why a hook's `http` or `signal` as written cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("method {0:?}: use an upper-case HTTP method such as POST")]
    Method(String),
    #[error("url {0:?} holds spaces or control characters")]
    Spaces(String),
    #[error("url {0:?}: https is not supported for hooks (no TLS); call the application over http:// on a local address")]
    Https(String),
    #[error("url {0:?}: must start with http://")]
    Scheme(String),
    #[error("url {0:?}: credentials in a hook URL are not supported")]
    Credentials(String),
    #[error("url {0:?}: unclosed `[` in the host")]
    Unclosed(String),
    #[error("url {0:?}: junk after the host")]
    Junk(String),
    #[error("url {0:?} names no host")]
    NoHost(String),
    #[error("url {url:?}: invalid port {port:?}")]
    Port { url: String, port: String },
    #[error(
        "unknown signal {0:?}: use HUP, USR1, USR2, INT, QUIT, TERM, WINCH, ALRM, CONT or KILL"
    )]
    Signal(String),
}

/// `http://host[:port][/path][?query]`; a fragment is dropped.
pub fn parse_http(url: &str, method: Option<&str>) -> Result<HttpHook, HookError> {
    let method = method.unwrap_or("POST").to_string();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HookError::Method(method));
    }
    let bad = |make: fn(String) -> HookError| make(url.to_string());
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(bad(HookError::Spaces));
    }
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(bad(HookError::Https))
        }
        _ => return Err(bad(HookError::Scheme)),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    if authority.contains('@') {
        return Err(bad(HookError::Credentials));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad(HookError::Unclosed))?;
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(bad(HookError::Junk)),
                },
            }
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(bad(HookError::NoHost));
    }
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| HookError::Port {
                url: url.to_string(),
                port: p.to_string(),
            })?,
    };
    let target = match target {
        "" => "/".to_string(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_string(),
    };
    Ok(HttpHook {
        url: url.to_string(),
        method,
        host: host.to_string(),
        port,
        target,
    })
}

/// A signal by name, with or without `SIG` (`HUP`, `SIGUSR1`).
pub fn parse_signal(name: &str) -> Result<rustix::process::Signal, HookError> {
    use rustix::process::Signal;
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    Ok(match bare {
        "HUP" => Signal::HUP,
        "INT" => Signal::INT,
        "QUIT" => Signal::QUIT,
        "TERM" => Signal::TERM,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "WINCH" => Signal::WINCH,
        "ALRM" => Signal::ALARM,
        "CONT" => Signal::CONT,
        "KILL" => Signal::KILL,
        _ => return Err(HookError::Signal(name.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls_parse_into_host_port_and_target() {
        let h = parse_http("http://127.0.0.1:8080/-/reload?x=1#frag", None).unwrap();
        assert_eq!(
            (
                h.host.as_str(),
                h.port,
                h.target.as_str(),
                h.method.as_str()
            ),
            ("127.0.0.1", 8080, "/-/reload?x=1", "POST")
        );
        let h = parse_http("HTTP://app", Some("PUT")).unwrap();
        assert_eq!(
            (h.host.as_str(), h.port, h.target.as_str()),
            ("app", 80, "/")
        );
        let h = parse_http("http://[::1]:9/x", None).unwrap();
        assert_eq!((h.host.as_str(), h.port), ("::1", 9));
        assert_eq!(parse_http("http://a?q", None).unwrap().target, "/?q");
        for (url, says) in [
            ("https://app/reload", "no TLS"),
            ("ftp://app", "must start with http://"),
            ("app:80/x", "must start with http://"),
            ("http://:80/x", "names no host"),
            ("http://a:0/", "invalid port"),
            ("http://a:99999/", "invalid port"),
            ("http://u:p@a/", "credentials"),
            ("http://[::1/", "unclosed"),
            ("http://a/b c", "spaces"),
        ] {
            let err = parse_http(url, None).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
        assert!(parse_http("http://a/", Some("post")).is_err());
    }

    #[test]
    fn signals_by_name_with_or_without_sig() {
        use rustix::process::Signal;
        assert_eq!(parse_signal("HUP").unwrap(), Signal::HUP);
        assert_eq!(parse_signal("sigusr1").unwrap(), Signal::USR1);
        assert!(parse_signal("SIGNOPE")
            .unwrap_err()
            .to_string()
            .contains("unknown signal"));
    }
}
