//! Whole-tree publishing on real directories: a tree shares unchanged
//! files with the published one and never changes them in place; a failed
//! write holds the switch; what a crash left is rebuilt; tend's own
//! directories are never reached through a symlink.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use git2::Oid;

use super::testkit::*;
use super::{FilesTarget, Link};
use crate::model::{Action, Field, Observed, RelPath, Spec};
use crate::target::{Target, TargetError};

fn rev(n: u8) -> Oid {
    Oid::from_str(&format!("{n:02x}").repeat(20)).unwrap()
}

fn linked(sb: &Sandbox, n: u8) -> bool {
    fs::read_link(sb.at("current"))
        .is_ok_and(|t| t.to_str() == Some(&format!(".tend/revs/{}", rev(n))))
}

fn publishing(sb: &Sandbox) -> FilesTarget {
    sb.target().publishing(Link {
        name: "current".into(),
        keep: 1,
    })
}

/// Publishes revision `n` holding `files` (path, bytes, mode).
fn publish(t: &FilesTarget, n: u8, carried: &[&str], files: &[(&str, &[u8], u32)]) {
    let carried: Vec<RelPath> = carried.iter().map(|p| rel(p)).collect();
    t.begin(rev(n), &|| carried.clone()).unwrap();
    for (path, bytes, mode) in files {
        put(t, path, bytes, *mode).unwrap();
    }
    assert!(t.publish().unwrap(), "switched");
}

#[test]
fn a_new_tree_shares_unchanged_files_and_a_mode_change_replaces_the_shared_one() {
    let sb = Sandbox::new();
    let t = publishing(&sb);
    assert!(t.unpublished(), "not known before a pass");
    assert_eq!(observe(&t, "a"), Observed::Absent, "nothing published yet");
    publish(&t, 1, &[], &[("a", b"a\n", 0o644), ("d/b", b"b\n", 0o644)]);
    assert!(linked(&sb, 1) && !t.unpublished());
    let tree1 = sb.at(&format!(".tend/revs/{}", rev(1)));
    t.begin(rev(2), &|| vec![rel("a"), rel("d/b")]).unwrap();
    let tree2 = sb.at(&format!(".tend/revs/.{}.tmp", rev(2)));
    let ino = |p: &std::path::Path| fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&tree1.join("d/b")), ino(&tree2.join("d/b")));
    assert!(t.unpublished());
    // Only the mode differs: not a chmod of the inode both trees hold.
    let mut c = change(
        "d/b",
        Action::Update,
        Some(Spec::File(file_spec(b"b\n", 0o600))),
        vec![Field::Mode {
            from: 0o644,
            to: 0o600,
        }],
    );
    c.observed = observe(&t, "d/b");
    t.apply(&c, &MapContent::of(&[b"b\n"]), &RecordingBackup::default())
        .unwrap();
    assert_ne!(ino(&tree1.join("d/b")), ino(&tree2.join("d/b")));
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode(&tree1.join("d/b")),
        0o644,
        "the published tree is untouched"
    );
    assert_eq!(mode(&tree2.join("d/b")), 0o600);
    assert!(linked(&sb, 1), "not switched before publish");
    assert!(t.publish().unwrap());
    assert!(linked(&sb, 2));
    assert_eq!(fs::read(sb.at("current/a")).unwrap(), b"a\n");
    assert_eq!(
        t.live_root().unwrap(),
        sb.at(&format!(".tend/revs/{}", rev(2)))
    );
}

#[test]
fn a_failed_write_holds_the_switch_until_it_succeeds() {
    let sb = Sandbox::new();
    let t = publishing(&sb);
    publish(&t, 1, &[], &[("a", b"1\n", 0o644)]);
    t.begin(rev(2), &|| vec![rel("a")]).unwrap();
    let staging = sb.at(&format!(".tend/revs/.{}.tmp", rev(2)));
    // A dangling symlink where a directory is needed: a transient failure.
    std::os::unix::fs::symlink("nowhere", staging.join("d")).unwrap();
    let err = put(&t, "d/x", b"x\n", 0o644).unwrap_err();
    assert!(matches!(err, TargetError::Transient(_)), "{err:?}");
    let held = t.publish().unwrap_err().to_string();
    assert!(held.contains("1 of its writes are retried"), "{held}");
    assert!(linked(&sb, 1));
    fs::remove_file(staging.join("d")).unwrap();
    put(&t, "d/x", b"x\n", 0o644).unwrap();
    assert!(t.publish().unwrap());
    assert!(linked(&sb, 2));
    assert_eq!(fs::read(sb.at("current/d/x")).unwrap(), b"x\n");
}

#[test]
fn an_unfinished_tree_is_rebuilt_and_a_finished_one_is_reused() {
    let sb = Sandbox::new();
    let t = publishing(&sb);
    publish(&t, 1, &[], &[("a", b"1\n", 0o644)]);
    // Left by a process killed while building revision 2.
    let staging = sb.at(&format!(".tend/revs/.{}.tmp", rev(2)));
    fs::create_dir_all(staging.join("half")).unwrap();
    fs::write(staging.join("half/done"), "?").unwrap();
    fs::write(
        sb.at(".tend-0123456789abcdef.tmp"),
        "a temp link's leftover",
    )
    .unwrap();
    let t = publishing(&sb);
    t.begin(rev(2), &|| vec![rel("a")]).unwrap();
    assert!(!staging.join("half").exists(), "rebuilt from scratch");
    assert!(staging.join("a").exists(), "carried over");
    assert!(!sb.at(".tend-0123456789abcdef.tmp").exists());
    // Killed after the rename, before the switch: the tree is taken as is.
    let t = publishing(&sb);
    let done = sb.at(&format!(".tend/revs/{}", rev(3)));
    fs::create_dir_all(&done).unwrap();
    fs::write(done.join("a"), "3\n").unwrap();
    t.begin(rev(3), &|| vec![rel("a")]).unwrap();
    assert_eq!(fs::read(sb.at("current/a")).unwrap(), b"1\n");
    assert!(t.publish().unwrap());
    assert!(linked(&sb, 3));
    assert_eq!(fs::read(sb.at("current/a")).unwrap(), b"3\n");
    // keep 1: the previous tree stays, older ones and the unfinished go.
    let mut left: Vec<String> = fs::read_dir(sb.at(".tend/revs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [rev(1).to_string(), rev(3).to_string()]);
}

#[test]
fn tend_s_own_directory_is_never_reached_through_a_symlink() {
    let sb = Sandbox::new();
    std::os::unix::fs::symlink(&sb.sentinel, sb.at(".tend")).unwrap();
    let before = sb.sentinel_state();
    let t = publishing(&sb);
    let err = t.begin(rev(1), &Vec::new).unwrap_err().to_string();
    assert!(err.contains(".tend/revs"), "{err}");
    assert!(matches!(observe(&t, "a"), Observed::Unknown(_)));
    assert!(put(&t, "a", b"x", 0o644).is_err());
    assert_eq!(sb.sentinel_state(), before);
    // A directory where the link goes is not replaced.
    fs::remove_file(sb.at(".tend")).unwrap();
    fs::create_dir(sb.at("current")).unwrap();
    let t = publishing(&sb);
    t.begin(rev(1), &Vec::new).unwrap();
    put(&t, "a", b"x", 0o644).unwrap();
    let err = t.publish().unwrap_err().to_string();
    assert!(err.contains("stands where the link"), "{err}");
    assert!(sb.at("current").is_dir());
}

#[test]
fn an_edit_in_place_is_corrected_in_every_kept_tree_sharing_the_file() {
    let sb = Sandbox::new();
    let t = publishing(&sb);
    publish(&t, 1, &[], &[("a", b"a\n", 0o644), ("d/b", b"b1\n", 0o644)]);
    publish(&t, 2, &["a", "d/b"], &[("d/b", b"b2\n", 0o644)]);
    let tree = |n: u8| sb.at(&format!(".tend/revs/{}", rev(n)));
    let ino = |p: &std::path::Path| fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&tree(1).join("a")), ino(&tree(2).join("a")));
    // Written in place through the link: the kept tree holds it as well.
    fs::write(sb.at("current/a"), "hand\n").unwrap();
    assert_eq!(fs::read(tree(1).join("a")).unwrap(), b"hand\n");
    t.begin(rev(2), &|| vec![rel("a"), rel("d/b")]).unwrap();
    put(&t, "a", b"a\n", 0o644).unwrap();
    assert_eq!(fs::read(tree(2).join("a")).unwrap(), b"a\n");
    assert_eq!(fs::read(tree(1).join("a")).unwrap(), b"a\n", "kept tree");
    assert_eq!(fs::read(tree(1).join("d/b")).unwrap(), b"b1\n");
    assert_eq!(fs::read(tree(2).join("d/b")).unwrap(), b"b2\n");
    // A tree being built replaces what its revision changed: the file it
    // shared is the published tree's own, and stays so.
    t.begin(rev(3), &|| vec![rel("a"), rel("d/b")]).unwrap();
    put(&t, "a", b"a3\n", 0o644).unwrap();
    assert_eq!(fs::read(tree(2).join("a")).unwrap(), b"a\n");
    assert_eq!(fs::read(tree(1).join("a")).unwrap(), b"a\n");
}
