//! The parsers of untrusted input, for the fuzz targets and their regression tests only
//! (`fuzz/targets.rs`), and the pieces the benches drive; not part of the library's API.

pub use crate::read::bundle::parse_spec;
pub use crate::read::spec::env_of_interest;
pub use crate::read::state::read_state;

/// The NRI daemon's rank placement (its watcher thread over the kernel's process events), for
/// `benches/rank_placement.rs`.
pub use crate::decide::rank::GpuId;
pub use crate::nri::ranks::{
    from_nix as cpus_of_affinity, spawn as spawn_rank_watcher, Entry as RankEntry, Ranks,
};
