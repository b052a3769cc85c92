//! Resource drivers shipped with the crate, each behind its own feature:
//!
//! - [`DirectoryWorkspace`] (feature `dir`, native targets): a local directory per execution,
//!   checkpointed into immutable snapshot copies.
//! - [`SqliteDatabase`] (feature `sqlite`, native targets): a SQLite database file per
//!   execution, checkpointed with SQLite's online backup API.
//! - [`E2bSandbox`] (feature `e2b`, every target, wasm32 included): an [E2B](https://e2b.dev)
//!   sandbox per execution, checkpointed by E2B snapshots.
//!
//! # Local drivers: a directory and a database
//!
//! Both keep everything under one root directory that you choose:
//!
//! ```text
//! root/
//!   workspaces/<id>/            live directories (DirectoryWorkspace)
//!   databases/<id>.sqlite       live databases (SqliteDatabase)
//!   snapshots/<sha256>[.sqlite] complete, immutable snapshots: the checkpoint references
//!   snapshots/.partial-*        checkpoints in progress, or left behind by a crash
//! ```
//!
//! Nothing is ever deleted by the drivers: remove old workspaces, databases and snapshots
//! (and `.partial-*` leftovers, when no checkpoint is running) with your own retention policy.
//! A fork whose snapshot was removed fails with [`CheckpointUnavailable`].
//!
//! A checkpoint is written to a `.partial-*` name, synced to disk, then renamed into place in
//! one atomic step, so a crash never leaves a snapshot that looks complete. Its reference is the
//! SHA-256 of its contents: identical states share one snapshot, and concurrent checkpoints
//! never overwrite each other.
//!
//! **Blocking work.** Copying, hashing and SQLite calls are blocking. With the `rt-tokio`
//! feature and inside a Tokio runtime they run on Tokio's blocking pool
//! (`tokio::task::spawn_blocking`); otherwise they run inline on the calling task, which is
//! fine for the small workspaces and databases these drivers are meant for.
//!
// Where a driver is not compiled in, its name links to its section, or to docs.rs (link
// definitions, before the E2B guide that follows them).
#![cfg_attr(
    not(all(feature = "dir", not(target_arch = "wasm32"))),
    doc = "[`DirectoryWorkspace`]: #local-drivers-a-directory-and-a-database"
)]
#![cfg_attr(
    not(all(feature = "sqlite", not(target_arch = "wasm32"))),
    doc = "[`SqliteDatabase`]: #local-drivers-a-directory-and-a-database"
)]
#![cfg_attr(
    not(feature = "e2b"),
    doc = "[`E2bSandbox`]: https://docs.rs/rebuno/latest/rebuno/resource/drivers/struct.E2bSandbox.html"
)]
#![cfg_attr(feature = "e2b", doc = include_str!("e2b/guide.md"))]

#[cfg(all(feature = "dir", not(target_arch = "wasm32")))]
mod dir;
#[cfg(feature = "e2b")]
mod e2b;
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
mod sqlite;

#[cfg(all(feature = "dir", not(target_arch = "wasm32")))]
#[cfg_attr(docsrs, doc(cfg(feature = "dir")))]
pub use self::dir::{DirectoryWorkspace, Workspace};
#[cfg(feature = "e2b")]
#[cfg_attr(docsrs, doc(cfg(feature = "e2b")))]
pub use self::e2b::{
    CommandOutput, E2bError, E2bErrorKind, E2bSandbox, Entry, EntryKind, RunOptions, Sandbox,
    SandboxBinding,
};
#[cfg(all(any(feature = "dir", feature = "sqlite"), not(target_arch = "wasm32")))]
use self::local::*;
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::sqlite::{Database, SqliteDatabase};
#[cfg(doc)]
use super::CheckpointUnavailable;
/// The `rusqlite` crate [`SqliteDatabase`] uses, so handles can be used without a version
/// mismatch.
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use rusqlite;

/// What the local drivers share: unique names, atomic publication of snapshots, blocking work.
#[cfg(all(any(feature = "dir", feature = "sqlite"), not(target_arch = "wasm32")))]
mod local {
    use std::fs;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::error::BoxError;
    use crate::resource::CheckpointUnavailable;

    /// The name prefix of checkpoints (and restores) in progress.
    pub(super) const PARTIAL: &str = ".partial-";

    /// Where snapshots live under a driver's root.
    pub(super) const SNAPSHOTS: &str = "snapshots";

    /// How many names to try before giving up on finding a free one.
    const NAME_ATTEMPTS: u32 = 1_000;

    /// A name no other call in this process has used: the process id and a counter.
    fn unique_suffix() -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", std::process::id())
    }

    /// Creates a fresh entry `dir/<prefix><unique><extension>` with `make` (which must fail with
    /// `AlreadyExists` when the name is taken) and returns its name and path.
    pub(super) fn reserve(
        dir: &Path,
        prefix: &str,
        extension: &str,
        make: impl Fn(&Path) -> io::Result<()>,
    ) -> io::Result<(String, PathBuf)> {
        fs::create_dir_all(dir)?;
        for _ in 0..NAME_ATTEMPTS {
            let name = format!("{prefix}{}", unique_suffix());
            let path = dir.join(format!("{name}{extension}"));
            match make(&path) {
                Ok(()) => return Ok((name, path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free name under {}", dir.display()),
        ))
    }

    /// Whether `id` can name a workspace, database or snapshot: ASCII letters, digits, `-` and `_`,
    /// not starting with `.` (so no path separators, `..` or in-progress names).
    pub(super) fn is_valid_id(id: &str) -> bool {
        !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    /// Whether `reference` looks like a snapshot reference (a lowercase hex SHA-256).
    pub(super) fn is_snapshot_ref(reference: &str) -> bool {
        reference.len() == 64
            && reference
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// Lowercase hex of a digest.
    pub(super) fn hex(bytes: &[u8]) -> String {
        use std::fmt::Write as _;
        bytes
            .iter()
            .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
                let _ = write!(out, "{b:02x}");
                out
            })
    }

    /// The error for a checkpoint reference that names no complete snapshot.
    pub(super) fn unavailable(reference: &str) -> BoxError {
        Box::new(CheckpointUnavailable(format!(
            "no snapshot {reference:?} in this driver's root"
        )))
    }

    /// Flushes a directory's entries (new names, renames) to disk. A no-op where directories
    /// cannot be opened as files.
    pub(super) fn sync_dir(path: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            fs::File::open(path)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            Ok(())
        }
    }

    /// Removes a file or a directory tree, whichever `path` is.
    pub(super) fn remove_any(path: &Path) -> io::Result<()> {
        if path.symlink_metadata()?.is_dir() {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        }
    }

    /// Moves the synced `partial` to `target` in one rename, then syncs the parent. When `target`
    /// already exists (the same contents, as names are content hashes) `partial` is discarded.
    pub(super) fn publish(partial: &Path, target: &Path) -> io::Result<()> {
        let outcome = if target.exists() {
            Ok(())
        } else {
            fs::rename(partial, target)
        };
        match outcome {
            Ok(()) if !partial.exists() => {}
            // Already there, or another checkpoint renamed the same contents in first.
            Ok(()) => remove_any(partial)?,
            Err(_) if target.exists() => remove_any(partial)?,
            Err(e) => {
                let _ = remove_any(partial);
                return Err(e);
            }
        }
        match target.parent() {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        }
    }

    /// Runs blocking `work` on Tokio's blocking pool when there is one, else inline.
    pub(super) async fn blocking<T: Send + 'static>(
        work: impl FnOnce() -> Result<T, BoxError> + Send + 'static,
    ) -> Result<T, BoxError> {
        #[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            return runtime
                .spawn_blocking(work)
                .await
                .map_err(|e| -> BoxError { format!("blocking driver work failed: {e}").into() })?;
        }
        work()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn ids_refuse_paths_and_partials() {
            assert!(is_valid_id("ws-1_2"));
            for bad in ["", ".", "..", "a/b", "a\\b", ".partial-1", "é"] {
                assert!(!is_valid_id(bad), "{bad:?}");
            }
            assert!(is_snapshot_ref(&"ab".repeat(32)));
            assert!(!is_snapshot_ref(&"AB".repeat(32)));
            assert!(!is_snapshot_ref("abc"));
        }

        #[test]
        fn hex_is_lowercase_and_padded() {
            assert_eq!(hex(&[0, 15, 255]), "000fff");
        }
    }
}
