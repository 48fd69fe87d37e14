//! Observation on real directories: every kind of object, absent versus
//! unknown, the stat cache (hits, misses, the racy rule, persistence) and
//! temp-file cleanup.

use std::fs::{self, File, FileTimes};
use std::os::unix::fs::symlink;
use std::time::{Duration, SystemTime};

use super::testkit::*;
use crate::model::{blob_id, Action, Field, Live, Observed, Spec};
use crate::target::Target;

fn set_mtime(path: &std::path::Path, when: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_times(FileTimes::new().set_modified(when))
        .unwrap();
}

fn an_hour_ago() -> SystemTime {
    SystemTime::now() - Duration::from_secs(3600)
}

#[test]
fn observe_tells_each_kind_and_absent_from_unknown() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir_all(sb.at("dir/full")).unwrap();
    fs::create_dir(sb.at("empty")).unwrap();
    fs::write(sb.at("dir/file"), b"hello").unwrap();
    fs::write(sb.at("plain"), b"x").unwrap();
    symlink("dir/file", sb.at("link")).unwrap();
    symlink("loop2", sb.at("loop1")).unwrap();
    symlink("loop1", sb.at("loop2")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        sb.at("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let long = "n".repeat(300);
    let paths: Vec<_> = [
        "dir/file", "link", "dir", "empty", "fifo", "missing", "nodir/x", "plain/x", "loop1/x",
    ]
    .into_iter()
    .map(rel)
    .chain([rel(&long)])
    .collect();
    let refs: Vec<_> = paths.iter().collect();

    let seen = t.observe_paths(&refs);

    assert!(
        matches!(&seen[0], Observed::Present(Live::File { blob, size: 5, .. }) if *blob == blob_id(b"hello"))
    );
    assert_eq!(
        seen[1],
        Observed::Present(Live::Symlink {
            target: "dir/file".into()
        })
    );
    assert_eq!(seen[2], Observed::Present(Live::Directory { empty: false }));
    assert_eq!(seen[3], Observed::Present(Live::Directory { empty: true }));
    assert_eq!(seen[4], Observed::Present(Live::Other("fifo".into())));
    assert_eq!(
        &seen[5..8],
        &[Observed::Absent, Observed::Absent, Observed::Absent]
    );
    assert!(
        matches!(&seen[8], Observed::Unknown(r) if r.contains("loop1")),
        "{:?}",
        seen[8]
    );
    assert!(matches!(&seen[9], Observed::Unknown(_)), "{:?}", seen[9]);
}

#[test]
fn an_unchanged_file_is_not_read_again_until_a_rehash_is_asked() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("f"), b"content").unwrap();
    set_mtime(&sb.at("f"), an_hour_ago());

    let first = observe(&t, "f");
    assert_eq!(t.hashes_total(), 1);
    assert_eq!(observe(&t, "f"), first);
    assert_eq!(t.hashes_total(), 1, "a stat match is a cache hit");

    t.set_rehash(true);
    assert_eq!(observe(&t, "f"), first);
    assert_eq!(t.hashes_total(), 2);
    t.set_rehash(false);
    observe(&t, "f");
    assert_eq!(t.hashes_total(), 2);
}

#[test]
fn a_same_size_edit_with_its_mtime_put_back_is_still_seen() {
    let sb = Sandbox::new();
    let t = sb.target();
    let when = an_hour_ago();
    fs::write(sb.at("f"), b"aaaa").unwrap();
    set_mtime(&sb.at("f"), when);
    observe(&t, "f");
    fs::write(sb.at("f"), b"bbbb").unwrap();
    set_mtime(&sb.at("f"), when);

    let seen = observe(&t, "f");
    assert!(matches!(seen, Observed::Present(Live::File { blob, .. }) if blob == blob_id(b"bbbb")));
    assert_eq!(t.hashes_total(), 2, "ctime moved, so the entry missed");
}

#[test]
fn a_racy_entry_is_read_again_every_time() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("f"), b"fresh").unwrap();
    // An mtime not older than any clock reading is always racy.
    set_mtime(&sb.at("f"), SystemTime::now() + Duration::from_secs(3600));
    for round in 1..=3 {
        observe(&t, "f");
        assert_eq!(t.hashes_total(), round);
    }
}

#[test]
fn tends_own_write_is_trusted_at_once() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "f", b"mine", 0o644).unwrap();
    assert!(matches!(
        observe(&t, "f"),
        Observed::Present(Live::File { size: 4, .. })
    ));
    assert_eq!(t.hashes_total(), 0, "the write recorded its own stat");
    // Another writer, even within the same clock tick, is noticed.
    fs::write(sb.at("f"), b"them").unwrap();
    let seen = observe(&t, "f");
    assert!(matches!(seen, Observed::Present(Live::File { blob, .. }) if blob == blob_id(b"them")));
    assert_eq!(t.hashes_total(), 1);
}

#[test]
fn a_chmod_by_tend_keeps_the_cache_entry_trusted() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("f"), b"body").unwrap();
    set_mtime(&sb.at("f"), an_hour_ago());
    observe(&t, "f");
    let c = change(
        "f",
        Action::Update,
        Some(Spec::File(file_spec(b"body", 0o600))),
        vec![Field::Mode {
            from: 0o644,
            to: 0o600,
        }],
    );
    assert_eq!(
        t.apply(&c, &MapContent::default(), &RecordingBackup::default())
            .unwrap()
            .writes,
        1
    );
    assert!(matches!(
        observe(&t, "f"),
        Observed::Present(Live::File { mode: 0o600, .. })
    ));
    assert_eq!(t.hashes_total(), 1);
}

#[test]
fn the_cache_persists_and_a_damaged_cache_is_an_empty_one() {
    let sb = Sandbox::new();
    fs::write(sb.at("f"), b"kept").unwrap();
    set_mtime(&sb.at("f"), an_hour_ago());
    let t = sb.target();
    let seen = observe(&t, "f");
    t.flush().unwrap();
    assert!(sb.state.join("statcache/files").is_file());

    let reopened = sb.target();
    assert_eq!(observe(&reopened, "f"), seen);
    assert_eq!(reopened.hashes_total(), 0, "loaded entries are trusted");

    let cache = sb.state.join("statcache/files");
    let mut bytes = fs::read(&cache).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&cache, &bytes).unwrap();
    let damaged = sb.target();
    assert_eq!(damaged.cache.len(), 0);
    assert_eq!(observe(&damaged, "f"), seen);
    assert_eq!(damaged.hashes_total(), 1);
}

/// A daemon lets the saved entries go between full passes: they are read
/// again at the next use, trusted as before, each as old as it was, so an
/// unused one still goes after as many passes as when it is held.
#[test]
fn a_resting_target_reads_its_entries_again_each_as_old_as_it_was() {
    use super::statcache::KEEP_GENERATIONS;
    let sb = Sandbox::new();
    for name in ["f", "g"] {
        fs::write(sb.at(name), name).unwrap();
        set_mtime(&sb.at(name), an_hour_ago());
    }
    let t = sb.target();
    observe(&t, "f");
    observe(&t, "g");
    for _ in 1..KEEP_GENERATIONS {
        t.flush().unwrap();
        t.rest();
        assert!(t.cache.is_released());
        observe(&t, "f");
        assert!(!t.cache.is_released(), "read again at the first use");
    }
    assert_eq!(t.hashes_total(), 2, "entries read again are trusted");
    t.flush().unwrap();
    t.rest();
    // Let go of twice, not read in between: were it read, the file being
    // away would leave it empty, and the ages it kept would be lost.
    let (file, aside) = (sb.state.join("statcache/files"), sb.state.join("aside"));
    fs::rename(&file, &aside).unwrap();
    t.rest();
    fs::rename(&aside, &file).unwrap();
    assert_eq!(t.cache.len(), 2, "g, unseen, is not yet old enough to go");
    t.flush().unwrap();
    t.rest();
    assert_eq!(t.cache.len(), 1, "g went when a held entry would have");
    observe(&t, "g");
    assert_eq!(t.hashes_total(), 3, "g, forgotten, is read again");
}

#[test]
fn absent_paths_leave_the_cache() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("f"), b"x").unwrap();
    observe(&t, "f");
    assert_eq!(t.cache.len(), 1);
    fs::remove_file(sb.at("f")).unwrap();
    assert_eq!(observe(&t, "f"), Observed::Absent);
    assert_eq!(t.cache.len(), 0);
}

#[test]
fn read_live_gives_regular_file_bytes_only() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir(sb.at("d")).unwrap();
    fs::write(sb.at("d/f"), b"bytes").unwrap();
    assert_eq!(
        t.read_live(&rel("d/f")).unwrap().as_deref(),
        Some(&b"bytes"[..])
    );
    assert_eq!(t.read_live(&rel("d")).unwrap(), None);
    assert_eq!(t.read_live(&rel("d/missing")).unwrap(), None);
    assert_eq!(t.read_live(&rel("d/f/below")).unwrap(), None);
}

#[test]
fn clean_temp_removes_only_tend_temp_files() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::create_dir_all(sb.at("etc/.tend-dir.tmp")).unwrap();
    for name in [
        ".tend-0123456789abcdef.tmp",
        ".tend-x.tmp",
        "keep.tmp",
        ".tend-x.tmp.orig",
        "app.conf",
    ] {
        fs::write(sb.at("etc").join(name), b"x").unwrap();
    }
    symlink("/etc/passwd", sb.at("etc/.tend-link.tmp")).unwrap();
    fs::write(sb.at(".tend-top.tmp"), b"x").unwrap();

    let removed = t.clean_temp(&[&rel("etc/app.conf"), &rel("etc/other"), &rel("missing/x")]);

    assert_eq!(removed.removed, 3);
    assert_eq!(removed.left, 0);
    let mut left: Vec<_> = fs::read_dir(sb.at("etc"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".tend-dir.tmp", ".tend-x.tmp.orig", "app.conf", "keep.tmp"]
    );
    assert!(
        sb.at(".tend-top.tmp").exists(),
        "only the directories of the given paths are swept"
    );
}
