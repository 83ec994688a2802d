//! In-container shim (to be written).
