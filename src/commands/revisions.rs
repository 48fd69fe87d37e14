//! Declarations read with no host at hand (`diff --against`, `validate
//! --as-written`): a repository on this host is read directly from its own
//! object database, any other through a throwaway mirror in a temp dir,
//! removed afterwards. No target is started and no state dir is touched.

use std::path::PathBuf;

use super::{Because, Cause, Failure};
use crate::config::Settings;
use crate::declare::{self, Declared, TargetInfo};
use crate::source::{self, Mirror, Snapshot, SourceError, SourceSpec};

/// The target a plugin kind's object is shown under when no config says
/// which exec target serves it: the host decides (`?/flag/beta`).
pub const HOST_PICKS: &str = "?";

pub struct Revisions<'a> {
    settings: &'a Settings,
    local: Option<PathBuf>,
    /// A remote's throwaway mirror lives here; removed on drop.
    temp: Option<tempfile::TempDir>,
}

impl<'a> Revisions<'a> {
    pub fn open(settings: &'a Settings) -> Result<Revisions<'a>, Failure> {
        let local = source::local_repository(&settings.source.repo);
        let temp = match local {
            Some(_) => None,
            None => Some(
                tempfile::Builder::new()
                    .prefix("tend-mirror-")
                    .tempdir()
                    .because(Cause::Io)
                    .map_err(|f| f.context("cannot make a throwaway mirror"))?,
            ),
        };
        Ok(Revisions {
            settings,
            local,
            temp,
        })
    }

    /// The revision `rev` names (`None`: the repository's HEAD). A local
    /// repository takes any revision git names (`origin/main`, `HEAD~1`);
    /// a remote one a branch, tag, ref or full commit id.
    pub fn snapshot(&self, rev: Option<&str>) -> Result<Snapshot, SourceError> {
        if let Some(path) = &self.local {
            return source::snapshot_at(path, rev);
        }
        let dir = self.temp.as_ref().expect("a remote has a temp dir");
        let s = &self.settings.source;
        let spec = SourceSpec {
            repo: s.repo.clone(),
            reference: rev.map(str::to_string),
            timeout: s.timeout,
            auth: s.auth.clone(),
            depth: s.depth,
        };
        let mirror = Mirror::open(dir.path(), spec)?;
        let commit = mirror.fetch()?;
        mirror.snapshot(commit)
    }
}

/// The declaration of `snapshot` as written. Targets are known by name
/// from the settings (`targets:` in a config, `--root`, else one `files`
/// target), none started: a files target serves files and symlinks, an
/// exec target whatever kind it is named for, or the one kind nobody else
/// does. With no config at all, a plugin kind's object goes to
/// [`HOST_PICKS`].
pub fn declare_as_written(
    settings: &Settings,
    config_given: bool,
    snapshot: &Snapshot,
) -> Result<Declared, SourceError> {
    let mut infos: Vec<TargetInfo> = settings
        .targets
        .iter()
        .map(|t| {
            let kinds = t.kind.kinds();
            TargetInfo {
                name: t.name.clone(),
                kinds_unknown: kinds.as_ref().err().map(ToString::to_string),
                kinds: kinds.unwrap_or_default(),
            }
        })
        .collect();
    if !config_given {
        infos.push(TargetInfo {
            name: HOST_PICKS.into(),
            kinds: Vec::new(),
            kinds_unknown: Some("no config: the host's exec target serving the kind".into()),
        });
    }
    let hooks: Vec<String> = settings.hooks.keys().cloned().collect();
    // No key is read here: encrypted sources are checked for their form
    // and, by the tags in their SSH stanzas, for the recipients configured.
    let recipients: Vec<_> = settings
        .secrets
        .recipients
        .iter()
        .filter_map(|r| crate::secrets::parse_recipient(r).ok())
        .collect();
    declare::declare(
        snapshot,
        &declare::Options {
            source_path: &settings.source.path,
            mirror: settings.source.mirror,
            targets: &infos,
            hooks: &hooks,
            max_file_size: declare::DEFAULT_MAX_FILE_SIZE,
            as_written: true,
            // No host at hand: every declaration, unless one was named.
            host: settings.host_named.then_some(&settings.host),
            keyring: None,
            recipients: &recipients,
            decrypt_suffix: settings.source.decrypt_suffix.as_deref(),
        },
    )
}
