//! `tend validate`, `diff`, `sync` and `status` driven as users run them,
//! against real repositories and real directories.

mod util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use util::{mode, stamp, stamps, Env, Run};

fn basic(env: &Env) {
    env.repo
        .write("motd.tend.yaml", "kind: file\npath: etc/motd\nsource: motd\nmode: \"0644\"\n")
        .write("motd", "hello\n")
        .write("app.tend.yaml", "kind: file\npath: etc/app/app.conf\ncontent: \"port=80\\n\"\nmode: \"0600\"\n---\nkind: symlink\npath: etc/app/current\ntarget_path: app.conf\n");
    env.repo.commit("init");
}

#[test]
fn validate_then_diff_then_sync_then_nothing() {
    let env = Env::new();
    basic(&env);
    let v = env.tend(&["validate"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.stdout.contains("3 resources"), "{v:?}");

    let d = env.tend(&["diff"]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(d.stdout.contains("files/file/etc/motd: create"), "{d:?}");
    assert!(
        d.stdout
            .contains("--- live/files/file/etc/motd\n+++ desired/files/file/etc/motd"),
        "{d:?}"
    );
    assert!(d.stdout.contains("+hello"), "{d:?}");
    assert!(!env.at("etc").exists(), "diff must change nothing");
    assert!(
        !env.state.path().join("ledger.db").exists(),
        "diff on a fresh state dir creates no ledger"
    );

    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/motd"), "hello\n");
    assert_eq!(env.read("etc/app/app.conf"), "port=80\n");
    assert_eq!(mode(&env.at("etc/app/app.conf")), 0o600);
    assert_eq!(
        std::fs::read_link(env.at("etc/app/current"))
            .unwrap()
            .to_str(),
        Some("app.conf")
    );

    let d = env.tend(&["diff"]);
    assert_eq!(d.code, 0, "{d:?}");
    assert!(d.stdout.is_empty(), "{d:?}");

    let st = env.tend(&["status"]);
    assert_eq!(st.code, 0, "{st:?}");
    assert!(st.stdout.contains("InSync 3"), "{st:?}");
}

#[test]
fn second_sync_writes_nothing() {
    let env = Env::new();
    basic(&env);
    assert_eq!(env.tend(&["sync"]).code, 0);
    let before = stamps(env.root());
    let audit = std::fs::read(env.state.path().join("audit.jsonl")).unwrap();
    let status_before = env.tend(&["status", "-o", "json"]).stdout;
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(s.stdout.contains("0 applied"), "{s:?}");
    assert_eq!(
        stamps(env.root()),
        before,
        "inodes, mtimes and ctimes must not change"
    );
    assert_eq!(
        std::fs::read(env.state.path().join("audit.jsonl")).unwrap(),
        audit
    );
    let strip = |s: &str| {
        s.lines()
            // A second sync fetches again: only fetch times may move.
            .filter(|l| {
                !l.contains("generated_at")
                    && !l.contains("seconds_since")
                    && !l.contains("\"last_fetch\"")
                    && !l.contains("\"last_successful_fetch\"")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        strip(&env.tend(&["status", "-o", "json"]).stdout),
        strip(&status_before)
    );
}

#[test]
fn a_temp_file_left_after_writes_is_swept_at_the_next_start() {
    let env = Env::new();
    basic(&env);
    assert_eq!(env.tend(&["sync"]).code, 0);
    // A run that writes nothing records that no temp file is left.
    assert_eq!(env.tend(&["sync"]).code, 0);
    let leftover = env.at("etc/app/.tend-00000000000000aa.tmp");
    let unrelated = env.at("etc/app/.tend-notes.txt");
    // A run that writes may leave temp files behind (a crash, a failed
    // unlink): here one is planted as that run starts writing.
    env.repo.write("motd", "hello again\n");
    env.repo.commit("motd changed");
    std::fs::write(&leftover, b"partial").unwrap();
    std::fs::write(&unrelated, b"not tend's").unwrap();
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/motd"), "hello again\n");
    // The next start sweeps again, as writes happened since the last sweep.
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(!leftover.exists(), "the leftover temp file is swept");
    assert_eq!(std::fs::read(&unrelated).unwrap(), b"not tend's");
}

#[test]
fn mode_only_drift_is_a_chmod_on_the_same_inode() {
    let env = Env::new();
    basic(&env);
    assert_eq!(env.tend(&["sync"]).code, 0);
    let p = env.at("etc/motd");
    let ino = std::fs::metadata(&p).unwrap().ino();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let d = env.tend(&["diff"]);
    assert_eq!(d.code, 1);
    assert!(
        d.stdout.contains("files/file/etc/motd: mode 0666 -> 0644"),
        "{d:?}"
    );
    assert!(
        !d.stdout.contains("+++"),
        "a mode change shows no content diff: {d:?}"
    );
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert_eq!(mode(&p), 0o644);
    assert_eq!(std::fs::metadata(&p).unwrap().ino(), ino);
}

#[test]
fn hand_edit_is_restored_and_the_old_content_is_in_the_backup() {
    let env = Env::new();
    basic(&env);
    assert_eq!(env.tend(&["sync"]).code, 0);
    std::fs::write(env.at("etc/motd"), "edited by hand\n").unwrap();
    let d = env.tend(&["diff"]);
    assert!(d.stdout.contains("-edited by hand\n+hello"), "{d:?}");
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert_eq!(env.read("etc/motd"), "hello\n");
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(last["id"], "files/file/etc/motd");
    assert_eq!(last["action"], "update");
    let backup = last["backup"]
        .as_str()
        .expect("the audit log names the backup");
    let hex = backup.strip_prefix("hmac-sha256:").unwrap();
    let saved = std::fs::read(env.state.path().join("backups").join(&hex[..2]).join(hex)).unwrap();
    assert_eq!(saved, b"edited by hand\n");
}

#[test]
fn prune_removes_what_git_deleted_and_keeps_unmanaged_files() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: directory\npath: srv\nsource: www\n");
    for i in 0..4 {
        env.repo
            .write(&format!("www/page{i}.html"), format!("page {i}"));
    }
    env.repo.commit("site");
    assert_eq!(env.tend(&["sync"]).code, 0);
    std::fs::write(env.at("srv/unmanaged.txt"), "mine").unwrap();
    env.repo.remove("www/page3.html");
    env.repo.commit("drop page 3");
    let d = env.tend(&["diff"]);
    assert!(
        d.stdout.contains("files/file/srv/page3.html: delete"),
        "{d:?}"
    );
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(!env.at("srv/page3.html").exists());
    assert!(env.at("srv/page2.html").exists());
    assert_eq!(env.read("srv/unmanaged.txt"), "mine");
}

#[test]
fn mirror_mode() {
    let env = Env::new();
    env.repo
        .write("site/index.html", "<h1>hi</h1>")
        .write("site/css/a.css", "a{}")
        .write("other/x", "x");
    env.repo.commit("site");
    let s = env.tend(&["sync", "--mirror", "--path", "site"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("index.html"), "<h1>hi</h1>");
    assert_eq!(env.read("css/a.css"), "a{}");
    assert!(!env.at("other").exists());
}

#[test]
fn refs_branch_tag_commit_and_force_push() {
    let env = Env::new();
    env.repo
        .write("f.tend.yaml", "kind: file\npath: v\nsource: v\n")
        .write("v", "one");
    let first = env.repo.commit("one");
    env.repo.git(&["tag", "v1"]);
    env.repo.write("v", "two");
    env.repo.commit("two");

    assert_eq!(env.tend(&["sync", "--ref", "v1"]).code, 0);
    assert_eq!(env.read("v"), "one");
    assert_eq!(env.tend(&["sync", "--ref", "main"]).code, 0);
    assert_eq!(env.read("v"), "two");
    assert_eq!(env.tend(&["sync", "--ref", &first]).code, 0);
    assert_eq!(env.read("v"), "one");

    // Rewrite history: the branch moves to an unrelated commit. main was
    // applied before, at `two`, and keeps that mark across the syncs of
    // other refs since: this is a rewind, applied only when allowed.
    env.repo.git(&["checkout", "-q", "--orphan", "rewrite"]);
    env.repo.write("v", "rewritten");
    env.repo.commit("rewritten");
    env.repo.git(&["branch", "-f", "main", "rewrite"]);
    let s = env.tend(&["sync", "--ref", "main"]);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(s.stderr.contains("rewind"), "{s:?}");
    assert_eq!(env.read("v"), "one");
    let s = env.tend(&["sync", "--ref", "main", "--allow-rewind"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("v"), "rewritten");

    let bad = env.tend(&["sync", "--ref", "no-such-branch"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("no-such-branch"), "{bad:?}");
}

/// A webhook provider tend does not know was refused only when the daemon
/// started; `validate` must name it with its line.
#[test]
fn validate_names_an_unknown_webhook_provider_with_its_line() {
    let env = Env::new();
    basic(&env);
    let cfg = env.state.path().join("tend.yaml");
    std::fs::write(
        &cfg,
        "server:\n  webhooks:\n    github: {secret_file: /x}\n    bitbucket: {secret_file: /y}\n",
    )
    .unwrap();
    let r = env.tend(&["validate", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("tend.yaml:4: server.webhooks.bitbucket: unknown key"),
        "{r:?}"
    );
}

/// Problems of targets, hooks and policy come all at once, each with its line.
#[test]
fn validate_reports_every_config_problem_at_once() {
    let env = Env::new();
    basic(&env);
    let cfg = env.state.path().join("tend.yaml");
    std::fs::write(
        &cfg,
        "targets:\n  a: {type: files, root: /srv, command: [x]}\n  b:\n    type: zookeeper\n  c: {type: exec}\nhooks:\n  h: {run: []}\npolicy:\n  max_prune: lots\n",
    )
    .unwrap();
    let r = env.tend(&["validate", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    for (line, needle) in [
        (2, "`command` does not apply to type files"),
        (4, "unknown type \"zookeeper\""),
        (5, "type exec needs `command`"),
        (7, "hooks.h.run"),
        (9, "max_prune"),
    ] {
        assert!(
            r.stderr
                .lines()
                .any(|l| l.contains(&format!("tend.yaml:{line}:")) && l.contains(needle)),
            "line {line} {needle}: {r:?}"
        );
    }
}

#[test]
fn config_file_errors_name_file_and_line() {
    let env = Env::new();
    basic(&env);
    let cfg = env.state.path().join("tend.yaml");
    std::fs::write(
        &cfg,
        "source:\n  repo: x\npolicy:\n  prune: true\n  prun: false\n",
    )
    .unwrap();
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("tend.yaml:5: policy.prun: unknown key"),
        "{r:?}"
    );
    std::fs::write(&cfg, "source:\n  interval: soon\n").unwrap();
    let r = env.tend(&["diff", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("tend.yaml:2: source.interval: ") && r.stderr.contains("soon"),
        "{r:?}"
    );
    // Values of the right type but no meaning name their line too.
    for (text, line, needle) in [
        (
            "policy:\n  prune: true\n  max_prune: lots\n",
            3,
            "max_prune",
        ),
        ("log:\n  format: text\n  level: loud\n", 3, "loud"),
        (
            "targets:\n  files: {type: file, root: /tmp}\n",
            2,
            "unknown type",
        ),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let r = env.tend(&["diff", "-c", cfg.to_str().unwrap()]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.stderr.contains(&format!("tend.yaml:{line}: ")) && r.stderr.contains(needle),
            "{text}: {r:?}"
        );
    }
}

#[test]
fn config_file_and_precedence() {
    let env = Env::new();
    basic(&env);
    let other_root = tempfile::tempdir().unwrap();
    let cfg = env.state.path().join("tend.yaml");
    std::fs::write(
        &cfg,
        format!(
            "source:\n  repo: {}\n  ref: main\ntargets:\n  files: {{type: files, root: {}}}\nstate_dir: {}\n",
            env.repo.url(),
            other_root.path().display(),
            env.state.path().join("s").display()
        ),
    )
    .unwrap();
    let r = env.raw(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(other_root.path().join("etc/motd").exists());
    // A flag beats the file; the environment beats the file too.
    let r = util::tend_cmd()
        .args(["sync", "-c", cfg.to_str().unwrap(), "--root"])
        .arg(env.root())
        .env("TEND_STATE_DIR", env.state.path().join("s2"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(env.at("etc/motd").exists());
    assert!(env.state.path().join("s2").join("audit.jsonl").exists());
}

#[test]
fn a_second_writer_on_a_locked_state_dir_exits_2() {
    let env = Env::new();
    basic(&env);
    // Hold the lock with a real process: a daemon on the same state dir.
    let mut daemon = env
        .cmd(&["run", "--interval", "1h", "--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !env.at("etc/motd").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = env.tend(&["sync"]);
    daemon.kill().ok();
    daemon.wait().ok();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("locked") && r.stderr.contains("tend run"),
        "{r:?}"
    );
}

#[test]
fn diff_json_shape() {
    let env = Env::new();
    basic(&env);
    let r = env.tend(&["diff", "-o", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["revision"].as_str().unwrap().len(), 40);
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 3);
    let motd = changes
        .iter()
        .find(|c| c["id"] == "files/file/etc/motd")
        .unwrap();
    assert_eq!(motd["action"], "create");
    assert!(motd["diff"].as_str().unwrap().contains("+hello"));
}

#[test]
fn sensitive_content_never_shows() {
    let env = Env::new();
    let canary = format!("canary-{}", std::process::id());
    env.repo.write(
        "s.tend.yaml",
        format!("kind: file\npath: etc/token\ncontent: \"{canary}\"\nsensitive: true\n"),
    );
    env.repo.commit("secret");
    let d = env.tend(&["diff"]);
    assert_eq!(d.code, 1);
    assert!(!d.all().contains(&canary), "{d:?}");
    assert!(d.stdout.contains("(sensitive)"), "{d:?}");
    assert_eq!(env.tend(&["sync", "--log-level", "debug"]).code, 0);
    // A hand edit puts another secret there; it is backed up, and named
    // in the audit log by a keyed hash, never by one anyone could check
    // guesses against.
    let edited = format!("edited-{canary}");
    std::fs::write(env.at("etc/token"), &edited).unwrap();
    let s = env.tend(&["sync", "--log-level", "debug", "--log-format", "json"]);
    assert!(!s.all().contains(&canary), "{s:?}");
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    assert!(!audit.contains(&canary));
    let unkeyed = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(edited.as_bytes()))
    };
    assert!(
        !audit.contains(&unkeyed),
        "the audit log names a backup by its plain SHA-256"
    );
    assert!(audit.contains("\"backup\":\"hmac-sha256:"), "{audit}");
    assert!(!env.tend(&["status", "-o", "json"]).all().contains(&canary));
    // The ledger and everything else tend keeps, but the Git mirror (which
    // holds the repository as it is) and the backups of replaced content.
    for (path, bytes) in util::snapshot_tree(env.state.path()) {
        let p = path.to_string_lossy();
        if p.contains("/mirrors/") || p.contains("/backups/") {
            continue;
        }
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&canary),
            "{p} holds the secret"
        );
    }
    assert_eq!(env.read("etc/token"), canary);
}

#[test]
fn owner_and_group_by_id() {
    let env = Env::new();
    env.repo.write(
        "o.tend.yaml",
        "kind: file\npath: owned\ncontent: x\nowner: 4242\ngroup: \"4343\"\n",
    );
    env.repo.commit("owned");
    let s = env.tend(&["sync"]);
    if !rustix::process::geteuid().is_root() {
        // Without root a chown to another user is refused: the resource fails.
        assert_eq!(s.code, 3, "{s:?}");
        return;
    }
    assert_eq!(s.code, 0, "{s:?}");
    let m = std::fs::metadata(env.at("owned")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4242, 4343));
    std::os::unix::fs::chown(env.at("owned"), Some(0), Some(0)).unwrap();
    let d = env.tend(&["diff"]);
    assert!(
        d.stdout.contains("owner 0 -> 4242") && d.stdout.contains("group 0 -> 4343"),
        "{d:?}"
    );
    let ino = stamp(&env.at("owned")).0;
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert_eq!(stamp(&env.at("owned")).0, ino);
}

#[test]
fn a_local_source_that_borrows_objects_through_alternates_is_fetched_whole() {
    let env = Env::new();
    env.repo
        .write("conf/a.txt", "a\n")
        .write("conf/b.txt", "b\n");
    env.repo.commit("init");
    // A clone sharing the first repository's objects (`git clone --shared`
    // writes objects/info/alternates), with a commit of its own: the new
    // objects are its own, the unchanged files' blobs only in the other.
    let dir = tempfile::tempdir().unwrap();
    let clone = dir.path().join("shared");
    let clone_s = clone.to_str().unwrap();
    env.repo.git(&["clone", "-q", "--shared", ".", clone_s]);
    std::fs::write(clone.join("conf/c.txt"), "c\n").unwrap();
    let id = ["-c", "user.name=T", "-c", "user.email=t@example.com"];
    env.repo.git(&["-C", clone_s, "add", "."]);
    env.repo
        .git(&[&id[..], &["-C", clone_s, "commit", "-q", "-m", "own"]].concat());
    let url = format!("file://{clone_s}");
    let root = env.root().to_str().unwrap();
    let state = env.state.path().to_str().unwrap();
    let out = env.raw(&[
        "sync",
        "--repo",
        &url,
        "--mirror",
        "--root",
        root,
        "--state-dir",
        state,
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(env.read("conf/a.txt"), "a\n");
    assert_eq!(env.read("conf/b.txt"), "b\n");
    assert_eq!(env.read("conf/c.txt"), "c\n");
}

#[test]
fn temp_files_of_a_target_left_out_of_the_config_are_swept_when_it_returns() {
    let env = Env::new();
    env.repo.write(
        "x.tend.yaml",
        "kind: file\ntarget: a\npath: etc/a.conf\ncontent: \"a\\n\"\n---\nkind: file\ntarget: b\npath: etc/b.conf\ncontent: \"b\\n\"\n",
    );
    env.repo.commit("two targets");
    let (root_a, root_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = |targets: &[(&str, &Path)]| {
        let mut text = format!(
            "source:\n  repo: {}\n  ref: main\nstate_dir: {}\ntargets:\n",
            env.repo.url(),
            env.state.path().display()
        );
        for (name, root) in targets {
            text += &format!("  {name}: {{type: files, root: {}}}\n", root.display());
        }
        let p = env
            .state
            .path()
            .join(format!("tend-{}.yaml", targets.len()));
        std::fs::write(&p, text).unwrap();
        p
    };
    let both = config(&[("a", root_a.path()), ("b", root_b.path())]);
    let only_a = config(&[("a", root_a.path())]);
    let sync = |cfg: &Path| env.raw(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(sync(&both).code, 0);
    // Left behind in b's folder, as by a crash while writing there.
    let leftover = root_b.path().join("etc/.tend-00000000000000bb.tmp");
    std::fs::write(&leftover, b"partial").unwrap();
    // A start that does not know b cannot sweep it...
    let r = sync(&only_a);
    assert!(leftover.exists(), "{r:?}");
    // ...nor may it record that nothing is left: the next start that knows
    // b sweeps it.
    assert_eq!(sync(&both).code, 0);
    assert!(
        !leftover.exists(),
        "the temp file of the returning target is swept"
    );
    assert_eq!(
        std::fs::read(root_b.path().join("etc/b.conf")).unwrap(),
        b"b\n"
    );
}

/// `--dry-run` is a promise to write nothing, whichever command gets it.
#[test]
fn sync_with_dry_run_writes_nothing_and_says_so() {
    let env = Env::new();
    basic(&env);
    let s = env.tend(&["sync", "--dry-run"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(s.stdout.contains("dry run: nothing written"), "{s:?}");
    assert!(!env.at("etc").exists(), "a dry run created files");
    let st = env.tend(&["status", "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(doc["counts"]["Drifted"], 3, "{st:?}");

    let s = env.tend_with(("TEND_DRY_RUN", "true"), &["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(!env.at("etc").exists(), "TEND_DRY_RUN=true created files");

    assert_eq!(env.tend(&["sync"]).code, 0);
    env.repo.remove("motd.tend.yaml");
    env.repo.commit("motd goes");
    let s = env.tend(&["sync", "--dry-run"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("etc/motd"), "hello\n", "a dry run pruned");
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert!(!env.at("etc/motd").exists());
}

fn three_files(env: &Env) {
    env.repo.write(
        "x.tend.yaml",
        "kind: file\npath: a\ncontent: \"A\\n\"\n---\nkind: file\npath: b\ncontent: \"B\\n\"\n---\nkind: file\npath: c\ncontent: \"C\\n\"\n",
    );
    env.repo.commit("a, b, c");
    // Already there before tend: `a` as declared, `b` with other content.
    std::fs::write(env.at("a"), "A\n").unwrap();
    std::fs::write(env.at("b"), "old\n").unwrap();
}

/// Objects already in place are taken over: found in sync or updated, they
/// join the inventory and are pruned once no longer declared, as the ones
/// tend created are.
#[test]
fn objects_already_there_are_adopted_and_pruned_once_undeclared() {
    let env = Env::new();
    three_files(&env);
    let cfg = env.config("policy:\n  max_prune: 100%\n");
    let cfg = cfg.to_str().unwrap();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("b"), "B\n");
    env.repo
        .write("x.tend.yaml", "kind: file\npath: c\ncontent: \"C\\n\"\n");
    env.repo.commit("only c");
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(s.stdout.contains("2 pruned"), "{s:?}");
    assert!(!env.at("a").exists() && !env.at("b").exists());
    assert_eq!(env.read("c"), "C\n");
}

/// With `policy.adopt: false` what tend did not create is left alone: one
/// that differs is Blocked, saying why, until a human removes it; one
/// already as declared is never pruned.
#[test]
fn with_adopt_false_objects_already_there_are_left_alone() {
    let env = Env::new();
    three_files(&env);
    let cfg = env.config("policy:\n  adopt: false\n  max_prune: 100%\n");
    let cfg = cfg.to_str().unwrap();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(
        env.read("b"),
        "old\n",
        "an object tend did not create was overwritten"
    );
    assert_eq!(env.read("c"), "C\n");
    let b = env.resource("files/file/b").unwrap();
    assert_eq!(b["state"], "Blocked", "{b}");
    assert!(b["reason"].as_str().unwrap().contains("adopt"), "{b}");
    assert_eq!(env.resource("files/file/a").unwrap()["state"], "InSync");

    std::fs::remove_file(env.at("b")).unwrap();
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("b"), "B\n");

    env.repo
        .write("x.tend.yaml", "kind: file\npath: c\ncontent: \"C\\n\"\n");
    env.repo.commit("only c");
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(
        env.read("a"),
        "A\n",
        "an object tend never took over was pruned"
    );
    assert!(
        !env.at("b").exists(),
        "b was created by tend, so it is pruned"
    );
}

/// `tend diff | head` and the like: a reader that goes away ends the output
/// quietly, and the exit code still tells what the command found.
#[test]
fn output_into_a_closed_pipe_is_not_a_crash() {
    let env = Env::new();
    basic(&env);
    // A ledger with drift in it for status to print.
    assert_eq!(env.tend(&["sync", "--dry-run"]).code, 3);
    for (args, code) in [
        (["diff"].as_slice(), 1),
        (["status", "-o", "json"].as_slice(), 1),
    ] {
        // The reading end is closed before tend starts: its first write
        // meets a pipe nobody reads.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = env
            .cmd(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    }
}

/// A revision with invalid documents: the valid ones apply, the invalid
/// ones are Blocked when their path is known, every problem is in `tend
/// status` (which exits 1) until a revision fixes them.
#[test]
fn invalid_declarations_show_in_status_until_fixed() {
    let env = Env::new();
    env.repo
        .write(
            "a.tend.yaml",
            "kind: file\npath: ok\ncontent: \"ok\\n\"\n---\nkind: file\npath: b\nmode: \"999\"\ncontent: x\n---\nkind: file\ncontent: no path\n",
        )
        .write("c.tend.yaml", "kind: file\npath: c\ncontent: \"unclosed\n");
    env.repo.commit("some invalid");
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("ok"), "ok\n");
    assert!(!env.at("b").exists());

    let st = env.tend(&["status"]);
    assert_eq!(st.code, 1, "{st:?}");
    assert!(st.stdout.contains("declaration problems: 3"), "{st:?}");
    assert!(st.stdout.contains("c.tend.yaml:"), "{st:?}");
    let b = env.resource("files/file/b").expect("b has a record");
    assert_eq!(b["state"], "Blocked", "{b}");
    assert!(b["reason"].as_str().unwrap().contains("999"), "{b}");
    let doc = env.status();
    assert_eq!(doc["problems"].as_array().unwrap().len(), 3, "{doc}");

    env.repo
        .write("a.tend.yaml", "kind: file\npath: ok\ncontent: \"ok\\n\"\n")
        .remove("c.tend.yaml");
    env.repo.commit("fixed");
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 0, "{s:?}");
    let st = env.tend(&["status"]);
    assert_eq!(st.code, 0, "{st:?}");
    assert!(!st.stdout.contains("problems"), "{st:?}");
    assert_eq!(env.status()["problems"], serde_json::json!([]));
}

/// Switches follow the same precedence as every other setting: a flag or
/// environment variable set to false turns off a config file's true.
#[test]
fn boolean_switches_can_be_turned_off_by_flag_or_environment() {
    let env = Env::new();
    basic(&env);
    let cfg = env.config("source:\n  mirror: true\n");
    let cfg = cfg.to_str().unwrap();
    let mirrored = |r: &Run| r.stdout.contains("files/file/motd.tend.yaml: create");
    let declared = |r: &Run| r.stdout.contains("files/file/etc/motd: create");

    let d = env.tend(&["diff", "-c", cfg]);
    assert!(mirrored(&d) && !declared(&d), "{d:?}");
    let d = env.tend(&["diff", "-c", cfg, "--mirror=false"]);
    assert!(declared(&d) && !mirrored(&d), "{d:?}");
    for off in ["false", "0", "no"] {
        let d = env.tend_with(("TEND_MIRROR", off), &["diff", "-c", cfg]);
        assert!(declared(&d) && !mirrored(&d), "TEND_MIRROR={off}: {d:?}");
    }
    let d = env.tend_with(("TEND_MIRROR", "1"), &["diff"]);
    assert!(mirrored(&d), "TEND_MIRROR=1: {d:?}");

    let cfg = env.config("policy:\n  dry_run: true\n");
    let cfg = cfg.to_str().unwrap();
    assert_eq!(env.tend(&["sync", "-c", cfg]).code, 3);
    assert!(!env.at("etc").exists());
    let s = env.tend_with(("TEND_DRY_RUN", "false"), &["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/motd"), "hello\n");
}

/// `tend validate` touches no target, so it needs none: in CI a repository
/// is checked without saying where it would be applied.
#[test]
fn validate_needs_no_target() {
    let env = Env::new();
    basic(&env);
    let state = env.state.path().to_str().unwrap();
    let v = env.raw(&["validate", "--repo", &env.repo.url(), "--state-dir", state]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(
        v.stdout.contains("3 resources declared, 0 problems"),
        "{v:?}"
    );
    // sync still needs one.
    let s = env.raw(&["sync", "--repo", &env.repo.url(), "--state-dir", state]);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(s.stderr.contains("no target"), "{s:?}");
}

/// `resume ID` under a global pause restarts correcting that one resource
/// while the others stay paused; a new global pause pauses it again.
#[test]
fn resuming_one_resource_under_a_global_pause_corrects_it_alone() {
    let env = Env::new();
    basic(&env);
    let state = env.state.path().to_str().unwrap();
    assert_eq!(env.tend(&["sync", "--dry-run"]).code, 3);
    assert_eq!(env.raw(&["pause", "--state-dir", state]).code, 0);
    let r = env.raw(&["resume", "files/file/etc/motd", "--state-dir", state]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("all others stay paused"), "{r:?}");
    assert_eq!(env.tend(&["sync"]).code, 3);
    assert_eq!(env.read("etc/motd"), "hello\n");
    assert!(!env.at("etc/app").exists(), "a paused resource was written");
    assert_eq!(
        env.resource("files/file/etc/app/app.conf").unwrap()["state"],
        "Paused"
    );

    std::fs::write(env.at("etc/motd"), "by hand\n").unwrap();
    assert_eq!(env.raw(&["pause", "--state-dir", state]).code, 0);
    assert_eq!(env.tend(&["sync"]).code, 3);
    assert_eq!(
        env.read("etc/motd"),
        "by hand\n",
        "a new global pause covers it again"
    );

    // A typo is pointed out, not silently recorded.
    let p = env.raw(&["pause", "files/file/etc/mtod", "--state-dir", state]);
    assert_eq!(p.code, 0, "{p:?}");
    assert!(
        p.stderr.contains("no resource files/file/etc/mtod"),
        "{p:?}"
    );

    assert_eq!(env.raw(&["resume", "--state-dir", state]).code, 0);
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert_eq!(env.read("etc/motd"), "hello\n");
}

/// `policy.prune: false`: what a revision no longer declares is released,
/// not deleted. It stays where it is, tend stops managing it, and the pass
/// converges (the setting is a choice, not a fault to report forever).
#[test]
fn with_prune_false_undeclared_files_are_released_and_left_in_place() {
    let env = Env::new();
    basic(&env);
    let cfg = env.config("policy:\n  prune: false\n");
    let cfg = cfg.to_str().unwrap();
    assert_eq!(env.tend(&["sync", "-c", cfg]).code, 0);
    env.repo.remove("motd.tend.yaml");
    env.repo.commit("motd goes");
    let d = env.tend(&["diff", "-c", cfg]);
    assert_eq!(d.code, 0, "{d:?}");
    assert!(d.stderr.contains("releases"), "{d:?}");
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/motd"), "hello\n");
    let st = env.tend(&["status"]);
    assert_eq!(st.code, 0, "{st:?}");
    assert!(env.resource("files/file/etc/motd").is_none());
    // Released for good: with prune back on, it is not tend's to delete.
    assert_eq!(env.tend(&["sync"]).code, 0);
    assert_eq!(env.read("etc/motd"), "hello\n");
}

/// Each failure is logged with its resource and reason, not only counted.
#[test]
fn a_failed_write_is_logged_with_its_resource_and_reason() {
    let env = Env::new();
    basic(&env);
    // A folder with something in it where a file must go: nothing in it is
    // touched, the write fails and is retried later.
    std::fs::create_dir_all(env.at("etc/motd/keep")).unwrap();
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(
        s.stderr.contains("failed; retried with backoff")
            && s.stderr.contains("files/file/etc/motd"),
        "{s:?}"
    );
    assert!(env.at("etc/motd/keep").is_dir());
}

/// Releasing deletes nothing, so `max_prune` does not hold it back.
#[test]
fn with_prune_false_a_mass_release_is_not_held() {
    let env = Env::new();
    basic(&env);
    let cfg = env.config("policy:\n  prune: false\n  max_prune: 10%\n");
    let cfg = cfg.to_str().unwrap();
    assert_eq!(env.tend(&["sync", "-c", cfg]).code, 0);
    env.repo.remove("app.tend.yaml");
    env.repo.commit("app goes");
    let s = env.tend(&["sync", "-c", cfg]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("etc/app/app.conf"), "port=80\n");
}

/// Many failures in one pass: the first are logged one by one, the rest
/// counted, so a read-only root cannot flood the log.
#[test]
fn failures_beyond_the_first_twenty_are_not_logged_one_by_one() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: directory\npath: srv\nsource: www\n");
    for i in 0..30 {
        env.repo.write(&format!("www/p{i}"), format!("{i}"));
        std::fs::create_dir_all(env.at(&format!("srv/p{i}/keep"))).unwrap();
    }
    env.repo.commit("site");
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(
        s.stderr.matches("failed; retried with backoff").count(),
        20,
        "{s:?}"
    );
    assert!(s.stderr.contains("more writes failed this pass"), "{s:?}");
}

/// `sync` says what comes next for each resource not in sync, by the same
/// error policy the daemon schedules by: a transient failure is retried,
/// a blocked one needs a human.
#[test]
fn sync_tells_what_is_retried_from_what_needs_a_human() {
    let env = Env::new();
    // `a` cannot be written while a folder with something in it stands
    // there: transient. `b` is declared twice, differently: blocked.
    env.repo
        .write(
            "x.tend.yaml",
            "kind: file\npath: a\ncontent: A\n---\nkind: file\npath: b\ncontent: B\n---\nkind: file\npath: c\ncontent: C\n",
        )
        .write("y.tend.yaml", "kind: file\npath: b\ncontent: other\n");
    env.repo.commit("a, b, c");
    std::fs::create_dir_all(env.at("a/keep")).unwrap();
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    let line = |what: &str| {
        s.stderr
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?}: {s:?}"))
            .to_string()
    };
    let retry = line("to retry (transient");
    assert!(
        retry.contains("files/file/a") && !retry.contains("files/file/b"),
        "{retry}"
    );
    let blocked = line("blocked (needs a human");
    assert!(
        blocked.contains("files/file/b") && !blocked.contains("files/file/a"),
        "{blocked}"
    );
    assert!(!s.stderr.contains("files/file/c"), "c is in sync: {s:?}");

    let s = env.tend(&["sync", "-o", "json"]);
    assert_eq!(s.code, 3, "{s:?}");
    let v: serde_json::Value = serde_json::from_str(s.stdout.trim()).expect("json");
    assert_eq!(
        v["next"]["retry"],
        serde_json::json!(["files/file/a"]),
        "{v}"
    );
    assert_eq!(
        v["next"]["needs a human"],
        serde_json::json!(["files/file/b"]),
        "{v}"
    );
    assert_eq!(v["next"].as_object().map(|m| m.len()), Some(2), "{v}");

    // Once the folder is gone, only what needs a human is left.
    std::fs::remove_dir_all(env.at("a")).unwrap();
    let s = env.tend(&["sync", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(s.stdout.trim()).expect("json");
    assert!(v["next"].get("retry").is_none(), "{v}");
    assert_eq!(env.read("a"), "A");
}
