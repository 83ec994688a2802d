//! `cpuplan-exec`'s logic: its arguments, the env file next to the plan, and which variables it sets.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cpuplan::planenv::shell::is_name;
use cpuplan::planenv::{is_plan_var, CUDA_DEVICE_ORDER, GOMAXPROCS, PLAN_PATH, POOL_VARS, PREFIX};
use cpuplan::Role;

use crate::error::{Result, ShimError};
use crate::plan::{Plan, DEFAULT_PLAN, ENV_FILE, MAX_PLAN};

/// Exit status for a command line `cpuplan-exec` does not understand.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when the plan is missing (without `--optional`), unreadable or malformed, or the pin fails.
pub const EXIT_PLAN: i32 = 3;
/// Exit status when CMD exists but cannot be executed.
pub const EXIT_NOEXEC: i32 = 126;
/// Exit status when CMD is not found.
pub const EXIT_NOTFOUND: i32 = 127;

/// `cpuplan-exec --help`: the usage text, naming the variables it imports from `plan.env`.
pub fn usage() -> String {
    let mut thread_vars: Vec<&str> = POOL_VARS.to_vec();
    thread_vars.extend([GOMAXPROCS, CUDA_DEVICE_ORDER]);
    let mut list = String::new();
    let mut width = 0;
    for (i, v) in thread_vars.iter().enumerate() {
        let item = if i + 1 < thread_vars.len() {
            format!("{v},")
        } else {
            format!("{v}.")
        };
        if width > 0 && width + 1 + item.len() > 72 {
            list.push_str("\n  ");
            width = 0;
        } else if width > 0 {
            list.push(' ');
            width += 1;
        } else {
            list.push_str("  ");
        }
        width += item.len();
        list.push_str(&item);
    }
    format!(
        "\
usage: cpuplan-exec [--plan PATH] [--worker N | --result] [--optional] [-v] -- CMD [ARGS...]

Loads the plan's variables from plan.env (next to the plan) into the environment,
without overriding variables already set to another value than plan.env's, pins
itself as asked, then execs CMD. The plan's variables are its {PREFIX}* ones and the
thread variables
{list}
which hold the process's share of the CPUs left: the API server's with --result,
a worker's otherwise. Any other key in plan.env (LD_PRELOAD, PATH, ...) is ignored.

  --plan PATH   the plan JSON (default: ${PLAN_PATH}, else {DEFAULT_PLAN});
                plan.env is read from the same directory
  --worker N    pin to worker N's CPUs (nothing if the plan leaves it unpinned)
  --result      pin to the API server's result CPUs
  --optional    with no plan at all, run CMD unpinned instead of failing
  -v            say what was set, kept, ignored and pinned, on stderr

exit status: CMD's; 2 usage; 3 plan missing, malformed or not pinnable;
126 CMD not executable; 127 CMD not found"
    )
}

/// Which CPUs the launcher pins itself (and so CMD) to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// No pinning: only the environment.
    Nothing,
    /// Worker N's CPUs.
    Worker(usize),
    /// The API server's result CPUs.
    Result,
}

/// A parsed `cpuplan-exec` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// `--plan`, if given.
    pub plan: Option<PathBuf>,
    /// What to pin to.
    pub target: Target,
    /// `--optional`: no plan at all is not an error.
    pub optional: bool,
    /// `-v`: report on stderr.
    pub verbose: bool,
    /// CMD and its arguments (never empty).
    pub cmd: Vec<OsString>,
}

/// What the command line asks for: a run, or the usage text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Run CMD.
    Run(Invocation),
    /// Print [`USAGE`] and exit 0.
    Help,
}

/// Parses the arguments after the program name; an error is a one-line usage message.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> std::result::Result<Args, String> {
    let mut it = args.into_iter();
    let mut inv = Invocation {
        plan: None,
        target: Target::Nothing,
        optional: false,
        verbose: false,
        cmd: Vec::new(),
    };
    let set_target = |inv: &mut Invocation, t: Target| {
        if inv.target != Target::Nothing && inv.target != t {
            return Err("--worker and --result exclude each other".to_string());
        }
        inv.target = t;
        Ok(())
    };
    let worker = |v: &str| -> std::result::Result<Target, String> {
        v.parse::<usize>()
            .map(Target::Worker)
            .map_err(|_| format!("--worker {v:?}: not a worker index"))
    };
    while let Some(arg) = it.next() {
        let Some(a) = arg.to_str().map(str::to_string) else {
            inv.cmd.push(arg);
            break;
        };
        match a.as_str() {
            "--" => break,
            "-h" | "--help" => return Ok(Args::Help),
            "-v" | "--verbose" => inv.verbose = true,
            "--optional" => inv.optional = true,
            "--result" => set_target(&mut inv, Target::Result)?,
            "--plan" => {
                let p = it.next().ok_or("--plan needs a path")?;
                inv.plan = Some(PathBuf::from(p));
            }
            "--worker" => {
                let v = it.next().ok_or("--worker needs an index")?;
                let t = worker(&v.to_string_lossy())?;
                set_target(&mut inv, t)?;
            }
            _ if a.starts_with("--plan=") => inv.plan = Some(PathBuf::from(&a["--plan=".len()..])),
            _ if a.starts_with("--worker=") => {
                set_target(&mut inv, worker(&a["--worker=".len()..])?)?
            }
            _ if a.starts_with('-') => return Err(format!("unknown option {a:?}")),
            _ => {
                inv.cmd.push(arg);
                break;
            }
        }
    }
    inv.cmd.extend(it);
    if inv.cmd.is_empty() {
        return Err("no command to run (cpuplan-exec [options] -- CMD [ARGS...])".into());
    }
    Ok(Args::Run(inv))
}

/// The env file that goes with the plan at `plan`: `plan.env` in the same directory.
pub fn env_file_for(plan: &Path) -> PathBuf {
    plan.parent().unwrap_or(Path::new("/")).join(ENV_FILE)
}

/// What `cpuplan-exec` takes from `plan.env`: the plan's variables to set, and what it leaves alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    /// The plan's variables not already set, in file order, each with its last value in the file.
    pub set: Vec<(String, String)>,
    /// The plan's variables already set in the environment: kept as they are.
    pub kept: Vec<String>,
    /// The file's other keys (not [`is_plan_var`]): never set.
    pub ignored: Vec<String>,
}

/// Sorts the variables of the env file at `path` into [`Import`]; `is_set` says whether a key is already set.
///
/// Only the plan's variables ([`is_plan_var`]: its `CPUPLAN_*` ones and the thread variables)
/// are imported. A key that is not a variable name or a value holding a NUL, which no
/// environment can hold, is an error naming the file and the key. Linear in the number of
/// variables: each key is looked up once in a hash of those already sorted.
pub fn import_vars(
    file_vars: &[(String, String)],
    path: &Path,
    is_set: impl Fn(&str) -> bool,
) -> Result<Import> {
    use std::collections::hash_map::Entry;
    /// Which list of [`Import`] a key went to, and where in it.
    enum Slot {
        Set(usize),
        Other,
    }
    let mut out = Import::default();
    let mut seen: HashMap<&str, Slot> = HashMap::new();
    for (k, v) in file_vars {
        let bad = |what| ShimError::EnvVar {
            path: path.to_path_buf(),
            name: k.clone(),
            what,
        };
        if !is_name(k) {
            return Err(bad("not a variable name"));
        }
        if v.contains('\0') {
            return Err(bad("a NUL byte in the value"));
        }
        match seen.entry(k.as_str()) {
            Entry::Occupied(e) => {
                if let Slot::Set(i) = e.get() {
                    out.set[*i].1 = v.clone();
                }
            }
            Entry::Vacant(e) => {
                if !is_plan_var(k) {
                    out.ignored.push(k.clone());
                    e.insert(Slot::Other);
                } else if is_set(k) {
                    out.kept.push(k.clone());
                    e.insert(Slot::Other);
                } else {
                    out.set.push((k.clone(), v.clone()));
                    e.insert(Slot::Set(out.set.len() - 1));
                }
            }
        }
    }
    Ok(out)
}

/// The env file's `file_vars` by name, the last of a name winning (as a shell sourcing it
/// would leave them): looked up once per variable by [`set_otherwise`], so that an import stays
/// linear in the file's variables.
pub fn last_values(file_vars: &[(String, String)]) -> HashMap<&str, &str> {
    file_vars
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Whether `key` is set in the environment (`current`) to another value than the env file
/// gives it (`file`: its [`last_values`]): a value the plan put there (the runtime copies
/// `plan.env`'s values into the container's environment) is the plan's to change for the
/// process started.
pub fn set_otherwise(file: &HashMap<&str, &str>, key: &str, current: Option<&str>) -> bool {
    let Some(current) = current else {
        return false;
    };
    file.get(key).is_none_or(|v| *v != current)
}

/// The process `target` starts: the API server for `--result`, worker N for `--worker N`,
/// another process otherwise.
pub fn process_of(target: Target) -> Role {
    match target {
        Target::Nothing => Role::Other,
        Target::Worker(i) => Role::Worker(i),
        Target::Result => Role::ApiServer,
    }
}

/// `import` with the thread variables it sets holding `target`'s share under `plan`
/// ([`Plan::threads_for`]): the API server's for `--result`, a worker's otherwise.
pub fn retarget(import: &mut Import, plan: &Plan, target: Target) {
    let threads = plan.threads_for(process_of(target)).to_string();
    for (k, v) in &mut import.set {
        if POOL_VARS.contains(&k.as_str()) {
            v.clone_from(&threads);
        }
    }
}

/// What the launcher found next to the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The plan file's path.
    pub plan_path: PathBuf,
    /// The env file's path.
    pub env_path: PathBuf,
    /// The env file's variables, if it exists.
    pub env_vars: Option<Vec<(String, String)>>,
    /// The plan: from the JSON if it exists, else from the env file's variables, else `None`.
    pub plan: Option<Plan>,
}

/// The text of the regular file at `path`, read as every plan file is read
/// ([`cpuplan::read_file`]: without ever blocking, at most [`MAX_PLAN`] bytes): a FIFO, a
/// device, a directory or a larger file is an error saying so, as is text that is not UTF-8.
fn read_text(path: &Path) -> std::io::Result<String> {
    let bytes = cpuplan::read_file(path, MAX_PLAN)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Reads the plan at `plan_path` and `plan.env` beside it; an error if either exists but is malformed.
///
/// With neither file: `Ok` with no plan and no variables (the caller decides).
pub fn find_plan(plan_path: &Path) -> Result<Found> {
    let env_path = env_file_for(plan_path);
    let env_vars = match read_text(&env_path) {
        Ok(text) => {
            Some(
                cpuplan::planenv::shell::parse(&text).map_err(|e| ShimError::EnvLine {
                    path: env_path.clone(),
                    line: e.line,
                    what: e.what,
                    content: e.content,
                })?,
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ShimError::Io {
                path: env_path,
                source,
            })
        }
    };
    let plan = match Plan::load_from(plan_path) {
        Ok(p) => Some(p),
        Err(ShimError::NoPlan(_)) => match &env_vars {
            Some(vars) => Some(Plan::from_env_vars(vars, &env_path)?),
            None => None,
        },
        Err(e) => return Err(e),
    };
    Ok(Found {
        plan_path: plan_path.to_path_buf(),
        env_path,
        env_vars,
        plan,
    })
}

/// The plan path for `--plan`: the option, else `$CPUPLAN_PLAN`, else the default.
pub fn plan_path(option: Option<&Path>) -> PathBuf {
    option.map_or_else(Plan::default_path, Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> std::result::Result<Args, String> {
        parse_args(a.iter().map(OsString::from))
    }

    fn run(a: &[&str]) -> Invocation {
        match args(a) {
            Ok(Args::Run(i)) => i,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let i = run(&[
            "--plan",
            "/etc/p.json",
            "--worker",
            "3",
            "--",
            "sh",
            "-c",
            "env",
        ]);
        assert_eq!(i.plan.as_deref(), Some(Path::new("/etc/p.json")));
        assert_eq!(i.target, Target::Worker(3));
        assert_eq!(i.cmd, ["sh", "-c", "env"]);
        let i = run(&[
            "--result",
            "-v",
            "--optional",
            "--plan=/x",
            "--",
            "--not-an-option",
        ]);
        assert_eq!(
            (i.target, i.verbose, i.optional),
            (Target::Result, true, true)
        );
        assert_eq!(i.cmd, ["--not-an-option"]);
        assert_eq!(run(&["--worker=0", "python", "-v"]).cmd, ["python", "-v"]);
        assert_eq!(args(&["-h"]), Ok(Args::Help));
    }

    #[test]
    fn refuses_bad_command_lines() {
        for (a, what) in [
            (&["--worker", "x", "--", "true"][..], "not a worker index"),
            (&["--worker", "-1", "--", "true"][..], "not a worker index"),
            (
                &["--worker", "0", "--result", "--", "true"][..],
                "exclude each other",
            ),
            (&["--bogus", "--", "true"][..], "unknown option"),
            (&["--worker", "0"][..], "no command"),
            (&["--worker", "0", "--"][..], "no command"),
            (&["--plan"][..], "needs a path"),
        ] {
            let e = args(a).unwrap_err();
            assert!(e.contains(what), "{a:?}: {e}");
        }
    }

    #[test]
    fn env_file_sits_next_to_the_plan() {
        assert_eq!(
            env_file_for(Path::new("/run/cpuplan/plan.json")),
            Path::new("/run/cpuplan/plan.env")
        );
        assert_eq!(env_file_for(Path::new("plan.json")), Path::new("plan.env"));
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn set_variables_are_kept_and_the_last_value_wins() {
        let vars = pairs(&[
            ("OMP_NUM_THREADS", "1"),
            ("GOMAXPROCS", "file"),
            ("OMP_NUM_THREADS", "2"),
        ]);
        let out = import_vars(&vars, Path::new("plan.env"), |k| k == "GOMAXPROCS").unwrap();
        assert_eq!(out.set, pairs(&[("OMP_NUM_THREADS", "2")]));
        assert_eq!(out.kept, ["GOMAXPROCS"]);
        assert!(out.ignored.is_empty());
    }

    #[test]
    fn only_the_plans_variables_are_imported() {
        let vars = pairs(&[
            ("CPUPLAN_MASK", "0-3"),
            ("LD_PRELOAD", "/tmp/x.so"),
            ("BASH_ENV", "/tmp/x.sh"),
            ("PYTHONPATH", "/tmp"),
            ("CPUPLAN_PLAN", "/tmp/other.json"),
            ("CPUPLAN_STEP_THREAD_CORE", "9"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            ("LD_PRELOAD", "/tmp/y.so"),
            ("RAYON_NUM_THREADS", "3"),
        ]);
        let out = import_vars(&vars, Path::new("plan.env"), |_| false).unwrap();
        assert_eq!(
            out.set,
            pairs(&[
                ("CPUPLAN_MASK", "0-3"),
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("RAYON_NUM_THREADS", "3"),
            ])
        );
        assert_eq!(
            out.ignored,
            [
                "LD_PRELOAD",
                "BASH_ENV",
                "PYTHONPATH",
                "CPUPLAN_PLAN",
                "CPUPLAN_STEP_THREAD_CORE"
            ]
        );
    }

    #[test]
    fn a_value_the_plan_put_in_the_environment_is_the_plans_to_change() {
        let vars = pairs(&[("OMP_NUM_THREADS", "3"), ("OMP_NUM_THREADS", "5")]);
        let vars = last_values(&vars);
        assert!(!set_otherwise(&vars, "OMP_NUM_THREADS", None));
        assert!(!set_otherwise(&vars, "OMP_NUM_THREADS", Some("5")));
        assert!(set_otherwise(&vars, "OMP_NUM_THREADS", Some("3")));
        assert!(set_otherwise(&vars, "GOMAXPROCS", Some("5")));
    }

    #[test]
    fn each_target_gets_its_process_share() {
        // Two workers share 8 CPUs left with the API server: 2 for it, 3 each.
        let env = pairs(&[
            ("CPUPLAN_MASK", "0-7"),
            ("CPUPLAN_USABLE", "8"),
            ("CPUPLAN_DEVICES", "0000:01:00.0;0000:02:00.0"),
            ("CPUPLAN_POOL_SPLIT", "per-process"),
        ]);
        let plan = Plan::from_env_vars(&env, Path::new("plan.env")).unwrap();
        let file = pairs(&[
            ("OMP_NUM_THREADS", "3"),
            ("PYTHON_CPU_COUNT", "3"),
            ("GOMAXPROCS", "8"),
        ]);
        let share = |target| {
            let mut i = import_vars(&file, Path::new("plan.env"), |_| false).unwrap();
            retarget(&mut i, &plan, target);
            i.set
        };
        let api = pairs(&[
            ("OMP_NUM_THREADS", "2"),
            ("PYTHON_CPU_COUNT", "2"),
            ("GOMAXPROCS", "8"),
        ]);
        assert_eq!(share(Target::Result), api);
        assert_eq!(share(Target::Worker(1)), file);
        assert_eq!(share(Target::Nothing), file);
    }

    #[test]
    fn what_no_environment_can_hold_is_an_error_naming_the_file() {
        let path = Path::new("/run/cpuplan/plan.env");
        for (vars, needle) in [
            (
                pairs(&[("CPUPLAN_WHY", "a\0b")]),
                "/run/cpuplan/plan.env: \"CPUPLAN_WHY\": a NUL byte in the value",
            ),
            (
                pairs(&[("IGNORED", "a\0b")]),
                "\"IGNORED\": a NUL byte in the value",
            ),
            (
                pairs(&[("CPUPLAN_A=B", "1")]),
                "\"CPUPLAN_A=B\": not a variable name",
            ),
            (pairs(&[("", "1")]), "\"\": not a variable name"),
            (
                pairs(&[("CPUPLAN_\0", "1")]),
                "\"CPUPLAN_\\0\": not a variable name",
            ),
        ] {
            let e = import_vars(&vars, path, |_| false).unwrap_err();
            assert!(e.to_string().contains(needle), "{vars:?}: {e}");
            assert!(matches!(e, ShimError::EnvVar { .. }), "{e:?}");
        }
    }

    #[test]
    fn usage_names_the_imported_variables() {
        let u = usage();
        for v in POOL_VARS.iter().chain([&GOMAXPROCS, &CUDA_DEVICE_ORDER]) {
            assert!(u.contains(v), "{v} missing from {u}");
        }
        assert!(u.contains("CPUPLAN_* ones"), "{u}");
        assert!(u.contains("LD_PRELOAD, PATH, ...) is ignored"), "{u}");
        assert!(u.lines().all(|l| l.len() <= 92), "{u}");
    }
}
