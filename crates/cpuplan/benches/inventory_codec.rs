//! The inventory file's codec, in the hook's path: the file read from a tmpfs and decoded, as
//! `inventory::store::load_file` does at every start, for the file's codec (postcard) against
//! serde_json of the same `HostInventory`, interleaved in one run; prints each median and the
//! ratio. `cargo bench -p cpuplan --bench inventory_codec [-- ROUNDS]`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cpuplan::inventory::{format, HostInventory};

/// The 224-CPU 8-GPU host the planner's benches use, and the 16-GPU 8-node synthetic one.
fn hosts() -> Vec<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    vec![
        repo.join("examples/host"),
        repo.join("tests/fixtures/synthetic/host-8node-16gpu"),
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Reads `path` whole and decodes it with `decode`, `n` times; the time of one, in µs.
fn time(path: &Path, n: u32, decode: &dyn Fn(&[u8]) -> HostInventory) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        let bytes = std::fs::read(black_box(path)).unwrap();
        black_box(decode(&bytes));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(31);
    let dir = tempfile::Builder::new()
        .prefix("cpuplan-codec")
        .tempdir_in(if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .unwrap();
    for host in hosts() {
        let inv = HostInventory::read(&host, &host).unwrap();
        let file = dir.path().join("file");
        let json = dir.path().join("json");
        std::fs::write(&file, format::encode(&inv)).unwrap();
        std::fs::write(&json, serde_json::to_vec(&inv).unwrap()).unwrap();
        let from_file = |b: &[u8]| format::decode(b).unwrap();
        let from_json = |b: &[u8]| serde_json::from_slice::<HostInventory>(b).unwrap();
        assert_eq!(from_file(&std::fs::read(&file).unwrap()), inv);
        assert_eq!(from_json(&std::fs::read(&json).unwrap()), inv);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(time(&file, 200, &from_file));
            b.push(time(&json, 200, &from_json));
        }
        let (a, b) = (median(a), median(b));
        println!(
            "{}: {} CPUs, {} PCI functions; file {} B: {a:.1} µs; serde_json {} B: {b:.1} µs; file/json {:.3}",
            host.file_name().unwrap().to_string_lossy(),
            inv.online.len(),
            inv.pci.len(),
            std::fs::metadata(&file).unwrap().len(),
            std::fs::metadata(&json).unwrap().len(),
            a / b
        );
    }
}
