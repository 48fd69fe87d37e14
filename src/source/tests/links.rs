//! Following repository symlinks: inside the repository they resolve like a
//! checkout would; anything that leads out of it is refused, including
//! links aimed at a sentinel file right beside the repository.

use tempfile::TempDir;

use super::{fetched, TestRepo};
use crate::source::{EntryMode, Snapshot, SourceError};

fn linked() -> (TestRepo, TempDir, Snapshot) {
    let repo = TestRepo::new();
    // The sentinel sits next to the repository's work tree, where a
    // filesystem-level `..` would find it.
    std::fs::create_dir_all(repo.outside().join("sentinel")).unwrap();
    std::fs::write(repo.outside().join("sentinel/secret"), "SENTINEL\n").unwrap();
    let sentinel = repo.outside().join("sentinel/secret");

    repo.write("conf/v1.conf", "v1\n");
    repo.write("conf/v2.conf", "v2\n");
    repo.symlink("conf/current", "v2.conf");
    repo.write("releases/r1/app.conf", "r1\n");
    repo.write("releases/r2/app.conf", "r2\n");
    repo.symlink("live", "releases/r2");
    repo.symlink("a", "b");
    repo.symlink("b", "./conf//current");
    repo.write("shared/x", "shared\n");
    repo.symlink("conf/up", "../shared/x");
    repo.symlink("deep/inner", "../releases");
    repo.symlink("conf/root", "..");
    repo.symlink("evil", "../../etc/passwd");
    repo.symlink("peek", "../sentinel/secret");
    repo.symlink("conf/deep-peek", "../../sentinel/secret");
    repo.symlink("abs", "/etc/passwd");
    repo.symlink("abs-sentinel", sentinel.to_str().unwrap());
    repo.symlink("up", "..");
    repo.symlink("loop1", "loop2");
    repo.symlink("loop2", "loop1");
    repo.symlink("dangling", "nowhere.conf");
    for i in 0..40 {
        let next = if i == 39 {
            "conf/v1.conf".to_string()
        } else {
            format!("l{}", i + 1)
        };
        repo.symlink(&format!("l{i}"), &next);
    }
    repo.symlink("l-one-more", "l0");
    repo.commit("links");
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    (repo, state, snap)
}

fn resolved(snap: &Snapshot, path: &str) -> (String, Vec<u8>) {
    let entry = snap.resolve(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(matches!(
        entry.mode,
        EntryMode::File | EntryMode::Executable
    ));
    let bytes = snap.read(entry.oid).unwrap();
    (entry.path, bytes)
}

#[test]
fn links_inside_the_repository_resolve_like_a_checkout() {
    let (_repo, _state, snap) = linked();
    assert_eq!(
        resolved(&snap, "conf/v1.conf"),
        ("conf/v1.conf".into(), b"v1\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "conf/current"),
        ("conf/v2.conf".into(), b"v2\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "live/app.conf"),
        ("releases/r2/app.conf".into(), b"r2\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "a"),
        ("conf/v2.conf".into(), b"v2\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "conf/up"),
        ("shared/x".into(), b"shared\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "deep/inner/r1/app.conf"),
        ("releases/r1/app.conf".into(), b"r1\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "conf/root/conf/v1.conf"),
        ("conf/v1.conf".into(), b"v1\n".to_vec())
    );
    assert_eq!(
        resolved(&snap, "conf/../shared/x"),
        ("shared/x".into(), b"shared\n".to_vec())
    );
    // `..` after a linked directory is the target's parent, as on Linux.
    assert_eq!(
        resolved(&snap, "live/../r1/app.conf"),
        ("releases/r1/app.conf".into(), b"r1\n".to_vec())
    );
    // Exactly 40 links is allowed.
    assert_eq!(resolved(&snap, "l0").0, "conf/v1.conf");
}

fn escapes(snap: &Snapshot, path: &str) -> (Option<String>, String, String) {
    match snap.resolve(path) {
        Err(err @ SourceError::Escapes { .. }) => {
            let shown = err.to_string();
            let SourceError::Escapes { link, target, .. } = err else {
                unreachable!()
            };
            assert!(shown.contains(path), "{shown}");
            (link, target, shown)
        }
        other => panic!("{path}: expected an escape, got {other:?}"),
    }
}

#[test]
fn links_out_of_the_repository_are_refused_naming_the_link() {
    let (_repo, _state, snap) = linked();
    let (link, target, shown) = escapes(&snap, "evil");
    assert_eq!(
        (link.as_deref(), target.as_str()),
        (Some("evil"), "../../etc/passwd")
    );
    assert!(
        shown.contains("evil") && shown.contains("../../etc/passwd"),
        "{shown}"
    );

    for (path, via) in [
        ("peek", "peek"),
        ("conf/deep-peek", "conf/deep-peek"),
        ("abs", "abs"),
        ("abs-sentinel", "abs-sentinel"),
        ("up/sentinel/secret", "up"),
    ] {
        let (link, _, shown) = escapes(&snap, path);
        assert_eq!(link.as_deref(), Some(via), "{path}");
        assert!(!shown.contains("SENTINEL"));
    }
    // `..` in the path itself, and absolute paths, leave without any link.
    assert_eq!(escapes(&snap, "../sentinel/secret").0, None);
    assert_eq!(escapes(&snap, "conf/../../sentinel/secret").0, None);
    // After a link to the root, the climb is the path's own `..`.
    assert_eq!(escapes(&snap, "conf/root/../sentinel/secret").0, None);
    assert_eq!(escapes(&snap, "live/../../../sentinel/secret").0, None);
    assert_eq!(escapes(&snap, "/etc/passwd").0, None);
}

#[test]
fn broken_links_and_odd_paths_are_clear_errors() {
    let (_repo, _state, snap) = linked();
    assert!(matches!(
        snap.resolve("dangling"),
        Err(SourceError::NotFound { .. })
    ));
    assert!(matches!(
        snap.resolve("conf/missing"),
        Err(SourceError::NotFound { .. })
    ));
    assert!(matches!(
        snap.resolve("loop1"),
        Err(SourceError::TooManyLinks { .. })
    ));
    assert!(matches!(
        snap.resolve("l-one-more"),
        Err(SourceError::TooManyLinks { .. })
    ));
    assert!(matches!(
        snap.resolve("live"),
        Err(SourceError::IsDirectory { .. })
    ));
    assert!(matches!(
        snap.resolve(""),
        Err(SourceError::IsDirectory { .. })
    ));
    assert!(matches!(
        snap.resolve("conf/v1.conf/x"),
        Err(SourceError::NotADirectory { .. })
    ));
    assert!(matches!(
        snap.resolve("conf/v1\0"),
        Err(SourceError::InvalidPath { .. })
    ));
}

#[test]
fn a_link_is_inside_a_directory_only_when_its_whole_way_stays_there() {
    let (_repo, _state, snap) = linked();
    let inside = |path: &str, within: &str| {
        let entry = snap.entry(path).unwrap().expect("a link");
        snap.link_inside(&entry, within).unwrap()
    };
    // To a file, a directory, nothing: the link itself is kept.
    assert_eq!(inside("conf/current", "conf").as_deref(), Some("v2.conf"));
    assert_eq!(inside("live", "").as_deref(), Some("releases/r2"));
    assert_eq!(inside("dangling", "").as_deref(), Some("nowhere.conf"));
    // Through another link that stays inside.
    assert_eq!(inside("a", "").as_deref(), Some("b"));
    // Out of the directory, though inside the repository: not a link there.
    assert_eq!(inside("conf/up", "conf"), None);
    assert_eq!(inside("conf/root", "conf"), None);
    assert_eq!(inside("deep/inner", "deep"), None);
    // Out of the repository, absolute, or through a link that leaves.
    for link in ["evil", "peek", "abs", "abs-sentinel", "up"] {
        assert_eq!(inside(link, ""), None, "{link}");
    }
    // A loop is refused, not followed forever.
    let entry = snap.entry("loop1").unwrap().unwrap();
    assert!(matches!(
        snap.link_inside(&entry, ""),
        Err(SourceError::TooManyLinks { .. })
    ));
}
