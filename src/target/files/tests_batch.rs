//! apply_batch on real directories: many files land with their modes,
//! results stay in input order, a failing member fails alone, each
//! directory is synced once, and the end state is the one-by-one one.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use super::testkit::*;
use crate::model::{blob_id, Action, Change, Field, Live, Observed, Spec};
use crate::target::{Applied, Target, TargetError};

fn mode_of(path: &std::path::Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn create(path: &str, bytes: &[u8], mode: u32) -> Change {
    change(
        path,
        Action::Create,
        Some(Spec::File(file_spec(bytes, mode))),
        vec![],
    )
}

fn batch(t: &super::FilesTarget, changes: &[Change], content: &MapContent) -> Vec<Applied> {
    let refs: Vec<&Change> = changes.iter().collect();
    t.apply_batch(&refs, content, &RecordingBackup::default())
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

/// `n` files spread over `dirs` directories (the root among them), each
/// with its own content and one of a few modes.
fn spread(n: usize, dirs: usize) -> (Vec<Change>, MapContent) {
    let modes = [0o644, 0o600, 0o755, 0o4750];
    let mut content = MapContent::default();
    let changes = (0..n)
        .map(|i| {
            let bytes = format!("file {i}\n").into_bytes();
            content.0.insert(blob_id(&bytes), bytes.clone());
            let path = match i % dirs {
                0 => format!("f{i}"),
                d => format!("d{d}/f{i}"),
            };
            create(&path, &bytes, modes[i % modes.len()])
        })
        .collect();
    (changes, content)
}

fn no_temp_files_under(dir: &std::path::Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        assert!(!name.starts_with(".tend-"), "temp file left: {name}");
        if entry.file_type().unwrap().is_dir() {
            no_temp_files_under(&entry.path());
        }
    }
}

#[test]
fn a_batch_lands_files_across_directories_with_their_modes_and_a_second_writes_nothing() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "d1/f1", b"old", 0o644).unwrap();
    let (changes, content) = spread(120, 6);
    let refs: Vec<&Change> = changes.iter().collect();
    let backup = RecordingBackup::default();
    let writes_before = t.writes_total();

    let results = t.apply_batch(&refs, &content, &backup);

    assert_eq!(results.len(), 120);
    let mut total = 0;
    for (c, r) in changes.iter().zip(&results) {
        let applied = r.as_ref().unwrap();
        total += applied.writes;
        let Some(Spec::File(spec)) = c.desired.as_ref().map(|d| &d.spec) else {
            unreachable!()
        };
        let at = sb.at(c.path.as_str());
        assert_eq!(blob_id(&fs::read(&at).unwrap()), spec.blob, "{at:?}");
        assert_eq!(mode_of(&at), spec.mode, "{at:?}");
    }
    assert_eq!(backup.bytes(), vec![b"old".to_vec()]);
    assert_eq!(results[1].as_ref().unwrap().backups, vec!["backup-1"]);
    assert_eq!(t.writes_total() - writes_before, total);
    no_temp_files_under(&sb.root);

    // Own writes went into the stat cache: observing hashes nothing.
    let hashed = t.hashes_total();
    let paths: Vec<_> = changes.iter().map(|c| &c.path).collect();
    for (o, c) in t.observe_paths(&paths).iter().zip(&changes) {
        assert!(matches!(o, Observed::Present(Live::File { .. })), "{c:?}");
    }
    assert_eq!(t.hashes_total(), hashed);

    let before: Vec<_> = changes
        .iter()
        .map(|c| identity(&sb.at(c.path.as_str())))
        .collect();
    let again = batch(&t, &changes, &content);
    assert!(again.iter().all(|a| a.writes == 0), "{again:?}");
    let after: Vec<_> = changes
        .iter()
        .map(|c| identity(&sb.at(c.path.as_str())))
        .collect();
    assert_eq!(before, after, "same inodes, mtimes and ctimes");
}

/// Content that, when read for one blob, puts a non-empty directory where
/// another (already staged) change is about to land.
struct Obstructing {
    inner: MapContent,
    trigger: git2::Oid,
    obstruct: std::path::PathBuf,
}

impl crate::model::ContentSource for Obstructing {
    fn read(&self, blob: git2::Oid) -> std::io::Result<Vec<u8>> {
        if blob == self.trigger {
            fs::create_dir_all(&self.obstruct)?;
            fs::write(self.obstruct.join("precious"), b"human work")?;
        }
        self.inner.read(blob)
    }
}

#[test]
fn a_failing_member_fails_alone_and_results_keep_input_order() {
    let sb = Sandbox::new();
    let t = sb.target();
    put(&t, "key", b"secret", 0o644).unwrap();
    put(&t, "gone", b"bye", 0o644).unwrap();
    fs::create_dir_all(sb.at("conf/d")).unwrap();
    fs::write(sb.at("conf/d/keep"), b"mine").unwrap();
    let chmod = change(
        "key",
        Action::Update,
        Some(Spec::File(file_spec(b"secret", 0o600))),
        vec![Field::Mode {
            from: 0o644,
            to: 0o600,
        }],
    );
    let changes = [
        create("a/one", b"1", 0o644),
        create("conf", b"refused at once", 0o644),
        create("late", b"refused at the rename", 0o644),
        create("a/two", b"2", 0o640),
        chmod,
        change("gone", Action::Delete, None, vec![]),
        create("b/three", b"3", 0o600),
    ];
    let content = Obstructing {
        inner: MapContent::of(&[
            b"1",
            b"refused at once",
            b"refused at the rename",
            b"2",
            b"3",
        ]),
        trigger: blob_id(b"2"),
        obstruct: sb.at("late/d"),
    };
    let refs: Vec<&Change> = changes.iter().collect();
    let backup = RecordingBackup::default();

    let results = t.apply_batch(&refs, &content, &backup);

    let unmanaged = |r: &Result<Applied, TargetError>| matches!(r, Err(TargetError::Transient(m)) if m.contains("unmanaged"));
    assert!(unmanaged(&results[1]), "{:?}", results[1]);
    assert!(unmanaged(&results[2]), "{:?}", results[2]);
    let ok: Vec<&Applied> = [0, 3, 4, 5, 6]
        .iter()
        .map(|&i| results[i].as_ref().unwrap())
        .collect();
    assert_eq!(ok[2].writes, 1, "the chmod is the fifth result");
    assert_eq!(
        (ok[3].writes, ok[3].backups.clone()),
        (1, vec!["backup-1".to_string()]),
        "the delete is the sixth result"
    );
    assert_eq!(fs::read(sb.at("a/one")).unwrap(), b"1");
    assert_eq!(fs::read(sb.at("a/two")).unwrap(), b"2");
    assert_eq!(mode_of(&sb.at("a/two")), 0o640);
    assert_eq!(fs::read(sb.at("b/three")).unwrap(), b"3");
    assert_eq!(mode_of(&sb.at("key")), 0o600);
    assert!(!sb.at("gone").exists());
    assert_eq!(fs::read(sb.at("conf/d/keep")).unwrap(), b"mine");
    assert_eq!(fs::read(sb.at("late/d/precious")).unwrap(), b"human work");
    assert_eq!(backup.bytes(), vec![b"bye".to_vec()]);
    no_temp_files_under(&sb.root);
}

#[test]
fn each_directory_is_synced_once_per_batch() {
    let sb = Sandbox::new();
    let t = sb.target().without_whole_fs_sync();
    for d in 1..5 {
        fs::create_dir(sb.at(&format!("d{d}"))).unwrap();
    }
    let (changes, content) = spread(50, 5);

    let before = t.dir_syncs_total();
    batch(&t, &changes, &content);
    assert_eq!(t.dir_syncs_total() - before, 5, "the root and d1..d4");

    let before = t.dir_syncs_total();
    batch(&t, &changes, &content);
    assert_eq!(
        t.dir_syncs_total(),
        before,
        "nothing written, nothing synced"
    );

    // New directories: each parent synced once too, not once per mkdir.
    let fresh = Sandbox::new();
    let t2 = fresh.target().without_whole_fs_sync();
    let nested = ["n1/a/f", "n1/a/g", "n1/b/f", "n2/f", "top"].map(|p| create(p, b"x", 0o644));
    batch(&t2, &nested, &MapContent::of(&[b"x"]));
    assert_eq!(t2.dir_syncs_total(), 5, "the root, n1, n1/a, n1/b and n2");
    assert_eq!(fs::read(fresh.at("n1/b/f")).unwrap(), b"x");

    // One by one, each rename syncs its directory.
    let before = t.dir_syncs_total();
    for i in 0..10 {
        put(&t, &format!("d1/g{i}"), b"single", 0o644).unwrap();
    }
    assert_eq!(t.dir_syncs_total() - before, 10);
}

#[test]
fn on_its_own_file_system_a_batch_syncs_it_whole_instead_of_each_file() {
    let sb = Sandbox::new();
    let t = sb.target();
    for d in 1..5 {
        fs::create_dir(sb.at(&format!("d{d}"))).unwrap();
    }
    let (changes, content) = spread(50, 5);

    let results = batch(&t, &changes, &content);
    assert_eq!(results.len(), 50);
    assert_eq!(t.fs_syncs_total(), 2, "one before the renames, one after");
    assert_eq!(t.dir_syncs_total(), 0, "the syncfs stands for them");
    assert_eq!(fs::read(sb.at("d3/f3")).unwrap(), b"file 3\n");
    assert_eq!(mode_of(&sb.at("d3/f3")), 0o4750);
    no_temp_files_under(&sb.root);

    batch(&t, &changes, &content);
    assert_eq!(t.fs_syncs_total(), 2, "nothing written, nothing synced");

    // A root of `/` never syncs the whole file system.
    let slash = super::FilesTarget::new("slash", std::path::Path::new("/"), &sb.state).unwrap();
    assert!(!slash.whole_fs);
}

#[test]
fn changes_to_the_same_or_nested_paths_end_as_one_by_one() {
    let changes = [
        create("x", b"first", 0o644),
        create("y", b"y", 0o644),
        create("y", b"y", 0o644),
        create("x", b"second", 0o600),
        create("x/inner", b"nested", 0o644),
    ];
    let content = MapContent::of(&[b"first", b"second", b"nested", b"y"]);
    let refs: Vec<&Change> = changes.iter().collect();
    let (one, many) = (Sandbox::new(), Sandbox::new());
    let (t1, tn) = (one.target(), many.target());
    let (b1, bn) = (RecordingBackup::default(), RecordingBackup::default());

    let singly: Vec<_> = refs.iter().map(|c| t1.apply(c, &content, &b1)).collect();
    let batched = tn.apply_batch(&refs, &content, &bn);

    // What each left is a stamp of its own sandbox's files: compared apart.
    let strip = |results: &[Result<Applied, TargetError>]| -> Vec<_> {
        results
            .iter()
            .map(|r| r.clone().map(|a| (a.writes, a.backups, a.left.is_some())))
            .collect()
    };
    assert_eq!(strip(&batched), strip(&singly));
    assert!(batched[0].as_ref().unwrap().left.is_some(), "x was written");
    // What a write reports it left is what the path shows after it.
    let left_at = |p: &str| crate::target::Left::at(&many.at(p));
    assert_eq!(batched[1].as_ref().unwrap().left, left_at("y"));
    assert_eq!(batched[4].as_ref().unwrap().left, left_at("x/inner"));
    assert_eq!(batched[2].as_ref().unwrap().writes, 0, "y was written");
    assert_eq!(bn.bytes(), vec![b"first".to_vec(), b"second".to_vec()]);
    assert_eq!(fs::read(many.at("x/inner")).unwrap(), b"nested");
    assert_eq!(fs::read(many.at("y")).unwrap(), b"y");
}

#[test]
fn a_batch_stays_inside_the_root() {
    let sb = Sandbox::new();
    let t = sb.target();
    let before = sb.sentinel_state();
    symlink(&sb.sentinel, sb.at("escape")).unwrap();
    symlink(sb.sentinel.join("secret"), sb.at("last")).unwrap();
    symlink("../../outside/sentinel", sb.at("up")).unwrap();
    let changes = [
        create("escape/secret", b"pwned", 0o644),
        create("last", b"pwned", 0o644),
        create("up/secret", b"pwned", 0o644),
        create("escape/new", b"pwned", 0o644),
    ];
    let refs: Vec<&Change> = changes.iter().collect();
    let results = t.apply_batch(
        &refs,
        &MapContent::of(&[b"pwned"]),
        &RecordingBackup::default(),
    );

    assert_eq!(results.len(), 4);
    assert_eq!(sb.sentinel_state(), before);
    assert!(fs::symlink_metadata(sb.at("last")).unwrap().is_file());
    assert_eq!(fs::read(sb.at("last")).unwrap(), b"pwned");
    // Behind links that lead nowhere inside the root: refused, links kept.
    for (i, link) in [(0, "escape"), (2, "up"), (3, "escape")] {
        assert!(
            matches!(results[i], Err(TargetError::Transient(_))),
            "{:?}",
            results[i]
        );
        assert!(fs::symlink_metadata(sb.at(link)).unwrap().is_symlink());
    }
}

/// Content that notes which threads read it, taking a millisecond a read,
/// so each thread that can help gets there before the work is done.
#[derive(Default)]
struct ThreadNoting {
    inner: MapContent,
    readers: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

impl crate::model::ContentSource for ThreadNoting {
    fn read(&self, blob: git2::Oid) -> std::io::Result<Vec<u8>> {
        self.readers
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        std::thread::sleep(std::time::Duration::from_millis(1));
        self.inner.read(blob)
    }
}

#[test]
fn a_long_run_staged_by_several_threads_ends_as_one_by_one() {
    // New nested directories shared by neighbours, replaced files (backed
    // up in input order) and one refusal, in a run long enough to split.
    let changes: Vec<Change> = (0..1000)
        .map(|i| {
            let path = format!("d{}/s{}/f{i}", i % 7, i % 3);
            let bytes = format!("file {i}\n");
            create(&path, bytes.as_bytes(), [0o644, 0o600][i % 2])
        })
        .collect();
    let mut content = ThreadNoting::default();
    for i in 0..1000 {
        let bytes = format!("file {i}\n").into_bytes();
        content.inner.0.insert(blob_id(&bytes), bytes);
    }
    let prepare = |sb: &Sandbox| {
        for i in [10, 500, 990] {
            let path = format!("d{}/s{}/f{i}", i % 7, i % 3);
            fs::create_dir_all(sb.at(&path).parent().unwrap()).unwrap();
            fs::write(sb.at(&path), format!("old {i}")).unwrap();
        }
        fs::create_dir_all(sb.at("d0/s0/f42/kept")).unwrap();
        fs::write(sb.at("d0/s0/f42/kept/work"), b"human work").unwrap();
    };
    let refs: Vec<&Change> = changes.iter().collect();
    let (one, many) = (Sandbox::new(), Sandbox::new());
    prepare(&one);
    prepare(&many);
    let (t1, tn) = (one.target(), many.target());
    let (b1, bn) = (RecordingBackup::default(), RecordingBackup::default());

    let singly: Vec<_> = refs
        .iter()
        .map(|c| t1.apply(c, &content.inner, &b1))
        .collect();
    let batched = tn.apply_batch(&refs, &content, &bn);

    // Which of the changes under a new directory made it depends on which
    // thread came first; everything else, and the count in all, does not.
    let without_writes = |rs: &[Result<Applied, TargetError>]| -> Vec<_> {
        rs.iter().map(|r| r.clone().map(|a| a.backups)).collect()
    };
    let writes = |rs: &[Result<Applied, TargetError>]| -> u64 {
        rs.iter().flatten().map(|a| a.writes).sum()
    };
    assert_eq!(without_writes(&batched), without_writes(&singly));
    assert_eq!(writes(&batched), writes(&singly));
    assert!(
        matches!(&batched[42], Err(TargetError::Transient(m)) if m.contains("unmanaged")),
        "{:?}",
        batched[42]
    );
    assert_eq!(batched.iter().filter(|r| r.is_err()).count(), 1);
    assert_eq!(bn.bytes(), b1.bytes());
    assert_eq!(bn.bytes()[1], b"old 500");
    for c in &changes[..] {
        let path = c.path.as_str();
        if path != "d0/s0/f42" {
            assert_eq!(
                fs::read(many.at(path)).unwrap(),
                fs::read(one.at(path)).unwrap()
            );
            assert_eq!(mode_of(&many.at(path)), mode_of(&one.at(path)), "{path}");
        }
    }
    assert_eq!(
        fs::read(many.at("d0/s0/f42/kept/work")).unwrap(),
        b"human work"
    );
    no_temp_files_under(&many.root);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let readers = content.readers.lock().unwrap().len();
    assert_eq!(
        readers,
        cores.min(4),
        "threads that staged, on {cores} cores"
    );
}

#[test]
fn a_file_where_a_parent_of_many_must_go_is_replaced_whichever_thread_gets_there() {
    let sb = Sandbox::new();
    let t = sb.target();
    fs::write(sb.at("p"), b"in the way").unwrap();
    symlink("missing", sb.at("q")).unwrap();
    let changes: Vec<Change> = (0..1000)
        .map(|i| {
            let parent = ["p", "q"][i % 2];
            create(&format!("{parent}/f{i}"), b"x", 0o644)
        })
        .collect();
    let content = ThreadNoting::default();
    let content = ThreadNoting {
        inner: MapContent::of(&[b"x"]),
        ..content
    };
    let backup = RecordingBackup::default();
    let refs: Vec<&Change> = changes.iter().collect();

    let results = t.apply_batch(&refs, &content, &backup);

    for (c, r) in changes.iter().zip(&results) {
        if c.path.as_str().starts_with("q/") {
            // Behind a link that leads nowhere: each fails, nothing is made.
            assert!(matches!(r, Err(TargetError::Transient(_))), "{r:?}");
            continue;
        }
        assert!(r.is_ok(), "{}: {r:?}", c.path.as_str());
        assert_eq!(fs::read(sb.at(c.path.as_str())).unwrap(), b"x");
    }
    assert!(fs::symlink_metadata(sb.at("p")).unwrap().is_dir());
    assert!(fs::symlink_metadata(sb.at("q")).unwrap().is_symlink());
    assert!(!sb.at("missing").exists());
    // Saved before it was removed, by one thread or by each that saw it.
    let saved = backup.bytes();
    assert!(
        !saved.is_empty() && saved.iter().all(|b| b == b"in the way"),
        "{saved:?}"
    );
    no_temp_files_under(&sb.root);
}

/// Content whose reading, after the name was observed free and before the
/// staged file is committed, plants something at the file's name.
struct Planting {
    inner: MapContent,
    plant: Box<dyn Fn(git2::Oid) + Send + Sync>,
}

impl crate::model::ContentSource for Planting {
    fn read(&self, blob: git2::Oid) -> std::io::Result<Vec<u8>> {
        (self.plant)(blob);
        self.inner.read(blob)
    }
}

#[test]
fn a_name_taken_after_it_was_observed_free_is_backed_up_and_replaced_not_linked_over() {
    let sb = Sandbox::new();
    let t = sb.target();
    assert!(
        t.whole_fs,
        "new files are staged unnamed under a whole-fs sync"
    );
    // The process's first unnamed file finds out how to link, named.
    batch(
        &t,
        &[create("first", b"1", 0o644)],
        &MapContent::of(&[b"1"]),
    );
    let before = sb.sentinel_state();
    let root = sb.root.clone();
    let sentinel = sb.sentinel.join("secret");
    let content = Planting {
        inner: MapContent::of(&[b"declared 1", b"declared 2", b"declared 3"]),
        plant: Box::new(move |blob| {
            if blob == blob_id(b"declared 1") {
                fs::write(root.join("file"), b"planted").unwrap();
            } else if blob == blob_id(b"declared 2") {
                // The first file is staged by now, with no name.
                no_temp_files_under(&root);
                symlink(&sentinel, root.join("link")).unwrap();
            } else {
                fs::create_dir(root.join("dir")).unwrap();
                fs::write(root.join("dir/kept"), b"unmanaged").unwrap();
            }
        }),
    };
    let changes = [
        create("file", b"declared 1", 0o640),
        create("link", b"declared 2", 0o640),
        create("dir", b"declared 3", 0o640),
    ];
    let refs: Vec<&Change> = changes.iter().collect();
    let backup = RecordingBackup::default();

    let results = t.apply_batch(&refs, &content, &backup);

    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    assert_eq!(sb.sentinel_state(), before);
    for (name, bytes) in [("file", b"declared 1"), ("link", b"declared 2")] {
        let meta = fs::symlink_metadata(sb.at(name)).unwrap();
        assert!(meta.is_file(), "{name} is the declared file");
        assert_eq!(fs::read(sb.at(name)).unwrap(), bytes);
        assert_eq!(mode_of(&sb.at(name)), 0o640);
    }
    assert_eq!(
        backup.bytes(),
        vec![b"planted".to_vec()],
        "the planted file"
    );
    // A directory with files in it is a human's to move; it stays whole.
    assert!(
        matches!(&results[2], Err(TargetError::Transient(m)) if m.contains("unmanaged")),
        "{:?}",
        results[2]
    );
    assert_eq!(fs::read(sb.at("dir/kept")).unwrap(), b"unmanaged");
    no_temp_files_under(&sb.root);
}

/// A file system mounted below the root is not the one a sync of the
/// whole root's covers: its new files are made durable one by one, and
/// land there like any.
#[test]
fn new_files_on_a_file_system_mounted_below_the_root_land_there() {
    if !crate::test_gate::can_run(
        rustix::process::geteuid().is_root(),
        "mounting a tmpfs needs root",
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mnt = sb.at("mnt");
    fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !crate::test_gate::can_run(mounted, "cannot mount a tmpfs here") {
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let t = sb.target();
    assert!(t.whole_fs);
    // Past the process's first unnamed file, which finds out how to link.
    batch(
        &t,
        &[create("first", b"1", 0o644)],
        &MapContent::of(&[b"1"]),
    );
    let changes = [
        create("mnt/a", b"on the mount", 0o600),
        create("mnt/sub/b", b"below it", 0o644),
        create("beside", b"on the root's", 0o644),
    ];
    let content = MapContent::of(&[b"on the mount", b"below it", b"on the root's"]);

    let results = batch(&t, &changes, &content);

    assert_eq!(results.len(), 3);
    assert_eq!(fs::read(sb.at("mnt/a")).unwrap(), b"on the mount");
    assert_eq!(mode_of(&sb.at("mnt/a")), 0o600);
    assert_eq!(fs::read(sb.at("mnt/sub/b")).unwrap(), b"below it");
    assert_eq!(fs::read(sb.at("beside")).unwrap(), b"on the root's");
    assert!(
        t.dir_syncs_total() >= 2,
        "the mount's directories synced each"
    );
    no_temp_files_under(&sb.root);
}
