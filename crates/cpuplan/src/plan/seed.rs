//! The seed's plan: what the original `deployment_plan` (`mstar.utils.cpus`) gives for the
//! same inputs, where cpuplan's own plan differs on purpose.

use super::{CpuPlan, PoolSplit};

impl CpuPlan {
    /// This plan as the seed's `deployment_plan` gives it. Two things differ from cpuplan's
    /// plan: the API server's result is one CPU, the lowest of the core it was given (the
    /// seed's `int`; cpuplan reserves the whole core), so `pinned` and `left` count that one
    /// CPU; and the pools are not split among the workers' processes ([`PoolSplit::Off`]), so
    /// `preprocess_threads` is the seed's quarter of `left`, 1 to 4, however many workers
    /// there are (cpuplan's default, [`PoolSplit::PerProcess`], also caps it at `left` less
    /// the workers, so that each worker process keeps a CPU). `why` says so.
    pub fn seed_form(mut self) -> CpuPlan {
        let mut result = String::new();
        if let Some(r) = self.result.as_mut() {
            if let Some(lowest) = r.cpus.first() {
                r.cpus = std::iter::once(lowest).collect();
                result = format!("the API server's result cpu {lowest} (the lowest of its core), ");
            }
        }
        self.why = format!("{}; the seed's form: {result}pools not split", self.why);
        self.with_split(PoolSplit::Off)
    }
}

#[cfg(test)]
mod tests {
    use crate::cpuset::CpuSet;
    use crate::plan::{CpuPlan, PoolSplit, Setting, StepCpus};

    #[test]
    fn the_result_keeps_its_lowest_cpu_and_the_pools_are_not_split() {
        let step = |cpus: &str| StepCpus {
            cpus: cpus.parse().unwrap(),
            why: "w".into(),
        };
        let mask: CpuSet = "0-223".parse().unwrap();
        let mut plan = CpuPlan::unpinned(Setting::Auto, mask, 26, vec![None; 8], "t");
        plan.workers = (0..8)
            .map(|i| Some(step(&format!("{i},{}", i + 112))))
            .collect();
        plan.result = Some(step("55,167"));
        assert_eq!((plan.left(), plan.preprocess_threads()), (8, 1));
        let seed = plan.clone().seed_form();
        assert_eq!(seed.result.as_ref().unwrap().cpus.to_string(), "55");
        assert_eq!(seed.result.as_ref().unwrap().why, "w");
        assert_eq!(seed.split, PoolSplit::Off);
        assert_eq!((seed.left(), seed.preprocess_threads()), (9, 2));
        assert_eq!(seed.workers, plan.workers);
        assert_eq!(
            seed.why,
            "t; the seed's form: the API server's result cpu 55 (the lowest of its core), pools not split"
        );
        // Nothing pinned: only the split changes.
        let off = CpuPlan::unpinned(Setting::Off, "0-7".parse().unwrap(), 8, vec![None; 2], "o");
        let seed = off.clone().seed_form();
        assert_eq!(
            (seed.split, seed.result, seed.workers),
            (PoolSplit::Off, None, off.workers)
        );
        assert_eq!(seed.why, "o; the seed's form: pools not split");
    }
}
