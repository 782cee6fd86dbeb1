// Package slurm tells hpctrain where it is running and how it was launched
// under the SLURM workload manager, and renders the sbatch script that
// launches it there.
//
// It has four parts, each a pure function of its inputs so that it can be
// tested without a cluster:
//
//   - [ReadEnv] parses the SLURM_* variables of a job into an [Env].
//   - [ExpandHostlist] expands SLURM's compressed host lists
//     ("node[01-04,07],gpu-a[1-2]").
//   - [Resolve] decides which launcher's idea of rank and size to trust
//     (MPI itself, then OMPI_COMM_WORLD_*, then PMI_*/PMIX_*, then SLURM_*)
//     and says why, for `hpctrain -v`.
//   - [Render] writes an sbatch script from a [JobSpec] (usually loaded from
//     TOML with [LoadJobSpec]) that runs `mpirun ... hpctrain train`, forwards
//     SLURM's pre-emption warning signal to the trainer and requeues the job
//     when the trainer exits with [ExitRequeue]. It gives mpirun the TCP
//     keepalive that scripts/mpirun.sh chooses, so that a node lost mid-run
//     ends the job in about a minute, not ~15 min.
//
// # Preemption and requeue protocol
//
// The rendered script asks SLURM for `--signal=B:USR1@<grace>`: <grace>
// seconds before the time limit SLURM sends SIGUSR1 to the batch shell only.
// The shell traps it and forwards it with `kill -USR1` to mpirun, which Open
// MPI relays to every rank. The trainer is expected to finish its step, write
// a checkpoint (package checkpoint) and exit with [ExitRequeue] (85) on every
// rank. The script then runs `scontrol requeue $SLURM_JOB_ID`; the rerun
// starts `hpctrain train -resume auto`, which loads the newest valid
// checkpoint. Should SLURM refuse the requeue (`sbatch --no-requeue`), the
// job ends with ExitRequeue, not scontrol's status, and says so. Any other
// exit status is passed through unchanged. SIGTERM
// (scancel --batch, preemption) is forwarded as SIGUSR1 too: mpirun relays
// USR1 to the ranks, but on TERM it kills them itself and exits 1, which
// would skip the requeue. The traps are set before anything else runs (a
// slow `module load`): a signal that arrives before mpirun starts is
// remembered, mpirun is not started and the job is requeued as if the
// trainer had exited with ExitRequeue; one that arrives after mpirun has
// exited is not sent on (its pid may be another process's by then).
//
// # Invariants
//
//   - Nothing here reads the process environment directly: every function
//     takes a getenv func, so tests pass a map and main passes os.Getenv.
//   - Values rendered into the script are validated (no newlines, no shell
//     metacharacters in #SBATCH lines) and shell-quoted on the command line.
//   - Malformed input (an unparsable variable, a bad host list, a bad job
//     spec) is an error naming the variable or key; panics are reserved for
//     programmer misuse (a nil getenv).
//
// Non-goals: talking to slurmctld (no libslurm, no squeue parsing), and
// srun-launched steps with PMIx; the supported launch is mpirun inside an
// allocation. scripts/slurm/up.sh starts a one-host cluster for the tests.
package slurm
