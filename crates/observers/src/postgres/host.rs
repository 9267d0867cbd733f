//! Hosts without lock files: each open journal holds a session-level
//! advisory lock on a key derived from its host id, on a connection of
//! its own, for its lifetime. The server releases it the moment that
//! session ends (the process died, the connection broke), so a host is
//! gone exactly when its lock can be taken.

use super::{PgUrl, connect, pg_error};
use crate::journal::JournalError;
use crate::journal::hosts::new_host_id;
use postgres::GenericClient;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Fresh ids tried before giving up (a taken key means a colliding id).
const ATTEMPTS: usize = 16;

/// The advisory lock key of host `id`: FNV-1a (64 bits) of
/// `keel.host/` followed by the id, as a signed integer. Any string has a
/// key, so the liveness of any recorded owner can be asked.
pub(crate) fn host_key(id: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"keel.host/".iter().chain(id.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Whether host `id` is gone: its lock can be taken (and is released at
/// once, so two recoverers asking together both see it gone).
pub(crate) fn is_gone(client: &mut impl GenericClient, id: &str) -> Result<bool, postgres::Error> {
    let key = host_key(id);
    let taken: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])?
        .get(0);
    if taken {
        client.execute("SELECT pg_advisory_unlock($1)", &[&key])?;
    }
    Ok(taken)
}

/// This journal's host: its id, and the thread that holds the lock's
/// connection until [`HostLock::release`] (or drop).
#[derive(Debug)]
pub(crate) struct HostLock {
    id: String,
    stop: Option<mpsc::Sender<()>>,
    keeper: Option<JoinHandle<()>>,
}

impl HostLock {
    /// Connects, takes the lock of a fresh host id and keeps it on a
    /// thread of its own (the blocking client never runs on the caller's
    /// async runtime, even when dropped).
    pub(crate) fn acquire(url: &PgUrl) -> Result<HostLock, JournalError> {
        let (ready_tx, ready) = mpsc::channel::<Result<String, JournalError>>();
        let (stop, stopped) = mpsc::channel::<()>();
        let owned = url.clone();
        let keeper = std::thread::Builder::new()
            .name("keel-pg-host".to_owned())
            .spawn(move || {
                let mut client = match lock_fresh_id(&owned) {
                    Ok((client, id)) => {
                        let _ = ready_tx.send(Ok(id));
                        client
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                // Until release or the journal's drop.
                let _ = stopped.recv();
                let _ = client.batch_execute("SELECT pg_advisory_unlock_all()");
            })
            .map_err(JournalError::Spawn)?;
        let id = match ready.recv() {
            Ok(result) => result,
            Err(_) => Err(JournalError::WriterPanicked),
        };
        match id {
            Ok(id) => Ok(HostLock {
                id,
                stop: Some(stop),
                keeper: Some(keeper),
            }),
            Err(e) => {
                let _ = keeper.join();
                Err(e)
            }
        }
    }

    /// The host id (`h` and 32 lowercase hex digits).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Releases the lock and closes its connection: from now on this
    /// host is gone.
    pub(crate) fn release(&mut self) {
        self.stop = None;
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        self.release();
    }
}

/// A connection holding the lock of a fresh host id.
fn lock_fresh_id(url: &PgUrl) -> Result<(postgres::Client, String), JournalError> {
    let mut client = connect(url, "connect the host lock")?;
    for _ in 0..ATTEMPTS {
        let id = new_host_id();
        let taken: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&host_key(&id)])
            .map_err(pg_error(url, "take the host lock"))?
            .get(0);
        if taken {
            return Ok((client, id));
        }
    }
    Err(JournalError::Postgres {
        database: url.to_string(),
        op: "take the host lock",
        detail: format!("{ATTEMPTS} fresh host ids were all locked"),
    })
}

#[cfg(test)]
mod tests {
    use super::host_key;

    #[test]
    fn host_keys_differ_by_id_and_are_stable() {
        assert_ne!(host_key("h0"), host_key("h1"));
        // FNV-1a of "keel.host/h0", pinned: a changed key would make hosts
        // of two builds on one database see each other as gone.
        assert_eq!(host_key("h0"), 756_122_244_085_764_605);
    }
}
