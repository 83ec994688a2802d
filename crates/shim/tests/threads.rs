//! Real threads, checked with `sched_getaffinity` and `/proc/self/task/<tid>/status`.

mod common;

use std::path::Path;
use std::sync::Mutex;

use common::{machine_mask, one, sample_plan, two_cpus};
use cpuplan::{CpuSet, PlanFile};
use cpuplan_shim::{
    install, on_process_mask, pin_result, pin_thread, pin_worker, pin_worker_with, process_mask,
    spawn, task_cpus, thread_affinity, thread_id, Builder, Pinning, Plan, ShimError,
};

/// Tests that install a plan or read the process mask take this: the installed plan is process-wide.
static GLOBAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    GLOBAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling thread's CPUs, as the kernel reports them both ways (they must agree).
fn my_cpus() -> CpuSet {
    let a = thread_affinity().unwrap();
    let b = task_cpus(thread_id()).unwrap();
    assert_eq!(
        a, b,
        "sched_getaffinity and /proc/self/task/<tid>/status disagree"
    );
    a
}

fn plan() -> Plan {
    Plan {
        file: PlanFile::new(&sample_plan()),
        source: "test".into(),
    }
}

#[test]
fn a_pinned_thread_runs_on_its_cpus() {
    let mask = machine_mask();
    let (a, b) = two_cpus();
    std::thread::spawn(move || {
        pin_thread(&one(b), &mask, || ()).unwrap();
        assert_eq!(my_cpus(), one(b));
        // Pinning again elsewhere works from a pinned thread too (it goes back to the mask first).
        pin_thread(&one(a), &mask, || ()).unwrap();
        assert_eq!(my_cpus(), one(a));
    })
    .join()
    .unwrap();
}

#[test]
fn warm_runs_on_the_process_mask_before_the_move() {
    let mask = machine_mask();
    let (a, b) = two_cpus();
    let m = mask.clone();
    std::thread::spawn(move || {
        pin_thread(&one(a), &m, || ()).unwrap();
        assert_eq!(my_cpus(), one(a));
        let during = pin_thread(&one(b), &m, my_cpus).unwrap();
        assert_eq!(during, m, "warm must run on the whole process mask");
        assert_eq!(my_cpus(), one(b), "and the thread moves only after it");
    })
    .join()
    .unwrap();
}

#[test]
fn threads_started_by_a_pinned_thread_run_on_the_process_mask() {
    let _g = lock();
    install(None);
    let mask = machine_mask();
    let (_, b) = two_cpus();
    let m = mask.clone();
    let (plain, ours, built, rayon_cpus) = std::thread::spawn(move || {
        pin_thread(&one(b), &m, || ()).unwrap();
        let plain = std::thread::spawn(my_cpus).join().unwrap();
        let ours = spawn(my_cpus).join().unwrap();
        let built = Builder::new()
            .name("helper".into())
            .spawn(my_cpus)
            .unwrap()
            .join()
            .unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .start_handler(|_| {
                on_process_mask().unwrap();
            })
            .build()
            .unwrap();
        let rayon_cpus = pool.broadcast(|_| my_cpus());
        (plain, ours, built, rayon_cpus)
    })
    .join()
    .unwrap();
    assert_eq!(plain, one(b), "std's threads inherit their creator's mask");
    assert_eq!(ours, mask, "spawn starts on the process mask");
    assert_eq!(built, mask, "Builder starts on the process mask");
    assert_eq!(rayon_cpus, vec![mask.clone(), mask]);
}

#[test]
fn the_installed_plan_sets_the_process_mask() {
    let _g = lock();
    let (_, b) = two_cpus();
    let mut p = plan();
    p.file.mask = one(b);
    install(Some(p));
    assert_eq!(process_mask(), one(b));
    let cpus = spawn(my_cpus).join().unwrap();
    install(None);
    assert_eq!(cpus, one(b));
    assert_eq!(process_mask(), machine_mask());
}

#[test]
fn pinning_outside_the_process_mask_is_a_clear_error() {
    let mask = machine_mask();
    let beyond = mask.last().unwrap() + 1;
    std::thread::spawn(move || {
        let before = my_cpus();
        let e = pin_thread(&one(beyond), &mask, || panic!("warm must not run")).unwrap_err();
        assert!(matches!(e, ShimError::OutsideMask { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("cpus {beyond} are not all in the process mask {mask} (outside it: {beyond})")
        );
        assert_eq!(my_cpus(), before, "a refused pin changes nothing");

        // A process mask that claims CPUs the kernel does not allow: the kernel refuses.
        let mut claimed = mask.clone();
        claimed.insert(beyond);
        let e = pin_thread(&one(beyond), &claimed, || ()).unwrap_err();
        assert!(matches!(e, ShimError::SetAffinity { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("sched_setaffinity to cpus {beyond}: ")),
            "{e}"
        );
        let e = pin_thread(&CpuSet::new(), &mask, || ()).unwrap_err();
        assert!(matches!(e, ShimError::EmptyCpus), "{e}");
    })
    .join()
    .unwrap();
}

#[test]
fn pinning_partly_outside_the_allowed_cpus_is_refused() {
    let mask = machine_mask();
    let (a, _) = two_cpus();
    let beyond = mask.last().unwrap() + 1;
    std::thread::spawn(move || {
        let asked: CpuSet = [a, beyond].into_iter().collect();
        let claimed = mask.union(&asked);
        let e = pin_thread(&asked, &claimed, || ()).unwrap_err();
        assert!(matches!(e, ShimError::Narrowed { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("asked to run on cpus {asked}, the kernel allows only {a} of them")
        );
    })
    .join()
    .unwrap();
}

#[test]
fn workers_and_the_api_server_pin_as_the_plan_says() {
    let (a, b) = two_cpus();
    let p = plan();
    std::thread::spawn(move || {
        let got = pin_worker(&p, 0).unwrap();
        assert!(matches!(&got, Pinning::Pinned { cpus, .. } if *cpus == one(b)), "{got}");
        assert_eq!(my_cpus(), one(b));

        // Worker 1 is unpinned: nothing changes, and the reason is given.
        let got = pin_worker(&p, 1).unwrap();
        assert!(matches!(&got, Pinning::Unpinned { why } if why.contains("leaves it unpinned")), "{got}");
        assert_eq!(my_cpus(), one(b));
        let got = pin_worker(&p, 7).unwrap();
        assert!(matches!(&got, Pinning::Unpinned { why } if why.contains("no worker 7 (it lists 2 workers")), "{got}");

        let got = pin_result(&p).unwrap();
        assert_eq!(got.to_string(), format!("pinned to cpus {a} (the API server's core, cpu {a})"));
        assert_eq!(my_cpus(), one(a));

        let mut seen = None;
        pin_worker_with(&p, 0, || seen = Some(my_cpus())).unwrap();
        assert_eq!(seen, Some(p.file.mask.clone()));
        assert_eq!(my_cpus(), one(b));
    })
    .join()
    .unwrap();
}

#[test]
fn plans_load_from_the_file_the_variable_names() {
    let _g = lock();
    let dir = tempfile::tempdir().unwrap();
    let json = common::write_plan(dir.path(), &sample_plan());
    std::env::set_var("CPUPLAN_PLAN", &json);
    let loaded = Plan::load();
    let found = Plan::find();
    std::env::set_var("CPUPLAN_PLAN", dir.path().join("absent.json"));
    let absent = Plan::load();
    std::env::remove_var("CPUPLAN_PLAN");

    let loaded = loaded.unwrap();
    assert_eq!(loaded.file.to_plan(), sample_plan());
    assert_eq!(loaded.source, json.display().to_string());
    assert_eq!(found.unwrap(), loaded);
    let e = absent.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no plan: {} does not exist",
            dir.path().join("absent.json").display()
        )
    );
    assert!(Path::new(&loaded.source).exists());
}
