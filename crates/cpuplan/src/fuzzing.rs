//! The parsers of untrusted input, for the fuzz targets and their regression tests only
//! (feature `fuzzing`); not part of the planner's API.

pub use crate::cgroup::translate;
pub use crate::mountinfo::{decode_octal, parse_mountinfo};
pub use crate::proc_cgroup::parse_proc_cgroup;
pub use crate::quota::{parse_cfs_period, parse_cfs_quota, parse_cpu_max};
