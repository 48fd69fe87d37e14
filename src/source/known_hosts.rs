//! OpenSSH known_hosts, parsed by tend itself so that ssh remotes are
//! checked strictly: a host key is accepted only if a line for that host
//! lists exactly that key, and refused when unknown, changed or revoked.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The verdict on a host key presented by a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostKeyCheck {
    Trusted,
    /// No line names this host.
    Unknown,
    /// Lines name the host, but with other keys: maybe an attack.
    Changed,
    /// The key is marked `@revoked`.
    Revoked,
}

struct Line {
    patterns: Vec<String>,
    key: Vec<u8>,
    revoked: bool,
}

pub(crate) struct KnownHosts {
    lines: Vec<Line>,
}

impl KnownHosts {
    /// Parses the text of a known_hosts file. Malformed lines and
    /// `@cert-authority` lines (host certificates are not supported) are
    /// skipped: they can only make a host unknown, never trusted.
    pub(crate) fn parse(text: &str) -> KnownHosts {
        let mut lines = Vec::new();
        for raw in text.lines() {
            let raw = raw.trim();
            if raw.is_empty() || raw.starts_with('#') {
                continue;
            }
            let mut fields = raw.split_whitespace();
            let mut first = fields.next();
            let mut revoked = false;
            match first {
                Some("@revoked") => {
                    revoked = true;
                    first = fields.next();
                }
                Some(marker) if marker.starts_with('@') => continue,
                _ => {}
            }
            let (Some(hosts), Some(_key_type), Some(key)) = (first, fields.next(), fields.next())
            else {
                continue;
            };
            let Some(key) = base64_decode(key) else {
                continue;
            };
            let patterns = hosts.split(',').map(str::to_string).collect();
            lines.push(Line {
                patterns,
                key,
                revoked,
            });
        }
        KnownHosts { lines }
    }

    /// Checks the raw key blob a server at `host`:`port` presented.
    pub(crate) fn check(&self, host: &str, port: u16, key: &[u8]) -> HostKeyCheck {
        let name = host_name(host, port);
        if self.lines.iter().any(|l| l.revoked && l.key == key) {
            return HostKeyCheck::Revoked;
        }
        let mut named = false;
        for line in self
            .lines
            .iter()
            .filter(|l| !l.revoked && matches_host(&l.patterns, &name))
        {
            if line.key == key {
                return HostKeyCheck::Trusted;
            }
            named = true;
        }
        if named {
            HostKeyCheck::Changed
        } else {
            HostKeyCheck::Unknown
        }
    }
}

/// A line applies when some pattern matches and no negated one does.
fn matches_host(patterns: &[String], name: &str) -> bool {
    let mut matched = false;
    for pattern in patterns {
        if let Some(negated) = pattern.strip_prefix('!') {
            if glob(&negated.to_ascii_lowercase(), name) {
                return false;
            }
        } else if let Some(hashed) = pattern.strip_prefix("|1|") {
            matched |= hashed_matches(hashed, name);
        } else {
            matched |= glob(&pattern.to_ascii_lowercase(), name);
        }
    }
    matched
}

/// `|1|salt|hash`: the hash is HMAC-SHA1 of the host name keyed by the salt.
fn hashed_matches(salt_and_hash: &str, name: &str) -> bool {
    let Some((salt, hash)) = salt_and_hash.split_once('|') else {
        return false;
    };
    let (Some(salt), Some(hash)) = (base64_decode(salt), base64_decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// OpenSSH host patterns: `*` any run of characters, `?` exactly one.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// How OpenSSH names a host in known_hosts: `host` on port 22, otherwise
/// `[host]:port`.
pub(crate) fn host_name(host: &str, port: u16) -> String {
    let host = host.to_ascii_lowercase();
    if port == 22 {
        host
    } else {
        format!("[{host}]:{port}")
    }
}

/// The key's algorithm and OpenSSH fingerprint, as `ssh-keygen -l` prints
/// them: `ssh-ed25519 SHA256:<unpadded base64 of the blob's SHA-256>`.
pub(crate) fn describe_key(blob: &[u8]) -> String {
    let digest = Sha256::digest(blob);
    let fingerprint = base64_encode(&digest);
    let fingerprint = fingerprint.trim_end_matches('=');
    match key_type(blob) {
        Some(kind) => format!("{kind} key SHA256:{fingerprint}"),
        None => format!("key SHA256:{fingerprint}"),
    }
}

/// The algorithm name a key blob starts with (a length-prefixed string).
fn key_type(blob: &[u8]) -> Option<&str> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(blob.get(4..4 + len)?).ok()?;
    name.bytes().all(|b| b.is_ascii_graphic()).then_some(name)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let value = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Two ed25519 public keys (only their blobs matter here).
    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIHRO8BwJ3oxiNkPgzPq9eSjYzBgzfwRrXUAHzmUPvLDl";

    fn blob(key: &str) -> Vec<u8> {
        base64_decode(key).unwrap()
    }

    #[test]
    fn trusts_only_the_listed_key_for_the_host() {
        let kh = KnownHosts::parse(&format!(
            "# comment\ngit.example.com,10.0.0.5 ssh-ed25519 {KEY_A} ops\n[git.example.com]:2222 ssh-ed25519 {KEY_B}\n"
        ));
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("GIT.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("10.0.0.5", 22, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_B)),
            HostKeyCheck::Changed
        );
        assert_eq!(
            kh.check("git.example.com", 2222, &blob(KEY_B)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("git.example.com", 2222, &blob(KEY_A)),
            HostKeyCheck::Changed
        );
        assert_eq!(
            kh.check("other.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Unknown
        );
    }

    #[test]
    fn wildcards_negation_and_revocation() {
        let kh = KnownHosts::parse(&format!(
            "*.example.com,!evil.example.com ssh-ed25519 {KEY_A}\n@revoked * ssh-ed25519 {KEY_B}\n@cert-authority * ssh-ed25519 {KEY_A}\n"
        ));
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("evil.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Unknown
        );
        assert_eq!(
            kh.check("git.example.org", 22, &blob(KEY_A)),
            HostKeyCheck::Unknown
        );
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_B)),
            HostKeyCheck::Revoked
        );
    }

    #[test]
    fn hashed_host_names() {
        // HMAC-SHA1 of "git.example.com" keyed by the bytes 0..20.
        let kh = KnownHosts::parse(&format!(
            "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|5DHGyoq+K/vX4lJK0U2p7IteoFw= ssh-ed25519 {KEY_A}\n"
        ));
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("git.example.org", 22, &blob(KEY_A)),
            HostKeyCheck::Unknown
        );
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_B)),
            HostKeyCheck::Changed
        );
    }

    #[test]
    fn hashed_by_ssh_keygen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(
            &file,
            format!("[git.example.com]:2222 ssh-ed25519 {KEY_A}\n"),
        )
        .unwrap();
        let hashed = std::process::Command::new("ssh-keygen")
            .args(["-q", "-H", "-f"])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if !hashed.is_ok_and(|s| s.success()) {
            return; // no OpenSSH here; hashed_host_names covers the format
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("|1|"),
            "ssh-keygen -H hashed the name: {text}"
        );
        let kh = KnownHosts::parse(&text);
        assert_eq!(
            kh.check("git.example.com", 2222, &blob(KEY_A)),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("git.example.com", 22, &blob(KEY_A)),
            HostKeyCheck::Unknown
        );
    }

    #[test]
    fn base64_round_trip_of_known_values() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert!(base64_decode("a$b").is_none());
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_encode(b"hello!"), "aGVsbG8h");
        assert_eq!(base64_encode(b"hi"), "aGk=");
        for key in [KEY_A, KEY_B] {
            assert_eq!(base64_encode(&blob(key)), key);
        }
    }

    #[test]
    fn fingerprints_match_ssh_keygen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key.pub");
        std::fs::write(&file, format!("ssh-ed25519 {KEY_A} test\n")).unwrap();
        let described = describe_key(&blob(KEY_A));
        assert!(
            described.starts_with("ssh-ed25519 key SHA256:"),
            "{described}"
        );
        let Ok(out) = std::process::Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(&file)
            .output()
        else {
            return; // no OpenSSH here; the format check above still ran
        };
        let printed = String::from_utf8_lossy(&out.stdout);
        let theirs = printed.split_whitespace().nth(1).unwrap();
        assert!(described.ends_with(theirs), "{described} vs {printed}");
    }

    #[test]
    fn host_names_as_known_hosts_writes_them() {
        assert_eq!(host_name("Git.Example.com", 22), "git.example.com");
        assert_eq!(host_name("127.0.0.1", 2222), "[127.0.0.1]:2222");
    }
}
