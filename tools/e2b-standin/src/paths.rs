//! Sandbox paths and where they live on the host: sandbox path `/x` is `<fs>/x`; relative paths
//! and `~` resolve against the user's home, as envd resolves them.

use std::path::{Path, PathBuf};

/// The home of the sandbox's default user.
pub(crate) const USER_HOME: &str = "/home/user";

/// A sandbox user envd knows: `user` (the default) and `root`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum User {
    User,
    Root,
}

impl User {
    /// The user named by envd's `username` parameter or Basic auth header (`None`: the default).
    pub(crate) fn lookup(name: Option<&str>) -> Result<Self, String> {
        match name {
            None | Some("user") => Ok(Self::User),
            Some("root") => Ok(Self::Root),
            Some(other) => Err(format!(
                "error looking up user '{other}': user: unknown user {other}"
            )),
        }
    }

    /// The user's home directory inside the sandbox.
    pub(crate) fn home(self) -> &'static str {
        match self {
            Self::User => USER_HOME,
            Self::Root => "/root",
        }
    }

    /// The user's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Root => "root",
        }
    }
}

/// A resolved path: as the sandbox sees it and where it is on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SandboxPath {
    /// The absolute, normalized path inside the sandbox.
    pub(crate) inner: String,
    /// The same path on the host, under the sandbox's filesystem directory.
    pub(crate) host: PathBuf,
}

impl SandboxPath {
    /// Resolves `path` for `user` under the sandbox filesystem `fs`: `~` and relative paths
    /// against the user's home, `.` and `..` lexically (never above `/`).
    pub(crate) fn resolve(fs: &Path, user: User, path: &str) -> Result<Self, String> {
        let expanded = if path.is_empty() {
            user.home().to_owned()
        } else if let Some(rest) = path.strip_prefix('~') {
            if !rest.is_empty() && !rest.starts_with('/') {
                return Err(format!(
                    "failed to expand path '{path}' for user '{}': cannot expand user-specific home dir",
                    user.name()
                ));
            }
            format!("{}{rest}", user.home())
        } else if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", user.home())
        };
        Ok(Self::from_absolute(fs, &expanded))
    }

    /// The sandbox path of an absolute (or to-be-normalized) path string.
    pub(crate) fn from_absolute(fs: &Path, path: &str) -> Self {
        let mut parts: Vec<&str> = Vec::new();
        for part in path.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                other => parts.push(other),
            }
        }
        let mut host = fs.to_path_buf();
        host.extend(&parts);
        Self {
            inner: format!("/{}", parts.join("/")),
            host,
        }
    }

    /// The last component (`/` for the root), as envd names entries.
    pub(crate) fn name(&self) -> &str {
        match self.inner.rsplit('/').next() {
            Some("") | None => "/",
            Some(name) => name,
        }
    }

    /// A child of this path.
    pub(crate) fn join(&self, name: &str) -> Self {
        let inner = if self.inner == "/" {
            format!("/{name}")
        } else {
            format!("{}/{name}", self.inner)
        };
        Self {
            inner,
            host: self.host.join(name),
        }
    }

    /// The parent directory (the root's parent is the root).
    pub(crate) fn parent(&self, fs: &Path) -> Self {
        Self::from_absolute(fs, &format!("{}/..", self.inner))
    }
}

/// The sandbox path of a host path under `fs`, or the host path itself when it is outside.
pub(crate) fn to_sandbox(fs: &Path, host: &Path) -> String {
    match host.strip_prefix(fs) {
        Ok(rel) => format!("/{}", rel.to_string_lossy()),
        Err(_) => host.to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(path: &str) -> SandboxPath {
        SandboxPath::resolve(Path::new("/r/fs"), User::User, path).unwrap()
    }

    #[test]
    fn resolves_like_envd() {
        assert_eq!(resolve("a.txt").inner, "/home/user/a.txt");
        assert_eq!(resolve("a.txt").host, Path::new("/r/fs/home/user/a.txt"));
        assert_eq!(resolve("").inner, "/home/user");
        assert_eq!(resolve("~/x/../y").inner, "/home/user/y");
        assert_eq!(resolve("/etc/./hosts").inner, "/etc/hosts");
        assert_eq!(resolve("/../../etc").host, Path::new("/r/fs/etc"));
        assert_eq!(resolve("/").name(), "/");
        assert_eq!(resolve("/").host, Path::new("/r/fs"));
        assert!(SandboxPath::resolve(Path::new("/r/fs"), User::User, "~bob/x").is_err());
        let root = SandboxPath::resolve(Path::new("/r/fs"), User::Root, "x").unwrap();
        assert_eq!(root.inner, "/root/x");
    }

    #[test]
    fn names_joins_and_maps_back() {
        let p = resolve("/home/user");
        assert_eq!(p.name(), "user");
        assert_eq!(p.join("f").inner, "/home/user/f");
        assert_eq!(p.parent(Path::new("/r/fs")).inner, "/home");
        assert_eq!(
            to_sandbox(Path::new("/r/fs"), Path::new("/r/fs/home/user")),
            "/home/user"
        );
        assert!(User::lookup(Some("bob")).is_err());
    }
}
