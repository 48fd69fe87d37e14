//! SPEC §7, tested with the attacks themselves. Every attack aims at a
//! sentinel directory outside the root, which must never change. CI runs as
//! root, so nothing here relies on permissions.

mod util;

use std::time::{Duration, Instant};

use util::Env;

fn assert_sentinel_intact(env: &Env, before: &[(std::path::PathBuf, Vec<u8>)]) {
    assert_eq!(
        env.sentinel_snapshot(),
        before,
        "the sentinel outside the root changed"
    );
}

#[test]
fn dotdot_and_absolute_paths_are_refused() {
    let env = Env::new();
    let s = env.sentinel.path().display().to_string();
    env.repo.write(
        "evil.tend.yaml",
        format!(
            "kind: file\npath: ../../../../../..{s}/precious\ncontent: pwned\n---\nkind: file\npath: {s}/precious\ncontent: pwned\n---\nkind: file\npath: ok\ncontent: fine\n"
        ),
    );
    env.repo.commit("evil");
    let before = env.sentinel_snapshot();
    let v = env.tend(&["validate"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(
        v.stdout.contains("evil.tend.yaml:1:") && v.stdout.contains("evil.tend.yaml:5:"),
        "{v:?}"
    );
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(env.read("ok"), "fine");
    assert_sentinel_intact(&env, &before);
}

#[test]
fn symlink_in_the_root_pointing_outside_stays_inside() {
    let env = Env::new();
    let s = env.sentinel.path();
    // An absolute and a relative escape, both as parent components.
    std::os::unix::fs::symlink(s, env.at("abs")).unwrap();
    // (The relative one aims at the sentinel's parent, so that read from
    // inside the root the two links do not meet at one place.)
    let above = s.parent().unwrap().to_str().unwrap().to_string();
    std::os::unix::fs::symlink(
        "../../../../../../../..".to_string() + &above,
        env.at("rel"),
    )
    .unwrap();
    // Inside the root, the links' targets exist.
    std::fs::create_dir_all(env.root().join(s.strip_prefix("/").unwrap())).unwrap();
    // And a final component pointing straight at the sentinel file.
    std::os::unix::fs::symlink(s.join("precious"), env.at("last")).unwrap();
    env.repo.write(
        "x.tend.yaml",
        "kind: file\npath: abs/precious\ncontent: pwned1\n---\nkind: file\npath: rel/precious\ncontent: pwned2\n---\nkind: file\npath: last\ncontent: pwned3\n",
    );
    env.repo.commit("x");
    let before = env.sentinel_snapshot();
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_sentinel_intact(&env, &before);
    // Resolved as if the root were `/`: the writes landed inside the root,
    // where the link leads when read from inside it, or (where that does not
    // exist) in a real directory that replaced the dangling link.
    let inside = env
        .root()
        .join(s.strip_prefix("/").unwrap())
        .join("precious");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "pwned1");
    let via_rel = env
        .root()
        .join(above.strip_prefix('/').unwrap())
        .join("precious");
    assert_eq!(std::fs::read_to_string(via_rel).unwrap(), "pwned2");
    // The last component was replaced, not written through.
    assert!(!std::fs::symlink_metadata(env.at("last"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(env.read("last"), "pwned3");
}

#[test]
fn a_symlink_swapped_in_during_apply_never_leads_outside() {
    let env = Env::new();
    let mut decl = String::new();
    for i in 0..300 {
        decl.push_str(&format!(
            "---\nkind: file\npath: d/f{i}\ncontent: \"{i}\"\n"
        ));
    }
    env.repo.write("many.tend.yaml", decl);
    env.repo.commit("many");
    let before = env.sentinel_snapshot();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (root, sentinel, flag) = (
        env.root().to_path_buf(),
        env.sentinel.path().to_path_buf(),
        stop.clone(),
    );
    // Another process keeps swapping `d` between a directory and a symlink
    // to the sentinel while tend applies.
    let swapper = std::thread::spawn(move || {
        let d = root.join("d");
        let mut swaps = 0;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let parked = root.join(format!("parked{swaps}"));
            if std::fs::symlink_metadata(&d)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                let _ = std::fs::rename(&d, &parked);
            } else {
                let _ = std::fs::remove_file(&d);
            }
            let _ = std::os::unix::fs::symlink(&sentinel, &d);
            swaps += 1;
            std::thread::sleep(Duration::from_micros(200));
            let _ = std::fs::remove_file(&d);
        }
        swaps
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        env.tend(&["sync"]);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 10, "the race must actually run ({swaps} swaps)");
    assert_sentinel_intact(&env, &before);
}

#[test]
fn source_may_not_leave_the_repository() {
    let env = Env::new();
    env.repo
        .write("hosts/a/x.tend.yaml", "kind: file\npath: stolen\nsource: ../../../../../../../etc/passwd\n---\nkind: directory\npath: d\nsource: ../../../\n")
        .write("hosts/a/keep", "k");
    env.repo.commit("escape");
    let v = env.tend(&["validate", "--path", "hosts/a"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(v.stdout.contains("leaves the repository"), "{v:?}");
    let r = env.tend(&["sync", "--path", "hosts/a"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(!env.at("stolen").exists());
    assert!(!env.at("d").exists());
}

#[test]
fn a_repository_symlink_may_not_point_out() {
    let env = Env::new();
    env.repo
        .symlink("passwd", "/etc/passwd")
        .symlink("up", "../../../../../../etc/hostname")
        .write("x.tend.yaml", "kind: file\npath: a\nsource: passwd\n---\nkind: file\npath: b\nsource: up\n---\nkind: directory\npath: c\nsource: dir\n")
        .symlink("dir/shadow", "/etc/shadow")
        .write("dir/fine", "fine");
    env.repo.commit("links");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(!env.at("a").exists() && !env.at("b").exists() && !env.at("c/shadow").exists());
    assert_eq!(env.read("c/fine"), "fine");
}

#[test]
fn conflicting_declarations_apply_neither() {
    let env = Env::new();
    env.repo
        .write("one.tend.yaml", "kind: file\npath: etc/x\ncontent: one\n")
        .write(
            "two.tend.yaml",
            "kind: file\npath: etc/x\ncontent: two\n---\nkind: file\npath: etc/y\ncontent: y\n",
        );
    env.repo.commit("conflict");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("one.tend.yaml:1") && r.stderr.contains("two.tend.yaml:1"),
        "{r:?}"
    );
    assert!(!env.at("etc/x").exists());
    assert_eq!(env.read("etc/y"), "y");
    let st = env.tend(&["status"]);
    assert!(st.stdout.contains("Blocked"), "{st:?}");
}

fn many_files(env: &Env, n: usize) {
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: site\n",
    );
    for i in 0..n {
        env.repo.write(&format!("site/f{i}"), format!("{i}"));
    }
    env.repo.commit("site");
    assert_eq!(env.tend(&["sync"]).code, 0);
}

#[test]
fn an_empty_declaration_prunes_nothing() {
    let env = Env::new();
    many_files(&env, 6);
    env.repo.remove("site.tend.yaml").remove("site");
    env.repo.commit("everything gone");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("declares nothing"), "{r:?}");
    assert!((0..6).all(|i| env.at(&format!("site/f{i}")).exists()));
}

#[test]
fn a_commit_deleting_most_files_is_stopped_by_max_prune() {
    let env = Env::new();
    many_files(&env, 10);
    for i in 0..8 {
        env.repo.remove(&format!("site/f{i}"));
    }
    env.repo.commit("delete most");
    // diff says there are differences, held back, not that there are none.
    let d = env.tend(&["diff"]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(d.stderr.contains("8 prunes held"), "{d:?}");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("max_prune"), "{r:?}");
    assert!((0..10).all(|i| env.at(&format!("site/f{i}")).exists()));
    let st = env.tend(&["status"]);
    assert!(st.stdout.contains("Blocked"), "{st:?}");
    let r = env.tend(&["sync", "--allow-mass-prune"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!env.at("site/f0").exists() && env.at("site/f9").exists());
}

/// Runs `tend validate` under a 512 MiB address-space limit.
fn validate_limited(env: &Env) -> (util::Run, Duration) {
    let started = Instant::now();
    let out = std::process::Command::new("prlimit")
        .arg("--as=536870912")
        .arg(util::tend_bin())
        .args(["validate", "--repo", &env.repo.url(), "--root"])
        .arg(env.root())
        .arg("--state-dir")
        .arg(env.state.path())
        .output()
        .expect("prlimit (util-linux) runs");
    let run = util::Run::from(out);
    (run, started.elapsed())
}

#[test]
fn yaml_alias_bomb_is_refused_in_bounded_memory() {
    let env = Env::new();
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (p, c) in ('a'..='l').zip('b'..='m') {
        bomb.push_str(&format!(
            "{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
        ));
    }
    env.repo.write("bomb.tend.yaml", bomb);
    env.repo.commit("bomb");
    let (r, took) = validate_limited(&env);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("bomb.tend.yaml"), "{r:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn deep_nesting_is_refused_in_bounded_memory() {
    let env = Env::new();
    env.repo
        .write("deep.tend.yaml", "[".repeat(20_000) + &"]".repeat(20_000));
    env.repo.write(
        "deep2.tend.yaml",
        "a:\n".to_string()
            + &(1..20_000)
                .map(|i| format!("{}- \n", " ".repeat(i % 200)))
                .collect::<String>(),
    );
    env.repo.commit("deep");
    let (r, took) = validate_limited(&env);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("deep.tend.yaml:1"), "{r:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn invalid_utf8_is_a_clear_error() {
    let env = Env::new();
    env.repo.write(
        "bad.tend.yaml",
        b"kind: file\npath: x\ncontent: \"\xff\xfe\"\n",
    );
    env.repo.commit("bad");
    let v = env.tend(&["validate"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(
        v.stdout.contains("bad.tend.yaml:3: not valid UTF-8"),
        "{v:?}"
    );
}

#[test]
fn a_malformed_file_beside_valid_ones_applies_the_valid_and_prunes_nothing() {
    let env = Env::new();
    env.repo
        .write("good.tend.yaml", "kind: file\npath: good\ncontent: g\n")
        .write("old.tend.yaml", "kind: file\npath: old\ncontent: o\n");
    env.repo.commit("two");
    assert_eq!(env.tend(&["sync"]).code, 0);
    env.repo.remove("old.tend.yaml");
    env.repo
        .write("good.tend.yaml", "kind: file\npath: good\ncontent: g2\n")
        .write("broken.tend.yaml", "kind: file\npath: [unclosed\n");
    env.repo.commit("broken");
    let r = env.tend(&["sync"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("broken.tend.yaml:"), "{r:?}");
    assert_eq!(env.read("good"), "g2");
    assert_eq!(
        env.read("old"),
        "o",
        "nothing is pruned while a declaration is invalid"
    );
}
