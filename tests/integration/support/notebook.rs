//! An in-memory resource driver for the tests: notebooks of lines, snapshots by reference.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rebuno::BoxError;
use rebuno::resource::{CheckpointUnavailable, DispatchEnd, ResourceDriver};

/// Notebooks kept in memory: live ones by id, snapshots by checkpoint ref.
#[derive(Clone, Default)]
pub struct Shelf {
    pub live: Arc<Mutex<BTreeMap<u64, Notebook>>>,
    pub snapshots: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    pub created: Arc<AtomicUsize>,
    pub opened: Arc<AtomicUsize>,
    /// Keep coverage until an affecting step starts (`coverage_reuse`).
    pub reuse: bool,
    /// How many checkpoints were asked for.
    pub checkpoints: Arc<AtomicUsize>,
    /// Faults injected by checkpoint call number (from 0).
    pub faults: Arc<Mutex<BTreeMap<usize, Fault>>>,
    /// Every `release` call: the notebook's lines then, and how the dispatch ended.
    pub released: Arc<Mutex<Vec<Released>>>,
}

/// One `release` call: the notebook's lines then, and how the dispatch ended.
pub type Released = (Vec<String>, DispatchEnd);

/// How a checkpoint call goes wrong.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The driver returns an error.
    Fail,
    /// The driver panics.
    Panic,
}

/// A handle: one notebook's lines.
#[derive(Clone, Default)]
pub struct Notebook(pub Arc<Mutex<Vec<String>>>);

impl Notebook {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl ResourceDriver for Shelf {
    type Handle = Notebook;
    type Binding = u64;

    fn driver_id(&self) -> String {
        "test.notebook.v1".into()
    }

    fn coverage_reuse(&self) -> bool {
        self.reuse
    }

    async fn create(&self, checkpoint: Option<&str>) -> Result<(Notebook, u64), BoxError> {
        let lines = match checkpoint {
            Some(reference) => self
                .snapshots
                .lock()
                .unwrap()
                .get(reference)
                .cloned()
                .ok_or_else(|| CheckpointUnavailable(reference.into()))?,
            None => Vec::new(),
        };
        let id = self.created.fetch_add(1, Ordering::SeqCst) as u64;
        let notebook = Notebook(Arc::new(Mutex::new(lines)));
        self.live.lock().unwrap().insert(id, notebook.clone());
        Ok((notebook, id))
    }

    async fn open(&self, binding: u64) -> Result<Notebook, BoxError> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .live
            .lock()
            .unwrap()
            .get(&binding)
            .cloned()
            .ok_or("notebook gone")?)
    }

    async fn checkpoint(&self, handle: &Notebook) -> Result<String, BoxError> {
        let call = self.checkpoints.fetch_add(1, Ordering::SeqCst);
        let fault = self.faults.lock().unwrap().remove(&call);
        match fault {
            Some(Fault::Fail) => return Err("snapshot store unavailable".into()),
            Some(Fault::Panic) => panic!("snapshot driver bug"),
            None => {}
        }
        let mut snapshots = self.snapshots.lock().unwrap();
        let reference = format!("snap-{}", snapshots.len());
        snapshots.insert(reference.clone(), handle.lines());
        Ok(reference)
    }

    async fn release(&self, handle: &Notebook, end: DispatchEnd) -> Result<(), BoxError> {
        self.released.lock().unwrap().push((handle.lines(), end));
        Ok(())
    }
}
