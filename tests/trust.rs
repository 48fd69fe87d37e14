//! Trust in the source (SPEC §9) with real keys: commits signed by `git
//! commit -S` with ssh-keygen keys and GnuPG keys, tags by `git tag -s`;
//! each refusal with its reason, and the anti-rollback mark.

mod util;

use util::signing::{file_in, signed_commit, with_tree, GpgKey, SshKey};
use util::{Env, Run};

const DECL: &str = "kind: file\npath: v\nsource: v\n";

fn refused(env: &Env) -> serde_json::Value {
    env.status()["source"]["refused"].clone()
}

/// A sync refused before any change: exit 2, the reason said, the root as
/// it was.
fn assert_refused(env: &Env, run: &Run, reason: &str, kept: &str) {
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(reason), "{reason}: {run:?}");
    assert_eq!(env.read("v"), kept, "nothing of a refused revision applies");
    assert_eq!(refused(env)["reason"], reason, "{}", env.status());
}

#[test]
fn ssh_signatures_accepted_from_allowed_keys_and_each_refusal_named() {
    let env = Env::new();
    let (Some(alice), Some(mallory)) = (SshKey::new("alice"), SshKey::new("mallory")) else {
        return;
    };
    let allowed = file_in(
        alice.dir.path(),
        "allowed_signers",
        &alice.allowed_line("alice@example.com", r#"namespaces="git""#),
    );
    let signers = allowed.to_str().unwrap();
    let sync = || env.tend(&["sync", "--allowed-signers", signers]);

    alice.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let good = signed_commit(&env.repo, "one");
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");
    let st = env.status();
    assert!(st["source"]["refused"].is_null(), "{st}");
    let signer = st["source"]["applied_signer"].as_str().unwrap_or_default();
    assert!(signer.contains(&alice.fingerprint()), "{st}");

    // Unsigned.
    env.repo.write("v", "unsigned");
    env.repo.commit("unsigned");
    let s = sync();
    assert_refused(&env, &s, "unsigned", "one");
    let text = env.raw(&["status", "--state-dir", env.state.path().to_str().unwrap()]);
    assert!(
        text.stdout.contains("refused") && text.stdout.contains("unsigned"),
        "{text:?}"
    );

    // Signed by a key the file does not allow.
    mallory.sign_with(&env.repo);
    env.repo.write("v", "mallory");
    signed_commit(&env.repo, "mallory");
    let s = sync();
    assert_refused(&env, &s, "untrusted", "one");
    assert!(s.stderr.contains(&mallory.fingerprint()), "{s:?}");

    // Content changed after signing: the signed commit's header and
    // message on another tree.
    alice.sign_with(&env.repo);
    env.repo.git(&["reset", "-q", "--hard", &good]);
    env.repo.write("v", "two");
    let signed = signed_commit(&env.repo, "two");
    env.repo.write("v", "forged");
    env.repo.git(&["add", "-A"]);
    let tree = env.repo.git(&["write-tree"]);
    let forged = with_tree(&env.repo, &signed, &tree);
    let raw = env.repo.git(&["cat-file", "commit", &forged]);
    assert!(raw.contains("gpgsig"), "{raw}");
    env.repo.git(&["update-ref", "refs/heads/main", &forged]);
    let s = sync();
    assert_refused(&env, &s, "bad_signature", "one");

    // The signature verifies, but the key's window ended before the commit.
    env.repo.git(&["update-ref", "refs/heads/main", &signed]);
    let expired = file_in(
        alice.dir.path(),
        "expired_signers",
        &alice.allowed_line("alice@example.com", r#"valid-before="20200101Z""#),
    );
    let s = env.tend(&["sync", "--allowed-signers", expired.to_str().unwrap()]);
    assert_refused(&env, &s, "expired", "one");

    // The genuine signed commit applies, and the refusal is cleared.
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "two");
    assert!(refused(&env).is_null());
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
    let keyring = file_in(trusted.home.path(), "trusted.asc", &trusted.export());
    let config = env.config(&format!(
        "source:\n  verify:\n    keyring: {}\n    require: commit\n",
        keyring.display()
    ));
    let sync = || env.tend(&["sync", "-c", config.to_str().unwrap()]);

    trusted.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    signed_commit(&env.repo, "one");
    let s = sync();
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
    let s = sync();
    assert_refused(&env, &s, "untrusted", "one");

    env.repo.write("v", "plain");
    env.repo.commit("plain");
    let s = sync();
    assert_refused(&env, &s, "unsigned", "one");
}

#[test]
fn require_tag_refuses_an_unsigned_tag_and_applies_a_signed_one() {
    let env = Env::new();
    let Some(key) = SshKey::new("release") else {
        return;
    };
    let allowed = file_in(key.dir.path(), "allowed", &key.allowed_line("*", ""));
    let config = env.config(&format!(
        "source:\n  ref: v1\n  verify:\n    allowed_signers: {}\n    require: tag\n",
        allowed.display()
    ));
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    // A signed commit is not enough: the tag must be signed.
    signed_commit(&env.repo, "one");
    env.repo.git(&["tag", "-a", "-m", "release one", "v1"]);
    let s = env.tend(&["sync", "-c", config.to_str().unwrap()]);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(s.stderr.contains("unsigned"), "{s:?}");
    assert!(!env.at("v").exists());
    assert_eq!(refused(&env)["reason"], "unsigned");

    env.repo
        .git(&["tag", "-f", "-s", "-m", "release one", "v1"]);
    let s = env.tend(&["sync", "-c", config.to_str().unwrap()]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");
    assert!(refused(&env).is_null());
}

#[test]
fn a_branch_moved_back_to_an_older_signed_commit_is_a_rewind() {
    let env = Env::new();
    let Some(key) = SshKey::new("alice") else {
        return;
    };
    let allowed = file_in(key.dir.path(), "allowed", &key.allowed_line("alice", ""));
    let signers = allowed.to_str().unwrap();
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "old");
    let old = signed_commit(&env.repo, "old, with a known hole");
    env.repo.write("v", "new");
    signed_commit(&env.repo, "new");
    let s = env.tend(&["sync", "--ref", "main", "--allowed-signers", signers]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "new");

    // The host serves the older, validly signed commit (a force push).
    env.repo.git(&["reset", "-q", "--hard", &old]);
    let s = env.tend(&["sync", "--ref", "main", "--allowed-signers", signers]);
    assert_refused(&env, &s, "rewind", "new");

    let s = env.tend(&[
        "sync",
        "--ref",
        "main",
        "--allowed-signers",
        signers,
        "--allow-rewind",
    ]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "old");
    assert!(refused(&env).is_null());
}

#[test]
fn a_rewind_is_refused_without_verify_too_and_a_new_ref_starts_a_new_mark() {
    let env = Env::new();
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let one = env.repo.commit("one");
    env.repo.write("v", "two");
    env.repo.commit("two");
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    env.repo.git(&["reset", "-q", "--hard", &one]);
    let s = env.tend(&["sync", "--ref", "main"]);
    assert_refused(&env, &s, "rewind", "two");
    let s = env.tend_with(("TEND_ALLOW_REWIND", "true"), &["sync", "--ref", "main"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");

    // Another ref is the operator's choice: its mark starts where it is.
    env.repo.write("v", "three");
    env.repo.commit("three");
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    env.repo.git(&["branch", "stable", &one]);
    let s = env.tend(&["sync", "--ref", "stable"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "one");
    // ... and so does going back to main.
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    assert_eq!(env.read("v"), "three");
}
