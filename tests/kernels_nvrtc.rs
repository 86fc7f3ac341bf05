//! Every bundled kernel file compiles with NVRTC for sm_90 with `-lineinfo`, exactly as
//! `kernels::compile` does on the GPU host, and the PTX shows what the suite relies on: every
//! launched entry point, local memory in the spilling kernel and none in its twin, and wmma
//! tensor-core instructions in the BF16 GEMM. NVRTC (and the ptxas it runs for a real `sm_90`
//! target) needs no GPU, only libnvrtc.so.13: `scripts/check-kernels.sh` fetches it and runs
//! these tests.

use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use gpu_ledger::kernels;
use gpu_ledger::kernels::suite::attention::VARIANTS;
use gpu_ledger::kernels::suite::gemm::GemmKernel;
use gpu_ledger::kernels::suite::softmax;
use gpu_ledger::kernels::suite::transpose::TransposeVariant;

const ARCH: &str = "--gpu-architecture=sm_90";

fn ptx_of(module: &str) -> String {
    assert!(
        kernels::nvrtc_present(),
        "libnvrtc.so.13 not found: run scripts/check-kernels.sh (or put it on LD_LIBRARY_PATH)"
    );
    let src = kernels::source(module).unwrap_or_else(|| panic!("no kernels/{module}.cu"));
    let opts = CompileOptions {
        options: vec![ARCH.into(), "-lineinfo".into()],
        ..Default::default()
    };
    compile_ptx_with_opts(src, opts)
        .unwrap_or_else(|e| panic!("kernels/{module}.cu does not compile for sm_90: {e}"))
        .to_src()
}

/// The PTX of one entry point: from its `.entry` line to the next entry.
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name} in the PTX"));
    let rest = &ptx[start..];
    let end = rest[1..].find(".entry ").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[test]
#[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
fn every_kernel_file_compiles_for_sm90_with_lineinfo() {
    for module in kernels::names() {
        let ptx = ptx_of(module);
        assert!(ptx.contains(".target sm_90"), "{module}: {}", &ptx[..200]);
        assert!(
            ptx.contains(".loc"),
            "{module}: -lineinfo emits .loc directives"
        );
        let entries = count(&ptx, ".entry ");
        println!(
            "kernels/{module}.cu: {entries} entries, {} bytes of PTX",
            ptx.len()
        );
    }
}

#[test]
#[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
fn every_launched_entry_point_is_in_the_ptx() {
    let expect: Vec<(&str, Vec<&str>)> = vec![
        (
            "vadd",
            vec![
                "vector_add",
                "vadd_vec4",
                "vadd_scalar_grid_stride",
                "vadd_vec4_grid_stride",
            ],
        ),
        (
            "transpose",
            TransposeVariant::ALL.iter().map(|v| v.kernel()).collect(),
        ),
        (
            "reduce",
            vec![
                "reduce_tree_partials",
                "reduce_shuffle_partials",
                "reduce_second_pass",
                "scale_by_total",
                "scale_by_partials",
            ],
        ),
        ("gemm", GemmKernel::ALL.iter().map(|k| k.kernel()).collect()),
        ("softmax", {
            let mut v = softmax::COMPOSED.to_vec();
            v.push(softmax::FUSED);
            v
        }),
        ("attention", VARIANTS.iter().map(|v| v.kernel).collect()),
        ("spill", vec!["spill_dynamic_index", "spill_free"]),
        (
            "train_ops",
            gpu_ledger::kernels::TrainOp::ALL
                .iter()
                .map(|o| o.kernel())
                .collect(),
        ),
    ];
    for (module, names) in expect {
        let ptx = ptx_of(module);
        for name in names {
            // Unmangled: `extern "C"` (or the attention macro's extern "C" wrappers).
            let e = entry(&ptx, name);
            assert!(e.contains("ret;"), "{module}: {name} has a body");
        }
    }
}

#[test]
#[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
fn spill_kernel_uses_local_memory_and_its_twin_does_not() {
    let ptx = ptx_of("spill");
    let spill = entry(&ptx, "spill_dynamic_index");
    let free = entry(&ptx, "spill_free");
    let (ld, st) = (count(spill, "ld.local"), count(spill, "st.local"));
    println!(
        "spill_dynamic_index: {ld} ld.local, {st} st.local, depot: {}",
        spill
            .lines()
            .find(|l| l.contains("__local_depot"))
            .unwrap_or("-")
            .trim()
    );
    assert!(spill.contains(".local .align"), "a local depot for acc[]");
    assert!(ld > 0 && st > 0, "local loads and stores");
    assert_eq!(
        count(free, ".local"),
        0,
        "spill_free keeps acc[] in registers"
    );
    assert_eq!(count(free, "ld.local") + count(free, "st.local"), 0);
}

#[test]
#[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
fn bf16_gemm_uses_wmma_and_the_fp32_kernels_do_not() {
    let ptx = ptx_of("gemm");
    let wmma = entry(&ptx, "gemm_wmma_bf16");
    let mma = count(
        wmma,
        "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32",
    );
    let load_a = count(wmma, "wmma.load.a.sync.aligned.row.m16n16k16.bf16");
    let load_b = count(wmma, "wmma.load.b.sync.aligned.row.m16n16k16.bf16");
    let store = count(wmma, "wmma.store.d.sync.aligned.row.m16n16k16.f32");
    println!("gemm_wmma_bf16: {mma} wmma.mma, {load_a} load.a, {load_b} load.b, {store} store.d");
    // 2x2 fragments per warp, two k16 steps per 32-wide K tile, unrolled.
    assert_eq!(mma, 8);
    assert_eq!(load_a, 4);
    assert_eq!(load_b, 4);
    assert!(store >= 4, "direct and staged stores of 4 fragments");
    for k in ["gemm_naive", "gemm_tiled"] {
        assert_eq!(count(entry(&ptx, k), "wmma."), 0, "{k} is SIMT FP32");
        assert_eq!(count(entry(&ptx, k), "mma."), 0, "{k} is SIMT FP32");
    }
    // No kernel of the suite other than the spill one uses local memory.
    for module in [
        "vadd",
        "transpose",
        "reduce",
        "gemm",
        "softmax",
        "attention",
        "train_ops",
    ] {
        let ptx = if module == "gemm" {
            ptx.clone()
        } else {
            ptx_of(module)
        };
        assert_eq!(
            count(&ptx, "ld.local") + count(&ptx, "st.local"),
            0,
            "{module}"
        );
    }
}
