//! Connection caps, enforced when a connection is accepted, before any
//! byte of it is read (so before the token check): at most
//! `--max-connections` in all and `--max-connections-per-peer` from one IP
//! address.
//!
//! A full cap makes room by closing its oldest connection that has not yet
//! passed the token check ([`mark_authenticated`]); only when every
//! connection under it has is the new one refused. So peers without the
//! token can hold slots only until someone else connects: they can churn
//! each other out, never a client that has shown the token, and a new
//! connection always gets a slot while any is held by such a peer.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// A connection refused at accept: every slot of the cap is held by a
/// connection that passed the token check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// `--max-connections` authenticated connections are open.
    #[error(
        "this daemon serves at most {max} connections at once (--max-connections), all of them authenticated"
    )]
    Total {
        /// The cap.
        max: usize,
    },
    /// `--max-connections-per-peer` authenticated connections from this
    /// peer's IP address are open.
    #[error(
        "this daemon serves at most {max} connections at once from one address (--max-connections-per-peer), all of them authenticated"
    )]
    PerPeer {
        /// The cap.
        max: usize,
    },
}

impl AdmissionError {
    /// The flag naming the bound.
    pub fn bound(&self) -> &'static str {
        match self {
            AdmissionError::Total { .. } => "max_connections",
            AdmissionError::PerPeer { .. } => "max_connections_per_peer",
        }
    }

    /// The cap.
    pub fn max(&self) -> usize {
        match self {
            AdmissionError::Total { max } | AdmissionError::PerPeer { max } => *max,
        }
    }
}

/// Whether a connection has passed the token check; the request
/// extension [`mark_authenticated`] sets.
#[derive(Debug, Clone, Default)]
pub struct ConnMark(Arc<AtomicBool>);

impl ConnMark {
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The middleware inside the token check: a connection that carried a
/// request past it is never closed to make room.
pub async fn mark_authenticated(request: Request, next: Next) -> Response {
    if let Some(mark) = request.extensions().get::<ConnMark>() {
        mark.0.store(true, Ordering::Relaxed);
    }
    next.run(request).await
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    mark: ConnMark,
    evict: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    /// By id, so the first unauthenticated entry is the oldest.
    conns: BTreeMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Open {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&entry.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// Closes the oldest unauthenticated connection (of `peer`, when
    /// given); whether there was one.
    fn evict_oldest(&mut self, peer: Option<IpAddr>) -> bool {
        let victim = self
            .conns
            .iter()
            .find(|(_, e)| !e.mark.is_set() && peer.is_none_or(|p| e.peer == p))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.remove(id)) {
            Some(entry) => {
                entry.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The open connections, by peer.
#[derive(Debug)]
pub struct Admission {
    max_total: usize,
    max_per_peer: usize,
    open: Mutex<Open>,
}

impl Admission {
    /// Caps of `max_total` connections, `max_per_peer` from one address.
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_peer,
            open: Mutex::new(Open::default()),
        })
    }

    /// Admits a connection from `peer`, closing an unauthenticated one
    /// when a cap is full; the permit holds its slot until dropped.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<ConnPermit, AdmissionError> {
        let mut open = super::lock(&self.open);
        let from_peer = open.per_peer.get(&peer).copied().unwrap_or(0);
        if from_peer >= self.max_per_peer && !open.evict_oldest(Some(peer)) {
            return Err(AdmissionError::PerPeer {
                max: self.max_per_peer,
            });
        }
        if open.conns.len() >= self.max_total && !open.evict_oldest(None) {
            return Err(AdmissionError::Total {
                max: self.max_total,
            });
        }
        let id = open.next_id;
        open.next_id += 1;
        let mark = ConnMark::default();
        let evict = Arc::new(Notify::new());
        open.conns.insert(
            id,
            Entry {
                peer,
                mark: mark.clone(),
                evict: Arc::clone(&evict),
            },
        );
        *open.per_peer.entry(peer).or_insert(0) += 1;
        Ok(ConnPermit {
            admission: Arc::clone(self),
            id,
            mark,
            evict,
        })
    }

    /// Open connections (for tests).
    #[cfg(test)]
    fn open(&self) -> usize {
        super::lock(&self.open).conns.len()
    }
}

/// One admitted connection's slot, freed on drop.
#[derive(Debug)]
pub struct ConnPermit {
    admission: Arc<Admission>,
    id: u64,
    mark: ConnMark,
    evict: Arc<Notify>,
}

impl ConnPermit {
    /// The mark its requests carry (set by [`mark_authenticated`]).
    pub fn mark(&self) -> ConnMark {
        self.mark.clone()
    }

    /// Resolves when the connection was chosen to make room.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        super::lock(&self.admission.open).remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[tokio::test]
    async fn a_full_cap_evicts_the_oldest_unauthenticated() {
        let a = Admission::new(3, 3);
        let first = a.admit(ip(2)).unwrap();
        let second = a.admit(ip(2)).unwrap();
        let third = a.admit(ip(3)).unwrap();
        first.mark().0.store(true, Ordering::Relaxed);
        let fourth = a.admit(ip(4)).unwrap();
        // `second` is the oldest without the token: it was told to go.
        tokio::time::timeout(std::time::Duration::from_secs(5), second.evicted())
            .await
            .unwrap();
        assert_eq!(a.open(), 3);
        drop(second);
        assert_eq!(a.open(), 3, "an evicted permit's slot was already freed");
        third.mark().0.store(true, Ordering::Relaxed);
        fourth.mark().0.store(true, Ordering::Relaxed);
        assert_eq!(
            a.admit(ip(5)).unwrap_err(),
            AdmissionError::Total { max: 3 }
        );
        drop(fourth);
        assert!(a.admit(ip(5)).is_ok());
    }

    #[test]
    fn the_per_peer_cap_evicts_only_that_peer() {
        let a = Admission::new(10, 2);
        let other = a.admit(ip(9)).unwrap();
        let x = a.admit(ip(2)).unwrap();
        let _y = a.admit(ip(2)).unwrap();
        x.mark().0.store(true, Ordering::Relaxed);
        let z = a.admit(ip(2)).unwrap();
        assert_eq!(
            a.open(),
            3,
            "y made room for z; the other peer kept its slot"
        );
        z.mark().0.store(true, Ordering::Relaxed);
        assert_eq!(
            a.admit(ip(2)).unwrap_err(),
            AdmissionError::PerPeer { max: 2 }
        );
        assert!(a.admit(ip(3)).is_ok(), "another peer is still admitted");
        drop(other);
        assert_eq!(a.open(), 2);
    }
}
