//! A mirror under the state dir that lost objects (a loose object or a
//! whole pack deleted from it) heals at the next sync: the repository is
//! fetched again into a new mirror, swapped in, and status says so. (From a
//! repository on this host whose objects can be linked, the next fetch
//! links the lost ones back; such a source is made to transfer here with
//! an alternates file, as a remote would.)

mod util;

use util::Env;

fn assert_repaired(env: &Env, s: &util::Run) {
    assert_eq!(s.code, 0, "{s:?}");
    assert!(s.stderr.contains("mirror repaired"), "{s:?}");
    let status = env.status();
    let repaired = status["source"]["repaired"].as_str().unwrap_or_default();
    assert!(repaired.contains("fetched again"), "{status}");
    let text = env.tend(&["status"]);
    assert!(text.stdout.contains("mirror repaired"), "{text:?}");
}

/// Fetches from the test repository go through the transport, as from a
/// remote: a repository borrowing objects (an alternates file, empty) is
/// never linked from.
fn transfer_only(env: &Env) {
    std::fs::write(env.repo.path().join(".git/objects/info/alternates"), "").unwrap();
}

#[test]
fn a_mirror_that_lost_a_linked_loose_object_heals_at_the_next_sync() {
    let env = Env::new();
    env.repo.write("a.txt", "a").write("b.txt", "b");
    env.repo.commit("one");
    assert_eq!(env.tend(&["sync", "--mirror"]).code, 0);
    let blob = env.repo.git(&["rev-parse", "HEAD:a.txt"]);
    let loose = env
        .mirror_dir()
        .join("objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    std::fs::remove_file(&loose).unwrap();
    // A hand edit makes the lost blob needed.
    std::fs::write(env.at("a.txt"), "edited").unwrap();

    // Linked again from the repository, which still has it.
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(loose.exists());
    assert_eq!(env.read("a.txt"), "a");
    // Once more, from a repository that cannot be linked from: the mirror
    // is fetched again.
    transfer_only(&env);
    std::fs::remove_file(&loose).unwrap();
    std::fs::write(env.at("a.txt"), "edited").unwrap();
    let s = env.tend(&["sync", "--mirror"]);
    assert_repaired(&env, &s);
    assert_eq!(env.read("a.txt"), "a");
    // Healed for good: the next sync has nothing to repair.
    std::fs::write(env.at("a.txt"), "edited again").unwrap();
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(!s.stderr.contains("lost objects"), "{s:?}");
    assert_eq!(env.read("a.txt"), "a");
}

#[test]
fn a_mirror_that_lost_its_pack_heals_and_keeps_tend_refs() {
    let env = Env::new();
    env.repo.write("conf/x", "x").write("conf/y", "y");
    env.repo.commit("one");
    env.repo.git(&["gc", "-q"]);
    transfer_only(&env);
    assert_eq!(env.tend(&["sync", "--mirror"]).code, 0);
    let pack_dir = env.mirror_dir().join("objects/pack");
    let mut removed = 0;
    for e in std::fs::read_dir(&pack_dir).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
        removed += 1;
    }
    assert!(removed >= 2, "the mirror held a pack");
    // A new commit lands too: the repaired mirror has it.
    env.repo.write("conf/z", "z");
    env.repo.commit("two");
    std::fs::remove_file(env.at("conf/x")).unwrap();

    let s = env.tend(&["sync", "--mirror"]);
    assert_repaired(&env, &s);
    assert_eq!(env.read("conf/x"), "x");
    assert_eq!(env.read("conf/z"), "z");
    let refs = std::process::Command::new("git")
        .args(["for-each-ref", "refs/tend/"])
        .current_dir(env.mirror_dir())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&refs.stdout).contains("refs/tend/resolved/"),
        "{refs:?}"
    );
    // No temp dir of the repair is left beside the mirror.
    let left: Vec<_> = std::fs::read_dir(env.state.path().join("mirrors"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
