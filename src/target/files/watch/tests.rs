//! A watch on real directories: it follows the live root when that moves,
//! told of the managed set or of no change at all.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::FilesWatch;
use crate::model::ResourceId;
use crate::target::{Recheck, Subscription};

#[test]
fn a_moved_root_is_watched_whole_at_the_next_patch() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for root in [&one, &two] {
        std::fs::create_dir_all(root.join("etc/app")).unwrap();
    }
    let live = Arc::new(Mutex::new(None::<PathBuf>));
    let root = live.clone();
    let mut w = FilesWatch::start(
        Box::new(move || root.lock().unwrap().clone()),
        Arc::new(|_| {}),
    );
    let id = ResourceId::new("files", "file", "etc/app/a");
    let path = "etc/app/a";
    // Nothing published yet: the managed set is kept, nothing watched.
    assert_eq!(w.manage(&mut [(&id, path)].into_iter()), Recheck::Nothing);
    assert_eq!(w.describe(), "watching 0 directories");
    // Published: the next patch, of nothing, watches the tree and asks to
    // look again at what its watches began after.
    *live.lock().unwrap() = Some(one.clone());
    assert_eq!(
        w.patch(&mut std::iter::empty()),
        Recheck::Keys(vec![id.clone()])
    );
    assert_eq!(w.describe(), "watching 3 directories");
    assert!(w.healthy());
    // The same root again: nothing new.
    assert_eq!(w.patch(&mut std::iter::empty()), Recheck::Nothing);
    // Another tree: watched instead.
    *live.lock().unwrap() = Some(two);
    assert_eq!(
        w.patch(&mut std::iter::empty()),
        Recheck::Keys(vec![id.clone()])
    );
    assert_eq!(w.describe(), "watching 3 directories");
    // No longer managed: its directories stay watched until the next
    // whole managed set, which has none.
    assert_eq!(w.patch(&mut [(&id, None)].into_iter()), Recheck::Nothing);
    assert_eq!(w.manage(&mut std::iter::empty()), Recheck::Nothing);
    assert_eq!(w.describe(), "watching 0 directories");
}
