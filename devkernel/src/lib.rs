//! rebuno-devkernel
