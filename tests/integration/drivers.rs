//! The shipped resource drivers: `DirectoryWorkspace` (feature `dir`) and `SqliteDatabase`
//! (feature `sqlite`). Each is tested on its own (create, checkpoint, restore, open, a missing
//! checkpoint, concurrent checkpoints, an interrupted checkpoint) and end to end against the
//! dev kernel, with a fork restoring the checkpointed state.

#![cfg(all(feature = "dir", feature = "sqlite", not(target_arch = "wasm32")))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::client::Client;
use rebuno::resource::drivers::{Database, DirectoryWorkspace, SqliteDatabase, Workspace};
use rebuno::resource::{CheckpointUnavailable, Checkpoints, ResourceDriver, resource};
use rebuno::wire::Execution;
use rebuno::{BoxError, HandlerError, define_tool, step};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::*;

/// A fresh directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("rebuno-drivers-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_unavailable(error: &BoxError) -> bool {
    error.downcast_ref::<CheckpointUnavailable>().is_some()
}

/// Names in `dir` starting with `.partial-`.
fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(".partial-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn drivers_and_handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<DirectoryWorkspace>();
    send_sync::<Workspace>();
    send_sync::<SqliteDatabase>();
    send_sync::<Database>();
}

const MISSING: &str = "0000000000000000000000000000000000000000000000000000000000000000";

// ---------------------------------------------------------------------------------------------
// DirectoryWorkspace
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn dir_creates_checkpoints_restores_and_reopens() {
    let scratch = Scratch::new("dir-basic");
    let driver = DirectoryWorkspace::new(scratch.path());

    let (workspace, binding) = driver.create(None).await.unwrap();
    assert_eq!(workspace.id(), binding);
    assert!(workspace.path().starts_with(scratch.path()));
    assert!(workspace.list().unwrap().is_empty());
    workspace.write("a.txt", "one").unwrap();
    workspace.write("src/b.txt", "two").unwrap();
    let first = driver.checkpoint(&workspace).await.unwrap();

    workspace.write("a.txt", "changed").unwrap();
    let second = driver.checkpoint(&workspace).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(
        driver.checkpoint(&workspace).await.unwrap(),
        second,
        "same contents, same snapshot"
    );
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    assert_eq!(driver.snapshots().unwrap(), both);

    let (restored, restored_binding) = driver.create(Some(&first)).await.unwrap();
    assert_ne!(restored_binding, binding, "a fork gets its own directory");
    assert_eq!(restored.list().unwrap(), ["a.txt", "src/b.txt"]);
    assert_eq!(restored.read_to_string("a.txt").unwrap(), "one");
    restored.write("a.txt", "fork").unwrap();
    assert_eq!(
        workspace.read_to_string("a.txt").unwrap(),
        "changed",
        "isolated"
    );
    let snapshot = driver.snapshot_path(&first).unwrap();
    assert_eq!(
        std::fs::read_to_string(snapshot.join("a.txt")).unwrap(),
        "one",
        "snapshots are immutable"
    );

    let reopened = driver.open(binding.clone()).await.unwrap();
    assert_eq!(reopened, workspace);
    assert_eq!(reopened.read_to_string("a.txt").unwrap(), "changed");
    assert!(driver.open("../escape".into()).await.is_err());
    assert!(driver.open("ws-none".into()).await.is_err());
}

#[tokio::test]
async fn dir_paths_cannot_escape_the_workspace() {
    let scratch = Scratch::new("dir-escape");
    let driver = DirectoryWorkspace::new(scratch.path());
    let (workspace, _) = driver.create(None).await.unwrap();
    for path in ["../x", "a/../../x", "/etc/passwd"] {
        let error = workspace.write(path, "no").unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{path}");
    }
    assert_eq!(
        workspace.resolve("./a/b").unwrap(),
        workspace.path().join("a/b")
    );
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(scratch.path(), workspace.path().join("out")).unwrap();
        assert!(workspace.read("out/anything").is_err());
        assert!(workspace.write("out/x", "no").is_err());
        // A symbolic link is copied as a link, never followed.
        let reference = driver.checkpoint(&workspace).await.unwrap();
        let (restored, _) = driver.create(Some(&reference)).await.unwrap();
        assert!(
            std::fs::symlink_metadata(restored.path().join("out"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}

#[tokio::test]
async fn dir_missing_checkpoints_are_unavailable() {
    let scratch = Scratch::new("dir-missing");
    let driver = DirectoryWorkspace::new(scratch.path());
    for reference in [MISSING, "not-a-reference", "../../etc"] {
        let error = driver.create(Some(reference)).await.unwrap_err();
        assert!(is_unavailable(&error), "{reference}: {error}");
    }

    let (workspace, _) = driver.create(None).await.unwrap();
    workspace.write("a.txt", "one").unwrap();
    let reference = driver.checkpoint(&workspace).await.unwrap();
    std::fs::remove_dir_all(driver.snapshot_path(&reference).unwrap()).unwrap(); // expired
    let error = driver.create(Some(&reference)).await.unwrap_err();
    assert!(is_unavailable(&error), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dir_concurrent_checkpoints_are_distinct_and_complete() {
    let scratch = Scratch::new("dir-concurrent");
    let driver = DirectoryWorkspace::new(scratch.path());
    let mut workspaces = Vec::new();
    for i in 0..8 {
        let (workspace, _) = driver.create(None).await.unwrap();
        for f in 0..20 {
            workspace
                .write(
                    format!("d{}/f{f}.txt", f % 3),
                    format!("{i}:{f}").repeat(500),
                )
                .unwrap();
        }
        workspaces.push(workspace);
    }

    let references = futures_util::future::try_join_all(
        workspaces
            .iter()
            .chain(workspaces.iter()) // each twice, concurrently
            .map(|workspace| driver.checkpoint(workspace)),
    )
    .await
    .unwrap();

    let (first, again) = references.split_at(8);
    assert_eq!(first, again, "the same contents share a snapshot");
    let mut distinct = first.to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 8);
    assert_eq!(driver.snapshots().unwrap(), distinct);
    assert!(partials(&scratch.path().join("snapshots")).is_empty());
    for (i, reference) in first.iter().enumerate() {
        let (restored, _) = driver.create(Some(reference)).await.unwrap();
        assert_eq!(restored.list().unwrap().len(), 20);
        for f in 0..20 {
            let text = restored
                .read_to_string(format!("d{}/f{f}.txt", f % 3))
                .unwrap();
            assert_eq!(text, format!("{i}:{f}").repeat(500));
        }
    }
}

#[tokio::test]
async fn dir_an_interrupted_checkpoint_is_not_a_snapshot() {
    let scratch = Scratch::new("dir-interrupted");
    let driver = DirectoryWorkspace::new(scratch.path());
    let (workspace, _) = driver.create(None).await.unwrap();
    workspace.write("a.txt", "one").unwrap();
    // A crash midway: the copy was left under its in-progress name.
    let partial = scratch.path().join("snapshots/.partial-1-0");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("a.txt"), "o").unwrap();

    assert!(driver.snapshots().unwrap().is_empty());
    let error = driver.create(Some(".partial-1-0")).await.unwrap_err();
    assert!(is_unavailable(&error), "{error}");

    let reference = driver.checkpoint(&workspace).await.unwrap();
    assert_eq!(driver.snapshots().unwrap(), [reference.as_str()]);
    let (restored, _) = driver.create(Some(&reference)).await.unwrap();
    assert_eq!(restored.read_to_string("a.txt").unwrap(), "one");
}

// ---------------------------------------------------------------------------------------------
// SqliteDatabase
// ---------------------------------------------------------------------------------------------

fn setup(db: &Database) {
    db.with_connection(|conn| {
        conn.execute_batch("CREATE TABLE IF NOT EXISTS notes (text TEXT NOT NULL)")
    })
    .unwrap();
}

fn insert(db: &Database, text: &str) {
    db.with_connection(|conn| conn.execute("INSERT INTO notes (text) VALUES (?1)", [text]))
        .unwrap();
}

fn notes(db: &Database) -> Vec<String> {
    db.with_connection(|conn| {
        let mut statement = conn.prepare("SELECT text FROM notes ORDER BY rowid")?;
        statement
            .query_map([], |row| row.get(0))?
            .collect::<Result<Vec<String>, _>>()
    })
    .unwrap_or_default()
}

#[tokio::test]
async fn sqlite_creates_checkpoints_restores_and_reopens() {
    let scratch = Scratch::new("sqlite-basic");
    let driver = SqliteDatabase::new(scratch.path());

    let (db, binding) = driver.create(None).await.unwrap();
    assert_eq!(db.id(), binding);
    setup(&db);
    insert(&db, "a");
    let first = driver.checkpoint(&db).await.unwrap();
    insert(&db, "b");
    let second = driver.checkpoint(&db).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(driver.snapshots().unwrap().len(), 2);
    insert(&db, "c"); // the handle stays usable

    let (restored, restored_binding) = driver.create(Some(&first)).await.unwrap();
    assert_ne!(restored_binding, binding);
    assert_eq!(notes(&restored), ["a"]);
    insert(&restored, "fork");
    assert_eq!(notes(&db), ["a", "b", "c"], "isolated");
    let (again, _) = driver.create(Some(&first)).await.unwrap();
    assert_eq!(notes(&again), ["a"], "snapshots are immutable");

    let reopened = driver.open(binding.clone()).await.unwrap();
    assert_eq!(notes(&reopened), ["a", "b", "c"]);
    assert!(driver.open("../escape".into()).await.is_err());
    assert!(driver.open("db-none".into()).await.is_err());
}

#[tokio::test]
async fn sqlite_missing_checkpoints_are_unavailable() {
    let scratch = Scratch::new("sqlite-missing");
    let driver = SqliteDatabase::new(scratch.path());
    for reference in [MISSING, "nope", "../x"] {
        let error = driver.create(Some(reference)).await.unwrap_err();
        assert!(is_unavailable(&error), "{reference}: {error}");
    }
    let (db, _) = driver.create(None).await.unwrap();
    setup(&db);
    let reference = driver.checkpoint(&db).await.unwrap();
    std::fs::remove_file(driver.snapshot_path(&reference).unwrap()).unwrap();
    let error = driver.create(Some(&reference)).await.unwrap_err();
    assert!(is_unavailable(&error), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_checkpoints_are_distinct_and_complete() {
    let scratch = Scratch::new("sqlite-concurrent");
    let driver = SqliteDatabase::new(scratch.path());
    let mut databases = Vec::new();
    for i in 0..6 {
        let (db, _) = driver.create(None).await.unwrap();
        setup(&db);
        db.with_connection(|conn| {
            let batch = conn.transaction()?;
            for n in 0..200 {
                let text = format!("{i}:{n}:{}", "x".repeat(100));
                batch.execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
            }
            batch.commit()
        })
        .unwrap();
        databases.push(db);
    }

    let references = futures_util::future::try_join_all(
        databases
            .iter()
            .chain(databases.iter())
            .map(|db| driver.checkpoint(db)),
    )
    .await
    .unwrap();

    let mut distinct = references[..6].to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 6);
    assert!(partials(&scratch.path().join("snapshots")).is_empty());
    for (k, reference) in references.iter().enumerate() {
        let i = k % 6;
        let (restored, _) = driver.create(Some(reference)).await.unwrap();
        let check: String = restored
            .with_connection(|conn| conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(check, "ok");
        let rows = notes(&restored);
        assert_eq!(rows.len(), 200);
        assert!(rows.iter().all(|row| row.starts_with(&format!("{i}:"))));
    }
}

#[tokio::test]
async fn sqlite_an_interrupted_checkpoint_is_not_a_snapshot() {
    let scratch = Scratch::new("sqlite-interrupted");
    let driver = SqliteDatabase::new(scratch.path());
    let (db, _) = driver.create(None).await.unwrap();
    setup(&db);
    insert(&db, "a");
    let snapshots = scratch.path().join("snapshots");
    std::fs::create_dir_all(&snapshots).unwrap();
    std::fs::write(
        snapshots.join(".partial-1-0.sqlite"),
        b"SQLite format 3\0half",
    )
    .unwrap();

    assert!(driver.snapshots().unwrap().is_empty());
    let error = driver.create(Some(".partial-1-0")).await.unwrap_err();
    assert!(is_unavailable(&error), "{error}");

    let reference = driver.checkpoint(&db).await.unwrap();
    assert_eq!(driver.snapshots().unwrap(), [reference.as_str()]);
    let (restored, _) = driver.create(Some(&reference)).await.unwrap();
    assert_eq!(notes(&restored), ["a"]);
}

// ---------------------------------------------------------------------------------------------
// End to end: a fork restores the checkpointed state
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}

/// Runs `agent_id` on `["a", "b"]`, forks it right after the first write settled, and returns
/// the original and forked executions.
async fn run_and_fork(kernel: &DevKernel, agent_id: &str) -> (Execution, rebuno::wire::Execution) {
    let done = run(kernel, agent_id, json!(["a", "b"])).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let first_write = kernel
        .events(&done.id)
        .iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap()
        .event_seq;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client
        .fork(done.id.to_string(), first_write)
        .send()
        .await
        .expect("fork");
    let restoration = fork.restoration.clone().expect("restoration");
    let key = restoration
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    assert_eq!(restoration[&key]["covered"], true, "{restoration}");
    let forked = client.wait(&fork.id, WAIT).await.expect("fork ends");
    assert_eq!(
        forked.status,
        rebuno::wire::ExecutionStatus::Completed,
        "{}",
        forked.failure_reason
    );
    (done, forked)
}

/// Serves an agent that notes what its workspace held at the start, writes each input line to
/// a file with a declared tool, then lists the files.
async fn serve_dir_agent(kernel: &DevKernel, root: &Path) -> Served {
    let driver = DirectoryWorkspace::new(root);
    let agent = agent(kernel, "dir-writer")
        .handler_with_state(driver, |driver, lines: Vec<String>| async move {
            let workspace: Workspace = resource("workspace", driver, Checkpoints::every(1)).await?;
            let started_with = workspace.list()?;
            let write = {
                let workspace = workspace.clone();
                define_tool("write_file")
                    .resources(["workspace"])
                    .execute(move |note: Note| {
                        let workspace = workspace.clone();
                        async move {
                            workspace.write(format!("{}.txt", note.text), &note.text)?;
                            Ok::<_, HandlerError>(())
                        }
                    })
            };
            for text in lines {
                write.call(Note { text }).await?;
            }
            let files: Vec<String> = step("list", || async {
                Ok::<_, HandlerError>(workspace.list()?)
            })
            .await?;
            Ok::<_, HandlerError>(json!({
                "started_with": started_with,
                "files": files,
                "workspace": workspace.id(),
            }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("dir-writer", served.webhook_url(), SECRET))
        .unwrap();
    served
}

#[tokio::test]
async fn dir_end_to_end_a_fork_starts_from_the_checkpointed_directory() {
    let _trace = trace_init();
    let scratch = Scratch::new("dir-e2e");
    let kernel = DevKernel::start().await.expect("kernel");
    let served = serve_dir_agent(&kernel, scratch.path()).await;

    let (done, forked) = run_and_fork(&kernel, "dir-writer").await;

    let original = done.output.unwrap();
    assert_eq!(original["started_with"], json!([]));
    assert_eq!(original["files"], json!(["a.txt", "b.txt"]));
    let fork = forked.output.unwrap();
    assert_eq!(
        fork["started_with"],
        json!(["a.txt"]),
        "restored after the first write"
    );
    assert_eq!(fork["files"], json!(["a.txt", "b.txt"]));
    assert_ne!(fork["workspace"], original["workspace"]);
    served.shutdown().await;
}

/// Serves an agent like [`serve_dir_agent`], on a SQLite database.
async fn serve_sqlite_agent(kernel: &DevKernel, root: &Path) -> Served {
    let driver = SqliteDatabase::new(root);
    let agent = agent(kernel, "sql-writer")
        .handler_with_state(driver, |driver, lines: Vec<String>| async move {
            let db: Database = resource("db", driver, Checkpoints::every(1)).await?;
            setup(&db);
            let started_with = notes(&db);
            let insert_note = {
                let db = db.clone();
                define_tool("insert_note")
                    .resources(["db"])
                    .execute(move |note: Note| {
                        let db = db.clone();
                        async move {
                            insert(&db, &note.text);
                            Ok::<_, HandlerError>(())
                        }
                    })
            };
            for text in lines {
                insert_note.call(Note { text }).await?;
            }
            let rows: Vec<String> =
                step("read", || async { Ok::<_, HandlerError>(notes(&db)) }).await?;
            Ok::<_, HandlerError>(
                json!({ "started_with": started_with, "rows": rows, "db": db.id() }),
            )
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("sql-writer", served.webhook_url(), SECRET))
        .unwrap();
    served
}

#[tokio::test]
async fn sqlite_end_to_end_a_fork_starts_from_the_checkpointed_database() {
    let _trace = trace_init();
    let scratch = Scratch::new("sqlite-e2e");
    let kernel = DevKernel::start().await.expect("kernel");
    let served = serve_sqlite_agent(&kernel, scratch.path()).await;

    let (done, forked) = run_and_fork(&kernel, "sql-writer").await;

    let original = done.output.unwrap();
    assert_eq!(original["started_with"], json!([]));
    assert_eq!(original["rows"], json!(["a", "b"]));
    let fork = forked.output.unwrap();
    assert_eq!(
        fork["started_with"],
        json!(["a"]),
        "restored after the first insert"
    );
    assert_eq!(fork["rows"], json!(["a", "b"]));
    assert_ne!(fork["db"], original["db"]);
    served.shutdown().await;
}
