//! git's `allowed_signers` file (ssh-keygen's ALLOWED SIGNERS format):
//! `principals [options] keytype base64 [comment]`, with the options
//! `namespaces="..."`, `valid-after=...`, `valid-before=...`;
//! `cert-authority` is refused by name, as tend verifies plain keys only.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::ssh_key::public::KeyData;
use ::ssh_key::PublicKey;

use super::VerifyError;

/// One allowed key.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    pub principals: String,
    pub key: KeyData,
    /// `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    pub valid_after: Option<SystemTime>,
    pub valid_before: Option<SystemTime>,
    /// Where it was written, for messages.
    pub line: usize,
}

impl AllowedSigner {
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|n| n.iter().any(|p| pattern_matches(p, namespace)))
    }

    /// Whether `at` is inside the key's validity window.
    pub fn valid_at(&self, at: SystemTime) -> bool {
        self.valid_after.is_none_or(|a| at >= a) && self.valid_before.is_none_or(|b| at < b)
    }
}

#[derive(Debug, Clone)]
pub struct AllowedSigners {
    pub path: PathBuf,
    pub signers: Vec<AllowedSigner>,
}

/// Why a line of the file is refused.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("unterminated quote")]
    Quote,
    #[error("no principals")]
    NoPrincipals,
    #[error("no key after the principals")]
    NoKey,
    #[error("cert-authority entries are not supported: list the signing keys themselves")]
    CertAuthority,
    #[error("unknown or incomplete option {0:?}")]
    Option(String),
    #[error("empty option in {0:?}")]
    EmptyOption(String),
    #[error("no key after the options")]
    NoKeyAfterOptions,
    #[error("key type without its key")]
    KeyType,
    #[error("invalid {kind} key: {source}")]
    Key {
        kind: String,
        source: ::ssh_key::Error,
    },
    #[error("invalid time {0:?}: use YYYYMMDD[HHMM[SS]][Z]")]
    Time(String),
}

/// Larger than any sensible list of keys; a mistaken path to a huge file
/// is refused instead of read.
const MAX_FILE: u64 = 4 << 20;

impl AllowedSigners {
    pub fn load(path: &Path) -> Result<AllowedSigners, VerifyError> {
        let text = super::read_small(path, MAX_FILE)?;
        let mut signers = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let signer = parse_line(line, i + 1).map_err(|source| VerifyError::Line {
                path: path.to_path_buf(),
                line: i + 1,
                source,
            })?;
            signers.push(signer);
        }
        Ok(AllowedSigners {
            path: path.to_path_buf(),
            signers,
        })
    }

    /// The entries for `key`, in file order.
    pub fn entries_for<'a>(
        &'a self,
        key: &'a KeyData,
    ) -> impl Iterator<Item = &'a AllowedSigner> + 'a {
        self.signers.iter().filter(move |s| &s.key == key)
    }
}

fn parse_line(line: &str, number: usize) -> Result<AllowedSigner, LineError> {
    let mut tokens = tokens(line)?.into_iter();
    let principals = tokens.next().ok_or(LineError::NoPrincipals)?;
    let mut next = tokens.next().ok_or(LineError::NoKey)?;
    let mut namespaces = None;
    let mut valid_after = None;
    let mut valid_before = None;
    if !is_key_type(&next) {
        for option in split_options(&next)? {
            let (name, value) = match option.split_once('=') {
                Some((n, v)) => (n.to_ascii_lowercase(), Some(unquote(v))),
                None => (option.to_ascii_lowercase(), None),
            };
            match (name.as_str(), value) {
                ("cert-authority", _) => return Err(LineError::CertAuthority),
                ("namespaces", Some(v)) => {
                    namespaces = Some(v.split(',').map(|s| s.trim().to_string()).collect())
                }
                ("valid-after", Some(v)) => valid_after = Some(parse_time(&v)?),
                ("valid-before", Some(v)) => valid_before = Some(parse_time(&v)?),
                (other, _) => return Err(LineError::Option(other.to_string())),
            }
        }
        next = tokens.next().ok_or(LineError::NoKeyAfterOptions)?;
    }
    let base64 = tokens.next().ok_or(LineError::KeyType)?;
    let key =
        PublicKey::from_openssh(&format!("{next} {base64}")).map_err(|source| LineError::Key {
            kind: next.clone(),
            source,
        })?;
    Ok(AllowedSigner {
        principals: unquote(&principals),
        key: key.key_data().clone(),
        namespaces,
        valid_after,
        valid_before,
        line: number,
    })
}

fn is_key_type(token: &str) -> bool {
    token.starts_with("ssh-") || token.starts_with("ecdsa-") || token.starts_with("sk-")
}

/// Splits at spaces outside double quotes.
fn tokens(line: &str) -> Result<Vec<String>, LineError> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if quoted {
        return Err(LineError::Quote);
    }
    if !current.is_empty() {
        out.push(current);
    }
    Ok(out)
}

/// Splits options at commas outside double quotes.
fn split_options(s: &str) -> Result<Vec<String>, LineError> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    out.push(current);
    match out.iter().any(String::is_empty) {
        true => Err(LineError::EmptyOption(s.to_string())),
        false => Ok(out),
    }
}

fn unquote(s: &str) -> String {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

/// `YYYYMMDD[HHMM[SS]][Z]`: with `Z` in UTC, otherwise in local time, as
/// ssh-keygen reads it.
fn parse_time(s: &str) -> Result<SystemTime, LineError> {
    let bad = || LineError::Time(s.to_string());
    let (digits, utc) = match s.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (s, false),
    };
    if !matches!(digits.len(), 8 | 12 | 14) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n = |from: usize, to: usize| -> i64 {
        digits
            .get(from..to)
            .and_then(|d| d.parse().ok())
            .unwrap_or(0)
    };
    let (year, month, day) = (n(0, 4), n(4, 6), n(6, 8));
    let (hour, minute, second) = (n(8, 10), n(10, 12), n(12, 14));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(bad());
    }
    let secs = if utc {
        days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    } else {
        local_seconds(year, month, day, hour, minute, second).ok_or_else(bad)?
    };
    Ok(match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::from_secs(s),
        Err(_) => UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn local_seconds(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    // SAFETY: `tm` is plain data, zeroed and then filled in; mktime reads
    // and normalises only that struct and the process's time zone.
    let t = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = (y - 1900) as libc::c_int;
        tm.tm_mon = (mo - 1) as libc::c_int;
        tm.tm_mday = d as libc::c_int;
        tm.tm_hour = h as libc::c_int;
        tm.tm_min = mi as libc::c_int;
        tm.tm_sec = s as libc::c_int;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    (t != -1).then_some(t)
}

/// ssh-keygen's patterns: `*` any run, `?` any one character.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn reads_principals_options_and_key() {
        let s = parse_line(
            &format!(r#"alice@example.com,bob namespaces="git,file",valid-after="20240101Z",valid-before=20250101120000Z {KEY} laptop"#),
            1,
        )
        .unwrap();
        assert_eq!(s.principals, "alice@example.com,bob");
        assert!(s.allows_namespace("git"));
        assert!(!s.allows_namespace("mail"));
        let day = |d: u64| UNIX_EPOCH + Duration::from_secs(d * 86400);
        assert_eq!(s.valid_after, Some(day(19723)));
        assert_eq!(
            s.valid_before,
            Some(day(20089) + Duration::from_secs(12 * 3600))
        );
        assert!(s.valid_at(day(19800)));
        assert!(!s.valid_at(day(19000)));
        assert!(!s.valid_at(day(20100)));
        let plain = parse_line(&format!("* {KEY}"), 2).unwrap();
        assert!(plain.allows_namespace("git"));
        assert!(plain.valid_at(SystemTime::now()));
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let err = |line: &str| parse_line(line, 1).unwrap_err().to_string();
        let e = err(&format!("ca@x cert-authority {KEY}"));
        assert!(e.contains("cert-authority"), "{e}");
        assert!(err(&format!("a valid-after=2024 {KEY}")).contains("invalid time"));
        assert!(err("a ssh-ed25519 AAAA").contains("invalid ssh-ed25519 key"));
        assert!(parse_line("a", 1).is_err());
        assert!(err(&format!("a frobnicate {KEY}")).contains("frobnicate"));
    }

    #[test]
    fn patterns() {
        assert!(pattern_matches("g*", "git"));
        assert!(pattern_matches("g?t", "git"));
        assert!(!pattern_matches("file", "git"));
    }
}
