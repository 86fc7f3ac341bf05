//! Vector addition, bandwidth and launch overhead. Runs the scalar kernel (baseline) and the
//! 16-byte vectorized one (the change) at 256 MiB per array under gpu-ledger, with a
//! device-to-device copy of the same size as the bandwidth reference, and prints the one-page
//! experiment ledger.
//!
//! `cargo run --release --example ex1_vector_add [-- LEDGER_PATH]`

use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};
use gpu_ledger::kernels::suite::gb_per_s;
use gpu_ledger::kernels::suite::vadd::{
    DeviceCopyGpu, DeviceCopySpec, VaddKernels, VaddVariant, VectorAddGpu, VectorAddSpec,
};

fn main() -> ExitCode {
    exit_code("ex1_vector_add", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex1.jsonl".into());
    let dev = open_device(0)?;
    let n: u64 = 1 << 26; // 256 MiB per array
    let kernels = VaddKernels::load(&dev.ctx)?;
    let mut scalar = VectorAddGpu::new(
        &dev.stream,
        &kernels,
        VectorAddSpec::new(n, VaddVariant::Scalar),
        1,
    )?;
    let mut vec4 = VectorAddGpu::new(
        &dev.stream,
        &kernels,
        VectorAddSpec::new(n, VaddVariant::Vec4),
        1,
    )?;
    let mut copy = DeviceCopyGpu::new(&dev.stream, DeviceCopySpec { n }, 2)?;
    let results = measure(
        &mut [
            Side {
                label: "baseline",
                workload: &mut scalar,
            },
            Side {
                label: "change",
                workload: &mut vec4,
            },
            Side {
                label: "DtoD copy",
                workload: &mut copy,
            },
        ],
        &ExperimentConfig::new(20, 10, &path).with_counters(&[
            names::DRAM_BYTES_READ,
            names::DRAM_BYTES_WRITE,
            names::GLOBAL_LD_SECTORS,
            names::GLOBAL_LD_REQUESTS,
            names::GLOBAL_ST_SECTORS,
            names::GLOBAL_ST_REQUESTS,
        ]),
    )?;
    let mut page = ExperimentPage::new(
        "ex1 vector add: bandwidth and launch overhead",
        device_line(&dev.gpu),
        "vector_add over 2^26 floats (256 MiB per array): one 4-byte load of a and b and one \
         4-byte store per thread; 12N bytes, N FLOPs",
        "Because each scalar thread moves 4 bytes per access, loading and storing through \
         float4 moves the same 12N bytes in a quarter of the load/store instructions; at 256 MiB \
         the kernel is DRAM-bound, so effective bandwidth should rise at most a few percent \
         toward the device-to-device copy roof, and end-to-end time follow the kernel time.",
        "vadd_vec4: 16-byte (float4) loads and stores, one thread per 4 elements (the only change)",
        results,
        std::path::Path::new(&path),
    );
    let copy_bw = page.results[2]
        .device_per_run()
        .map(|d| gb_per_s(page.results[2].work.bytes, d.median));
    if let Some(copy_bw) = copy_bw {
        for (i, need) in [(0usize, 0.75), (1, 0.90)] {
            let r = &page.results[i];
            if let Some(d) = r.device_per_run() {
                let bw = gb_per_s(r.work.bytes, d.median);
                page.notes.push(format!(
                    "{}: {bw:.0} GB/s = {:.1}% of the {copy_bw:.0} GB/s DtoD copy (expected ≥ {:.0}%)",
                    r.label,
                    100.0 * bw / copy_bw,
                    100.0 * need
                ));
            }
        }
    }
    let elems = n as f64;
    for (i, kernel, sectors) in [(0usize, "vector_add", 4.0), (1, "vadd_vec4", 16.0)] {
        let r = &page.results[i];
        let label = r.label.clone();
        let read = r.counter(kernel, names::DRAM_BYTES_READ).map(|b| b / elems);
        let write = r
            .counter(kernel, names::DRAM_BYTES_WRITE)
            .map(|b| b / elems);
        let per_request = |s: &str, q: &str| Some(r.counter(kernel, s)? / r.counter(kernel, q)?);
        let ld = per_request(names::GLOBAL_LD_SECTORS, names::GLOBAL_LD_REQUESTS);
        let st = per_request(names::GLOBAL_ST_SECTORS, names::GLOBAL_ST_REQUESTS);
        page.check(
            format!("{label}: DRAM bytes read per element"),
            read,
            "8 ± 2 %",
            |v| (v / 8.0 - 1.0).abs() <= 0.02,
        );
        // Lines a kernel leaves dirty in L2 are written back after it, and lines left dirty
        // before it during it: docs/counters.md ("Why DRAM writes ...").
        page.check(
            format!("{label}: DRAM bytes written per element"),
            write,
            "4 ± 10 % (L2 write-back at the kernel's edges)",
            |v| (v / 4.0 - 1.0).abs() <= 0.10,
        );
        for (what, got) in [("load", ld), ("store", st)] {
            page.check(
                format!("{label}: global {what} sectors per request"),
                got,
                format!("{sectors} (32 lanes x {sectors} bytes in 32-byte sectors)"),
                |v| (v - sectors).abs() <= 0.01 * sectors,
            );
        }
    }
    let requests = |i: usize, k: &str| page.results[i].counter(k, names::GLOBAL_LD_REQUESTS);
    let ratio = requests(1, "vadd_vec4")
        .zip(requests(0, "vector_add"))
        .map(|(c, b)| c / b);
    page.check(
        "change / baseline: global load requests",
        ratio,
        "0.25 ± 1 % (one float4 request for four float ones)",
        |v| (v - 0.25).abs() <= 0.0025,
    );
    println!("{page}");
    Ok(page.all_correct())
}
