//! The `process_*` metrics as Prometheus's client libraries give them (their names, types,
//! units and help), read from `/proc/self` at each scrape: CPU time, memory, descriptors,
//! start time. A value that cannot be read is left out of that scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Every `process_*` family served (its sample's name) and its help line, as Go's client
/// writes them: the list
/// docs/kubernetes.md's table is checked against.
pub const PROCESS: [(&str, &str); 6] = [
    (
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
    ),
    (
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
    ),
    (
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
    ),
    ("process_open_fds", "Number of open file descriptors."),
    (
        "process_max_fds",
        "Maximum number of open file descriptors.",
    ),
    (
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
    ),
];

/// The process's own figures, read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self` says now.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Sample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<i64>,
    pub virtual_bytes: Option<i64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
    pub start_time: Option<f64>,
}

/// `sysconf(name)`, where positive.
fn sysconf(name: nix::libc::c_int) -> Option<i64> {
    // SAFETY: sysconf reads a system constant; it has no memory effects.
    let v = unsafe { nix::libc::sysconf(name) };
    (v > 0).then_some(v as i64)
}

impl Sample {
    /// This process, now.
    pub(crate) fn now() -> Sample {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let mut s = Sample::of(
            read("/proc/self/stat").as_deref(),
            read("/proc/stat").as_deref(),
            read("/proc/self/limits").as_deref(),
            sysconf(nix::libc::_SC_CLK_TCK),
            sysconf(nix::libc::_SC_PAGESIZE),
        );
        s.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as i64);
        s
    }

    /// The figures in the texts of `/proc/self/stat`, `/proc/stat` and `/proc/self/limits`,
    /// with the clock's ticks per second and the page size.
    pub(crate) fn of(
        stat: Option<&str>,
        system: Option<&str>,
        limits: Option<&str>,
        ticks: Option<i64>,
        page: Option<i64>,
    ) -> Sample {
        // The fields after the command's closing parenthesis, from the third (state) on.
        let fields: Vec<&str> = stat
            .and_then(|s| s.rsplit_once(')'))
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<i64>().ok());
        let ticks = ticks.map(|t| t as f64);
        let boot = system.and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<i64>().ok())
        });
        let max_fds = limits.and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<i64>().ok())
        });
        Sample {
            cpu_seconds: field(14)
                .zip(field(15))
                .zip(ticks)
                .map(|((u, s), t)| (u + s) as f64 / t),
            resident_bytes: field(24).zip(page).map(|(p, size)| p * size),
            virtual_bytes: field(23),
            open_fds: None,
            max_fds,
            start_time: field(22)
                .zip(ticks)
                .zip(boot)
                .map(|((start, t), boot)| boot as f64 + start as f64 / t),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = Sample::now();
        let [cpu, rss, vsz, open, max, start] = PROCESS;
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            let name = "process_cpu";
            c.encode(encoder.encode_descriptor(
                name,
                cpu.1,
                Some(&Unit::Seconds),
                c.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                s.resident_bytes,
                "process_resident_memory",
                rss.1,
                Some(Unit::Bytes),
            ),
            (
                s.virtual_bytes,
                "process_virtual_memory",
                vsz.1,
                Some(Unit::Bytes),
            ),
            (s.open_fds, open.0, open.1, None),
            (s.max_fds, max.0, max.1, None),
        ];
        for (value, name, help, unit) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
            }
        }
        if let Some(v) = s.start_time {
            let g = ConstGauge::new(v);
            let name = "process_start_time";
            g.encode(encoder.encode_descriptor(
                name,
                start.1,
                Some(&Unit::Seconds),
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_come_from_proc_s_texts() {
        // A command with a space and a parenthesis, as the kernel prints it.
        let stat = "42 (cpuplan (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 300 18446744073709551615";
        let system = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let s = Sample::of(
            Some(stat),
            Some(system),
            Some(limits),
            Some(100),
            Some(4096),
        );
        assert_eq!(
            s,
            Sample {
                cpu_seconds: Some(3.0),
                resident_bytes: Some(300 * 4096),
                virtual_bytes: Some(123456789),
                open_fds: None,
                max_fds: Some(1024),
                start_time: Some(1_700_000_010.0),
            }
        );
        assert_eq!(Sample::of(None, None, None, None, None), Sample::default());
        let now = Sample::now();
        assert!(now.open_fds.unwrap() >= 3, "{now:?}");
        assert!(
            now.resident_bytes.unwrap() > 0 && now.start_time.unwrap() > 1.6e9,
            "{now:?}"
        );
    }
}
