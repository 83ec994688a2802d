use super::*;

#[test]
fn a_container_s_leaves_under_both_drivers() {
    let id = "a".repeat(64);
    assert_eq!(
        leaves_of(&format!("/kubepods/besteffort/pod1/{id}")),
        std::slice::from_ref(&id)
    );
    let leaves = leaves_of(&format!(
        "kubepods-besteffort-pod1.slice:cri-containerd:{id}"
    ));
    assert!(
        leaves.contains(&format!("cri-containerd-{id}.scope")),
        "{leaves:?}"
    );
}

#[test]
fn a_process_is_the_container_s_in_its_leaf_or_below_it() {
    let ranks = Ranks::default();
    ranks.add(Entry::new(
        "c1",
        Vec::new(),
        Vec::new(),
        vec!["c1leaf".into()],
    ));
    let of = |t: &str| ranks.of_cgroup(t).map(|e| e.id.clone());
    assert_eq!(of("0::/kubepods/pod1/c1leaf\n").as_deref(), Some("c1"));
    assert_eq!(
        of("0::/kubepods/pod1/c1leaf/container\n").as_deref(),
        Some("c1")
    );
    assert_eq!(
        of("12:cpuset:/kubepods/pod1/c1leaf\n").as_deref(),
        Some("c1")
    );
    assert_eq!(of("0::/kubepods/pod1/c1leafx\n"), None);
    assert_eq!(of("0::/kubepods/pod1/other\n"), None);
    ranks.remove("c1");
    assert_eq!(of("0::/kubepods/pod1/c1leaf\n"), None);
    assert!(ranks.is_empty());
}

fn cpus_of(pid: i32) -> CpuSet {
    from_nix(&sched_getaffinity(Pid::from_raw(pid)).unwrap())
}

/// A `sleep` child with only `env`, on `cpus` where given.
fn child(env: &[(&str, &str)], cpus: Option<&CpuSet>) -> std::process::Child {
    let c = std::process::Command::new("sleep")
        .arg("30")
        .env_clear()
        .envs(env.iter().copied())
        .spawn()
        .unwrap();
    if let Some(cpus) = cpus {
        sched_setaffinity(Pid::from_raw(c.id() as i32), &to_nix(cpus)).unwrap();
    }
    c
}

#[test]
fn real_processes_are_placed_at_exec_and_fork_and_never_fought() {
    let me = std::process::id() as i32;
    let mask = cpus_of(me);
    let cpus: Vec<usize> = mask.iter().collect();
    assert!(cpus.len() >= 2, "this test needs two CPUs, has {mask}");
    let one = |c: usize| {
        let mut s = CpuSet::new();
        s.insert(c);
        s
    };
    let (a, b) = (one(cpus[0]), one(cpus[1]));
    // This test's own cgroup stands for the container's; only the pids given are handled.
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let leaf = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(|p| p.rsplit('/').next())
        .unwrap()
        .to_string();
    let ranks = Ranks::default();
    ranks.add(Entry::new(
        "c1",
        Vec::new(),
        vec![Some(a.clone()), Some(b.clone())],
        vec![leaf],
    ));
    // `who` counts ranks among the GPUs: two of them.
    let gpu = |n: &str| GpuId {
        address: n.into(),
        uuid: None,
    };
    let entry = ranks.of_cgroup(&text).unwrap();
    let entry = Arc::new(Entry::new(
        "c1",
        vec![gpu("0000:3b:00.0"), gpu("0000:86:00.0")],
        entry.workers.clone(),
        entry.leaves.clone(),
    ));
    ranks.remove("c1");
    ranks
        .by_leaf
        .write()
        .unwrap()
        .insert(entry.leaves[0].clone(), Arc::clone(&entry));
    let (mut env, mut placed) = (Vec::new(), HashMap::new());
    let mut handle = |e| handle(&ranks, e, &mut env, &mut placed);
    let pid = |c: &std::process::Child| c.id() as i32;

    let w1 = child(&[("LOCAL_RANK", "1")], None);
    handle(ProcEvent::Exec { tgid: pid(&w1) });
    assert_eq!(cpus_of(pid(&w1)), b, "worker 1 placed at its exec");
    // A child forked before its parent was placed: placed at the fork's event.
    let forked = child(&[], None);
    handle(ProcEvent::Fork {
        parent_tgid: pid(&w1),
        child_pid: pid(&forked),
        child_tgid: pid(&forked),
    });
    assert_eq!(cpus_of(pid(&forked)), b, "the child of a placed worker");
    // A thread's fork event places nothing.
    let thread = child(&[], None);
    handle(ProcEvent::Fork {
        parent_tgid: pid(&w1),
        child_pid: pid(&thread),
        child_tgid: me,
    });
    assert_eq!(cpus_of(pid(&thread)), mask);
    // Within its worker's CPUs already: left alone; elsewhere: left alone.
    let inside = child(&[("LOCAL_RANK", "0")], Some(&a));
    handle(ProcEvent::Exec { tgid: pid(&inside) });
    assert_eq!(cpus_of(pid(&inside)), a);
    let elsewhere = child(&[("LOCAL_RANK", "0")], Some(&b));
    handle(ProcEvent::Exec {
        tgid: pid(&elsewhere),
    });
    handle(ProcEvent::Exec {
        tgid: pid(&elsewhere),
    });
    assert_eq!(cpus_of(pid(&elsewhere)), b, "never moved back");
    // A bad rank and no rank: the container's CPUs.
    let bad = child(&[("LOCAL_RANK", "-1")], None);
    let none = child(&[("PATH", "/bin")], None);
    handle(ProcEvent::Exec { tgid: pid(&bad) });
    handle(ProcEvent::Exec { tgid: pid(&none) });
    assert_eq!(
        (cpus_of(pid(&bad)), cpus_of(pid(&none))),
        (mask.clone(), mask.clone())
    );
    // An exit forgets a placed process: its later children are not placed.
    handle(ProcEvent::Exit {
        pid: pid(&w1),
        tgid: pid(&w1),
    });
    let after = child(&[], None);
    handle(ProcEvent::Fork {
        parent_tgid: pid(&w1),
        child_pid: pid(&after),
        child_tgid: pid(&after),
    });
    assert_eq!(cpus_of(pid(&after)), mask);
    let c = &ranks.counts;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    assert_eq!(
        (
            n(&c.placed),
            n(&c.already),
            n(&c.elsewhere),
            n(&c.bad_signal)
        ),
        (2, 1, 2, 1)
    );
    for mut c in [w1, forked, thread, inside, elsewhere, bad, none, after] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
