//! Finds and opens libcupti, and refuses a CUPTI whose API version the bindings were not made for.
//!
//! Search order (the first library that opens and has the right version wins):
//! 1. `GPU_LEDGER_CUPTI_PATH`: a `libcupti.so.13` file, or a directory holding one;
//! 2. `CUDA_HOME`, then `CUDA_PATH`: `extras/CUPTI/lib64`, `lib64`, `targets/x86_64-linux/lib`;
//! 3. `/usr/local/cuda`, then `/usr/local/cuda-*` (newest first), with the same subdirectories;
//! 4. the `nvidia-cuda-cupti` wheel of the `python3` on `PATH`: `site-packages/nvidia/cu13/lib`;
//! 5. the system loader (`LD_LIBRARY_PATH`, `ldconfig`).
//!
//! Every path tried is kept with the reason it failed, so that the error says where it looked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Environment variable that points gpu-ledger at a specific libcupti.
pub(crate) const CUPTI_PATH_ENV: &str = "GPU_LEDGER_CUPTI_PATH";

const SUBDIRS: [&str; 3] = ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"];

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

/// An opened CUPTI of the right version. Lives for the rest of the process: CUPTI keeps pointers
/// to gpu-ledger's callbacks, so the library is never unloaded.
pub struct LoadedCupti {
    /// The bound functions.
    pub api: cupti_sys::Cupti,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// `cuptiGetVersion`.
    pub api_version: u32,
}

impl std::fmt::Debug for LoadedCupti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedCupti")
            .field("path", &self.path)
            .field("api_version", &self.api_version)
            .finish_non_exhaustive()
    }
}

static CUPTI: OnceLock<Result<LoadedCupti>> = OnceLock::new();

/// The process-wide CUPTI, loaded on first use and kept for the rest of the process.
///
/// # Errors
/// [`Error::CuptiNotFound`] listing every path tried, or [`Error::CuptiVersionMismatch`]; the
/// same error on every call.
pub(crate) fn cupti() -> Result<&'static LoadedCupti> {
    match CUPTI.get_or_init(|| load_first(&candidates_from_env())) {
        Ok(c) => Ok(c),
        Err(Error::CuptiNotFound { tried }) => Err(Error::CuptiNotFound {
            tried: tried.clone(),
        }),
        Err(Error::CuptiVersionMismatch {
            path,
            found,
            expected,
        }) => Err(Error::CuptiVersionMismatch {
            path: path.clone(),
            found: *found,
            expected: *expected,
        }),
        Err(other) => Err(Error::Config(other.to_string())),
    }
}

/// The candidates for this process's environment, in search order.
pub(crate) fn candidates_from_env() -> Vec<Candidate> {
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    candidates(
        env(CUPTI_PATH_ENV),
        env("CUDA_HOME"),
        env("CUDA_PATH"),
        &usr_local_cuda_dirs(Path::new("/usr/local")),
        &python_site_packages(),
    )
}

/// Builds the search list from its inputs (pure, so that the order is testable).
pub(crate) fn candidates(
    override_path: Option<PathBuf>,
    cuda_home: Option<PathBuf>,
    cuda_path: Option<PathBuf>,
    usr_local_cuda: &[PathBuf],
    site_packages: &[PathBuf],
) -> Vec<Candidate> {
    let lib = cupti_sys::CUPTI_LIBRARY_NAME;
    let mut out = Vec::new();
    if let Some(p) = override_path {
        if p.is_dir() || p.extension().is_none() && !p.to_string_lossy().contains(".so") {
            out.push(Candidate::File(p.join(lib)));
        } else {
            out.push(Candidate::File(p));
        }
    }
    for root in cuda_home
        .iter()
        .chain(cuda_path.iter())
        .chain(usr_local_cuda)
    {
        for sub in SUBDIRS {
            out.push(Candidate::File(root.join(sub).join(lib)));
        }
    }
    for sp in site_packages {
        out.push(Candidate::File(sp.join("nvidia/cu13/lib").join(lib)));
    }
    out.push(Candidate::SystemLoader(lib));
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.clone()));
    out
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

/// Opens the first candidate that loads with the bound API version.
///
/// # Errors
/// A version mismatch is reported as such when no other candidate loads; otherwise
/// [`Error::CuptiNotFound`] with every path tried.
pub(crate) fn load_first(candidates: &[Candidate]) -> Result<LoadedCupti> {
    let mut tried = Vec::new();
    let mut mismatch = None;
    for c in candidates {
        match try_load(c) {
            Ok(loaded) => return Ok(loaded),
            Err(LoadFailure::Skip(why)) => tried.push((c.describe(), why)),
            Err(LoadFailure::Version { path, found }) => {
                tried.push((
                    c.describe(),
                    format!(
                        "API version {found}, not {}",
                        cupti_sys::BOUND_CUPTI_API_VERSION
                    ),
                ));
                mismatch.get_or_insert((path, found));
            }
        }
    }
    if let Some((path, found)) = mismatch {
        return Err(Error::CuptiVersionMismatch {
            path,
            found,
            expected: cupti_sys::BOUND_CUPTI_API_VERSION,
        });
    }
    Err(Error::CuptiNotFound { tried })
}

enum LoadFailure {
    Skip(String),
    Version { path: PathBuf, found: u32 },
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
    if version != cupti_sys::BOUND_CUPTI_API_VERSION {
        return Err(LoadFailure::Version {
            path,
            found: version,
        });
    }
    // SAFETY: the version matches the headers the bindings were generated from, so every bound
    // signature is the library's own.
    let api = unsafe { cupti_sys::Cupti::from_library(lib) }
        .map_err(|e| LoadFailure::Skip(format!("missing CUPTI symbol: {e}")))?;
    let path = resolved_path(&path);
    Ok(LoadedCupti {
        api,
        path,
        api_version: version,
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

    /// Builds a shared library whose `cuptiGetVersion` reports `version`, with the system C compiler.
    fn fake_cupti(dir: &std::path::Path, version: u32) -> PathBuf {
        let src = dir.join("fake.c");
        std::fs::write(
            &src,
            format!("unsigned cuptiGetVersion(unsigned *v) {{ *v = {version}; return 0; }}\n"),
        )
        .unwrap();
        let lib = dir.join("libcupti.so.13");
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
    fn a_cupti_of_another_api_version_is_refused_with_the_version_found() {
        let dir = tempfile::tempdir().unwrap();
        let lib = fake_cupti(dir.path(), 120_800);
        let err = load_first(&[Candidate::File(lib.clone())]).err().unwrap();
        let msg = err.to_string();
        match err {
            Error::CuptiVersionMismatch {
                found,
                expected,
                path,
            } => {
                assert_eq!(found, 120_800);
                assert_eq!(expected, 130_001);
                assert_eq!(path, lib);
            }
            other => panic!("expected a version mismatch, got {other}"),
        }
        assert!(
            msg.contains("120800") && msg.contains("130001") && msg.contains("CUDA 13.0"),
            "{msg}"
        );
    }

    #[test]
    fn a_right_version_without_the_other_symbols_is_reported_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let lib = fake_cupti(dir.path(), 130_001);
        let err = load_first(&[Candidate::File(lib)]).err().unwrap();
        assert!(err.to_string().contains("missing CUPTI symbol"), "{err}");
    }

    #[test]
    fn the_search_order_is_override_cuda_home_cuda_path_usr_local_wheel_then_loader() {
        let c = candidates(
            Some(PathBuf::from("/opt/override")),
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
        assert_eq!(shown[0], "/opt/override/libcupti.so.13");
        assert_eq!(shown[1], "/cuda-home/extras/CUPTI/lib64/libcupti.so.13");
        assert_eq!(
            shown[3],
            "/cuda-home/targets/x86_64-linux/lib/libcupti.so.13"
        );
        assert_eq!(shown[4], "/cuda-path/extras/CUPTI/lib64/libcupti.so.13");
        assert!(shown
            .contains(&"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13".to_string()));
        assert_eq!(
            shown[shown.len() - 2],
            "/py/site-packages/nvidia/cu13/lib/libcupti.so.13"
        );
        assert_eq!(shown.last().unwrap(), "loader:libcupti.so.13");
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
