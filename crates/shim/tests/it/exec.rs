//! `cpuplan-exec`: the environment it sets, the affinity CMD gets, exit statuses, plan errors, the static build.

use crate::common;

use std::process::{Command, Output};

use common::{elf_program_headers, sample_plan, static_exec, two_cpus, write_plan, PT_INTERP};

const EXEC: &str = env!("CARGO_BIN_EXE_cpuplan-exec");

fn exec(args: &[&str]) -> Output {
    Command::new(EXEC)
        .args(args)
        .env_remove("CPUPLAN_PLAN")
        .env_remove("OMP_NUM_THREADS")
        .env("GOMAXPROCS", "kept-by-the-test")
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn var<'a>(env: &'a str, key: &str) -> Option<&'a str> {
    env.lines().find_map(|l| l.strip_prefix(&format!("{key}=")))
}

#[test]
fn sets_the_plans_variables_keeps_set_ones_and_pins_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let p = plan.to_str().unwrap();
    let o = exec(&[
        "--plan",
        p,
        "--worker",
        "0",
        "--",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status; env",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let (a, b) = two_cpus();
    assert!(
        out.starts_with(&format!("Cpus_allowed_list:\t{b}\n")),
        "{out}"
    );
    assert_eq!(var(&out, "OMP_NUM_THREADS"), Some("1"));
    assert_eq!(var(&out, "RAYON_NUM_THREADS"), Some("1"));
    assert_eq!(
        var(&out, "GOMAXPROCS"),
        Some("kept-by-the-test"),
        "a set variable is not overridden"
    );
    assert_eq!(
        var(&out, "CPUPLAN_MASK"),
        Some(sample_plan().mask.to_string().as_str())
    );
    assert_eq!(
        var(&out, "CPUPLAN_WORKERS"),
        Some(format!("{b};-").as_str())
    );
    assert_eq!(var(&out, "CPUPLAN_RESULT"), Some(a.to_string().as_str()));
    assert_eq!(
        var(&out, "CPUPLAN_WHY"),
        Some(format!("step_thread_core {b}: the plan's why, with a quote: it's").as_str())
    );
    assert_eq!(
        var(&out, "CPUPLAN_PLAN"),
        Some(p),
        "CMD's libraries find the plan"
    );
    assert_eq!(err, "", "a pinned worker is silent without -v");
}

#[test]
fn the_result_option_and_an_unpinned_worker() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let p = plan.to_str().unwrap();
    let (a, _) = two_cpus();
    let o = exec(&[
        "--plan",
        p,
        "--result",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert_eq!(text(&o).0, format!("Cpus_allowed_list:\t{a}\n"));
    // Worker 1 is unpinned: CMD keeps the launcher's mask, and stderr says why.
    let o = exec(&[
        "--plan",
        p,
        "--worker",
        "1",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success());
    let mask = common::machine_mask();
    assert_eq!(out, format!("Cpus_allowed_list:\t{mask}\n"));
    assert!(
        err.starts_with("cpuplan-exec: worker 1 left unpinned: the plan leaves it unpinned"),
        "{err}"
    );
}

#[test]
fn the_env_file_alone_is_enough() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    std::fs::remove_file(&plan).unwrap();
    let (_, b) = two_cpus();
    let o = exec(&["--plan", plan.to_str().unwrap(), "--worker=0", "-v", "--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status; echo \"omp=$OMP_NUM_THREADS plan=${CPUPLAN_PLAN-unset}\""]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(out, format!("Cpus_allowed_list:\t{b}\nomp=1 plan=unset\n"));
    assert!(
        err.contains(&format!("worker 0 pinned to cpus {b}")),
        "{err}"
    );
}

#[test]
fn exit_status_is_passed_through() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let p = plan.to_str().unwrap();
    assert_eq!(
        exec(&["--plan", p, "--", "sh", "-c", "exit 7"])
            .status
            .code(),
        Some(7)
    );
    assert_eq!(exec(&["--plan", p, "--", "true"]).status.code(), Some(0));
    let o = exec(&["--plan", p, "--", "no-such-command-cpuplan"]);
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        text(&o).1,
        "cpuplan-exec: cannot run no-such-command-cpuplan: ENOENT: No such file or directory\n"
    );
    let o = exec(&["--plan", p, "--", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "a directory is not executable");
}

#[test]
fn a_missing_plan_is_an_error_unless_optional() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plan.json");
    let o = exec(&["--plan", p.to_str().unwrap(), "--worker", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        text(&o).1,
        format!(
            "cpuplan-exec: no plan: neither {} nor {} exists\n",
            p.display(),
            dir.path().join("plan.env").display()
        )
    );
    let o = exec(&[
        "--plan",
        p.to_str().unwrap(),
        "--optional",
        "--worker",
        "0",
        "--",
        "sh",
        "-c",
        "echo ran",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o).0, "ran\n");
    assert!(text(&o).1.ends_with("running unpinned (--optional)\n"));
}

#[test]
fn a_malformed_plan_is_one_line_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let p = plan.to_str().unwrap();

    std::fs::write(
        dir.path().join("plan.env"),
        "CPUPLAN_MASK='0-1'\nOMP_NUM_THREADS=$(nproc)\n",
    )
    .unwrap();
    let o = exec(&["--plan", p, "--optional", "--", "true"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "--optional does not excuse a malformed plan"
    );
    assert_eq!(
        text(&o).1,
        format!(
            "cpuplan-exec: {}:2: '$' is special to the shell (quote the value): \"OMP_NUM_THREADS=$(nproc)\"\n",
            dir.path().join("plan.env").display()
        )
    );

    std::fs::remove_file(dir.path().join("plan.env")).unwrap();
    std::fs::write(&plan, "{\"version\": 1, \"mask\": \"0-x\"}").unwrap();
    let o = exec(&["--plan", p, "--", "true"]);
    assert_eq!(o.status.code(), Some(3));
    let err = text(&o).1;
    assert!(
        err.starts_with(&format!(
            "cpuplan-exec: {p}: not a cpuplan plan: invalid cpu list \"0-x\""
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn a_worker_outside_the_mask_cannot_be_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let mut plan = sample_plan();
    let beyond = common::machine_mask().last().unwrap() + 1;
    plan.workers[0].as_mut().unwrap().cpus = common::one(beyond);
    let p = write_plan(dir.path(), &plan);
    let o = exec(&["--plan", p.to_str().unwrap(), "--worker", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        text(&o).1.starts_with(&format!(
            "cpuplan-exec: cannot pin worker 0: cpus {beyond} are not all in the process mask"
        )),
        "{}",
        text(&o).1
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["--worker"][..],
        &["--worker", "0"],
        &["--frobnicate", "--", "true"],
    ] {
        let o = exec(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(text(&o).1.starts_with("cpuplan-exec: "), "{args:?}");
    }
    let o = exec(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).0.starts_with("usage: cpuplan-exec"));
}

#[test]
fn sh_and_the_shim_read_plan_env_alike() {
    // README "Inside the container", way 1: source plan.env.
    let dir = tempfile::tempdir().unwrap();
    write_plan(dir.path(), &sample_plan());
    let env_path = dir.path().join("plan.env");
    let o = Command::new("sh")
        .arg("-c")
        .arg("set -a; . \"$1\"; set +a; exec env")
        .arg("sh")
        .arg(&env_path)
        .env_clear()
        .output()
        .unwrap();
    let shell = String::from_utf8_lossy(&o.stdout).into_owned();
    let ours =
        cpuplan::planenv::shell::parse(&std::fs::read_to_string(&env_path).unwrap()).unwrap();
    // 15 CPUPLAN_* plan variables, 7 pool variables, GOMAXPROCS, CUDA_DEVICE_ORDER.
    assert_eq!(ours.len(), 24);
    for (k, v) in &ours {
        assert_eq!(var(&shell, k), Some(v.as_str()), "{k}");
    }
}

#[test]
fn the_static_build_has_no_interpreter_and_runs() {
    let bin = static_exec();
    let headers = elf_program_headers(&bin);
    assert!(!headers.is_empty());
    assert!(
        !headers.contains(&PT_INTERP),
        "{} asks for a dynamic loader",
        bin.display()
    );
    if let Ok(o) = Command::new("file").arg(&bin).output() {
        let desc = String::from_utf8_lossy(&o.stdout);
        assert!(
            desc.contains("statically linked") || desc.contains("static-pie"),
            "{desc}"
        );
    }
    let o = Command::new(&bin)
        .args([
            "--optional",
            "--plan",
            "/nonexistent/plan.json",
            "--",
            "sh",
            "-c",
            "exit 5",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5));
}

/// The lines of `stderr`, which must not report a panic.
fn no_panic_lines(o: &Output) -> Vec<String> {
    let err = text(o).1;
    assert!(!err.contains("panicked"), "{err}");
    err.lines().map(str::to_string).collect()
}

#[test]
fn a_nul_in_a_plan_env_value_is_one_line_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    std::fs::remove_file(&plan).unwrap();
    let env = dir.path().join("plan.env");
    // Quoted, escaped with a backslash, escaped inside double quotes: none may reach set_var.
    for value in ["'a\0b'", "a\\\0b", "\"a\\\0b\""] {
        std::fs::write(
            &env,
            format!("CPUPLAN_MASK='0-1'\nCPUPLAN_USABLE='2'\nCPUPLAN_WHY={value}\n"),
        )
        .unwrap();
        for args in [
            &["--plan", plan.to_str().unwrap(), "--", "true"][..],
            &[
                "--plan",
                plan.to_str().unwrap(),
                "--optional",
                "-v",
                "--worker",
                "0",
                "--",
                "true",
            ],
        ] {
            let o = exec(args);
            assert_eq!(o.status.code(), Some(3), "{value:?} {args:?}: {o:?}");
            let lines = no_panic_lines(&o);
            assert_eq!(lines.len(), 1, "{value:?}: {lines:?}");
            assert!(
                lines[0].starts_with(&format!("cpuplan-exec: {}:3: a NUL byte: ", env.display())),
                "{value:?}: {lines:?}"
            );
        }
    }
}

#[test]
fn only_the_plans_variables_reach_cmd_and_v_lists_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let env = dir.path().join("plan.env");
    let mut text_env = common::hook_env(&sample_plan());
    text_env.push_str(
        "LD_PRELOAD=/tmp/x.so\nBASH_ENV=/tmp/x.sh\nPYTHONPATH=/tmp\nCPUPLAN_PLAN=/tmp/other.json\n",
    );
    std::fs::write(&env, text_env).unwrap();
    let run = |verbose: bool| {
        let mut args = vec!["--plan", plan.to_str().unwrap()];
        if verbose {
            args.push("-v");
        }
        args.extend(["--", "env"]);
        Command::new(EXEC)
            .args(&args)
            .env_remove("CPUPLAN_PLAN")
            .env_remove("OMP_NUM_THREADS")
            .env_remove("LD_PRELOAD")
            .env_remove("BASH_ENV")
            .env_remove("PYTHONPATH")
            .env("GOMAXPROCS", "kept-by-the-test")
            .output()
            .unwrap()
    };
    for verbose in [false, true] {
        let o = run(verbose);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        for key in ["LD_PRELOAD", "BASH_ENV", "PYTHONPATH"] {
            assert_eq!(var(&out, key), None, "{key} reached CMD: {out}");
        }
        assert_eq!(var(&out, "CPUPLAN_PLAN"), plan.to_str(), "not the file's");
        assert_eq!(var(&out, "OMP_NUM_THREADS"), Some("1"));
        assert_eq!(var(&out, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(var(&out, "GOMAXPROCS"), Some("kept-by-the-test"));
        if verbose {
            let lines: Vec<&str> = err.lines().collect();
            assert!(
                lines.contains(
                    &"cpuplan-exec: ignored LD_PRELOAD BASH_ENV PYTHONPATH CPUPLAN_PLAN (not plan variables)"
                ),
                "{err}"
            );
            assert!(
                lines.contains(&"cpuplan-exec: kept GOMAXPROCS (already set)"),
                "{err}"
            );
            let set = lines
                .iter()
                .find_map(|l| l.strip_prefix("cpuplan-exec: set "))
                .unwrap_or_else(|| panic!("no set line: {err}"));
            assert!(
                set.contains("OMP_NUM_THREADS") && set.ends_with(" CPUPLAN_PLAN"),
                "{set}"
            );
            assert!(!set.contains("LD_PRELOAD"), "{set}");
        } else {
            assert_eq!(err, "", "ignored keys are listed only under -v");
        }
    }
    let o = exec(&["--help"]);
    assert!(
        text(&o)
            .0
            .contains("Any other key in plan.env (LD_PRELOAD, PATH, ...) is ignored."),
        "{}",
        text(&o).0
    );
}

#[test]
fn container_text_cannot_forge_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut plan = sample_plan();
    plan.why = "x\ncpuplan-exec: forged line\r\u{1b}[2K".into();
    plan.workers[0].as_mut().unwrap().why = "w\nforged: too".into();
    let p = write_plan(dir.path(), &plan);
    let p = p.to_str().unwrap();
    // An unpinned worker is reported without -v, with the plan's why.
    let o = exec(&["--plan", p, "--worker", "1", "--", "true"]);
    assert!(o.status.success());
    let lines = no_panic_lines(&o);
    assert_eq!(
        lines,
        [
            "cpuplan-exec: worker 1 left unpinned: the plan leaves it unpinned (x\\ncpuplan-exec: forged line\\r\\u{1b}[2K)"
        ]
    );
    let o = exec(&["--plan", p, "--worker", "0", "-v", "--", "true"]);
    assert!(o.status.success());
    let lines = no_panic_lines(&o);
    assert!(
        lines.iter().any(|l| l.ends_with("(w\\nforged: too)")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("forged")), "{lines:?}");

    // A plan directory whose name holds a newline: its errors stay one line.
    let odd = dir.path().join("a\nb");
    std::fs::create_dir(&odd).unwrap();
    let missing = odd.join("plan.json");
    let o = exec(&["--plan", missing.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(no_panic_lines(&o).len(), 1, "{o:?}");
    std::fs::write(odd.join("plan.env"), "CPUPLAN_MASK=$(x)\n").unwrap();
    let o = exec(&["--plan", missing.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(3));
    let lines = no_panic_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("a\\nb/plan.env:1: "), "{lines:?}");
    let o = exec(&["--plan", p, "--", "no\nsuch-command"]);
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        no_panic_lines(&o),
        ["cpuplan-exec: cannot run no\\nsuch-command: ENOENT: No such file or directory"]
    );
}

/// Runs `cpuplan-exec --plan PLAN -- true` under `timeout 20` (a read that blocks would hang it).
fn exec_bounded(plan: &std::path::Path) -> Output {
    Command::new("timeout")
        .arg("20")
        .arg(EXEC)
        .args(["--plan", plan.to_str().unwrap(), "--", "true"])
        .env_remove("CPUPLAN_PLAN")
        .output()
        .unwrap()
}

#[test]
fn a_fifo_a_device_or_an_oversized_plan_file_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![b'#'; (1 << 20) + 1];
    for name in ["plan.env", "plan.json"] {
        for (what, said) in [
            ("fifo", "a FIFO, not a regular file"),
            ("device", "a device, not a regular file"),
            ("big", "over the 1048576-byte limit"),
        ] {
            let d = dir.path().join(format!("{name}-{what}"));
            std::fs::create_dir(&d).unwrap();
            let plan = write_plan(&d, &sample_plan());
            let file = d.join(name);
            std::fs::remove_file(&file).unwrap();
            match what {
                "fifo" => nix::unistd::mkfifo(&file, nix::sys::stat::Mode::S_IRWXU).unwrap(),
                // A link to a device: what a tenant's image can put there.
                "device" => std::os::unix::fs::symlink("/dev/zero", &file).unwrap(),
                _ => std::fs::write(&file, &big).unwrap(),
            }
            let o = exec_bounded(&plan);
            let lines = no_panic_lines(&o);
            assert_eq!(o.status.code(), Some(3), "{name} {what}: {lines:?}");
            assert_eq!(lines.len(), 1, "{name} {what}: {lines:?}");
            assert!(
                lines[0].contains(&file.display().to_string()) && lines[0].contains(said),
                "{name} {what}: {lines:?}"
            );
        }
    }
}

/// The fastest of three runs of `cpuplan-exec` over a `plan.env` carrying `n` more plan
/// variables (each set in CMD's environment).
fn import_time(dir: &std::path::Path, n: usize) -> std::time::Duration {
    let d = dir.join(format!("n{n}"));
    std::fs::create_dir(&d).unwrap();
    let plan = write_plan(&d, &sample_plan());
    let mut env = common::hook_env(&sample_plan());
    for i in 0..n {
        env.push_str(&format!("CPUPLAN_X{i}=1\n"));
    }
    std::fs::write(d.join("plan.env"), env).unwrap();
    (0..3)
        .map(|_| {
            let t = std::time::Instant::now();
            let o = exec_bounded(&plan);
            assert!(o.status.success(), "{n} variables: {:?}", text(&o));
            t.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn importing_plan_variables_is_linear() {
    // 8 times the variables takes at most about 8 times as long (a quadratic import: 64).
    let dir = tempfile::tempdir().unwrap();
    let (n, n8) = (4000, 32000);
    let (t, t8) = (import_time(dir.path(), n), import_time(dir.path(), n8));
    let ratio = t8.as_secs_f64() / t.as_secs_f64();
    eprintln!("import: {n} variables {t:?}, {n8} variables {t8:?}: ratio {ratio:.1}");
    assert!(ratio < 20.0, "{n}: {t:?}, {n8}: {t8:?}: ratio {ratio:.1}");
}
