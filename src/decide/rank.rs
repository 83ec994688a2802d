//! Who is which worker: a process of a planned container is worker *r* (the container's GPU at
//! index *r* in plan order, PCI address order) when its environment says so by a launcher's
//! convention, and each worker's CPUs in the plan. Pure: the caller reads the environment
//! (`/proc/<pid>/environ`, bounded) and the host; nothing here reads a file.
//!
//! Precedence (the first that applies decides):
//! 1. `CUDA_VISIBLE_DEVICES` naming exactly one of the container's GPUs (an index into the
//!    container's GPUs in PCI order, a `GPU-` uuid or a prefix of one, a MIG form's parent, a
//!    PCI bus id): the process can use that GPU only, whatever rank it holds (Ray's workers,
//!    engines that narrow per process).
//! 2. The first rank variable set, in this order: `LOCAL_RANK` (torchrun, DeepSpeed,
//!    Accelerate), `OMPI_COMM_WORLD_LOCAL_RANK` (Open MPI), `PMIX_LOCAL_RANK` (PMIx launchers),
//!    `MPI_LOCALRANKID` (MPICH's Hydra), `SLURM_LOCALID` (srun). Rank *r* is the *r*-th GPU the
//!    process sees: of the container's GPUs, or of those its `CUDA_VISIBLE_DEVICES` names when
//!    it names several (torchrun's `cuda:LOCAL_RANK`). A value that is not a plain decimal
//!    number (negative, huge, empty, not UTF-8), or a rank past the GPUs the process sees, is no
//!    rank: the process is unplaced, with a note; a later variable is not consulted.
//! 3. Otherwise the process carries no signal and keeps the container's CPUs.

use std::fmt;

use cpuplan::gpu::nvidia::{parse_id, DeviceId};
use cpuplan::{CpuSet, HostGpu};

use crate::config::RankPlacement;
use crate::logging::escape;
use crate::read::gpus::Gpu;

/// The variable that said which worker a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// `CUDA_VISIBLE_DEVICES` naming one GPU.
    CudaVisibleDevices,
    /// `LOCAL_RANK`: torchrun, DeepSpeed, Accelerate.
    LocalRank,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`: Open MPI's mpirun (TensorRT-LLM's MPI workers).
    OmpiLocalRank,
    /// `PMIX_LOCAL_RANK`: PMIx launchers (Open MPI 5's prterun, srun --mpi=pmix).
    PmixLocalRank,
    /// `MPI_LOCALRANKID`: MPICH's and Intel MPI's Hydra.
    MpiLocalRankId,
    /// `SLURM_LOCALID`: srun.
    SlurmLocalId,
}

impl Signal {
    /// The variable's name.
    pub fn var(self) -> &'static str {
        match self {
            Signal::CudaVisibleDevices => "CUDA_VISIBLE_DEVICES",
            Signal::LocalRank => "LOCAL_RANK",
            Signal::OmpiLocalRank => "OMPI_COMM_WORLD_LOCAL_RANK",
            Signal::PmixLocalRank => "PMIX_LOCAL_RANK",
            Signal::MpiLocalRankId => "MPI_LOCALRANKID",
            Signal::SlurmLocalId => "SLURM_LOCALID",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.var())
    }
}

/// The rank variables, in precedence order.
pub const RANK_VARS: [Signal; 5] = [
    Signal::LocalRank,
    Signal::OmpiLocalRank,
    Signal::PmixLocalRank,
    Signal::MpiLocalRankId,
    Signal::SlurmLocalId,
];

/// The most characters of a tenant's value a note shows.
const MAX_SHOWN: usize = 40;

/// One of the container's GPUs as a process may name it: its PCI address and `GPU-` uuid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuId {
    /// PCI address, lowercase `0000:3b:00.0`.
    pub address: String,
    /// `GPU-<uuid>`, lowercase, where the driver gives one.
    pub uuid: Option<String>,
}

/// Which worker a process is, and what said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worker {
    /// The worker's index: its GPU's index among the container's GPUs in plan order.
    pub index: usize,
    /// The variable that said so.
    pub signal: Signal,
}

/// The value of `key` in `environ` (NUL-separated `KEY=VALUE` entries, as
/// `/proc/<pid>/environ` holds them): the first entry for it, as `getenv` finds it.
pub fn env_value<'a>(environ: &'a [u8], key: &str) -> Option<&'a [u8]> {
    environ.split(|b| *b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(key.as_bytes())?;
        rest.strip_prefix(b"=")
    })
}

/// `value` shown in a note: escaped and cut.
fn shown(value: &[u8]) -> String {
    let Ok(text) = std::str::from_utf8(value) else {
        let cut = &value[..value.len().min(MAX_SHOWN)];
        let more = if cut.len() < value.len() { "..." } else { "" };
        return format!("\"{}{more}\"", cut.escape_ascii());
    };
    let cut: String = text.chars().take(MAX_SHOWN).collect();
    let more = if cut.len() < text.len() { "..." } else { "" };
    format!("\"{}{more}\"", escape(&cut))
}

/// A rank: plain decimal digits (no sign, no space) of at most 9 digits.
fn rank_number(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The container's GPUs (indices into `gpus`) that `value` of `CUDA_VISIBLE_DEVICES` names, in
/// its order, as CUDA reads it: up to the first entry that names none of them (or one named
/// twice). Indices count the container's GPUs in PCI order.
fn cuda_visible(value: &str, gpus: &[GpuId]) -> Vec<usize> {
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let lower = entry.to_ascii_lowercase();
        let found = match parse_id(entry) {
            Some(DeviceId::Index(i)) => usize::try_from(i).ok().filter(|i| *i < gpus.len()),
            Some(DeviceId::Pci(a)) => gpus.iter().position(|g| g.address == a),
            Some(DeviceId::Uuid(u)) => unique(gpus, &u),
            // CUDA takes a uuid's prefix too.
            _ if lower.starts_with("gpu-") && lower.len() > 4 => unique(gpus, &lower),
            _ => None,
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

/// The one GPU of `gpus` whose uuid starts with `prefix`.
fn unique(gpus: &[GpuId], prefix: &str) -> Option<usize> {
    let prefix = prefix.to_ascii_lowercase();
    let mut hits = gpus.iter().enumerate().filter(|(_, g)| {
        g.uuid
            .as_deref()
            .is_some_and(|u| u.to_ascii_lowercase().starts_with(&prefix))
    });
    match (hits.next(), hits.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// Which worker the process with `environ` is among the container's `gpus` (plan order):
/// `Ok(Some)` a worker, `Ok(None)` no signal, `Err` a signal that names no worker (the note,
/// naming the variable and its value). See the module for the precedence.
pub fn who(environ: &[u8], gpus: &[GpuId]) -> Result<Option<Worker>, String> {
    let cuda = Signal::CudaVisibleDevices;
    let seen: Option<Vec<usize>> = match env_value(environ, cuda.var()) {
        None => None,
        Some(raw) => match std::str::from_utf8(raw) {
            Ok(text) => Some(cuda_visible(text, gpus)),
            Err(_) => return Err(format!("{cuda}={} is not UTF-8: no rank", shown(raw))),
        },
    };
    if let Some([one]) = seen.as_deref() {
        return Ok(Some(Worker {
            index: *one,
            signal: cuda,
        }));
    }
    let Some((signal, raw)) = RANK_VARS
        .iter()
        .find_map(|s| env_value(environ, s.var()).map(|v| (*s, v)))
    else {
        return Ok(None);
    };
    let Some(rank) = rank_number(raw) else {
        return Err(format!(
            "{signal}={} is not a rank (a decimal number): no rank",
            shown(raw)
        ));
    };
    let visible: Vec<usize> = match seen {
        Some(v) if !v.is_empty() => v,
        _ => (0..gpus.len()).collect(),
    };
    match visible.get(rank) {
        Some(index) => Ok(Some(Worker {
            index: *index,
            signal,
        })),
        None => Err(format!(
            "{signal}={rank} is past the {} GPUs the process sees: no rank",
            visible.len()
        )),
    }
}

/// Each worker's CPUs in the plan: its GPU's local CPUs (where sysfs places it) within the
/// container's `cpus`; `None` for a worker whose GPU has none there, or whose local CPUs are all
/// of `cpus` (placing it would narrow nothing).
pub fn worker_cpus(gpus: &[Gpu], host: &[HostGpu], cpus: &CpuSet) -> Vec<Option<CpuSet>> {
    gpus.iter()
        .map(|g| {
            let local = host
                .iter()
                .find(|h| h.address == g.address)
                .and_then(HostGpu::placement_cpus)?;
            let mine = local.intersection(cpus);
            (!mine.is_empty() && &mine != cpus).then_some(mine)
        })
        .collect()
}

/// The container's `rank_placement`: its annotation `cpuplan.rank-placement` where set, else
/// `config`'s. A bad annotation is a note naming it, and the container is then not placed
/// (its plan is unchanged, and it starts).
pub fn rank_placement(
    config: RankPlacement,
    annotation: Option<&str>,
) -> (RankPlacement, Option<String>) {
    let key = crate::read::spec::RANK_PLACEMENT_ANNOTATION;
    match annotation.map(str::parse::<RankPlacement>) {
        None => (config, None),
        Some(Ok(p)) => (p, None),
        Some(Err(e)) => (
            RankPlacement::Off,
            Some(format!("annotation {key}: {e}: no process of it is placed")),
        ),
    }
}

#[cfg(test)]
#[path = "rank_tests.rs"]
mod tests;
