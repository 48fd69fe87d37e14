//! A pass over more resources than a target observes at once (the files
//! target takes 4096 at a time), across two targets, with a member no
//! longer declared among them: each resource is judged by what was seen
//! at its own path, and nothing else.

mod util;

use util::Env;

/// Files under `big/` in the repository, past one batch of observations.
const FILES: usize = 9200;

fn name(i: usize) -> String {
    format!("big/f{i:04}")
}

#[test]
fn every_answer_of_a_batched_pass_stays_with_its_resource() {
    let env = Env::new();
    for i in 0..FILES {
        env.repo.write(&name(i), format!("{i}\n"));
    }
    env.repo
        .write(
            "a.tend.yaml",
            "kind: directory\npath: big\nsource: big/\ntarget: a\n",
        )
        .write(
            "b.tend.yaml",
            "kind: file\npath: x\ncontent: \"x\\n\"\ntarget: b\n",
        );
    env.repo.commit("many files in a, one in b");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = env.config(&format!(
        "source:\n  repo: {}\n  ref: main\ntargets:\n  a: {{type: files, root: {}}}\n  b: {{type: files, root: {}}}\nstate_dir: {}\n",
        env.repo.url(),
        a.path().display(),
        b.path().display(),
        env.state.path().join("s").display()
    ));
    let cfg = cfg.to_str().unwrap();
    let r = env.raw(&["sync", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!("{} applied", FILES + 1)),
        "{r:?}"
    );

    // One file past the first batch, and the other target's file, edited
    // by hand: those two differ, no other.
    let late = a.path().join(name(9100));
    std::fs::write(&late, "edited\n").unwrap();
    std::fs::write(b.path().join("x"), "edited\n").unwrap();
    let d = env.raw(&["diff", "-c", cfg]);
    assert_eq!(d.code, 1, "{d:?}");
    let changed: Vec<&str> = d
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("--- live/"))
        .collect();
    assert_eq!(
        changed,
        [&*format!("a/file/{}", name(9100)), "b/file/x"],
        "{d:?}"
    );

    // A file no longer declared is pruned in the same pass that puts the
    // edited ones back.
    env.repo.remove(&name(5));
    env.repo.commit("one file less");
    let r = env.raw(&["sync", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("2 applied, 1 pruned"), "{r:?}");
    assert!(!a.path().join(name(5)).exists());
    assert_eq!(std::fs::read_to_string(&late).unwrap(), "9100\n");
    assert_eq!(std::fs::read_to_string(b.path().join("x")).unwrap(), "x\n");
    let d = env.raw(&["diff", "-c", cfg]);
    assert_eq!(d.code, 0, "{d:?}");
}
