//! [`SqliteDatabase`]: a SQLite database file per execution, checkpointed with SQLite's online
//! backup API.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, MAIN_DB};
use sha2::{Digest, Sha256};

use super::{
    PARTIAL, SNAPSHOTS, blocking, hex, is_snapshot_ref, is_valid_id, publish, remove_any, reserve,
    sync_dir, unavailable,
};
use crate::error::BoxError;
use crate::resource::ResourceDriver;

/// Where live databases live under the root.
const DATABASES: &str = "databases";

/// The file name extension of databases and snapshots.
const EXTENSION: &str = ".sqlite";

/// Starts the content hash, so snapshots of other drivers never share a reference.
const DOMAIN: &[u8] = b"rebuno.sqlite.v1\n";

/// A [`ResourceDriver`] for SQLite databases: each execution gets a fresh database file under
/// `root/databases`, and checkpoints are immutable backups under `root/snapshots`.
///
/// - `create(None)` makes an empty database; `create(Some(reference))` copies that snapshot
///   to a fresh database file, or fails with
///   [`CheckpointUnavailable`](crate::resource::CheckpointUnavailable) when it is missing.
/// - The binding is the database id (`root/databases/<id>.sqlite`); `open` refuses ids that
///   are not plain names.
/// - `checkpoint` runs SQLite's online backup into a `.partial-*` file, syncs it and renames
///   it to its content hash in one step, so a crash never leaves a partial snapshot under a
///   reference. It holds the handle's connection for the duration; the handle stays usable.
///
/// ```no_run
/// use rebuno::resource::drivers::SqliteDatabase;
/// use rebuno::resource::{Checkpoints, resource};
///
/// # async fn handler() -> Result<(), Box<dyn std::error::Error>> {
/// let driver = SqliteDatabase::new("/var/lib/my-agent");
/// let db = resource("db", driver, Checkpoints::every(1)).await?;
/// let count: i64 = db.with_connection(|conn| {
///     conn.execute_batch("CREATE TABLE IF NOT EXISTS notes (text TEXT NOT NULL)")?;
///     conn.query_row("SELECT count(*) FROM notes", [], |row| row.get(0))
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteDatabase {
    root: PathBuf,
    coverage_reuse: bool,
}

impl SqliteDatabase {
    /// A driver keeping its databases and snapshots under `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            coverage_reuse: false,
        }
    }

    /// Keep a checkpoint's coverage until an affecting step starts (see
    /// [`ResourceDriver::coverage_reuse`]). Use it only when every change to the database goes
    /// through declared tools and steps.
    pub fn with_coverage_reuse(mut self, reuse: bool) -> Self {
        self.coverage_reuse = reuse;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the snapshot `reference` is (or would be) stored; `None` when `reference` is not
    /// a snapshot reference of this driver.
    pub fn snapshot_path(&self, reference: &str) -> Option<PathBuf> {
        is_snapshot_ref(reference).then(|| {
            self.root
                .join(SNAPSHOTS)
                .join(format!("{reference}{EXTENSION}"))
        })
    }

    /// The references of every complete snapshot, sorted; checkpoints in progress (or
    /// interrupted) are not listed.
    ///
    /// # Errors
    ///
    /// The snapshot directory cannot be read.
    pub fn snapshots(&self) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(self.root.join(SNAPSHOTS)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut references = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(reference) = name.strip_suffix(EXTENSION)
                && is_snapshot_ref(reference)
                && entry.file_type()?.is_file()
            {
                references.push(reference.to_owned());
            }
        }
        references.sort();
        Ok(references)
    }

    /// Makes a fresh database, empty or copied from `checkpoint`.
    fn create_now(&self, checkpoint: Option<&str>) -> Result<(Database, String), BoxError> {
        let source = match checkpoint {
            Some(reference) => Some(
                self.snapshot_path(reference)
                    .filter(|path| path.is_file())
                    .ok_or_else(|| unavailable(reference))?,
            ),
            None => None,
        };
        let databases = self.root.join(DATABASES);
        let (id, path) = reserve(&databases, "db-", EXTENSION, create_new_file)?;
        if let (Some(source), Some(reference)) = (source, checkpoint)
            && let Err(error) = copy_synced(&source, &path)
        {
            let _ = fs::remove_file(&path);
            if !source.exists() {
                return Err(unavailable(reference)); // removed while we copied
            }
            return Err(error.into());
        }
        sync_dir(&databases)?;
        let database = Database::open(id.clone(), path)?;
        Ok((database, id))
    }

    /// The database `id`, which must exist.
    fn open_now(&self, id: &str) -> Result<Database, BoxError> {
        if !is_valid_id(id) {
            return Err(format!("{id:?} is not a database id").into());
        }
        let path = self.root.join(DATABASES).join(format!("{id}{EXTENSION}"));
        if !path.is_file() {
            return Err(format!("database {id:?} is gone from {}", self.root.display()).into());
        }
        Database::open(id.to_owned(), path)
    }

    /// Backs `database` up into a new snapshot and returns its reference.
    fn checkpoint_now(&self, database: &Database) -> Result<String, BoxError> {
        let snapshots = self.root.join(SNAPSHOTS);
        let (_, partial) = reserve(&snapshots, PARTIAL, EXTENSION, create_new_file)?;
        let reference = match back_up(database, &partial) {
            Ok(reference) => reference,
            Err(error) => {
                let _ = remove_any(&partial);
                return Err(error);
            }
        };
        publish(&partial, &snapshots.join(format!("{reference}{EXTENSION}")))?;
        Ok(reference)
    }
}

impl ResourceDriver for SqliteDatabase {
    type Handle = Database;
    /// The database id.
    type Binding = String;

    fn driver_id(&self) -> String {
        "rebuno.sqlite.v1".to_owned()
    }

    fn coverage_reuse(&self) -> bool {
        self.coverage_reuse
    }

    async fn create(&self, checkpoint: Option<&str>) -> Result<(Database, String), BoxError> {
        let driver = self.clone();
        let checkpoint = checkpoint.map(str::to_owned);
        blocking(move || driver.create_now(checkpoint.as_deref())).await
    }

    async fn open(&self, binding: String) -> Result<Database, BoxError> {
        let driver = self.clone();
        blocking(move || driver.open_now(&binding)).await
    }

    async fn checkpoint(&self, handle: &Database) -> Result<String, BoxError> {
        let (driver, database) = (self.clone(), handle.clone());
        blocking(move || driver.checkpoint_now(&database)).await
    }
}

/// A handle on one database: a connection shared by every clone.
///
/// ```no_run
/// # fn demo(db: rebuno::resource::drivers::Database) -> rebuno::resource::drivers::rusqlite::Result<()> {
/// db.with_connection(|conn| conn.execute("INSERT INTO notes (text) VALUES (?1)", ["hi"]))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Database {
    id: String,
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

impl Database {
    fn open(id: String, path: PathBuf) -> Result<Self, BoxError> {
        let connection = Connection::open(&path)?;
        Ok(Self {
            id,
            path,
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// The database id: its binding, `<id>.sqlite` under the driver's `root/databases`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shared connection. Prefer [`with_connection`](Self::with_connection), which never
    /// fails on a poisoned lock.
    pub fn connection(&self) -> &Arc<Mutex<Connection>> {
        &self.connection
    }

    /// Runs `f` with the connection locked (checkpoints wait for it, and it for them). A lock
    /// poisoned by a panic is taken over: SQLite rolls back what the panic interrupted.
    pub fn with_connection<T>(&self, f: impl FnOnce(&mut Connection) -> T) -> T {
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut connection)
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Creates an empty file, failing with `AlreadyExists` if the name is taken.
fn create_new_file(path: &Path) -> io::Result<()> {
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map(drop)
}

/// Copies a file and syncs the copy.
fn copy_synced(from: &Path, to: &Path) -> io::Result<()> {
    fs::copy(from, to)?;
    File::options().write(true).open(to)?.sync_all()
}

/// Backs `database` up into the empty file `to`, syncs it, and returns its content hash.
fn back_up(database: &Database, to: &Path) -> Result<String, BoxError> {
    database.with_connection(|conn| conn.backup(MAIN_DB, to, None))?;
    let mut file = File::options().read(true).write(true).open(to)?;
    file.sync_all()?;
    let mut digest = Sha256::new();
    digest.update(DOMAIN);
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
    }
    Ok(hex(&digest.finalize()))
}
