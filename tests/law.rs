//! The convergence law on the real files target: for random desired trees
//! against random hostile live trees (wrong types, symlinks in and out of the
//! root, wrong modes, extra files), one `tend sync` makes the next plan empty
//! and changes nothing outside the root.

mod util;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use proptest::prelude::*;
use util::Env;

/// What a hostile live tree holds at a declared path (or its parent).
#[derive(Debug, Clone)]
enum Hostile {
    Nothing,
    WrongContent(String),
    WrongMode(u32),
    EmptyDir,
    LinkOutside,
    LinkDangling,
    ParentIsFile,
    ParentLinksOutside,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        Just(Hostile::Nothing),
        "[a-z]{0,8}".prop_map(Hostile::WrongContent),
        prop::sample::select(vec![0o600u32, 0o755, 0o777, 0o400]).prop_map(Hostile::WrongMode),
        Just(Hostile::EmptyDir),
        Just(Hostile::LinkOutside),
        Just(Hostile::LinkDangling),
        Just(Hostile::ParentIsFile),
        Just(Hostile::ParentLinksOutside),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 0..3).prop_flat_map(|dirs| {
        prop::sample::select(vec!["x", "y", "z.conf"]).prop_map(move |f| {
            let mut p = dirs.join("/");
            if !p.is_empty() {
                p.push('/');
            }
            p + f
        })
    })
}

/// A desired tree: no declared path lies inside another.
fn tree() -> impl Strategy<Value = BTreeMap<String, (String, u32, Hostile)>> {
    prop::collection::btree_map(
        path(),
        (
            "[ -~]{0,40}",
            prop::sample::select(vec![0o644u32, 0o600, 0o755]),
            hostile(),
        ),
        1..8,
    )
}

fn build_live(env: &Env, desired: &BTreeMap<String, (String, u32, Hostile)>, extras: &[String]) {
    let root = env.root();
    let sentinel = env.sentinel.path();
    for (p, (_, _, h)) in desired {
        let full = root.join(p);
        let parent = full.parent().unwrap().to_path_buf();
        match h {
            Hostile::ParentIsFile | Hostile::ParentLinksOutside if parent != root => {
                if parent.exists() || std::fs::symlink_metadata(&parent).is_ok() {
                    continue;
                }
                std::fs::create_dir_all(parent.parent().unwrap()).unwrap();
                if matches!(h, Hostile::ParentIsFile) {
                    std::fs::write(&parent, "in the way").unwrap();
                } else {
                    // Each link leads somewhere of its own (two declared
                    // paths behind links to one folder would name one
                    // file): a folder that outside the root is the
                    // sentinel's and inside it exists, so it is followed
                    // there.
                    let rel = parent
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('/', "-");
                    let to = sentinel.join(rel);
                    std::fs::create_dir_all(root.join(to.strip_prefix("/").unwrap())).unwrap();
                    std::os::unix::fs::symlink(to, &parent).unwrap();
                }
                continue;
            }
            _ => {}
        }
        if std::fs::symlink_metadata(&parent)
            .map(|m| !m.is_dir())
            .unwrap_or(false)
        {
            continue;
        }
        std::fs::create_dir_all(&parent).unwrap();
        match h {
            Hostile::WrongContent(c) => std::fs::write(&full, c).unwrap(),
            Hostile::WrongMode(m) => {
                std::fs::write(&full, "x").unwrap();
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*m)).unwrap();
            }
            Hostile::EmptyDir => std::fs::create_dir(&full).unwrap(),
            Hostile::LinkOutside => {
                std::os::unix::fs::symlink(sentinel.join("precious"), &full).unwrap()
            }
            Hostile::LinkDangling => {
                std::os::unix::fs::symlink("/nonexistent/target", &full).unwrap()
            }
            _ => {}
        }
    }
    for e in extras {
        let full = root.join(e);
        if desired
            .keys()
            .any(|d| e.starts_with(&format!("{d}/")) || d == e)
        {
            continue;
        }
        if let Some(parent) = full.parent() {
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
        }
        let _ = std::fs::write(&full, "extra");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn one_sync_makes_the_next_plan_empty(desired in tree(), extras in prop::collection::vec(path().prop_map(|p| format!("e/{p}")), 0..4)) {
        // Drop paths nested under other declared paths: a file cannot be a directory.
        let keys: Vec<String> = desired.keys().cloned().collect();
        let desired: BTreeMap<_, _> = desired
            .into_iter()
            .filter(|(p, _)| !keys.iter().any(|k| p.starts_with(&format!("{k}/"))))
            .collect();
        let env = Env::new();
        let mut decl = String::new();
        for (p, (content, mode, _)) in &desired {
            env.repo.write(&format!("content/{p}"), content);
            decl.push_str(&format!("---\nkind: file\npath: {p}\nsource: content/{p}\nmode: \"{mode:04o}\"\n"));
        }
        env.repo.write("all.tend.yaml", decl);
        env.repo.commit("desired");
        build_live(&env, &desired, &extras);
        let before = env.sentinel_snapshot();

        let s = env.tend(&["sync"]);
        prop_assert_eq!(s.code, 0, "{:?}", s);
        let d = env.tend(&["diff"]);
        prop_assert_eq!(d.code, 0, "{:?}", d);
        prop_assert!(d.stdout.is_empty(), "{:?}", d);
        prop_assert_eq!(env.sentinel_snapshot(), before);
        for (p, (content, mode, h)) in &desired {
            // Through a parent that links outside, the file is inside the root at the link's target.
            if matches!(h, Hostile::ParentLinksOutside) {
                continue;
            }
            let full = env.at(p);
            if std::fs::symlink_metadata(full.parent().unwrap()).map(|m| m.file_type().is_symlink()).unwrap_or(false) {
                continue;
            }
            prop_assert_eq!(&std::fs::read_to_string(&full).unwrap(), content);
            prop_assert_eq!(util::mode(&full), *mode);
        }
    }
}
