//! Reading one revision: walking trees with modes, single entries, blobs and
//! their sizes, reading from other threads, and changed paths.

use std::sync::Arc;

use git2::Oid;

use super::{fetched, oid, TestRepo};
use crate::model::ContentSource;
use crate::source::{EntryMode, SourceError};

/// Files, an executable, a symlink and a submodule, nested.
fn layout() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("README.md", "readme\n");
    repo.write("a.txt", "a\n");
    repo.write("a/b.txt", "ab\n");
    repo.executable("bin/run.sh", "#!/bin/sh\necho run\n");
    repo.write("etc/nginx/nginx.conf", "worker_processes 1;\n");
    repo.write("etc/nginx/sites/default.conf", "server {}\n");
    repo.symlink("etc/current.conf", "nginx/nginx.conf");
    let pinned = repo.commit("layout");
    // A gitlink, as `git submodule add` would record it.
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{pinned},vendor/lib"),
    ]);
    repo.git(&["commit", "-q", "-m", "submodule"]);
    repo
}

#[test]
fn walk_lists_nested_entries_with_modes_sorted_by_path() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    assert_eq!(snap.revision(), commit);
    let listed: Vec<(String, EntryMode)> = snap
        .walk("")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| (e.path, e.mode))
        .collect();
    let expected = [
        ("README.md", EntryMode::File),
        ("a.txt", EntryMode::File),
        ("a/b.txt", EntryMode::File),
        ("bin/run.sh", EntryMode::Executable),
        ("etc/current.conf", EntryMode::Symlink),
        ("etc/nginx/nginx.conf", EntryMode::File),
        ("etc/nginx/sites/default.conf", EntryMode::File),
        ("vendor/lib", EntryMode::Submodule),
    ];
    let expected: Vec<(String, EntryMode)> =
        expected.iter().map(|(p, m)| (p.to_string(), *m)).collect();
    assert_eq!(listed, expected);
    assert_eq!(EntryMode::Executable.file_mode(), Some(0o755));

    let etc: Vec<String> = snap
        .walk("etc/nginx/")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        etc,
        ["etc/nginx/nginx.conf", "etc/nginx/sites/default.conf"]
    );
    assert!(matches!(
        snap.walk("README.md"),
        Err(SourceError::NotADirectory { .. })
    ));
    assert!(matches!(
        snap.walk("nope"),
        Err(SourceError::NotFound { .. })
    ));
    assert!(matches!(
        snap.walk("etc/../.."),
        Err(SourceError::InvalidPath { .. })
    ));
}

#[test]
fn entry_looks_up_without_following_links() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();

    let file = snap.entry("./etc//nginx/nginx.conf").unwrap().unwrap();
    assert_eq!(file.path, "etc/nginx/nginx.conf");
    assert_eq!(file.mode, EntryMode::File);
    assert_eq!(snap.read(file.oid).unwrap(), b"worker_processes 1;\n");
    assert_eq!(file.oid, crate::model::blob_id(b"worker_processes 1;\n"));

    let link = snap.entry("etc/current.conf").unwrap().unwrap();
    assert_eq!(link.mode, EntryMode::Symlink);
    assert_eq!(snap.read(link.oid).unwrap(), b"nginx/nginx.conf");

    assert_eq!(snap.entry("etc/missing.conf").unwrap(), None);
    assert_eq!(snap.entry("README.md/below").unwrap(), None);
    assert!(matches!(
        snap.entry("etc"),
        Err(SourceError::IsDirectory { .. })
    ));
    assert!(matches!(
        snap.entry("etc/../README.md"),
        Err(SourceError::InvalidPath { .. })
    ));
}

#[test]
fn size_comes_from_the_header_and_only_blobs_are_files() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    let script = snap.entry("bin/run.sh").unwrap().unwrap();
    assert_eq!(
        snap.size(script.oid).unwrap(),
        "#!/bin/sh\necho run\n".len() as u64
    );
    let tree = Oid::from_str(&repo.git(&["rev-parse", "HEAD:etc"])).unwrap();
    assert!(
        matches!(snap.size(tree), Err(SourceError::NotABlob { ref kind, .. }) if kind == "tree")
    );
    assert!(
        matches!(snap.read(commit), Err(SourceError::NotABlob { ref kind, .. }) if kind == "commit")
    );
    assert!(snap
        .read(Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap())
        .is_err());
}

#[test]
fn snapshots_and_readers_work_from_other_threads() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    let reader = Arc::new(snap.content_source().unwrap());
    let readme = snap.entry("README.md").unwrap().unwrap().oid;

    let moved = std::thread::spawn(move || snap.walk("").unwrap().entries.len())
        .join()
        .unwrap();
    assert_eq!(moved, 8);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let reader = Arc::clone(&reader);
            std::thread::spawn(move || reader.read(readme).unwrap())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), b"readme\n");
    }
    let missing = reader.read(Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap());
    assert_eq!(missing.unwrap_err().kind(), std::io::ErrorKind::NotFound);
}

/// Targets write what a reader gives without hashing it again: a stored
/// object whose bytes do not hash to its name must be refused by the read.
#[test]
fn a_reader_refuses_an_object_whose_bytes_do_not_hash_to_its_id() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    // A loose object holding "tampered", stored under the id of "expected".
    repo.write("tampered.txt", "tampered\n");
    let real = repo.git(&["hash-object", "-w", "tampered.txt"]);
    let wanted = Oid::hash_object(git2::ObjectType::Blob, b"expected\n").unwrap();
    let loose = |id: &str| {
        let (dir, file) = id.trim().split_at(2);
        (dir.to_string(), file.to_string())
    };
    let (from_dir, from_file) = loose(&real);
    let (to_dir, to_file) = loose(&wanted.to_string());
    let objects = mirror.dir().join("objects").join(&to_dir);
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::copy(
        repo.path()
            .join(".git/objects")
            .join(from_dir)
            .join(from_file),
        objects.join(to_file),
    )
    .unwrap();

    let reader = snap.content_source().unwrap();
    let read = reader.read(wanted);
    assert!(read.is_err(), "read {:?}", read.map(String::from_utf8));
    assert!(snap.read(wanted).is_err());
}

#[test]
fn changed_paths_between_two_commits() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, old) = fetched(state.path(), &repo, None);

    repo.write("etc/nginx/nginx.conf", "worker_processes 4;\n");
    std::fs::remove_file(repo.path().join("a/b.txt")).unwrap();
    repo.write("srv/www/index.html", "<h1>new</h1>\n");
    // The same content, now executable: only the mode changes.
    repo.executable("README.md", "readme\n");
    std::fs::remove_file(repo.path().join("etc/current.conf")).unwrap();
    repo.symlink("etc/current.conf", "nginx/sites/default.conf");
    // Not `add -A`: the submodule has no work tree here and would be dropped.
    repo.git(&["add", "-A", "--", "README.md", "a", "etc", "srv"]);
    repo.git(&["commit", "-q", "-m", "changes"]);
    let new = oid(&repo.head());
    assert_eq!(mirror.fetch().unwrap(), new);

    let snap = mirror.snapshot(new).unwrap();
    let changed = snap.changed_paths(old).unwrap();
    assert_eq!(
        changed,
        [
            "README.md",
            "a/b.txt",
            "etc/current.conf",
            "etc/nginx/nginx.conf",
            "srv/www/index.html"
        ]
    );
    assert!(snap.changed_paths(new).unwrap().is_empty());
    // Backwards gives the same paths.
    assert_eq!(
        mirror.snapshot(old).unwrap().changed_paths(new).unwrap(),
        changed
    );
}

#[test]
fn crafted_tree_entries_that_would_climb_out_are_refused() {
    let repo = TestRepo::new();
    repo.write("ok.txt", "ok\n");
    repo.commit("first");
    // Write a tree holding an entry named `..` straight into the object
    // database, as a hostile repository could; no git command would make one.
    let git = git2::Repository::open(repo.path()).unwrap();
    let blob = git.blob(b"pwned\n").unwrap();
    let mut raw = b"100644 ..\0".to_vec();
    raw.extend_from_slice(blob.as_bytes());
    let bad_tree = git
        .odb()
        .unwrap()
        .write(git2::ObjectType::Tree, &raw)
        .unwrap();
    let mut outer = b"40000 etc\0".to_vec();
    outer.extend_from_slice(bad_tree.as_bytes());
    let root = git
        .odb()
        .unwrap()
        .write(git2::ObjectType::Tree, &outer)
        .unwrap();
    let sig = git2::Signature::now("Test", "test@example.com").unwrap();
    let parent = git.head().unwrap().peel_to_commit().unwrap();
    let tree = git.find_tree(root).unwrap();
    git.commit(Some("HEAD"), &sig, &sig, "hostile", &tree, &[&parent])
        .unwrap();

    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let snap = mirror.snapshot(commit).unwrap();
    // Refused as that one path, escaped; the rest of the tree is read.
    let walk = snap.walk("").unwrap();
    assert_eq!(walk.refused.len(), 1, "{walk:?}");
    assert_eq!(walk.refused[0].path, "etc/\\x2e\\x2e");
    assert!(walk.refused[0].reason.contains("not a valid file name"));
    let paths: Vec<&str> = walk.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(!paths.iter().any(|p| p.contains("..")), "{paths:?}");
}

#[test]
fn changed_paths_list_every_file_of_added_removed_and_retyped_directories() {
    let repo = layout();
    let state = tempfile::tempdir().unwrap();
    let (mirror, old) = fetched(state.path(), &repo, None);
    // etc/nginx goes whole; a.txt becomes a directory; a new tree appears.
    std::fs::remove_dir_all(repo.path().join("etc/nginx")).unwrap();
    std::fs::remove_file(repo.path().join("a.txt")).unwrap();
    repo.write("a.txt/inner", "now a directory\n");
    repo.write("new/deep/x", "x\n");
    repo.git(&["add", "-A", "--", "a.txt", "etc", "new"]);
    repo.git(&["commit", "-q", "-m", "retype"]);
    let new = oid(&repo.head());
    assert_eq!(mirror.fetch().unwrap(), new);
    let changed = mirror.snapshot(new).unwrap().changed_paths(old).unwrap();
    assert_eq!(
        changed,
        [
            "a.txt",
            "a.txt/inner",
            "etc/nginx/nginx.conf",
            "etc/nginx/sites/default.conf",
            "new/deep/x"
        ]
    );
}
