//! Where the command line's `-o` output goes: stdout, a regular file replaced atomically, a
//! symlink's target, or a special file written in place.

use std::io::{self, BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{display, interrupt, io_err, CliError};

/// Where an output goes. A regular file (or a name not taken yet) is written under a temporary
/// name beside it and renamed over it when complete, so that a failed export leaves the old file
/// whole; a symlink is resolved first, so that the rename lands on its target and the link stays;
/// anything else (a FIFO, a device such as `/dev/null`, a socket) is written in place, since a
/// rename would replace the special file itself with a regular one. A replaced file keeps its
/// permission bits; as any replacement by rename, it becomes a new file: a hard link to the old
/// one keeps the old content.
pub(crate) struct Output {
    /// What the messages call it (the target, and the link it was reached through).
    name: String,
    stdout: bool,
    target: Option<PathBuf>,
    tmp: Option<PathBuf>,
    pub(crate) writer: Box<dyn Write>,
}

/// Symlinks followed before giving up, as the kernel's own limit.
const MAX_LINKS: usize = 40;

/// `path` with every symlink of its last component resolved (a dangling link resolves to the
/// file it names, which the export creates).
fn resolve_links(path: &Path) -> Result<PathBuf, CliError> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .map_err(io_err(format!("cannot read the symlink {}", display(&p))))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(CliError::Other(format!(
        "{}: more than {MAX_LINKS} symlinks to follow; give the output's real path",
        display(path)
    )))
}

/// Refuses an output that is one of the inputs: the same file (device and inode), whether named
/// alike, through a symlink or a hard link. Writing it would replace the ledger being read.
pub(crate) fn refuse_input(output: &Path, inputs: &[&Path]) -> Result<(), CliError> {
    if output.as_os_str() == "-" {
        return Ok(());
    }
    // Only a regular file is replaced; a FIFO or a device is written in place.
    let out = match std::fs::metadata(output) {
        Ok(m) if m.is_file() => m,
        _ => return Ok(()),
    };
    for input in inputs {
        let same =
            std::fs::metadata(input).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino());
        if same {
            return Err(CliError::Other(format!(
                "the output {} is the input {}: writing it would replace the ledger; give \
                 another output file",
                display(output),
                display(input)
            )));
        }
    }
    Ok(())
}

impl Output {
    pub(crate) fn create(path: &Path) -> Result<Self, CliError> {
        if path.as_os_str() == "-" {
            return Ok(Self {
                name: "stdout".into(),
                stdout: true,
                target: None,
                tmp: None,
                writer: Box::new(BufWriter::new(io::stdout())),
            });
        }
        let real = resolve_links(path)?;
        let name = if real == path {
            display(path)
        } else {
            format!(
                "{} (the target of the symlink {})",
                display(&real),
                display(path)
            )
        };
        let cannot = || io_err(format!("cannot create {name}"));
        let old = std::fs::metadata(&real);
        match &old {
            Ok(m) if m.is_dir() => {
                return Err(CliError::Other(format!(
                    "cannot write {name}: it is a directory; give a file name inside it"
                )))
            }
            Ok(m) if !m.is_file() => {
                // A FIFO, a device or a socket: written in place, never replaced.
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&real)
                    .map_err(cannot())?;
                return Ok(Self {
                    name,
                    stdout: false,
                    target: None,
                    tmp: None,
                    writer: Box::new(BufWriter::with_capacity(1 << 20, file)),
                });
            }
            _ => {}
        }
        let file_name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| CliError::Other(format!("{}: not a file name", display(path))))?;
        let tmp = real.with_file_name(format!(
            ".{file_name}.gpu-ledger-{}.tmp",
            std::process::id()
        ));
        // Registered before it exists, so that a signal at any moment finds it.
        interrupt::register_file(&tmp);
        // create_new: a file (or a planted symlink) already at the temporary name is not reused.
        let file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) => {
                interrupt::forget_file(&tmp);
                return Err(cannot()(e));
            }
        };
        // The replacement keeps the permissions of the file it replaces (a private 600 output
        // stays private); a new file gets the umask's, as any created file.
        if let Ok(m) = &old {
            if let Err(e) = file.set_permissions(m.permissions()) {
                let _ = std::fs::remove_file(&tmp);
                interrupt::forget_file(&tmp);
                return Err(cannot()(e));
            }
        }
        Ok(Self {
            name,
            stdout: false,
            target: Some(real),
            tmp: Some(tmp),
            writer: Box::new(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// What the messages call this output.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn commit(mut self) -> Result<(), CliError> {
        let flushed = self.writer.flush();
        if let Err(e) = flushed {
            if self.stdout && e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(CliError::Io {
                what: format!("cannot write {}", self.name),
                source: e,
            });
        }
        if let (Some(tmp), Some(target)) = (self.tmp.take(), self.target.as_ref()) {
            let renamed = std::fs::rename(&tmp, target);
            if renamed.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            interrupt::forget_file(&tmp);
            renamed.map_err(|e| CliError::Io {
                what: format!("cannot write {}", self.name),
                source: e,
            })?;
        }
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Not committed: leave no partial file behind.
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(&tmp);
            interrupt::forget_file(&tmp);
        }
    }
}
