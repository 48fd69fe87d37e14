//! The directories a watch needs: those holding managed paths, up to the
//! root.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Whether the directory holding `path` under `root` is one of `dirs`.
pub(super) fn parent_in(root: &Path, path: &str, dirs: &HashSet<PathBuf>) -> bool {
    if dirs.is_empty() {
        return false;
    }
    let full = root.join(path);
    full.parent().is_some_and(|d| dirs.contains(d))
}

/// Calls `visit` with each directory holding `path` under `root`, from its
/// parent up to the root itself, while `visit` returns true.
pub(super) fn each_dir_up(root: &Path, path: &str, mut visit: impl FnMut(&Path) -> bool) {
    let full = root.join(path);
    let mut dir = full.parent();
    while let Some(d) = dir {
        if !visit(d) || d == root {
            break;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_visited_up_to_the_root_while_asked() {
        let path = "a/b/c.txt";
        let mut seen = Vec::new();
        each_dir_up(Path::new("/r"), path, |d| {
            seen.push(d.to_path_buf());
            true
        });
        assert_eq!(seen, ["/r/a/b", "/r/a", "/r"].map(PathBuf::from));
        let mut seen = Vec::new();
        each_dir_up(Path::new("/r"), path, |d| {
            seen.push(d.to_path_buf());
            d != Path::new("/r/a")
        });
        assert_eq!(seen, ["/r/a/b", "/r/a"].map(PathBuf::from));
    }
}
