//! The cpuplan OCI hook.
pub mod devices;
