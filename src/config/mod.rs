//! The config file, flags and environment merged into one validated
//! [`Settings`]: flag, then env, then config file, then default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Flags;
use crate::duration::Dur;
use crate::ledger::AuditRotation;
use crate::model::host::Host;
use crate::server::Limits as ServerLimits;
use crate::target::files::FilesConfig;

mod file;
mod ha;
mod hooks;
mod host;
mod secrets;
mod targets;

pub use file::{
    load_file, AuthConfig, ContestedConfig, FileConfig, LogConfig, PolicyConfig, ServerConfig,
    SourceConfig, VerifyConfig, WebhookConfig,
};
pub use ha::HaSettings;
pub use hooks::{parse_http, parse_signal, Hook, HookAction, HookConfig, HttpHook};
pub use targets::{TargetKind, TargetSettings};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("{0}")]
    Setting(String),
}

/// A share of the inventory (`50%`) or a count (`20`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PruneLimit {
    Percent(f64),
    Count(usize),
}

impl PruneLimit {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("invalid percentage {s:?}"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("percentage {s:?} is outside 0%..100%"));
            }
            return Ok(PruneLimit::Percent(v));
        }
        s.parse()
            .map(PruneLimit::Count)
            .map_err(|_| format!("invalid limit {s:?}: use a share like 50% or a count"))
    }
    /// How many deletions one pass may make for an inventory of `size`.
    pub fn allowed(self, size: usize) -> usize {
        match self {
            PruneLimit::Percent(p) => ((size as f64) * p / 100.0).floor() as usize,
            PruneLimit::Count(n) => n,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub prune: bool,
    pub max_prune: PruneLimit,
    pub self_heal: bool,
    pub adopt: bool,
    pub allow_empty: bool,
    pub resync: Duration,
    pub contested_corrections: u32,
    pub contested_window: Duration,
    pub backup_retention: Duration,
    pub backup_max: u64,
    pub audit_max: u64,
    pub audit_retention: Duration,
    pub dry_run: bool,
    pub watch: bool,
}

impl Policy {
    /// The bounds the audit log is kept within.
    pub fn audit_rotation(&self) -> AuditRotation {
        AuditRotation {
            max: self.audit_max,
            retention: self.audit_retention,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub repo: String,
    pub reference: Option<String>,
    pub path: String,
    pub mirror: bool,
    pub interval: Duration,
    pub timeout: Duration,
    pub auth: crate::source::Auth,
    /// The hook run after any pass that changed something.
    pub on_change: Option<String>,
    /// Consecutive failed fetches allowed before giving up; `None` when
    /// not set (sync: no retry; run: retry forever).
    pub max_failures: Option<u32>,
    /// Signatures to check before a revision is applied (SPEC §9).
    pub verify: crate::source::verify::VerifySpec,
    /// Apply a fetched revision that does not descend from the newest one
    /// applied before.
    pub allow_rewind: bool,
    /// When the mirror is pruned, and what it keeps (`source.gc`).
    pub gc: crate::source::GcSpec,
    /// Mirror mode: files ending so are age files, published decrypted
    /// under their name less the suffix.
    pub decrypt_suffix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: String,
    pub refresh_token_file: Option<PathBuf>,
    pub webhooks: BTreeMap<String, PathBuf>,
    pub stuck_after: Duration,
    pub limits: ServerLimits,
}

/// Everything a command needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub source: SourceSettings,
    pub targets: Vec<TargetSettings>,
    pub hooks: BTreeMap<String, Hook>,
    pub policy: Policy,
    pub state_dir: PathBuf,
    pub server: ServerSettings,
    pub log_format: String,
    pub log_level: String,
    /// This host in a fleet: `{host}`/`{label.KEY}` in `source.path` are
    /// filled in from it, and declarations' `hosts:` select by it.
    pub host: Host,
    /// Whether the host was named (`--host` or `host.name`) rather than
    /// taken from the machine: reads with no host at hand (`diff
    /// --against`, `validate --as-written`) select by it only then.
    pub host_named: bool,
    /// Identities and recipients of age-encrypted sources (SPEC §13).
    pub secrets: crate::secrets::AgeSettings,
    /// The election this replica takes part in, when replicas share the
    /// writing (SPEC §11); `None`: this tend alone writes.
    pub ha: Option<HaSettings>,
}

/// Under systemd, with stderr connected to the journal, lines go to the
/// journal with their fields; elsewhere text.
fn default_log_format() -> &'static str {
    match crate::logging::stderr_is_journal() {
        true => "journal",
        false => "text",
    }
}

fn default_state_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/tend");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("tend");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/tend")
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        u => {
            return Err(format!(
                "invalid size unit {u:?} in {s:?}: use B, KiB, MiB, GiB"
            ))
        }
    };
    Ok(n.saturating_mul(mult))
}

/// The state dir alone, for commands that need nothing else (status,
/// pause, resume): flag, env, config file, default.
pub fn state_dir_only(args: &Flags) -> Result<PathBuf, ConfigError> {
    if let Some(d) = &args.state_dir {
        return Ok(d.clone());
    }
    let file = match &args.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    Ok(file.state_dir.unwrap_or_else(default_state_dir))
}

/// Where `tend run` listens when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9420";

/// The daemon's listen address alone, for `tend health`: flag, env, config
/// file, default.
pub fn listen_only(args: &Flags) -> Result<String, ConfigError> {
    if let Some(l) = &args.listen {
        return Ok(l.clone());
    }
    let file = match &args.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    Ok(file
        .server
        .and_then(|s| s.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.into()))
}

/// Merges flags/env (already combined by clap) over the config file over
/// defaults, and checks what can be checked without I/O.
pub fn resolve(args: &Flags) -> Result<Settings, ConfigError> {
    resolve_with(args, false)
}

/// [`resolve`] for `tend validate`, which touches no target: without one
/// configured, declarations are checked as a `files` target would read
/// them.
pub fn resolve_for_validate(args: &Flags) -> Result<Settings, ConfigError> {
    resolve_with(args, true)
}

fn resolve_with(args: &Flags, any_target: bool) -> Result<Settings, ConfigError> {
    let (file, text) = match &args.config {
        Some(p) => file::load_file_and_text(p)?,
        None => (FileConfig::default(), String::new()),
    };
    let cfg_name = args
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    // Names the file, and the line of `key` when the file has it.
    let bad = |key: &str, m: String| {
        ConfigError::Setting(match (cfg_name.is_empty(), file::line_of_key(&text, key)) {
            (true, _) => m,
            (false, Some(line)) => format!("{cfg_name}:{line}: {m}"),
            (false, None) => format!("{cfg_name}: {m}"),
        })
    };
    // Problems of the sections below are gathered and reported together.
    let mut problems: Vec<ConfigError> = Vec::new();
    let src = file.source.unwrap_or_default();
    let repo = args.repo.clone().or(src.repo).ok_or_else(|| {
        ConfigError::Setting(
            "no repository: give --repo, TEND_REPO or source.repo in the config".into(),
        )
    })?;
    let (host, host_named) = match host::resolve(args.host.as_deref(), &args.labels, file.host) {
        Ok(found) => found,
        Err(found) => {
            for p in found {
                problems.push(bad(&p.key, p.message));
            }
            (Host::default(), false)
        }
    };
    let path = args.path.clone().or(src.path).unwrap_or_default();
    let path = match crate::model::host::expand(&path, &host) {
        Ok(p) => p.trim_matches('/').to_string(),
        Err(m) => {
            problems.push(bad("source.path", format!("source.path: {m}")));
            String::new()
        }
    };
    if path.split('/').any(|c| c == "..") {
        return Err(bad(
            "source.path",
            format!("source path {path:?} may not contain `..`"),
        ));
    }
    match src.submodules.as_deref() {
        None | Some("skip") => {}
        Some("recursive") => {
            return Err(bad(
                "source.submodules",
                "source.submodules: recursive is not supported yet; use skip (submodules are left out, with a warning)".into(),
            ))
        }
        Some(other) => {
            return Err(bad(
                "source.submodules",
                format!("source.submodules: unknown value {other:?} (known: skip)"),
            ))
        }
    }
    let a = src.auth.unwrap_or_default();
    let v = src.verify.unwrap_or_default();
    let require = match v.require.as_deref() {
        Some(r) => crate::source::verify::Require::parse(r)
            .map_err(|m| bad("source.verify.require", format!("source.verify.{m}")))?,
        None => crate::source::verify::Require::Commit,
    };
    let verify = crate::source::verify::VerifySpec {
        allowed_signers: args.allowed_signers.clone().or(v.allowed_signers),
        keyring: args.keyring.clone().or(v.keyring),
        require,
    };
    if v.require.is_some() && verify.allowed_signers.is_none() && verify.keyring.is_none() {
        return Err(bad(
            "source.verify",
            "source.verify needs allowed_signers or keyring (or --allowed-signers / --keyring)"
                .into(),
        ));
    }
    let decrypt_suffix = secrets::suffix(src.decrypt).unwrap_or_else(|m| {
        problems.push(bad("source.decrypt", m));
        None
    });
    let (age, found) = secrets::resolve(args, file.secrets);
    for (key, message) in found {
        problems.push(bad(&key, message));
    }
    let source = SourceSettings {
        repo,
        reference: args.reference.clone().or(src.reference),
        path,
        mirror: args.mirror.or(src.mirror).unwrap_or(false),
        interval: args
            .interval
            .map(|d| d.0)
            .or(src.interval.map(|d| d.0))
            .unwrap_or(Duration::from_secs(60)),
        timeout: args
            .timeout
            .map(|d| d.0)
            .or(src.timeout.map(|d| d.0))
            .unwrap_or(Duration::from_secs(120)),
        auth: crate::source::Auth {
            ssh_key: a.ssh_key,
            ssh_key_passphrase_file: a.ssh_key_passphrase_file,
            known_hosts: a.known_hosts,
            token_file: a.token_file,
            ca_file: a.ca_file,
        },
        on_change: src.on_change,
        max_failures: args.max_failures.or(src.max_failures),
        verify,
        allow_rewind: args.allow_rewind.or(src.allow_rewind).unwrap_or(false),
        gc: {
            let g = src.gc.unwrap_or_default();
            let d = crate::source::GcSpec::default();
            if g.budget.is_some_and(|b| b.0.is_zero()) {
                problems.push(bad(
                    "source.gc.budget",
                    "source.gc.budget: must be more than 0".to_string(),
                ));
            }
            crate::source::GcSpec {
                interval: g.interval.map_or(d.interval, |x| x.0),
                grace: g.grace.map_or(d.grace, |x| x.0),
                budget: g.budget.map_or(d.budget, |x| x.0),
            }
        },
        decrypt_suffix,
    };

    let (mut targets, found) = targets::resolve(file.targets.unwrap_or_default());
    for p in found {
        problems.push(bad(&p.key, p.message));
    }
    if let Some(root) = &args.root {
        // The config's own `files` target gives way, its link kept.
        let mut files = FilesConfig::at(root);
        if let Some(TargetKind::Files(was)) =
            targets.iter().find(|t| t.name == "files").map(|t| &t.kind)
        {
            (files.link, files.link_keep) = (was.link.clone(), was.link_keep);
        }
        targets.retain(|t| t.name != "files");
        targets.push(TargetSettings {
            name: "files".into(),
            kind: TargetKind::Files(files),
        });
    }
    if targets.is_empty() && any_target {
        targets.push(TargetSettings {
            name: "files".into(),
            kind: TargetKind::Files(FilesConfig::at("/")),
        });
    }
    if let Err(e) = link_flags(args, &mut targets) {
        problems.push(e);
    }
    if targets.is_empty() && problems.is_empty() {
        problems.push(ConfigError::Setting(
            "no target: give --root DIR or `targets:` in the config".into(),
        ));
    }
    // A relative root is the working directory's, made absolute once here:
    // every part (the target, the watcher's paths) then names the same one.
    for t in &mut targets {
        if let TargetKind::Files(FilesConfig { root, .. }) = &mut t.kind {
            if root.is_relative() {
                match std::path::absolute(&*root) {
                    Ok(absolute) => *root = absolute,
                    Err(e) => problems.push(ConfigError::Setting(format!(
                        "root {}: {e}",
                        root.display()
                    ))),
                }
            }
        }
    }

    let ha = ha::resolve(file.ha).unwrap_or_else(|found| {
        for (key, message) in found {
            problems.push(bad(&key, message));
        }
        None
    });

    let (hooks, found) = hooks::resolve(file.hooks);
    for (key, message) in found {
        problems.push(bad(&key, message));
    }
    if let Some(name) = source
        .on_change
        .as_ref()
        .filter(|n| !hooks.contains_key(*n))
    {
        problems.push(bad(
            "source.on_change",
            format!("source.on_change: hook {name:?} is not defined under `hooks:`"),
        ));
    }

    let p = file.policy.unwrap_or_default();
    let contested = p.contested.unwrap_or(ContestedConfig {
        corrections: 5,
        window: Dur(Duration::from_secs(600)),
    });
    let policy = Policy {
        prune: p.prune.unwrap_or(true),
        max_prune: match p.max_prune.map(|s| PruneLimit::parse(&s)) {
            Some(Ok(limit)) => limit,
            Some(Err(e)) => {
                problems.push(bad("policy.max_prune", format!("policy.max_prune: {e}")));
                PruneLimit::Percent(50.0)
            }
            None => PruneLimit::Percent(50.0),
        },
        self_heal: p.self_heal.unwrap_or(true),
        adopt: p.adopt.unwrap_or(true),
        allow_empty: p.allow_empty.unwrap_or(false),
        resync: p.resync.map(|d| d.0).unwrap_or(Duration::from_secs(600)),
        contested_corrections: contested.corrections,
        contested_window: contested.window.0,
        backup_retention: p
            .backup_retention
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(7 * 86400)),
        backup_max: match p.backup_max.map(|s| parse_size(&s)) {
            Some(Ok(size)) => size,
            Some(Err(e)) => {
                problems.push(bad("policy.backup_max", format!("policy.backup_max: {e}")));
                1 << 30
            }
            None => 1 << 30,
        },
        audit_max: match p.audit_max.map(|s| parse_size(&s)) {
            Some(Ok(0)) => {
                problems.push(bad(
                    "policy.audit_max",
                    "policy.audit_max: must be more than 0".to_string(),
                ));
                AuditRotation::default().max
            }
            Some(Ok(size)) => size,
            Some(Err(e)) => {
                problems.push(bad("policy.audit_max", format!("policy.audit_max: {e}")));
                AuditRotation::default().max
            }
            None => AuditRotation::default().max,
        },
        audit_retention: p
            .audit_retention
            .map(|d| d.0)
            .unwrap_or(AuditRotation::default().retention),
        dry_run: args.dry_run.or(p.dry_run).unwrap_or(false),
        watch: p.watch.unwrap_or(true),
    };

    let server = file.server.unwrap_or_default();
    let log = file.log.unwrap_or_default();
    let log_format = args
        .log_format
        .clone()
        .or(log.format)
        .unwrap_or_else(|| default_log_format().into());
    if !["text", "json", "journal"].contains(&log_format.as_str()) {
        problems.push(bad(
            "log.format",
            format!("log format {log_format:?}: use text, json or journal"),
        ));
    }
    let log_level = args
        .log_level
        .clone()
        .or(log.level)
        .unwrap_or_else(|| "info".into());
    if let Err(m) = check_log_level(&log_level) {
        problems.push(bad("log.level", m));
    }
    let defaults = ServerLimits::default();
    if server.max_connections == Some(0) {
        problems.push(bad(
            "server.max_connections",
            "server.max_connections: must be more than 0".to_string(),
        ));
    }
    let limits = ServerLimits {
        connections: server.max_connections.unwrap_or(defaults.connections),
        header_timeout: server
            .header_timeout
            .map_or(defaults.header_timeout, |t| t.0),
        request_timeout: server
            .request_timeout
            .map_or(defaults.request_timeout, |t| t.0),
    };
    if !problems.is_empty() {
        // Every problem at once, one per line.
        let all: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(ConfigError::Setting(all.join("\n")));
    }
    Ok(Settings {
        secrets: age,
        ha,
        source,
        targets,
        hooks,
        policy,
        host,
        host_named,
        state_dir: args
            .state_dir
            .clone()
            .or(file.state_dir)
            .unwrap_or_else(default_state_dir),
        server: ServerSettings {
            listen: args
                .listen
                .clone()
                .or(server.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.into()),
            refresh_token_file: server.refresh_token_file,
            stuck_after: server
                .stuck_after
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(60)),
            limits,
            webhooks: server.webhooks.unwrap_or_default().secret_files().collect(),
        },
        log_format,
        log_level,
    })
}

/// `--link` and `--link-keep` (or their env) set the link of the files
/// target: the one named `files` (as `--root` makes it), or else the only
/// one.
fn link_flags(args: &Flags, targets: &mut [TargetSettings]) -> Result<(), ConfigError> {
    if args.link.is_none() && args.link_keep.is_none() {
        return Ok(());
    }
    let files: Vec<usize> = (0..targets.len())
        .filter(|&i| matches!(targets[i].kind, TargetKind::Files(_)))
        .collect();
    let named = files.iter().copied().find(|&i| targets[i].name == "files");
    let only = match files.as_slice() {
        [only] => Some(*only),
        _ => None,
    };
    let Some(TargetKind::Files(files)) = named.or(only).map(|at| &mut targets[at].kind) else {
        return Err(ConfigError::Setting(
            "--link: no single files target to publish (several, or none); set `link` on one under `targets:`".into(),
        ));
    };
    if let Some(name) = &args.link {
        crate::target::files::check_link_name(name)
            .map_err(|m| ConfigError::Setting(format!("--link: {m}")))?;
        files.link = Some(name.clone());
    }
    if args.link_keep.is_some() {
        if files.link.is_none() {
            return Err(ConfigError::Setting(
                "--link-keep needs --link (or `link` in the config)".into(),
            ));
        }
        files.link_keep = args.link_keep;
    }
    Ok(())
}

/// A level name, or filter directives naming one (`info,tend=debug`): a bare
/// word is otherwise taken as a module name, and `loud` would silence all.
pub fn check_log_level(level: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    let known = |l: &str| LEVELS.contains(&l.trim().to_ascii_lowercase().as_str());
    let valid = level
        .split(',')
        .all(|directive| match directive.rsplit_once('=') {
            Some((_, l)) => known(l),
            None => known(directive),
        });
    match valid {
        true => Ok(()),
        false => Err(format!(
            "log level {level:?}: use error, warn, info, debug, trace or off (or directives like info,tend=debug)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_names_or_directives_naming_them() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,tend=debug",
            "tend::source=trace",
        ] {
            assert!(check_log_level(ok).is_ok(), "{ok}");
        }
        for bad in ["loud", "", "info,tend=loud", "verbose"] {
            assert!(check_log_level(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prune_limits() {
        assert_eq!(PruneLimit::parse("50%").unwrap().allowed(10), 5);
        assert_eq!(PruneLimit::parse("3").unwrap().allowed(10), 3);
        assert!(PruneLimit::parse("150%").is_err());
        assert!(PruneLimit::parse("many").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("10 MiB").unwrap(), 10 << 20);
        assert!(parse_size("1 parsec").is_err());
    }

    fn resolve_config(text: &str) -> Result<Settings, ConfigError> {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tend.yaml");
        std::fs::write(&p, text).unwrap();
        let cli = crate::cli::Cli::parse_from([
            "tend",
            "diff",
            "-c",
            p.to_str().unwrap(),
            "--repo",
            "/x",
        ]);
        resolve(&cli.command.flags())
    }

    #[test]
    fn source_gc_has_defaults_takes_each_key_and_refuses_a_zero_budget_by_line() {
        let files = "targets:\n  files: {type: files, root: /srv}\n";
        let d = resolve_config(files).unwrap().source.gc;
        assert_eq!(d, crate::source::GcSpec::default());
        assert_eq!(d.grace, Duration::from_secs(14 * 86400));
        let s = resolve_config(&format!(
            "source:\n  gc: {{interval: 1h, grace: 2d, budget: 10s}}\n{files}"
        ))
        .unwrap()
        .source
        .gc;
        assert_eq!(s.interval, Duration::from_secs(3600));
        assert_eq!(s.grace, Duration::from_secs(2 * 86400));
        assert_eq!(s.budget, Duration::from_secs(10));
        let err = resolve_config(&format!("source:\n  gc:\n    budget: 0s\n{files}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tend.yaml:3: source.gc.budget"), "{err}");
        let example = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tend.example.yaml"),
        )
        .unwrap();
        assert!(example.contains("gc: {interval: 24h, grace: 14d, budget: 1m}"));
    }

    #[test]
    fn exec_targets_take_a_command_and_a_timeout_and_nothing_of_files() {
        let s = resolve_config(
            "targets:\n  app: {type: exec, command: [/bin/plugin, --x], timeout: 5s}\n",
        )
        .unwrap();
        match &s.targets[0].kind {
            TargetKind::Exec(c) => {
                assert_eq!(c.command, ["/bin/plugin", "--x"]);
                assert_eq!(c.timeout.0, Duration::from_secs(5));
            }
            other => panic!("{other:?}"),
        }
        let err = resolve_config("targets:\n  app: {type: exec, command: [p], root: /}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`root` does not apply to type exec"), "{err}");
        let err = resolve_config("targets:\n  f: {type: files, root: /, command: [sh]}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`command` does not apply to type files"),
            "{err}"
        );
        let err = resolve_config("targets:\n  app: {type: exec}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("type exec needs `command`"), "{err}");
    }

    #[test]
    fn the_audit_log_bounds_default_and_parse() {
        let t = "targets:\n  f: {type: files, root: /}\n";
        let s = resolve_config(t).unwrap();
        assert_eq!(s.policy.audit_max, 64 << 20);
        assert_eq!(s.policy.audit_retention, Duration::from_secs(30 * 86400));
        let s = resolve_config(&format!(
            "{t}policy:\n  audit_max: 8MiB\n  audit_retention: 7d\n"
        ))
        .unwrap();
        assert_eq!(s.policy.audit_max, 8 << 20);
        assert_eq!(s.policy.audit_retention, Duration::from_secs(7 * 86400));
        for bad in ["lots", "0"] {
            let err = resolve_config(&format!("{t}policy:\n  audit_max: {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("tend.yaml:4: policy.audit_max"), "{err}");
        }
    }

    #[test]
    fn hooks_are_a_command_an_http_call_or_a_signal_and_on_change_names_one() {
        let s = resolve_config(
            "targets:\n  files: {type: files, root: /}\nsource:\n  on_change: app\nhooks:\n  app: {http: {url: \"http://127.0.0.1:9/r\"}, timeout: 10s}\n  nginx: {signal: {pidfile: /run/nginx.pid}}\n  cmd: {run: [true]}\n",
        )
        .unwrap();
        assert_eq!(s.source.on_change.as_deref(), Some("app"));
        match &s.hooks["app"].action {
            HookAction::Http(h) => assert_eq!((h.port, h.method.as_str()), (9, "POST")),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.hooks["app"].timeout, Duration::from_secs(10));
        assert!(matches!(
            s.hooks["nginx"].action,
            HookAction::Signal {
                signal: rustix::process::Signal::HUP,
                ..
            }
        ));
        for (text, says) in [
            ("hooks:\n  a: {timeout: 5s}\n", "give one of"),
            (
                "hooks:\n  a: {run: [x], signal: {pidfile: /p}}\n",
                "only one of",
            ),
            (
                "hooks:\n  a:\n    http: {url: \"https://x/\"}\n",
                "tend.yaml:5: hook a: url",
            ),
            (
                "hooks:\n  a: {signal: {pidfile: /p, signal: BOOM}}\n",
                "unknown signal",
            ),
            (
                "hooks:\n  a: {run: [x]}\nsource:\n  on_change: b\n",
                "tend.yaml:6: source.on_change: hook \"b\" is not defined",
            ),
        ] {
            let with_target = format!("targets:\n  files: {{type: files, root: /}}\n{text}");
            let err = resolve_config(&with_target).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn the_listener_limits_default_and_parse() {
        let t = "targets:\n  f: {type: files, root: /}\n";
        let s = resolve_config(t).unwrap();
        assert_eq!(s.server.limits, ServerLimits::default());
        let s = resolve_config(&format!(
            "{t}server:\n  max_connections: 32\n  header_timeout: 2s\n  request_timeout: 1m\n"
        ))
        .unwrap();
        assert_eq!(
            s.server.limits,
            ServerLimits {
                connections: 32,
                header_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(60),
            }
        );
        let err = resolve_config(&format!("{t}server:\n  max_connections: 0\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tend.yaml:4: server.max_connections"), "{err}");
    }

    #[test]
    fn a_link_is_set_on_the_files_target_by_config_or_flag() {
        let s = resolve_config(
            "targets:\n  files: {type: files, root: /srv, link: current, link_keep: 3}\n",
        )
        .unwrap();
        let TargetKind::Files(f) = &s.targets[0].kind else {
            panic!("{:?}", s.targets);
        };
        assert_eq!((f.link.as_deref(), f.link_keep), (Some("current"), Some(3)));
        let err = resolve_config("targets:\n  files: {type: files, root: /, link: a/b}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tend.yaml:2: target files: link"), "{err}");
        let err = resolve_config("targets:\n  x: {type: exec, command: [p], link: current}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`link` does not apply to type exec"), "{err}");

        use clap::Parser;
        let cli = crate::cli::Cli::parse_from([
            "tend",
            "sync",
            "--repo",
            "/x",
            "--root",
            "/srv",
            "--link",
            "live",
            "--link-keep",
            "0",
        ]);
        let s = resolve(&cli.command.flags()).unwrap();
        let TargetKind::Files(f) = &s.targets[0].kind else {
            panic!("{:?}", s.targets);
        };
        assert_eq!(
            f.link(),
            Some(crate::target::files::Link {
                name: "live".into(),
                keep: 0
            })
        );
        let cli = crate::cli::Cli::parse_from([
            "tend",
            "sync",
            "--repo",
            "/x",
            "--root",
            "/srv",
            "--link-keep",
            "2",
        ]);
        let err = resolve(&cli.command.flags()).unwrap_err().to_string();
        assert!(err.contains("--link-keep needs --link"), "{err}");
    }

    #[test]
    fn ha_takes_a_cluster_an_election_and_a_lease_and_names_each_problem_by_line() {
        let t = "targets:\n  f: {type: files, root: /}\n";
        assert!(resolve_config(t).unwrap().ha.is_none());
        let s = resolve_config(&format!(
            "{t}ha:\n  etcd: {{endpoints: [\"http://127.0.0.1:2379\"]}}\n  election: tend/web\n  lease_ttl: 3s\n"
        ))
        .unwrap();
        let ha = s.ha.unwrap();
        assert_eq!(ha.election, "tend/web");
        assert_eq!(ha.lease_ttl, Duration::from_secs(3));
        assert_eq!(ha.etcd.endpoints, ["http://127.0.0.1:2379"]);
        let s = resolve_config(&format!(
            "{t}ha:\n  etcd: {{endpoints: [\"http://a:1\"]}}\n  election: e\n"
        ))
        .unwrap();
        assert_eq!(s.ha.unwrap().lease_ttl, Duration::from_secs(10));
        let err = resolve_config(&format!(
            "{t}ha:\n  etcd:\n    endpoints: [ftp://x]\n  election: ''\n  lease_ttl: 500ms\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("tend.yaml:4: ha.etcd: endpoint \"ftp://x\""),
            "{err}"
        );
        assert!(err.contains("tend.yaml:6: ha.election: is empty"), "{err}");
        assert!(err.contains("tend.yaml:7: ha.lease_ttl"), "{err}");
        let err = resolve_config(&format!(
            "{t}ha:\n  etcd: {{endpoints: [\"http://a:1\"], prefix: /x/}}\n  election: e\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("prefix"), "{err}");
    }

    #[test]
    fn unknown_key_names_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tend.yaml");
        std::fs::write(&p, "source:\n  repo: /x\n  intervall: 5m\n").unwrap();
        let err = load_file(&p).unwrap_err().to_string();
        assert!(err.contains("tend.yaml"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("intervall"), "{err}");
    }
}
