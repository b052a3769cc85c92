//! Shared by the campaign driver and its agent: the program language, its seeded generator and
//! the fault-free output a program must produce.
//!
//! A program is a list of ops; every op has an `id` unique within its execution. The agent
//! interprets it (see `src/bin/campaign-agent.rs`); the driver generates it from the seed and
//! computes [`expected_output`] without running anything, because every result is a pure
//! function of the op.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub mod rfc3339;

/// The agent id the campaign registers (parents and subagents alike).
pub const AGENT_ID: &str = "campaign";
/// The shared webhook secret.
pub const SECRET: &str = "campaign-secret";
/// Tool name of the idempotent (`safe_to_retry`) tool.
pub const TOOL: &str = "campaign_tool";
/// Tool name of the `at_most_once` tool.
pub const AT_MOST_ONCE: &str = "campaign_charge";
/// Tool name the policy denies.
pub const DENIED: &str = "campaign_forbidden";
/// Tool name that needs an approval.
pub const GATED: &str = "campaign_gated";
/// Tool name whose body runs a subagent.
pub const SPAWN: &str = "campaign_spawn";
/// The reason the policy gives for [`DENIED`].
pub const DENY_REASON: &str = "the campaign forbids it";
/// Request header the driver's webhook proxy sets to ask for a host deadline (milliseconds from
/// the moment the agent receives the request).
pub const DEADLINE_HEADER: &str = "x-campaign-deadline-ms";

/// Lease period the kernel hands out (the SDK heartbeats every lease / 3).
pub const LEASE: Duration = Duration::from_secs(3);
/// Delivery attempts per dispatch before the kernel gives up (never, in practice).
pub const MAX_ATTEMPTS: u32 = 100_000;
/// The kernel's webhook retry backoff: first pause and cap.
pub const RETRY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(1));
/// How long the kernel waits for a webhook answer.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// The line `campaign-kernel` prints on stdout once it serves (followed by its two ports).
pub const KERNEL_READY: &str = "campaign-kernel ready";

/// The policy bundle the campaign agent is registered with.
pub fn policy_yaml() -> String {
    format!(
        r#"
default_action: allow
rules:
  - id: campaign-deny
    when: {{ target: {DENIED} }}
    then: {{ decision: deny, reason: "{DENY_REASON}" }}
  - id: campaign-approval
    when: {{ target: {GATED} }}
    then: {{ decision: require_approval }}
"#
    )
}

/// One operation of a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// An idempotent tool call ([`TOOL`]); its body sleeps `before_ms`, logs the effect, sleeps
    /// `after_ms`.
    Tool {
        /// Unique within the execution.
        id: u32,
        /// Sleep before the effect.
        before_ms: u64,
        /// Sleep after the effect.
        after_ms: u64,
    },
    /// An `at_most_once` tool call ([`AT_MOST_ONCE`]).
    AtMostOnce {
        /// Unique within the execution.
        id: u32,
        /// Sleep before the effect.
        before_ms: u64,
        /// Sleep after the effect.
        after_ms: u64,
    },
    /// A local `rebuno::step`.
    Step {
        /// Unique within the execution.
        id: u32,
        /// Sleep before the effect.
        before_ms: u64,
        /// Sleep after the effect.
        after_ms: u64,
    },
    /// A durable LLM call (`rebuno::llm::fetch`, an `llm_call` step) to the agent's loopback
    /// chat-completions stub, which logs the effect and answers after `delay_ms`.
    Llm {
        /// Unique within the execution.
        id: u32,
        /// The stub's delay before it answers.
        delay_ms: u64,
    },
    /// A call of [`DENIED`] through `call_json`: the denial comes back as the result string.
    Denied {
        /// Unique within the execution.
        id: u32,
    },
    /// A call of [`GATED`]: blocks until the driver grants the approval, then runs.
    Approval {
        /// Unique within the execution.
        id: u32,
        /// Sleep before the effect.
        before_ms: u64,
    },
    /// A [`SPAWN`] tool call whose body runs `program` as a subagent in its own session.
    Subagent {
        /// Unique within the execution.
        id: u32,
        /// The child's program (leaf ops only).
        program: Program,
    },
    /// Leaf ops run concurrently (`join_all`).
    Parallel {
        /// Unique within the execution.
        id: u32,
        /// Leaf ops.
        ops: Vec<Op>,
    },
}

impl Op {
    /// The op's id.
    pub fn id(&self) -> u32 {
        match self {
            Op::Tool { id, .. }
            | Op::AtMostOnce { id, .. }
            | Op::Step { id, .. }
            | Op::Llm { id, .. }
            | Op::Denied { id }
            | Op::Approval { id, .. }
            | Op::Subagent { id, .. }
            | Op::Parallel { id, .. } => *id,
        }
    }

    /// The op's result in a fault-free run.
    pub fn expected(&self) -> Value {
        match self {
            Op::Tool { id, .. } => json!(format!("tool-{id}")),
            Op::AtMostOnce { id, .. } => json!(format!("charged-{id}")),
            Op::Step { id, .. } => json!(u64::from(*id) * 1000 + 7),
            Op::Llm { id, .. } => json!(format!("llm-{id}")),
            Op::Denied { .. } => json!(format!("{DENIED} not allowed. reason: {DENY_REASON}")),
            Op::Approval { id, .. } => json!(format!("approved-{id}")),
            Op::Subagent { program, .. } => expected_output(program),
            Op::Parallel { ops, .. } => Value::Array(ops.iter().map(Op::expected).collect()),
        }
    }

    /// The effect-log kind of a leaf op (`None` for ops that log nothing themselves).
    pub fn effect_kind(&self) -> Option<&'static str> {
        match self {
            Op::Tool { .. } => Some("tool"),
            Op::AtMostOnce { .. } => Some("at_most_once"),
            Op::Step { .. } => Some("step"),
            Op::Llm { .. } => Some("llm"),
            Op::Approval { .. } => Some("approval"),
            Op::Denied { .. } => Some("denied"),
            Op::Subagent { .. } | Op::Parallel { .. } => None,
        }
    }

    /// This op and, for `Parallel`, its members (not a subagent's ops: they belong to the child).
    pub fn leaves(&self) -> Vec<&Op> {
        match self {
            Op::Parallel { ops, .. } => ops.iter().collect(),
            other => vec![other],
        }
    }
}

/// An execution's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// A label for logs (`e17`, `e17.c3`).
    pub label: String,
    /// The ops, run in order.
    pub ops: Vec<Op>,
}

impl Program {
    /// Every op that does its own effect or kernel step (parallel members flattened).
    pub fn leaves(&self) -> Vec<&Op> {
        self.ops.iter().flat_map(Op::leaves).collect()
    }
}

/// The output of a fault-free run of `program`.
pub fn expected_output(program: &Program) -> Value {
    json!({
        "label": program.label,
        "results": program.ops.iter().map(Op::expected).collect::<Vec<_>>(),
    })
}

/// Tool arguments of the sleeping tools.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EffectArgs {
    /// The op id.
    pub id: u32,
    /// Sleep before the effect.
    pub before_ms: u64,
    /// Sleep after the effect.
    pub after_ms: u64,
}

/// Tool arguments of the subagent tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpawnArgs {
    /// The op id.
    pub id: u32,
    /// The child's program.
    pub program: Program,
}

/// One line of the effect log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EffectLine {
    /// The execution the effect ran for.
    pub execution: String,
    /// The op id.
    pub effect: u32,
    /// `tool`, `at_most_once`, `step`, `approval`.
    pub kind: String,
    /// The agent process.
    pub pid: u32,
    /// The dispatch attempt of the run that did it.
    #[serde(default)]
    pub attempt: u64,
}

/// SplitMix64: small, seedable, good enough for schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for a named sub-stream of `seed`.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut rng = Self(seed ^ stream.wrapping_mul(0xA24B_AED4_963E_E407));
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Index into a weight table.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut pick = self.range(0, total.saturating_sub(1));
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                return i;
            }
            pick -= w;
        }
        weights.len().saturating_sub(1)
    }
}

/// Generates the program of execution `index` from the campaign's generator.
pub fn generate(rng: &mut Rng, index: usize) -> Program {
    let label = format!("e{index}");
    let count = rng.range(3, 8);
    let mut next_id = 0u32;
    let mut ops = Vec::new();
    for _ in 0..count {
        // tool, amo, step, denied, approval, subagent, parallel
        let op = match rng.weighted(&[28, 16, 18, 7, 7, 8, 12]) {
            0..=2 => leaf(rng, &mut next_id),
            3 => {
                next_id += 1;
                Op::Denied { id: next_id }
            }
            4 => {
                next_id += 1;
                Op::Approval {
                    id: next_id,
                    before_ms: rng.range(0, 150),
                }
            }
            5 => {
                next_id += 1;
                let id = next_id;
                let mut child_id = 0u32;
                let child_ops = (0..rng.range(1, 3))
                    .map(|_| leaf(rng, &mut child_id))
                    .collect();
                Op::Subagent {
                    id,
                    program: Program {
                        label: format!("{label}.c{id}"),
                        ops: child_ops,
                    },
                }
            }
            _ => {
                next_id += 1;
                let id = next_id;
                let members = (0..rng.range(2, 3))
                    .map(|_| leaf(rng, &mut next_id))
                    .collect();
                Op::Parallel { id, ops: members }
            }
        };
        ops.push(op);
    }
    Program { label, ops }
}

/// The model name of the campaign's LLM calls (the `llm_call` step's target).
pub const MODEL: &str = "campaign-model";

/// A tool, at-most-once tool, step or LLM call with random sleeps.
fn leaf(rng: &mut Rng, next_id: &mut u32) -> Op {
    *next_id += 1;
    let id = *next_id;
    let before_ms = rng.range(0, 250);
    let after_ms = rng.range(0, 250);
    match rng.weighted(&[40, 22, 26, 12]) {
        0 => Op::Tool {
            id,
            before_ms,
            after_ms,
        },
        1 => Op::AtMostOnce {
            id,
            before_ms,
            after_ms,
        },
        3 => Op::Llm {
            id,
            delay_ms: before_ms,
        },
        _ => Op::Step {
            id,
            before_ms,
            after_ms,
        },
    }
}
