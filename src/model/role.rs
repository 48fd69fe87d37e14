//! This replica's part among replicas with `ha` (SPEC §11), as the elector
//! (src/ha) finds it and the pass and the targets read it: whether it may
//! write, and the fencing token each write carries. Without `ha` every
//! write is this tend's own and there is no token.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the leader's writes are fenced with: its election key and that
/// key's create revision. A store that checks both in the same transaction
/// as the write refuses a replica that is no longer the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub key: Vec<u8>,
    pub revision: i64,
}

/// Why this replica may not write now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLeader {
    #[error("not the leader: its lease was not renewed in time")]
    Lapsed,
    #[error("not the leader: {0} is")]
    Follows(String),
    #[error("not the leader: no leader is known")]
    NoLeader,
    /// A store refused a write fenced with this replica's token.
    #[error("not the leader: etcd refused the write, the leader key {key} is no longer at revision {revision}")]
    Refused { key: String, revision: i64 },
}

/// The replica's role as status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Leader {
        key: String,
        token: i64,
    },
    /// Not the leader; whom it follows, when known.
    Follower {
        leader: Option<String>,
    },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Leader { .. } => "leader",
            Role::Follower { .. } => "follower",
        }
    }
}

struct State {
    /// The election won, while its lease is renewed.
    leading: Option<Token>,
    /// Writes stop at this instant unless the lease is renewed before it:
    /// well before the lease can expire.
    valid_until: Option<Instant>,
    /// The leader as last seen by a follower.
    leader: Option<String>,
}

struct Inner {
    me: String,
    state: Mutex<State>,
    /// A store refused a write fenced with the token: the elector gives the
    /// lease up and campaigns again.
    refused: AtomicBool,
    /// A write was denied because the renewal came late, while the
    /// election was still won: once renewed, the elector asks for a full
    /// pass, since what was denied is not retried by itself.
    lapsed: AtomicBool,
}

/// The shared role; cloned into the targets that fence their writes.
/// `Fence::off()` (no `ha`) allows every write and carries no token.
#[derive(Clone, Default)]
pub struct Fence(Option<Arc<Inner>>);

impl Fence {
    pub fn off() -> Fence {
        Fence(None)
    }

    /// A replica named `me` that follows until the elector says it leads.
    pub fn on(me: &str) -> Fence {
        Fence(Some(Arc::new(Inner {
            me: me.to_string(),
            state: Mutex::new(State {
                leading: None,
                valid_until: None,
                leader: None,
            }),
            refused: AtomicBool::new(false),
            lapsed: AtomicBool::new(false),
        })))
    }

    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    fn state(&self) -> Option<std::sync::MutexGuard<'_, State>> {
        self.0.as_ref().map(|i| i.state.lock().expect("role lock"))
    }

    /// The token a write carries now: `Ok(None)` without `ha`; an error
    /// naming the leader when this replica may not write.
    pub fn token(&self) -> Result<Option<Token>, NotLeader> {
        let Some(inner) = &self.0 else {
            return Ok(None);
        };
        let s = inner.state.lock().expect("role lock");
        match (&s.leading, s.valid_until) {
            (Some(t), Some(until)) if Instant::now() < until => Ok(Some(t.clone())),
            (Some(_), _) => {
                inner.lapsed.store(true, Ordering::SeqCst);
                Err(NotLeader::Lapsed)
            }
            (None, _) => Err(match &s.leader {
                Some(l) => NotLeader::Follows(l.clone()),
                None => NotLeader::NoLeader,
            }),
        }
    }

    /// Whether this replica may write now.
    pub fn may_write(&self) -> bool {
        self.token().is_ok()
    }

    /// The role as status shows it: a leader whose lease was not renewed in
    /// time already counts as a follower.
    pub fn role(&self) -> Option<Role> {
        let inner = self.0.as_ref()?;
        let token = self.token();
        let s = inner.state.lock().expect("role lock");
        Some(match (&s.leading, token) {
            (Some(t), Ok(_)) => Role::Leader {
                key: String::from_utf8_lossy(&t.key).into_owned(),
                token: t.revision,
            },
            _ => Role::Follower {
                leader: s.leader.clone(),
            },
        })
    }

    /// The leader's name: this replica's when it leads.
    pub fn leader_name(&self) -> Option<String> {
        let inner = self.0.as_ref()?;
        match self.role()? {
            Role::Leader { .. } => Some(inner.me.clone()),
            Role::Follower { leader } => leader,
        }
    }

    /// The elector won with `token`; writes are allowed until `valid_until`.
    pub fn lead(&self, token: Token, valid_until: Instant) {
        if let Some(inner) = &self.0 {
            inner.refused.store(false, Ordering::SeqCst);
            let mut s = inner.state.lock().expect("role lock");
            s.leading = Some(token);
            s.valid_until = Some(valid_until);
            s.leader = Some(inner.me.clone());
        }
    }

    /// The lease was renewed: writes are allowed until `valid_until`.
    pub fn renewed(&self, valid_until: Instant) {
        if let Some(mut s) = self.state() {
            s.valid_until = Some(valid_until);
        }
    }

    /// This replica does not lead; `leader` is the one seen, when known.
    pub fn follow(&self, leader: Option<String>) {
        if let Some(mut s) = self.state() {
            s.leading = None;
            s.valid_until = None;
            s.leader = leader;
        }
    }

    /// A store refused a write fenced with `token`: another replica leads.
    /// This one follows at once, and the elector campaigns again.
    pub fn refused(&self, token: &Token) {
        let Some(inner) = &self.0 else {
            return;
        };
        let mut s = inner.state.lock().expect("role lock");
        if s.leading.as_ref() == Some(token) {
            s.leading = None;
            s.valid_until = None;
            s.leader = None;
            inner.refused.store(true, Ordering::SeqCst);
        }
    }

    /// Whether a write was denied for a late renewal since the elector
    /// last asked.
    pub fn take_lapsed(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|i| i.lapsed.swap(false, Ordering::SeqCst))
    }

    /// Whether a write was refused since the elector last asked.
    pub fn take_refused(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|i| i.refused.swap(false, Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn token() -> Token {
        Token {
            key: b"tend/web/1".to_vec(),
            revision: 7,
        }
    }

    #[test]
    fn without_ha_every_write_is_allowed_and_carries_no_token() {
        let f = Fence::off();
        assert_eq!(f.token(), Ok(None));
        assert!(f.role().is_none());
    }

    #[test]
    fn a_leader_writes_until_its_renewal_runs_out() {
        let f = Fence::on("web-1");
        assert!(!f.may_write());
        assert_eq!(f.role(), Some(Role::Follower { leader: None }));
        f.lead(token(), Instant::now() + Duration::from_secs(60));
        assert_eq!(f.token(), Ok(Some(token())));
        assert_eq!(f.leader_name().as_deref(), Some("web-1"));
        f.renewed(Instant::now() - Duration::from_millis(1));
        let e = f.token().unwrap_err();
        assert_eq!(e, NotLeader::Lapsed);
        assert!(e.to_string().contains("not renewed in time"), "{e}");
        assert_eq!(f.role().unwrap().name(), "follower");
        assert!(f.take_lapsed(), "a denied write is told to the elector");
        assert!(!f.take_lapsed());
        f.renewed(Instant::now() + Duration::from_secs(60));
        assert!(f.may_write());
        assert!(!f.take_lapsed());
    }

    #[test]
    fn a_refused_write_makes_the_leader_follow_once() {
        let f = Fence::on("web-1");
        f.lead(token(), Instant::now() + Duration::from_secs(60));
        let other = Token {
            revision: 3,
            ..token()
        };
        f.refused(&other);
        assert!(f.may_write(), "a refusal of an older token changes nothing");
        f.refused(&token());
        assert!(!f.may_write());
        assert!(f.take_refused());
        assert!(!f.take_refused());
        f.follow(Some("web-2".into()));
        assert_eq!(f.token().unwrap_err(), NotLeader::Follows("web-2".into()));
        assert_eq!(
            f.token().unwrap_err().to_string(),
            "not the leader: web-2 is"
        );
    }
}
