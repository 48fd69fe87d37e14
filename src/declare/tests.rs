//! Declarations read from real Git repositories.

use super::*;
use crate::model::Spec;
use crate::source::{Mirror, SourceSpec};
use crate::test_repo::TestRepo;

pub(super) struct Fixture {
    _state: tempfile::TempDir,
    pub(super) snapshot: Snapshot,
}

pub(super) fn snapshot_of(repo: &TestRepo) -> Fixture {
    let state = tempfile::tempdir().unwrap();
    let spec = SourceSpec {
        repo: repo.url(),
        reference: None,
        timeout: std::time::Duration::from_secs(30),
        auth: Default::default(),
        depth: crate::source::DEFAULT_DEPTH,
    };
    let mirror = Mirror::open(state.path(), spec).unwrap();
    let rev = mirror.fetch().unwrap();
    Fixture {
        snapshot: mirror.snapshot(rev).unwrap(),
        _state: state,
    }
}

fn targets() -> Vec<TargetInfo> {
    vec![TargetInfo {
        name: "files".into(),
        kinds: vec!["file".into(), "symlink".into()],
        kinds_unknown: None,
    }]
}

fn run(repo: &TestRepo, path: &str, mirror: bool) -> Declared {
    let fx = snapshot_of(repo);
    let t = targets();
    let hooks = vec!["reload".to_string()];
    let opts = Options::plain(path, mirror, &t, &hooks);
    declare(&fx.snapshot, &opts).unwrap()
}

fn ids(d: &Declared) -> Vec<&str> {
    d.resources.keys().map(|k| k.as_str()).collect()
}

#[test]
fn kinds_and_sources() {
    let repo = TestRepo::new();
    repo.write("host/app.tend.yaml", "kind: file\npath: etc/app.conf\nsource: app.conf\nmode: \"0600\"\n---\nkind: symlink\npath: etc/link\ntarget_path: app.conf\n---\nkind: directory\npath: srv/www\nsource: ../www/\n")
        .write("host/app.conf", "a=1\n")
        .write("www/index.html", "<p>hi</p>")
        .write("www/css/site.css", "p{}")
        .write("host/notes.yaml", "not: [a declaration")
        .executable("host/run.sh", "#!/bin/sh\n")
        .write("host/exe.tend.yml", "kind: file\npath: bin/run\nsource: run.sh\non_change: reload\n");
    repo.commit("init");
    let d = run(&repo, "host", false);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(
        ids(&d),
        vec![
            "files/file/bin/run",
            "files/file/etc/app.conf",
            "files/file/srv/www/css/site.css",
            "files/file/srv/www/index.html",
            "files/symlink/etc/link"
        ]
    );
    let conf = &d.resources[&ResourceId::new("files", "file", "etc/app.conf")];
    match &conf.spec {
        Spec::File(f) => {
            assert_eq!(f.mode, 0o600);
            assert_eq!(f.blob, crate::model::blob_id(b"a=1\n"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(conf.origin().line, 1);
    let run_sh = &d.resources[&ResourceId::new("files", "file", "bin/run")];
    assert!(matches!(&run_sh.spec, Spec::File(f) if f.mode == 0o755));
    assert_eq!(run_sh.on_change(), Some("reload"));
    let link = &d.resources[&ResourceId::new("files", "symlink", "etc/link")];
    assert_eq!(link.origin().line, 6);
}

#[test]
fn every_problem_is_reported_with_file_and_line() {
    let repo = TestRepo::new();
    repo.write("a.tend.yaml", "kind: file\npath: ok\ncontent: x\n---\nkind: file\npath: ../escape\ncontent: x\n---\nkind: file\npath: b\ncolour: red\n")
        .write("b.tend.yaml", "kind: file\npath: /etc/passwd\ncontent: x\n---\nkind: file\npath: c\nsource: ../../outside\n---\nkind: file\npath: d\ncontent: y\non_change: missing-hook\n")
        .write("c.tend.yaml", "kind: [unclosed\n");
    repo.commit("bad");
    let d = run(&repo, "", false);
    let shown: Vec<String> = d.problems.iter().map(|p| p.to_string()).collect();
    let has = |needle: &str| shown.iter().any(|s| s.contains(needle));
    assert!(has("a.tend.yaml:5:"), "{shown:?}");
    assert!(has("a.tend.yaml:11") && has("colour"), "{shown:?}");
    assert!(has("b.tend.yaml:1:") && has("absolute"), "{shown:?}");
    assert!(
        has("b.tend.yaml:5:") && has("leaves the repository"),
        "{shown:?}"
    );
    assert!(has("b.tend.yaml:9:") && has("missing-hook"), "{shown:?}");
    assert!(has("c.tend.yaml:"), "{shown:?}");
    assert_eq!(ids(&d), vec!["files/file/ok"]);
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "d")));
    assert!(!d.is_complete());
}

/// An invalid document whose kind, target and path are known blocks that
/// identity, so status shows it; one whose path is not known is a problem.
#[test]
fn an_invalid_document_with_a_known_path_blocks_that_identity() {
    let repo = TestRepo::new();
    repo.write("a.tend.yaml", "kind: file\npath: ok\ncontent: x\n---\nkind: file\npath: b\nmode: \"999\"\ncontent: x\n---\nkind: symlink\npath: l\ncontent: x\ntarget_path: ok\n---\nkind: file\ncontent: no path\n---\nkind: file\npath: ok2\ncontent: x\n---\nkind: file\npath: ok2\nmode: \"abc\"\ncontent: y\n");
    repo.commit("bad");
    let d = run(&repo, "", false);
    let reason = |id: &str| {
        let (target, rest) = id.split_once('/').unwrap();
        let (kind, path) = rest.split_once('/').unwrap();
        d.blocked.get(&ResourceId::new(target, kind, path)).cloned()
    };
    assert!(
        reason("files/file/b").unwrap().contains("999"),
        "{:?}",
        d.blocked
    );
    assert!(
        reason("files/symlink/l").unwrap().contains("content"),
        "{:?}",
        d.blocked
    );
    // Declared twice, once invalidly: neither is applied.
    assert!(reason("files/file/ok2").is_some(), "{:?}", d.blocked);
    assert_eq!(ids(&d), vec!["files/file/ok"]);
    assert_eq!(d.blocked.len(), 3, "{:?}", d.blocked);
    assert_eq!(d.problems.len(), 4, "{:?}", d.problems);
}

#[test]
fn a_file_inside_a_declared_file_is_caught_past_sibling_names() {
    let repo = TestRepo::new();
    // `a/b.txt` and `a/b-x` sort between `a/b` and `a/b/c`.
    repo.write(
        "x.tend.yaml",
        "kind: file\npath: a/b\ncontent: one\n---\nkind: file\npath: a/b.txt\ncontent: two\n---\nkind: file\npath: a/b-x\ncontent: three\n---\nkind: file\npath: a/b/c\ncontent: four\n",
    );
    repo.commit("nested");
    let d = run(&repo, "", false);
    assert_eq!(ids(&d), vec!["files/file/a/b-x", "files/file/a/b.txt"]);
    let blocked = &d.blocked[&ResourceId::new("files", "file", "a/b/c")];
    assert!(blocked.contains("lies inside a/b"), "{blocked}");
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "a/b")));
}

#[test]
fn conflicts_block_both_sides() {
    let repo = TestRepo::new();
    repo.write("one.tend.yaml", "kind: file\npath: etc/x\ncontent: one\n---\nkind: file\npath: etc/y\ncontent: fine\n")
        .write("two.tend.yaml", "kind: file\npath: etc/x\ncontent: two\n---\nkind: file\npath: etc/y/inner\ncontent: nested\n");
    repo.commit("conflict");
    let d = run(&repo, "", false);
    assert!(d.resources.is_empty(), "{:?}", ids(&d));
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "etc/x")));
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "etc/y")));
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "etc/y/inner")));
}

#[test]
fn repository_symlinks_stay_inside() {
    let repo = TestRepo::new();
    repo.write("real.conf", "inside\n")
        .symlink("good.conf", "real.conf")
        .symlink("evil.conf", "../../../../etc/passwd")
        .symlink("abs.conf", "/etc/passwd")
        .write("x.tend.yaml", "kind: file\npath: good\nsource: good.conf\n---\nkind: file\npath: evil\nsource: evil.conf\n---\nkind: file\npath: abs\nsource: abs.conf\n");
    repo.commit("links");
    let d = run(&repo, "", false);
    assert_eq!(ids(&d), vec!["files/file/good"]);
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "evil")));
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("files", "file", "abs")));
}

#[test]
fn lfs_pointers_and_oversized_files_are_refused() {
    let repo = TestRepo::new();
    repo.write("big.bin", vec![b'x'; 4096])
        .write(
            ".gitattributes",
            "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        )
        .write("lfs.bin", LFS_TEXT)
        .write(
            "x.tend.yaml",
            "kind: file\npath: big\nsource: big.bin\n---\nkind: file\npath: lfs\nsource: lfs.bin\n",
        );
    repo.commit("content");
    let d = run(&repo, "", false);
    assert!(d.resources.is_empty());
    assert!(d.blocked[&ResourceId::new("files", "file", "big")].contains("limit"));
    assert!(d.blocked[&ResourceId::new("files", "file", "lfs")].contains("LFS"));
}

const LFS_TEXT: &str = "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n";

#[test]
fn pointer_text_without_lfs_attributes_is_plain_content() {
    let repo = TestRepo::new();
    repo.write(".gitattributes", "*.txt text eol=lf\n")
        .write("docs/lfs-example.txt", LFS_TEXT)
        .write(
            "lfs/.gitattributes",
            "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        )
        .write("lfs/real.bin", LFS_TEXT)
        .write("other/real.bin", LFS_TEXT);
    repo.commit("pointer-looking text");
    let d = run(&repo, "", true);
    let file = |p: &str| ResourceId::new("files", "file", p);
    let Spec::File(f) = &d.resources[&file("docs/lfs-example.txt")].spec else {
        panic!("a file spec");
    };
    assert_eq!(f.blob, crate::model::blob_id(LFS_TEXT.as_bytes()));
    assert_eq!(f.size, LFS_TEXT.len() as u64);
    // Attributes apply only at and below their own directory.
    assert!(d.resources.contains_key(&file("other/real.bin")));
    assert!(d.blocked[&file("lfs/real.bin")].contains("LFS"));
    // A pointer is refused at its own path: no declaration problem, so
    // pruning goes on.
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

#[test]
fn lfs_attributes_in_a_parent_of_the_source_path_still_apply() {
    let repo = TestRepo::new();
    repo.write(".gitattributes", "*.bin filter=lfs\n")
        .write("site/a.bin", LFS_TEXT)
        .write("site/b.txt", "plain");
    repo.commit("lfs above the source path");
    let d = run(&repo, "site", true);
    assert_eq!(ids(&d), vec!["files/file/b.txt"]);
    assert!(d.blocked[&ResourceId::new("files", "file", "a.bin")].contains("LFS"));
}

#[test]
fn mirror_mode_maps_every_file() {
    let repo = TestRepo::new();
    repo.write("site/index.html", "x")
        .write("site/a/b.txt", "y")
        .write("site/x.tend.yaml", "kind: nonsense")
        .write("other/z", "z");
    repo.commit("site");
    let d = run(&repo, "site", true);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(
        ids(&d),
        vec![
            "files/file/a/b.txt",
            "files/file/index.html",
            "files/file/x.tend.yaml"
        ]
    );
}

#[test]
fn decrypt_is_age_on_a_file_with_a_source_and_never_writes_the_ciphertext() {
    let repo = TestRepo::new();
    repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\nsource: a.age\ndecrypt: age\n---\nkind: file\npath: etc/b\ncontent: x\ndecrypt: age\n---\nkind: file\npath: etc/c\nsource: a.age\ndecrypt: gpg\n---\nkind: file\npath: etc/d\nsource: a.age\ndecrypt: age\nsensitive: false\n---\nkind: symlink\npath: etc/e\ntarget_path: a\ndecrypt: age\n",
    )
    .write("a.age", "not an age file\n");
    repo.commit("init");
    let d = run(&repo, "", false);
    assert!(d.resources.is_empty(), "{:?}", d.resources);
    let reason = |id: &str| d.blocked.get(id).cloned().unwrap_or_default();
    assert!(
        reason("files/file/etc/a").contains("a.age is not a usable age file"),
        "{:?}",
        d.blocked
    );
    assert!(reason("files/file/etc/b").contains("needs `source:`"));
    assert!(reason("files/file/etc/c").contains("decrypt: \"gpg\" is not known"));
    assert!(reason("files/file/etc/d").contains("always sensitive"));
    assert!(reason("files/symlink/etc/e").contains("`decrypt` does not apply to kind symlink"));
    assert!(d.secrets.is_empty());
}
