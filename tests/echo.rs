//! tend tells the events of its own writes by what they left at the path,
//! not by a time window after writing: an edit right after a correction is
//! a change like any other, two daemons fighting over one root end up
//! Contested, under a stream of hand edits status says InSync only when
//! every file is what its declaration says, and a pass stopped midway
//! leaves what it did not write Drifted. Real inotify, real processes.

mod util;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use util::{wait_until, Daemon, Env, TestRepo};

fn watching(env: &Env) -> bool {
    env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))
}

#[test]
fn a_second_edit_right_after_a_correction_is_corrected_too() {
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a\\n\"\n---\nkind: file\npath: etc/b\ncontent: \"b\\n\"\n",
    );
    env.repo.commit("init");
    // Ten corrections in a row, well under what counts as contested.
    let cfg = env.config("policy:\n  resync: 1h\n  contested: {corrections: 100, window: 10m}\n");
    let _d = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 2
            && watching(&env)),
        "{}",
        env.daemon_log()
    );
    for round in 0..5 {
        std::fs::write(env.at("etc/a"), format!("edit {round}\n")).unwrap();
        assert!(
            wait_until(10, || env.read("etc/a") == "a\n"),
            "edit {round} stays: {}",
            env.daemon_log()
        );
        // At once, well inside two seconds of tend's write.
        let restored = Instant::now();
        std::fs::write(env.at("etc/a"), format!("edit {round} again\n")).unwrap();
        assert!(restored.elapsed() < Duration::from_secs(1));
        assert!(
            wait_until(10, || env.read("etc/a") == "a\n"),
            "the second edit of round {round} stays: {}",
            env.daemon_log()
        );
    }
    assert!(wait_until(10, || env.status()["counts"]["InSync"] == 2));
    assert_eq!(env.read("etc/a"), "a\n");
}

/// `tend run` of `repo` into `root` with its own state dir.
fn daemon_of(repo: &TestRepo, root: &Path, state: &Path, cfg: &Path) -> Daemon {
    let log = std::fs::File::create(state.join("daemon.log")).unwrap();
    let child = util::tend_cmd()
        .args(["run", "--listen", "127.0.0.1:0", "--interval", "1h"])
        .args(["--repo", &repo.url()])
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .arg("-c")
        .arg(cfg)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Daemon { child }
}

fn state_of(env: &Env, state: &Path, id: &str) -> String {
    let r = env.raw(&[
        "status",
        "-o",
        "json",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
    doc["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["id"] == id))
        .and_then(|r| r["state"].as_str())
        .unwrap_or("")
        .to_string()
}

#[test]
fn two_daemons_writing_one_root_end_up_contested_not_both_in_sync() {
    let env = Env::new();
    let decl = |content: &str| format!("kind: file\npath: etc/a\ncontent: \"{content}\\n\"\n");
    env.repo.write("a.tend.yaml", decl("mine"));
    env.repo.commit("mine");
    let theirs = TestRepo::new();
    theirs.write("a.tend.yaml", decl("theirs"));
    theirs.commit("theirs");
    let other_state = tempfile::tempdir().unwrap();
    let policy = "policy:\n  resync: 1h\n  contested: {corrections: 3, window: 10m}\n";
    let cfg = env.config(policy);
    let other_cfg = other_state.path().join("tend.yaml");
    std::fs::write(&other_cfg, policy).unwrap();

    let _mine = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 1
            && watching(&env)),
        "{}",
        env.daemon_log()
    );
    let _theirs = daemon_of(&theirs, env.root(), other_state.path(), &other_cfg);
    let id = "files/file/etc/a";
    let (me, them) = (env.state.path(), other_state.path());
    let contested = wait_until(60, || {
        state_of(&env, me, id) == "Contested" || state_of(&env, them, id) == "Contested"
    });
    let other_log = || std::fs::read_to_string(them.join("daemon.log")).unwrap_or_default();
    assert!(
        contested,
        "mine {} theirs {}\n{}\n---\n{}",
        state_of(&env, me, id),
        state_of(&env, them, id),
        env.daemon_log(),
        other_log()
    );
    // Once one backs off, the other's write stands: whichever says InSync
    // is right about the file, and they never both say it.
    let settled = wait_until(30, || {
        let (a, b) = (state_of(&env, me, id), state_of(&env, them, id));
        let content = env.read("etc/a");
        let true_of = |state: &str, want: &str| state != "InSync" || content == want;
        ["Contested", "InSync"].contains(&a.as_str())
            && ["Contested", "InSync"].contains(&b.as_str())
            && true_of(&a, "mine\n")
            && true_of(&b, "theirs\n")
    });
    let (a, b) = (state_of(&env, me, id), state_of(&env, them, id));
    assert!(settled, "mine {a} theirs {b}, file {:?}", env.read("etc/a"));
    assert!(!(a == "InSync" && b == "InSync"), "both say InSync");
}

/// A small deterministic generator: the soak picks its files from it.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

fn write_site(repo: &TestRepo, n: usize, version: u32) {
    for i in 0..n {
        // Each version changes a tenth of the files.
        let v = if i % 10 == version as usize % 10 {
            version
        } else {
            0
        };
        repo.write(&format!("site/d{}/f{i}", i % 8), format!("file {i} v{v}\n"));
    }
}

fn mismatches(env: &Env, n: usize, repo: &TestRepo) -> Vec<PathBuf> {
    (0..n)
        .map(|i| format!("d{}/f{i}", i % 8))
        .filter(|p| {
            let want = std::fs::read(repo.path().join("site").join(p)).unwrap();
            std::fs::read(env.at(p)).ok().as_deref() != Some(want.as_slice())
        })
        .map(PathBuf::from)
        .collect()
}

#[test]
fn under_a_stream_of_hand_edits_and_commits_status_is_in_sync_only_when_true() {
    let env = Env::new();
    let n = 200;
    write_site(&env.repo, n, 0);
    env.repo.commit("v0");
    let cfg = env.config("policy:\n  resync: 1h\n  contested: {corrections: 1000, window: 1m}\n");
    let _d = env.daemon(&[
        "--interval",
        "1s",
        "--mirror",
        "--path",
        "site",
        "-c",
        cfg.to_str().unwrap(),
    ]);
    assert!(
        wait_until(30, || env.status()["counts"]["InSync"] == n
            && watching(&env)),
        "{}",
        env.daemon_log()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let edits = Arc::new(AtomicUsize::new(0));
    let (flag, made, root) = (stop.clone(), edits.clone(), env.root().to_path_buf());
    let editor = std::thread::spawn(move || {
        let mut rng = Lcg(7);
        while !flag.load(Ordering::SeqCst) {
            let i = rng.below(n);
            let path = root.join(format!("d{}/f{i}", i % 8));
            let edit = made.load(Ordering::SeqCst);
            if std::fs::write(&path, format!("hand edit {edit}\n")).is_ok() {
                made.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    // Each commit lands among a stream of edits, is applied with the edits
    // going on, and is followed by more edits: thirty before the first
    // commit, ten more once each is applied.
    let made_since =
        |from: usize, more: usize| wait_until(30, || edits.load(Ordering::SeqCst) >= from + more);
    assert!(made_since(0, 30), "the editor made no edits");
    let mut last = String::new();
    for version in 1..=2 {
        write_site(&env.repo, n, version);
        last = env.repo.commit(&format!("v{version}"));
        assert!(
            wait_until(30, || env.status()["source"]["applied_revision"]
                == last.as_str()),
            "v{version} not applied: {}\n{}",
            env.status()["source"],
            env.daemon_log()
        );
        assert!(made_since(edits.load(Ordering::SeqCst), 10));
    }
    stop.store(true, Ordering::SeqCst);
    editor.join().unwrap();
    let edits = edits.load(Ordering::SeqCst);
    assert!(edits >= 50, "{edits} edits");
    // Converged with no resync (an hour away): every edit was seen. Once
    // status says all InSync at the last revision, every file must be
    // what its declaration says.
    let converged = wait_until(60, || {
        let s = env.status();
        s["counts"]["InSync"] == n && s["source"]["applied_revision"] == last.as_str()
    });
    let wrong = mismatches(&env, n, &env.repo);
    assert!(
        converged,
        "status {}\nwrong {wrong:?}\n{}",
        env.status()["counts"],
        env.daemon_log()
    );
    assert!(wrong.is_empty(), "status says InSync, but {wrong:?} differ");
}

#[test]
fn a_pass_stopped_midway_leaves_what_it_did_not_write_drifted_not_in_sync() {
    let env = Env::new();
    // Batches of 256, then 512: a stop can land after the first.
    let n = 1000;
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: content\n",
    );
    let version = |v: u32| {
        for i in 0..n {
            env.repo.write(
                &format!("content/d{}/f{i}", i % 30),
                format!("file {i} v{v}\n"),
            );
        }
        env.repo.commit(&format!("v{v}"));
    };
    version(1);
    let sync = env.tend(&["sync"]);
    assert_eq!(sync.code, 0, "{sync:?}");
    let mut landed = 0;
    for v in 2..=4 {
        version(v);
        let want = |i: usize| format!("file {i} v{v}\n");
        let written = || {
            (0..n)
                .filter(|i| {
                    std::fs::read_to_string(env.at(&format!("site/d{}/f{i}", i % 30)))
                        .is_ok_and(|s| s == want(*i))
                })
                .count()
        };
        let mut d = env.daemon(&["--interval", "1h"]);
        // The first in identity order, so in the first batch written.
        let first = env.at("site/d0/f0");
        wait_until(60, || {
            std::fs::read_to_string(&first).is_ok_and(|s| s == want(0))
        });
        assert_eq!(d.stop(30), Some(0), "{}", env.daemon_log());
        let done = written();
        if done == n {
            continue;
        }
        landed += 1;
        // Stopped midway: whatever status calls InSync holds its content.
        let status = env.status();
        let resources = status["resources"].as_array().unwrap();
        assert_eq!(resources.len(), n);
        for r in resources.iter().filter(|r| r["state"] == "InSync") {
            let path = r["id"].as_str().unwrap().trim_start_matches("files/file/");
            let i: usize = path.rsplit_once("/f").unwrap().1.parse().unwrap();
            assert_eq!(
                std::fs::read_to_string(env.at(path)).unwrap(),
                want(i),
                "{path} is InSync but not written ({done} of {n} were)"
            );
        }
        let drifted = resources.iter().filter(|r| r["state"] == "Drifted").count();
        assert_eq!(drifted, n - done, "{}", status["counts"]);
        break;
    }
    assert!(landed >= 1, "no stop landed mid-pass");
}
