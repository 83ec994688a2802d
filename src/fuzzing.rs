//! The parsers of untrusted input, for the fuzz targets and their regression tests only
//! (`fuzz/targets.rs`); not part of the library's API.

pub use crate::read::bundle::parse_spec;
pub use crate::read::spec::env_of_interest;
pub use crate::read::state::read_state;
