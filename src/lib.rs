//! The cpuplan OCI hook.
