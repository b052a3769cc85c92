//! rebuno: durable agents for Rebuno.
mod secret;
pub mod signing;
pub use secret::Secret;
