//! Finds and opens libcupti, and finds which supported release it is (or refuses it).
//!
//! `GPU_LEDGER_CUPTI_PATH`, when set, names the one library used (a file, or a directory holding
//! `libcupti.so.13` or `libcupti.so.12`): it loads, or the error says why; nothing else is tried.
//! Otherwise the first library that opens and is a supported release wins, in this order (in
//! each directory `libcupti.so.13` before `libcupti.so.12`):
//! 1. `CUDA_HOME`, then `CUDA_PATH`: `extras/CUPTI/lib64`, `lib64`, `targets/x86_64-linux/lib`;
//! 2. `/usr/local/cuda`, then `/usr/local/cuda-*` (newest first), with the same subdirectories;
//! 3. the wheels of the `python3` on `PATH`: `site-packages/nvidia/cu13/lib` (`nvidia-cuda-cupti`,
//!    CUDA 13) and `site-packages/nvidia/cuda_cupti/lib` (`nvidia-cuda-cupti-cu12`, CUDA 12);
//! 4. the system loader (`LD_LIBRARY_PATH`, `ldconfig`).
//!
//! Every path tried is kept with the reason it failed, so that the error says where it looked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::layouts::{self, Release, Unsupported};
use crate::error::{Error, Result};

/// Environment variable that points gpu-ledger at a specific libcupti.
pub(crate) const CUPTI_PATH_ENV: &str = "GPU_LEDGER_CUPTI_PATH";

const SUBDIRS: [&str; 3] = ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"];

/// Where each wheel puts libcupti below `site-packages`, with the file name.
const WHEEL_LIBS: [(&str, &str); 2] = [
    ("nvidia/cu13/lib", "libcupti.so.13"),
    ("nvidia/cuda_cupti/lib", "libcupti.so.12"),
];

/// A place to look for libcupti.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Candidate {
    /// A file path.
    File(PathBuf),
    /// A bare library name handed to the system loader.
    SystemLoader(&'static str),
}

impl Candidate {
    fn describe(&self) -> String {
        match self {
            Candidate::File(p) => p.display().to_string(),
            Candidate::SystemLoader(name) => format!("{name} (system loader)"),
        }
    }
}

/// An opened CUPTI of a supported release. Lives for the rest of the process: CUPTI keeps
/// pointers to gpu-ledger's callbacks, so the library is never unloaded.
pub struct LoadedCupti {
    /// The bound functions.
    pub api: cupti_sys::Cupti,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// `cuptiGetVersion`.
    pub api_version: u32,
    /// The release: its record layouts and callback ids.
    pub release: Release,
}

impl std::fmt::Debug for LoadedCupti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedCupti")
            .field("path", &self.path)
            .field("api_version", &self.api_version)
            .field("release", &self.release.name)
            .finish_non_exhaustive()
    }
}

static CUPTI: OnceLock<Result<LoadedCupti>> = OnceLock::new();

/// The process-wide CUPTI, loaded on first use and kept for the rest of the process.
///
/// # Errors
/// [`Error::CuptiPathUnusable`] when `GPU_LEDGER_CUPTI_PATH` names a library that cannot be
/// used, [`Error::CuptiNotFound`] listing every path tried, or [`Error::CuptiVersionMismatch`];
/// the same error on every call.
pub(crate) fn cupti() -> Result<&'static LoadedCupti> {
    let loaded = CUPTI.get_or_init(|| match std::env::var_os(CUPTI_PATH_ENV) {
        Some(p) if !p.is_empty() => load_named(Path::new(&p)),
        _ => load_first(&candidates_from_env()),
    });
    match loaded {
        Ok(c) => Ok(c),
        Err(e) => Err(e.clone_loader_error()),
    }
}

/// The search candidates for this process's environment, in search order.
pub(crate) fn candidates_from_env() -> Vec<Candidate> {
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    candidates(
        env("CUDA_HOME"),
        env("CUDA_PATH"),
        &usr_local_cuda_dirs(Path::new("/usr/local")),
        &python_site_packages(),
    )
}

/// Builds the search list from its inputs (pure, so that the order is testable).
pub(crate) fn candidates(
    cuda_home: Option<PathBuf>,
    cuda_path: Option<PathBuf>,
    usr_local_cuda: &[PathBuf],
    site_packages: &[PathBuf],
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for root in cuda_home
        .iter()
        .chain(cuda_path.iter())
        .chain(usr_local_cuda)
    {
        for sub in SUBDIRS {
            for lib in cupti_sys::CUPTI_LIBRARY_NAMES {
                out.push(Candidate::File(root.join(sub).join(lib)));
            }
        }
    }
    for sp in site_packages {
        for (dir, lib) in WHEEL_LIBS {
            out.push(Candidate::File(sp.join(dir).join(lib)));
        }
    }
    for lib in cupti_sys::CUPTI_LIBRARY_NAMES {
        out.push(Candidate::SystemLoader(lib));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.clone()));
    out
}

/// The files `GPU_LEDGER_CUPTI_PATH`'s `path` stands for: itself, or in a directory its
/// `libcupti.so.13` and `libcupti.so.12`.
pub(crate) fn named_candidates(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        cupti_sys::CUPTI_LIBRARY_NAMES
            .iter()
            .map(|lib| path.join(lib))
            .collect()
    } else {
        vec![path.to_path_buf()]
    }
}

/// Loads the library `GPU_LEDGER_CUPTI_PATH` names, or says why it cannot be used.
///
/// # Errors
/// [`Error::CuptiPathUnusable`] with the reason for each file tried; a release outside the
/// bindings is [`Error::CuptiVersionMismatch`], as in the search.
pub(crate) fn load_named(path: &Path) -> Result<LoadedCupti> {
    let mut why = Vec::new();
    for file in named_candidates(path) {
        match try_load(&Candidate::File(file.clone())) {
            Ok(loaded) => return Ok(loaded),
            Err(LoadFailure::Version { path, found, why }) => {
                return Err(version_error(path, found, why))
            }
            Err(LoadFailure::Skip(reason)) => why.push(format!("{}: {reason}", file.display())),
        }
    }
    Err(Error::CuptiPathUnusable {
        path: path.to_path_buf(),
        why: why.join("; "),
    })
}

/// `/usr/local/cuda` first, then `/usr/local/cuda-X.Y` directories, newest version first.
pub(crate) fn usr_local_cuda_dirs(usr_local: &Path) -> Vec<PathBuf> {
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(usr_local)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("cuda-")?;
            let key = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            Some((key, e.path()))
        })
        .collect();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    let mut out = vec![usr_local.join("cuda")];
    out.extend(versioned.into_iter().map(|(_, p)| p));
    out
}

/// The site-packages directories of the `python3` (or `python`) on `PATH`; empty when there is
/// none.
fn python_site_packages() -> Vec<PathBuf> {
    const SCRIPT: &str = "import site,sys\n\
        p=list(getattr(site,'getsitepackages',lambda:[])())\n\
        u=getattr(site,'getusersitepackages',lambda:None)()\n\
        p+=[u] if u else []\n\
        print('\\n'.join(p))";
    for python in ["python3", "python"] {
        if let Ok(out) = std::process::Command::new(python)
            .args(["-c", SCRIPT])
            .stderr(std::process::Stdio::null())
            .output()
        {
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(PathBuf::from)
                    .collect();
            }
        }
    }
    Vec::new()
}

/// The error for a CUPTI at `path` whose API version `found` is outside the bindings.
fn version_error(path: PathBuf, found: u32, why: Unsupported) -> Error {
    let reason = match why {
        Unsupported::Older => {
            "a CUDA release older than 12.6, the first with the Range \
                               Profiler and Profiler Host APIs gpu-ledger calls"
        }
        Unsupported::Newer => {
            "a release newer than gpu-ledger's bindings, whose record layouts \
                               it does not know: update gpu-ledger"
        }
    };
    Error::CuptiVersionMismatch {
        path,
        found,
        reason: reason.to_string(),
        supported: layouts::supported_range(),
    }
}

/// Opens the first candidate that loads and is a supported release.
///
/// # Errors
/// A release outside the bindings is reported as such when no other candidate loads;
/// otherwise [`Error::CuptiNotFound`] with every path tried.
pub(crate) fn load_first(candidates: &[Candidate]) -> Result<LoadedCupti> {
    let mut tried = Vec::new();
    let mut mismatch = None;
    for c in candidates {
        match try_load(c) {
            Ok(loaded) => return Ok(loaded),
            Err(LoadFailure::Skip(why)) => tried.push((c.describe(), why)),
            Err(LoadFailure::Version { path, found, why }) => {
                tried.push((
                    c.describe(),
                    format!(
                        "API version {found}, outside {}",
                        layouts::supported_range()
                    ),
                ));
                mismatch.get_or_insert((path, found, why));
            }
        }
    }
    if let Some((path, found, why)) = mismatch {
        return Err(version_error(path, found, why));
    }
    Err(Error::CuptiNotFound { tried })
}

enum LoadFailure {
    Skip(String),
    Version {
        path: PathBuf,
        found: u32,
        why: Unsupported,
    },
}

fn try_load(c: &Candidate) -> std::result::Result<LoadedCupti, LoadFailure> {
    let (target, path): (&std::ffi::OsStr, PathBuf) = match c {
        Candidate::File(p) => {
            if !p.exists() {
                return Err(LoadFailure::Skip("no such file".into()));
            }
            (p.as_os_str(), p.clone())
        }
        Candidate::SystemLoader(name) => (std::ffi::OsStr::new(name), PathBuf::from(name)),
    };
    // SAFETY: loading libcupti runs its initialisers, which only set up CUPTI's own state.
    let lib = unsafe { libloading::Library::new(target) }
        .map_err(|e| LoadFailure::Skip(format!("cannot open: {e}")))?;
    let version = read_version(&lib).map_err(LoadFailure::Skip)?;
    let release = layouts::release(version).map_err(|why| LoadFailure::Version {
        path: path.clone(),
        found: version,
        why,
    })?;
    // SAFETY: the bound functions are the ones every supported release exports, with the
    // signatures of their headers (unchanged from 12.6 on for the ones gpu-ledger calls).
    let api = unsafe { cupti_sys::Cupti::from_library(lib) }
        .map_err(|e| LoadFailure::Skip(format!("missing CUPTI symbol: {e}")))?;
    let path = resolved_path(&path);
    Ok(LoadedCupti {
        api,
        path,
        api_version: version,
        release,
    })
}

fn read_version(lib: &libloading::Library) -> std::result::Result<u32, String> {
    type GetVersion = unsafe extern "C" fn(*mut u32) -> u32;
    // SAFETY: cuptiGetVersion has had this signature in every CUPTI release.
    let get: libloading::Symbol<GetVersion> = unsafe { lib.get(b"cuptiGetVersion\0") }
        .map_err(|e| format!("not a CUPTI library (no cuptiGetVersion): {e}"))?;
    let mut version = 0u32;
    // SAFETY: the out-pointer is a valid, writable u32.
    let rc = unsafe { get(&mut version) };
    if rc != 0 {
        return Err(format!("cuptiGetVersion failed with code {rc}"));
    }
    Ok(version)
}

/// For a library opened by bare name, where the loader found it (from /proc/self/maps).
fn resolved_path(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let name = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| p.ends_with(name.as_ref()))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_libcupti_lists_every_path_tried_and_the_fix() {
        let cands = vec![
            Candidate::File(PathBuf::from("/nonexistent/a/libcupti.so.13")),
            Candidate::File(PathBuf::from("/nonexistent/b/libcupti.so.13")),
        ];
        let err = load_first(&cands).expect_err("nothing there");
        let msg = err.to_string();
        assert!(matches!(err, Error::CuptiNotFound { .. }), "{msg}");
        assert!(
            msg.contains("/nonexistent/a/libcupti.so.13: no such file"),
            "{msg}"
        );
        assert!(msg.contains("/nonexistent/b/libcupti.so.13"), "{msg}");
        assert!(msg.contains("GPU_LEDGER_CUPTI_PATH"), "{msg}");
    }

    #[test]
    fn a_library_that_is_not_cupti_is_skipped_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libcupti.so.13");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let err = load_first(&[Candidate::File(fake.clone())]).err().unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains(&fake.display().to_string()) && msg.contains("cannot open"),
            "{msg}"
        );
    }

    /// Builds a shared library whose `cuptiGetVersion` reports `version`, with the system C
    /// compiler (named by its version, so that several live in one directory).
    fn fake_cupti(dir: &std::path::Path, version: u32) -> PathBuf {
        let src = dir.join("fake.c");
        std::fs::write(
            &src,
            format!("unsigned cuptiGetVersion(unsigned *v) {{ *v = {version}; return 0; }}\n"),
        )
        .unwrap();
        let lib = dir.join(format!("libcupti-{version}.so.13"));
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("a C compiler (cc) is needed to build the fake libcupti");
        assert!(status.success());
        lib
    }

    #[test]
    fn a_cupti_outside_the_bindings_is_refused_naming_its_version_and_the_supported_ones() {
        let dir = tempfile::tempdir().unwrap();
        for (version, why) in [
            (120_800, "newer than gpu-ledger's bindings"),
            (23, "older than 12.6"),
            (130_600, "newer"),
        ] {
            let lib = fake_cupti(dir.path(), version);
            let err = load_first(&[Candidate::File(lib.clone())]).err().unwrap();
            let msg = err.to_string();
            match &err {
                Error::CuptiVersionMismatch { found, path, .. } => {
                    assert_eq!((*found, path), (version, &lib));
                }
                other => panic!("expected a version mismatch, got {other}"),
            }
            assert!(
                msg.contains(&version.to_string()) && msg.contains(why),
                "{msg}"
            );
            assert!(
                msg.contains("CUDA 12.6 to 13.5") && msg.contains("GPU_LEDGER_CUPTI_PATH"),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_supported_version_without_the_other_symbols_is_reported_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        for version in [24, 28, 130_001, 130_401] {
            let lib = fake_cupti(dir.path(), version);
            let err = load_first(&[Candidate::File(lib)]).err().unwrap();
            assert!(
                err.to_string().contains("missing CUPTI symbol"),
                "{version}: {err}"
            );
        }
    }

    #[test]
    fn the_named_library_is_used_or_is_an_error_saying_why_never_a_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope/libcupti.so.13");
        let err = load_named(&missing).err().unwrap();
        let msg = err.to_string();
        assert!(matches!(err, Error::CuptiPathUnusable { .. }), "{msg}");
        assert!(
            msg.contains("nope/libcupti.so.13") && msg.contains("no such file"),
            "{msg}"
        );
        assert!(msg.contains("unset it"), "{msg}");
        // A directory: both file names are tried, and each one's reason is given.
        let err = load_named(dir.path()).err().unwrap().to_string();
        assert!(err.contains("libcupti.so.13: no such file"), "{err}");
        assert!(err.contains("libcupti.so.12: no such file"), "{err}");
        // A named library outside the bindings is that error, not a search for another.
        let old = fake_cupti(dir.path(), 23);
        let err = load_named(&old).err().unwrap();
        assert!(
            matches!(err, Error::CuptiVersionMismatch { found: 23, .. }),
            "{err}"
        );
    }

    #[test]
    fn the_search_order_is_cuda_home_cuda_path_usr_local_both_wheels_then_loader() {
        let c = candidates(
            Some(PathBuf::from("/cuda-home")),
            Some(PathBuf::from("/cuda-path")),
            &[
                PathBuf::from("/usr/local/cuda"),
                PathBuf::from("/usr/local/cuda-13.0"),
            ],
            &[PathBuf::from("/py/site-packages")],
        );
        let shown: Vec<String> = c
            .iter()
            .map(|c| match c {
                Candidate::File(p) => p.display().to_string(),
                Candidate::SystemLoader(n) => format!("loader:{n}"),
            })
            .collect();
        assert_eq!(shown[0], "/cuda-home/extras/CUPTI/lib64/libcupti.so.13");
        assert_eq!(shown[1], "/cuda-home/extras/CUPTI/lib64/libcupti.so.12");
        assert_eq!(
            shown[4],
            "/cuda-home/targets/x86_64-linux/lib/libcupti.so.13"
        );
        assert_eq!(shown[6], "/cuda-path/extras/CUPTI/lib64/libcupti.so.13");
        assert!(shown
            .contains(&"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.12".to_string()));
        let n = shown.len();
        assert_eq!(
            shown[n - 4..],
            [
                "/py/site-packages/nvidia/cu13/lib/libcupti.so.13",
                "/py/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
                "loader:libcupti.so.13",
                "loader:libcupti.so.12",
            ]
        );
    }

    #[test]
    fn usr_local_cuda_dirs_are_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["cuda-12.4", "cuda-13.0", "cuda-12.10", "other"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let dirs = usr_local_cuda_dirs(dir.path());
        let names: Vec<String> = dirs
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["cuda", "cuda-13.0", "cuda-12.10", "cuda-12.4"]);
    }
}
