//! rebuno-hyper
