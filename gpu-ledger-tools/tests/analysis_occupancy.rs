//! Occupancy, waves and padding on sm_90, checked against CUDA's occupancy calculator.
//!
//! Two tables. `HAND` has cases derived by hand from the formulas of `cuda_occupancy.h`
//! (CUDA 13.0, `cudaOccMaxActiveBlocksPerMultiprocessor`) with H200 properties: 2048 threads
//! (64 warps) and 32 blocks per SM, 65536 registers per SM and per block, registers allocated per
//! warp in units of 256 over 4 sub-partitions, 233472 B (228 KiB) shared per SM, 49152 B per block
//! or 232448 B opted in, 1024 B reserved per block, 128 B shared allocation unit. `GENERATED` has
//! 250 random cases run through that header itself, compiled with g++ (the harness sets the
//! properties above, `shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN`,
//! `maxDynamicSharedSizeBytes = dynamic`, one block barrier, partitioned caching off).
//! Every value of both tables was also confirmed by that harness.

use gpu_ledger_tools::analysis::occupancy::{
    analyze_kernel, occupancy, padding_efficiency, wave_efficiency, waves, DeviceLimits,
    LaunchResources, Limiter,
};

mod analysis_common;

struct Case {
    block: u32,
    regs: u32,
    static_smem: u32,
    dynamic_smem: u32,
    carveout: Option<u32>,
    blocks: u32,
    limiters: &'static [Limiter],
}

use Limiter::{Blocks, Registers, SharedMemory, Warps};

#[rustfmt::skip]
const HAND: &[Case] = &[
    // 256 thr = 8 warps; warps: 64/8 = 8. regs: 32*32 = 1024/warp (multiple of 256), 16384/1024 =
    // 16 warps per sub-partition, 64 per SM, 64/8 = 8. smem: 0+1024 -> 1024, 233472/1024 = 228.
    // min(8, 8, 228, 32) = 8: warps and registers; 64/64 warps = 100 %.
    Case { block: 256, regs: 32, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 8, limiters: &[Warps, Registers] },
    // A register-heavy kernel: 128 thr (4 warps), 255 regs: 255*32 = 8160 -> 8192/warp;
    // 16384/8192 = 2 warps per sub-partition, 8 per SM, 8/4 = 2 blocks = 8 warps/SM (12.5 %).
    Case { block: 128, regs: 255, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 2, limiters: &[Registers] },
    // A warp-specialized GEMM: 384 thr (12 warps), 168 regs, 80 KiB dynamic.
    // regs: 168*32 = 5376/warp; 16384/5376 = 3 per sub-partition, 12 per SM, 12/12 = 1.
    // smem: 81920+1024 = 82944 (= 648*128), 233472/82944 = 2. warps: 64/12 = 5. -> 1 (registers).
    Case { block: 384, regs: 168, static_smem: 0, dynamic_smem: 81920, carveout: None, blocks: 1, limiters: &[Registers] },
    // 1024 thr (32 warps), 64 regs: 2048/warp, 8 per sub-partition, 32 per SM -> 1; hardware check
    // 2048*32 = 65536 <= 65536 passes. warps: 64/32 = 2.
    Case { block: 1024, regs: 64, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 1, limiters: &[Registers] },
    // 65 regs: 2080 -> 2304/warp; 2304*32 = 73728 > 65536 registers per block: cannot launch.
    Case { block: 1024, regs: 65, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 0, limiters: &[Registers] },
    // 48 KiB static: 49152+1024 = 50176 (= 392*128) > 48 KiB so the opt-in cap applies;
    // 233472/50176 = 4. warps 64/4 = 16, regs 16.
    Case { block: 128, regs: 32, static_smem: 49152, dynamic_smem: 0, carveout: None, blocks: 4, limiters: &[SharedMemory] },
    // 32 thr (1 warp), 16 regs: 512/warp -> 32 per sub-partition, 128 per SM -> 128; warps 64;
    // block slots 32 -> 32 (blocks); 32 warps = 50 %.
    Case { block: 32, regs: 16, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 32, limiters: &[Blocks] },
    // 100 thr -> 4 warps; 40 regs: 1280/warp (= 5*256); 16384/1280 = 12 per sub-partition,
    // 48 per SM, 48/4 = 12; warps 64/4 = 16 -> 12 (registers), 48 warps = 75 %.
    Case { block: 100, regs: 40, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 12, limiters: &[Registers] },
    // Granularity and reserve: 10076+1024 = 11100 -> 11136 (87*128); 233472/11136 = 20.97 -> 20.
    // Without rounding it would be 21, without the reserve 23. warps 32, regs 32.
    Case { block: 64, regs: 32, static_smem: 0, dynamic_smem: 10076, carveout: None, blocks: 20, limiters: &[SharedMemory] },
    // The opt-in maximum: 232448+1024 = 233472 = the per-block cap (227 KiB + 1 KiB) -> 1 block.
    Case { block: 64, regs: 32, static_smem: 0, dynamic_smem: 232448, carveout: None, blocks: 1, limiters: &[SharedMemory] },
    // One byte more: 233473 -> 233600 > 233472: cannot launch.
    Case { block: 64, regs: 32, static_smem: 0, dynamic_smem: 232449, carveout: None, blocks: 0, limiters: &[SharedMemory] },
    // 1025 threads > 1024 per block: the warp limit is 0. (regs: 33 warps, 1024/warp, 64/33 = 1.)
    Case { block: 1025, regs: 32, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 0, limiters: &[Warps] },
    // No registers: no register limit. warps 64/8 = 8.
    Case { block: 256, regs: 0, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 8, limiters: &[Warps] },
    // Carveout 0 %: preference 0 < 1024 needed, so the SM gets the smallest carveout holding a
    // block, 8 KiB: 8192/1024 = 8. warps 16, regs 16.
    Case { block: 128, regs: 32, static_smem: 0, dynamic_smem: 0, carveout: Some(0), blocks: 8, limiters: &[SharedMemory] },
    // Carveout 50 %: 50*233472/100 = 116736 -> aligned up to 132 KiB = 135168.
    // 20000+1024 = 21024 -> 21120; 135168/21120 = 6.
    Case { block: 128, regs: 32, static_smem: 0, dynamic_smem: 20000, carveout: Some(50), blocks: 6, limiters: &[SharedMemory] },
    // Same with the default carveout (228 KiB): 233472/21120 = 11.
    Case { block: 128, regs: 32, static_smem: 0, dynamic_smem: 20000, carveout: None, blocks: 11, limiters: &[SharedMemory] },
    // 256 regs/thread is allowed by cuda_occupancy.h on cc >= 7: 8192/warp -> 2 blocks of 4 warps.
    Case { block: 128, regs: 256, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 2, limiters: &[Registers] },
    // 257 exceeds the per-thread maximum: cannot launch.
    Case { block: 32, regs: 257, static_smem: 0, dynamic_smem: 0, carveout: None, blocks: 0, limiters: &[Registers] },
];

fn launch(block: u32, regs: u32, st: u32, dynamic: u32, carveout: Option<u32>) -> LaunchResources {
    LaunchResources {
        carveout_percent: carveout,
        ..LaunchResources::new(block, regs, st, dynamic)
    }
}

#[test]
fn hand_derived_table() {
    let d = DeviceLimits::sm90();
    for c in HAND {
        let o = occupancy(
            &d,
            &launch(c.block, c.regs, c.static_smem, c.dynamic_smem, c.carveout),
        )
        .unwrap();
        let what = format!(
            "block {} regs {} smem {}+{} carveout {:?}",
            c.block, c.regs, c.static_smem, c.dynamic_smem, c.carveout
        );
        assert_eq!(o.active_blocks_per_sm, c.blocks, "{what}");
        assert_eq!(o.limiters, c.limiters, "{what}");
        let warps = c.block.div_ceil(32);
        assert_eq!(o.active_warps_per_sm, c.blocks * warps, "{what}");
        assert!(
            (o.occupancy - f64::from(c.blocks * warps) / 64.0).abs() < 1e-12,
            "{what}"
        );
    }
}

#[test]
fn register_heavy_kernel_is_eight_warps_and_warp_specialized_gemm_one_cta() {
    let d = DeviceLimits::sm90();
    let o = occupancy(&d, &LaunchResources::new(128, 255, 0, 0)).unwrap();
    assert_eq!(
        (o.active_warps_per_sm, o.limiter_names().as_str()),
        (8, "registers")
    );
    assert_eq!(o.allocated_registers_per_block, 4 * 8192);
    let o = occupancy(&d, &LaunchResources::new(384, 168, 0, 81920)).unwrap();
    assert_eq!(o.active_blocks_per_sm, 1);
    assert!((o.occupancy - 0.1875).abs() < 1e-12);
    assert_eq!(o.allocated_shared_per_block, 82944);
    assert_eq!(o.block_limit_shared, Some(2));
    assert_eq!(o.block_limit_warps, 5);
}

/// `block regs static dynamic carveout(-1 = default) -> blocks limitingFactors` as printed by
/// the harness around `cuda_occupancy.h`. Factor bits: 1 warps, 2 registers, 4 shared memory,
/// 8 blocks, 16 barriers.
const GENERATED: &str = "
313 168 0 126560 25 1 6
768 29 0 0 75 2 3
1033 133 0 232448 25 0 3
1020 157 0 0 25 0 2
22 64 8192 52783 -1 3 4
32 72 8192 0 75 21 4
991 105 20746 232448 -1 0 6
128 24 4096 2263 -1 16 1
256 48 0 15436 50 5 2
192 168 40343 0 0 1 4
64 232 32768 0 75 4 2
46 107 0 0 -1 8 2
768 69 16384 131072 0 1 6
32 16 16384 200000 75 1 4
748 64 32768 158852 75 1 6
64 128 20752 131072 75 1 4
671 58 0 98304 -1 1 2
262 18 0 0 0 7 1
825 40 0 0 -1 1 2
96 40 0 232448 -1 1 4
478 168 0 0 0 0 2
740 77 2506 32895 0 1 6
17 85 32768 3553 50 3 4
192 5 0 45540 100 5 4
1086 24 1024 145248 25 0 1
32 56 1024 0 100 32 8
256 128 0 0 -1 2 2
1071 32 0 0 -1 0 1
256 140 49152 0 50 1 2
342 168 0 5100 25 1 2
1029 255 49152 0 100 0 3
258 93 0 0 -1 2 2
640 48 32768 0 75 2 2
64 149 0 0 0 6 2
128 88 0 0 -1 5 2
205 143 14533 209385 100 1 6
781 96 4096 0 100 0 2
256 226 0 0 -1 1 2
768 16 0 232448 75 1 4
256 24 0 32768 0 1 4
97 90 49152 54447 -1 2 4
319 96 0 200000 75 1 4
1011 48 8668 149223 -1 1 6
256 191 0 0 -1 1 2
512 40 0 105274 25 1 4
530 56 0 0 -1 2 2
384 24 4531 0 0 1 4
474 128 17975 5469 -1 1 2
123 57 16384 52173 0 1 4
1002 49 0 112449 -1 1 2
384 32 0 0 -1 5 3
1013 17 0 16184 0 1 4
883 55 4096 0 0 1 6
1015 48 7617 129889 50 1 6
308 100 0 13415 50 1 2
936 92 49152 19729 0 0 2
894 181 0 42950 -1 0 2
32 48 0 101170 75 1 4
512 67 0 32768 25 1 6
1070 32 39004 6525 50 0 1
512 102 36746 0 0 1 6
1036 16 4096 131072 100 0 1
64 232 0 52933 0 1 4
1009 40 0 0 -1 1 2
678 255 21985 0 25 0 2
768 31 0 0 75 2 3
442 91 0 65536 50 1 2
192 213 49152 0 -1 1 2
256 194 0 164270 -1 1 6
163 170 5378 0 50 1 2
96 168 49152 30490 50 1 4
192 219 1024 0 75 1 2
767 80 0 16384 -1 1 2
240 47 0 232448 -1 1 4
640 40 0 121 -1 2 2
96 152 0 0 50 4 2
1031 200 28729 35219 75 0 3
1024 16 16384 0 -1 2 1
608 45 43 8192 100 2 2
1016 48 0 10886 100 1 2
192 37 4708 73749 -1 2 4
32 102 0 121411 -1 1 4
1024 96 0 211747 -1 0 2
128 234 0 41259 25 1 4
720 24 35171 0 25 1 4
941 230 0 16384 75 0 2
300 67 8192 154901 0 1 4
781 173 0 4680 100 0 2
192 168 5601 0 50 2 2
192 64 0 0 -1 5 2
795 16 44572 0 100 2 1
512 73 31534 32768 50 1 2
679 72 32768 0 50 1 2
1092 200 0 167707 -1 0 3
263 168 0 188354 -1 1 6
128 90 0 113422 -1 2 4
338 64 1024 78067 0 1 4
256 232 0 0 50 1 2
1020 48 0 21226 75 1 2
454 168 0 8192 -1 0 2
176 96 32768 1438 50 3 6
335 56 0 15985 -1 3 2
128 161 49152 0 25 1 4
447 56 0 0 -1 2 2
256 63 0 57091 -1 4 6
1095 56 0 35754 75 0 1
640 32 12318 40247 -1 3 3
194 200 0 16384 -1 1 2
60 116 0 32768 -1 6 4
1014 255 4096 84431 -1 0 2
858 135 49152 126033 0 0 2
1024 48 13363 103997 100 1 6
1045 63 0 223255 100 0 3
107 179 16384 89334 50 1 4
512 48 0 7187 100 2 2
1041 96 11532 131072 75 0 3
572 88 12565 8192 25 1 2
64 248 33053 0 -1 4 2
256 188 43967 232448 0 0 4
192 80 0 0 -1 4 2
192 125 0 98304 75 2 6
444 72 472 0 -1 2 2
384 167 0 212460 25 1 6
293 40 0 38692 100 4 2
1009 64 0 0 -1 1 2
256 173 0 8192 25 1 2
883 67 4096 192283 -1 1 6
332 133 0 0 -1 1 2
768 80 0 2501 0 1 2
128 40 32768 0 100 6 4
192 61 0 7958 -1 5 2
1083 128 0 14348 75 0 3
58 32 0 0 0 8 4
128 232 0 0 50 2 2
1009 168 0 0 75 0 2
528 6 0 0 25 3 1
768 7 0 131072 0 1 4
1004 32 4096 7798 -1 2 3
512 72 0 0 100 1 2
96 72 0 0 0 8 4
528 128 0 128291 75 0 2
1055 128 0 54107 50 0 3
1021 16 0 0 25 2 1
384 48 0 144106 -1 1 4
1094 27 21499 16384 -1 0 1
500 24 0 0 100 4 1
258 32 37333 0 100 6 4
1041 89 0 0 0 0 3
592 217 0 8192 75 0 2
384 5 0 34414 75 5 5
64 56 0 0 25 18 2
94 232 1024 0 -1 2 2
1022 16 0 131072 75 1 4
38 60 32768 0 25 1 4
637 16 0 113662 100 2 4
640 24 0 131072 100 1 4
128 137 0 65536 50 2 4
128 235 26296 16384 75 2 2
64 135 0 0 75 6 2
217 62 0 55196 25 1 4
686 46 1024 0 75 1 2
1016 15 31366 53814 0 1 4
96 56 0 0 0 8 4
560 74 16384 0 100 1 2
384 40 0 58136 -1 3 4
128 198 16384 0 0 1 4
768 72 208 230814 -1 1 6
1087 200 0 18232 75 0 3
330 128 0 167286 50 1 6
640 48 8192 0 -1 2 2
640 56 0 0 0 1 2
352 33 16384 32768 -1 4 6
64 24 27252 200000 0 1 4
1022 32 40820 98304 -1 1 4
96 96 0 20201 -1 6 2
384 168 43265 0 75 1 2
64 173 4096 131072 50 1 4
768 82 0 0 -1 0 2
384 56 32768 38009 50 1 4
192 48 0 0 0 6 2
1053 168 0 32768 -1 0 3
1024 21 44614 0 -1 2 3
100 189 0 10467 -1 2 2
384 103 13793 191309 0 1 6
1008 48 0 98304 100 1 2
384 24 4096 0 100 5 1
128 168 0 0 -1 3 2
32 238 24326 42673 100 3 4
1093 48 0 83008 50 0 1
512 24 0 0 25 4 1
903 48 0 0 25 1 2
1061 128 29574 69396 -1 0 3
484 110 6324 98304 -1 1 2
815 24 36715 174525 -1 1 4
1024 40 0 0 0 1 2
1008 32 0 157725 0 1 4
307 82 23379 0 -1 2 2
1037 48 0 0 50 0 1
640 96 1024 0 100 1 2
1010 128 4096 199466 0 0 2
1002 24 0 1206 -1 2 3
256 203 0 0 -1 1 2
700 255 6897 201124 25 0 2
1015 62 0 0 50 1 2
20 213 4096 0 0 1 4
635 40 1268 0 -1 2 2
225 207 0 232448 -1 1 6
1004 82 0 0 50 0 2
208 24 0 0 -1 9 1
192 24 0 0 -1 10 1
1040 236 0 68542 -1 0 3
634 88 28907 0 75 1 2
256 128 0 0 -1 2 2
1008 72 0 224898 75 0 2
1012 32 0 0 0 2 3
296 168 0 0 50 1 2
128 135 0 0 -1 3 2
161 200 28292 0 25 1 2
1024 184 0 29379 0 0 2
3 64 1024 0 100 32 10
288 72 0 0 100 3 2
1020 64 26008 30429 -1 1 2
192 41 0 101708 25 1 4
640 80 0 0 25 1 2
256 139 32768 8192 75 1 2
768 122 0 28073 50 0 2
693 32 0 98304 0 1 4
256 203 13283 33544 75 1 2
17 16 0 0 75 32 8
1008 79 0 232448 0 0 2
768 98 0 137206 -1 0 2
791 24 16655 131072 0 1 4
738 48 0 184665 -1 1 6
32 24 0 0 75 32 8
128 168 25030 0 0 1 4
1086 56 0 0 -1 0 1
96 232 16384 0 -1 2 2
349 106 8192 0 50 1 2
128 255 1024 98304 50 1 4
1019 48 0 0 100 1 2
32 248 11428 0 -1 8 2
128 128 0 32768 -1 4 2
63 142 31435 54063 -1 2 4
128 168 0 0 100 3 2
27 40 1024 190274 75 1 4
1005 49 0 0 0 1 2
96 24 32768 232538 75 0 4
1045 65 0 8192 0 0 3
133 225 0 91475 50 1 6
32 53 32218 32768 -1 3 4
";

#[test]
fn generated_table_matches_cuda_occupancy_h() {
    let d = DeviceLimits::sm90();
    let mut checked = 0;
    for line in GENERATED.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<i64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        let [block, regs, st, dynamic, carve, blocks, factors] = f[..] else {
            panic!("bad line {line:?}");
        };
        let carveout = (carve >= 0).then_some(carve as u32);
        let o = occupancy(
            &d,
            &launch(
                block as u32,
                regs as u32,
                st as u32,
                dynamic as u32,
                carveout,
            ),
        )
        .unwrap();
        assert_eq!(i64::from(o.active_blocks_per_sm), blocks, "{line}");
        let bits: i64 = o
            .limiters
            .iter()
            .map(|l| match l {
                Limiter::Warps => 1,
                Limiter::Registers => 2,
                Limiter::SharedMemory => 4,
                Limiter::Blocks => 8,
                Limiter::Barriers => 16,
            })
            .sum();
        assert_eq!(bits, factors, "{line}");
        checked += 1;
    }
    assert_eq!(checked, 250);
}

#[test]
fn waves_on_h200() {
    // 4096x4096 GEMM with 128x128 tiles: G = 32*32 = 1024 CTAs, 1 CTA/SM on 132 SMs:
    // ceil(1024/132) = 8 waves, efficiency 1024/1056.
    let w = waves(1024, 1, 132).unwrap();
    assert_eq!((w.waves, w.tail_blocks), (8, 1024 - 7 * 132));
    assert!((w.efficiency - 1024.0 / 1056.0).abs() < 1e-12);
    // One block more than a full wave: efficiency just above 1/2.
    assert!((wave_efficiency(133, 1, 132).unwrap() - 133.0 / 264.0).abs() < 1e-12);
    assert_eq!(wave_efficiency(264, 1, 132), Some(1.0));
    // Padding: M = N = K = 1000 computed as 1024^3.
    let p = padding_efficiency(&[1000, 1000, 1000], &[1024, 1024, 1024]).unwrap();
    assert!((p - (1000.0f64 / 1024.0).powi(3)).abs() < 1e-12);
}

#[test]
fn kernel_group_analysis_combines_occupancy_and_waves() {
    let d = DeviceLimits::sm90();
    // 1057 blocks of 256 threads, 32 registers: 8 blocks/SM, 1056 per wave -> 2 waves.
    let k = analysis_common::kernel("k", 1057, 256, 32, 1, 1000);
    let a = analyze_kernel(&k, &d).unwrap();
    assert_eq!(a.occupancy.active_blocks_per_sm, 8);
    let w = a.waves.unwrap();
    assert_eq!((w.blocks_per_wave, w.waves, w.tail_blocks), (1056, 2, 1));
    // A block that cannot run has no waves.
    let k = analysis_common::kernel("k", 10, 1024, 65, 1, 1000);
    assert_eq!(analyze_kernel(&k, &d).unwrap().waves, None);
    // A 3-D block counts all its threads.
    let mut k = analysis_common::kernel("k", 1, 16, 32, 1, 1000);
    k.shape.block = [16, 16, 2];
    assert_eq!(
        analyze_kernel(&k, &d).unwrap().occupancy.warps_per_block,
        16
    );
}
