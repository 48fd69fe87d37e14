//! `policy:`: what a pass may do (prune and its limit, self-heal, adopt),
//! when it runs again, and how much of backups and the audit log is kept.

use std::time::Duration;

use super::file::{ContestedConfig, PolicyConfig};
use super::problem::Problems;
use crate::cli::Flags;
use crate::duration::Dur;
use crate::ledger::AuditRotation;

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

/// A share of the inventory (`50%`) or a count (`20`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PruneLimit {
    Percent(f64),
    Count(usize),
}

/// Why a limit or size as written is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("invalid percentage {0:?}")]
    Percentage(String),
    #[error("percentage {0:?} is outside 0%..100%")]
    OutOfRange(String),
    #[error("invalid limit {0:?}: use a share like 50% or a count")]
    Limit(String),
    #[error("invalid size {0:?}")]
    Size(String),
    #[error("invalid size unit {unit:?} in {size:?}: use B, KiB, MiB, GiB")]
    Unit { unit: String, size: String },
}

impl PruneLimit {
    pub fn parse(s: &str) -> Result<Self, AmountError> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| AmountError::Percentage(s.into()))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(AmountError::OutOfRange(s.into()));
            }
            return Ok(PruneLimit::Percent(v));
        }
        s.parse()
            .map(PruneLimit::Count)
            .map_err(|_| AmountError::Limit(s.into()))
    }
    /// How many deletions one pass may make for an inventory of `size`.
    pub fn allowed(self, size: usize) -> usize {
        match self {
            PruneLimit::Percent(p) => ((size as f64) * p / 100.0).floor() as usize,
            PruneLimit::Count(n) => n,
        }
    }
}

fn parse_size(s: &str) -> Result<u64, AmountError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| AmountError::Size(s.into()))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        u => {
            return Err(AmountError::Unit {
                unit: u.into(),
                size: s.into(),
            })
        }
    };
    Ok(n.saturating_mul(mult))
}

/// The policy in force: `--dry-run` over the config over the defaults.
pub(super) fn resolve(args: &Flags, p: Option<PolicyConfig>, problems: &mut Problems) -> Policy {
    let p = p.unwrap_or_default();
    let contested = p.contested.unwrap_or(ContestedConfig {
        corrections: 5,
        window: Dur(Duration::from_secs(600)),
    });
    let audit = AuditRotation::default();
    let max_prune = p.max_prune.map(|s| PruneLimit::parse(&s));
    let backup_max = p.backup_max.map(|s| parse_size(&s));
    let audit_max = p.audit_max.map(|s| parse_size(&s));
    Policy {
        prune: p.prune.unwrap_or(true),
        max_prune: match max_prune {
            Some(Ok(limit)) => limit,
            Some(Err(e)) => {
                problems.at("policy.max_prune", e.to_string());
                PruneLimit::Percent(50.0)
            }
            None => PruneLimit::Percent(50.0),
        },
        self_heal: p.self_heal.unwrap_or(true),
        adopt: p.adopt.unwrap_or(true),
        allow_empty: p.allow_empty.unwrap_or(false),
        resync: p.resync.map_or(Duration::from_secs(600), |d| d.0),
        contested_corrections: contested.corrections,
        contested_window: contested.window.0,
        backup_retention: p
            .backup_retention
            .map_or(Duration::from_secs(7 * 86400), |d| d.0),
        backup_max: match backup_max {
            Some(Ok(size)) => size,
            Some(Err(e)) => {
                problems.at("policy.backup_max", e.to_string());
                1 << 30
            }
            None => 1 << 30,
        },
        audit_max: match audit_max {
            Some(Ok(0)) => {
                problems.at("policy.audit_max", "must be more than 0");
                audit.max
            }
            Some(Ok(size)) => size,
            Some(Err(e)) => {
                problems.at("policy.audit_max", e.to_string());
                audit.max
            }
            None => audit.max,
        },
        audit_retention: p.audit_retention.map_or(audit.retention, |d| d.0),
        dry_run: args.dry_run.or(p.dry_run).unwrap_or(false),
        watch: p.watch.unwrap_or(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
