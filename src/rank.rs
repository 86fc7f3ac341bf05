//! The process's rank in a multi-process job, from the launcher's environment variables
//! (torchrun, mpirun / Open MPI, MPICH / PMI, SLURM).

use crate::ledger::schema::RankInfo;

const RANK: [&str; 4] = ["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];
const LOCAL_RANK: [&str; 4] = [
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];
const WORLD_SIZE: [&str; 4] = [
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
];

/// The rank of this process, or `None` when no launcher variable is set.
pub(crate) fn from_env() -> Option<RankInfo> {
    from_lookup(|k| std::env::var(k).ok())
}

/// The rank from any variable lookup (testable without touching the process environment).
pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<RankInfo> {
    let first = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| get(n).and_then(|v| v.trim().parse::<u32>().ok()))
    };
    Some(RankInfo {
        rank: first(&RANK)?,
        local_rank: first(&LOCAL_RANK),
        world_size: first(&WORLD_SIZE),
    })
}
