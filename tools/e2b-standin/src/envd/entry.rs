//! `filesystem.EntryInfo` of a path, in protobuf's JSON mapping (camelCase names, enums by
//! name, 64-bit integers as strings, default values left out), filled as envd fills it.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::connect::{Code, RpcError, RpcResult};
use crate::paths::{SandboxPath, to_sandbox};
use crate::time::rfc3339;

/// The entry of `path` (not following a final symlink, whose target it reports).
pub(crate) fn entry_info(fs: &Path, path: &SandboxPath) -> RpcResult {
    let meta = std::fs::symlink_metadata(&path.host).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RpcError::new(
                Code::NotFound,
                format!(
                    "file not found: lstat {}: no such file or directory",
                    path.inner
                ),
            )
        } else {
            RpcError::new(Code::Internal, format!("error getting file info: {e}"))
        }
    })?;
    let mut entry = Map::new();
    entry.insert("name".to_owned(), json!(path.name()));
    entry.insert("path".to_owned(), json!(path.inner));
    let (kind, perm) = if meta.file_type().is_symlink() {
        let target = std::fs::canonicalize(&path.host);
        let target_meta = target.as_ref().ok().and_then(|t| std::fs::metadata(t).ok());
        let shown = target.map_or_else(|_| path.inner.clone(), |t| to_sandbox(fs, &t));
        entry.insert("symlinkTarget".to_owned(), json!(shown));
        target_meta.map_or(("FILE_TYPE_UNSPECIFIED", 0), |m| {
            (file_type(&m), m.permissions().mode() & 0o777)
        })
    } else {
        (file_type(&meta), meta.permissions().mode() & 0o777)
    };
    if kind != "FILE_TYPE_UNSPECIFIED" {
        entry.insert("type".to_owned(), json!(kind));
    }
    if meta.len() > 0 {
        entry.insert("size".to_owned(), json!(meta.len().to_string()));
    }
    if perm != 0 {
        entry.insert("mode".to_owned(), json!(perm));
    }
    entry.insert("permissions".to_owned(), json!(permissions(&meta)));
    entry.insert("owner".to_owned(), json!("user"));
    entry.insert("group".to_owned(), json!("user"));
    if let Ok(modified) = meta.modified() {
        entry.insert("modifiedTime".to_owned(), json!(rfc3339(modified)));
    }
    Ok(Value::Object(entry))
}

fn file_type(meta: &Metadata) -> &'static str {
    if meta.is_file() {
        "FILE_TYPE_FILE"
    } else if meta.is_dir() {
        "FILE_TYPE_DIRECTORY"
    } else {
        "FILE_TYPE_UNSPECIFIED"
    }
}

/// Go's `FileMode.String()` of an `lstat`, as envd reports `permissions` (`drwxr-xr-x`).
fn permissions(meta: &Metadata) -> String {
    let kind = meta.file_type();
    let mut out = String::with_capacity(10);
    out.push(if kind.is_dir() {
        'd'
    } else if kind.is_symlink() {
        'L'
    } else if kind.is_fifo() {
        'p'
    } else if kind.is_socket() {
        'S'
    } else if kind.is_block_device() || kind.is_char_device() {
        'D'
    } else {
        '-'
    });
    let mode = meta.mode();
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        out.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_files_dirs_and_missing_paths() {
        let fs = std::env::temp_dir().join(format!("e2b-standin-entry-{}", std::process::id()));
        std::fs::create_dir_all(fs.join("home/user")).unwrap();
        std::fs::write(fs.join("home/user/a.txt"), b"abc").unwrap();
        let file = SandboxPath::from_absolute(&fs, "/home/user/a.txt");
        let entry = entry_info(&fs, &file).unwrap();
        assert_eq!(entry["name"], "a.txt");
        assert_eq!(entry["type"], "FILE_TYPE_FILE");
        assert_eq!(entry["size"], "3");
        assert!(entry["permissions"].as_str().unwrap().starts_with('-'));
        let dir = entry_info(&fs, &SandboxPath::from_absolute(&fs, "/home/user")).unwrap();
        assert_eq!(dir["type"], "FILE_TYPE_DIRECTORY");
        assert!(dir["permissions"].as_str().unwrap().starts_with('d'));
        let missing = entry_info(&fs, &SandboxPath::from_absolute(&fs, "/nope")).unwrap_err();
        assert_eq!(missing.code, Code::NotFound);
        std::fs::remove_dir_all(&fs).unwrap();
    }
}
