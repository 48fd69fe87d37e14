//! Repository addresses: transports, redaction, scp-like forms, origins,
//! mirror names and scrubbing of messages.

use std::path::Path;

use crate::source::url::{redact_url, Origin, RepoUrl, Transport};

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
fn scp_like_addresses_read_as_libgit2_reads_them() {
    let hp = |s: &str| RepoUrl::parse(s).unwrap().ssh_host_port();
    assert_eq!(hp("h.example:o/r.git"), Some(("h.example".into(), 22)));
    assert_eq!(
        hp("git@h.example:/srv/r.git"),
        Some(("h.example".into(), 22))
    );
    assert_eq!(hp("git@[::1]:r.git"), Some(("::1".into(), 22)));
    assert_eq!(hp("[::1]:r.git"), Some(("::1".into(), 22)));
    // The bracketed form is how an scp-like address carries a port.
    assert_eq!(
        hp("[git@127.0.0.1:2222]:/srv/r.git"),
        Some(("127.0.0.1".into(), 2222))
    );
    assert_eq!(
        hp("[h.example:2200]:r.git"),
        Some(("h.example".into(), 2200))
    );
    // An `@` after the first `:` belongs to the path, not to a user.
    assert_eq!(hp("h.example:team@2/r.git"), Some(("h.example".into(), 22)));
    for scp in ["git@h:r", "[git@h:22]:r", "h:r", "git@[::1]:r"] {
        assert_eq!(
            RepoUrl::parse(scp).unwrap().transport,
            Transport::Ssh,
            "{scp}"
        );
    }
}

#[test]
fn http_origins_compare_scheme_host_and_port() {
    let o = |s: &str| RepoUrl::parse(s).unwrap().http_origin().unwrap();
    assert_eq!(
        o("https://h.example/r"),
        o("https://tok@H.example:443/other")
    );
    assert_eq!(o("http://h.example/r"), o("http://h.example:80/"));
    assert_ne!(o("https://h.example/r"), o("https://h.example:8443/r"));
    assert_ne!(o("https://h.example/r"), o("http://h.example/r"));
    assert_ne!(o("https://h.example/r"), o("https://evil.example/r"));
    assert_eq!(
        o("https://u:p@[::1]:8443/r").to_string(),
        "https://[::1]:8443"
    );
    assert!(!o("https://u:secret@h/r").to_string().contains("secret"));
    assert_eq!(RepoUrl::parse("ssh://h/r").unwrap().http_origin(), None);
    // A redirect target is compared by the same rule.
    assert_eq!(
        Origin::of("https://h.example:443/r.git/info/refs"),
        Some(o("https://h.example/r"))
    );
    assert_eq!(Origin::of("ftp://h/r"), None);
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
