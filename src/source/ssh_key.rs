//! What tend needs to know about an ssh private key before handing it to
//! libssh2: whether it is encrypted, so that a missing passphrase is
//! reported as such rather than as libssh2's "unsupported key format".

use super::known_hosts::base64_decode;

const OPENSSH_BEGIN: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
const OPENSSH_END: &str = "-----END OPENSSH PRIVATE KEY-----";
const OPENSSH_MAGIC: &[u8] = b"openssh-key-v1\0";

/// Whether the key needs a passphrase: `Some(true)` or `Some(false)` for the
/// formats tend reads (OpenSSH's own, and PEM with or without encryption
/// headers), `None` when the text is not a private key tend recognizes.
pub(crate) fn is_encrypted(text: &str) -> Option<bool> {
    if let Some(start) = text.find(OPENSSH_BEGIN) {
        let body = &text[start + OPENSSH_BEGIN.len()..];
        let body = &body[..body.find(OPENSSH_END)?];
        let compact: String = body.split_whitespace().collect();
        let blob = base64_decode(&compact)?;
        let rest = blob.strip_prefix(OPENSSH_MAGIC)?;
        // The first field is the cipher name; "none" means unencrypted.
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let cipher = rest.get(4..4 + len)?;
        return Some(cipher != b"none");
    }
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return Some(true);
    }
    if text.contains("PRIVATE KEY-----") {
        return Some(text.contains("Proc-Type: 4,ENCRYPTED"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keygen(passphrase: &str, format: Option<&str>) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let mut cmd = std::process::Command::new("ssh-keygen");
        cmd.args(["-q", "-t", "ecdsa", "-N", passphrase, "-f"])
            .arg(&path);
        if let Some(format) = format {
            cmd.args(["-m", format]);
        }
        let ok = cmd.output().ok()?.status.success();
        ok.then(|| std::fs::read_to_string(&path).unwrap())
    }

    #[test]
    fn tells_encrypted_keys_from_plain_ones() {
        let Some(plain) = keygen("", None) else {
            return; // no OpenSSH here
        };
        assert_eq!(is_encrypted(&plain), Some(false));
        assert_eq!(
            is_encrypted(&keygen("pass phrase", None).unwrap()),
            Some(true)
        );
        assert_eq!(is_encrypted(&keygen("", Some("PEM")).unwrap()), Some(false));
        assert_eq!(
            is_encrypted(&keygen("pass phrase", Some("PEM")).unwrap()),
            Some(true)
        );
        assert_eq!(
            is_encrypted(&keygen("pass phrase", Some("PKCS8")).unwrap()),
            Some(true)
        );
    }

    #[test]
    fn anything_else_is_not_recognized() {
        assert_eq!(is_encrypted(""), None);
        assert_eq!(is_encrypted("ssh-ed25519 AAAA... a public key"), None);
        assert_eq!(
            is_encrypted(&format!("{OPENSSH_BEGIN}\n!!!!\n{OPENSSH_END}\n")),
            None
        );
    }
}
