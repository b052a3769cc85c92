//! A seeded fuzzing harness for the rebuno SDK and the dev kernel, on stable Rust.
//!
//! Every case is generated from `(seed, target, case index)` alone, runs under
//! [`std::panic::catch_unwind`], and checks its target's invariants with assertions, so a
//! failure is a panic that names its seed and index and can be replayed with [`run_case`].
//! See the README for the targets and the commands.

mod exec;
mod mutate;
mod rng;
mod targets;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;

use crate::rng::Rng;

/// One fuzz target.
#[derive(Debug)]
pub struct Target {
    /// The name given to `--target`.
    pub name: &'static str,
    /// What it exercises.
    pub description: &'static str,
    run: fn(&mut Rng, &Recorder),
}

/// Every target, in the order `--target all` runs them.
pub fn targets() -> &'static [Target] {
    &TARGETS
}

static TARGETS: [Target; 6] = [
    Target {
        name: "webhook",
        description: "Agent::handle and Agent::route on mutated, signed and mis-signed webhooks",
        run: targets::webhook::case,
    },
    Target {
        name: "kernel_responses",
        description: "agent dispatches and Client calls against a kernel answering garbage",
        run: targets::kernel::case,
    },
    Target {
        name: "sse",
        description: "Client::stream on mutated event streams chunked at random boundaries",
        run: targets::sse::case,
    },
    Target {
        name: "canonical_json",
        description: "devkernel canonical_json/args_hash/step_id and rebuno::signing",
        run: targets::canonical::case,
    },
    Target {
        name: "manifest",
        description: "rebuno_devkernel::Manifest::parse on mutated YAML",
        run: targets::manifest::case,
    },
    Target {
        name: "policy",
        description: "rebuno_devkernel::Policy::parse on mutated YAML bundles",
        run: targets::policy::case,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The inputs a case generated, kept outside the unwinding code so a failure can print them.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    inputs: RefCell<Vec<(String, Vec<u8>)>>,
    /// Whether to keep inputs at all (off for speed unless a failure is being reproduced).
    verbose: bool,
}

/// Keeps at most this many inputs per case.
const MAX_RECORDED: usize = 256;

impl Recorder {
    /// Records one input; cheap when the run is not verbose (only the last inputs are kept).
    pub(crate) fn note(&self, label: &str, bytes: &[u8]) {
        let mut inputs = self.inputs.borrow_mut();
        if !self.verbose {
            // Keep the most recent few, cheaply: a failure still shows what led to it.
            if inputs.len() >= 16 {
                inputs.remove(0);
            }
            let keep = bytes.len().min(4096);
            inputs.push((label.to_owned(), bytes[..keep].to_vec()));
            return;
        }
        if inputs.len() < MAX_RECORDED {
            inputs.push((label.to_owned(), bytes.to_vec()));
        }
    }
}

/// A case that failed: a panic or a broken invariant.
#[derive(Debug)]
pub struct Failure {
    /// The target.
    pub target: &'static str,
    /// The run seed.
    pub seed: u64,
    /// The case index.
    pub case: u64,
    /// The panic message and location.
    pub message: String,
    /// The inputs the case generated, labelled.
    pub inputs: Vec<(String, Vec<u8>)>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "FAILED target={} seed={} case={}",
            self.target, self.seed, self.case
        )?;
        writeln!(f, "message: {}", self.message)?;
        writeln!(
            f,
            "reproduce: cargo run --release -p rebuno-fuzz -- --target {} --seed {} --case {} --verbose",
            self.target, self.seed, self.case
        )?;
        writeln!(f, "inputs ({}):", self.inputs.len())?;
        for (label, bytes) in &self.inputs {
            writeln!(
                f,
                "  {label} ({} bytes): \"{}\"",
                bytes.len(),
                mutate::escape(bytes, 2048)
            )?;
        }
        Ok(())
    }
}

/// A finished run of one target.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// The target.
    pub target: &'static str,
    /// Cases run.
    pub cases: u64,
    /// The run seed.
    pub seed: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "target={} cases={} seed={} panics=0 elapsed={:.3}",
            self.target,
            self.cases,
            self.seed,
            self.elapsed.as_secs_f64()
        )
    }
}

thread_local! {
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that captures panics raised inside a case instead of printing
/// them, and defers to the previous hook everywhere else.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.with(Cell::get) {
                let payload = info.payload();
                let text = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                let location = info
                    .location()
                    .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{text}{location}")));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs case `case` of `target` under seed `seed`; `verbose` keeps every input in full.
///
/// # Errors
///
/// [`Failure`] when the case panicked or broke an invariant.
pub fn run_case(
    target: &'static Target,
    seed: u64,
    case: u64,
    verbose: bool,
) -> Result<(), Failure> {
    install_hook();
    let recorder = Recorder {
        inputs: RefCell::new(Vec::new()),
        verbose,
    };
    let mut rng = Rng::for_case(seed, target.name, case);
    IN_CASE.with(|c| c.set(true));
    let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(&mut rng, &recorder)));
    IN_CASE.with(|c| c.set(false));
    match outcome {
        Ok(()) => Ok(()),
        Err(_) => Err(Failure {
            target: target.name,
            seed,
            case,
            message: LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panic without a message".to_owned()),
            inputs: recorder.inputs.into_inner(),
        }),
    }
}

/// Runs cases `first..first + cases` of `target`; `progress` is called with the index of
/// every case before it runs (for a watchdog).
///
/// # Errors
///
/// The first [`Failure`].
pub fn run(
    target: &'static Target,
    seed: u64,
    first: u64,
    cases: u64,
    progress: &dyn Fn(u64),
) -> Result<Summary, Failure> {
    #[allow(clippy::disallowed_methods)] // a host-side harness, never built for wasm32
    let started = std::time::Instant::now();
    for case in first..first.saturating_add(cases) {
        progress(case);
        run_case(target, seed, case, false)?;
    }
    Ok(Summary {
        target: target.name,
        cases,
        seed,
        elapsed: started.elapsed(),
    })
}
