use super::*;
use crate::read::gpus::Gpu;

const U0: &str = "GPU-3b000000-1111-2222-3333-444444444444";
const U1: &str = "GPU-3b860000-1111-2222-3333-444444444444";

fn gpus() -> Vec<GpuId> {
    vec![
        GpuId {
            address: "0000:3b:00.0".into(),
            uuid: Some(U0.into()),
        },
        GpuId {
            address: "0000:86:00.0".into(),
            uuid: Some(U1.into()),
        },
    ]
}

fn environ(vars: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vars {
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

fn who_of(vars: &[&[u8]]) -> Result<Option<Worker>, String> {
    who(&environ(vars), &gpus())
}

fn worker(index: usize, signal: Signal) -> Result<Option<Worker>, String> {
    Ok(Some(Worker { index, signal }))
}

#[test]
fn each_launcher_s_variable_names_a_worker() {
    assert_eq!(
        who_of(&[b"PATH=/bin", b"LOCAL_RANK=1"]),
        worker(1, Signal::LocalRank)
    );
    for s in RANK_VARS {
        let var = format!("{}=1", s.var());
        assert_eq!(who_of(&[var.as_bytes()]), worker(1, s), "{s}");
    }
    assert_eq!(who_of(&[b"PATH=/bin", b"HOME=/"]), Ok(None));
    assert_eq!(who(b"", &gpus()), Ok(None));
}

#[test]
fn the_precedence_is_cuda_visible_devices_then_the_rank_variables_in_order() {
    // One GPU named: that GPU, whatever the rank says.
    assert_eq!(
        who_of(&[b"LOCAL_RANK=0", b"CUDA_VISIBLE_DEVICES=1"]),
        worker(1, Signal::CudaVisibleDevices)
    );
    // The first rank variable set decides, a later one is not consulted.
    assert_eq!(
        who_of(&[b"SLURM_LOCALID=0", b"OMPI_COMM_WORLD_LOCAL_RANK=1"]),
        worker(1, Signal::OmpiLocalRank)
    );
    assert!(who_of(&[b"LOCAL_RANK=x", b"SLURM_LOCALID=0"]).is_err());
    // The first entry of a duplicated variable is the one getenv finds.
    assert_eq!(
        who_of(&[b"LOCAL_RANK=1", b"LOCAL_RANK=0"]),
        worker(1, Signal::LocalRank)
    );
    // A variable whose name only starts alike is another variable.
    assert_eq!(who_of(&[b"LOCAL_RANKS=1", b"XLOCAL_RANK=1"]), Ok(None));
}

#[test]
fn cuda_visible_devices_forms_name_the_container_s_gpus() {
    let cuda = Signal::CudaVisibleDevices;
    let prefix = &U1[..12];
    let mig = format!("MIG-{U1}/1/0");
    for value in [
        "1",
        " 1 ",
        U1,
        &U1.to_uppercase(),
        prefix,
        "0000:86:00.0",
        mig.as_str(),
    ] {
        let var = format!("CUDA_VISIBLE_DEVICES={value}");
        assert_eq!(who_of(&[var.as_bytes()]), worker(1, cuda), "{value}");
    }
    // Several GPUs: the rank counts among them, in their order.
    assert_eq!(
        who_of(&[b"CUDA_VISIBLE_DEVICES=1,0", b"LOCAL_RANK=0"]),
        worker(1, Signal::LocalRank)
    );
    // Read as CUDA reads it: up to the first entry that names none of the GPUs.
    assert_eq!(who_of(&[b"CUDA_VISIBLE_DEVICES=0,7,1"]), worker(0, cuda));
    // None of the container's GPUs, hidden, an ambiguous prefix, a bare MIG uuid: no GPU named.
    for value in [
        "-1",
        "",
        "2",
        "GPU-",
        "GPU-3b",
        "GPU-9",
        "MIG-abcdef",
        "none",
    ] {
        let var = format!("CUDA_VISIBLE_DEVICES={value}");
        assert_eq!(who_of(&[var.as_bytes()]), Ok(None), "{value}");
    }
    // Hidden GPUs and a rank: the rank counts among the container's GPUs.
    assert_eq!(
        who_of(&[b"CUDA_VISIBLE_DEVICES=-1", b"LOCAL_RANK=1"]),
        worker(1, Signal::LocalRank)
    );
}

#[test]
fn hostile_values_are_no_rank_with_one_note_naming_the_variable() {
    let huge = format!("LOCAL_RANK={}", "9".repeat(100_000));
    for (var, says) in [
        (&b"LOCAL_RANK=-1"[..], "\"-1\" is not a rank"),
        (b"LOCAL_RANK=+1", "not a rank"),
        (b"LOCAL_RANK= 1", "not a rank"),
        (b"LOCAL_RANK=", "\"\" is not a rank"),
        (b"LOCAL_RANK=one", "\"one\" is not a rank"),
        (b"LOCAL_RANK=0x1", "not a rank"),
        (b"LOCAL_RANK=\xff\xfe", "not a rank"),
        (b"LOCAL_RANK=4294967296", "not a rank"),
        (b"LOCAL_RANK=2", "LOCAL_RANK=2 is past the 2 GPUs"),
        (b"LOCAL_RANK=999999999", "past the 2 GPUs"),
        (huge.as_bytes(), "..."),
        (
            b"CUDA_VISIBLE_DEVICES=\xff",
            "CUDA_VISIBLE_DEVICES=\"\\xff\"",
        ),
    ] {
        let note = who_of(&[var]).expect_err(&String::from_utf8_lossy(var));
        assert!(note.contains(says), "{note} (wanted {says})");
        assert!(
            note.len() < 200 && !note.contains('\n'),
            "one short line: {note}"
        );
    }
    // Past the GPUs a narrowed CUDA_VISIBLE_DEVICES leaves.
    let note = who_of(&[b"CUDA_VISIBLE_DEVICES=0,1", b"LOCAL_RANK=2"]).unwrap_err();
    assert!(note.contains("past the 2 GPUs"), "{note}");
    // No GPUs at all: every rank is past them.
    assert!(who(&environ(&[b"LOCAL_RANK=0"]), &[]).is_err());
}

#[test]
fn each_worker_gets_its_gpu_s_local_cpus_within_the_container_s() {
    let set = |s: &str| s.parse::<CpuSet>().unwrap();
    let host = vec![
        HostGpu::new("0000:3b:00.0", Some(0), Some(set("0-3"))),
        HostGpu::new("0000:86:00.0", Some(1), Some(set("4-7"))),
        HostGpu::new("0000:af:00.0", None, None),
    ];
    let gpu = |a: &str| Gpu {
        address: a.into(),
        sources: Vec::new(),
    };
    let ours = [
        gpu("0000:3b:00.0"),
        gpu("0000:86:00.0"),
        gpu("0000:af:00.0"),
    ];
    assert_eq!(
        worker_cpus(&ours, &host, &set("2-5")),
        [Some(set("2-3")), Some(set("4-5")), None]
    );
    // Outside the container's CPUs, or all of them: nothing to narrow to.
    assert_eq!(worker_cpus(&ours[..2], &host, &set("0-3")), [None, None]);
}

#[test]
fn the_annotation_overrides_the_config_and_a_bad_one_places_nothing() {
    use RankPlacement::{Auto, Off};
    assert_eq!(rank_placement(Auto, None), (Auto, None));
    assert_eq!(rank_placement(Off, None), (Off, None));
    assert_eq!(rank_placement(Off, Some("auto")), (Auto, None));
    assert_eq!(rank_placement(Auto, Some(" off ")), (Off, None));
    let (p, note) = rank_placement(Auto, Some("yes please"));
    let note = note.unwrap();
    assert_eq!(p, Off);
    assert!(
        note.contains("annotation cpuplan.rank-placement") && note.contains("\"yes please\""),
        "{note}"
    );
}
