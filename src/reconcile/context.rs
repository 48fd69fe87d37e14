//! What a command works with, built from [`Settings`]: the mirror, the
//! targets and the declaration options. `build` is where the I/O happens.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use git2::Oid;

use super::clock::{Clock, SystemClock};
use crate::config::{Settings, TargetKind};
use crate::declare::{self, Declared, TargetInfo};
use crate::model::role::Fence;
use crate::model::{ContentSource, Observed, RelPath, ResourceId, Spec};
use crate::source::{BlobReader, Mirror, Snapshot, SourceSpec};
use crate::target::etcd::EtcdTarget;
use crate::target::exec::ExecTarget;
use crate::target::files::FilesTarget;
use crate::target::{Probe, StartError, Target};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("target {name}: {source}")]
    Target { name: String, source: StartError },
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
    pub trust: Option<Arc<crate::source::verify::TrustAnchors>>,
    /// What the pass reads the time from: the system's clock, except in
    /// tests that move time themselves.
    pub clock: Arc<dyn Clock>,
    /// This replica's role with `ha`: whether the pass may write, and the
    /// token the targets fence each write with (SPEC §11).
    pub fence: Fence,
}

impl Context {
    pub fn build(settings: Settings) -> Result<Context, BuildError> {
        Context::build_reusing(settings, None, true)
    }

    /// A context for a command that only looks (`diff`, `explain`): a
    /// target root that is not there is not made, and is seen empty.
    pub fn observing(settings: Settings) -> Result<Context, BuildError> {
        Context::build_reusing(settings, None, false)
    }

    /// A context for new settings (a reload): a target whose settings did
    /// not change is this one's, not started again (a plugin keeps its
    /// process); the others are built. Nothing of this context changes, so
    /// a failure leaves it as it was.
    pub fn rebuild(&self, settings: Settings) -> Result<Context, BuildError> {
        Context::build_reusing(settings, Some(self), true)
    }

    fn build_reusing(
        settings: Settings,
        old: Option<&Context>,
        make_roots: bool,
    ) -> Result<Context, BuildError> {
        // Trust files first: a bad one is named before any target starts.
        let trust =
            crate::source::verify::TrustAnchors::load(&settings.source.verify)?.map(Arc::new);
        // The role outlives a reload: the elector of the running daemon
        // keeps setting it.
        let fence = match (old, &settings.ha) {
            (_, None) => Fence::off(),
            (Some(o), Some(_)) if o.fence.enabled() => o.fence.clone(),
            (_, Some(_)) => Fence::on(&settings.host.name),
        };
        let mut targets: BTreeMap<String, Arc<dyn Target>> = BTreeMap::new();
        for t in &settings.targets {
            let unchanged = old.and_then(|old| {
                let before = old.settings.targets.iter().find(|o| o.name == t.name)?;
                let same = format!("{before:?}") == format!("{t:?}")
                    && old.settings.state_dir == settings.state_dir;
                same.then(|| old.targets.get(&t.name).cloned()).flatten()
            });
            if let Some(target) = unchanged {
                targets.insert(t.name.clone(), target);
                continue;
            }
            // One arm per adapter: each builds from its own config.
            let built: Result<Arc<dyn Target>, StartError> = match &t.kind {
                TargetKind::Files(c) => {
                    FilesTarget::build(&t.name, c, &settings.state_dir, make_roots)
                        .map(|f| Arc::new(f) as Arc<dyn Target>)
                        .map_err(StartError::from)
                }
                TargetKind::Exec(c) => ExecTarget::start(&t.name, &c.command, c.timeout.0)
                    .map(|e| e.fenced(fence.clone()))
                    .map(|e| Arc::new(e) as Arc<dyn Target>)
                    .map_err(StartError::from),
                TargetKind::Etcd(c) => EtcdTarget::build(&t.name, c, fence.clone())
                    .map(|e| Arc::new(e) as Arc<dyn Target>)
                    .map_err(StartError::from),
            };
            let target = built.map_err(|source| BuildError::Target {
                name: t.name.clone(),
                source,
            })?;
            targets.insert(t.name.clone(), target);
        }
        let mirror = Mirror::open(&settings.state_dir, mirror_spec(&settings))?;
        // New settings keep the clock the running context reads.
        let clock = old.map_or_else(
            || Arc::new(SystemClock) as Arc<dyn Clock>,
            |o| o.clock.clone(),
        );
        Ok(Context {
            settings,
            mirror,
            targets,
            trust,
            clock,
            fence,
        })
    }

    /// A context for a reader beside the writer (the status page's diff
    /// view): its own mirror handle, the same targets, which observe through
    /// `&self` and never write on their own.
    pub fn reader(&self) -> Result<Context, BuildError> {
        let mirror = Mirror::open(&self.settings.state_dir, mirror_spec(&self.settings))?;
        Ok(Context {
            settings: self.settings.clone(),
            mirror,
            targets: self.targets.clone(),
            trust: self.trust.clone(),
            clock: self.clock.clone(),
            fence: self.fence.clone(),
        })
    }

    pub fn target_infos(&self) -> Vec<TargetInfo> {
        self.targets
            .values()
            .map(|t| {
                let kinds = t.kinds();
                TargetInfo {
                    name: t.name().to_string(),
                    kinds_unknown: kinds.as_ref().err().map(ToString::to_string),
                    kinds: kinds.unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The desired state of a revision.
    pub fn declare(&self, snapshot: &Snapshot) -> Result<Declared, crate::source::SourceError> {
        let infos = self.target_infos();
        let hooks: Vec<String> = self.settings.hooks.keys().cloned().collect();
        // Read again for each revision: a key fixed or brought back counts.
        let keyring = crate::secrets::Keyring::load(&self.settings.secrets.identities);
        let recipients = self.recipients();
        let opts = declare::Options {
            keyring: Some(&keyring),
            recipients: &recipients,
            ..self.declare_options(&infos, &hooks)
        };
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
            as_written: false,
            host: Some(&self.settings.host),
            // A patch never decrypts: a tree with decrypted files is read whole.
            keyring: None,
            recipients: &[],
            decrypt_suffix: self.settings.source.decrypt_suffix.as_deref(),
        }
    }

    /// The configured recipients (each checked when the config was read).
    fn recipients(&self) -> Vec<crate::secrets::Recipient> {
        let written = &self.settings.secrets.recipients;
        written
            .iter()
            .filter_map(|r| crate::secrets::parse_recipient(r).ok())
            .collect()
    }

    /// What a declaration depends on besides the revision: two revisions
    /// declared on the same basis can be compared path by path.
    pub fn declare_basis(&self) -> String {
        let hooks: Vec<&String> = self.settings.hooks.keys().collect();
        format!(
            "{:?} {} {:?} {:?} {:?} {:?} {:?}",
            self.settings.source.path,
            self.settings.source.mirror,
            self.target_infos(),
            hooks,
            self.settings.host,
            self.settings.source.decrypt_suffix,
            self.settings.secrets.identities,
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

    /// Observes `items`, one answer each, in their order.
    pub fn observe<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a ResourceId, &'a str, RelPath, Option<&'a Spec>)>,
    ) -> Vec<Observed> {
        let mut out = Vec::new();
        self.observe_each(
            items
                .into_iter()
                .map(|(id, target, path, spec)| (target, Probe { id, path, spec }, ())),
            |(), observed| out.push(observed),
        );
        out
    }

    /// Observes `items` (each a target's name, what to look at there, and
    /// what the caller knows it by) and hands each answer to `seen` with
    /// the caller's part, in the items' order. Items of one target that
    /// follow each other are observed together, at most as many at once as
    /// the target takes: a pass over a whole declaration (in identity
    /// order, each target's resources together) holds no more
    /// observations than that, and a target that reads its whole store per
    /// call reads it once.
    pub fn observe_each<'a, T>(
        &self,
        items: impl IntoIterator<Item = (&'a str, Probe<'a>, T)>,
        mut seen: impl FnMut(T, Observed),
    ) {
        let mut probes: Vec<Probe<'a>> = Vec::new();
        let mut theirs: Vec<T> = Vec::new();
        let mut run_target: Option<&'a str> = None;
        let mut flush = |name: &str, probes: &mut Vec<Probe<'a>>, theirs: &mut Vec<T>| {
            let mut answers = match self.targets.get(name) {
                Some(target) => target.observe(probes),
                None => {
                    let why = format!("target {name:?} is not configured");
                    vec![Observed::Unknown(why); probes.len()]
                }
            };
            // One answer per probe whatever a target gave: none is taken
            // for another resource's.
            answers.resize(probes.len(), Observed::Unknown("not observed".into()));
            for (t, observed) in theirs.drain(..).zip(answers) {
                seen(t, observed);
            }
            probes.clear();
        };
        for (target, probe, t) in items {
            let full = run_target.is_some_and(|t| {
                t != target
                    || self
                        .targets
                        .get(t)
                        .and_then(|t| t.observe_limit())
                        .is_some_and(|limit| probes.len() >= limit)
            });
            if let (true, Some(name)) = (full, run_target) {
                flush(name, &mut probes, &mut theirs);
            }
            run_target = Some(target);
            probes.push(probe);
            theirs.push(t);
        }
        if let Some(name) = run_target {
            flush(name, &mut probes, &mut theirs);
        }
    }
}

pub fn mirror_spec(settings: &Settings) -> SourceSpec {
    let s = &settings.source;
    SourceSpec {
        repo: s.repo.clone(),
        reference: s.reference.clone(),
        timeout: s.timeout,
        auth: s.auth.clone(),
        depth: s.depth,
    }
}

/// Content of one revision: inline declarations first, then the object
/// database.
pub struct PassContent {
    pub inline: HashMap<Oid, Vec<u8>>,
    /// Decrypted `decrypt: age` sources, shared with the declaration.
    pub secrets: HashMap<Oid, crate::secrets::Plaintext>,
    pub blobs: BlobReader,
}

impl ContentSource for PassContent {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>> {
        if let Some(plain) = self.secrets.get(&blob) {
            return Ok(plain.as_bytes().to_vec());
        }
        match self.inline.get(&blob) {
            Some(b) => Ok(b.clone()),
            None => self.blobs.read(blob),
        }
    }
}
