//! A declaration patched from the previous revision equals a whole read.

use super::*;
use crate::source::{Mirror, SourceSpec};
use crate::test_repo::TestRepo;

fn targets() -> Vec<TargetInfo> {
    vec![TargetInfo {
        name: "files".into(),
        kinds: vec!["file".into(), "symlink".into()],
        kinds_unknown: None,
    }]
}

/// A mirror of `repo` in a fresh state dir, which lives as long as it.
fn mirror_of(repo: &TestRepo) -> (tempfile::TempDir, Mirror) {
    let state = tempfile::tempdir().unwrap();
    let spec = SourceSpec {
        repo: repo.url(),
        reference: None,
        timeout: std::time::Duration::from_secs(30),
        auth: Default::default(),
        depth: crate::source::DEFAULT_DEPTH,
    };
    let mirror = Mirror::open(state.path(), spec).unwrap();
    (state, mirror)
}

/// Reads the repository's head after each step whole, and patched from the
/// step before; both must agree. Returns, per step, the touched identities
/// and the identities blocked.
fn steps(
    repo: &TestRepo,
    path: &str,
    changes: &[&dyn Fn(&TestRepo)],
) -> Vec<(Vec<String>, Vec<String>)> {
    let (_state, mirror) = mirror_of(repo);
    let t = targets();
    let hooks = Vec::new();
    let opts = Options::plain(path, true, &t, &hooks);
    let mut old = mirror.fetch().unwrap();
    let mut declared = declare(&mirror.snapshot(old).unwrap(), &opts).unwrap();
    let mut touched = Vec::new();
    for (i, change) in changes.iter().enumerate() {
        change(repo);
        repo.commit(&format!("step {i}"));
        let new = mirror.fetch().unwrap();
        let snap = mirror.snapshot(new).unwrap();
        let changed = snap.changed_paths(old).unwrap();
        let update = update(&declared, &snap, &opts, &changed)
            .unwrap()
            .unwrap_or_else(|| panic!("step {i} is not patched"));
        let ids = update.touched.iter().map(|id| id.to_string()).collect();
        let patched = update.apply(declared);
        let whole = declare(&snap, &opts).unwrap();
        touched.push((ids, whole.blocked.keys().map(|id| id.to_string()).collect()));
        assert_eq!(patched, whole, "step {i}");
        declared = whole;
        old = new;
    }
    touched
}

#[test]
fn patched_mirror_equals_a_whole_read() {
    let repo = TestRepo::new();
    repo.write("conf/a.txt", "a")
        .write("conf/b.txt", "b")
        .write("conf/sub/c.txt", "c")
        .write("conf/big.bin", vec![b'x'; 2048])
        .write("outside.txt", "o")
        // Outside the source path, yet it routes conf's .bin files via LFS.
        .write(
            ".gitattributes",
            "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        )
        .symlink("conf/link", "sub/c.txt");
    repo.commit("init");
    let steps = steps(
        &repo,
        "conf",
        &[
            // One changed file; a file outside the source path.
            &|r| {
                r.write("conf/a.txt", "a2").write("outside.txt", "o2");
            },
            // The symlink's target changes: the symlink follows.
            &|r| {
                r.write("conf/sub/c.txt", "c2");
            },
            // Removed, added, made executable, over the size limit.
            &|r| {
                r.remove("conf/b.txt")
                    .write("conf/new/d.txt", "d")
                    .executable("conf/a.txt", "a3")
                    .write("conf/sub/c.txt", vec![b'y'; 4096]);
            },
            // A file replaced by a directory of the same name.
            &|r| {
                r.remove("conf/new").write("conf/new", "now a file");
            },
            // An LFS pointer, then fixed.
            &|r| {
                r.write(
                    "conf/lfs.bin",
                    "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
                );
            },
            &|r| {
                r.write("conf/lfs.bin", "plain");
            },
        ],
    );
    let touched: Vec<&Vec<String>> = steps.iter().map(|(t, _)| t).collect();
    assert_eq!(
        touched[0],
        &["files/file/a.txt", "files/file/link"],
        "only the changed file and the symlink are read again"
    );
    assert!(touched[2].contains(&"files/file/b.txt".to_string()));
    assert!(touched[2].contains(&"files/file/new/d.txt".to_string()));
    let lfs = "files/file/lfs.bin".to_string();
    assert!(touched[4].contains(&lfs), "the pointer is read again");
    assert!(
        steps[4].1.contains(&lfs),
        "and refused, as the whole read refuses it: {:?}",
        steps[4].1
    );
    assert!(!steps[5].1.contains(&lfs), "once fixed, it is applied");
}

#[test]
fn changes_it_cannot_patch_are_read_whole() {
    let repo = TestRepo::new();
    repo.write("conf/a.txt", "a").write("x.tend.yaml", "");
    repo.commit("init");
    let (_state, mirror) = mirror_of(&repo);
    let t = targets();
    let hooks = Vec::new();
    let opts = |source_path, mirror| Options::plain(source_path, mirror, &t, &hooks);
    let old = mirror.fetch().unwrap();
    let before = declare(&mirror.snapshot(old).unwrap(), &opts("conf", true)).unwrap();
    repo.write("conf/a.txt", "b");
    repo.commit("change");
    let snap = mirror.snapshot(mirror.fetch().unwrap()).unwrap();
    let changed = snap.changed_paths(old).unwrap();
    // Declaration files are read whole.
    assert!(update(&before, &snap, &opts("", false), &changed)
        .unwrap()
        .is_none());
    // A source path not in canonical form cannot be compared by prefix.
    assert!(update(&before, &snap, &opts("./conf/", true), &changed)
        .unwrap()
        .is_none());
    // The source path itself changed.
    let changed = vec!["conf".to_string()];
    assert!(update(&before, &snap, &opts("conf", true), &changed)
        .unwrap()
        .is_none());
    // Attributes anywhere decide where LFS pointers are refused.
    for path in [".gitattributes", "conf/sub/.gitattributes"] {
        let changed = vec![path.to_string()];
        assert!(
            update(&before, &snap, &opts("conf", true), &changed)
                .unwrap()
                .is_none(),
            "{path}"
        );
    }
    let changed = vec!["conf/.gitattributes.bak".to_string()];
    assert!(update(&before, &snap, &opts("conf", true), &changed)
        .unwrap()
        .is_some());
}
