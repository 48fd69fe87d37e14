//! A fetched revision through the trust gate (pin, signature, high-water
//! mark), and the switch to the one that may be applied: read, then
//! reconciled whole or by its changes.

use std::sync::Arc;

use super::Loop;
use crate::daemon::publish;
use crate::reconcile::{load_next, trust, Next, Scope};

impl Loop {
    /// Decides on `fetched` (SPEC §9) and switches to what may be applied:
    /// a refused revision changes nothing, and the last good one stays (or,
    /// after a restart, is loaded again) so its drift is still corrected.
    /// `count`: a refusal of a fresh fetch, for the metric.
    pub(super) async fn admit(&mut self, fetched: git2::Oid, count: bool) {
        self.admit_or_rerun(fetched, count, false).await
    }

    /// [`Loop::admit`]; with `rerun` (new settings) what stays applied is
    /// reconciled again even when it is the current revision.
    pub(in crate::daemon) async fn admit_or_rerun(
        &mut self,
        fetched: git2::Oid,
        count: bool,
        rerun: bool,
    ) {
        let (gate, fallback) = self
            .blocking(move |ctx, rec| {
                let gate = trust::admit(ctx, &rec.ledger, fetched);
                if let Ok(g) = &gate {
                    if let Err(e) = trust::record(&rec.ledger, g, ctx.clock.now()) {
                        tracing::warn!(error = %e, "cannot record the source's trust state");
                    }
                }
                let fallback = match &gate {
                    Ok(Err(_)) => trust::last_good(ctx, &rec.ledger),
                    _ => None,
                };
                (gate, fallback)
            })
            .await;
        let current = self.shared.current();
        let differs = |a: &trust::Admitted| {
            rerun
                || current
                    .as_ref()
                    .is_none_or(|r| r.id != a.revision || r.provenance != a.provenance)
        };
        match gate {
            Ok(Ok(admitted)) if differs(&admitted) => {
                if self.staged(&admitted).await {
                    self.switch_to(admitted).await
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(refused)) => {
                tracing::warn!(%refused, "the last good revision stays applied");
                if count {
                    publish::refused(&self.shared.metrics, refused.refusal.reason.as_str());
                }
                let stays = current.as_ref().map(|r| trust::Admitted {
                    revision: r.id,
                    provenance: r.provenance.clone(),
                });
                match (stays, fallback) {
                    (Some(stays), _) if rerun => self.switch_to(stays).await,
                    (None, Some(good)) => self.switch_to(good).await,
                    _ => {}
                }
                self.publish(true).await;
            }
            Err(e) => {
                tracing::warn!(revision = %fetched, error = %e, "cannot check the revision; the last good state stays")
            }
        }
    }

    /// Reads revision `id` and reconciles it: from the current revision,
    /// when that one is settled and the watcher sees drift, only what
    /// changed; otherwise all of it.
    pub(in crate::daemon) async fn switch_to(&mut self, admitted: trust::Admitted) {
        let id = admitted.revision;
        // Without a healthy watcher, drift of unchanged resources is only
        // seen by full passes: a new revision gets one, as the resync does.
        let watched = self.watch.healthy();
        let settled = watched
            && self
                .shared
                .current()
                .is_some_and(|r| Some(r.id) == self.settled);
        // The previous revision's desired state is reused, not copied, when
        // nothing else holds it.
        let prev = if settled {
            self.shared.take_current()
        } else {
            None
        };
        let loaded = self.blocking(move |ctx, _| load_next(ctx, prev, id)).await;
        let (rev, scope) = match loaded {
            Ok(Next::Whole(rev)) => (rev, Scope::All),
            Ok(Next::Changes { rev, keys }) => (rev, Scope::Changes(keys)),
            Err((e, prev)) => {
                if let Some(prev) = prev {
                    self.shared.set_current(prev);
                }
                tracing::warn!(revision = %id, error = %e, "cannot read revision; the last good state stays");
                return;
            }
        };
        let changed = scope.keys().map(|k| k.len());
        tracing::info!(revision = %id, resources = rev.declared.resources.len(), changed, "new revision");
        for problem in rev.declared.problems.iter().take(20) {
            tracing::warn!(revision = %id, %problem, "invalid declaration; nothing is pruned until it is fixed");
        }
        for note in rev.declared.notes.iter().take(20) {
            tracing::warn!(revision = %id, %note, "left out of the revision");
        }
        let mut rev = rev;
        rev.provenance = admitted.provenance;
        let rev = Arc::new(rev);
        self.shared.set_current(rev);
        self.settled = None;
        self.just_read = true;
        self.pass(scope).await;
    }
}
