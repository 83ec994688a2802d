//! `--help` texts.

/// The top-level usage.
pub const MAIN: &str = "\
cpuplan-hook: plan a GPU container's CPUs before its workload starts (an OCI runtime hook)

usage: cpuplan-hook [--config PATH] [SUBCOMMAND] [OPTIONS]

subcommands:
  hook [STAGE]   run as an OCI hook: the state on stdin (no subcommand: hook, stage from the status)
  explain        the plan the hook would make for a bundle on this host, writing nothing
  plan           a plan for given devices, mask and usable CPUs
  quota          the cgroup CPU quota, mask and usable CPUs of a process
  gpus           the host's GPUs like a PCI device
  claims         the GPU claims on this host
  precreate      podman's precreate stage: runtime config on stdin, the config to use on stdout
  install        install the binary, the hooks.d files and a default config
  uninstall      undo install
  help           this text

--config PATH (before or after any subcommand): the hook config (default /etc/cpuplan/hook.json).
Every subcommand takes --help. Bad arguments or files: exit status 2 and one line on stderr.
";

/// `hook --help`.
pub const HOOK: &str = "\
usage: cpuplan-hook hook [STAGE]   (the OCI state JSON on stdin, at most 1 MiB)

STAGE: createRuntime or prestart (plan, write the cpuset and /run/cpuplan/plan.{env,json}),
poststop (release the container's GPU claims); any other stage is logged and ignored.
Without STAGE: poststop when the state's status is stopped, else createRuntime.
";

/// `explain --help`.
pub const EXPLAIN: &str = "\
usage: cpuplan-hook explain --bundle DIR [--root DIR] [--topology-root DIR] [--config PATH] [--json]

The plan the hook would make for the bundle's config.json on this host, with no pid: the live
cgroup and the GPU claims are skipped (and said so). Writes nothing. --root and --topology-root
override the hook config's root and topology_root.
";

/// `plan --help`.
pub const PLAN: &str = "\
usage: cpuplan-hook plan --setting off|auto|CPU --devices LIST --mask CPUS --usable N [--root DIR] [--json]

LIST: the workers' PCI addresses, comma-separated, - for a CPU worker (e.g. 0000:18:00.0,-).
Prints the plan drawn over the host's NUMA nodes, or its JSON with --json. --root: the host root (default /).
";

/// `quota --help`.
pub const QUOTA: &str = "\
usage: cpuplan-hook quota [--root DIR] [--pid PID|self] [--json]

The tightest cgroup CPU quota over the process's cgroup and its ancestors (v1 and v2), its CPU
mask and the usable CPUs. JSON: {\"quota\":2.5,\"mask\":\"0-7\",\"usable\":2} (quota null when none).
";

/// `gpus --help`.
pub const GPUS: &str = "\
usage: cpuplan-hook gpus --like ADDR [--root DIR] [--json]

The host's PCI functions with the vendor and class of the device at ADDR, in address order,
with their NUMA node and local CPUs. JSON: [{\"address\":..,\"node\":..,\"local\":..}].
";

/// `claims --help`.
pub const CLAIMS: &str = "\
usage: cpuplan-hook claims [--config PATH] [--json]

The GPU claims in the hook config's claims_dir, each with its holder and whether it is live.
";

/// `precreate --help`.
pub const PRECREATE: &str = "\
usage: cpuplan-hook precreate   (podman's precreate stage: the runtime config JSON on stdin)

Prints the config to use: the plan's variables added to process.env (never overriding one the
image or user set), linux.resources.cpu.cpus narrowed to the planned mask where the numa rule
applies, and the plan's JSON in the annotation cpuplan.plan. No pid yet: quota and mask come
from the config and the host; GPU claims and plan files stay with the createRuntime hook.
A config that cannot be planned is printed unchanged (on_error: allow).
";

/// `install --help` and `uninstall --help`.
pub const INSTALL: &str = "\
usage: cpuplan-hook install [--prefix DIR] [--hooks-dir DIR] [--with-precreate] [--config PATH]
                            [--root-prefix DIR] [--containerd [--containerd-config PATH]
                            [--containerd-runtimes A,B] [--ctr-root DIR]]
       cpuplan-hook uninstall [the same options, without --with-precreate]

install copies this binary to <prefix>/libexec/cpuplan/cpuplan-hook (prefix /usr/local), writes
cpuplan.json (and with --with-precreate cpuplan-precreate.json) into the hooks dir
(/etc/containers/oci/hooks.d), and writes a default hook config at --config
(/etc/cpuplan/hook.json) if none exists. Idempotent; refuses to overwrite a file it did not
write. uninstall removes them (the config only if it is still the default).

--containerd also registers the hook with containerd's CRI plugin: the base runtime spec
cpuplan-base-spec.json (`ctr oci spec` plus the hooks) and the drop-in conf.d/cpuplan.toml
beside --containerd-config (/etc/containerd/config.toml), which gets an `imports` entry for it
unless one covers it. The drop-in sets base_runtime_spec and pod_annotations = [\"cpuplan.*\"]
for --containerd-runtimes (default: the default runtime). Restart containerd afterwards.
--ctr-root runs ctr chrooted into the node's root as mounted here (default /).
--root-prefix puts every default path under DIR (a relocated node seen the same way by
install and the runtime).
";
