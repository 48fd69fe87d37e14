//! The mirror's garbage collection (`source.gc`): what a force-push left
//! unreachable leaves the mirror once older than the grace period, while the
//! revisions tend keeps (applied, pinned, the branch) stay whole, and syncs
//! go on working. The source is made to transfer (an alternates file) as a
//! remote would, so the next fetch cannot link the old objects back from it.

mod util;

use std::path::Path;
use std::process::Command;

use util::Env;

/// Whether the mirror holds `id` (`git cat-file -e`).
fn holds(mirror: &Path, id: &str) -> bool {
    Command::new("git")
        .arg("--git-dir")
        .arg(mirror)
        .args(["cat-file", "-e", id])
        .status()
        .unwrap()
        .success()
}

/// Sets every file under the mirror's objects to `when` (`touch -d`).
fn backdate(mirror: &Path, when: &str) {
    let ok = Command::new("find")
        .arg(mirror.join("objects"))
        .args(["-type", "f", "-exec", "touch", "-d", when, "{}", "+"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn a_force_pushed_history_leaves_the_mirror_after_the_grace_but_kept_revisions_stay() {
    let env = Env::new();
    std::fs::write(env.repo.path().join(".git/objects/info/alternates"), "").unwrap();
    let config = env.config("source:\n  allow_rewind: true\n  gc: {interval: 0s, grace: 1h}\n");
    let sync = || env.tend(&["sync", "--mirror", "-c", config.to_str().unwrap()]);

    env.repo.write("a.txt", "base\n");
    let base = env.repo.commit("base");
    assert_eq!(sync().code, 0);
    env.repo.write("pinned.txt", "held by a pin\n");
    let pinned = env.repo.commit("pinned");
    assert_eq!(sync().code, 0);
    let pinned_blob = env.repo.git(&["rev-parse", "HEAD:pinned.txt"]);
    let p = env.tend(&["pin", &pinned, "-c", config.to_str().unwrap()]);
    assert_eq!(p.code, 0, "{p:?}");

    // The branch is rewound and rewritten twice: `doomed` is fetched, then
    // force-pushed away.
    env.repo.git(&["reset", "-q", "--hard", &base]);
    env.repo.write("doomed.txt", "force-pushed away\n");
    let doomed = env.repo.commit("doomed");
    let doomed_blob = env.repo.git(&["rev-parse", "HEAD:doomed.txt"]);
    assert_eq!(sync().code, 0);
    env.repo.git(&["reset", "-q", "--hard", &base]);
    env.repo.write("tip.txt", "the branch now\n");
    let tip = env.repo.commit("tip");
    let tip_blob = env.repo.git(&["rev-parse", "HEAD:tip.txt"]);
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    let mirror = env.mirror_dir();
    // Collected, but younger than the grace: nothing is gone yet.
    assert!(mirror.join("tend-gc-done").exists());
    assert!(holds(&mirror, &doomed_blob), "a young object went");
    assert!(holds(&mirror, &doomed));

    backdate(&mirror, "2 hours ago");
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    assert!(
        !holds(&mirror, &doomed_blob),
        "the force-pushed blob stayed"
    );
    assert!(!holds(&mirror, &doomed), "the force-pushed commit stayed");
    // The pinned (and applied) revision and its ancestry, and the branch.
    for id in [&pinned, &pinned_blob, &base, &tip, &tip_blob] {
        assert!(holds(&mirror, id), "{id} went");
    }
    let status = env.status();
    assert_eq!(status["source"]["applied_revision"], pinned.as_str());
    let bytes = status["source"]["mirror_bytes"].as_u64().unwrap();
    assert!(bytes > 0, "{status}");
    let text = env.tend(&["status"]);
    assert!(text.stdout.contains("mirror   "), "{text:?}");

    // A no-op sync after the collection still works, pinned and unpinned.
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    assert!(s.stdout.contains("0 applied"), "{s:?}");
    assert_eq!(env.tend(&["unpin"]).code, 0);
    let s = sync();
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("tip.txt"), "the branch now\n");
    assert!(!env.at("pinned.txt").exists());
}

#[test]
fn the_daemon_collects_after_a_poll_and_publishes_the_mirrors_size() {
    let env = Env::new();
    std::fs::write(env.repo.path().join(".git/objects/info/alternates"), "").unwrap();
    env.repo.write("a.txt", "base\n");
    let base = env.repo.commit("base");
    env.repo.write("doomed.txt", "force-pushed away\n");
    env.repo.commit("doomed");
    let doomed_blob = env.repo.git(&["rev-parse", "HEAD:doomed.txt"]);
    let served = env.serve(
        "source:\n  allow_rewind: true\n  gc: {interval: 0s, grace: 0s}\n",
        &["--mirror"],
    );
    assert!(served.ready(30), "{}", env.daemon_log());
    let mirror = env.mirror_dir();
    assert!(holds(&mirror, &doomed_blob));

    env.repo.git(&["reset", "-q", "--hard", &base]);
    env.repo.write("tip.txt", "the branch now\n");
    env.repo.commit("tip");
    served.refresh();
    let collected = util::wait_until(30, || {
        env.daemon_log().contains("mirror collected") && !holds(&mirror, &doomed_blob)
    });
    assert!(collected, "{}", env.daemon_log());
    assert!(util::wait_until(10, || env.at("tip.txt").exists()));
    let bytes = served
        .metrics()
        .value("tend_source_mirror_bytes", &[])
        .expect("tend_source_mirror_bytes");
    assert!(bytes > 0.0, "{bytes}");
    let status = served.get("/api/v1/status").json();
    assert!(
        status["source"]["mirror_bytes"].as_u64().unwrap() > 0,
        "{status}"
    );
}

/// With `--link`, the revision of a tree kept for a rollback stays in the
/// mirror (a pin can name it), though no ref reaches it any more; one
/// whose tree went does not.
#[test]
fn a_kept_link_tree_keeps_its_revision() {
    let env = Env::new();
    std::fs::write(env.repo.path().join(".git/objects/info/alternates"), "").unwrap();
    let config = env.config("source:\n  allow_rewind: true\n  gc: {interval: 0s, grace: 1h}\n");
    let sync = || {
        let s = env.tend(&[
            "sync",
            "--mirror",
            "--link",
            "current",
            "--link-keep",
            "1",
            "-c",
            config.to_str().unwrap(),
        ]);
        assert_eq!(s.code, 0, "{s:?}");
    };
    env.repo.write("a.txt", "base\n");
    let base = env.repo.commit("base");
    sync();
    let rewrite = |name: &str| {
        env.repo.git(&["reset", "-q", "--hard", &base]);
        env.repo.write(name, format!("only in {name}\n"));
        let commit = env.repo.commit(name);
        sync();
        let blob = env.repo.git(&["rev-parse", &format!("HEAD:{name}")]);
        (commit, blob)
    };
    let (dropped, dropped_blob) = rewrite("dropped.txt");
    let (kept, kept_blob) = rewrite("kept.txt");
    let (tip, _) = rewrite("tip.txt");
    // The link's tree and one previous one.
    let revs = env.at(".tend/revs");
    assert!(revs.join(&tip).is_dir() && revs.join(&kept).is_dir());
    assert!(!revs.join(&dropped).exists());

    let mirror = env.mirror_dir();
    assert!(holds(&mirror, &dropped_blob));
    backdate(&mirror, "2 hours ago");
    sync();
    assert!(
        !holds(&mirror, &dropped_blob),
        "a revision no tree keeps stayed"
    );
    assert!(!holds(&mirror, &dropped));
    for id in [&kept, &kept_blob, &tip] {
        assert!(holds(&mirror, id), "{id} went");
    }
    let p = env.tend(&["pin", &kept, "-c", config.to_str().unwrap()]);
    assert_eq!(p.code, 0, "{p:?}");
}
