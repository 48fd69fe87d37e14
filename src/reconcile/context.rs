//! What a command works with, built from [`Settings`]: the mirror, the
//! targets and the declaration options. `build` is where the I/O happens.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use git2::Oid;

use crate::config::{Settings, TargetKind};
use crate::declare::{self, Declared, TargetInfo};
use crate::model::{ContentSource, Observed, RelPath, ResourceId, Spec};
use crate::source::{BlobReader, Mirror, Snapshot, SourceSpec};
use crate::target::exec::ExecTarget;
use crate::target::files::FilesTarget;
use crate::target::{ChangeSink, Probe, Target};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("target {name}: {message}")]
    Target { name: String, message: String },
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error("source.verify: {0}")]
    Verify(#[from] crate::source::verify::VerifyError),
}

pub struct Context {
    pub settings: Settings,
    pub mirror: Mirror,
    pub targets: BTreeMap<String, Arc<dyn Target>>,
    /// The keys a revision's signature must come from; `None`: no check.
    pub trust: Option<crate::source::verify::TrustAnchors>,
}

impl Context {
    pub fn build(settings: Settings) -> Result<Context, BuildError> {
        // Trust files first: a bad one is named before any target starts.
        let trust = crate::source::verify::TrustAnchors::load(&settings.source.verify)?;
        let mut targets: BTreeMap<String, Arc<dyn Target>> = BTreeMap::new();
        for t in &settings.targets {
            let target: Arc<dyn Target> = match &t.kind {
                TargetKind::Files { root } => {
                    // A missing root is made, as a sidecar's empty volume would be.
                    if !root.exists() {
                        std::fs::create_dir_all(root).map_err(|e| BuildError::Target {
                            name: t.name.clone(),
                            message: format!("cannot create root {}: {e}", root.display()),
                        })?;
                    }
                    let f = FilesTarget::new(&t.name, root, &settings.state_dir).map_err(|e| {
                        BuildError::Target {
                            name: t.name.clone(),
                            message: format!("cannot open root {}: {e}", root.display()),
                        }
                    })?;
                    Arc::new(f)
                }
                TargetKind::Exec { command, timeout } => {
                    let e = ExecTarget::start(&t.name, command, *timeout).map_err(|e| {
                        BuildError::Target {
                            name: t.name.clone(),
                            message: e.to_string(),
                        }
                    })?;
                    Arc::new(e)
                }
            };
            targets.insert(t.name.clone(), target);
        }
        let s = &settings.source;
        let spec = SourceSpec {
            repo: s.repo.clone(),
            reference: s.reference.clone(),
            timeout: s.timeout,
            auth: s.auth.clone(),
        };
        let mirror = Mirror::open(&settings.state_dir, spec)?;
        Ok(Context {
            settings,
            mirror,
            targets,
            trust,
        })
    }

    pub fn target_infos(&self) -> Vec<TargetInfo> {
        self.targets
            .values()
            .map(|t| {
                let kinds = t.kinds();
                TargetInfo {
                    name: t.name().to_string(),
                    kinds_unknown: kinds.as_ref().err().cloned(),
                    kinds: kinds.unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The desired state of a revision.
    pub fn declare(&self, snapshot: &Snapshot) -> Result<Declared, crate::source::SourceError> {
        let infos = self.target_infos();
        let hooks: Vec<String> = self.settings.hooks.keys().cloned().collect();
        let opts = self.declare_options(&infos, &hooks);
        let declared = declare::declare(snapshot, &opts)?;
        snapshot.keep_sizes();
        Ok(declared)
    }

    fn declare_options<'a>(
        &'a self,
        infos: &'a [TargetInfo],
        hooks: &'a [String],
    ) -> declare::Options<'a> {
        declare::Options {
            source_path: &self.settings.source.path,
            mirror: self.settings.source.mirror,
            targets: infos,
            hooks,
            max_file_size: declare::DEFAULT_MAX_FILE_SIZE,
        }
    }

    /// What a declaration depends on besides the revision: two revisions
    /// declared on the same basis can be compared path by path.
    pub fn declare_basis(&self) -> String {
        let hooks: Vec<&String> = self.settings.hooks.keys().collect();
        format!(
            "{:?} {} {:?} {:?}",
            self.settings.source.path,
            self.settings.source.mirror,
            self.target_infos(),
            hooks
        )
    }

    /// `prev` (the desired state of an earlier revision) changed into that
    /// of `snapshot`, given the paths that differ; `None` when it must be
    /// read whole.
    pub fn declare_update(
        &self,
        prev: &Declared,
        snapshot: &Snapshot,
        changed: &[String],
    ) -> Result<Option<declare::Update>, crate::source::SourceError> {
        let infos = self.target_infos();
        let hooks: Vec<String> = self.settings.hooks.keys().cloned().collect();
        let opts = self.declare_options(&infos, &hooks);
        declare::update(prev, snapshot, &opts, changed)
    }

    /// Observes every (identity, target, path, declaration), batched per
    /// target: one observation per item, in the items' order.
    pub fn observe<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a ResourceId, &'a str, &'a RelPath, Option<&'a Spec>)>,
    ) -> Vec<Observed> {
        let mut per_target: BTreeMap<&str, (Vec<usize>, Vec<Probe>)> = BTreeMap::new();
        let mut count = 0;
        for (id, target, path, spec) in items {
            let (at, probes) = per_target.entry(target).or_default();
            at.push(count);
            probes.push(Probe { id, path, spec });
            count += 1;
        }
        let observe = |name: &str, probes: &[Probe]| match self.targets.get(name) {
            Some(target) => target.observe(probes),
            None => {
                let why = format!("target {name:?} is not configured");
                vec![Observed::Unknown(why); probes.len()]
            }
        };
        // One target (the common case): its answers are in the items' order.
        if per_target.len() == 1 {
            let (name, (_, probes)) = per_target.pop_first().expect("one target");
            return observe(name, &probes);
        }
        let mut out = vec![Observed::Absent; count];
        for (name, (at, probes)) in per_target {
            for (i, obs) in at.into_iter().zip(observe(name, &probes)) {
                out[i] = obs;
            }
        }
        out
    }

    /// Sends every target's change notifications to `sink`.
    pub fn subscribe(&self, sink: ChangeSink) {
        for t in self.targets.values() {
            t.subscribe(sink.clone());
        }
    }
}

/// Content of one revision: inline declarations first, then the object
/// database.
pub struct PassContent {
    pub inline: HashMap<Oid, Vec<u8>>,
    pub blobs: BlobReader,
}

impl ContentSource for PassContent {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>> {
        match self.inline.get(&blob) {
            Some(b) => Ok(b.clone()),
            None => self.blobs.read(blob),
        }
    }
}
