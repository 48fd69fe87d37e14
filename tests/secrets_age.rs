//! Issue 26: secrets kept in Git as age files, made by the Debian `age`
//! CLI, applied decrypted; the plaintext found nowhere tend stores or
//! shows; each failure Blocked with its reason; and the checks CI makes
//! without a private key.

mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use util::age::{decl, Keys};
use util::secrets::Canary;
use util::{mode, wait_until, Env};

#[test]
fn issue_26_age_files_are_applied_decrypted_and_the_plaintext_is_kept_nowhere() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let canary = Canary::new();
    let secret = canary.value();
    let host = keys.x25519("host.key");
    let bob = keys.x25519("bob.key");
    keys.ssh("id_ed25519");
    let ssh_pub = keys.path("id_ed25519.pub");
    let ssh_pub = ssh_pub.to_str().unwrap();
    let hook_env = canary.file("hook.env", "");
    env.repo
        .write("s/db.conf.age", keys.seal(&format!("db {secret}\n"), &["-r", &host]))
        .write(
            "s/api.age",
            keys.seal(&format!("api {secret}\n"), &["-a", "-R", ssh_pub]),
        )
        .write(
            "s/multi.age",
            keys.seal(&format!("multi {secret}\n"), &["-r", &bob, "-r", &host]),
        )
        .write(
            "app.tend.yaml",
            format!(
                "{}on_change: dump\n---\n{}---\n{}---\nkind: file\npath: etc/motd\ncontent: \"hi\\n\"\n",
                decl("etc/db.conf", "s/db.conf.age"),
                decl("etc/api", "s/api.age"),
                decl("etc/multi", "s/multi.age"),
            ),
        );
    env.repo.commit("secrets");
    let extra = format!(
        "hooks:\n  dump: {{run: [sh, -c, \"env > {}\"]}}\nsecrets:\n  age:\n    identities: [{}, {}]\n",
        hook_env.display(),
        keys.path("host.key").display(),
        keys.path("id_ed25519").display(),
    );
    let served = env.serve(&extra, &[]);
    let config = env.state.path().join("tend.yaml");
    let cfg = config.to_str().unwrap();
    let db = env.at("etc/db.conf");
    assert!(
        wait_until(20, || std::fs::read_to_string(&db)
            .is_ok_and(|t| t == format!("db {secret}\n"))),
        "{}",
        env.daemon_log()
    );
    assert!(wait_until(20, || std::fs::read_to_string(&hook_env)
        .is_ok_and(|t| !t.is_empty())));
    assert_eq!(env.read("etc/api"), format!("api {secret}\n"));
    assert_eq!(env.read("etc/multi"), format!("multi {secret}\n"));
    assert_eq!(env.read("etc/motd"), "hi\n");
    assert_eq!(mode(&db) & 0o777, 0o600);

    // A hand edit is found by comparing with the plaintext in memory, and
    // undone.
    std::fs::write(&db, "edited by hand\n").unwrap();
    assert!(
        wait_until(20, || std::fs::read_to_string(&db)
            .is_ok_and(|t| t == format!("db {secret}\n"))),
        "{}",
        env.daemon_log()
    );
    for path in [
        "/api/v1/status",
        "/",
        "/api/v1/resources/files/file/etc/db.conf",
        "/resources/files/file/etc/db.conf",
    ] {
        let page = served.get(path);
        canary.assert_not_in(path, &page.text());
    }

    // A new encrypted revision: its plaintext replaces the old one, and the
    // old one is not kept as a backup.
    env.repo.write(
        "s/db.conf.age",
        keys.seal(&format!("db2 {secret}\n"), &["-r", &host]),
    );
    env.repo.commit("rotate the password");
    served.refresh();
    assert!(
        wait_until(20, || std::fs::read_to_string(&db)
            .is_ok_and(|t| t == format!("db2 {secret}\n"))),
        "{}",
        env.daemon_log()
    );
    for path in ["/api/v1/status", "/"] {
        canary.assert_not_in(path, &served.get(path).text());
    }
    drop(served);

    std::fs::write(&db, "edited again\n").unwrap();
    let diff = env.tend(&["diff", "-c", cfg, "-o", "json"]);
    assert_eq!(diff.code, 1, "{diff:?}");
    assert!(diff.stdout.contains("secret changed"), "{diff:?}");
    canary.assert_not_in_run("tend diff -o json", &diff);
    let text = env.tend(&["diff", "-c", cfg]);
    assert!(
        text.stdout
            .contains("files/file/etc/db.conf: secret changed"),
        "{text:?}"
    );
    canary.assert_not_in_run("tend diff", &text);
    let explain = env.tend(&["explain", "-c", cfg, "files/file/etc/db.conf"]);
    assert_eq!(explain.code, 0, "{explain:?}");
    canary.assert_not_in_run("tend explain", &explain);
    let sync = env.tend(&["sync", "-c", cfg]);
    assert_eq!(sync.code, 0, "{sync:?}");
    canary.assert_not_in_run("tend sync", &sync);
    assert_eq!(env.read("etc/db.conf"), format!("db2 {secret}\n"));
    canary.assert_not_in(
        "the hook's environment",
        &std::fs::read_to_string(&hook_env).unwrap(),
    );
    canary.assert_not_stored(&env);
    // Not even the plaintext's Git blob id, which the stat cache would
    // keep for a plain file.
    let state = util::snapshot_tree(env.state.path());
    for plain in [
        format!("db2 {secret}\n"),
        format!("api {secret}\n"),
        format!("multi {secret}\n"),
    ] {
        let id = git2::Oid::hash_object(git2::ObjectType::Blob, plain.as_bytes()).unwrap();
        for (file, bytes) in &state {
            for needle in [id.as_bytes(), id.to_string().as_bytes()] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{} holds the blob id of a secret",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn issue_26_each_failure_is_blocked_with_its_reason_and_the_rest_applies() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let host = keys.x25519("host.key");
    let other = keys.x25519("other.key");
    let good = keys.seal("good\n", &["-r", &host]);
    let mut cut = keys.seal(&"x".repeat(100_000), &["-r", &host]);
    cut.truncate(cut.len() - 50);
    env.repo
        .write("s/good.age", good)
        .write("s/wrong.age", keys.seal("wrong\n", &["-r", &other]))
        .write("s/cut.age", cut)
        .write(
            "app.tend.yaml",
            format!(
                "{}---\n{}---\n{}---\nkind: file\npath: etc/motd\ncontent: \"hi\\n\"\n",
                decl("etc/good", "s/good.age"),
                decl("etc/wrong", "s/wrong.age"),
                decl("etc/cut", "s/cut.age"),
            ),
        );
    env.repo.commit("secrets");
    let key = keys.path("host.key");
    let key = key.to_str().unwrap();

    let s = env.tend(&["sync", "--age-identity", key]);
    assert_eq!(s.code, 3, "{s:?}");
    let all = s.all();
    assert!(
        all.contains(&format!(
            "s/wrong.age: no identity decrypts it (tried {key}: no matching key)"
        )),
        "{s:?}"
    );
    assert!(all.contains("s/cut.age is not a usable age file"), "{s:?}");
    assert_eq!(env.read("etc/good"), "good\n");
    assert_eq!(env.read("etc/motd"), "hi\n");
    for blocked in ["etc/wrong", "etc/cut"] {
        assert!(!env.at(blocked).exists(), "{blocked} was written");
    }

    // An identity file that is missing, then one anyone may read: every
    // secret is Blocked naming it, the plain file is still applied.
    let missing = keys.path("gone.key");
    let missing = missing.to_str().unwrap();
    std::fs::remove_file(env.at("etc/good")).unwrap();
    std::fs::remove_file(env.at("etc/motd")).unwrap();
    let s = env.tend_with(("TEND_AGE_IDENTITY", missing), &["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(
        s.all().contains(&format!("{missing}: cannot be read")),
        "{s:?}"
    );
    assert!(!env.at("etc/good").exists());
    assert_eq!(env.read("etc/motd"), "hi\n");

    std::fs::set_permissions(
        keys.path("host.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let s = env.tend(&["sync", "--age-identity", key]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(
        s.all().contains(&format!(
            "{key}: is readable by others than its owner (mode 0644)"
        )),
        "{s:?}"
    );
    assert!(!env.at("etc/good").exists());

    std::fs::set_permissions(
        keys.path("host.key"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();
    // The environment variable takes several identity files,
    // colon-separated, tried in turn; mode 0400 is the owner's alone.
    let both = format!("{missing}:{key}");
    let s = env.tend_with(("TEND_AGE_IDENTITY", &both), &["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("etc/good"), "good\n");
    assert!(
        s.all().contains(&format!(
            "s/wrong.age: no identity decrypts it (tried {missing}: cannot be read"
        )),
        "{s:?}"
    );
}

#[test]
fn issue_26_ci_checks_ssh_recipients_and_diffs_revisions_without_a_key() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let alice = keys.ssh("alice");
    keys.ssh("mallory");
    let to = |name: &str| {
        keys.path(&format!("{name}.pub"))
            .to_str()
            .unwrap()
            .to_string()
    };
    env.repo
        .write("s/ok.age", keys.seal("one\n", &["-R", &to("alice")]))
        .write(
            "s/stray.age",
            keys.seal("two\n", &["-a", "-R", &to("mallory")]),
        )
        .write(
            "app.tend.yaml",
            format!(
                "{}---\n{}",
                decl("etc/ok", "s/ok.age"),
                decl("etc/stray", "s/stray.age")
            ),
        );
    let old = env.repo.commit("secrets");

    let v = env.tend(&["validate", "--as-written", "--age-recipient", &alice]);
    assert_ne!(v.code, 0, "{v:?}");
    let all = v.all();
    assert!(
        all.contains("s/stray.age is not encrypted to recipient ssh-ed25519 ... alice"),
        "{v:?}"
    );
    assert!(!all.contains("s/ok.age is not"), "{v:?}");

    // Sealed again to alice: the next revision checks clean, and a diff
    // against the first needs no identity and shows only that it changed.
    env.repo
        .write("s/stray.age", keys.seal("three\n", &["-R", &to("alice")]));
    env.repo.commit("seal to alice");
    let v = env.tend(&["validate", "--as-written", "--age-recipient", &alice]);
    assert_eq!(v.code, 0, "{v:?}");
    let d = env.tend(&["diff", "--against", &old, "--age-recipient", &alice]);
    assert!(d.stdout.contains("files/file/etc/stray"), "{d:?}");
    assert!(
        !d.all().contains("three") && !d.all().contains("two\n"),
        "{d:?}"
    );
    assert!(!Path::new(&env.at("etc/stray")).exists());
}

#[test]
fn issue_26_mirror_mode_publishes_name_age_as_name_decrypted() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let host = keys.x25519("host.key");
    env.repo
        .write(
            "conf/app.conf.age",
            keys.seal("key=1\n", &["-a", "-r", &host]),
        )
        .write("conf/plain.txt", "plain\n");
    env.repo.commit("mirror");
    let key = keys.path("host.key");
    let cfg = env.config(&format!(
        "source:\n  path: conf\n  mirror: true\n  decrypt: {{suffix: .age}}\nsecrets:\n  age:\n    identities: [{}]\n",
        key.display()
    ));
    let cfg = cfg.to_str().unwrap();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("app.conf"), "key=1\n");
    assert_eq!(env.read("plain.txt"), "plain\n");
    assert!(!env.at("app.conf.age").exists());

    // Without `source.decrypt`, validate says the age file would be
    // published as it is.
    let v = env.tend(&["validate", "--path", "conf", "--mirror"]);
    assert!(
        v.all()
            .contains("conf/app.conf.age: looks like an age file, and no source.decrypt covers it"),
        "{v:?}"
    );
}

#[test]
fn issue_26_a_plugin_value_is_sent_decrypted_and_shown_nowhere() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let canary = Canary::new();
    let secret = canary.value();
    let host = keys.x25519("host.key");
    env.repo
        .write("pw.age", keys.seal(&format!("pw-{secret}\n"), &["-r", &host]))
        .write(
            "app.tend.yaml",
            "kind: section\nname: web\nspec:\n  workers: 4\n  password: {decrypt: age, source: pw.age}\n",
        );
    env.repo.commit("a plugin secret");
    let doc = canary.file("settings.json", "{}");
    let cfg = env.config(&format!(
        "targets:\n  app: {{type: exec, command: [{}, --file, {}], timeout: 15s}}\nsecrets:\n  age:\n    identities: [{}]\n",
        util::plugins::plugin("settings"),
        doc.display(),
        keys.path("host.key").display(),
    ));
    let c = cfg.to_str().unwrap();
    let s = env.tend(&["sync", "-c", c]);
    assert_eq!(s.code, 0, "{s:?}");
    let live: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&doc).unwrap()).unwrap();
    assert_eq!(live["web"]["password"], format!("pw-{secret}"));
    assert_eq!(live["web"]["workers"], 4);

    std::fs::write(&doc, r#"{"web": {"workers": 4, "password": "changed"}}"#).unwrap();
    let d = env.tend(&["diff", "-c", c, "-o", "json"]);
    assert_eq!(d.code, 1, "{d:?}");
    canary.assert_not_in_run("tend diff -o json", &d);
    let d = env.tend(&["diff", "-c", c]);
    assert!(
        d.stdout.contains("/spec/password: changed (sensitive)"),
        "{d:?}"
    );
    assert!(!d.stdout.contains("\"changed\""), "{d:?}");
    let s = env.tend(&["sync", "-c", c]);
    assert_eq!(s.code, 0, "{s:?}");
    canary.assert_not_in_run("tend sync", &s);
    let e = env.tend(&["explain", "-c", c, "app/section/web"]);
    canary.assert_not_in_run("tend explain", &e);
    canary.assert_not_stored(&env);

    // Read as written, the value stands for the age file: no key needed.
    let v = env.tend(&["validate", "--as-written", "-c", c]);
    assert_eq!(v.code, 0, "{v:?}");
}

/// A secret no longer declared is pruned like any file, but what was there
/// is not backed up: a backup would keep the plaintext in the state dir.
#[test]
fn a_pruned_secret_is_not_backed_up_and_the_audit_says_so() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let host = keys.x25519("host.key");
    let marker = "pruned-secret-4b1d9e";
    env.repo
        .write("s/db.age", keys.seal(marker, &["-r", &host]))
        .write("s.tend.yaml", util::age::decl("etc/db.pass", "s/db.age"))
        .write(
            "plain.tend.yaml",
            "kind: file\npath: etc/plain\ncontent: \"plain\\n\"\n",
        )
        .write(
            "keep.tend.yaml",
            "kind: directory\npath: etc/keep\nsource: keep/\n",
        )
        .write("keep/a", "a")
        .write("keep/b", "b")
        .write("keep/c", "c");
    env.repo.commit("secret and plain");
    let key = keys.path("host.key");
    let id = key.to_str().unwrap();
    let s = env.tend(&["sync", "--age-identity", id]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/db.pass"), marker);
    // Both leave the declarations; the plain file is backed up as before.
    env.repo
        .git(&["rm", "-q", "s.tend.yaml", "plain.tend.yaml"]);
    env.repo.write(
        "other.tend.yaml",
        "kind: file\npath: etc/other\ncontent: \"o\\n\"\n",
    );
    env.repo.commit("both gone");
    let s = env.tend(&["sync", "--age-identity", id]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(
        !env.at("etc/db.pass").exists() && !env.at("etc/plain").exists(),
        "{s:?}"
    );
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    let deletes: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["action"] == "delete")
        .collect();
    let backup_of = |path: &str| {
        deletes
            .iter()
            .find(|e| e["id"] == format!("files/file/{path}"))
            .unwrap_or_else(|| panic!("no delete of {path}: {audit}"))["backup"]
            .clone()
    };
    assert_eq!(
        backup_of("etc/db.pass"),
        "not kept: it held a decrypted secret",
        "{audit}"
    );
    let plain = backup_of("etc/plain");
    assert!(
        plain
            .as_str()
            .is_some_and(|b| b.starts_with("hmac-sha256:")),
        "{audit}"
    );
    for (path, bytes) in util::snapshot_tree(env.state.path()) {
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "the pruned secret is kept in {}",
            path.display()
        );
    }
}

/// `decrypt: age` on an etcd key: the plaintext is put, nothing of it (nor
/// of the value it replaced) is kept in the state dir, a second pass
/// writes nothing, and a diff of a new secret shows only that it changed.
#[test]
fn an_etcd_key_is_put_decrypted_and_kept_nowhere() {
    let Some(keys) = Keys::new() else { return };
    if !util::can_run(
        util::etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    ) {
        return;
    }
    let etcd = util::etcd::Etcd::start();
    let env = Env::new();
    let host = keys.x25519("host.key");
    let (first, second, before) = (
        "etcd-secret-one-7c21",
        "etcd-secret-two-9a03",
        "old-value-5e88",
    );
    etcd.put("/app/db/password", before);
    env.repo
        .write("s/db.age", keys.seal(first, &["-r", &host]))
        .write(
            "kv.tend.yaml",
            "kind: key\nkey: db/password\nsource: s/db.age\ndecrypt: age\n",
        );
    env.repo.commit("a secret key");
    let cfg = env.config(&format!(
        "targets:\n  kv:\n    type: etcd\n    endpoints: [{}]\n    prefix: /app/\n    timeout: 2s\nsecrets:\n  age:\n    identities: [{}]\n",
        etcd.endpoint(),
        keys.path("host.key").display()
    ));
    let cfg = cfg.to_str().unwrap();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(etcd.get("/app/db/password").as_deref(), Some(first));
    let revision = etcd.revision();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(etcd.revision(), revision, "a second pass wrote");

    env.repo
        .write("s/db.age", keys.seal(second, &["-r", &host]));
    env.repo.commit("a new secret");
    let d = env.tend(&["diff", "-c", cfg]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(
        d.stdout.contains("kv/key/db/password: secret changed"),
        "{d:?}"
    );
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(etcd.get("/app/db/password").as_deref(), Some(second));
    for text in [&d.all(), &s.all()] {
        for m in [first, second, before] {
            assert!(!text.contains(m), "{m} shown: {text}");
        }
    }
    for (path, bytes) in util::snapshot_tree(env.state.path()) {
        for m in [first, second, before] {
            assert!(
                !bytes.windows(m.len()).any(|w| w == m.as_bytes()),
                "{m} is kept in {}",
                path.display()
            );
        }
    }
}

/// An identity file that cannot be read now (here a path that cannot be
/// followed: a symlink to itself) may come back by itself: the secret is
/// Failed and retried with backoff, each retry reading the keys again, and
/// applied once the key is readable, without a new commit. A missing one is
/// Blocked, and the next `sync` reads the keys again (never a cached
/// refusal).
#[test]
fn an_unreadable_identity_is_retried_and_a_key_brought_back_counts_without_a_commit() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let host = keys.x25519("host.key");
    env.repo
        .write("s/db.age", keys.seal("db secret\n", &["-r", &host]))
        .write(
            "app.tend.yaml",
            format!(
                "{}---\nkind: file\npath: etc/motd\ncontent: \"hi\\n\"\n",
                decl("etc/db", "s/db.age")
            ),
        );
    env.repo.commit("a secret");
    let at = keys.path("mnt.key");
    std::os::unix::fs::symlink(&at, &at).unwrap();
    let extra = format!("secrets:\n  age:\n    identities: [{}]\n", at.display());
    let served = env.serve(&extra, &[]);
    let db = "files/file/etc/db";
    let state = |id: &str| env.resource(id).unwrap_or_default();
    assert!(
        wait_until(20, || state(db)["state"] == "Failed"),
        "{:?}\n{}",
        state(db),
        env.daemon_log()
    );
    let reason = state(db)["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains(&format!("{}: cannot be read", at.display())) && reason.contains("retried"),
        "{reason}"
    );
    assert_eq!(env.read("etc/motd"), "hi\n");
    assert!(!env.at("etc/db").exists());
    // The mount comes back: the retry reads the key and applies.
    std::fs::remove_file(&at).unwrap();
    std::fs::copy(keys.path("host.key"), &at).unwrap();
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        wait_until(30, || env.at("etc/db").exists()),
        "{:?}\n{}",
        state(db),
        env.daemon_log()
    );
    assert_eq!(env.read("etc/db"), "db secret\n");
    assert!(wait_until(10, || state(db)["state"] == "InSync"));
    drop(served);

    // Missing: Blocked (a human's to supply), and the next sync, same
    // revision, reads the keys again.
    std::fs::remove_file(env.at("etc/db")).unwrap();
    let gone = keys.path("gone.key");
    let s = env.tend(&["sync", "--age-identity", gone.to_str().unwrap()]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(!env.at("etc/db").exists());
    std::fs::copy(keys.path("host.key"), &gone).unwrap();
    std::fs::set_permissions(&gone, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = env.tend(&["sync", "--age-identity", gone.to_str().unwrap()]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/db"), "db secret\n");
}

/// A secret on either side of an overwrite is not backed up: a new secret
/// over the old one, and plain content over what was a secret (its
/// declaration no longer decrypts). The audit line says so each time.
#[test]
fn an_overwritten_secret_is_not_backed_up_even_by_plain_content() {
    let Some(keys) = Keys::new() else { return };
    let env = Env::new();
    let host = keys.x25519("host.key");
    let (one, two) = ("first-secret-7c41", "second-secret-93ae");
    env.repo
        .write("s/db.age", keys.seal(one, &["-r", &host]))
        .write("s.tend.yaml", util::age::decl("etc/db.pass", "s/db.age"));
    env.repo.commit("a secret");
    let key = keys.path("host.key");
    let id = key.to_str().unwrap();
    let sync = || {
        let s = env.tend(&["sync", "--age-identity", id]);
        assert_eq!(s.code, 0, "{s:?}");
    };
    sync();
    env.repo.write("s/db.age", keys.seal(two, &["-r", &host]));
    env.repo.commit("rotated");
    sync();
    assert_eq!(env.read("etc/db.pass"), two);
    env.repo.write(
        "s.tend.yaml",
        "kind: file\npath: etc/db.pass\ncontent: \"no longer secret\\n\"\n",
    );
    env.repo.commit("plain now");
    sync();
    assert_eq!(env.read("etc/db.pass"), "no longer secret\n");
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    let updates: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["action"] == "update")
        .collect();
    assert_eq!(updates.len(), 2, "{audit}");
    for u in &updates {
        assert_eq!(
            u["backup"], "not kept: it held a decrypted secret",
            "{audit}"
        );
    }
    for (path, bytes) in util::snapshot_tree(env.state.path()) {
        for marker in [one, two] {
            assert!(
                !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
                "{marker} is kept in {}",
                path.display()
            );
        }
    }
}
