//! The declarations of a revision already read are kept in the state dir
//! and loaded by the next pass at it; a damaged cache, or one made on
//! another basis (another source path), is read past, never trusted.

mod util;

use util::Env;

fn cache(env: &Env) -> std::path::PathBuf {
    env.state.path().join("declared.cache")
}

#[test]
fn a_damaged_declaration_cache_is_read_past_and_rewritten() {
    let env = Env::new();
    env.repo.write("a.txt", "a").write("sub/b.txt", "b");
    env.repo.commit("one");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 0, "{s:?}");
    let kept = std::fs::read(cache(&env)).unwrap();
    assert!(kept.starts_with(b"tenddecl"), "the cache was written");

    // Damaged: one byte of its body changed. The revision is read again,
    // a drifted file restored, and the cache written whole again.
    let mut bad = kept.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(cache(&env), &bad).unwrap();
    std::fs::write(env.at("a.txt"), "edited").unwrap();
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("a.txt"), "a");
    assert_eq!(std::fs::read(cache(&env)).unwrap(), kept);

    // Garbage of any length is read past too.
    std::fs::write(cache(&env), b"not a cache").unwrap();
    std::fs::remove_file(env.at("sub/b.txt")).unwrap();
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(env.read("sub/b.txt"), "b");
}

#[test]
fn a_cache_made_on_another_basis_is_not_used() {
    let env = Env::new();
    env.repo.write("a.txt", "a").write("sub/b.txt", "b");
    env.repo.commit("one");
    let s = env.tend(&["diff", "--mirror"]);
    assert!(s.stdout.contains("a.txt"), "{s:?}");
    // The same revision mirrored from `sub` declares `b.txt` at the top.
    let s = env.tend(&["diff", "--mirror", "--path", "sub"]);
    assert!(s.stdout.contains("b.txt"), "{s:?}");
    assert!(!s.stdout.contains("a.txt"), "{s:?}");
    assert!(!s.stdout.contains("sub/b.txt"), "{s:?}");
}
