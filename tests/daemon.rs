//! `tend run` on real repositories: the loop applies new commits, prunes,
//! respects self_heal and pauses, corrects drift at resync, keeps drift ages
//! across restarts, backs off from contested resources, survives kill -9,
//! and stops cleanly on SIGTERM.

mod util;

use std::time::Duration;

use util::{stamps, wait_until, Env};

fn site(env: &Env) {
    env.repo
        .write("a.tend.yaml", "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n---\nkind: file\npath: etc/b\ncontent: \"b1\\n\"\n");
    env.repo.commit("init");
}

#[test]
fn new_commits_are_applied_and_removals_pruned() {
    let env = Env::new();
    site(&env);
    let mut d = env.daemon(&["--interval", "1s"]);
    assert!(
        wait_until(20, || env.at("etc/b").exists()),
        "{}",
        env.daemon_log()
    );
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a2\\n\"\n",
    );
    env.repo.commit("change a, drop b");
    assert!(wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
        .ok()
        .as_deref()
        == Some("a2\n")));
    assert!(
        wait_until(20, || !env.at("etc/b").exists()),
        "{}",
        env.daemon_log()
    );
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn self_heal_off_keeps_the_hand_edit_and_its_age_grows() {
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/keep\ncontent: \"k\\n\"\nself_heal: false\n",
    );
    env.repo.commit("init");
    let cfg = env.config("policy:\n  resync: 1s\n");
    let _d = env.daemon(&["--interval", "1s", "-c", cfg.to_str().unwrap()]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 1));
    std::fs::write(env.at("etc/keep"), "hand edit\n").unwrap();
    assert!(wait_until(20, || env
        .resource("files/file/etc/keep")
        .is_some_and(|r| r["state"] == "Drifted")));
    let first = env.resource("files/file/etc/keep").unwrap();
    // Resync passes begun after the drift was recorded leave the edit, and
    // the age (whole seconds) grows from the same start.
    let passes = env.full_passes();
    assert!(
        wait_until(20, || env.full_passes() >= passes + 2),
        "{}",
        env.daemon_log()
    );
    let mut later = first.clone();
    assert!(
        wait_until(20, || {
            later = env.resource("files/file/etc/keep").unwrap();
            later["drift_age_seconds"].as_u64() > first["drift_age_seconds"].as_u64()
        }),
        "{first} {later}"
    );
    assert_eq!(first["drift_since"], later["drift_since"]);
    assert_eq!(env.read("etc/keep"), "hand edit\n");
}

#[test]
fn a_paused_resource_is_left_alone_until_resumed() {
    let env = Env::new();
    site(&env);
    let cfg = env.config("policy:\n  resync: 1s\n");
    let _d = env.daemon(&["--interval", "1s", "-c", cfg.to_str().unwrap()]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 2));
    let state = env.state.path().to_str().unwrap();
    let p = env.raw(&["pause", "files/file/etc/a", "--state-dir", state]);
    assert_eq!(p.code, 0, "{p:?}");
    std::fs::write(env.at("etc/a"), "emergency edit\n").unwrap();
    assert!(wait_until(20, || env
        .resource("files/file/etc/a")
        .is_some_and(|r| r["state"] == "Paused")));
    let paused = env.resource("files/file/etc/a").unwrap();
    assert!(paused["drift_since"].is_string(), "{paused}");
    // Resync passes begun after the pause was seen leave the file alone.
    let passes = env.full_passes();
    assert!(
        wait_until(20, || env.full_passes() >= passes + 2),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.read("etc/a"), "emergency edit\n");
    // The other resource is still corrected.
    std::fs::write(env.at("etc/b"), "edited\n").unwrap();
    assert!(wait_until(20, || env.read("etc/b") == "b1\n"));
    assert_eq!(env.raw(&["resume", "--state-dir", state]).code, 0);
    assert!(
        wait_until(20, || env.read("etc/a") == "a1\n"),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn drift_is_corrected_at_the_next_resync() {
    let env = Env::new();
    site(&env);
    let cfg = env.config("policy:\n  resync: 2s\n  watch: false\n");
    let _d = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 2));
    std::fs::write(env.at("etc/a"), "drifted\n").unwrap();
    std::fs::remove_file(env.at("etc/b")).unwrap();
    assert!(
        wait_until(20, || env.read("etc/a") == "a1\n"
            && env.at("etc/b").exists()),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn a_converged_daemon_writes_nothing_and_changes_no_status() {
    let env = Env::new();
    site(&env);
    let cfg = env.config("policy:\n  resync: 1s\n");
    let _d = env.daemon(&["--interval", "1s", "-c", cfg.to_str().unwrap()]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 2));
    // The first pass has ended, its records and audit entries written.
    assert!(
        wait_until(20, || env.full_passes() >= 1),
        "{}",
        env.daemon_log()
    );
    let before = stamps(env.root());
    let audit = std::fs::read(env.state.path().join("audit.jsonl")).unwrap();
    let strip = |v: serde_json::Value| {
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].clone(),
                    r["state"].clone(),
                    r["last_applied"].clone(),
                    r["attempts"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let status = strip(env.status());
    // Several resync passes.
    let passes = env.full_passes();
    assert!(
        wait_until(30, || env.full_passes() >= passes + 3),
        "{}",
        env.daemon_log()
    );
    assert_eq!(stamps(env.root()), before);
    assert_eq!(
        std::fs::read(env.state.path().join("audit.jsonl")).unwrap(),
        audit
    );
    assert_eq!(strip(env.status()), status);
}

#[test]
fn every_failure_has_a_reason_and_a_next_retry_and_drift_age_survives_restart() {
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/blocked\ncontent: x\n---\nkind: file\npath: etc/fine\ncontent: y\n",
    );
    env.repo.commit("init");
    // A directory of unmanaged files where a file must go: nothing in it may be lost.
    std::fs::create_dir_all(env.at("etc/blocked")).unwrap();
    std::fs::write(env.at("etc/blocked/precious"), "mine").unwrap();
    let mut d = env.daemon(&["--interval", "1s"]);
    let id = "files/file/etc/blocked";
    assert!(
        wait_until(20, || env
            .resource(id)
            .is_some_and(|r| r["state"] == "Failed")),
        "{}",
        env.daemon_log()
    );
    let r = env.resource(id).unwrap();
    assert!(r["reason"].as_str().unwrap().contains("unmanaged"), "{r}");
    assert!(r["next_retry"].is_string(), "{r}");
    assert!(r["attempts"].as_u64().unwrap() >= 1, "{r}");
    let since = r["drift_since"].clone();
    assert!(since.is_string());
    assert_eq!(d.stop(10), Some(0));
    // Times are whole seconds: restart once a drift start set anew would
    // show as a later second.
    let started = humantime::parse_rfc3339(since.as_str().unwrap()).unwrap();
    assert!(wait_until(5, || std::time::SystemTime::now()
        >= started + Duration::from_secs(1)));
    let _d2 = env.daemon(&["--interval", "1s"]);
    assert!(wait_until(20, || env.resource(id).is_some_and(|r| r
        ["attempts"]
        .as_u64()
        > Some(1)
        || r["last_applied"].is_null()
            && r["drift_age_seconds"].as_u64() >= Some(1))));
    let after = env.resource(id).unwrap();
    assert_eq!(
        after["drift_since"], since,
        "a restart must not reset drift ages"
    );
    assert_eq!(env.read("etc/blocked/precious"), "mine");
    assert_eq!(env.read("etc/fine"), "y");
}

#[test]
fn a_second_writer_makes_the_resource_contested_and_tend_backs_off() {
    let env = Env::new();
    site(&env);
    let cfg = env.config("policy:\n  resync: 1s\n  contested: {corrections: 3, window: 10m}\n");
    let _d = env.daemon(&["--interval", "1s", "-c", cfg.to_str().unwrap()]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 2));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (flag, path) = (stop.clone(), env.at("etc/a"));
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::write(&path, format!("the other writer, take {n}\n"));
            n += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let id = "files/file/etc/a";
    let contested = wait_until(30, || {
        env.resource(id).is_some_and(|r| r["state"] == "Contested")
    });
    let backups = || util::snapshot_tree(&env.state.path().join("backups")).len();
    let count_then = backups();
    // Resync passes go on while the other writer keeps writing.
    let passes = env.full_passes();
    let more = wait_until(30, || env.full_passes() >= passes + 3);
    let count_later = backups();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().unwrap();
    assert!(contested, "{}", env.daemon_log());
    assert!(more, "{}", env.daemon_log());
    let r = env.resource(id).unwrap();
    assert!(r["reason"].as_str().unwrap().contains("overruled"), "{r}");
    assert_eq!(
        count_then, count_later,
        "the backup store must stop growing"
    );
}

#[test]
fn an_unreachable_remote_keeps_the_last_good_state() {
    let env = Env::new();
    site(&env);
    let _d = env.daemon(&["--interval", "1s"]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 2));
    // The remote goes away.
    let moved = env.repo.path().with_extension("gone");
    std::fs::rename(env.repo.path(), &moved).unwrap();
    assert!(
        wait_until(20, || env.status()["source"]["last_fetch_error"]
            .is_string()),
        "{}",
        env.daemon_log()
    );
    let mut s = serde_json::Value::Null;
    let aged = wait_until(20, || {
        s = env.status();
        s["source"]["seconds_since_last_successful_fetch"].as_u64() >= Some(2)
    });
    std::fs::rename(&moved, env.repo.path()).unwrap();
    assert!(aged, "{s}");
    assert_eq!(env.read("etc/a"), "a1\n");
    assert_eq!(env.read("etc/b"), "b1\n");
    assert_eq!(s["counts"]["InSync"], 2, "{s}");
}

#[test]
fn sigterm_stops_cleanly() {
    let env = Env::new();
    site(&env);
    let mut d = env.daemon(&["--interval", "1s"]);
    assert!(wait_until(20, || env.at("etc/a").exists()));
    let started = std::time::Instant::now();
    assert_eq!(d.stop(10), Some(0), "{}", env.daemon_log());
    assert!(started.elapsed() < Duration::from_secs(10));
    // The lock is released: a sync can run now.
    assert_eq!(env.tend(&["sync"]).code, 0);
}

fn count_files(dir: &std::path::Path) -> (usize, usize) {
    let (mut files, mut temps) = (0, 0);
    for (p, bytes) in util::snapshot_tree(dir) {
        if bytes == b"<dir>" {
            continue;
        }
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".tend-")
        {
            temps += 1;
        } else {
            files += 1;
        }
    }
    (files, temps)
}

#[test]
fn kill_9_mid_sync_then_restart_converges_exactly() {
    let env = Env::new();
    let n = 3000;
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: content\n",
    );
    for i in 0..n {
        env.repo
            .write(&format!("content/d{}/f{i}", i % 30), format!("file {i}\n"));
    }
    env.repo.commit("many");
    let mut landed_mid_sync = 0;
    for _round in 0..3 {
        let mut d = env.daemon(&["--interval", "1h"]);
        // Kill as soon as some, but not all, files are there.
        let seen = wait_until(60, || {
            let (f, _) = count_files(env.root());
            f > 0
        });
        d.kill9();
        let (files, _) = count_files(env.root());
        if seen && files < n {
            landed_mid_sync += 1;
        }
        if files >= n {
            break;
        }
    }
    assert!(landed_mid_sync >= 1, "at least one kill must land mid-sync");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        count_files(env.root()),
        (n, 0),
        "exactly the declared files, no temp files"
    );
    // Once more on a revision that deletes files.
    for i in 0..n / 3 {
        env.repo.remove(&format!("content/d{}/f{i}", i % 30));
    }
    env.repo.commit("delete a third");
    let mut d = env.daemon(&["--interval", "1h"]);
    wait_until(60, || count_files(env.root()).0 < n);
    d.kill9();
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(count_files(env.root()), (n - n / 3, 0));
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    // No duplicates: no identity was created twice across the kills.
    let mut created = std::collections::HashSet::new();
    for line in audit.lines().filter(|l| l.contains("\"create\"")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            created.insert(v["id"].as_str().unwrap().to_string()),
            "created twice: {line}"
        );
    }
    assert!(created.len() > n / 2, "{}", created.len());
}

#[test]
fn a_commit_among_many_files_is_reconciled_by_its_changes_alone() {
    let env = Env::new();
    for i in 0..300 {
        env.repo
            .write(&format!("site/d{}/f{i}.txt", i % 10), format!("{i}\n"));
    }
    let first = env.repo.commit("init");
    let mut d = env.daemon(&["--interval", "1s", "--mirror", "--path", "site"]);
    assert!(
        wait_until(30, || env.status()["source"]["applied_revision"]
            == first.as_str()),
        "{}",
        env.daemon_log()
    );
    let untouched = stamps(&env.at("d3"));
    env.repo
        .write("site/d1/f1.txt", "one changed\n")
        .remove("site/d2/f2.txt")
        .write("site/new/added.txt", "added\n");
    let second = env.repo.commit("one changed, one removed, one added");
    assert!(
        wait_until(20, || env.status()["source"]["applied_revision"]
            == second.as_str()),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.read("d1/f1.txt"), "one changed\n");
    assert_eq!(env.read("new/added.txt"), "added\n");
    assert!(!env.at("d2/f2.txt").exists(), "the removed file is pruned");
    assert_eq!(stamps(&env.at("d3")), untouched, "nothing else is written");
    let log = env.daemon_log();
    assert!(
        log.lines()
            .any(|l| l.contains("new revision") && l.contains("changed=3")),
        "the new revision is reconciled by its three changes:\n{log}"
    );
    let s = env.status();
    assert_eq!(s["counts"]["InSync"], 300, "{s}");
    assert_eq!(
        env.resource("files/file/d1/f1.txt").unwrap()["state"],
        "InSync"
    );
    assert!(
        env.resource("files/file/d2/f2.txt").is_none(),
        "the pruned file has no record"
    );
    // The watcher follows the new managed set: an edit of the added file is
    // undone.
    std::fs::write(env.at("new/added.txt"), "edited\n").unwrap();
    assert!(
        wait_until(30, || env.read("new/added.txt") == "added\n"),
        "{}",
        env.daemon_log()
    );
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn a_commit_removing_most_files_is_held_by_max_prune_on_the_incremental_path() {
    let env = Env::new();
    for i in 0..10 {
        env.repo.write(&format!("site/f{i}"), format!("{i}\n"));
    }
    let first = env.repo.commit("init");
    let mut d = env.daemon(&["--interval", "1s", "--mirror", "--path", "site"]);
    assert!(
        wait_until(30, || env.status()["source"]["applied_revision"]
            == first.as_str()),
        "{}",
        env.daemon_log()
    );
    for i in 0..8 {
        env.repo.remove(&format!("site/f{i}"));
    }
    env.repo.commit("delete most");
    assert!(
        wait_until(20, || env.status()["counts"]["Blocked"] == 8),
        "{}",
        env.daemon_log()
    );
    assert!((0..10).all(|i| env.at(&format!("f{i}")).exists()));
    let r = env.resource("files/file/f0").unwrap();
    assert!(r["reason"].as_str().unwrap().contains("max_prune"), "{r}");
    let log = env.daemon_log();
    assert!(
        log.lines()
            .any(|l| l.contains("new revision") && l.contains("changed=8")),
        "{log}"
    );
    // A revision applied with prunes held back is not a base for the next:
    // that one is read whole, and its full pass still holds the prunes.
    env.repo.write("site/g", "g\n");
    let third = env.repo.commit("add g");
    assert!(
        wait_until(20, || env.status()["source"]["applied_revision"]
            == third.as_str()),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.read("g"), "g\n");
    let log = env.daemon_log();
    let last = log.lines().rfind(|l| l.contains("new revision")).unwrap();
    assert!(!last.contains("changed="), "{last}");
    assert_eq!(env.status()["counts"]["Blocked"], 8);
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn a_prune_that_failed_is_retried_by_the_next_revision() {
    let env = Env::new();
    for i in 0..20 {
        env.repo
            .write(&format!("site/d/f{i}.txt"), format!("{i}\n"));
    }
    env.repo.write("site/keep/k.txt", "k\n");
    let first = env.repo.commit("init");
    let mut d = env.daemon(&["--interval", "1s", "--mirror", "--path", "site"]);
    assert!(wait_until(30, || env.status()["source"]
        ["applied_revision"]
        == first.as_str()));
    // An immutable folder: unlinking the removed file there fails.
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .args([flag, env.at("d").to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !util::can_run(
        chattr("+i"),
        "chattr +i needs root and a file system with attributes",
    ) {
        return;
    }
    env.repo.remove("site/d/f0.txt");
    let second = env.repo.commit("f0 removed");
    let failed = wait_until(20, || {
        env.resource("files/file/d/f0.txt")
            .is_some_and(|r| r["state"] == "Failed")
    });
    assert!(chattr("-i"));
    assert!(failed, "{}", env.daemon_log());
    assert!(env.at("d/f0.txt").exists());
    assert_eq!(env.status()["source"]["applied_revision"], second.as_str());
    // The next revision changes something else; the failed delete must not
    // wait for the resync timer.
    env.repo.write("site/keep/k.txt", "k2\n");
    let third = env.repo.commit("k changed");
    assert!(
        wait_until(20, || env.status()["source"]["applied_revision"]
            == third.as_str()
            && !env.at("d/f0.txt").exists()),
        "{}",
        env.daemon_log()
    );
    assert!(env.resource("files/file/d/f0.txt").is_none());
    assert_eq!(env.read("keep/k.txt"), "k2\n");
    assert_eq!(d.stop(10), Some(0));
}
