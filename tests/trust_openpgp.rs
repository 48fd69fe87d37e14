//! Trust in OpenPGP signatures (SPEC §9) with real GnuPG keys: commits
//! signed by `git commit -S`, tags by `git tag -s`, keys expired, primary
//! keys and subkeys revoked by gpg itself; where git's own verification has
//! a say, tend agrees with it.

mod util;

use std::path::PathBuf;

use util::signing::{
    assert_refused, file_in, git_verify, refused, signed_commit, with_tree, GpgKey,
};
use util::Env;

const DECL: &str = "kind: file\npath: v\nsource: v\n";

/// Writes `key`'s public key as the keyring and a config that trusts it.
fn trusting(env: &Env, key: &GpgKey, require: &str) -> PathBuf {
    let keyring = file_in(key.home.path(), "trusted.asc", &key.export());
    env.config(&format!(
        "source:\n  verify:\n    keyring: {}\n    require: {require}\n",
        keyring.display()
    ))
}

fn sync(env: &Env, config: &std::path::Path) -> util::Run {
    env.tend(&["sync", "-c", config.to_str().unwrap()])
}

/// gpg's time is in whole seconds: a revocation made after this is dated
/// after what was signed before it.
fn next_second() {
    std::thread::sleep(std::time::Duration::from_millis(1100));
}

#[test]
fn openpgp_signatures_checked_against_the_keyring() {
    let env = Env::new();
    let (Some(trusted), Some(other)) = (
        GpgKey::new("Trusted <trusted@example.com>"),
        GpgKey::new("Other <other@example.com>"),
    ) else {
        return;
    };
    let config = trusting(&env, &trusted, "commit");

    trusted.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let good = signed_commit(&env.repo, "one");
    let s = sync(&env, &config);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");
    let signer = env.status()["source"]["applied_signer"].clone();
    assert!(
        signer
            .as_str()
            .unwrap_or_default()
            .contains(&trusted.fingerprint),
        "{signer}"
    );

    other.sign_with(&env.repo);
    env.repo.write("v", "other");
    signed_commit(&env.repo, "other");
    let s = sync(&env, &config);
    assert_refused(&env, &s, "untrusted", "one");

    env.repo.write("v", "plain");
    env.repo.commit("plain");
    let s = sync(&env, &config);
    assert_refused(&env, &s, "unsigned", "one");

    // The trusted signature kept on another tree: git and tend both see
    // that it does not sign this content.
    trusted.sign_with(&env.repo);
    env.repo.git(&["reset", "-q", "--hard", &good]);
    env.repo.write("v", "two");
    let signed = signed_commit(&env.repo, "two");
    env.repo.write("v", "forged");
    env.repo.git(&["add", "-A"]);
    let tree = env.repo.git(&["write-tree"]);
    let forged = with_tree(&env.repo, &signed, &tree);
    assert!(env
        .repo
        .git(&["cat-file", "commit", &forged])
        .contains("gpgsig"));
    let (accepted, said) = git_verify(&env.repo, &trusted, "verify-commit", &forged);
    assert!(!accepted && said.contains("BAD signature"), "{said}");
    env.repo.git(&["update-ref", "refs/heads/main", &forged]);
    let s = sync(&env, &config);
    assert_refused(&env, &s, "bad_signature", "one");

    env.repo.git(&["update-ref", "refs/heads/main", &signed]);
    let s = sync(&env, &config);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "two");
    assert!(refused(&env).is_null());
}

#[test]
fn a_key_expired_before_the_commit_is_refused_as_expired() {
    let env = Env::new();
    let Some(old) = GpgKey::expired("Old <old@example.com>", "20200101T000000", "1d") else {
        return;
    };
    let config = trusting(&env, &old, "commit");
    old.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let rev = signed_commit(&env.repo, "one");
    let (accepted, said) = git_verify(&env.repo, &old, "verify-commit", &rev);
    assert!(!accepted && said.contains("expired"), "{said}");
    let s = sync(&env, &config);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(s.stderr.contains("expired"), "{s:?}");
    assert!(
        !env.at("v").exists(),
        "nothing of a refused revision applies"
    );
    assert_eq!(refused(&env)["reason"], "expired");
}

#[test]
fn require_tag_applies_a_tag_signed_with_openpgp_and_refuses_others() {
    let env = Env::new();
    let (Some(release), Some(other)) = (
        GpgKey::new("Release <release@example.com>"),
        GpgKey::new("Other <other@example.com>"),
    ) else {
        return;
    };
    let keyring = file_in(release.home.path(), "trusted.asc", &release.export());
    let config = env.config(&format!(
        "source:\n  ref: v1\n  verify:\n    keyring: {}\n    require: tag\n",
        keyring.display()
    ));
    release.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    // A signed commit under an unsigned tag is not enough.
    signed_commit(&env.repo, "one");
    env.repo.git(&["tag", "-a", "-m", "release one", "v1"]);
    let s = sync(&env, &config);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(s.stderr.contains("unsigned"), "{s:?}");
    assert!(!env.at("v").exists());

    other.sign_with(&env.repo);
    env.repo
        .git(&["tag", "-f", "-s", "-m", "release one", "v1"]);
    let s = sync(&env, &config);
    assert_eq!(s.code, 2, "{s:?}");
    assert_eq!(refused(&env)["reason"], "untrusted", "{s:?}");
    assert!(!env.at("v").exists());

    release.sign_with(&env.repo);
    env.repo
        .git(&["tag", "-f", "-s", "-m", "release one", "v1"]);
    let (accepted, said) = git_verify(&env.repo, &release, "verify-tag", "v1");
    assert!(accepted, "{said}");
    let s = sync(&env, &config);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");
    assert!(refused(&env).is_null());
    let signer = env.status()["source"]["applied_signer"].clone();
    assert!(
        signer.to_string().contains(&release.fingerprint),
        "{signer}"
    );
}

#[test]
fn a_revoked_primary_key_is_refused_as_git_refuses_it() {
    let env = Env::new();
    let Some(key) = GpgKey::new("Lost <lost@example.com>") else {
        return;
    };
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    signed_commit(&env.repo, "one");
    let s = sync(&env, &trusting(&env, &key, "commit"));
    assert_eq!(s.code, 0, "{s:?}");

    env.repo.write("v", "two");
    let rev = signed_commit(&env.repo, "two");
    next_second();
    // Compromised: what it signed even before the revocation is refused.
    key.import(&key.revocation("compromised"));
    let (accepted, said) = git_verify(&env.repo, &key, "verify-commit", &rev);
    assert!(!accepted && said.contains("revoked"), "{said}");
    let s = sync(&env, &trusting(&env, &key, "commit"));
    assert_refused(&env, &s, "revoked", "one");
    assert!(s.stderr.contains(&key.fingerprint), "{s:?}");
    assert!(s.stderr.contains("compromised"), "{s:?}");
}

#[test]
fn a_revoked_signing_subkey_is_refused_and_the_primary_key_still_signs() {
    let env = Env::new();
    let Some(key) = GpgKey::new("Sub <sub@example.com>") else {
        return;
    };
    let sub = key.add_signing_subkey();
    key.sign_with_key(&env.repo, &format!("{sub}!"));
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    signed_commit(&env.repo, "one");
    let s = sync(&env, &trusting(&env, &key, "commit"));
    assert_eq!(s.code, 0, "{s:?}");
    let signer = env.status()["source"]["applied_signer"].to_string();
    assert!(signer.contains(&sub), "signed by the subkey: {signer}");

    env.repo.write("v", "two");
    let rev = signed_commit(&env.repo, "two");
    next_second();
    // No reason given: as compromised.
    key.revoke_subkey("none");
    let (accepted, said) = git_verify(&env.repo, &key, "verify-commit", &rev);
    assert!(!accepted && said.contains("revoked"), "{said}");
    let config = trusting(&env, &key, "commit");
    let s = sync(&env, &config);
    assert_refused(&env, &s, "revoked", "one");
    assert!(s.stderr.contains(&sub), "{s:?}");

    key.sign_with_key(&env.repo, &format!("{}!", key.fingerprint));
    env.repo.write("v", "three");
    let rev = signed_commit(&env.repo, "three");
    let (accepted, said) = git_verify(&env.repo, &key, "verify-commit", &rev);
    assert!(accepted, "{said}");
    let s = sync(&env, &config);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "three");
}

#[test]
fn a_superseded_key_keeps_what_it_signed_before_its_revocation() {
    let env = Env::new();
    let Some(key) = GpgKey::new("Old <old@example.com>") else {
        return;
    };
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "before");
    let before = signed_commit(&env.repo, "before");
    next_second();
    // Made now, imported later: the key signs once more after its date.
    let revocation = key.revocation("superseded");
    next_second();
    env.repo.write("v", "after");
    let after = signed_commit(&env.repo, "after");
    key.import(&revocation);
    let config = trusting(&env, &key, "commit");

    env.repo.git(&["update-ref", "refs/heads/main", &before]);
    let s = sync(&env, &config);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "before");

    env.repo.git(&["update-ref", "refs/heads/main", &after]);
    let s = sync(&env, &config);
    assert_refused(&env, &s, "revoked", "before");
    assert!(s.stderr.contains("superseded"), "{s:?}");
}

#[test]
fn a_running_daemon_refuses_a_revoked_key_and_counts_it_as_revoked() {
    let env = Env::new();
    let Some(key) = GpgKey::new("Ops <ops@example.com>") else {
        return;
    };
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let good = signed_commit(&env.repo, "one");
    next_second();
    let revocation = key.revocation("retired");
    next_second();
    env.repo.write("v", "two");
    let late = signed_commit(&env.repo, "two");
    key.import(&revocation);
    let keyring = file_in(key.home.path(), "trusted.asc", &key.export());
    env.repo.git(&["update-ref", "refs/heads/main", &good]);

    let served = util::http::serve_polling(&env, &["--keyring", keyring.to_str().unwrap()]);
    assert!(served.ready(30), "{}", env.daemon_log());
    assert_eq!(env.read("v"), "one", "signed before its retirement");

    env.repo.git(&["update-ref", "refs/heads/main", &late]);
    served.refresh();
    assert!(
        util::wait_until(20, || refused(&env)["reason"] == "revoked"),
        "{}\n{}",
        env.status(),
        env.daemon_log()
    );
    assert_eq!(env.status()["source"]["applied_revision"], good);
    assert_eq!(env.read("v"), "one");
    let m = served.metrics();
    assert!(
        m.value("tend_source_refused_total", &[("reason", "revoked")])
            .is_some_and(|v| v >= 1.0),
        "{}",
        m.0
    );
    let api = served.get("/api/v1/status").json();
    assert_eq!(api["source"]["refused"]["reason"], "revoked", "{api}");
    assert!(
        api["source"]["refused"]["detail"]
            .to_string()
            .contains("retired"),
        "{api}"
    );
    let text = env.tend(&["status"]);
    assert!(
        text.stdout.contains("refused") && text.stdout.contains("(revoked)"),
        "{text:?}"
    );
}
