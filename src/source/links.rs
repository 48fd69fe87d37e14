//! Following the repository's own symlinks to a file, the way a checkout
//! would, while refusing any link that leads out of the repository: tend
//! never applies content from outside it (SPEC §7).

use std::collections::VecDeque;
use std::rc::Rc;

use super::snapshot::{normalize, Found};
use super::{Entry, EntryMode, Snapshot, SourceError};

/// As Linux's MAXSYMLINKS.
const MAX_LINKS: usize = 40;
/// A link target longer than PATH_MAX is hostile, not a path.
const MAX_TARGET: u64 = 4096;

/// A link met on the way, kept to name it when its target escapes.
struct Link {
    path: String,
    target: String,
}

impl Snapshot {
    /// Follows symlinks in every component of `path` (relative targets, at
    /// most 40 hops) to a regular file. A link with an absolute target, or
    /// one whose `..` climbs above the repository root, is
    /// [`SourceError::Escapes`] naming the path and the link; `..` in `path`
    /// itself above the root is refused the same way. A missing target is
    /// [`SourceError::NotFound`].
    pub fn resolve(&self, path: &str) -> Result<Entry, SourceError> {
        if path.contains('\0') {
            return Err(SourceError::InvalidPath {
                path: path.to_string(),
                reason: "contains a NUL byte".into(),
            });
        }
        if path.starts_with('/') {
            return Err(SourceError::Escapes {
                path: path.to_string(),
                link: None,
                target: path.to_string(),
            });
        }
        let mut pending: VecDeque<(String, Option<Rc<Link>>)> =
            components(path).map(|c| (c.to_string(), None)).collect();
        let mut resolved: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some((component, via)) = pending.pop_front() {
            if component == ".." {
                if resolved.pop().is_none() {
                    let (link, target) = match via {
                        Some(link) => (Some(link.path.clone()), link.target.clone()),
                        None => (None, path.to_string()),
                    };
                    return Err(SourceError::Escapes {
                        path: path.to_string(),
                        link,
                        target,
                    });
                }
                continue;
            }
            resolved.push(component);
            let current = resolved.join("/");
            let entry = match self.lookup(&current)? {
                None => {
                    return Err(SourceError::NotFound {
                        path: path.to_string(),
                        revision: self.revision(),
                    })
                }
                Some(Found::Directory) => continue,
                Some(Found::Entry(entry)) => entry,
            };
            match entry.mode {
                EntryMode::File | EntryMode::Executable if pending.is_empty() => return Ok(entry),
                EntryMode::File | EntryMode::Executable => {
                    return Err(SourceError::NotADirectory { path: current });
                }
                EntryMode::Submodule => return Err(SourceError::Submodule { path: current }),
                EntryMode::Symlink => {
                    hops += 1;
                    if hops > MAX_LINKS {
                        return Err(SourceError::TooManyLinks {
                            path: path.to_string(),
                        });
                    }
                    let target = self.link_target(&entry)?;
                    resolved.pop();
                    if target.starts_with('/') {
                        return Err(SourceError::Escapes {
                            path: path.to_string(),
                            link: Some(current),
                            target,
                        });
                    }
                    let link = Rc::new(Link {
                        path: current,
                        target: target.clone(),
                    });
                    // The target's components go first, resolved relative to
                    // the directory holding the link, then the rest of the path.
                    for part in components(&target).rev() {
                        pending.push_front((part.to_string(), Some(Rc::clone(&link))));
                    }
                }
            }
        }
        // Every component was consumed without reaching a file.
        Err(SourceError::IsDirectory {
            path: normalize_lossy(path),
        })
    }

    /// The target of the symlink `link` when it resolves inside `within`
    /// (a directory, `""` for the whole repository) all the way: relative,
    /// every `..` and every link followed on the way staying inside it.
    /// Its end may be a file, a directory, or nothing at all (a dangling
    /// link, kept as one): whoever reads through the published link finds
    /// only what is published beside it, or nothing. `None` when it leaves
    /// `within`; an error when its target is not a path or has more than
    /// 40 links on the way.
    pub fn link_inside(&self, link: &Entry, within: &str) -> Result<Option<String>, SourceError> {
        let target = self.link_target(link)?;
        if target.starts_with('/') {
            return Ok(None);
        }
        let floor = components(within).count();
        let mut resolved: Vec<String> = components(&link.path).map(str::to_string).collect();
        resolved.pop();
        let mut pending: VecDeque<String> = components(&target).map(str::to_string).collect();
        let (mut hops, mut missing) = (1, false);
        while let Some(component) = pending.pop_front() {
            if component == ".." {
                if resolved.len() <= floor {
                    return Ok(None);
                }
                resolved.pop();
                continue;
            }
            resolved.push(component);
            if missing {
                // Past a missing component, only where the rest leads counts.
                continue;
            }
            let entry = match self.lookup(&resolved.join("/"))? {
                None => {
                    missing = true;
                    continue;
                }
                Some(Found::Directory) => continue,
                Some(Found::Entry(entry)) => entry,
            };
            if entry.mode != EntryMode::Symlink {
                // A file or submodule in the middle leads nowhere.
                missing = !pending.is_empty();
                continue;
            }
            hops += 1;
            if hops > MAX_LINKS {
                return Err(SourceError::TooManyLinks {
                    path: link.path.clone(),
                });
            }
            let next = self.link_target(&entry)?;
            if next.starts_with('/') {
                return Ok(None);
            }
            resolved.pop();
            for part in components(&next).rev() {
                pending.push_front(part.to_string());
            }
        }
        Ok(Some(target))
    }

    fn link_target(&self, link: &Entry) -> Result<String, SourceError> {
        let invalid = |reason: &str| SourceError::InvalidPath {
            path: link.path.clone(),
            reason: format!("symlink target {reason}"),
        };
        if self.size(link.oid)? > MAX_TARGET {
            return Err(invalid("is longer than 4096 bytes"));
        }
        let bytes = self.read(link.oid)?;
        let target = String::from_utf8(bytes).map_err(|_| invalid("is not valid UTF-8"))?;
        if target.is_empty() || target.contains('\0') {
            return Err(invalid("is empty or contains a NUL byte"));
        }
        Ok(target)
    }
}

fn components(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

fn normalize_lossy(path: &str) -> String {
    normalize(path).unwrap_or_else(|_| path.to_string())
}
