//! `source:`: the repository, the path in it (with this host's
//! placeholders filled in), fetching, authentication, signatures, the
//! mirror's pruning and mirror mode's decryption.

use std::time::Duration;

use super::file::SourceConfig;
use super::problem::Problems;
use super::secrets;
use super::settings::SourceSettings;
use crate::cli::Flags;
use crate::model::host::Host;
use crate::source::verify::{Require, VerifySpec};
use crate::source::{Auth, GcSpec};

/// The source in force: flags (and their environment) over the config over
/// the defaults. Every problem is gathered; what is wrong is left at its
/// default.
pub(super) fn resolve(
    args: &Flags,
    src: Option<SourceConfig>,
    host: &Host,
    problems: &mut Problems,
) -> SourceSettings {
    let src = src.unwrap_or_default();
    let repo = args.repo.clone().or(src.repo).unwrap_or_else(|| {
        problems.general(
            "",
            "no repository: give --repo, TEND_REPO or source.repo in the config",
        );
        String::new()
    });
    let path = args.path.clone().or(src.path).unwrap_or_default();
    let path = match crate::model::host::expand(&path, host) {
        Ok(p) => p.trim_matches('/').to_string(),
        Err(m) => {
            problems.at("source.path", m.to_string());
            String::new()
        }
    };
    if path.split('/').any(|c| c == "..") {
        problems.at("source.path", format!("{path:?} may not contain `..`"));
    }
    match src.submodules.as_deref() {
        None | Some("skip") => {}
        Some("recursive") => problems.at(
            "source.submodules",
            "recursive is not supported yet; use skip (submodules are left out, with a warning)",
        ),
        Some(other) => problems.at(
            "source.submodules",
            format!("unknown value {other:?} (known: skip)"),
        ),
    }
    let v = src.verify.unwrap_or_default();
    let require = match v.require.as_deref().map(Require::parse) {
        Some(Ok(r)) => r,
        Some(Err(m)) => {
            problems.at("source.verify.require", m.to_string());
            Require::Commit
        }
        None => Require::Commit,
    };
    let verify = VerifySpec {
        allowed_signers: args.allowed_signers.clone().or(v.allowed_signers),
        keyring: args.keyring.clone().or(v.keyring),
        require,
    };
    if v.require.is_some() && verify.allowed_signers.is_none() && verify.keyring.is_none() {
        problems.at(
            "source.verify",
            "needs allowed_signers or keyring (or --allowed-signers / --keyring)",
        );
    }
    let decrypt_suffix = secrets::suffix(src.decrypt).unwrap_or_else(|m| {
        problems.at("source.decrypt.suffix", m.to_string());
        None
    });
    let g = src.gc.unwrap_or_default();
    if g.budget.is_some_and(|b| b.0.is_zero()) {
        problems.at("source.gc.budget", "must be more than 0");
    }
    let gc_default = GcSpec::default();
    let a = src.auth.unwrap_or_default();
    SourceSettings {
        repo,
        reference: args.reference.clone().or(src.reference),
        path,
        mirror: args.mirror.or(src.mirror).unwrap_or(false),
        interval: args
            .interval
            .or(src.interval)
            .map_or(Duration::from_secs(60), |d| d.0),
        timeout: args
            .timeout
            .or(src.timeout)
            .map_or(Duration::from_secs(120), |d| d.0),
        auth: Auth {
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
        depth: src.depth.unwrap_or(crate::source::DEFAULT_DEPTH),
        gc: GcSpec {
            interval: g.interval.map_or(gc_default.interval, |x| x.0),
            grace: g.grace.map_or(gc_default.grace, |x| x.0),
            budget: g.budget.map_or(gc_default.budget, |x| x.0),
        },
        decrypt_suffix,
    }
}
