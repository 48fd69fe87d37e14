//! Trust in the source (SPEC §9) with real keys: commits signed by `git
//! commit -S` with ssh-keygen keys and GnuPG keys, tags by `git tag -s`;
//! each refusal with its reason, and the anti-rollback mark. OpenPGP's own
//! cases are in `trust_openpgp.rs`.

mod util;

use util::signing::{assert_refused, file_in, refused, signed_commit, with_tree, SshKey};
use util::Env;

const DECL: &str = "kind: file\npath: v\nsource: v\n";

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
    let d = env.tend(&["diff", "--ref", "main"]);
    assert_eq!(d.code, 2, "{d:?}");
    assert!(d.stderr.contains("rewind"), "{d:?}");
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

#[test]
fn a_refs_mark_survives_a_sync_of_another_ref_and_back() {
    let env = Env::new();
    env.repo.write("f.tend.yaml", DECL).write("v", "m1");
    let m1 = env.repo.commit("m1");
    env.repo.write("v", "m2");
    let m2 = env.repo.commit("m2");
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    assert_eq!(env.read("v"), "m2");
    env.repo.git(&["reset", "-q", "--hard", &m1]);
    let s = env.tend(&["sync", "--ref", "main"]);
    assert_refused(&env, &s, "rewind", "m2");
    // Another ref, never applied before: a mark of its own starts.
    env.repo.git(&["checkout", "-q", "-b", "side"]);
    env.repo.write("v", "s1");
    env.repo.commit("s1");
    let s = env.tend(&["sync", "--ref", "side"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "s1");
    // Back to main, still rewound: main's mark is where it was.
    let s = env.tend(&["sync", "--ref", "main"]);
    assert_refused(&env, &s, "rewind", "s1");
    // And side's mark holds too, once main has moved on past m2.
    env.repo.git(&["checkout", "-q", "main"]);
    env.repo.git(&["reset", "-q", "--hard", &m2]);
    env.repo.write("v", "m3");
    env.repo.commit("m3");
    env.repo.git(&["branch", "-q", "-f", "side", &m1]);
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    let s = env.tend(&["sync", "--ref", "side"]);
    assert_refused(&env, &s, "rewind", "m3");
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.at(rel)).ok()
}

#[test]
fn a_running_daemon_refuses_an_unsigned_push_keeps_correcting_and_takes_the_next_signed_one() {
    let env = Env::new();
    let Some(key) = SshKey::new("alice") else {
        return;
    };
    let allowed = file_in(key.dir.path(), "allowed", &key.allowed_line("alice", ""));
    key.sign_with(&env.repo);
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let good = signed_commit(&env.repo, "one");
    let served = util::http::serve_polling(&env, &["--allowed-signers", allowed.to_str().unwrap()]);
    assert!(served.ready(30), "{}", env.daemon_log());
    assert_eq!(read(&env, "v").as_deref(), Some("one"));

    env.repo.write("v", "unsigned");
    let unsigned = env.repo.commit("pushed without a signature");
    served.refresh();
    assert!(
        util::wait_until(20, || refused(&env)["reason"] == "unsigned"),
        "{}\n{}",
        env.status(),
        env.daemon_log()
    );
    let st = env.status();
    assert_eq!(st["source"]["refused"]["revision"], unsigned);
    assert_eq!(st["source"]["applied_revision"], good);
    assert_eq!(read(&env, "v").as_deref(), Some("one"));
    let m = served.metrics();
    assert!(
        m.value("tend_source_refused_total", &[("reason", "unsigned")])
            .is_some_and(|v| v >= 1.0),
        "{}",
        m.0
    );
    assert_eq!(
        m.value("tend_source_refused_total", &[("reason", "rewind")]),
        Some(0.0)
    );
    let api = served.get("/api/v1/status").json();
    assert_eq!(api["source"]["refused"]["reason"], "unsigned", "{api}");
    let page = served.get("/").text();
    assert!(page.contains("unsigned"), "{page}");
    let page = served.get("/resources/files/file/v").text();
    assert!(page.contains("f.tend.yaml:1"), "{page}");
    assert!(page.contains(&key.fingerprint()), "{page}");
    assert!(page.contains("<svg class=\"timeline\""), "{page}");

    // The last good revision's drift is still corrected.
    std::fs::write(env.at("v"), "hand edit").unwrap();
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("one")),
        "{}",
        env.daemon_log()
    );

    env.repo.write("v", "two");
    signed_commit(&env.repo, "two, signed");
    served.refresh();
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("two")),
        "{}",
        env.daemon_log()
    );
    assert!(util::wait_until(10, || refused(&env).is_null()));
}

#[test]
fn a_refused_revision_after_a_restart_leaves_the_last_good_one_in_force() {
    let env = Env::new();
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let one = env.repo.commit("one");
    env.repo.write("v", "two");
    env.repo.commit("two");
    assert_eq!(env.tend(&["sync"]).code, 0);
    env.repo.git(&["reset", "-q", "--hard", &one]);
    std::fs::write(env.at("v"), "hand edit").unwrap();
    // A fresh daemon finds the rewound branch: it corrects to `two`.
    let served = util::http::serve_polling(&env, &[]);
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("two")),
        "{}",
        env.daemon_log()
    );
    assert_eq!(refused(&env)["reason"], "rewind");
    drop(served);
}

#[test]
fn pin_holds_an_older_revision_beside_a_daemon_and_survives_a_restart() {
    let env = Env::new();
    env.repo.write("f.tend.yaml", DECL).write("v", "one");
    let one = env.repo.commit("one");
    env.repo.write("v", "two");
    let two = env.repo.commit("two");
    let mut served = util::http::serve_polling(&env, &[]);
    assert!(util::wait_until(20, || read(&env, "v").as_deref() == Some("two")));

    let p = env.tend(&["pin", &one[..10]]);
    assert_eq!(p.code, 0, "{p:?}");
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("one")),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.status()["source"]["pinned"]["revision"], one);
    let text = env.raw(&["status", "--state-dir", env.state.path().to_str().unwrap()]);
    assert!(text.stdout.contains("pinned"), "{text:?}");

    // New commits are fetched, not applied; drift is corrected to the pin.
    env.repo.write("v", "three");
    let three = env.repo.commit("three");
    served.refresh();
    assert!(util::wait_until(20, || env.status()["source"]
        ["fetched_revision"]
        == three));
    std::fs::write(env.at("v"), "hand edit").unwrap();
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("one")),
        "{}",
        env.daemon_log()
    );

    // The pin survives a restart.
    assert_eq!(served.daemon.stop(10), Some(0));
    let served = util::http::serve_polling(&env, &[]);
    assert!(served.ready(30), "{}", env.daemon_log());
    assert_eq!(read(&env, "v").as_deref(), Some("one"));
    assert_eq!(env.status()["source"]["pinned"]["revision"], one);

    // A pin does not lower the mark: after unpin the newest applies, and
    // a branch moved back to `two` would still be a rewind.
    let u = env.tend(&["unpin"]);
    assert_eq!(u.code, 0, "{u:?}");
    assert!(
        util::wait_until(20, || read(&env, "v").as_deref() == Some("three")),
        "{}",
        env.daemon_log()
    );
    assert!(env.status()["source"]["pinned"].is_null());
    assert!(util::wait_until(20, || env.status()["source"]
        ["applied_revision"]
        == three));
    drop(served);
    env.repo.git(&["reset", "-q", "--hard", &two]);
    let s = env.tend(&["sync"]);
    assert_refused(&env, &s, "rewind", "three");
}

#[test]
fn a_pin_must_verify_and_name_a_fetched_revision() {
    let env = Env::new();
    let Some(key) = SshKey::new("alice") else {
        return;
    };
    let allowed = file_in(key.dir.path(), "allowed", &key.allowed_line("alice", ""));
    let signers = allowed.to_str().unwrap();
    env.repo.write("f.tend.yaml", DECL).write("v", "unsigned");
    let unsigned = env.repo.commit("unsigned");
    key.sign_with(&env.repo);
    env.repo.write("v", "signed");
    let signed = signed_commit(&env.repo, "signed");
    assert_eq!(env.tend(&["sync", "--allowed-signers", signers]).code, 0);
    let p = env.tend(&["pin", &unsigned, "--allowed-signers", signers]);
    assert_eq!(p.code, 2, "{p:?}");
    assert!(p.stderr.contains("unsigned"), "{p:?}");
    let p = env.tend(&["pin", "0123456789abcdef", "--allowed-signers", signers]);
    assert_eq!(p.code, 2, "{p:?}");
    assert!(p.stderr.contains("not in the mirror"), "{p:?}");
    let p = env.tend(&["pin", &signed, "--for", "1h", "--allowed-signers", signers]);
    assert_eq!(p.code, 0, "{p:?}");
    assert!(env.status()["source"]["pinned"]["until"].is_string());
}

#[test]
fn explain_names_the_declaration_commit_and_signer_and_never_sensitive_content() {
    let env = Env::new();
    let Some(key) = SshKey::new("alice") else {
        return;
    };
    let allowed = file_in(
        key.dir.path(),
        "allowed",
        &key.allowed_line("alice@example.com", ""),
    );
    let signers = allowed.to_str().unwrap();
    key.sign_with(&env.repo);
    env.repo
        .write(
            "app.tend.yaml",
            "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n---\nkind: file\npath: etc/token\ncontent: \"s3cret-t0ken\\n\"\nsensitive: true\n",
        );
    let commit = signed_commit(&env.repo, "motd and token");
    std::fs::create_dir_all(env.at("etc")).unwrap();
    std::fs::write(env.at("etc/token"), "old-s3cret\n").unwrap();
    std::fs::write(env.at("etc/motd"), "old motd\n").unwrap();
    assert_eq!(env.tend(&["sync", "--allowed-signers", signers]).code, 0);

    let x = env.tend(&["explain", "files/file/etc/motd"]);
    assert_eq!(x.code, 0, "{x:?}");
    assert!(x.stdout.contains("app.tend.yaml:1"), "{x:?}");
    assert!(x.stdout.contains(&commit[..12]), "{x:?}");
    assert!(x.stdout.contains("Test <test@example.com>"), "{x:?}");
    assert!(x.stdout.contains(&key.fingerprint()), "{x:?}");
    assert!(
        x.stdout.contains("hmac-sha256:"),
        "the replaced content's backup: {x:?}"
    );

    // By path, absolute under the root, the second document's line.
    let token = env.at("etc/token");
    let x = env.tend(&["explain", token.to_str().unwrap(), "-o", "json"]);
    assert_eq!(x.code, 0, "{x:?}");
    let v: serde_json::Value = serde_json::from_str(&x.stdout).unwrap();
    assert_eq!(v["id"], "files/file/etc/token");
    assert_eq!(v["declared_at"], "app.tend.yaml:5");
    assert_eq!(v["sensitive"], true);
    let text = env.tend(&["explain", "etc/token"]);
    for secret in ["s3cret-t0ken", "old-s3cret"] {
        assert!(
            !x.stdout.contains(secret) && !text.all().contains(secret),
            "{text:?}"
        );
    }
    let backup = v["backups"][0]
        .as_str()
        .expect("a backup of the old token")
        .to_string();

    // Its backup is not printed without --sensitive; the motd's is.
    let cat = env.tend(&["backup", "cat", &backup]);
    assert_eq!(cat.code, 2, "{cat:?}");
    assert!(!cat.all().contains("old-s3cret"), "{cat:?}");
    let cat = env.tend(&["backup", "cat", &backup, "--sensitive"]);
    assert_eq!(cat.code, 0, "{cat:?}");
    assert_eq!(cat.stdout, "old-s3cret\n");
    let motd: serde_json::Value =
        serde_json::from_str(&env.tend(&["explain", "etc/motd", "-o", "json"]).stdout).unwrap();
    let cat = env.tend(&["backup", "cat", motd["backups"][0].as_str().unwrap()]);
    assert_eq!(cat.code, 0, "{cat:?}");
    assert_eq!(cat.stdout, "old motd\n");

    let none = env.tend(&["explain", "etc/nothing"]);
    assert_eq!(none.code, 2, "{none:?}");
}
