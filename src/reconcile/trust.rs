//! The gate between fetching and applying (SPEC §9): which revision may be
//! applied now (the operator's pin, or what the ref fetched), whether its
//! signature and its ancestry allow it, and the record of a refusal that
//! `tend status`, the API and the page show.

use std::time::SystemTime;

use git2::Oid;

use super::context::Context;
use super::pass::{PassError, Provenance};
use crate::ledger::{Ledger, LedgerError, RefusalRecord};
use crate::source::verify::{Reason, Refusal};

/// A revision that may be applied.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub revision: Oid,
    pub provenance: Provenance,
}

/// A revision that may not, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    pub revision: Oid,
    pub refusal: Refusal,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "revision {} refused ({})",
            &self.revision.to_string()[..12],
            self.refusal
        )
    }
}

impl std::error::Error for Refused {}

/// Where the high-water mark of the configured source is kept.
pub fn mark_key(ctx: &Context) -> (String, Option<String>) {
    let s = &ctx.settings.source;
    (crate::source::redact_url(&s.repo), s.reference.clone())
}

/// Decides on `fetched` (what the configured ref resolved to): a pin in
/// force holds the source at its revision instead; either must verify, and
/// an unpinned revision must descend from the mark unless rewinds are
/// allowed.
pub fn admit(
    ctx: &Context,
    ledger: &Ledger,
    fetched: Oid,
) -> Result<Result<Admitted, Refused>, PassError> {
    if let Some(pin) = ledger.pin_at(ctx.clock.now())? {
        let revision = Oid::from_str(&pin.revision).map_err(|_| LedgerError::Corrupt {
            path: ledger.path().to_path_buf(),
            detail: format!("pinned revision {:?} is not a commit id", pin.revision),
        })?;
        return Ok(signature(ctx, revision, false)?.map(|signer| Admitted {
            revision,
            provenance: Provenance {
                pinned: true,
                signer,
            },
        }));
    }
    let signer = match signature(ctx, fetched, true)? {
        Ok(s) => s,
        Err(refused) => return Ok(Err(refused)),
    };
    let (repo, reference) = mark_key(ctx);
    if let Some(mark) = ledger.high_water(&repo, reference.as_deref())? {
        let descends = match Oid::from_str(&mark) {
            Ok(mark) => ctx.mirror.descends(fetched, mark)?,
            Err(_) => false,
        };
        if !descends {
            let short = |r: &str| r[..r.len().min(12)].to_string();
            let detail = format!(
                "{} does not descend from {}, the newest revision applied from {}",
                short(&fetched.to_string()),
                short(&mark),
                reference.as_deref().unwrap_or("HEAD")
            );
            if !ctx.settings.source.allow_rewind {
                return Ok(Err(Refused {
                    revision: fetched,
                    refusal: Refusal::new(
                        Reason::Rewind,
                        format!("{detail} (allow_rewind applies it; `tend pin` holds an older revision deliberately)"),
                    ),
                }));
            }
            tracing::warn!(%detail, "history rewound; applied as allow_rewind says");
        }
    }
    Ok(Ok(Admitted {
        revision: fetched,
        provenance: Provenance {
            pinned: false,
            signer,
        },
    }))
}

/// The signer of `revision` when one is required, `None` when not.
fn signature(
    ctx: &Context,
    revision: Oid,
    via_ref: bool,
) -> Result<Result<Option<String>, Refused>, PassError> {
    let Some(anchors) = &ctx.trust else {
        return Ok(Ok(None));
    };
    Ok(match ctx.mirror.verify(anchors, revision, via_ref)? {
        Ok(signer) => Ok(Some(signer.to_string())),
        Err(refusal) => Err(Refused { revision, refusal }),
    })
}

/// Keeps the gate's answer in the ledger: a refusal until a revision is
/// admitted. Written only when it changes.
pub fn record(
    ledger: &Ledger,
    outcome: &Result<Admitted, Refused>,
    now: SystemTime,
) -> Result<(), LedgerError> {
    let held = ledger.refusal()?;
    match outcome {
        Ok(_) if held.is_some() => ledger.set_refusal(None),
        Ok(_) => Ok(()),
        Err(r) => {
            let same = held.as_ref().is_some_and(|h| {
                h.revision == r.revision.to_string()
                    && h.reason == r.refusal.reason.as_str()
                    && h.detail == r.refusal.detail
            });
            if same {
                return Ok(());
            }
            ledger.set_refusal(Some(&RefusalRecord {
                revision: r.revision.to_string(),
                reason: r.refusal.reason.as_str().to_string(),
                detail: r.refusal.detail.clone(),
                at: now,
            }))
        }
    }
}

/// What stays applied while the fetched revision is refused: the last
/// revision the ledger says was applied, when the mirror still has it.
pub fn last_good(ctx: &Context, ledger: &Ledger) -> Option<Admitted> {
    let applied = ledger.source().ok()??.applied_revision?;
    let revision = Oid::from_str(&applied).ok()?;
    ctx.mirror.snapshot(revision).ok()?;
    let signer = ledger.signer_of(&applied).ok().flatten();
    let pinned = ledger
        .pin_at(ctx.clock.now())
        .ok()
        .flatten()
        .is_some_and(|p| p.revision == applied);
    Some(Admitted {
        revision,
        provenance: Provenance { pinned, signer },
    })
}
