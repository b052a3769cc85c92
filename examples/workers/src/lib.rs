//! A Rebuno agent on Cloudflare Workers: one durable tool and two local steps.
//!
//! Run with (from `deploy/workers/`, see its README for the kernel side):
//!
//! ```sh
//! npx wrangler dev --local          # builds with worker-build, serves on 127.0.0.1:8787
//! npx wrangler secret put REBUNO_AGENT_SECRET && npx wrangler deploy
//! ```
//!
//! The Worker reads `REBUNO_URL` (a var: the kernel), `REBUNO_AGENT_SECRET` (a secret: the
//! webhook secret) and `REBUNO_AGENT_ID` (a var, default `workers-example`).
//!
//! Input `{"text": "...", "work_ms": 0}`; output
//! `{"words": N, "longest": "...", "worked_ms": N, "checked_at": <unix ms>}`. `work_ms` makes
//! the `work` step take that long, to watch a run yield at its deadline and resume on the
//! re-delivery.

#[cfg(target_arch = "wasm32")]
mod agent;
// Used by the wasm32-only agent; compiled everywhere so its tests run on the host.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod text;
