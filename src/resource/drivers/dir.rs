//! [`DirectoryWorkspace`]: a local directory per execution, checkpointed into snapshot copies.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{
    PARTIAL, SNAPSHOTS, blocking, hex, is_snapshot_ref, is_valid_id, publish, reserve, sync_dir,
    unavailable,
};
use crate::error::BoxError;
use crate::resource::ResourceDriver;

/// Where live workspaces live under the root.
const WORKSPACES: &str = "workspaces";

/// Starts the content hash, so snapshots of other drivers never share a reference.
const DOMAIN: &[u8] = b"rebuno.dir.v1\n";

/// A [`ResourceDriver`] for local directories: each execution gets a fresh directory under
/// `root/workspaces`, and checkpoints are immutable copies under `root/snapshots`.
///
/// - `create(None)` makes an empty directory; `create(Some(reference))` copies that snapshot
///   into a fresh directory, or fails with
///   [`CheckpointUnavailable`](crate::resource::CheckpointUnavailable) when it is missing.
/// - The binding is the workspace id (a directory name under `root/workspaces`); `open`
///   refuses ids that are not plain names.
/// - `checkpoint` copies the directory to a `.partial-*` directory, syncs it, and renames it to
///   its content hash in one step: a crash never leaves a partial snapshot under a reference,
///   and concurrent checkpoints never collide. The handle stays usable.
///
/// Files, directories and (on Unix) symbolic links are copied, with file permissions; other
/// kinds of entry are skipped. Change the workspace only from tools and steps declared with
/// `.resources([key])`, so no write races a checkpoint.
///
/// ```no_run
/// use rebuno::resource::drivers::DirectoryWorkspace;
/// use rebuno::resource::{Checkpoints, resource};
///
/// # async fn handler() -> Result<(), Box<dyn std::error::Error>> {
/// let driver = DirectoryWorkspace::new("/var/lib/my-agent");
/// let workspace = resource("workspace", driver, Checkpoints::every(5)).await?;
/// workspace.write("src/main.rs", "fn main() {}\n")?;
/// assert_eq!(workspace.read_to_string("src/main.rs")?, "fn main() {}\n");
/// println!("working in {}", workspace.path().display());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DirectoryWorkspace {
    root: PathBuf,
    coverage_reuse: bool,
}

impl DirectoryWorkspace {
    /// A driver keeping its workspaces and snapshots under `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            coverage_reuse: false,
        }
    }

    /// Keep a checkpoint's coverage until an affecting step starts (see
    /// [`ResourceDriver::coverage_reuse`]). Use it only when every change to the workspace
    /// goes through declared tools and steps.
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
        is_snapshot_ref(reference).then(|| self.root.join(SNAPSHOTS).join(reference))
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
            if is_snapshot_ref(&name) && entry.file_type()?.is_dir() {
                references.push(name);
            }
        }
        references.sort();
        Ok(references)
    }

    /// Makes a fresh workspace, empty or restored from `checkpoint`.
    fn create_now(&self, checkpoint: Option<&str>) -> Result<(Workspace, String), BoxError> {
        let source = match checkpoint {
            Some(reference) => Some(
                self.snapshot_path(reference)
                    .filter(|path| path.is_dir())
                    .ok_or_else(|| unavailable(reference))?,
            ),
            None => None,
        };
        let workspaces = self.root.join(WORKSPACES);
        let (id, path) = reserve(&workspaces, "ws-", "", |path| fs::create_dir(path))?;
        if let (Some(source), Some(reference)) = (source, checkpoint)
            && let Err(error) = copy_tree(&source, &path, &mut Sha256::new())
        {
            let _ = fs::remove_dir_all(&path);
            if !source.exists() {
                return Err(unavailable(reference)); // removed while we copied
            }
            return Err(error.into());
        }
        sync_dir(&workspaces)?;
        let workspace = Workspace {
            id: id.clone(),
            path,
        };
        Ok((workspace, id))
    }

    /// The workspace `id`, which must exist.
    fn open_now(&self, id: &str) -> Result<Workspace, BoxError> {
        if !is_valid_id(id) {
            return Err(format!("{id:?} is not a workspace id").into());
        }
        let path = self.root.join(WORKSPACES).join(id);
        if !path.is_dir() {
            return Err(format!("workspace {id:?} is gone from {}", self.root.display()).into());
        }
        Ok(Workspace {
            id: id.to_owned(),
            path,
        })
    }

    /// Copies `workspace` into a new snapshot and returns its reference.
    fn checkpoint_now(&self, workspace: &Workspace) -> Result<String, BoxError> {
        let snapshots = self.root.join(SNAPSHOTS);
        let (_, partial) = reserve(&snapshots, PARTIAL, "", |path| fs::create_dir(path))?;
        let mut tree = Sha256::new();
        tree.update(DOMAIN);
        if let Err(error) = copy_tree(&workspace.path, &partial, &mut tree) {
            let _ = fs::remove_dir_all(&partial);
            return Err(error.into());
        }
        let reference = hex(&tree.finalize());
        publish(&partial, &snapshots.join(&reference))?;
        Ok(reference)
    }
}

impl ResourceDriver for DirectoryWorkspace {
    type Handle = Workspace;
    /// The workspace id.
    type Binding = String;

    fn driver_id(&self) -> String {
        "rebuno.dir.v1".to_owned()
    }

    fn coverage_reuse(&self) -> bool {
        self.coverage_reuse
    }

    async fn create(&self, checkpoint: Option<&str>) -> Result<(Workspace, String), BoxError> {
        let driver = self.clone();
        let checkpoint = checkpoint.map(str::to_owned);
        blocking(move || driver.create_now(checkpoint.as_deref())).await
    }

    async fn open(&self, binding: String) -> Result<Workspace, BoxError> {
        self.open_now(&binding)
    }

    async fn checkpoint(&self, handle: &Workspace) -> Result<String, BoxError> {
        let (driver, workspace) = (self.clone(), handle.clone());
        blocking(move || driver.checkpoint_now(&workspace)).await
    }
}

/// A handle on one workspace directory: its path, and file helpers that refuse paths
/// escaping it.
///
/// ```no_run
/// # fn demo(workspace: rebuno::resource::drivers::Workspace) -> std::io::Result<()> {
/// workspace.write("notes/todo.md", "- ship it\n")?;
/// assert_eq!(workspace.list()?, ["notes/todo.md"]);
/// assert!(workspace.read("../secrets").is_err()); // outside the workspace
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    id: String,
    path: PathBuf,
}

impl Workspace {
    /// The workspace id: its binding, a directory name under the driver's `root/workspaces`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The workspace directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The absolute path of `relative` inside the workspace.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] when `relative` is absolute, contains `..`, or passes
    /// through a symbolic link: it could lead outside the workspace.
    pub fn resolve(&self, relative: impl AsRef<Path>) -> io::Result<PathBuf> {
        let relative = relative.as_ref();
        let escapes = || {
            let message = format!("{} escapes the workspace", relative.display());
            io::Error::new(io::ErrorKind::InvalidInput, message)
        };
        let mut path = self.path.clone();
        for component in relative.components() {
            match component {
                Component::Normal(part) => path.push(part),
                Component::CurDir => continue,
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(escapes());
                }
            }
            if is_symlink(&path) {
                return Err(escapes());
            }
        }
        Ok(path)
    }

    /// The contents of the file `relative`.
    ///
    /// # Errors
    ///
    /// See [`resolve`](Self::resolve); I/O errors.
    pub fn read(&self, relative: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        fs::read(self.resolve(relative)?)
    }

    /// The contents of the UTF-8 file `relative`.
    ///
    /// # Errors
    ///
    /// See [`resolve`](Self::resolve); I/O errors; invalid UTF-8.
    pub fn read_to_string(&self, relative: impl AsRef<Path>) -> io::Result<String> {
        fs::read_to_string(self.resolve(relative)?)
    }

    /// Writes the file `relative`, creating its parent directories.
    ///
    /// # Errors
    ///
    /// See [`resolve`](Self::resolve); I/O errors.
    pub fn write(&self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
        let path = self.resolve(relative)?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(path, contents)
    }

    /// The files (and symbolic links) in the workspace, as sorted `/`-separated relative paths.
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn list(&self) -> io::Result<Vec<String>> {
        let mut files = Vec::new();
        list_into(&self.path, "", &mut files)?;
        files.sort();
        Ok(files)
    }
}

fn is_symlink(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_symlink())
}

/// Appends the files under `dir` to `out`, prefixed with `prefix`.
fn list_into(dir: &Path, prefix: &str, out: &mut Vec<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            list_into(&entry.path(), &format!("{name}/"), out)?;
        } else {
            out.push(name);
        }
    }
    Ok(())
}

/// Copies the tree under `from` into the existing, empty directory `to`, syncing every file
/// and directory, and feeds a description of the tree (names, kinds, contents) to `tree`.
fn copy_tree(from: &Path, to: &Path, tree: &mut Sha256) -> io::Result<()> {
    let mut entries = fs::read_dir(from)?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let name = entry.file_name();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            record(tree, b'D', name.as_encoded_bytes(), &[]);
            fs::create_dir(&target)?;
            copy_tree(&source, &target, tree)?;
            record(tree, b'U', &[], &[]); // back up to the parent
        } else if kind.is_file() {
            let digest = copy_file(&source, &target)?;
            record(tree, b'F', name.as_encoded_bytes(), &digest);
        } else if kind.is_symlink() {
            let link = fs::read_link(&source)?;
            record(
                tree,
                b'L',
                name.as_encoded_bytes(),
                link.as_os_str().as_encoded_bytes(),
            );
            symlink(&link, &target)?;
        }
    }
    sync_dir(to)
}

/// One entry of the tree description: a tag, then length-prefixed name and payload.
fn record(tree: &mut Sha256, tag: u8, name: &[u8], payload: &[u8]) {
    tree.update([tag]);
    for part in [name, payload] {
        tree.update((part.len() as u64).to_le_bytes());
        tree.update(part);
    }
}

/// Copies one file with its permissions, syncs it, and returns the digest of its contents
/// and permissions.
fn copy_file(from: &Path, to: &Path) -> io::Result<Vec<u8>> {
    let mut source = File::open(from)?;
    let mut target = File::options().write(true).create_new(true).open(to)?;
    let mut digest = Sha256::new();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = source.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
        target.write_all(&buffer[..n])?;
    }
    let permissions = source.metadata()?.permissions();
    digest.update(mode(&permissions).to_le_bytes());
    target.set_permissions(permissions)?;
    target.sync_all()?;
    Ok(digest.finalize().to_vec())
}

#[cfg(unix)]
fn mode(permissions: &fs::Permissions) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    permissions.mode() & 0o7777
}

#[cfg(not(unix))]
fn mode(permissions: &fs::Permissions) -> u32 {
    u32::from(permissions.readonly())
}

#[cfg(unix)]
fn symlink(link: &Path, at: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(link, at)
}

#[cfg(not(unix))]
fn symlink(_link: &Path, at: &Path) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("cannot copy the symbolic link {}", at.display()),
    ))
}
