//! SIGHUP: the config is read again (file, and the flags and environment
//! the daemon started with) and checked; what can change while running is
//! taken, what cannot is kept and named as needing a restart. A config that
//! does not resolve changes nothing.

use std::fmt::Debug;

use super::driver::Loop;
use crate::config::{ConfigError, Policy, Settings, SourceSettings};
use crate::reconcile;
use crate::source::Auth;

/// Reads and checks the config as at start, without starting anything.
pub type ReadConfig = Box<dyn Fn() -> Result<Settings, ConfigError> + Send + Sync>;

/// The settings to run with after a reload, and what differs.
#[derive(Debug)]
pub struct Plan {
    pub settings: Settings,
    /// Sections taken from the new config.
    pub changed: Vec<&'static str>,
    /// Settings that differ but are kept as they were until a restart.
    pub needs_restart: Vec<&'static str>,
}

/// Compared through their debug form: every settings type has one, and
/// it shows every field.
fn differ<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") != format!("{b:?}")
}

/// Sorts each setting into taken or kept as it was. [`plan`] takes every
/// settings struct apart and builds it again field by field, so a new
/// field does not compile until it says here which it is.
#[derive(Default)]
struct Sort {
    changed: Vec<&'static str>,
    needs_restart: Vec<&'static str>,
}

impl Sort {
    /// Taken while running: the rebuilt context and [`take`] follow it.
    fn live<T: Debug>(&mut self, name: &'static str, new: T, old: &T) -> T {
        if differ(&new, old) && !self.changed.contains(&name) {
            self.changed.push(name);
        }
        new
    }

    /// Bound once at start: kept as it was, and named as needing a restart.
    fn bound<T: Debug + Clone>(&mut self, name: &'static str, new: T, old: &T) -> T {
        match differ(&new, old) {
            true => {
                self.needs_restart.push(name);
                old.clone()
            }
            false => new,
        }
    }
}

/// What of `new` the running daemon can take from `old`.
pub fn plan(old: &Settings, new: Settings) -> Plan {
    let mut sort = Sort::default();
    let Settings {
        source,
        targets,
        hooks,
        policy,
        state_dir,
        server,
        log_format,
        log_level,
        host,
        host_named,
        secrets,
        ha,
        fleet,
    } = new;
    // Bound once at start: the state dir (and its lock), the listener with
    // its secrets, the log format.
    let state_dir = sort.bound("state_dir", state_dir, &old.state_dir);
    let server = sort.bound("server", server, &old.server);
    let log_format = sort.bound("log.format", log_format, &old.log_format);
    let source = plan_source(&mut sort, source, &old.source);
    let settings = Settings {
        state_dir,
        server,
        log_format,
        source,
        targets: sort.live("targets", targets, &old.targets),
        hooks: sort.live("hooks", hooks, &old.hooks),
        policy: plan_policy(&mut sort, policy, &old.policy),
        log_level: sort.live("log.level", log_level, &old.log_level),
        host: sort.live("host", host, &old.host),
        host_named: sort.live("host", host_named, &old.host_named),
        secrets: sort.live("secrets", secrets, &old.secrets),
        // The elector runs with the election it started in; the role it
        // sets stays the one the targets and the pass read.
        ha: sort.bound("ha", ha, &old.ha),
        // The fleet's client, status lease and poller run as started.
        fleet: sort.bound("fleet", fleet, &old.fleet),
    };
    Plan {
        settings,
        changed: sort.changed,
        needs_restart: sort.needs_restart,
    }
}

/// `source:` is taken but for what libgit2 holds process-wide, set before
/// any thread started: its timeouts and extra CA file. (A first repository
/// over https is taken: the system's certificates are read when its first
/// handshake needs them, see `source::configure_transport`.)
fn plan_source(sort: &mut Sort, new: SourceSettings, old: &SourceSettings) -> SourceSettings {
    let SourceSettings {
        repo,
        reference,
        path,
        mirror,
        interval,
        timeout,
        auth,
        on_change,
        max_failures,
        verify,
        allow_rewind,
        depth,
        gc,
        decrypt_suffix,
    } = new;
    let Auth {
        ssh_key,
        ssh_key_passphrase_file,
        known_hosts,
        token_file,
        ca_file,
    } = auth;
    let o = &old.auth;
    let name = "source";
    SourceSettings {
        timeout: sort.bound("source.timeout", timeout, &old.timeout),
        auth: Auth {
            ca_file: sort.bound("source.auth.ca_file", ca_file, &o.ca_file),
            ssh_key: sort.live(name, ssh_key, &o.ssh_key),
            ssh_key_passphrase_file: sort.live(
                name,
                ssh_key_passphrase_file,
                &o.ssh_key_passphrase_file,
            ),
            known_hosts: sort.live(name, known_hosts, &o.known_hosts),
            token_file: sort.live(name, token_file, &o.token_file),
        },
        repo: sort.live(name, repo, &old.repo),
        reference: sort.live(name, reference, &old.reference),
        path: sort.live(name, path, &old.path),
        mirror: sort.live(name, mirror, &old.mirror),
        interval: sort.live(name, interval, &old.interval),
        on_change: sort.live(name, on_change, &old.on_change),
        max_failures: sort.live(name, max_failures, &old.max_failures),
        verify: sort.live(name, verify, &old.verify),
        allow_rewind: sort.live(name, allow_rewind, &old.allow_rewind),
        // A remote's first fetch only: a new repository's mirror takes it.
        depth: sort.live(name, depth, &old.depth),
        gc: sort.live(name, gc, &old.gc),
        decrypt_suffix: sort.live(name, decrypt_suffix, &old.decrypt_suffix),
    }
}

/// `policy:` is taken whole: the pass reads it from the rebuilt context,
/// and [`take`] follows `dry_run`, `watch` and the audit log's bounds.
fn plan_policy(sort: &mut Sort, new: Policy, old: &Policy) -> Policy {
    let Policy {
        prune,
        max_prune,
        self_heal,
        adopt,
        allow_empty,
        resync,
        contested_corrections,
        contested_window,
        backup_retention,
        backup_max,
        audit_max,
        audit_retention,
        dry_run,
        watch,
    } = new;
    let name = "policy";
    Policy {
        prune: sort.live(name, prune, &old.prune),
        max_prune: sort.live(name, max_prune, &old.max_prune),
        self_heal: sort.live(name, self_heal, &old.self_heal),
        adopt: sort.live(name, adopt, &old.adopt),
        allow_empty: sort.live(name, allow_empty, &old.allow_empty),
        resync: sort.live(name, resync, &old.resync),
        contested_corrections: sort.live(name, contested_corrections, &old.contested_corrections),
        contested_window: sort.live(name, contested_window, &old.contested_window),
        backup_retention: sort.live(name, backup_retention, &old.backup_retention),
        backup_max: sort.live(name, backup_max, &old.backup_max),
        audit_max: sort.live(name, audit_max, &old.audit_max),
        audit_retention: sort.live(name, audit_retention, &old.audit_retention),
        dry_run: sort.live(name, dry_run, &old.dry_run),
        watch: sort.live(name, watch, &old.watch),
    }
}

/// Reads the config again and takes what it can, then fetches and runs a
/// full pass (with the new settings, the current revision is declared
/// anew). A config that does not resolve, or whose targets or source
/// cannot be opened, is refused whole: the running one stays. The daemon
/// never ends here.
pub(super) async fn reload(lp: &mut Loop, read: &ReadConfig) {
    tracing::info!("reloading: reading the config again");
    match read() {
        Err(e) => {
            tracing::error!(error = %e, "config refused; the running config stays");
        }
        Ok(new) => {
            let plan = plan(&lp.settings, new);
            for setting in &plan.needs_restart {
                tracing::warn!(
                    setting,
                    "changed in the config but kept as it was: needs restart"
                );
            }
            match take(lp, plan.settings).await {
                Ok(()) => tracing::info!(
                    changed = ?plan.changed,
                    needs_restart = ?plan.needs_restart,
                    "config reloaded"
                ),
                Err(e) => {
                    tracing::error!(error = %e, "config refused; the running config stays")
                }
            }
        }
    }
    lp.fetches.succeeded();
    let fetched = lp
        .blocking(|ctx, rec| reconcile::fetch(ctx, rec, ctx.clock.now()))
        .await;
    super::publish::fetch(&lp.shared.metrics, fetched.is_ok());
    let fresh = fetched.is_ok();
    let id = match fetched {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "fetch failed; the last good state stays");
            match lp.shared.current() {
                Some(rev) => Some(rev.id),
                None => lp
                    .blocking(|ctx, _| ctx.mirror.resolved())
                    .await
                    .ok()
                    .flatten(),
            }
        }
    };
    if let Some(id) = id {
        lp.admit_or_rerun(id, fresh, true).await;
    }
}

/// Swaps in a context built for `settings` and follows it: the targets'
/// subscriptions (a target built anew, or a change of `policy.watch`,
/// begins its watch again), the level, dry run.
async fn take(lp: &mut Loop, settings: Settings) -> Result<(), reconcile::BuildError> {
    let s = settings.clone();
    let targets = lp
        .with_worker(move |w| -> Result<_, reconcile::BuildError> {
            let ctx = w.ctx.rebuild(s)?;
            w.ctx = ctx;
            w.rec
                .set_audit_rotation(w.ctx.settings.policy.audit_rotation());
            Ok(w.ctx.targets.clone())
        })
        .await?;
    if lp.watch.follow(&targets, settings.policy.watch) {
        lp.watched = None;
    }
    super::publish::targets(&lp.shared.metrics, targets.keys());
    if let Err(e) = crate::logging::set_level(&settings.log_level) {
        tracing::warn!(error = %e, "cannot change the log level");
    }
    lp.opts.dry_run = settings.policy.dry_run;
    // Declared anew: the next revision is not reconciled from this one.
    lp.settled = None;
    lp.settings = settings;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(config: &str, args: &[&str]) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tend.yaml");
        std::fs::write(&p, config).unwrap();
        let mut argv = vec!["tend", "run", "-c", p.to_str().unwrap()];
        argv.extend_from_slice(args);
        let cli = crate::cli::Cli::parse_from(argv);
        crate::config::resolve(&cli.command.flags()).unwrap()
    }

    const BASE: &str = "source: {repo: /srv/a, interval: 1m, timeout: 2m}\n\
        targets: {files: {type: files, root: /srv/root}}\n\
        state_dir: /var/lib/one\nserver: {listen: 127.0.0.1:9420}\n";

    #[test]
    fn the_same_config_changes_nothing() {
        let old = settings(BASE, &[]);
        let p = plan(&old, settings(BASE, &[]));
        assert!(p.changed.is_empty(), "{p:?}");
        assert!(p.needs_restart.is_empty(), "{p:?}");
    }

    #[test]
    fn live_sections_are_taken() {
        let old = settings(BASE, &[]);
        let new = settings(
            "source: {repo: /srv/b, interval: 5s, timeout: 2m}\n\
             targets: {files: {type: files, root: /srv/other}}\n\
             hooks: {h: {run: [true]}}\npolicy: {prune: false}\n\
             log: {level: debug}\n\
             state_dir: /var/lib/one\nserver: {listen: 127.0.0.1:9420}\n",
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(
            p.changed,
            ["source", "targets", "hooks", "policy", "log.level"]
        );
        assert!(p.needs_restart.is_empty(), "{p:?}");
        assert_eq!(p.settings.source.repo, "/srv/b");
        assert!(!p.settings.policy.prune);
        assert_eq!(p.settings.log_level, "debug");
    }

    #[test]
    fn what_is_bound_at_start_is_kept_and_named() {
        let old = settings(BASE, &[]);
        let new = settings(
            "source: {repo: /srv/a, interval: 1m, timeout: 9s}\n\
             targets: {files: {type: files, root: /srv/root}}\n\
             state_dir: /var/lib/two\nserver: {listen: 127.0.0.1:9999}\n\
             log: {format: json}\n",
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(
            p.needs_restart,
            ["state_dir", "server", "log.format", "source.timeout"]
        );
        assert!(p.changed.is_empty(), "{p:?}");
        assert_eq!(p.settings.state_dir, old.state_dir);
        assert_eq!(p.settings.server.listen, "127.0.0.1:9420");
        assert_eq!(p.settings.source.timeout, old.source.timeout);
    }

    #[test]
    fn every_setting_is_sorted_even_those_of_no_section_of_their_own() {
        let old = settings(&format!("{BASE}host: {{name: web-1}}\n"), &[]);
        let new = settings(
            &format!(
                "{}host: {{name: web-2}}\n",
                BASE.replace("timeout: 2m}", "timeout: 2m, allow_rewind: true}")
            ),
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(p.changed, ["source", "host"], "{p:?}");
        assert_eq!(p.settings.host.name, "web-2");
        assert!(p.settings.source.allow_rewind);
        assert!(p.needs_restart.is_empty(), "{p:?}");
    }

    #[test]
    fn a_first_https_repository_is_taken() {
        let old = settings(BASE, &[]);
        let new = settings(
            &BASE.replace("/srv/a", "https://git.example.com/a.git"),
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(p.settings.source.repo, "https://git.example.com/a.git");
        assert_eq!(p.changed, ["source"], "{p:?}");
        assert!(p.needs_restart.is_empty(), "{p:?}");
    }

    #[test]
    fn flags_given_at_start_still_win() {
        let old = settings(BASE, &["--interval", "7s"]);
        let p = plan(
            &old,
            settings(&BASE.replace("1m", "3m"), &["--interval", "7s"]),
        );
        assert!(p.changed.is_empty(), "{p:?}");
        assert_eq!(p.settings.source.interval.as_secs(), 7);
    }

    #[test]
    fn the_election_is_kept_until_a_restart() {
        let old = settings(BASE, &[]);
        let with_ha = format!(
            "{BASE}ha: {{etcd: {{endpoints: [\"http://127.0.0.1:2379\"]}}, election: e, lease_ttl: 3s}}\n"
        );
        let p = plan(&old, settings(&with_ha, &[]));
        assert_eq!(p.needs_restart, ["ha"]);
        assert!(p.settings.ha.is_none(), "{p:?}");
        let old = settings(&with_ha, &[]);
        let p = plan(&old, settings(&with_ha.replace("3s", "5s"), &[]));
        assert_eq!(p.needs_restart, ["ha"]);
        assert_eq!(p.settings.ha.unwrap().lease_ttl.as_secs(), 3);
    }
}
