//! The mirror's collection against a real repository: loose objects (a
//! local source's, linked into the mirror) that no ref reaches go once old,
//! those of a revision the caller keeps stay, and a collection out of time
//! removes nothing and is not marked done; a pack holding garbage is
//! rewritten with only what it keeps.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{fetched, oid, TestRepo};
use crate::source::GcSpec;

fn holds(mirror: &Path, id: &str) -> bool {
    let repo = git2::Repository::open_bare(mirror).unwrap();
    let found = repo.odb().unwrap().exists(oid(id));
    found
}

fn backdate(mirror: &Path) {
    let ok = Command::new("find")
        .arg(mirror.join("objects"))
        .args([
            "-type",
            "f",
            "-exec",
            "touch",
            "-d",
            "3 days ago",
            "{}",
            "+",
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn unreachable_loose_objects_go_once_old_and_kept_revisions_stay() {
    let repo = TestRepo::new();
    repo.write("a.txt", "base\n");
    let base = repo.commit("base");
    let state = tempfile::tempdir().unwrap();
    let (mirror, _) = fetched(state.path(), &repo, None);
    let side = |name: &str| {
        repo.git(&["reset", "-q", "--hard", &base]);
        repo.write(name, format!("only in {name}\n"));
        let commit = repo.commit(name);
        let blob = repo.git(&["rev-parse", &format!("HEAD:{name}")]);
        assert_eq!(mirror.fetch().unwrap(), oid(&commit));
        (commit, blob)
    };
    let (kept, kept_blob) = side("kept.txt");
    let (gone, gone_blob) = side("gone.txt");
    let (tip, _) = side("tip.txt");
    let dir = mirror.dir().to_path_buf();
    assert!(holds(&dir, &gone_blob));
    let spec = GcSpec {
        interval: Duration::ZERO,
        grace: Duration::from_secs(24 * 3600),
        budget: Duration::from_secs(60),
    };

    // Young: nothing unreachable goes.
    let young = mirror.collect_garbage(&[oid(&kept)], &spec).unwrap();
    assert!(young.finished);
    assert_eq!(young.loose, 0, "{young:?}");
    assert!(holds(&dir, &gone_blob));

    backdate(&dir);
    std::fs::remove_file(dir.join("tend-gc-done")).unwrap();
    // Out of time before the walk ends: nothing goes, nothing is marked.
    let short = GcSpec {
        budget: Duration::ZERO,
        ..spec
    };
    let stopped = mirror.collect_garbage(&[oid(&kept)], &short).unwrap();
    assert!(!stopped.finished);
    assert!(holds(&dir, &gone_blob));
    assert!(!dir.join("tend-gc-done").exists());

    let done = mirror.collect_garbage(&[oid(&kept)], &spec).unwrap();
    assert!(done.finished, "{done:?}");
    assert!(done.loose >= 3, "commit, tree and blob of gone: {done:?}");
    assert!(!holds(&dir, &gone_blob));
    assert!(!holds(&dir, &gone));
    for id in [&kept, &kept_blob, &base, &tip] {
        assert!(holds(&dir, id), "{id} went");
    }
    assert!(!mirror.gc_due(Duration::from_secs(3600)));
    assert!(mirror.gc_due(Duration::ZERO));
    // The mirror still reads its branch.
    let snap = mirror.snapshot(oid(&tip)).unwrap();
    drop(snap);
    assert_eq!(mirror.fetch().unwrap(), oid(&tip));
}

#[test]
fn a_pack_holding_garbage_is_rewritten_with_what_it_keeps() {
    let repo = TestRepo::new();
    repo.write("a.txt", "base\n");
    let base = repo.commit("base");
    let state = tempfile::tempdir().unwrap();
    let (mirror, _) = fetched(state.path(), &repo, None);
    repo.write("gone.txt", "force-pushed away\n");
    let gone = repo.commit("gone");
    let gone_blob = repo.git(&["rev-parse", "HEAD:gone.txt"]);
    mirror.fetch().unwrap();
    repo.git(&["reset", "-q", "--hard", &base]);
    repo.write("tip.txt", "tip\n");
    let tip = repo.commit("tip");
    assert_eq!(mirror.fetch().unwrap(), oid(&tip));
    let dir = mirror.dir().to_path_buf();
    // Everything, unreachable too, in one pack.
    let packed = Command::new("sh")
        .arg("-c")
        .arg(
            "git cat-file --batch-all-objects --batch-check='%(objectname)' \
             | git pack-objects -q objects/pack/pack >/dev/null && git prune-packed",
        )
        .env("GIT_DIR", &dir)
        .current_dir(&dir)
        .status()
        .unwrap()
        .success();
    assert!(packed);
    let pack_dir = dir.join("objects/pack");
    let packs = || {
        std::fs::read_dir(&pack_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    let before = packs();
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(holds(&dir, &gone_blob));
    backdate(&dir);

    let spec = GcSpec {
        interval: Duration::ZERO,
        grace: Duration::from_secs(3600),
        budget: Duration::from_secs(60),
    };
    let done = mirror.collect_garbage(&[], &spec).unwrap();
    assert!(done.finished, "{done:?}");
    assert_eq!((done.packs, done.packed), (1, 3), "{done:?}");
    let after = packs();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
    assert!(!holds(&dir, &gone_blob));
    assert!(!holds(&dir, &gone));
    for id in [&base, &tip] {
        assert!(holds(&dir, id), "{id} went");
    }
    let snap = mirror.snapshot(oid(&tip)).unwrap();
    let entry = snap.entry("tip.txt").unwrap().unwrap();
    assert_eq!(snap.read(entry.oid).unwrap(), b"tip\n");
}
