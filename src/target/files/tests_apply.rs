//! Apply on real directories: creates, minimal updates, no-ops, backups,
//! wrong types in the way, and deletes.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::testkit::*;
use crate::model::{blob_id, Action, Field, Live, Observed, Spec};
use crate::target::{Target, TargetError};

fn mode_of(path: &std::path::Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn create_makes_parents_and_a_second_apply_writes_nothing() {
    let sb = Sandbox::new();
    let t = sb.target();
    let spec = Spec::File(file_spec(b"server {}\n", 0o640));
    let c = change("etc/nginx/nginx.conf", Action::Create, Some(spec), vec![]);
    let content = MapContent::of(&[b"server {}\n"]);
    let backup = RecordingBackup::default();

    let first = t.apply(&c, &content, &backup).unwrap();
    assert!(
        first.writes >= 4,
        "two mkdirs, chmod and rename at least: {first:?}"
    );
    assert_eq!(
        fs::read(sb.at("etc/nginx/nginx.conf")).unwrap(),
        b"server {}\n"
    );
    assert_eq!(mode_of(&sb.at("etc/nginx/nginx.conf")), 0o640);
    assert_eq!(mode_of(&sb.at("etc/nginx")), 0o755);
    let before = identity(&sb.at("etc/nginx/nginx.conf"));

    let again = t.apply(&c, &content, &backup).unwrap();
    assert_eq!(again.writes, 0);
    assert_eq!(
        identity(&sb.at("etc/nginx/nginx.conf")),
        before,
        "same inode, mtime and ctime"
    );
    assert_eq!(backup.count(), 0);
    assert_eq!(t.writes_total(), first.writes);
    assert_eq!(
        fs::read_dir(sb.at("etc/nginx")).unwrap().count(),
        1,
        "no temp file left behind"
    );
    match observe(&t, "etc/nginx/nginx.conf") {
        Observed::Present(Live::File {
            blob, size, mode, ..
        }) => {
            assert_eq!((blob, size, mode), (blob_id(b"server {}\n"), 10, 0o640));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn content_update_backs_up_old_bytes_before_the_file_changes() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "app.conf", b"old", 0o644).unwrap();
    let old_inode = identity(&sb.at("app.conf")).0;
    let spec = Spec::File(file_spec(b"new content", 0o644));
    let c = change("app.conf", Action::Update, Some(spec), vec![Field::Content]);
    let backup = RecordingBackup::watching(sb.at("app.conf"));

    let applied = t
        .apply(&c, &MapContent::of(&[b"new content"]), &backup)
        .unwrap();

    let saved = backup.saved.lock().unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].bytes, b"old");
    assert_eq!(saved[0].id.as_str(), "files/file/app.conf");
    assert_eq!(
        saved[0].watched_then.as_deref(),
        Some(&b"old"[..]),
        "backup taken before the rename"
    );
    assert_eq!(applied.backups, vec!["backup-1".to_string()]);
    assert_eq!(fs::read(sb.at("app.conf")).unwrap(), b"new content");
    assert_ne!(
        identity(&sb.at("app.conf")).0,
        old_inode,
        "content is replaced by rename"
    );
}

#[test]
fn mode_only_change_is_a_chmod_on_the_same_inode() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "key", b"secret", 0o644).unwrap();
    let (inode, mtime, _) = identity(&sb.at("key"));
    let spec = Spec::File(file_spec(b"secret", 0o600));
    let c = change(
        "key",
        Action::Update,
        Some(spec),
        vec![Field::Mode {
            from: 0o644,
            to: 0o600,
        }],
    );
    let backup = RecordingBackup::default();

    let applied = t.apply(&c, &MapContent::default(), &backup).unwrap();

    assert_eq!(applied.writes, 1);
    assert_eq!(mode_of(&sb.at("key")), 0o600);
    assert_eq!(identity(&sb.at("key")).0, inode);
    assert_eq!(identity(&sb.at("key")).1, mtime);
    assert_eq!(backup.count(), 0, "a chmod overwrites no content");
    assert_eq!(
        t.apply(&c, &MapContent::default(), &backup).unwrap().writes,
        0
    );
}

#[test]
fn owner_change_is_a_chown_in_place_and_keeps_setuid() {
    if !crate::test_gate::can_run(is_root(), "chown to another user needs root") {
        return;
    }
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "bin/tool", b"#!/bin/sh\n", 0o4755).unwrap();
    let inode = identity(&sb.at("bin/tool")).0;
    let mut spec = file_spec(b"#!/bin/sh\n", 0o4755);
    spec.uid = Some(4321).into();
    let c = change(
        "bin/tool",
        Action::Update,
        Some(Spec::File(spec)),
        vec![Field::Owner { from: 0, to: 4321 }],
    );

    t.apply(&c, &MapContent::default(), &RecordingBackup::default())
        .unwrap();

    let meta = fs::symlink_metadata(sb.at("bin/tool")).unwrap();
    assert_eq!((meta.uid(), meta.ino()), (4321, inode));
    assert_eq!(
        meta.mode() & 0o7777,
        0o4755,
        "chown cleared setuid; the mode was restored"
    );
}

#[test]
fn rewrite_keeps_an_undeclared_owner() {
    if !crate::test_gate::can_run(is_root(), "chown to another user needs root") {
        return;
    }
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "data", b"one", 0o644).unwrap();
    std::os::unix::fs::lchown(sb.at("data"), Some(1111), Some(2222)).unwrap();
    let c = change(
        "data",
        Action::Update,
        Some(Spec::File(file_spec(b"two", 0o644))),
        vec![Field::Content],
    );
    t.apply(&c, &MapContent::of(&[b"two"]), &RecordingBackup::default())
        .unwrap();
    let meta = fs::symlink_metadata(sb.at("data")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1111, 2222));
    assert_eq!(fs::read(sb.at("data")).unwrap(), b"two");
}

#[test]
fn a_non_empty_directory_in_the_way_loses_nothing() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir_all(sb.at("conf/d")).unwrap();
    fs::write(sb.at("conf/d/precious"), b"human work").unwrap();
    let c = change(
        "conf",
        Action::Create,
        Some(Spec::File(file_spec(b"x", 0o644))),
        vec![],
    );

    let err = t
        .apply(&c, &MapContent::of(&[b"x"]), &RecordingBackup::default())
        .unwrap_err();

    assert!(
        matches!(&err, TargetError::Transient(r) if r.contains("unmanaged")),
        "{err:?}"
    );
    assert_eq!(fs::read(sb.at("conf/d/precious")).unwrap(), b"human work");
    assert_eq!(
        fs::read_dir(sb.at("")).unwrap().count(),
        1,
        "no temp file left in the root"
    );
    assert_eq!(t.writes_total(), 0);
}

#[test]
fn an_empty_directory_or_a_symlink_in_the_way_is_replaced() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir(sb.at("empty")).unwrap();
    std::os::unix::fs::symlink("elsewhere", sb.at("link")).unwrap();
    put(&t, "empty", b"now a file", 0o644).unwrap();
    put(&t, "link", b"also a file", 0o644).unwrap();
    assert_eq!(fs::read(sb.at("empty")).unwrap(), b"now a file");
    assert_eq!(fs::read(sb.at("link")).unwrap(), b"also a file");
    assert!(fs::symlink_metadata(sb.at("link")).unwrap().is_file());
}

#[test]
fn a_file_in_a_parent_position_is_backed_up_and_a_dangling_symlink_left_alone() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("etc"), b"was a file").unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", sb.at("var")).unwrap();
    let backup = RecordingBackup::default();
    let c = change(
        "etc/app.conf",
        Action::Create,
        Some(Spec::File(file_spec(b"a", 0o644))),
        vec![],
    );
    let applied = t.apply(&c, &MapContent::of(&[b"a"]), &backup).unwrap();
    assert_eq!(backup.bytes(), vec![b"was a file".to_vec()]);
    assert_eq!(applied.backups.len(), 1);
    assert_eq!(fs::read(sb.at("etc/app.conf")).unwrap(), b"a");

    // The link is the operator's: the write fails (retried later), nothing
    // is made, and the link stays until someone settles where it leads.
    let err = put(&t, "var/log/x", b"b", 0o644).unwrap_err();
    assert!(
        matches!(&err, TargetError::Transient(m) if m.contains("/nowhere/at/all")),
        "{err:?}"
    );
    assert!(fs::symlink_metadata(sb.at("var")).unwrap().is_symlink());
    assert!(!sb.at("nowhere").exists());
    fs::create_dir_all(sb.at("nowhere/at/all")).unwrap();
    put(&t, "var/log/x", b"b", 0o644).unwrap();
    assert_eq!(fs::read(sb.at("nowhere/at/all/log/x")).unwrap(), b"b");

    // A link to a file is not followed to replace that file.
    fs::write(sb.at("plain"), b"plain file").unwrap();
    std::os::unix::fs::symlink("plain", sb.at("opt")).unwrap();
    let backup = RecordingBackup::default();
    let c = change(
        "opt/tool.conf",
        Action::Create,
        Some(Spec::File(file_spec(b"c", 0o644))),
        vec![],
    );
    assert!(t.apply(&c, &MapContent::of(&[b"c"]), &backup).is_err());
    assert_eq!(backup.count(), 0);
    assert_eq!(fs::read(sb.at("plain")).unwrap(), b"plain file");
}

#[test]
fn symlinks_are_created_and_retargeted_by_rename() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "sites/default", b"plain file", 0o644).unwrap();
    let link = |to: &str| Some(Spec::Symlink { target: to.into() });
    let backup = RecordingBackup::default();
    let c = change(
        "sites/default",
        Action::Update,
        link("../available/default"),
        vec![Field::Type {
            from: "file".into(),
            to: "symlink".into(),
        }],
    );
    t.apply(&c, &MapContent::default(), &backup).unwrap();
    assert_eq!(
        fs::read_link(sb.at("sites/default")).unwrap().to_str(),
        Some("../available/default")
    );
    assert_eq!(backup.bytes(), vec![b"plain file".to_vec()]);

    let retarget = change(
        "sites/default",
        Action::Update,
        link("/srv/x"),
        vec![Field::LinkTarget {
            from: "../available/default".into(),
            to: "/srv/x".into(),
        }],
    );
    assert!(
        t.apply(&retarget, &MapContent::default(), &backup)
            .unwrap()
            .writes
            >= 2
    );
    assert_eq!(
        observe(&t, "sites/default"),
        Observed::Present(Live::Symlink {
            target: "/srv/x".into()
        })
    );
    assert_eq!(
        t.apply(&retarget, &MapContent::default(), &backup)
            .unwrap()
            .writes,
        0
    );
}

#[test]
fn delete_backs_up_files_removes_symlinks_and_refuses_directories() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "old.conf", b"bye", 0o644).unwrap();
    std::os::unix::fs::symlink("old.conf", sb.at("alias")).unwrap();
    fs::create_dir(sb.at("dir")).unwrap();
    let backup = RecordingBackup::default();
    let delete = |p: &str| {
        t.apply(
            &change(p, Action::Delete, None, vec![]),
            &MapContent::default(),
            &backup,
        )
    };

    assert_eq!(delete("alias").unwrap().writes, 1);
    assert!(
        sb.at("old.conf").exists(),
        "the link was removed, not its target"
    );
    let applied = delete("old.conf").unwrap();
    assert_eq!((applied.writes, applied.backups.len()), (1, 1));
    assert_eq!(backup.bytes(), vec![b"bye".to_vec()]);
    assert!(!sb.at("old.conf").exists());
    assert!(matches!(delete("dir"), Err(TargetError::Transient(_))));
    assert!(sb.at("dir").is_dir());
    assert_eq!(delete("never/there").unwrap().writes, 0);
    assert_eq!(delete("old.conf").unwrap().writes, 0);
}
