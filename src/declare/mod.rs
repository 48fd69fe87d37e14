//! Declarations -> desired resources. Reads every `*.tend.yaml`/`*.tend.yml`
//! under the source path (or mirrors every file), and collects every problem
//! with its file and line instead of stopping at the first.

pub mod cache;
mod depth;
mod error;
mod expand;
mod update;
mod yaml;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use git2::Oid;

use crate::model::{ResourceId, Resources};
use crate::render::quote;
use crate::source::{Entry, EntryMode, Snapshot, SourceError};

pub use error::DeclError;
pub use update::{update, Update};
pub use yaml::message as yaml_message;

/// Largest content file applied (Git LFS and build artefacts are not config).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 << 20;

/// One thing wrong with the declarations, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    /// 0 for a note about a repository path as a whole.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            // A path of the repository, not a line of a file.
            0 => write!(f, "{}: {}", quote::name(&self.file), self.message),
            line => write!(f, "{}:{line}: {}", quote::name(&self.file), self.message),
        }
    }
}

/// What a target can serve, for `target:` selection.
#[derive(Debug, Clone)]
pub struct TargetInfo {
    pub name: String,
    pub kinds: Vec<String>,
    /// Why the kinds are not known (a plugin that is not answering); such a
    /// target is chosen when named, or when it is the only candidate.
    pub kinds_unknown: Option<String>,
}

pub struct Options<'a> {
    pub source_path: &'a str,
    pub mirror: bool,
    pub targets: &'a [TargetInfo],
    pub hooks: &'a [String],
    pub max_file_size: u64,
    /// Read with no host at hand (`diff --against`, `validate
    /// --as-written`): hook names are not looked up in the config, owners
    /// and groups not on this host (they are kept as written, in
    /// [`Declared::owners`]), and a target named by `target:` need not be
    /// configured.
    pub as_written: bool,
    /// The host declarations' `hosts:` selectors pick by; `None` reads
    /// every declaration (no host at hand, none named).
    pub host: Option<&'a crate::model::host::Host>,
    /// The identities `decrypt: age` sources are opened with; `None` when
    /// none are configured (or read as written, where nothing is opened).
    pub keyring: Option<&'a crate::secrets::Keyring>,
    /// Read as written: the public keys each encrypted source must name.
    pub recipients: &'a [crate::secrets::Recipient],
    /// Mirror mode: files ending so are age files, published decrypted.
    pub decrypt_suffix: Option<&'a str>,
}

#[cfg(test)]
impl<'a> Options<'a> {
    /// What the unit tests read with: a host's reading, 1 KiB files at
    /// most, no host identity, keys or suffix.
    fn plain(
        source_path: &'a str,
        mirror: bool,
        targets: &'a [TargetInfo],
        hooks: &'a [String],
    ) -> Options<'a> {
        Options {
            source_path,
            mirror,
            targets,
            hooks,
            max_file_size: 1024,
            as_written: false,
            host: None,
            keyring: None,
            recipients: &[],
            decrypt_suffix: None,
        }
    }
}

/// The desired state of one revision.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Declared {
    pub resources: Resources,
    /// Identities that are declared but cannot be applied (conflicts, bad
    /// sources, missing hooks): `Blocked` with the reason.
    pub blocked: BTreeMap<ResourceId, String>,
    /// The blocked identities whose cause may pass by itself (an identity
    /// file there but unreadable now): `Failed`, retried with backoff.
    pub waiting: BTreeSet<ResourceId>,
    /// A decryption failed on an identity file that could not be read
    /// (missing or unreadable): the revision is read again before each
    /// pass, and never cached, so a key brought back counts at once.
    pub reread: bool,
    pub problems: Vec<Problem>,
    /// What the revision holds that is left out without blocking anything
    /// or holding prune (submodules), sorted by path: warnings for status.
    pub notes: Vec<Problem>,
    /// Bytes of inline `content:`, by blob id.
    pub inline: HashMap<Oid, Vec<u8>>,
    /// Plaintext of the `decrypt: age` sources, by blob id: in memory
    /// only, wiped when the last copy of the revision goes.
    pub secrets: HashMap<Oid, crate::secrets::Plaintext>,
    /// Mirror mode: the repository symlinks mirrored, whose shape (a link,
    /// or a copy of the file it leads to) follows whatever they point to.
    pub links: BTreeSet<String>,
    /// Directories whose `.gitattributes` route paths through Git LFS.
    pub lfs_dirs: Vec<String>,
    /// Read [`Options::as_written`]: the owner and group of each file that
    /// declares one, as written.
    pub owners: BTreeMap<ResourceId, WrittenOwner>,
}

/// A file's `owner:` and `group:` as written (a name or a number).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WrittenOwner {
    pub owner: Option<String>,
    pub group: Option<String>,
}

impl Declared {
    /// A revision with any problem never prunes.
    pub fn is_complete(&self) -> bool {
        self.problems.is_empty()
    }

    /// The blocked identities no problem names: paths of the repository
    /// refused one by one (names no checkout makes, LFS pointers, files
    /// over the limit, paths differing only in case), with their reasons.
    pub fn refused(&self) -> impl Iterator<Item = (&ResourceId, &String)> {
        let named: std::collections::HashSet<&str> = self
            .problems
            .iter()
            .filter_map(|p| p.message.split_once(": ").map(|(id, _)| id))
            .collect();
        self.blocked
            .iter()
            .filter(move |(id, _)| !named.contains(id.as_str()))
    }
}

/// Plugin kinds are identity segments: letters, digits, `.`, `_` and `-`.
pub fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= 63
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_declaration(path: &str) -> bool {
    path.ends_with(".tend.yaml") || path.ends_with(".tend.yml")
}

/// [`Snapshot::lfs_attribute_dirs`] from a walk of the whole tree.
fn lfs_dirs_among(snapshot: &Snapshot, entries: &[Entry]) -> Result<Vec<String>, SourceError> {
    let mut out = Vec::new();
    for e in entries {
        let dir = match e.path.rsplit_once('/') {
            Some((dir, ".gitattributes")) => dir,
            None if e.path == ".gitattributes" => "",
            _ => continue,
        };
        if !matches!(e.mode, EntryMode::File | EntryMode::Executable) {
            continue;
        }
        if snapshot.routes_through_lfs(e.oid)? {
            out.push(dir.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// Reads the desired state of `snapshot`.
pub fn declare(snapshot: &Snapshot, opts: &Options) -> Result<Declared, SourceError> {
    let walk = snapshot.walk(opts.source_path)?;
    let entries = walk.entries;
    let whole_tree = opts
        .source_path
        .split('/')
        .all(|p| p.is_empty() || p == ".");
    let lfs_dirs = if whole_tree {
        lfs_dirs_among(snapshot, &entries)?
    } else {
        snapshot.lfs_attribute_dirs()?
    };
    let mut out = expand::Builder::new(snapshot, opts, lfs_dirs.clone());
    let mut links = BTreeSet::new();
    if opts.mirror {
        links = entries
            .iter()
            .filter(|e| e.mode == EntryMode::Symlink)
            .map(|e| e.path.clone())
            .collect();
        out.reserve_mirrored(entries.len());
        for entry in entries {
            out.mirror_entry(entry);
        }
        for refused in walk.refused {
            out.mirror_refused(refused);
        }
    } else {
        for entry in entries.iter().filter(|e| is_declaration(&e.path)) {
            out.declaration_file(entry);
        }
        // Only declaration files are read here: a refused one, or a
        // refused directory that may hold some, is said so.
        for refused in walk.refused {
            out.unread(refused, is_declaration);
        }
    }
    let mut declared = out.finish();
    declared.lfs_dirs = lfs_dirs;
    declared.links = links;
    Ok(declared)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cache;
#[cfg(test)]
mod tests_structured;
#[cfg(test)]
mod tests_update;
