//! The mirror itself: where it lives, that it is bare, what survives without
//! the network, locking between fetchers, timeouts and redacted errors.

use std::time::Duration;

use super::{fetched, oid, spec, TestRepo};
use crate::source::{Mirror, SourceError};

fn simple_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("hello.txt", "hello\n");
    repo.commit("first");
    repo
}

#[test]
fn mirror_is_bare_and_lives_under_the_state_dir() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let (mirror, _) = fetched(state.path(), &repo, None);
    assert!(mirror.dir().starts_with(state.path().join("mirrors")));
    assert!(mirror
        .dir()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("repo-"));
    let opened = git2::Repository::open_bare(mirror.dir()).unwrap();
    assert!(opened.is_bare());
    assert!(!mirror.dir().join("hello.txt").exists(), "no work tree");
    // No temp dir is left behind by creation.
    let leftovers: Vec<_> = std::fs::read_dir(state.path().join("mirrors"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn another_address_gets_another_mirror() {
    let a = simple_repo();
    let b = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let (ma, ca) = fetched(state.path(), &a, None);
    let (mb, cb) = fetched(state.path(), &b, None);
    assert_ne!(ma.dir(), mb.dir());
    // Each mirror holds only its own repository's commit.
    assert!(ma.snapshot(cb).is_err() || ca == cb);
    assert!(mb.snapshot(ca).is_err() || ca == cb);
}

#[test]
fn mirror_of_another_address_is_refused() {
    let a = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let (ma, _) = fetched(state.path(), &a, None);
    // Simulate a directory that was written for another address.
    let mut config = git2::Repository::open_bare(ma.dir())
        .unwrap()
        .config()
        .unwrap();
    config
        .set_str("tend.url", "https://elsewhere.example/r.git")
        .unwrap();
    let err = Mirror::open(state.path(), spec(&a.url(), None)).unwrap_err();
    assert!(matches!(err, SourceError::MirrorMismatch { .. }), "{err:?}");
}

#[test]
fn resolved_works_from_a_second_handle_without_the_remote() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let reader = Mirror::open(state.path(), spec(&repo.url(), None)).unwrap();
    assert_eq!(reader.resolved().unwrap(), None, "nothing fetched yet");

    let (_fetcher, commit) = fetched(state.path(), &repo, None);
    // The remote goes away; a reader (as `tend diff` beside the daemon)
    // still knows the last fetched revision and can read it.
    std::fs::rename(repo.path(), repo.outside().join("gone")).unwrap();
    assert_eq!(reader.resolved().unwrap(), Some(commit));
    let snap = reader.snapshot(commit).unwrap();
    let entry = snap.entry("hello.txt").unwrap().unwrap();
    assert_eq!(snap.read(entry.oid).unwrap(), b"hello\n");

    let err = reader.fetch().unwrap_err();
    assert!(matches!(err, SourceError::Fetch { .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(
        reader.resolved().unwrap(),
        Some(commit),
        "a failed fetch keeps the last good state"
    );
}

#[test]
fn resolved_belongs_to_the_configured_ref() {
    let repo = simple_repo();
    repo.git(&["checkout", "-q", "-b", "other"]);
    repo.write("other.txt", "x\n");
    repo.commit("other");
    let state = tempfile::tempdir().unwrap();
    fetched(state.path(), &repo, Some("main"));
    let other = Mirror::open(state.path(), spec(&repo.url(), Some("other"))).unwrap();
    assert_eq!(
        other.resolved().unwrap(),
        None,
        "main's commit is not other's resolution"
    );
}

#[test]
fn concurrent_fetchers_take_turns() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let url = repo.url();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (state, url) = (state.path().to_path_buf(), url.clone());
            std::thread::spawn(move || {
                Mirror::open(&state, spec(&url, None)).and_then(|m| m.fetch())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for result in &results {
        assert_eq!(result.as_ref().unwrap(), &oid(&repo.head()));
    }
}

#[test]
fn a_held_fetch_lock_makes_fetch_wait_then_give_up() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let mut s = spec(&repo.url(), None);
    s.timeout = Duration::from_millis(300);
    let mirror = Mirror::open(state.path(), s).unwrap();
    let lock = std::fs::File::create(mirror.dir().join("tend-fetch.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(matches!(err, SourceError::Busy { .. }), "{err:?}");
    drop(lock);
    // Once the lock is free a fetch goes through. A second handle on the
    // same mirror, with a generous timeout: 300 ms for a whole fetch would
    // fail on a slow machine for reasons unrelated to the lock.
    let relaxed = Mirror::open(state.path(), spec(&repo.url(), None)).unwrap();
    assert_eq!(relaxed.dir(), mirror.dir(), "the same mirror");
    assert_eq!(relaxed.fetch().unwrap(), oid(&repo.head()));
}

#[test]
fn a_fetch_past_its_deadline_is_a_timeout() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let mut s = spec(&repo.url(), None);
    s.timeout = Duration::ZERO;
    let mirror = Mirror::open(state.path(), s).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert_eq!(mirror.resolved().unwrap(), None);
}

#[test]
fn errors_never_show_credentials() {
    let state = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: the connection is refused at once.
    let url = "https://deploy:hunter2-token@127.0.0.1:1/ops/hosts.git";
    let mut s = spec(url, None);
    s.timeout = Duration::from_secs(10);
    let mirror = Mirror::open(state.path(), s).unwrap();
    assert!(!mirror.url().contains("hunter2"));
    assert!(!format!("{mirror:?}").contains("hunter2"));
    let config = git2::Repository::open_bare(mirror.dir())
        .unwrap()
        .config()
        .unwrap();
    assert!(!config.get_string("tend.url").unwrap().contains("hunter2"));
    let err = mirror.fetch().unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("https://***@127.0.0.1:1/ops/hosts.git"),
        "{shown}"
    );
}

#[test]
fn unreadable_token_file_is_reported_without_a_connection() {
    let state = tempfile::tempdir().unwrap();
    let mut s = spec("https://127.0.0.1:1/r.git", None);
    s.auth.token_file = Some(state.path().join("missing-token"));
    let err = Mirror::open(state.path(), s).unwrap().fetch().unwrap_err();
    assert!(
        matches!(err, SourceError::Auth { ref reason, .. } if reason.contains("token_file")),
        "{err:?}"
    );
}

#[test]
fn a_transfer_outlasting_its_deadline_is_cut_off() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    // Objects of a local repository are linked, not transferred, unless it
    // borrows objects from elsewhere: then libgit2 packs what is new.
    transfer_only(&repo);
    let (_, first) = fetched(state.path(), &repo, None);
    // 8 MB that do not compress: packing and indexing take far longer than 50 ms.
    let data: Vec<u8> = (0..8_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(repo.path().join("big.bin"), data).unwrap();
    repo.commit("big");
    let mut s = spec(&repo.url(), None);
    s.timeout = Duration::from_millis(50);
    let mirror = Mirror::open(state.path(), s).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("50ms"), "{err}");
    assert_eq!(mirror.resolved().unwrap(), Some(first));
}

/// Makes fetches from `repo` go through libgit2's transport instead of
/// taking its objects: a repository that borrows objects (an alternates
/// file, empty here) is never linked from.
fn transfer_only(repo: &TestRepo) {
    std::fs::write(repo.path().join(".git/objects/info/alternates"), "").unwrap();
}

/// The inode numbers of the pack files under `objects/pack` of `git_dir`.
fn pack_inodes(git_dir: &std::path::Path) -> std::collections::BTreeSet<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(git_dir.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .map(|p| std::fs::metadata(p).unwrap().ino())
        .collect()
}

#[test]
fn a_first_fetch_from_this_host_links_the_packs_and_later_fetches_add_to_them() {
    let repo = simple_repo();
    repo.write("more.txt", "more\n");
    repo.commit("second");
    repo.git(&["gc", "-q"]);
    repo.write("loose.txt", "loose\n");
    let loose = oid(&repo.commit("third: loose objects only"));
    let source_packs = pack_inodes(&repo.path().join(".git"));
    assert!(!source_packs.is_empty());

    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    assert_eq!(commit, loose);
    let linked = pack_inodes(mirror.dir());
    assert!(
        source_packs.is_subset(&linked),
        "the source's packs are shared, not rebuilt: {source_packs:?} vs {linked:?}"
    );
    let snapshot = mirror.snapshot(commit).unwrap();
    for (path, content) in [("more.txt", "more\n"), ("loose.txt", "loose\n")] {
        let entry = snapshot.entry(path).unwrap().expect(path);
        assert_eq!(snapshot.read(entry.oid).unwrap(), content.as_bytes());
    }

    // A later commit arrives by an ordinary fetch.
    repo.write("hello.txt", "changed\n");
    let next = oid(&repo.commit("fourth"));
    assert_eq!(mirror.fetch().unwrap(), next);
    assert!(mirror.snapshot(next).is_ok());
}

/// The names of the files under `objects/pack` of `git_dir`.
fn pack_files(git_dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(git_dir.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn packs_in(git_dir: &std::path::Path) -> usize {
    pack_files(git_dir)
        .iter()
        .filter(|n| n.ends_with(".pack"))
        .count()
}

/// Every file of `commit`, read through `snapshot`.
fn read_all(snapshot: &crate::source::Snapshot) -> usize {
    let entries = snapshot.walk("").unwrap().entries;
    for entry in &entries {
        snapshot.read(entry.oid).unwrap();
    }
    entries.len()
}

#[test]
fn many_fetches_keep_the_packs_few_and_every_object_readable() {
    use crate::source::packs::MOST;
    let repo = TestRepo::new();
    // A first history big enough that its pack stays the largest.
    let mut noise = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..200 {
        let body: String = (0..64)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                format!("{noise:016x}")
            })
            .collect();
        repo.write(&format!("base/{i}.txt"), &body);
    }
    let first = oid(&repo.commit("base"));
    repo.git(&["gc", "-q"]);
    // Each fetch transfers a pack, as from a remote.
    transfer_only(&repo);
    let state = tempfile::tempdir().unwrap();
    let (mirror, fetched_first) = fetched(state.path(), &repo, None);
    assert_eq!(fetched_first, first);
    let base = pack_inodes(mirror.dir());
    assert_eq!(base.len(), 1, "{:?}", pack_files(mirror.dir()));

    let mut commits = vec![first];
    let mut early = None;
    let mut counts = Vec::new();
    for i in 0..MOST + 10 {
        repo.write(&format!("n/{i}.txt"), format!("change {i}\n"));
        let mut commit = oid(&repo.commit(&format!("change {i}")));
        if i == 5 {
            // History rewritten: the fetched commit is reachable from no
            // ref once the next fetch moves the branch.
            assert_eq!(mirror.fetch().unwrap(), commit);
            commits.push(commit);
            repo.git(&["commit", "-q", "--amend", "-m", "change 5, rewritten"]);
            commit = oid(&repo.head());
        }
        assert_eq!(mirror.fetch().unwrap(), commit);
        commits.push(commit);
        counts.push(packs_in(mirror.dir()));
        if i == 3 {
            // A reader that opened its revision before any roll-up.
            early = Some((mirror.snapshot(commit).unwrap(), commit));
        }
    }
    assert!(
        counts.windows(2).take(MOST / 2).all(|w| w[1] > w[0]),
        "each fetch adds a pack: {counts:?}"
    );
    assert!(
        counts.iter().all(|&n| n <= MOST),
        "at most {MOST} packs after any fetch: {counts:?}"
    );
    assert!(
        counts.windows(2).any(|w| w[1] < w[0]) && *counts.last().unwrap() < 15,
        "the small packs were rolled into one: {counts:?}"
    );
    assert!(
        base.is_subset(&pack_inodes(mirror.dir())),
        "the largest pack is left as it was"
    );
    // Nothing lost: every revision fetched, the rewritten-away one too,
    // reads whole through a fresh handle.
    for commit in &commits {
        let snapshot = mirror.snapshot(*commit).unwrap();
        assert!(read_all(&snapshot) >= 200, "{commit}");
    }
    let (early, commit) = early.unwrap();
    assert_eq!(
        read_all(&early),
        204,
        "a handle opened before the roll-up still reads {commit}"
    );
    // No temp files or orphaned halves are left in the pack folder.
    let files = pack_files(mirror.dir());
    for name in &files {
        let stem = name.rsplit_once('.').map(|(stem, _)| stem).unwrap();
        assert!(
            files.contains(&format!("{stem}.pack")) && files.contains(&format!("{stem}.idx")),
            "{name} in {files:?}"
        );
    }
}

#[test]
fn a_local_repository_that_is_not_there_is_named_as_missing() {
    let state = tempfile::tempdir().unwrap();
    let gone = state.path().join("no-such-repo");
    for address in [
        gone.display().to_string(),
        format!("file://{}", gone.display()),
    ] {
        let mirror = Mirror::open(state.path(), spec(&address, None)).unwrap();
        let err = mirror.fetch().unwrap_err().to_string();
        assert!(
            err.contains("no repository at") && err.contains("no-such-repo"),
            "{address}: {err}"
        );
    }
}

#[test]
fn every_fetch_from_a_local_repository_takes_only_the_objects_it_lacks() {
    let repo = simple_repo();
    let state = tempfile::tempdir().unwrap();
    let (mirror, _) = fetched(state.path(), &repo, None);
    // New loose objects are linked, not packed by the transport.
    repo.write("second.txt", "second\n");
    repo.commit("second");
    assert_eq!(mirror.fetch().unwrap(), oid(&repo.head()));
    assert_eq!(packs_in(mirror.dir()), 0, "{:?}", pack_files(mirror.dir()));
    let blob = repo.git(&["rev-parse", "HEAD:second.txt"]);
    assert!(mirror
        .dir()
        .join("objects")
        .join(&blob[..2])
        .join(&blob[2..])
        .exists());
    // A repack in the source holds nothing new: it is not taken, and is
    // remembered as looked at.
    repo.git(&["gc", "-q"]);
    assert_eq!(mirror.fetch().unwrap(), oid(&repo.head()));
    assert_eq!(packs_in(mirror.dir()), 0, "{:?}", pack_files(mirror.dir()));
    let seen = std::fs::read_to_string(mirror.dir().join("tend-seen-packs")).unwrap();
    assert!(
        seen.starts_with("pack-") && seen.trim_end().ends_with(".idx"),
        "{seen}"
    );
    // A pushed pack holding new objects is taken whole.
    repo.write("third.txt", "third\n");
    repo.commit("third");
    repo.git(&["repack", "-q"]);
    assert_eq!(mirror.fetch().unwrap(), oid(&repo.head()));
    assert_eq!(packs_in(mirror.dir()), 1, "{:?}", pack_files(mirror.dir()));
    let snapshot = mirror.snapshot(oid(&repo.head())).unwrap();
    assert_eq!(read_all(&snapshot), 3);
}
