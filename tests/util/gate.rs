//! The one gate for tests that need a tool, a server or a privilege: under
//! CI (`CI` set) or as root (scripts/test installs what the tests need then)
//! a missing one fails the test; elsewhere the test may skip, saying why.
//! Integration tests reach it as `util::strict`/`util::can_run`, unit tests
//! include this same file as `crate::test_gate`.

#![allow(dead_code)]

/// Whether a test must fail, not skip, when what it needs is missing.
pub fn strict() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty()) || rustix::process::geteuid().is_root()
}

/// Skips (returns false, printing why) only where skipping is allowed; fails
/// the test under [`strict`].
pub fn can_run(ok: bool, why: &str) -> bool {
    assert!(
        ok || !strict(),
        "{why} (CI or root: this must not be skipped)"
    );
    if !ok {
        eprintln!("skipped: {why}");
    }
    ok
}

/// Whether this test runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
