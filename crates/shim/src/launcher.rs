//! `cpuplan-exec`'s logic: its arguments, the env file next to the plan, and which variables it sets.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Result, ShimError};
use crate::plan::{Plan, ENV_FILE};

/// Exit status for a command line `cpuplan-exec` does not understand.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when the plan is missing (without `--optional`), unreadable or malformed, or the pin fails.
pub const EXIT_PLAN: i32 = 3;
/// Exit status when CMD exists but cannot be executed.
pub const EXIT_NOEXEC: i32 = 126;
/// Exit status when CMD is not found.
pub const EXIT_NOTFOUND: i32 = 127;

/// `cpuplan-exec --help`.
pub const USAGE: &str = "\
usage: cpuplan-exec [--plan PATH] [--worker N | --result] [--optional] [-v] -- CMD [ARGS...]

Loads plan.env (next to the plan) into the environment, without overriding
variables already set, pins itself as asked, then execs CMD.

  --plan PATH   the plan JSON (default: $CPUPLAN_PLAN, else /run/cpuplan/plan.json);
                plan.env is read from the same directory
  --worker N    pin to worker N's CPUs (nothing if the plan leaves it unpinned)
  --result      pin to the API server's result CPUs
  --optional    with no plan at all, run CMD unpinned instead of failing
  -v            say what was set and pinned, on stderr

exit status: CMD's; 2 usage; 3 plan missing, malformed or not pinnable;
126 CMD not executable; 127 CMD not found";

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

/// The variables of `file_vars` to set: the last value of each key that `is_set` says is not already set.
pub fn vars_to_set(
    file_vars: &[(String, String)],
    is_set: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in file_vars {
        if is_set(k) {
            continue;
        }
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
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

/// Reads the plan at `plan_path` and `plan.env` beside it; an error if either exists but is malformed.
///
/// With neither file: `Ok` with no plan and no variables (the caller decides).
pub fn find_plan(plan_path: &Path) -> Result<Found> {
    let env_path = env_file_for(plan_path);
    let env_vars = match std::fs::read_to_string(&env_path) {
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

    #[test]
    fn set_variables_are_kept_and_the_last_value_wins() {
        let vars = vec![
            ("A".to_string(), "1".to_string()),
            ("KEEP".to_string(), "file".to_string()),
            ("A".to_string(), "2".to_string()),
        ];
        let out = vars_to_set(&vars, |k| k == "KEEP");
        assert_eq!(out, vec![("A".to_string(), "2".to_string())]);
    }
}
