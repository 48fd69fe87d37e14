//! Whole-tree publishing (`--link`, SPEC §10): each revision a complete
//! tree under `<root>/.tend/revs/<commit>/`, `<root>/<NAME>` switched to it
//! at once; a reader never sees two revisions mixed, unchanged files are
//! shared by hard link, old trees go, a crash leaves a complete tree.

mod util;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rustix::fs::{self as rfs, Mode, OFlags};
use util::{wait_until, Env};

const LINK: &str = "current";

/// The tree `<root>/current` names now, relative to the root.
fn linked(env: &Env) -> Option<String> {
    std::fs::read_link(env.at(LINK))
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

/// The commit directories under `.tend/revs`, and any other entries there.
fn trees(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.at(".tend/revs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn tree_of(env: &Env, commit: &str) -> PathBuf {
    env.at(&format!(".tend/revs/{commit}"))
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

/// Every commit changes both files to the same token.
fn both(env: &Env, token: &str) -> String {
    env.repo.write("site/a.txt", format!("{token}\n"));
    env.repo.write("site/b.txt", format!("{token}\n"));
    env.repo.commit(token)
}

/// Reads both files of one resolution of the link: the directory is opened
/// through the link once, the files relative to it (a reader resolving the
/// link per file could legitimately straddle a switch). `None` when the
/// link is not there yet or the tree went away meanwhile.
fn read_pair(link: &Path) -> Option<(Vec<u8>, Vec<u8>)> {
    let dir = rfs::open(link, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).ok()?;
    let read = |name: &str| -> Option<Vec<u8>> {
        let fd = rfs::openat(&dir, name, OFlags::RDONLY, Mode::empty()).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes).ok()?;
        Some(bytes)
    };
    Some((read("a.txt")?, read("b.txt")?))
}

#[test]
fn a_reader_never_sees_two_revisions_mixed_while_many_commits_land() {
    let env = Env::new();
    // Many files besides the two, so each tree takes some building.
    for i in 0..200 {
        env.repo
            .write(&format!("site/other/f{i}"), format!("{i}\n"));
    }
    both(&env, "r0");
    let served = env.serve("", &["--mirror", "--path", "site", "--link", LINK]);
    assert!(served.ready(60), "{}", env.daemon_log());
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, mixed, gone) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let reader = {
        let (stop, reads, mixed, gone, seen) = (
            stop.clone(),
            reads.clone(),
            mixed.clone(),
            gone.clone(),
            seen.clone(),
        );
        let link = env.at(LINK);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match read_pair(&link) {
                    Some((a, b)) => {
                        reads.fetch_add(1, Ordering::Relaxed);
                        if a != b {
                            mixed.fetch_add(1, Ordering::Relaxed);
                            eprintln!("mixed: {a:?} {b:?}");
                        }
                        seen.lock().unwrap().insert(a);
                    }
                    None => {
                        gone.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    let commits = 30;
    for n in 1..=commits {
        let token = format!("r{n}");
        let commit = both(&env, &token);
        served.refresh();
        assert!(
            wait_until(30, || linked(&env).is_some_and(|t| t.ends_with(&commit))),
            "commit {n} not published:\n{}",
            env.daemon_log()
        );
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    let (reads, mixed) = (reads.load(Ordering::Relaxed), mixed.load(Ordering::Relaxed));
    eprintln!(
        "{reads} reads, {} missed, {} revisions seen",
        gone.load(Ordering::Relaxed),
        seen.lock().unwrap().len()
    );
    assert_eq!(mixed, 0, "of {reads} reads, {mixed} mixed two revisions");
    assert!(reads > 1000, "the reader read {reads} times only");
    assert!(
        seen.lock().unwrap().len() > commits / 2,
        "the reader saw too few revisions to have raced the switches"
    );
    assert_eq!(env.read(&format!("{LINK}/a.txt")), format!("r{commits}\n"));
}

#[test]
fn a_one_file_change_makes_one_new_file_the_rest_is_shared() {
    let env = Env::new();
    for i in 0..20 {
        env.repo
            .write(&format!("site/d{}/f{i}", i % 3), format!("{i}\n"));
    }
    let v1 = env.repo.commit("v1");
    let sync = |env: &Env| env.tend(&["sync", "--mirror", "--path", "site", "--link", LINK]);
    let r = sync(&env);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(linked(&env).unwrap(), format!(".tend/revs/{v1}"));
    env.repo.write("site/d1/f7", "seven\n");
    let v2 = env.repo.commit("v2");
    let r = sync(&env);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(linked(&env).unwrap(), format!(".tend/revs/{v2}"));
    let (t1, t2) = (tree_of(&env, &v1), tree_of(&env, &v2));
    let mut new = Vec::new();
    for i in 0..20 {
        let rel = format!("d{}/f{i}", i % 3);
        if ino(&t1.join(&rel)) != ino(&t2.join(&rel)) {
            new.push(rel);
        }
    }
    assert_eq!(new, ["d1/f7"], "only the changed file is a new inode");
    assert_eq!(std::fs::read_to_string(t1.join("d1/f7")).unwrap(), "7\n");
    assert_eq!(
        std::fs::read_to_string(t2.join("d1/f7")).unwrap(),
        "seven\n"
    );
    // A mode change is a new file too: the old tree's copy, sharing the
    // inode until now, keeps its mode.
    let f0 = env.repo.path().join("site/d0/f0");
    std::fs::set_permissions(&f0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let v3 = env.repo.commit("v3");
    let r = sync(&env);
    assert_eq!(r.code, 0, "{r:?}");
    let t3 = tree_of(&env, &v3);
    assert_eq!(util::mode(&t3.join("d0/f0")), 0o755);
    assert_eq!(util::mode(&t2.join("d0/f0")), 0o644);
    assert_ne!(ino(&t2.join("d0/f0")), ino(&t3.join("d0/f0")));
    assert_eq!(ino(&t2.join("d2/f2")), ino(&t3.join("d2/f2")));
    // A file deleted in Git is not in the next tree, nor its empty folder.
    for i in (0..20).filter(|i| i % 3 == 2) {
        env.repo.remove(&format!("site/d2/f{i}"));
    }
    let v4 = env.repo.commit("v4");
    let r = env.tend(&[
        "sync",
        "--mirror",
        "--path",
        "site",
        "--link",
        LINK,
        "--allow-mass-prune",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let t4 = tree_of(&env, &v4);
    assert!(!t4.join("d2").exists());
    assert!(t3.join("d2/f2").exists() || !t3.exists());
    // Converged: another sync writes nothing and makes no tree.
    let before = trees(&env);
    let r = env.tend(&[
        "sync", "--mirror", "--path", "site", "--link", LINK, "-o", "json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["applied"], 0, "{r:?}");
    assert_eq!(trees(&env), before);
}

#[test]
fn link_keep_bounds_the_previous_trees_kept() {
    for keep in [0usize, 2] {
        let env = Env::new();
        let cfg = env.config(&format!(
            "targets:\n  files: {{type: files, root: {}, link: {LINK}, link_keep: {keep}}}\n",
            env.root().display()
        ));
        let mut commits = Vec::new();
        for n in 0..4 {
            commits.push(both(&env, &format!("r{n}")));
            let (cfg, repo) = (cfg.to_str().unwrap(), env.repo.url());
            let state = env.state.path().to_str().unwrap();
            let r = env.raw(&[
                "sync",
                "--mirror",
                "--path",
                "site",
                "-c",
                cfg,
                "--repo",
                &repo,
                "--state-dir",
                state,
            ]);
            assert_eq!(r.code, 0, "{r:?}");
        }
        let mut want: Vec<String> = commits[commits.len() - 1 - keep..].to_vec();
        want.sort();
        assert_eq!(trees(&env), want, "keep {keep}");
        assert_eq!(env.read(&format!("{LINK}/a.txt")), "r3\n");
    }
    // The flag (or TEND_LINK_KEEP) sets it too.
    let env = Env::new();
    for n in 0..3 {
        both(&env, &format!("r{n}"));
        let r = env.tend_with(
            ("TEND_LINK_KEEP", "0"),
            &["sync", "--mirror", "--path", "site", "--link", LINK],
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert_eq!(trees(&env).len(), 1);
}

/// Whether `dir` holds exactly `n` files under `d*/`, all with `token`.
fn complete(dir: &Path, n: usize, token: &str) -> Result<(), String> {
    let mut count = 0;
    for d in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let d = d.map_err(|e| e.to_string())?.path();
        for f in std::fs::read_dir(&d).map_err(|e| e.to_string())? {
            let f = f.map_err(|e| e.to_string())?.path();
            let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            if !text.starts_with(token) {
                return Err(format!("{}: {text:?}, not {token}", f.display()));
            }
            count += 1;
        }
    }
    match count == n {
        true => Ok(()),
        false => Err(format!("{count} files, not {n}")),
    }
}

#[test]
fn kill_9_mid_update_leaves_the_link_on_a_complete_tree_and_restart_converges() {
    let env = Env::new();
    let n = 3000;
    let write = |token: &str| {
        for i in 0..n {
            env.repo
                .write(&format!("site/d{}/f{i}", i % 30), format!("{token} {i}\n"));
        }
        env.repo.commit(token)
    };
    let v1 = write("v1");
    let args = ["--mirror", "--path", "site", "--link", LINK];
    let r = env.tend(&[&["sync"][..], &args].concat());
    assert_eq!(r.code, 0, "{r:?}");
    let v2 = write("v2");
    // Watches the link the whole time: whatever it names is complete.
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (stop, link) = (stop.clone(), env.at(LINK));
        let (v1, v2) = (v1.clone(), v2.clone());
        std::thread::spawn(move || {
            let mut checks = 0;
            while !stop.load(Ordering::Relaxed) {
                let tree = std::fs::read_link(&link).unwrap();
                let token = match tree.to_string_lossy() {
                    t if t.ends_with(&v1) => "v1",
                    t if t.ends_with(&v2) => "v2",
                    t => panic!("the link names {t}"),
                };
                // The tree it named may go (link_keep) while being read;
                // one that is there is complete.
                let real = link.parent().unwrap().join(&tree);
                if let Err(e) = complete(&real, n, token) {
                    assert!(!real.exists(), "{}: {e}", tree.display());
                }
                checks += 1;
            }
            checks
        })
    };
    let mut landed = 0;
    for _ in 0..3 {
        let mut d = env.daemon(&[&["--interval", "1h"][..], &args].concat());
        let staging = env.at(&format!(".tend/revs/.{v2}.tmp"));
        let building = wait_until(60, || {
            std::fs::read_dir(&staging).is_ok_and(|mut e| e.next().is_some())
                || linked(&env).is_some_and(|t| t.ends_with(&v2))
        });
        d.kill9();
        if building && !linked(&env).unwrap().ends_with(&v2) {
            landed += 1;
            break;
        }
    }
    assert!(
        landed >= 1,
        "no kill landed while the new tree was being built"
    );
    assert!(linked(&env).unwrap().ends_with(&v1));
    complete(&tree_of(&env, &v1), n, "v1").unwrap();
    // The next start converges: the unfinished tree is rebuilt, published.
    let mut d = env.daemon(&[&["--interval", "1h"][..], &args].concat());
    assert!(
        wait_until(120, || linked(&env).is_some_and(|t| t.ends_with(&v2))),
        "{}",
        env.daemon_log()
    );
    let _ = d.stop(10);
    stop.store(true, Ordering::Relaxed);
    let checks = checker.join().unwrap();
    assert!(checks > 0);
    complete(&tree_of(&env, &v2), n, "v2").unwrap();
    assert_eq!(trees(&env), {
        let mut t = vec![v1.clone(), v2.clone()];
        t.sort();
        t
    });
    assert!(
        !std::fs::read_dir(env.root())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".tend-")),
        "a temp link was left in the root"
    );
    let r = env.tend(&[&["sync", "-o", "json"][..], &args].concat());
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["applied"], 0, "converged: {r:?}");
}

#[test]
fn a_hand_edit_inside_the_published_tree_is_corrected_in_place() {
    let env = Env::new();
    let v1 = both(&env, "r1");
    let _d = env.daemon(&[
        "--interval",
        "1h",
        "--mirror",
        "--path",
        "site",
        "--link",
        LINK,
    ]);
    assert!(
        wait_until(30, || linked(&env).is_some_and(|t| t.ends_with(&v1))),
        "{}",
        env.daemon_log()
    );
    // An editor's way (a new file renamed over) and an in-place rewrite.
    let a = env.at(&format!("{LINK}/a.txt"));
    let new = env.at(&format!("{LINK}/.a.swp"));
    std::fs::write(&new, "hand\n").unwrap();
    std::fs::rename(&new, &a).unwrap();
    std::fs::write(env.at(&format!("{LINK}/b.txt")), "hand\n").unwrap();
    assert!(
        wait_until(30, || env.read(&format!("{LINK}/a.txt")) == "r1\n"
            && env.read(&format!("{LINK}/b.txt")) == "r1\n"),
        "{}",
        env.daemon_log()
    );
    assert!(
        linked(&env).unwrap().ends_with(&v1),
        "same tree, corrected in place"
    );
    assert_eq!(trees(&env), [v1]);
}

#[test]
fn without_a_link_files_are_written_in_place_as_before() {
    let env = Env::new();
    both(&env, "r1");
    let r = env.tend(&["sync", "--mirror", "--path", "site"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(env.read("a.txt"), "r1\n");
    assert!(!env.at(".tend").exists());
    assert!(!env.at(LINK).exists());
}

#[test]
fn an_edit_in_place_is_corrected_in_a_kept_tree_sharing_the_file_too() {
    let env = Env::new();
    env.repo.write("site/a.txt", "a1\n");
    env.repo.write("site/b.txt", "b1\n");
    let v1 = env.repo.commit("v1");
    let args = ["--mirror", "--path", "site", "--link", LINK];
    let r = env.tend(&[&["sync"][..], &args].concat());
    assert_eq!(r.code, 0, "{r:?}");
    env.repo.write("site/b.txt", "b2\n");
    let v2 = env.repo.commit("v2");
    let mut d = env.daemon(&[&["--interval", "1h"][..], &args].concat());
    assert!(
        wait_until(30, || linked(&env).is_some_and(|t| t.ends_with(&v2))),
        "{}",
        env.daemon_log()
    );
    assert!(wait_until(30, || env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))));
    let (t1, t2) = (tree_of(&env, &v1), tree_of(&env, &v2));
    assert_eq!(ino(&t1.join("a.txt")), ino(&t2.join("a.txt")), "shared");
    let exact = |t: &Path, a: &str, b: &str| {
        util::snapshot_tree(t)
            == [
                (t.join("a.txt"), a.as_bytes().to_vec()),
                (t.join("b.txt"), b.as_bytes().to_vec()),
            ]
    };
    let both_exact = || exact(&t1, "a1\n", "b1\n") && exact(&t2, "a1\n", "b2\n");
    // Rewritten in place through the link (same inode): the watcher's
    // correction mends both trees.
    std::fs::write(env.at(&format!("{LINK}/a.txt")), "hand\n").unwrap();
    assert_eq!(std::fs::read_to_string(t1.join("a.txt")).unwrap(), "hand\n");
    assert!(wait_until(30, both_exact), "{}", env.daemon_log());
    assert!(linked(&env).unwrap().ends_with(&v2));
    assert_eq!(d.stop(20), Some(0), "{}", env.daemon_log());
    // And so does a one-time sync finding such an edit.
    std::fs::write(env.at(&format!("{LINK}/a.txt")), "hand again\n").unwrap();
    let r = env.tend(&[&["sync"][..], &args].concat());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(both_exact(), "{:?}", util::snapshot_tree(&t1));
    assert_eq!(trees(&env), {
        let mut t = vec![v1.clone(), v2.clone()];
        t.sort();
        t
    });
}

/// The sync of the two tests below: mirror mode, a link, two trees kept.
fn sync_kept(env: &Env) {
    let args = [
        "--mirror",
        "--path",
        "site",
        "--link",
        LINK,
        "--link-keep",
        "2",
    ];
    let r = env.tend(&[&["sync"][..], &args].concat());
    assert_eq!(r.code, 0, "{r:?}");
}

/// Two revisions applied as trees sharing `a.txt`, which is then edited
/// in place through the link: the trees, both holding the edit.
fn two_trees_sharing_an_edit(env: &Env) -> (PathBuf, PathBuf) {
    env.repo.write("site/a.txt", "a1\n");
    env.repo.write("site/b.txt", "b1\n");
    let v1 = env.repo.commit("v1");
    sync_kept(env);
    env.repo.write("site/b.txt", "b2\n");
    let v2 = env.repo.commit("v2");
    sync_kept(env);
    let (t1, t2) = (tree_of(env, &v1), tree_of(env, &v2));
    assert_eq!(ino(&t1.join("a.txt")), ino(&t2.join("a.txt")), "shared");
    std::fs::write(env.at(&format!("{LINK}/a.txt")), "hand\n").unwrap();
    assert_eq!(std::fs::read_to_string(t1.join("a.txt")).unwrap(), "hand\n");
    (t1, t2)
}

/// An edit in place that no pass corrected before the next revision's tree
/// is built (a one-time sync, or tend stopped meanwhile): the new tree
/// takes the edited file from the published one, writes it afresh, and
/// every kept tree sharing the edit gets the correction too.
#[test]
fn an_edit_in_place_found_while_building_the_next_tree_is_corrected_in_the_kept_ones() {
    let env = Env::new();
    let (t1, t2) = two_trees_sharing_an_edit(&env);
    let sync = || sync_kept(&env);
    env.repo.write("site/b.txt", "b3\n");
    let v3 = env.repo.commit("v3");
    sync();
    assert!(linked(&env).unwrap().ends_with(&v3));
    let t3 = tree_of(&env, &v3);
    for (t, b) in [(&t1, "b1\n"), (&t2, "b2\n"), (&t3, "b3\n")] {
        assert_eq!(
            util::snapshot_tree(t),
            [
                (t.join("a.txt"), b"a1\n".to_vec()),
                (t.join("b.txt"), b.as_bytes().to_vec()),
            ],
            "{}",
            t.display()
        );
    }
}

/// As above, but the next revision changes the edited file itself: the new
/// tree holds the new content, and each kept tree that shared the edit is
/// given back what its revision declared, not the edit.
#[test]
fn an_edit_in_place_found_while_the_next_revision_changes_that_file_is_undone_in_the_kept_ones() {
    let env = Env::new();
    let (t1, t2) = two_trees_sharing_an_edit(&env);
    let sync = || sync_kept(&env);
    env.repo.write("site/a.txt", "a3\n");
    let v3 = env.repo.commit("v3");
    sync();
    assert!(linked(&env).unwrap().ends_with(&v3));
    let t3 = tree_of(&env, &v3);
    for (t, a, b) in [
        (&t1, "a1\n", "b1\n"),
        (&t2, "a1\n", "b2\n"),
        (&t3, "a3\n", "b2\n"),
    ] {
        assert_eq!(
            util::snapshot_tree(t),
            [
                (t.join("a.txt"), a.as_bytes().to_vec()),
                (t.join("b.txt"), b.as_bytes().to_vec()),
            ],
            "{}",
            t.display()
        );
    }
    // The two kept trees still share one file, as their revisions agree.
    assert_eq!(ino(&t1.join("a.txt")), ino(&t2.join("a.txt")));
}
