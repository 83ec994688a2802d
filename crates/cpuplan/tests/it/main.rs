//! The planner crate's integration tests, one binary: plans on real machines' topologies and
//! synthetic ones, quotas, GPUs, claims (`claims` runs this binary again as its racing
//! processes: `--exact claims::race_child`), plan.env and the property tests. `cargo test -p
//! cpuplan --test it`.

mod claimsfx;
mod gpufx;

mod claims;
mod claims_handover;
mod gpu;
mod gpu_parts;
mod grace;
mod plan;
mod planenv;
mod proptest_plan;
mod quota;
mod topologies;
