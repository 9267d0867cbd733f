//! `read_file`'s confinement: every open resolves beneath one directory
//! handle, so no check-then-open race can lead outside it (issue #22).
//!
//! The `--files` directory is opened once, as a [`cap_std::fs::Dir`], when
//! the tool is built. Each read resolves the model's relative path against
//! that handle in one step: on Linux `openat2` with `RESOLVE_BENEATH`,
//! elsewhere (or where `openat2` is missing or retried out) cap-std's
//! component-by-component walk, which refuses the same escapes. There is no
//! separate "check the path, then open it again" window for a swapped
//! symlink or directory to slip through: what is opened is what was
//! resolved, and it was resolved beneath the root.
//!
//! Symlinks: a relative symlink whose target stays beneath the root is
//! followed, to any depth the OS allows. A symlink that leaves the root by
//! `..`, and every absolute symlink (even one naming a path inside the
//! root: the root is the top of the namespace here, so `/` means outside
//! it), is refused as [`ReadFileError::Outside`].

use super::BuiltinError;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path};

/// The largest file `read_file` returns: 64 KiB.
pub const READ_FILE_MAX_BYTES: u64 = 64 * 1024;

/// The `--files` directory, open: the only place `read_file` reads.
#[derive(Debug)]
pub struct FilesRoot {
    dir: Dir,
}

/// Why `read_file` refused a path. Each message names the rule
/// (`read_file.*`) and the path as the model gave it, never the root's
/// location or any file content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadFileError {
    /// An empty path.
    #[error("read_file.path_nonempty: the path is empty")]
    Empty,
    /// An absolute path.
    #[error(
        "read_file.path_relative: {path} is absolute; give a path relative to the files directory"
    )]
    Absolute {
        /// The path as given.
        path: String,
    },
    /// A `..` component.
    #[error("read_file.no_parent: `..` is refused in paths ({path})")]
    ParentDir {
        /// The path as given.
        path: String,
    },
    /// Nothing at the path (or a symlink on it dangles).
    #[error("read_file.exists: no such file: {path}")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// Resolving the path would leave the files directory: a symlink out
    /// of it, or an absolute symlink.
    #[error("read_file.beneath: {path} resolves outside the files directory (a symlink?); refused")]
    Outside {
        /// The path as given.
        path: String,
    },
    /// A directory, FIFO, socket or device.
    #[error("read_file.regular_file: {path} is not a regular file")]
    NotRegular {
        /// The path as given.
        path: String,
    },
    /// Over [`READ_FILE_MAX_BYTES`].
    #[error(
        "read_file.max_bytes: {path} is at least {bytes} bytes, over the {READ_FILE_MAX_BYTES}-byte limit"
    )]
    TooLarge {
        /// The path as given.
        path: String,
        /// The size seen: the file's length, or what was read once it grew.
        bytes: u64,
    },
    /// The content is not UTF-8.
    #[error("read_file.utf8: {path} is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The path as given.
        path: String,
        /// The offset of the first invalid byte.
        offset: usize,
    },
    /// Any other OS error while resolving, opening or reading.
    #[error("read_file.io: cannot {step} {path}: {kind}")]
    Io {
        /// What was being done: `stat`, `open` or `read`.
        step: &'static str,
        /// The path as given.
        path: String,
        /// What the OS said, as a kind.
        kind: ErrorKind,
    },
}

impl FilesRoot {
    /// Opens `path` (the canonical `--files` directory) once; every read
    /// resolves beneath this handle, so renaming or replacing `path`
    /// later does not move the root.
    pub fn open(path: &Path) -> Result<FilesRoot, BuiltinError> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(|e| BuiltinError::FilesDir { kind: e.kind() })?;
        Ok(FilesRoot { dir })
    }

    /// Reads `relative` beneath the root: a regular file of at most
    /// [`READ_FILE_MAX_BYTES`] of UTF-8 text. Blocking: call it off the
    /// async runtime.
    pub fn read(&self, relative: &str) -> Result<String, ReadFileError> {
        let rel = relative_path(relative)?;
        let owned = || relative.to_owned();
        // Checked before opening too: opening a FIFO blocks until a writer
        // comes, which would hold a thread past the tool's timeout. This
        // stat resolves beneath the root as well; it only guards against
        // blocking, the checks that confine are on the open file below.
        let meta = self
            .dir
            .metadata(rel)
            .map_err(|e| classify(&e, "stat", relative))?;
        if !meta.is_file() {
            return Err(ReadFileError::NotRegular { path: owned() });
        }
        let file = self
            .dir
            .open(rel)
            .map_err(|e| classify(&e, "open", relative))?;
        // The open file, not the path, is what gets read: these checks
        // are on the very inode that was resolved beneath the root.
        let meta = file
            .metadata()
            .map_err(|e| classify(&e, "stat", relative))?;
        if !meta.is_file() {
            return Err(ReadFileError::NotRegular { path: owned() });
        }
        if meta.len() > READ_FILE_MAX_BYTES {
            return Err(ReadFileError::TooLarge {
                path: owned(),
                bytes: meta.len(),
            });
        }
        // Read at most one byte past the bound, in case the file grew.
        let mut bytes = Vec::new();
        file.take(READ_FILE_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| classify(&e, "read", relative))?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > READ_FILE_MAX_BYTES {
            return Err(ReadFileError::TooLarge {
                path: owned(),
                bytes: read,
            });
        }
        String::from_utf8(bytes).map_err(|e| ReadFileError::NotUtf8 {
            path: owned(),
            offset: e.utf8_error().valid_up_to(),
        })
    }
}

/// `relative` as a path with only normal and `.` components.
fn relative_path(relative: &str) -> Result<&Path, ReadFileError> {
    if relative.is_empty() {
        return Err(ReadFileError::Empty);
    }
    let rel = Path::new(relative);
    let absolute = || ReadFileError::Absolute {
        path: relative.to_owned(),
    };
    if rel.is_absolute() || relative.starts_with('/') || relative.starts_with('\\') {
        return Err(absolute());
    }
    for component in rel.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(ReadFileError::ParentDir {
                    path: relative.to_owned(),
                });
            }
            Component::RootDir | Component::Prefix(_) => return Err(absolute()),
        }
    }
    Ok(rel)
}

/// The typed refusal for an OS error at `step`. cap-std reports an escape
/// (`EXDEV` from `openat2`, or its own walk leaving the root) as
/// `PermissionDenied` with no OS error code; a real `EACCES` carries one.
fn classify(e: &std::io::Error, step: &'static str, relative: &str) -> ReadFileError {
    let path = relative.to_owned();
    match e.kind() {
        ErrorKind::NotFound => ReadFileError::NotFound { path },
        ErrorKind::PermissionDenied if e.raw_os_error().is_none() => {
            ReadFileError::Outside { path }
        }
        kind => ReadFileError::Io { step, path, kind },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    struct Sandbox {
        _dir: tempfile::TempDir,
        base: std::path::PathBuf,
        root: FilesRoot,
    }

    fn sandbox() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(base.join("root/sub")).unwrap();
        std::fs::write(base.join("root/sub/a.txt"), "hello").unwrap();
        std::fs::write(base.join("secret.txt"), "nope").unwrap();
        std::fs::write(base.join("root/big.txt"), vec![b'a'; 70_000]).unwrap();
        std::fs::write(base.join("root/bin.dat"), [0xff, 0xfe]).unwrap();
        let root = FilesRoot::open(&base.join("root")).unwrap();
        Sandbox {
            _dir: dir,
            base,
            root,
        }
    }

    #[test]
    fn reads_and_refusals_are_typed_and_name_the_rule() {
        let sb = sandbox();
        assert_eq!(sb.root.read("sub/a.txt").unwrap(), "hello");
        assert_eq!(sb.root.read("./sub/a.txt").unwrap(), "hello");
        let err = |p: &str| sb.root.read(p).unwrap_err();
        let path = |p: &str| p.to_owned();
        assert_eq!(err(""), ReadFileError::Empty);
        assert_eq!(
            err("../secret.txt"),
            ReadFileError::ParentDir {
                path: path("../secret.txt")
            }
        );
        assert!(matches!(
            err("sub/../../secret.txt"),
            ReadFileError::ParentDir { .. }
        ));
        assert!(matches!(err("/etc/passwd"), ReadFileError::Absolute { .. }));
        assert!(matches!(err("\\etc"), ReadFileError::Absolute { .. }));
        assert_eq!(
            err("missing.txt"),
            ReadFileError::NotFound {
                path: path("missing.txt")
            }
        );
        assert_eq!(
            err("big.txt"),
            ReadFileError::TooLarge {
                path: path("big.txt"),
                bytes: 70_000
            }
        );
        assert_eq!(
            err("bin.dat"),
            ReadFileError::NotUtf8 {
                path: path("bin.dat"),
                offset: 0
            }
        );
        assert_eq!(err("sub"), ReadFileError::NotRegular { path: path("sub") });
        assert_eq!(err("."), ReadFileError::NotRegular { path: path(".") });
        assert!(matches!(
            err("sub/a.txt/x"),
            ReadFileError::Io { step: "stat", .. }
        ));
        let message = err("big.txt").to_string();
        assert!(
            message.starts_with("read_file.max_bytes: big.txt"),
            "{message}"
        );
        // No message names where the root is.
        let base = sb.base.to_string_lossy().into_owned();
        for p in ["", "/x", "../x", "missing.txt", "big.txt", "bin.dat", "sub"] {
            assert!(!err(p).to_string().contains(&base), "{p}");
        }
    }

    #[test]
    fn an_unopenable_root_is_typed() {
        let sb = sandbox();
        let missing = FilesRoot::open(&sb.base.join("nowhere")).unwrap_err();
        assert_eq!(
            missing,
            BuiltinError::FilesDir {
                kind: ErrorKind::NotFound
            }
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_only_beneath_the_root() {
        use std::os::unix::fs::symlink;
        let sb = sandbox();
        let root = sb.base.join("root");
        // Relative, staying inside: followed (also through a directory link).
        symlink("sub/a.txt", root.join("inside.txt")).unwrap();
        symlink("sub", root.join("dirlink")).unwrap();
        symlink("../sub/a.txt", root.join("sub/up.txt")).unwrap();
        assert_eq!(sb.root.read("inside.txt").unwrap(), "hello");
        assert_eq!(sb.root.read("dirlink/a.txt").unwrap(), "hello");
        assert_eq!(sb.root.read("sub/up.txt").unwrap(), "hello");
        // Leaving by `..`, or absolute (even to a path inside): refused.
        symlink("../secret.txt", root.join("up.txt")).unwrap();
        symlink(sb.base.join("secret.txt"), root.join("abs_out.txt")).unwrap();
        symlink(root.join("sub/a.txt"), root.join("abs_in.txt")).unwrap();
        symlink(&sb.base, root.join("basedir")).unwrap();
        for p in ["up.txt", "abs_out.txt", "abs_in.txt", "basedir/secret.txt"] {
            assert_eq!(
                sb.root.read(p),
                Err(ReadFileError::Outside { path: p.into() })
            );
        }
        // Dangling: not found.
        symlink("gone.txt", root.join("dangling.txt")).unwrap();
        assert!(matches!(
            sb.root.read("dangling.txt"),
            Err(ReadFileError::NotFound { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let sb = sandbox();
        let made = std::process::Command::new("mkfifo")
            .arg(sb.base.join("root/pipe"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(made, "mkfifo failed");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(sb.root.read("pipe"));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("read_file blocked on a FIFO");
        assert_eq!(
            got,
            Err(ReadFileError::NotRegular {
                path: "pipe".into()
            })
        );
    }

    #[cfg(unix)]
    #[test]
    fn only_a_code_less_permission_error_is_an_escape() {
        // cap-std's escape error has no OS code; a real EACCES (13) has one.
        let escape = std::io::Error::new(ErrorKind::PermissionDenied, "escape");
        let eacces = std::io::Error::from_raw_os_error(13);
        assert_eq!(eacces.kind(), ErrorKind::PermissionDenied);
        assert_eq!(
            classify(&escape, "open", "a"),
            ReadFileError::Outside { path: "a".into() }
        );
        assert_eq!(
            classify(&eacces, "open", "a"),
            ReadFileError::Io {
                step: "open",
                path: "a".into(),
                kind: ErrorKind::PermissionDenied
            }
        );
    }
}
