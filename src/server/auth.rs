//! Who may ask for what: the loopback check and bearer token of refresh,
//! and the signature checks of webhooks, all compared in constant time.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::{header, Extensions, HeaderMap};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Headers a reverse proxy adds: a request that carries one came from
/// somewhere else, even if the proxy itself connects over loopback.
const FORWARDING: [&str; 4] = [
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "x-forwarded-host",
];

/// True only for a direct client on a loopback address. A request without
/// a known peer (no ConnectInfo) is not trusted.
pub fn is_loopback(extensions: &Extensions, headers: &HeaderMap) -> bool {
    let direct = !FORWARDING.iter().any(|h| headers.contains_key(*h));
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    direct && peer.is_some_and(|ip| ip.is_loopback() || ip.to_canonical().is_loopback())
}

/// Equal length and equal bytes, without an early exit on the first
/// differing byte.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// `Authorization: Bearer <token>` naming `token`.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, given)) = value.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && same(given.trim().as_bytes(), token.as_bytes())
}

/// Whether `signature_hex` is the HMAC-SHA256 of `body` under `secret`.
/// Malformed hex is simply a wrong signature.
pub fn hmac_sha256_matches(secret: &[u8], body: &[u8], signature_hex: &str) -> bool {
    let Ok(signature) = hex::decode(signature_hex.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    // verify_slice compares in constant time.
    mac.verify_slice(&signature).is_ok()
}

/// The value of a header as text, if present and printable.
pub fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn sign(secret: &[u8], body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn hmac_accepts_only_the_right_secret_and_body() {
        let sig = sign(b"s3cret", b"{}");
        assert!(hmac_sha256_matches(b"s3cret", b"{}", &sig));
        assert!(hmac_sha256_matches(b"s3cret", b"{}", &sig.to_uppercase()));
        assert!(!hmac_sha256_matches(b"other", b"{}", &sig));
        assert!(!hmac_sha256_matches(b"s3cret", b"{ }", &sig));
        assert!(!hmac_sha256_matches(b"s3cret", b"{}", &sig[..62]));
        assert!(!hmac_sha256_matches(b"s3cret", b"{}", "zz"));
        assert!(!hmac_sha256_matches(b"s3cret", b"{}", ""));
    }

    #[test]
    fn loopback_needs_a_direct_loopback_peer() {
        let mut ext = Extensions::new();
        let mut headers = HeaderMap::new();
        assert!(!is_loopback(&ext, &headers), "an unknown peer was trusted");
        ext.insert(ConnectInfo("127.0.0.1:5000".parse::<SocketAddr>().unwrap()));
        assert!(is_loopback(&ext, &headers));
        headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        assert!(
            !is_loopback(&ext, &headers),
            "a proxied request was trusted"
        );
        let mut v6 = Extensions::new();
        v6.insert(ConnectInfo(
            "[::ffff:127.0.0.1]:5000".parse::<SocketAddr>().unwrap(),
        ));
        assert!(is_loopback(&v6, &HeaderMap::new()));
        let mut remote = Extensions::new();
        remote.insert(ConnectInfo("192.0.2.7:5000".parse::<SocketAddr>().unwrap()));
        assert!(!is_loopback(&remote, &HeaderMap::new()));
    }

    #[test]
    fn bearer_must_match_exactly() {
        let mut h = HeaderMap::new();
        assert!(!bearer_matches(&h, "tok"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer tok"),
        );
        assert!(bearer_matches(&h, "tok"));
        assert!(!bearer_matches(&h, "tok2"));
        assert!(!bearer_matches(&h, "to"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic tok"));
        assert!(!bearer_matches(&h, "tok"));
    }
}
