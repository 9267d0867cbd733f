//! Host ownership: which process is alive to finish the runs it started.
//!
//! Every open [`SqliteJournal`](super::SqliteJournal) is a *host* with a
//! random id (`h` and 32 lowercase hex digits). For its whole lifetime it
//! holds an exclusive OS lock (`flock` on Unix, `LockFileEx` on Windows) on
//! `<db>.hosts/<host id>.lock`. The kernel releases that lock the moment
//! the process dies, however it dies, so liveness needs no lease and no
//! clock: a host whose lock file can be locked by someone else, or whose
//! lock file is gone, is not running. Others test it with a *shared* lock,
//! so any number of recoverers can find the same host gone at once without
//! making it look alive to each other.
//!
//! The lock file only ever appears under its `.lock` name already locked:
//! it is created as `<id>.tmp`, locked, then renamed. A sweeper that locks
//! and removes a `.tmp` (its creator died before the rename, or has not
//! locked it yet) makes that creator's rename fail, and it starts again
//! with a new id; so no live host ever holds a lock on a removed file.
//! Files are removed only while their remover holds their lock.
//!
//! Another host's lock file is opened by [`open_lock_file`] only: without
//! blocking and without following a symlink, and refused unless it is a
//! regular file ([`LockFileError::NotRegular`]). A FIFO put in its place
//! would otherwise block the open, and with it `keel recover` and
//! `keel serve` startup, forever.

use super::JournalError;
use crate::host_id::valid_host_id;
use std::fs::{File, OpenOptions, TryLockError};
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Attempts at creating a lock file before giving up (each attempt fails
/// only when a sweeper or an id collision got in the way).
const ATTEMPTS: usize = 16;

/// The directory of host lock files beside the database at `db`.
pub(crate) fn hosts_dir(db: &Path) -> PathBuf {
    super::schema::side_file(db, ".hosts")
}

/// A fresh host id: 128 bits from std's per-process random hash keys,
/// mixed with the process id, the time and a counter.
pub(crate) fn new_host_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut id = String::with_capacity(33);
    id.push('h');
    for half in 0u8..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u128(nanos);
        hasher.write_u64(count);
        hasher.write_u8(half);
        id.push_str(&format!("{:016x}", hasher.finish()));
    }
    id
}

/// This process's lock on its host file, held until [`HostLock::release`]
/// or drop.
#[derive(Debug)]
pub(crate) struct HostLock {
    id: String,
    dir: PathBuf,
    file: Option<File>,
}

impl HostLock {
    /// Creates and locks a host file beside `db`.
    pub(crate) fn acquire(db: &Path) -> Result<HostLock, JournalError> {
        let dir = hosts_dir(db);
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, op, source }
        };
        std::fs::create_dir_all(&dir).map_err(io("create the host lock directory", &dir))?;
        for _ in 0..ATTEMPTS {
            let id = new_host_id();
            let tmp = dir.join(format!("{id}.tmp"));
            let file = match File::create_new(&tmp) {
                Ok(file) => file,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io("create a host lock file", &tmp)(e)),
            };
            match file.try_lock() {
                Ok(()) => {}
                // A sweeper holds it: it is removing the file.
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(io("lock the host lock file", &tmp)(e));
                }
            }
            let path = dir.join(format!("{id}.lock"));
            match std::fs::rename(&tmp, &path) {
                Ok(()) => {
                    return Ok(HostLock {
                        id,
                        dir,
                        file: Some(file),
                    });
                }
                // Swept before the rename: our lock is on a removed file.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(io("rename the host lock file", &path)(e));
                }
            }
        }
        Err(JournalError::Io {
            path: dir,
            op: "create a host lock file (every attempt was swept or collided)",
            source: std::io::Error::from(ErrorKind::AlreadyExists),
        })
    }

    /// The host id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The directory of host files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the lock file (still holding its lock), then releases the
    /// lock. Call only after the writer has stopped: from here on the runs
    /// this host owns are abandoned.
    pub(crate) fn release(&mut self) {
        if let Some(file) = self.file.take() {
            let _ = std::fs::remove_file(self.dir.join(format!("{}.lock", self.id)));
            drop(file);
        }
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        self.release();
    }
}

/// What the lock file of an owner says about it.
#[derive(Debug)]
pub(crate) enum Liveness {
    /// Its lock is held: the host is running.
    Alive,
    /// Its lock could be taken (held here, in the file) or its file is
    /// gone (`None`): the host is not running.
    Gone(Option<File>),
}

/// Why a host's lock file could not be checked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockFileError {
    /// Something other than a regular file has the lock file's name (a
    /// FIFO, a directory, a symlink, a device): no host made it, and it is
    /// never opened as a lock (rule `hosts.lock_file`).
    #[error("{path} is a {found}, not a regular lock file (rule hosts.lock_file)")]
    NotRegular {
        /// The lock file's path.
        path: PathBuf,
        /// What is there instead.
        found: &'static str,
    },
    /// Opening or locking it failed.
    #[error("{path}: {source}")]
    Io {
        /// The lock file's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Opens an existing lock file for reading: never blocking, never through
/// a symlink, and only when it is a regular file (checked on the open file
/// itself, so nothing can be swapped in between). `Ok(None)` when there is
/// no file.
pub(crate) fn open_lock_file(path: &Path) -> Result<Option<File>, LockFileError> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    let not_regular = |found| LockFileError::NotRegular {
        path: path.to_path_buf(),
        found,
    };
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_regular("symlink")),
        Err(source) => {
            return Err(LockFileError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let kind = file
        .metadata()
        .map_err(|source| LockFileError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .file_type();
    if kind.is_file() {
        Ok(Some(file))
    } else {
        Err(not_regular(file_type_name(kind)))
    }
}

/// What a file that is not a regular file is, in words.
fn file_type_name(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "FIFO";
        }
        if kind.is_socket() {
            return "socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "device";
        }
    }
    if kind.is_dir() {
        "directory"
    } else if kind.is_symlink() {
        "symlink"
    } else {
        "special file"
    }
}

/// Checks the host `id` (a [`valid_host_id`]) by trying a shared lock on
/// its file: only the owner's exclusive lock refuses it.
pub(crate) fn liveness(dir: &Path, id: &str) -> Result<Liveness, LockFileError> {
    let path = dir.join(format!("{id}.lock"));
    let Some(file) = open_lock_file(&path)? else {
        return Ok(Liveness::Gone(None));
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Liveness::Gone(Some(file))),
        Err(TryLockError::WouldBlock) => Ok(Liveness::Alive),
        Err(TryLockError::Error(source)) => Err(LockFileError::Io { path, source }),
    }
}

/// Removes every host file in `dir` (but `own`'s) whose shared lock can be
/// taken: files of hosts that are gone, and `.tmp` files their creator
/// never renamed (or has not locked yet: it then fails its lock or its
/// rename and starts again). Each file is removed while the lock is held. Returns how many
/// were removed; errors are skipped (a file that cannot be removed now is
/// swept next time).
pub(crate) fn sweep(dir: &Path, own: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(id) = name
            .strip_suffix(".lock")
            .or_else(|| name.strip_suffix(".tmp"))
        else {
            continue;
        };
        if id == own || !valid_host_id(id) {
            continue;
        }
        let path = entry.path();
        // Not a lock file (or gone already): left alone.
        let Ok(Some(file)) = open_lock_file(&path) else {
            continue;
        };
        if file.try_lock_shared().is_ok() && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
        drop(file);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_distinct() {
        let a = new_host_id();
        let b = new_host_id();
        assert!(valid_host_id(&a), "{a}");
        assert_ne!(a, b);
        // `h` and 32 lowercase hex digits.
        assert_eq!(a.len(), 33, "{a}");
        assert!(a.starts_with('h'), "{a}");
        assert!(
            a[1..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{a}"
        );
    }
}
