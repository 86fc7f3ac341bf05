//! Fused attention (`kernels/attention.cu`, example `ex6_attention`): FP32 forward attention with
//! an online softmax, one compiled variant per (head dimension, query tile, key tile).

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, load_functions, round_up, upload, GpuWorkload, Launch, Padding, Rng, SuiteError,
    SuiteResult, Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "attention";

/// Threads per block (4 warps).
pub const BLOCK: u32 = 128;

/// One compiled instantiation: head dimension `d`, `bq` query rows and `bkv` keys per tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionVariant {
    /// Head dimension.
    pub d: u32,
    /// Query rows per block.
    pub bq: u32,
    /// Keys per shared-memory tile.
    pub bkv: u32,
    /// The `extern "C"` entry point.
    pub kernel: &'static str,
}

/// Every instantiation in `kernels/attention.cu`.
pub const VARIANTS: [AttentionVariant; 6] = [
    AttentionVariant {
        d: 64,
        bq: 32,
        bkv: 32,
        kernel: "attention_d64_q32_k32",
    },
    AttentionVariant {
        d: 64,
        bq: 64,
        bkv: 32,
        kernel: "attention_d64_q64_k32",
    },
    AttentionVariant {
        d: 64,
        bq: 64,
        bkv: 64,
        kernel: "attention_d64_q64_k64",
    },
    AttentionVariant {
        d: 128,
        bq: 32,
        bkv: 32,
        kernel: "attention_d128_q32_k32",
    },
    AttentionVariant {
        d: 128,
        bq: 64,
        bkv: 32,
        kernel: "attention_d128_q64_k32",
    },
    AttentionVariant {
        d: 128,
        bq: 64,
        bkv: 64,
        kernel: "attention_d128_q64_k64",
    },
];

impl AttentionVariant {
    /// The variant with these parameters, when compiled.
    pub fn find(d: u32, bq: u32, bkv: u32) -> Option<Self> {
        VARIANTS
            .iter()
            .copied()
            .find(|v| v.d == d && v.bq == bq && v.bkv == bkv)
    }

    /// The variants of head dimension `d`.
    pub fn for_head_dim(d: u32) -> Vec<Self> {
        VARIANTS.iter().copied().filter(|v| v.d == d).collect()
    }

    /// Dynamic shared memory per block: the Q tile (`bq·d`), the K tile padded to `d + 1`
    /// floats per row and the V tile (`bkv·d`), 4 bytes each.
    pub fn shared_bytes(&self) -> u32 {
        4 * (self.bq * self.d + self.bkv * (self.d + 1) + self.bkv * self.d)
    }

    /// True when the variant needs more than the default 48 KiB of dynamic shared memory (the
    /// host opts in at load time).
    pub fn needs_opt_in(&self) -> bool {
        self.shared_bytes() > super::softmax::DEFAULT_DYNAMIC_SHARED_LIMIT
    }
}

/// Attention over `bh` (batch × heads) independent heads of `seq` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionSpec {
    /// Batch × heads.
    pub bh: u32,
    /// Sequence length (queries = keys).
    pub seq: u32,
    /// Which instantiation (sets the head dimension).
    pub variant: AttentionVariant,
}

impl AttentionSpec {
    /// Attention of `bh` heads of `seq` tokens with `variant`.
    pub fn new(bh: u32, seq: u32, variant: AttentionVariant) -> Self {
        AttentionSpec { bh, seq, variant }
    }

    /// Elements of each of Q, K, V and O.
    pub fn elements(&self) -> u64 {
        u64::from(self.bh) * u64::from(self.seq) * u64::from(self.variant.d)
    }

    /// Softmax scale `1/√d`.
    pub fn scale(&self) -> f32 {
        1.0 / (self.variant.d as f32).sqrt()
    }
}

impl Workload for AttentionSpec {
    fn name(&self) -> String {
        format!("{} bh={} seq={}", self.variant.kernel, self.bh, self.seq)
    }

    fn launches(&self) -> Vec<Launch> {
        let (bh, s, d) = (
            u64::from(self.bh),
            u64::from(self.seq),
            u64::from(self.variant.d),
        );
        vec![Launch {
            kernel: self.variant.kernel,
            grid: [self.seq.div_ceil(self.variant.bq), self.bh, 1],
            block: [BLOCK, 1, 1],
            dynamic_shared_bytes: self.variant.shared_bytes(),
            work: Work {
                bytes: 16 * bh * s * d,
                flops: 4 * bh * s * s * d,
            },
        }]
    }

    fn padding(&self) -> Option<Padding> {
        let s = u64::from(self.seq);
        Some(Padding {
            useful: vec![s, s],
            padded: vec![
                round_up(s, u64::from(self.variant.bq)),
                round_up(s, u64::from(self.variant.bkv)),
            ],
        })
    }

    fn tolerance(&self) -> f64 {
        1e-5
    }
}

/// CPU reference: `softmax(Q Kᵀ · scale) V` per head in float64; all tensors `[bh][seq][d]`.
pub fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bh: usize,
    seq: usize,
    d: usize,
    scale: f64,
) -> Vec<f64> {
    let rows: Vec<(usize, usize)> = (0..bh)
        .flat_map(|h| (0..seq).map(move |i| (h, i)))
        .collect();
    reference_rows(q, k, v, seq, d, scale, &rows)
}

/// CPU reference of selected output rows `(head, query)`, in float64, concatenated in order.
pub fn reference_rows(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq: usize,
    d: usize,
    scale: f64,
    rows: &[(usize, usize)],
) -> Vec<f64> {
    let mut out = vec![0.0f64; rows.len() * d];
    let mut scores = vec![0.0f64; seq];
    for (&(h, i), o) in rows.iter().zip(out.chunks_exact_mut(d.max(1))) {
        let base = h * seq * d;
        let qi = &q[base + i * d..base + (i + 1) * d];
        let mut m = f64::NEG_INFINITY;
        for (j, s) in scores.iter_mut().enumerate() {
            let kj = &k[base + j * d..base + (j + 1) * d];
            let dot: f64 = qi
                .iter()
                .zip(kj)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            *s = dot * scale;
            m = m.max(*s);
        }
        let mut sum = 0.0;
        for s in scores.iter_mut() {
            *s = (*s - m).exp();
            sum += *s;
        }
        for (j, &p) in scores.iter().enumerate() {
            let vj = &v[base + j * d..base + (j + 1) * d];
            for (x, &y) in o.iter_mut().zip(vj) {
                *x += p * f64::from(y);
            }
        }
        for x in o.iter_mut() {
            *x /= sum;
        }
    }
    out
}

/// `bh · seq² · d` above which verification checks [`SAMPLED_ROWS`] random output rows instead
/// of all of them.
pub const FULL_CHECK_LIMIT: u64 = 1 << 28;

/// Output rows compared when the shape is too large for a full CPU reference.
pub const SAMPLED_ROWS: usize = 256;

/// Every attention variant, compiled, with the shared-memory opt-in each needs.
#[derive(Debug, Clone)]
pub struct AttentionKernels {
    functions: [CudaFunction; VARIANTS.len()],
}

impl AttentionKernels {
    /// Compiles `kernels/attention.cu` (every variant; a few seconds of NVRTC) and opts each
    /// variant in to its dynamic shared memory.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], a missing function, or the attribute call's error.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let functions = load_functions(ctx, MODULE, VARIANTS.map(|v| v.kernel))?;
        for (f, v) in functions.iter().zip(VARIANTS.iter()) {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                v.shared_bytes() as i32,
            )?;
        }
        Ok(AttentionKernels { functions })
    }

    /// The compiled function of `variant`.
    pub fn function(&self, variant: &AttentionVariant) -> Option<&CudaFunction> {
        VARIANTS
            .iter()
            .position(|v| v == variant)
            .map(|i| &self.functions[i])
    }
}

impl AttentionKernels {
    /// Enqueues `o = attention(q, k, v)` with `spec`'s variant and shape.
    ///
    /// # Errors
    /// A variant not compiled, buffers shorter than bh · seq · d, or a launch failure.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        spec: &AttentionSpec,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        o: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        let f = self
            .function(&spec.variant)
            .ok_or_else(|| SuiteError::Shape(format!("{} not compiled", spec.variant.kernel)))?;
        let n = spec.elements();
        if [q.len(), k.len(), v.len(), o.len()]
            .iter()
            .any(|&l| (l as u64) < n)
        {
            return Err(SuiteError::Shape(format!(
                "attention over {n} elements, but a buffer holds fewer"
            )));
        }
        let seq = spec.seq;
        let scale = spec.scale();
        let mut l = stream.launch_builder(f);
        l.arg(q).arg(k).arg(v).arg(o).arg(&seq).arg(&scale);
        // SAFETY: matches `(const float*, const float*, const float*, float*, unsigned, float)`;
        // each buffer holds bh · seq · d floats for the grid's bh heads; the dynamic shared
        // memory is the variant's, which it was opted in to at load time.
        unsafe { l.launch(spec.launches()[0].config()) }?;
        Ok(())
    }
}

/// Attention with its buffers: Q, K, V uniform in [-1, 1) from the seed.
pub struct AttentionGpu {
    stream: Arc<CudaStream>,
    kernels: AttentionKernels,
    spec: AttentionSpec,
    q_host: Vec<f32>,
    k_host: Vec<f32>,
    v_host: Vec<f32>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    o: CudaSlice<f32>,
}

impl AttentionGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &AttentionKernels,
        spec: AttentionSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        let n = spec.elements() as usize;
        if n == 0 {
            return Err(SuiteError::Shape("attention of an empty shape".into()));
        }
        let mut rng = Rng::new(seed);
        let q_host = rng.vec(n, -1.0, 1.0);
        let k_host = rng.vec(n, -1.0, 1.0);
        let v_host = rng.vec(n, -1.0, 1.0);
        Ok(AttentionGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            q: upload(stream, &q_host)?,
            k: upload(stream, &k_host)?,
            v: upload(stream, &v_host)?,
            o: stream.alloc_zeros::<f32>(n)?,
            spec,
            q_host,
            k_host,
            v_host,
        })
    }

    /// Switches to another variant of the same head dimension (the buffers are kept).
    ///
    /// # Errors
    /// A variant of another head dimension.
    pub fn set_variant(&mut self, variant: AttentionVariant) -> SuiteResult<()> {
        if variant.d != self.spec.variant.d {
            return Err(SuiteError::Shape(format!(
                "buffers are for head dimension {}, not {}",
                self.spec.variant.d, variant.d
            )));
        }
        self.spec.variant = variant;
        Ok(())
    }
}

impl GpuWorkload for AttentionGpu {
    spec_stream_and_poison!(o);

    fn run(&mut self) -> SuiteResult<()> {
        self.kernels.launch(
            &self.stream,
            &self.spec,
            &self.q,
            &self.k,
            &self.v,
            &mut self.o,
        )
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = download(&self.stream, &self.o, self.o.len())?;
        let s = &self.spec;
        let (bh, seq, d) = (s.bh as usize, s.seq as usize, s.variant.d as usize);
        let scale = f64::from(s.scale());
        if (bh as u64) * (seq as u64) * (seq as u64) * (d as u64) <= FULL_CHECK_LIMIT {
            return Ok(Verification::compare(
                s.name(),
                &out,
                &reference(&self.q_host, &self.k_host, &self.v_host, bh, seq, d, scale),
                s.tolerance(),
            ));
        }
        let mut rng = Rng::new(0xA77E_u64 ^ u64::from(s.seq));
        let rows: Vec<(usize, usize)> = (0..SAMPLED_ROWS)
            .map(|_| {
                (
                    rng.below(bh as u64) as usize,
                    rng.below(seq as u64) as usize,
                )
            })
            .collect();
        let got: Vec<f32> = rows
            .iter()
            .flat_map(|&(h, i)| {
                let start = (h * seq + i) * d;
                out[start..start + d].iter().copied()
            })
            .collect();
        Ok(Verification::compare(
            format!("{} (sampled rows)", s.name()),
            &got,
            &reference_rows(
                &self.q_host,
                &self.k_host,
                &self.v_host,
                seq,
                d,
                scale,
                &rows,
            ),
            s.tolerance(),
        ))
    }
}
