//! Kernel families: long templated kernel names normalised into families, ranked by contribution,
//! with their Amdahl ceilings.
//!
//! # From a kernel name to a family
//! 1. A user rule ([`GroupingRule`]) that matches wins: the first matching rule names the family.
//! 2. Otherwise the name is demangled (Itanium C++ ABI, names starting with `_Z`), without its
//!    parameter list and return type, and [`strip_name`] removes template arguments, any
//!    remaining argument list and return type, and namespaces:
//!    `void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ..>(..)`
//!    becomes `vectorized_elementwise_kernel`. Names that are not mangled (`extern "C"` kernels
//!    such as `ampere_sgemm_128x64_nn`) go through the same stripping, which leaves them as is.
//!
//! Generic wrapper kernels whose real identity is a template argument (CUTLASS's
//! `cutlass::Kernel2<cutlass_80_tensorop_..>`) all fall into one family (`Kernel2`) by these
//! rules; their shapes stay apart inside it, and a substring rule can split them.
//!
//! # Shapes
//! Inside a family, launches with a different device, grid, block, cluster, registers per thread,
//! shared memory or local memory are kept apart as [`ShapeSummary`] rows: a GEMM family launched
//! with four shapes is four kernels to study, each with its own time.
//!
//! # Shares and the Amdahl ceiling
//! A family's share `p` is its summed kernel time over the summed device busy time (the union of
//! kernel, copy and memset intervals, per device, added over devices and iterations). With
//! overlapping streams the shares of all families can add up to more than 1; `p` is clamped to
//! `[0, 1]` for the Amdahl figures. The ceiling `1/(1-p)` and the gain of a 2× speed-up
//! `1/((1-p)+p/2)` are bounds on device time; they bound end-to-end time too when the device is
//! the bottleneck (little idle time), and `share_of_wall_time` shows how far that holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;

use cpp_demangle::{DemangleOptions, Symbol};
use serde::{Deserialize, Serialize};

use gpu_ledger_format::schema::{IterationRow, KernelGroup, LaunchShape};

use super::names::{NameFold, OTHER_NAMES};

/// Demangles an Itanium C++ ABI name (starting with `_Z`) in full, with its parameter list.
/// `None` when the name is not mangled or does not parse.
pub fn demangle(name: &str) -> Option<String> {
    demangle_with(name, &DemangleOptions::new())
}

/// Longest mangled name demangled: real kernel names stay far below it, and a hostile one of
/// megabytes is shown as it is rather than parsed.
const MAX_DEMANGLED_BYTES: usize = 1 << 16;

fn demangle_with(name: &str, options: &DemangleOptions) -> Option<String> {
    if !name.starts_with("_Z") || name.len() > MAX_DEMANGLED_BYTES {
        return None;
    }
    Symbol::new(name.as_bytes())
        .ok()?
        .demangle_with_options(options)
        .ok()
}

/// The name to show for a kernel: demangled when it is mangled, otherwise as CUPTI gave it.
pub fn display_name(name: &str) -> String {
    demangle(name).unwrap_or_else(|| name.to_string())
}

/// The demangled name without return type and parameter list, template arguments kept:
/// `cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4>`. `None` when the name
/// is not mangled or does not parse.
pub fn qualified_name(name: &str) -> Option<String> {
    demangle_with(name, &DemangleOptions::new().no_params().no_return_type())
}

/// The family of a kernel name without user rules: [`qualified_name`] (or the name itself when it
/// is not mangled), then [`strip_name`].
pub fn base_name(name: &str) -> String {
    match qualified_name(name) {
        Some(d) => strip_name(&d),
        None => strip_name(name),
    }
}

/// Strips template arguments, a trailing argument list with its qualifiers, a leading return type
/// and namespaces from a (demangled) C++ name: `void ns::f<int>(float*) const` becomes `f`. A
/// name whose last component is a lambda or unnamed type (`{lambda(int)#1}`) keeps its enclosing
/// component (`f::{lambda(int)#1}`). Returns the trimmed input when nothing would be left.
pub fn strip_name(name: &str) -> String {
    let no_templates = remove_template_args(name.trim());
    let no_args = remove_trailing_args(&no_templates);
    let no_return = after_last_top_level(&no_args, " ");
    let parts = split_top_level(no_return, "::");
    let parts: Vec<&str> = parts.into_iter().filter(|p| !p.trim().is_empty()).collect();
    let out = match parts.as_slice() {
        [] => String::new(),
        [.., prev, last] if last.trim_start().starts_with('{') => {
            format!("{}::{}", remove_trailing_args(prev.trim()), last.trim())
        }
        [.., last] => last.trim().to_string(),
    };
    if out.is_empty() {
        name.trim().to_string()
    } else {
        out
    }
}

/// Removes every `<...>` group (nested), keeping `operator<`, `operator<<`, `operator->` and
/// the like, and ignoring the `>` of `->` inside template arguments.
fn remove_template_args(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if depth == 0 && ends_with_operator_keyword(&out) {
            // Copy an operator's symbol characters verbatim.
            while i < chars.len() && "<>=-!+*/%&|^~[]()".contains(chars[i]) {
                out.push(chars[i]);
                i += 1;
                if out.ends_with("()") || out.ends_with("[]") {
                    break;
                }
            }
            continue;
        }
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            '-' if depth > 0 && chars.get(i + 1) == Some(&'>') => i += 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether `s` ends with the keyword `operator` (not with an identifier such as `my_operator`).
fn ends_with_operator_keyword(s: &str) -> bool {
    s.strip_suffix("operator").is_some_and(|head| {
        !head
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Removes a trailing balanced `( .. )` group, after trailing qualifiers (`const`, `volatile`,
/// `&`, `&&`, `[clone ..]`).
fn remove_trailing_args(s: &str) -> String {
    let mut t = s.trim_end();
    loop {
        let before = t;
        for q in [" const", " volatile", "&&", "&"] {
            if let Some(rest) = t.strip_suffix(q) {
                t = rest.trim_end();
            }
        }
        if t.ends_with(']') {
            if let Some(open) = t.rfind(" [") {
                t = t[..open].trim_end();
            }
        }
        if t == before {
            break;
        }
    }
    if !t.ends_with(')') || t.ends_with("operator()") {
        return t.to_string();
    }
    let mut depth = 0i32;
    for (i, c) in t.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    let head = t[..i].trim_end();
                    // `(anonymous namespace)` alone, or nothing before: not an argument list.
                    return if head.is_empty() || head.ends_with("::") {
                        t.to_string()
                    } else {
                        head.to_string()
                    };
                }
            }
            _ => {}
        }
    }
    t.to_string()
}

/// Byte ranges where `s` is outside any `()`, `[]` or `{}`.
fn top_level_positions(s: &str) -> Vec<bool> {
    let mut depth = 0i32;
    let mut top = vec![false; s.len()];
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && !matches!(c, ')' | ']' | '}') {
            top[i] = true;
        }
    }
    top
}

fn after_last_top_level<'s>(s: &'s str, sep: &str) -> &'s str {
    let top = top_level_positions(s);
    s.match_indices(sep)
        .filter(|(i, _)| top[*i])
        .last()
        .map_or(s, |(i, m)| &s[i + m.len()..])
}

fn split_top_level<'s>(s: &'s str, sep: &str) -> Vec<&'s str> {
    let top = top_level_positions(s);
    let mut out = Vec::new();
    let mut from = 0;
    for (i, m) in s.match_indices(sep) {
        if top[i] && i >= from {
            out.push(&s[from..i]);
            from = i + m.len();
        }
    }
    out.push(&s[from..]);
    out
}

/// How a [`GroupingRule`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleMatch {
    /// The pattern occurs anywhere in the name.
    Substring,
    /// The name starts with the pattern.
    Prefix,
}

/// A user rule mapping kernel names to a family.
///
/// A rule matches when its pattern matches any of: the raw name as CUPTI reports it, the
/// qualified name ([`qualified_name`]: `cutlass::Kernel2<..>`, so a prefix rule can name a
/// namespace), the fully demangled name (`void cutlass::Kernel2<..>(..)`), or the base name
/// ([`base_name`]: `Kernel2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupingRule {
    /// Text to look for.
    pub pattern: String,
    /// Substring or prefix.
    pub matcher: RuleMatch,
    /// Family name given to matching kernels.
    pub family: String,
    /// Compare without regard to ASCII case.
    pub ignore_case: bool,
}

impl GroupingRule {
    /// A case-sensitive substring rule.
    pub fn substring(pattern: impl Into<String>, family: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            matcher: RuleMatch::Substring,
            family: family.into(),
            ignore_case: false,
        }
    }

    /// A case-sensitive prefix rule.
    pub fn prefix(pattern: impl Into<String>, family: impl Into<String>) -> Self {
        Self {
            matcher: RuleMatch::Prefix,
            ..Self::substring(pattern, family)
        }
    }

    /// Whether `candidate` matches this rule's pattern.
    pub fn matches(&self, candidate: &str) -> bool {
        let (c, p) = if self.ignore_case {
            (
                candidate.to_ascii_lowercase(),
                self.pattern.to_ascii_lowercase(),
            )
        } else {
            (candidate.to_string(), self.pattern.clone())
        };
        match self.matcher {
            RuleMatch::Substring => c.contains(&p),
            RuleMatch::Prefix => c.starts_with(&p),
        }
    }
}

/// A rule that could not be parsed from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad family rule {rule:?}: {reason}")]
pub struct RuleParseError {
    /// The text given.
    pub rule: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for GroupingRule {
    type Err = RuleParseError;

    /// Parses `[prefix:|substr:][i:]PATTERN=FAMILY`: `gemm=GEMM` (substring),
    /// `prefix:ampere_=ampere kernels`, `i:softmax=softmax` (any case). The last `=` separates
    /// pattern from family.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| RuleParseError {
            rule: s.to_string(),
            reason,
        };
        let (lhs, family) = s
            .rsplit_once('=')
            .ok_or_else(|| err("no '=' before the family"))?;
        let mut rest = lhs;
        let mut matcher = RuleMatch::Substring;
        let mut ignore_case = false;
        loop {
            if let Some(r) = rest.strip_prefix("prefix:") {
                matcher = RuleMatch::Prefix;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("substr:") {
                matcher = RuleMatch::Substring;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("i:") {
                ignore_case = true;
                rest = r;
            } else {
                break;
            }
        }
        if rest.is_empty() {
            return Err(err("empty pattern"));
        }
        if family.trim().is_empty() {
            return Err(err("empty family"));
        }
        Ok(Self {
            pattern: rest.to_string(),
            matcher,
            family: family.trim().to_string(),
            ignore_case,
        })
    }
}

/// Ordered user rules; the first that matches names the family, otherwise [`base_name`] does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyRules {
    /// Rules, tried in order.
    pub rules: Vec<GroupingRule>,
}

impl FamilyRules {
    /// No user rules: families come from names alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a rule after the existing ones.
    #[must_use]
    pub fn with(mut self, rule: GroupingRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// The family of one kernel name.
    pub fn family_of(&self, name: &str) -> String {
        let qualified = qualified_name(name);
        let base = strip_name(qualified.as_deref().unwrap_or(name));
        if self.rules.is_empty() {
            return base;
        }
        let full = demangle(name);
        let candidates: Vec<&str> = [
            Some(name),
            qualified.as_deref(),
            full.as_deref(),
            Some(&base),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.rules
            .iter()
            .find(|r| candidates.iter().any(|c| r.matches(c)))
            .map_or(base, |r| r.family.clone())
    }

    /// A namer that remembers the family of each name it has seen (names repeat every iteration).
    pub fn namer(&self) -> FamilyNamer<'_> {
        FamilyNamer {
            rules: self,
            cache: HashMap::new(),
        }
    }
}

/// Names whose family a [`FamilyNamer`] remembers: the names that repeat every iteration fit,
/// and a ledger of millions of distinct names costs a demangling per launch past them rather
/// than memory per name.
pub const NAMER_CACHE: usize = 4096;

/// [`FamilyRules::family_of`] with a cache.
#[derive(Debug)]
pub struct FamilyNamer<'r> {
    rules: &'r FamilyRules,
    cache: HashMap<String, String>,
}

impl FamilyNamer<'_> {
    /// The family of `name`, computed once per distinct name of the first [`NAMER_CACHE`].
    pub fn family_of(&mut self, name: &str) -> String {
        if let Some(f) = self.cache.get(name) {
            return f.clone();
        }
        let f = self.rules.family_of(name);
        if self.cache.len() < NAMER_CACHE {
            self.cache.insert(name.to_string(), f.clone());
        }
        f
    }
}

/// The shape the folded families' launches are summed under.
const OTHER_SHAPE: KernelShape = KernelShape {
    device_id: 0,
    launch: LaunchShape {
        grid: [0; 3],
        block: [0; 3],
        cluster: [0; 3],
        registers_per_thread: 0,
        static_shared_bytes: 0,
        dynamic_shared_bytes: 0,
        local_bytes_per_thread: 0,
    },
};

/// End-to-end speed-up when a fraction `p` of the time is sped up `s` times (Amdahl):
/// `1/((1-p)+p/s)`. `None` unless `p` is in `[0, 1]` and `s > 0`.
pub fn amdahl_speedup(p: f64, s: f64) -> Option<f64> {
    ((0.0..=1.0).contains(&p) && s > 0.0).then(|| 1.0 / ((1.0 - p) + p / s))
}

/// The Amdahl ceiling `1/(1-p)`: the speed-up if the fraction `p` took no time at all.
/// `None` when `p` is 1 (no bound) or outside `[0, 1]`.
pub fn amdahl_ceiling(p: f64) -> Option<f64> {
    ((0.0..1.0).contains(&p)).then(|| 1.0 / (1.0 - p))
}

/// A kernel's device and launch shape: what, with its name, makes a kernel group, and what sets
/// its occupancy and waves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KernelShape {
    /// Device ordinal.
    pub device_id: u32,
    /// Grid, block and cluster dimensions, registers, shared and local memory.
    #[serde(flatten)]
    pub launch: LaunchShape,
}

impl KernelShape {
    /// The shape of a ledger kernel group.
    pub fn of(k: &KernelGroup) -> Self {
        Self {
            device_id: k.device_id,
            launch: k.shape,
        }
    }
}

/// Launches of one shape inside a family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeSummary {
    /// The shape.
    pub shape: KernelShape,
    /// Distinct kernel names with this shape (demangled for display).
    pub names: Vec<String>,
    /// Launches.
    pub launches: u64,
    /// Summed duration, ns.
    pub total_ns: u64,
    /// `total_ns / launches`.
    pub mean_ns: f64,
    /// Shortest launch, ns.
    pub min_ns: u64,
    /// Longest launch, ns.
    pub max_ns: u64,
    /// Launches that came from a CUDA graph.
    pub graph_launches: u64,
}

/// One kernel family over a set of iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilySummary {
    /// Family name.
    pub family: String,
    /// Distinct kernel names in the family (demangled for display), sorted.
    pub names: Vec<String>,
    /// Launches.
    pub launches: u64,
    /// Launches per iteration (mean over the iterations looked at).
    pub launches_per_iteration: f64,
    /// Summed duration, ns.
    pub total_ns: u64,
    /// `total_ns / launches`.
    pub mean_ns: f64,
    /// Shortest launch, ns.
    pub min_ns: u64,
    /// Longest launch, ns.
    pub max_ns: u64,
    /// Launches that came from a CUDA graph.
    pub graph_launches: u64,
    /// `total_ns` over the summed device busy time; `None` when no busy time was recorded.
    pub share_of_device_time: Option<f64>,
    /// `total_ns` over the summed duration of all kernels; `None` when that is 0.
    pub share_of_kernel_time: Option<f64>,
    /// `total_ns` over the summed host wall time of the iterations; `None` when that is 0.
    pub share_of_wall_time: Option<f64>,
    /// `launches × mean_ns` (what removing the family would save), the ranking key.
    pub contribution_ns: f64,
    /// 1 for the largest contribution.
    pub rank: usize,
    /// `1/(1-p)` with `p` the share of device time clamped to `[0, 1]`; `None` when `p` is 1 or
    /// unknown.
    pub amdahl_ceiling: Option<f64>,
    /// `1/((1-p)+p/2)`: the end-to-end gain of making this family twice as fast.
    pub speedup_if_2x: Option<f64>,
    /// Shapes, largest total time first.
    pub shapes: Vec<ShapeSummary>,
}

/// Kernel families over a set of iterations, ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyTable {
    /// Iterations looked at.
    pub iterations: usize,
    /// Device busy time summed over devices and iterations, ns.
    pub device_busy_ns: u64,
    /// Kernel duration summed over all kernels, ns.
    pub kernel_ns: u64,
    /// Host wall time summed over iterations, ns.
    pub host_wall_ns: u64,
    /// Families by rank.
    pub families: Vec<FamilySummary>,
}

/// Groups the kernels of `rows` into families and ranks them by contribution.
pub fn family_table<'a>(
    rows: impl IntoIterator<Item = &'a IterationRow>,
    rules: &FamilyRules,
) -> FamilyTable {
    let mut t = FamilyTableBuilder::new(rules);
    for row in rows {
        t.push(row);
    }
    t.finish()
}

/// Kernel names a shape lists; a shape launched under more names says how many more.
pub const MAX_SHAPE_NAMES: usize = 16;

#[derive(Debug, Default)]
struct ShapeAcc {
    names: BTreeSet<String>,
    /// Launch groups under a name past [`MAX_SHAPE_NAMES`] (not distinct names: counting those
    /// would keep them).
    more_names: u64,
    launches: u64,
    total: u64,
    min: Option<u64>,
    max: u64,
    graph: u64,
}

/// [`family_table`] one row at a time: its memory grows with the kernel names and shapes, not
/// with the rows.
#[derive(Debug)]
pub struct FamilyTableBuilder<'r> {
    namer: FamilyNamer<'r>,
    display: HashMap<String, String>,
    fams: BTreeMap<String, BTreeMap<KernelShape, ShapeAcc>>,
    names: NameFold,
    iterations: usize,
    busy: u64,
    kernel_ns: u64,
    wall: u64,
}

impl<'r> FamilyTableBuilder<'r> {
    /// A table grouped by `rules`.
    pub fn new(rules: &'r FamilyRules) -> Self {
        Self {
            namer: rules.namer(),
            display: HashMap::new(),
            fams: BTreeMap::new(),
            names: NameFold::default(),
            iterations: 0,
            busy: 0,
            kernel_ns: 0,
            wall: 0,
        }
    }

    /// Adds one row.
    pub fn push(&mut self, row: &IterationRow) {
        self.iterations += 1;
        self.busy = self.busy.saturating_add(
            row.devices
                .iter()
                .map(|d| d.busy_ns)
                .fold(0, u64::saturating_add),
        );
        self.wall = self.wall.saturating_add(row.host_wall_ns);
        for k in &row.kernels {
            self.kernel_ns = self.kernel_ns.saturating_add(k.total_ns);
            let fam = self.namer.family_of(&k.name);
            // Folded families share one entry of one shape, named by none of their kernels.
            let (fam, shape) = match self.names.key(&fam, k.total_ns) {
                OTHER_NAMES => (OTHER_NAMES.to_string(), None),
                _ => (fam, Some(KernelShape::of(k))),
            };
            let acc = self
                .fams
                .entry(fam)
                .or_default()
                .entry(shape.unwrap_or(OTHER_SHAPE))
                .or_default();
            if shape.is_some() {
                let shown = match self.display.get(&k.name) {
                    Some(s) => s.clone(),
                    None => {
                        let s = display_name(&k.name);
                        if self.display.len() < NAMER_CACHE {
                            self.display.insert(k.name.clone(), s.clone());
                        }
                        s
                    }
                };
                if acc.names.len() < MAX_SHAPE_NAMES || acc.names.contains(&shown) {
                    acc.names.insert(shown);
                } else {
                    acc.more_names += 1;
                }
            }
            acc.launches = acc.launches.saturating_add(k.count);
            acc.total = acc.total.saturating_add(k.total_ns);
            acc.min = Some(acc.min.map_or(k.min_ns, |m| m.min(k.min_ns)));
            acc.max = acc.max.max(k.max_ns);
            acc.graph = acc.graph.saturating_add(k.graph_launches);
        }
    }

    /// The families folded into `(other N names)`, when there were more than
    /// [`MAX_NAMES`](super::names::MAX_NAMES).
    pub fn folded(&self) -> Option<&NameFold> {
        Some(&self.names).filter(|n| n.folded() > 0)
    }

    /// The ranked table.
    #[must_use]
    pub fn finish(self) -> FamilyTable {
        let label = self.names.label();
        let Self {
            fams,
            iterations,
            busy,
            kernel_ns,
            wall,
            ..
        } = self;
        let ratio = |num: u64, den: u64| (den > 0).then(|| num as f64 / den as f64);
        let mean = |total: u64, n: u64| if n > 0 { total as f64 / n as f64 } else { 0.0 };
        let mut families: Vec<FamilySummary> = fams
            .into_iter()
            .map(|(family, shapes)| {
                let (mut shapes, names, more) = shape_summaries(shapes);
                shapes.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.shape.cmp(&b.shape)));
                let launches: u64 = shapes
                    .iter()
                    .map(|s| s.launches)
                    .fold(0, u64::saturating_add);
                let total: u64 = shapes
                    .iter()
                    .map(|s| s.total_ns)
                    .fold(0, u64::saturating_add);
                let share = ratio(total, busy);
                let p = share.map(|p| p.clamp(0.0, 1.0));
                let all = names.len();
                let mut names: Vec<String> = names.into_iter().take(MAX_SHAPE_NAMES).collect();
                if all > names.len() {
                    names.push(format!("(and {} more names)", all - names.len()));
                }
                if more > 0 {
                    names.push(format!("(and {more} launch groups of other names)"));
                }
                FamilySummary {
                    family: if family == OTHER_NAMES {
                        label.clone()
                    } else {
                        family
                    },
                    names,
                    launches,
                    launches_per_iteration: mean(launches, iterations as u64),
                    total_ns: total,
                    mean_ns: mean(total, launches),
                    min_ns: shapes.iter().map(|s| s.min_ns).min().unwrap_or(0),
                    max_ns: shapes.iter().map(|s| s.max_ns).max().unwrap_or(0),
                    graph_launches: shapes
                        .iter()
                        .map(|s| s.graph_launches)
                        .fold(0, u64::saturating_add),
                    share_of_device_time: share,
                    share_of_kernel_time: ratio(total, kernel_ns),
                    share_of_wall_time: ratio(total, wall),
                    contribution_ns: launches as f64 * mean(total, launches),
                    rank: 0,
                    amdahl_ceiling: p.and_then(amdahl_ceiling),
                    speedup_if_2x: p.and_then(|p| amdahl_speedup(p, 2.0)),
                    shapes,
                }
            })
            .collect();
        families.sort_by(|a, b| {
            b.contribution_ns
                .total_cmp(&a.contribution_ns)
                .then_with(|| a.family.cmp(&b.family))
        });
        for (i, f) in families.iter_mut().enumerate() {
            f.rank = i + 1;
        }
        FamilyTable {
            iterations,
            device_busy_ns: busy,
            kernel_ns,
            host_wall_ns: wall,
            families,
        }
    }
}

/// A family's shapes as summaries, with the names of all of them and the launch groups of names
/// past each shape's list.
fn shape_summaries(
    shapes: BTreeMap<KernelShape, ShapeAcc>,
) -> (Vec<ShapeSummary>, BTreeSet<String>, u64) {
    let mean = |total: u64, n: u64| if n > 0 { total as f64 / n as f64 } else { 0.0 };
    let mut names = BTreeSet::new();
    let mut more = 0u64;
    let summaries = shapes
        .into_iter()
        .map(|(shape, a)| {
            names.extend(a.names.iter().cloned());
            more = more.saturating_add(a.more_names);
            let mut listed: Vec<String> = a.names.into_iter().collect();
            if a.more_names > 0 {
                listed.push(format!(
                    "(and {} launch groups of other names)",
                    a.more_names
                ));
            }
            ShapeSummary {
                shape,
                names: listed,
                launches: a.launches,
                total_ns: a.total,
                mean_ns: mean(a.total, a.launches),
                min_ns: a.min.unwrap_or(0),
                max_ns: a.max,
                graph_launches: a.graph,
            }
        })
        .collect();
    (summaries, names, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_examples() {
        assert_eq!(
            strip_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(
            strip_name("ampere_sgemm_128x64_nn"),
            "ampere_sgemm_128x64_nn"
        );
        assert_eq!(strip_name("unsigned int ns::f<int>(float*) const"), "f");
        assert_eq!(
            strip_name("(anonymous namespace)::softmax_warp<float>(float*, int)"),
            "softmax_warp"
        );
        assert_eq!(
            strip_name("ns::outer(int)::{lambda(int)#1}"),
            "outer::{lambda(int)#1}"
        );
        assert_eq!(strip_name("ns::S::operator()(int)"), "operator()");
        assert_eq!(
            strip_name("bool ns::operator< <int>(int, int)"),
            "operator<"
        );
        assert_eq!(strip_name("k<decltype(a->b)>(int)"), "k");
        assert_eq!(strip_name("void my_operator<int>(int)"), "my_operator");
        assert_eq!(strip_name("  "), "");
    }

    #[test]
    fn demangles_and_families() {
        // void scale<float>(float*, float, int)
        let n = "_Z5scaleIfEvPT_S0_i";
        assert_eq!(
            demangle(n).unwrap(),
            "void scale<float>(float*, float, int)"
        );
        assert_eq!(base_name(n), "scale");
        // cutlass-like: ns::gemm_kernel<128, 64>(int)
        let n = "_ZN2ns11gemm_kernelILi128ELi64EEEvi";
        assert_eq!(base_name(n), "gemm_kernel");
        assert_eq!(demangle("ampere_sgemm_128x64_nn"), None);
        assert_eq!(demangle("_Znot_really_mangled!"), None);
        assert_eq!(base_name("_Znot_really_mangled!"), "_Znot_really_mangled!");
        // A type-like string is never demangled as a type.
        assert_eq!(base_name("i"), "i");
    }

    #[test]
    fn rules_win_in_order() {
        let rules = FamilyRules::new()
            .with("i:SGEMM=gemm".parse().unwrap())
            .with(GroupingRule::prefix("scale", "pointwise"))
            .with(GroupingRule::substring("ampere", "never reached for sgemm"));
        assert_eq!(rules.family_of("ampere_sgemm_128x64_nn"), "gemm");
        assert_eq!(rules.family_of("_Z5scaleIfEvPT_S0_i"), "pointwise");
        assert_eq!(rules.family_of("ampere_hgemm"), "never reached for sgemm");
        assert_eq!(rules.family_of("other_kernel"), "other_kernel");
        // Matching the demangled name: a namespace is visible only there.
        let r = FamilyRules::new().with(GroupingRule::substring("ns::", "ns family"));
        assert_eq!(
            r.family_of("_ZN2ns11gemm_kernelILi128ELi64EEEvi"),
            "ns family"
        );
    }

    #[test]
    fn rule_parsing() {
        let r: GroupingRule = "prefix:i:ab=c d".parse().unwrap();
        assert_eq!(r.matcher, RuleMatch::Prefix);
        assert!(r.ignore_case);
        assert_eq!((r.pattern.as_str(), r.family.as_str()), ("ab", "c d"));
        assert!("no_equals".parse::<GroupingRule>().is_err());
        assert!("=fam".parse::<GroupingRule>().is_err());
        assert!("pat=".parse::<GroupingRule>().is_err());
        let r: GroupingRule = "a=b=c".parse().unwrap();
        assert_eq!((r.pattern.as_str(), r.family.as_str()), ("a=b", "c"));
    }

    #[test]
    fn amdahl_worked_values() {
        // Deleting a 3% kernel gives 1/(1-0.03) = 1.031.
        assert!((amdahl_ceiling(0.03).unwrap() - 1.030_927_8).abs() < 1e-6);
        // p = 0.034, s = 2 gives 1/(0.966 + 0.017) = 1.0173.
        assert!((amdahl_speedup(0.034, 2.0).unwrap() - 1.017_294).abs() < 1e-6);
        // A 22.4% family has a ceiling of 1.289.
        assert!((amdahl_ceiling(0.224).unwrap() - 1.2887).abs() < 1e-4);
        assert_eq!(amdahl_ceiling(1.0), None);
        assert_eq!(amdahl_ceiling(-0.1), None);
        assert_eq!(amdahl_speedup(0.5, 0.0), None);
        assert_eq!(amdahl_speedup(1.0, 2.0), Some(2.0));
    }
}
