//! `cpuplan-hook`: an OCI runtime hook that plans a GPU container's CPUs before its workload starts.
//!
//! Registered at `createRuntime` and `poststop`, it reads the container's quota, cpuset and GPUs
//! from the bundle's `config.json` and the live cgroup, computes the plan with the `cpuplan`
//! planner, narrows the container's cpuset, and writes `plan.env` and `plan.json` inside it.

pub mod bundle;
pub mod cli;
pub mod config;
pub mod devices;
pub mod explain;
pub mod hook;
pub mod install;
pub mod logging;
pub mod nri;
pub mod output;
pub mod precreate;
pub mod privileges;
pub mod render;
pub mod state;
