//! Attacks on the root boundary: symlinks in parent and final position
//! aimed at a sentinel directory outside the root, and swaps between
//! observation and apply. The sentinel must never change.

use std::fs;
use std::os::unix::fs::symlink;

use super::testkit::*;
use crate::model::{Action, Field, Live, Observed, Spec};
use crate::target::{Target, TargetError};

#[test]
fn an_absolute_parent_symlink_resolves_inside_the_root() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    fs::create_dir_all(sb.inside(&sb.sentinel)).unwrap();
    symlink(&sb.sentinel, sb.at("a")).unwrap();

    assert_eq!(
        observe(&t, "a/secret"),
        Observed::Absent,
        "the sentinel's file is not seen"
    );
    assert_eq!(t.read_live(&rel("a/secret")).unwrap(), None);
    put(&t, "a/secret", b"pwned", 0o644).unwrap();

    assert_eq!(sb.sentinel_state(), before);
    assert_eq!(
        fs::read(sb.inside(&sb.sentinel).join("secret")).unwrap(),
        b"pwned"
    );
    assert!(matches!(
        observe(&t, "a/secret"),
        Observed::Present(Live::File { size: 5, .. })
    ));
}

/// A parent symlink that dangles inside the root (its target exists only
/// outside) is the operator's to settle: the write fails (and is retried),
/// nothing is made, and the link stays.
#[test]
fn an_absolute_parent_symlink_dangling_inside_the_root_fails_and_is_left() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    symlink(&sb.sentinel, sb.at("a")).unwrap();

    assert_eq!(observe(&t, "a/secret"), Observed::Absent);
    let err = put(&t, "a/secret", b"pwned", 0o644).unwrap_err();
    assert!(
        matches!(&err, TargetError::Transient(m) if m.contains("symlink")),
        "{err:?}"
    );
    assert_eq!(sb.sentinel_state(), before);
    assert!(fs::symlink_metadata(sb.at("a")).unwrap().is_symlink());
    assert!(!sb.inside(&sb.sentinel).exists());
}

#[test]
fn relative_parent_symlinks_climbing_out_resolve_at_the_root() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    fs::create_dir_all(sb.at("deep/er")).unwrap();
    fs::create_dir_all(sb.at("outside/dir")).unwrap();
    // From root/deep/er, ../../../outside climbs past the root: inside, it
    // stops there, at root/outside.
    symlink("../../../outside/dir", sb.at("deep/er/link")).unwrap();
    put(&t, "deep/er/link/x", b"x", 0o644).unwrap();
    assert_eq!(sb.sentinel_state(), before);
    assert!(fs::symlink_metadata(sb.at("deep/er/link"))
        .unwrap()
        .is_symlink());
    assert_eq!(fs::read(sb.at("outside/dir/x")).unwrap(), b"x");
}

#[test]
fn parent_symlinks_in_a_loop_are_refused_and_nothing_is_made() {
    let sb = Sandbox::new();
    let t = sb.target();
    symlink("b", sb.at("a")).unwrap();
    symlink("a", sb.at("b")).unwrap();
    let err = put(&t, "a/x", b"x", 0o644).unwrap_err();
    assert!(matches!(err, TargetError::Terminal(_)), "{err:?}");
    let mut names: Vec<String> = fs::read_dir(&sb.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn dot_dot_parent_symlinks_stop_at_the_root() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    fs::create_dir_all(sb.at("outside/sentinel")).unwrap();
    fs::create_dir_all(sb.inside(&sb.sentinel)).unwrap();
    // Resolved normally, from root/, this is the real sentinel.
    symlink("../outside/sentinel", sb.at("up")).unwrap();
    let deep = format!("../../../../../../../..{}", sb.sentinel.display());
    symlink(&deep, sb.at("deep")).unwrap();

    put(&t, "up/secret", b"one", 0o644).unwrap();
    put(&t, "deep/secret", b"two", 0o644).unwrap();

    assert_eq!(sb.sentinel_state(), before);
    assert_eq!(fs::read(sb.at("outside/sentinel/secret")).unwrap(), b"one");
    assert_eq!(
        fs::read(sb.inside(&sb.sentinel).join("secret")).unwrap(),
        b"two"
    );
}

#[test]
fn a_final_symlink_is_replaced_never_written_through() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    let target = sb.sentinel.join("secret");
    symlink(&target, sb.at("passwd")).unwrap();

    let seen = observe(&t, "passwd");
    assert_eq!(
        seen,
        Observed::Present(Live::Symlink {
            target: target.to_str().unwrap().into()
        })
    );
    assert_eq!(
        t.read_live(&rel("passwd")).unwrap(),
        None,
        "read_live does not follow the link"
    );
    let backup = RecordingBackup::default();
    let c = change(
        "passwd",
        Action::Update,
        Some(Spec::File(file_spec(b"root:x:0:0", 0o644))),
        vec![Field::Type {
            from: "symlink".into(),
            to: "file".into(),
        }],
    );
    t.apply(&c, &MapContent::of(&[b"root:x:0:0"]), &backup)
        .unwrap();

    assert_eq!(sb.sentinel_state(), before);
    assert!(fs::symlink_metadata(sb.at("passwd")).unwrap().is_file());
    assert_eq!(fs::read(sb.at("passwd")).unwrap(), b"root:x:0:0");
    assert_eq!(backup.count(), 0, "a symlink holds no content to back up");
}

#[test]
fn a_parent_swapped_for_a_symlink_after_observation_still_lands_inside() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    fs::create_dir(sb.at("d")).unwrap();
    assert_eq!(observe(&t, "d/secret"), Observed::Absent);

    fs::remove_dir(sb.at("d")).unwrap();
    symlink(&sb.sentinel, sb.at("d")).unwrap();
    fs::create_dir_all(sb.inside(&sb.sentinel)).unwrap();
    put(&t, "d/secret", b"late", 0o600).unwrap();

    assert_eq!(sb.sentinel_state(), before);
    assert_eq!(
        fs::read(sb.inside(&sb.sentinel).join("secret")).unwrap(),
        b"late"
    );
}

#[test]
fn a_chmod_planned_for_a_file_is_not_applied_through_a_swapped_in_symlink() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    put(&t, "key", b"k", 0o644).unwrap();
    fs::remove_file(sb.at("key")).unwrap();
    symlink(sb.sentinel.join("secret"), sb.at("key")).unwrap();

    let c = change(
        "key",
        Action::Update,
        Some(Spec::File(file_spec(b"k", 0o600))),
        vec![Field::Mode {
            from: 0o644,
            to: 0o600,
        }],
    );
    let err = t
        .apply(&c, &MapContent::of(&[b"k"]), &RecordingBackup::default())
        .unwrap_err();

    assert!(matches!(err, TargetError::Transient(_)), "{err:?}");
    assert_eq!(sb.sentinel_state(), before);
}

#[test]
fn a_parent_symlink_to_a_file_outside_is_neither_followed_nor_removed() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    symlink(sb.sentinel.join("secret"), sb.at("p")).unwrap();
    assert!(matches!(
        put(&t, "p/x", b"inside", 0o644),
        Err(TargetError::Transient(_))
    ));
    assert_eq!(sb.sentinel_state(), before);
    assert!(fs::symlink_metadata(sb.at("p")).unwrap().is_symlink());
    // Inside the root the same path holds a file: still no directory there.
    fs::create_dir_all(sb.inside(&sb.sentinel)).unwrap();
    fs::write(sb.inside(&sb.sentinel).join("secret"), b"a file").unwrap();
    assert!(matches!(
        put(&t, "p/x", b"inside", 0o644),
        Err(TargetError::Transient(_))
    ));
    assert_eq!(
        fs::read(sb.inside(&sb.sentinel).join("secret")).unwrap(),
        b"a file"
    );
}

#[test]
fn delete_and_clean_temp_do_not_reach_through_parent_symlinks() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    symlink(&sb.sentinel, sb.at("s")).unwrap();
    let backup = RecordingBackup::default();
    let delete = change("s/secret", Action::Delete, None, vec![]);
    assert_eq!(
        t.apply(&delete, &MapContent::default(), &backup)
            .unwrap()
            .writes,
        0
    );
    assert_eq!(t.clean_temp(&[&rel("s/anything")]).removed, 0);
    assert_eq!(sb.sentinel_state(), before);
    assert_eq!(backup.count(), 0);
}

#[test]
fn a_root_like_slash_works_with_absolute_symlinks_such_as_var_run() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir_all(sb.at("run")).unwrap();
    fs::create_dir_all(sb.at("var")).unwrap();
    symlink("/run", sb.at("var/run")).unwrap();
    put(&t, "var/run/app.pid", b"42\n", 0o644).unwrap();
    assert_eq!(fs::read(sb.at("run/app.pid")).unwrap(), b"42\n");
    assert!(matches!(
        observe(&t, "var/run/app.pid"),
        Observed::Present(Live::File { size: 3, .. })
    ));
    assert_eq!(
        t.read_live(&rel("var/run/app.pid")).unwrap().as_deref(),
        Some(&b"42\n"[..])
    );
}

#[test]
fn magic_links_are_refused() {
    let sb = Sandbox::new();
    let t = sb.target();
    symlink("/proc/self/root", sb.at("p")).unwrap();
    // In the root `/proc/self/root` does not exist, so the link dangles.
    assert_eq!(observe(&t, "p/etc/hostname"), Observed::Absent);
    if !std::path::Path::new("/proc/self/root").exists() {
        return; // no procfs here to test magic links against
    }
    // A root of `/` sees the real /proc, whose magic links are refused.
    let slash = super::FilesTarget::new("slash", std::path::Path::new("/"), &sb.state).unwrap();
    assert!(
        matches!(
            observe(&slash, "proc/self/root/etc/hostname"),
            Observed::Unknown(_)
        ),
        "a magic link must not be followed"
    );
}
