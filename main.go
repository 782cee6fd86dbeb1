// Command hpctrain trains neural networks data-parallel across CPU cores and
// machines. Launched by mpirun (or sbatch, or alone), every rank trains a
// replica of the model on its shard of each batch, and the gradients are
// summed with MPI all-reduce.
//
//	hpctrain train [flags]     train a model (see hpctrain train -h)
//	hpctrain eval -checkpoint F      loss, accuracy, confusion matrix of a checkpoint
//	hpctrain predict -checkpoint F X top-k classes of images or IDX files
//	hpctrain export -checkpoint F    ONNX or safetensors
//	hpctrain models [NAME]     the built-in networks, or one's TOML description
//	hpctrain summary -model X  per-layer shapes, parameters and multiply-adds
//	hpctrain topo [-np N]      show the node and the placement plan
//	hpctrain topo -gpu         the GPU matrix (nvidia-smi topo -m) and GPU per local rank
//	hpctrain bench WHAT        measure gemm, step, allreduce, affinity, optim
//	hpctrain slurm template    render an sbatch script
//	hpctrain plot -metrics F   draw training curves
//
// Errors are printed as one line on stderr, prefixed with rank and host, and
// the exit code is non-zero: 2 for bad flags or configuration, 1 for
// failures while running, 3 for a job that hung (a collective or MPI_Init
// past -collective-timeout, a training step past -step-timeout), 85 and 130 for a run that checkpointed on a
// stop signal or on Ctrl-C.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"hpctrain/internal/cli"
	_ "hpctrain/internal/openblas"
	"hpctrain/mpi"
	"hpctrain/slurm"
	"hpctrain/train"
)

const usage = `hpctrain trains neural networks data-parallel under mpirun, sbatch or alone.

Usage:
  hpctrain <command> [flags]
  hpctrain help <command>   (the same as hpctrain <command> -h)

Commands:
  train     train a model (Fashion-MNIST by default; MNIST, CIFAR-10, image folders) (hpctrain train -h)
  eval      a checkpoint's loss, accuracy, per-class accuracy, confusion matrix (-json, -plot; under mpirun too)
  predict   top-k classes of image or IDX files from a checkpoint, as JSON lines
  export    a checkpoint as ONNX or safetensors (PyTorch names and layouts)
  models    list the built-in networks; models NAME prints one's TOML description
  summary   per-layer output shapes, parameters and multiply-adds of -model (or -checkpoint)
  topo      this node's cores, SMT siblings, NUMA nodes and the plan for -np ranks;
            -gpu: the GPU-GPU/GPU-CPU matrix and each local rank's GPU and cores
  bench     gemm | peak | step | allreduce | affinity | optim | data | scaling (hpctrain bench -h)
  slurm     template: render an sbatch script from flags or a job TOML
  plot      loss and accuracy curves of -metrics files to PNG

Examples:
  hpctrain train -model cnn -epochs 1
  mpirun -np 4 --oversubscribe ./hpctrain train -model cnn -epochs 1
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and turns its error into one line and an exit
// code.
func run(args []string, stdout, stderr io.Writer) int {
	// Help that was asked for, of hpctrain or of any command, is output:
	// standard output and exit 0. Without a command, the usage is an
	// error's: standard error and exit 2.
	cli.HelpOutput = stdout
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if len(args) > 1 && args[0] == "help" {
		args = append(args[1:], "-h") // hpctrain help train: train -h
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "train":
		err = trainCmd(rest, stdout, stderr)
	case "topo":
		err = topoCmd(rest, stdout, stderr)
	case "bench":
		err = benchCmd(rest, stdout, stderr)
	case "slurm":
		err = slurmCmd(rest, stdout, stderr)
	case "plot":
		err = plotCmd(rest, stdout, stderr)
	case "models":
		err = modelsCmd(rest, stdout, stderr)
	case "summary":
		err = summaryCmd(rest, stdout, stderr)
	case "eval":
		err = evalCmd(rest, stdout, stderr)
	case "predict":
		err = predictCmd(rest, stdout, stderr)
	case "export":
		err = exportCmd(rest, stdout, stderr)
	default:
		err = cli.Usage(fmt.Errorf("unknown command %q (commands: train, eval, predict, export, models, summary, topo, bench, slurm, plot; see hpctrain -h)", cmd))
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, train.ErrPreempted) && !errors.Is(err, train.ErrInterrupted) && !errors.As(err, new(reported)) {
		fmt.Fprintf(stderr, "hpctrain: %s%v\n", where(), err)
	}
	return exitCode(err)
}

// exitCode is the process's exit status after err: 0, ExitRequeue for a
// run that checkpointed because it was asked to stop (the batch script
// requeues it), ExitInterrupted for one that checkpointed on Ctrl-C,
// ExitWatchdog for a job whose ranks did not all reach MPI_Init in time (as
// for a collective that timed out), 2 for bad flags or configuration, 1 for
// the rest.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, train.ErrPreempted):
		return train.ExitRequeue
	case errors.Is(err, train.ErrInterrupted):
		return train.ExitInterrupted
	case errors.Is(err, mpi.ErrInitTimeout):
		return train.ExitWatchdog
	case errors.As(err, new(cli.UsageError)):
		return 2
	}
	return 1
}

// who is set once the communicator exists, for error prefixes.
var who string

// where is the "rank R (host): " prefix of error lines; before MPI starts,
// the rank comes from the launcher's environment if there is one.
func where() string {
	if who != "" {
		return who
	}
	if r := os.Getenv("OMPI_COMM_WORLD_RANK"); r != "" {
		h, _ := os.Hostname()
		return fmt.Sprintf("rank %s (%s): ", r, h)
	}
	return ""
}

func trainCmd(args []string, stdout, stderr io.Writer) error {
	cfg, printCfg, err := train.Parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Usage(err)
	}
	if printCfg {
		return cfg.WriteTOML(stdout)
	}
	if cfg.CheckpointDir != "" {
		train.CatchStopSignals() // from here on: a preemption during start-up is not lost
	} else {
		train.WatchUnsavedSignal() // SLURM's warning during start-up is said, not dropped
	}
	train.StopBeforeInit() // a test fault: a rank that never reaches MPI_Init
	comm, err := connectWithin(cfg.CollectiveTimeout)
	if err != nil {
		return err
	}
	who = fmt.Sprintf("rank %d (%s): ", comm.Rank(), comm.Host())
	if cfg.Verbose {
		if err := printLaunch(comm, stderr); err != nil {
			comm.Close()
			return err
		}
	}
	_, err = train.RunWith(cfg, comm, stdout, stderr)
	return closeComm(comm, err, stderr)
}

// finalizeGrace bounds how long a rank whose run failed waits in
// MPI_Finalize, which returns only once every rank has called it. A
// failure the ranks agreed on brings them all there within moments; a
// failure of this rank alone (a device error, a failed allocation) leaves
// the others in their next collective, which only the watchdog would end,
// minutes later or, with -collective-timeout 0, never.
const finalizeGrace = 10 * time.Second

// closeComm ends a rank's part in the job after its run returned err. A
// failed rank says so before MPI_Finalize: once one rank has exited
// non-zero, mpirun kills the others, and a line not yet written is lost;
// Open MPI's MPI_Finalize is a fence, so the ranks that failed together
// (their errors agreed, as every stage of a run is) have all written
// their lines before any of them exits. After a failure in a job of
// several ranks, MPI_Finalize is given finalizeGrace:
// if the other ranks have not stopped by then, the rank says so and
// aborts the job (MPI_Abort with the exit status the error calls for),
// so that mpirun ends every rank at once.
func closeComm(comm mpi.Comm, err error, stderr io.Writer) error {
	if err != nil && !errors.Is(err, train.ErrPreempted) && !errors.Is(err, train.ErrInterrupted) && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "hpctrain: %s%v\n", where(), err)
		err = reported{err}
	}
	w, ok := comm.(*mpi.World)
	if err == nil || errors.Is(err, flag.ErrHelp) || !ok || w.Size() == 1 {
		if cerr := comm.Close(); err == nil {
			err = cerr
		}
		return err
	}
	done := make(chan struct{})
	go func() { w.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(finalizeGrace):
		code := exitCode(err)
		fmt.Fprintf(stderr, "hpctrain: %sthe other ranks did not stop within %v of this rank's error: aborting the job (exit %d)\n", where(), finalizeGrace, code)
		w.Abort(code)
	}
	return err
}

// reported marks an error already printed.
type reported struct{ error }

func (e reported) Unwrap() error { return e.error }

// printLaunch prints, for -v, where this rank's place in the job came from:
// MPI itself, then the launcher's variables (OMPI_*, PMI_*/PMIX_*, SLURM_*),
// in the order slurm.Resolve trusts them, naming any that disagree.
func printLaunch(comm mpi.Comm, out io.Writer) error {
	mpiSize := 0
	local := "no MPI: a job of one process"
	if w, ok := comm.(*mpi.World); ok {
		mpiSize = comm.Size()
		local = fmt.Sprintf("local rank %d of %d from the %s", w.LocalRank(), w.LocalSize(), w.LocalSource())
	}
	li, err := slurm.Resolve(comm.Rank(), mpiSize, os.Getenv)
	if err != nil {
		return cli.Usage(err)
	}
	fmt.Fprintf(out, "hpctrain: %slaunch: %s; using %s\n", who, li.Decision, local)
	return nil
}

// connect returns the job's communicator: MPI when a launcher started us,
// else a job of one process (no MPI_Init, so the binary runs anywhere).
func connect() (mpi.Comm, error) { return connectWithin(0) }

// connectWithin is connect with a time limit on MPI_Init (0: none).
func connectWithin(timeout time.Duration) (mpi.Comm, error) {
	if !mpi.Launched() {
		return mpi.NewSingle(), nil
	}
	w, err := mpi.StartWithin(timeout)
	if err != nil {
		return nil, fmt.Errorf("starting MPI: %w", err)
	}
	return w, nil
}
