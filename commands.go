package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"hpctrain/affinity"
	"hpctrain/bench"
	"hpctrain/chart"
	"hpctrain/gpu"
	"hpctrain/internal/cli"
	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/slurm"
	"hpctrain/train"
)

// topoCmd prints this node's topology and the plan for -np local ranks,
// without MPI; with -gpu, its GPUs and each local rank's GPU and cores.
func topoCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain topo", flag.ContinueOnError)
	np := fs.Int("np", 1, "local ranks to plan for")
	threads := fs.Int("threads", 0, "threads per rank (0: cores / ranks; on a hybrid CPU performance cores / ranks, where there is one per rank)")
	bind := fs.String("bind", "cores", "policy: cores, numa, none")
	smt := fs.Bool("use-smt", false, "use SMT siblings")
	sys := fs.String("sysfs", "/", "root of the sysfs tree to read (fixtures for tests)")
	js := fs.Bool("json", false, "print JSON for scripts")
	gpuMatrix := fs.Bool("gpu", false, "print the GPUs instead: the GPU-GPU and GPU-CPU matrix in nvidia-smi topo -m notation, then each of -np local ranks' GPU and cores")
	gpus := fs.String("gpus", "", "with -gpu: GPU of each local rank, e.g. 0,1, or none (as for train)")
	gpuShare := fs.Bool("gpu-share", false, "with -gpu: let local ranks share GPUs (as for train)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: hpctrain topo [-np N] [-threads T] [-bind cores|numa|none] [-json]
       hpctrain topo -gpu [-np N] [-gpus LIST]

Prints this node's cores, SMT siblings and NUMA nodes as sysfs gives them,
and the plan train would make for -np local ranks: each rank's cores and
threads. With -gpu, the GPUs instead: their matrix and each local rank's GPU
and cores. Runs without MPI.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return err
	}
	policy, err := affinity.ParsePolicy(*bind)
	if err != nil {
		return cli.Usage(err)
	}
	if *np < 1 || *np > maxLocalRanks {
		return cli.Usage(fmt.Errorf("-np %d: must be 1 to %d (the ranks on this node)", *np, maxLocalRanks))
	}
	if *threads < 0 || *threads > train.MaxThreads {
		return cli.Usage(fmt.Errorf("-threads %d: must be 0 to %d (0: cores / ranks)", *threads, train.MaxThreads))
	}
	if !*gpuMatrix && (*gpus != "" || *gpuShare) {
		return cli.Usage(fmt.Errorf("-gpus and -gpu-share apply with -gpu (the GPU plan) only"))
	}
	topo, err := affinity.ReadTopology(*sys)
	if err != nil && *sys != "/" {
		return cli.Usage(fmt.Errorf("-sysfs %s: %w", *sys, err)) // a fixture tree the user named: bad input
	}
	if err != nil {
		return err
	}
	mask := topo.Allowed
	if mask.IsEmpty() {
		mask = topo.Online
	}
	req := affinity.Request{Threads: *threads, Policy: policy, UseSMT: *smt, PreferNUMA: -1, LocalSize: *np}
	if *gpuMatrix {
		spec, err := gpu.ParseSpec(*gpus, *gpuShare)
		if err != nil {
			return cli.Usage(fmt.Errorf("-gpus %q: %w", *gpus, err))
		}
		g, err := gpu.Discover(*sys).Visible(os.LookupEnv("CUDA_VISIBLE_DEVICES"))
		if err != nil {
			return err
		}
		if *js {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(g)
		}
		if err := g.Write(stdout); err != nil {
			return err
		}
		if len(g.Devices) == 0 {
			// -gpus naming GPUs this node has not: refused as train
			// refuses it (exit 2), not a plan of none.
			if _, err := g.Assign(*np, spec); err != nil {
				return cli.Usage(err)
			}
			return nil
		}
		fmt.Fprintln(stdout)
		return g.WritePlans(stdout, topo, mask, *np, req, spec)
	}
	if *js {
		plans, err := topo.PlanAll(mask, req)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(affinity.Layout{Topology: topo, Plans: plans})
	}
	if err := topo.Write(stdout); err != nil {
		return err
	}
	writeCPUKernels(stdout)
	fmt.Fprintln(stdout)
	return affinity.WritePlans(stdout, topo, mask, *np, req)
}

// writeCPUKernels says what the convolutions and linear layers compute
// with on this CPU: the default kernels, oneDNN's instruction set, and
// whether -precision bf16 can run.
func writeCPUKernels(w io.Writer) {
	k := model.DefaultKernels()
	if !k.DNNL {
		fmt.Fprintf(w, "cpu kernels: %s (built without oneDNN); bf16: no\n", k)
		return
	}
	bf := "yes"
	if ok, missing := dnnl.HasBF16(); !ok {
		bf = "no: " + missing
	}
	wino := "oneDNN's F(4x4, 3x3)"
	if !dnnl.HasWinograd() {
		wino = "hpctrain's F(2x2, 3x3) (oneDNN has none on this ISA)"
	}
	if bf == "yes" {
		if dnnl.AMX() {
			wino += "; bf16 convolutions: all on oneDNN (AMX-BF16; hpctrain's own bf16 kernels are AVX512-BF16's)"
		} else if kernels.HasWino16() {
			wino += "; bf16 3x3 Winograd: hpctrain's F(2x2, 3x3) (AVX512-BF16)"
		} else {
			wino += "; bf16 3x3 Winograd: none (no AVX512-BF16: oneDNN's direct)"
		}
	}
	fmt.Fprintf(w, "cpu kernels: %s, oneDNN: %s; hpctrain's own: %s; -precision bf16: %s; fp32 3x3 Winograd: %s\n", k, dnnl.ISA(), kernels.ISA(), bf, wino)
}

// benchUsage is bench -h: a line for each benchmark.
func benchUsage() string {
	var b strings.Builder
	b.WriteString("Usage: hpctrain bench <what> [flags]\n\n")
	for _, x := range bench.Benchmarks {
		fmt.Fprintf(&b, "  %-11s %s\n", x.Name, x.Line)
	}
	return b.String()
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage()) // an error's: standard error
		return cli.Usage(fmt.Errorf("bench needs a benchmark name"))
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, benchUsage())
		return nil
	}
	what, rest := args[0], args[1:]
	switch what {
	case "gemm":
		return bench.Gemm(rest, stdout, stderr)
	case "peak":
		return bench.Peak(rest, stdout)
	case "step":
		return bench.Step(rest, stdout)
	case "optim":
		return bench.Optim(rest, stdout)
	case "data":
		return bench.Data(rest, stdout)
	case "affinity":
		self, err := os.Executable()
		if err != nil {
			return err
		}
		return bench.Affinity(rest, self, stdout)
	case "scaling":
		var comm mpi.Comm
		err := bench.Scaling(rest, func() (mpi.Comm, error) {
			c, err := connect()
			if err == nil {
				comm = c
				who = fmt.Sprintf("rank %d (%s): ", c.Rank(), c.Host())
			}
			return c, err
		}, stdout)
		if comm == nil {
			return err
		}
		return closeComm(comm, err, stderr)
	case "allreduce":
		comm, err := connect()
		if err != nil {
			return err
		}
		who = fmt.Sprintf("rank %d (%s): ", comm.Rank(), comm.Host())
		return closeComm(comm, bench.Allreduce(rest, comm, stdout), stderr)
	}
	var names []string
	for _, b := range bench.Benchmarks {
		names = append(names, b.Name)
	}
	return cli.Usage(fmt.Errorf("unknown benchmark %q (%s; see hpctrain bench -h)", what, strings.Join(names, ", ")))
}

const slurmUsage = `Usage: hpctrain slurm template [-job FILE] [flags]

  template    render an sbatch script (hpctrain slurm template -h for its flags)
`

// slurmCmd renders batch scripts: hpctrain slurm template -job job.toml.
func slurmCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, slurmUsage)
		return nil
	}
	if len(args) == 0 {
		return cli.Usage(fmt.Errorf("slurm needs the subcommand template (see hpctrain slurm -h)"))
	}
	if args[0] != "template" {
		return cli.Usage(fmt.Errorf("unknown slurm subcommand %q (there is one: template; see hpctrain slurm -h)", args[0]))
	}
	s := slurm.DefaultJobSpec()
	fs := flag.NewFlagSet("hpctrain slurm template", flag.ContinueOnError)
	job := fs.String("job", "", "job TOML `file` (keys: name, partition, account, nodes, tasks_per_node, cpus_per_task, gpus_per_node, time, output, error, signal_grace, requeue, binary, config, checkpoint_dir, extra_args, mpirun, oversubscribe, modules, sbatch)")
	fs.StringVar(&s.Partition, "partition", s.Partition, "partition")
	fs.StringVar(&s.Account, "account", s.Account, "account")
	fs.IntVar(&s.Nodes, "nodes", s.Nodes, "nodes")
	fs.IntVar(&s.TasksPerNode, "tasks-per-node", s.TasksPerNode, "MPI ranks per node")
	fs.IntVar(&s.CPUsPerTask, "cpus-per-task", s.CPUsPerTask, "threads per rank")
	fs.IntVar(&s.GPUsPerNode, "gpus-per-node", s.GPUsPerNode, "GPUs per node (0: CPU job)")
	fs.StringVar(&s.Time, "time", s.Time, "time limit (SLURM format)")
	fs.IntVar(&s.SignalGrace, "signal-grace", s.SignalGrace, "`seconds` before the time limit that SLURM warns the job to checkpoint and requeue")
	fs.StringVar(&s.Config, "config", s.Config, "training TOML passed to hpctrain train -config")
	fs.BoolVar(&s.Oversubscribe, "oversubscribe", s.Oversubscribe, "add --oversubscribe to mpirun")
	var sbatchOpts sbatchFlag
	fs.Var(&sbatchOpts, "sbatch", "a further sbatch `option`, --name=value, written as an #SBATCH line after the job file's (repeat the flag for more: -sbatch --qos=high -sbatch --exclusive)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: hpctrain slurm template -config TRAIN.toml [flags] > train.sbatch
       hpctrain slurm template -job JOB.toml [flags] > train.sbatch

Writes an sbatch script that runs hpctrain train -config TRAIN.toml
-checkpoint-dir DIR -resume auto under mpirun, forwards SLURM's warning
signal so that the run checkpoints, and requeues the job when it exits 85.
The job comes from the flags, or from a job TOML whose keys the flags fill
in or correct. What train would refuse in the queue is refused now, exit 2.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args[1:], stderr, false); err != nil {
		return err
	}
	s.Sbatch = sbatchOpts // after the job file's, where there is one
	var jobKeys []string
	if *job != "" {
		loaded, keys, err := slurm.ReadJobSpec(*job)
		if err != nil {
			return cli.Usage(err)
		}
		s, jobKeys = loaded, keys
		sbatchOpts = nil
		fs.Parse(args[1:]) // flags given on the command line win over the file
		s.Sbatch = append(slices.Clip(s.Sbatch), sbatchOpts...)
		// Checked with the flags applied: a flag may fill in or correct
		// what the file has (one job file, a -config per experiment).
		if err := s.Validate(); err != nil {
			with := ""
			if fs.NFlag() > 1 {
				with = " with the command line's flags"
			}
			return cli.Usage(fmt.Errorf("job spec %s%s: %w", *job, with, err))
		}
	}
	if err := checkTrainArgs(&s, slices.Contains(jobKeys, "checkpoint_dir"), stderr); err != nil {
		return cli.Usage(err)
	}
	if err := slurm.Render(stdout, s); err != nil {
		return cli.Usage(err)
	}
	warnOutputDirs(s, stderr)
	return nil
}

// sbatchFlag collects -sbatch options in the order given.
type sbatchFlag []string

func (f *sbatchFlag) String() string { return strings.Join(*f, " ") }

func (f *sbatchFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// warnOutputDirs says on stderr when the directory of the script's
// --output or --error file is not there (from the current directory, the
// usual submit directory): SLURM opens those files before the script runs
// and does not create their directory, so such a job fails at once and
// leaves no log at all. A warning, not an error: the script may be
// submitted from elsewhere, and a directory with a % pattern is not
// checked.
func warnOutputDirs(s slurm.JobSpec, stderr io.Writer) {
	warned := map[string]bool{}
	for _, o := range []struct{ key, path string }{{"output", s.Output}, {"error", s.Error}} {
		dir := filepath.Dir(o.path)
		if o.path == "" || strings.Contains(dir, "%") || warned[dir] {
			continue
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			warned[dir] = true
			fmt.Fprintf(stderr, "hpctrain: warning: %s %q: directory %s is not there; SLURM does not create it and the job would fail before it starts, without a log: mkdir -p %s before sbatch\n", o.key, o.path, dir, dir)
		}
	}
}

// checkTrainArgs checks now what the script's hpctrain train would refuse
// in the queue: the training configuration (a file that is not there, or
// not valid) with extra_args after it, which must parse and must leave
// alone the flags that make requeueing work (-config, -checkpoint-dir,
// -resume auto). The training configuration's checkpoint_dir is the
// script's where the job file names none (the job's default would hide
// it); where both name one, the job's wins and stderr says so.
func checkTrainArgs(s *slurm.JobSpec, jobDir bool, stderr io.Writer) error {
	if s.Config == "" {
		return nil // Render names it
	}
	if a, name := cli.OwnFlag(s.ExtraArgs, "config", "checkpoint-dir", "resume"); a != "" {
		return fmt.Errorf("slurm template: extra_args %q: -%s is the script's own (it runs train -config FILE -checkpoint-dir DIR -resume auto so that a requeued job resumes): set config or checkpoint_dir in the job file instead", a, name)
	}
	cfg, _, err := train.Parse(append([]string{"-config", s.Config}, s.ExtraArgs...), io.Discard)
	if err != nil {
		if len(s.ExtraArgs) > 0 {
			return fmt.Errorf("slurm template: -config %q with extra_args %q: %w", s.Config, s.ExtraArgs, err)
		}
		return fmt.Errorf("slurm template: -config %q: %w", s.Config, err)
	}
	if err := checkGPUsPerNode(*s, cfg, stderr); err != nil {
		return err
	}
	switch {
	case cfg.CheckpointDir == "" || cfg.CheckpointDir == s.CheckpointDir:
	case !jobDir:
		s.CheckpointDir = cfg.CheckpointDir
	default:
		fmt.Fprintf(stderr, "hpctrain: warning: the job's checkpoint_dir %q replaces %s's checkpoint_dir %q in the script\n", s.CheckpointDir, s.Config, cfg.CheckpointDir)
	}
	return nil
}

// checkGPUsPerNode checks the job's GPUs against the ranks that drive
// them, as train would on each node once the job runs: more ranks per
// node than GPUs (without gpu_share) or a gpus map of another length is
// refused; GPUs the run leaves idle, and device = cuda in a job asking
// for none, are warned of.
func checkGPUsPerNode(s slurm.JobSpec, cfg train.Config, stderr io.Writer) error {
	spec, err := gpu.ParseSpec(cfg.GPUs, cfg.GPUShare)
	if err != nil {
		return nil // train.Parse has refused it
	}
	uses := cfg.Device != "cpu" && !spec.Off
	warn := func(format string, a ...any) {
		fmt.Fprintf(stderr, "hpctrain: warning: "+format+"\n", a...)
	}
	switch {
	case s.GPUsPerNode == 0:
		if cfg.Device == "cuda" {
			warn("gpus_per_node = 0 but %s has device = cuda: where GPUs are a SLURM resource (GRES) the job is given none and every rank stops at start-up; set gpus_per_node", s.Config)
		}
	case !uses:
		warn("gpus_per_node = %d but %s uses no GPU (device = %s, gpus = %q): the GPUs would sit idle; set gpus_per_node = 0 for a CPU job", s.GPUsPerNode, s.Config, cfg.Device, cfg.GPUs)
	case spec.Map != nil && len(spec.Map) != s.TasksPerNode:
		return fmt.Errorf("slurm template: %s's gpus = %q maps %d local ranks but tasks_per_node = %d: give one GPU per rank of a node", s.Config, cfg.GPUs, len(spec.Map), s.TasksPerNode)
	case s.TasksPerNode > s.GPUsPerNode && !spec.Share:
		return fmt.Errorf("slurm template: tasks_per_node = %d but gpus_per_node = %d: each rank needs a GPU of its own, and train would stop on every node; set tasks_per_node = %d, or gpu_share = true in %s to let ranks share GPUs (MPS)", s.TasksPerNode, s.GPUsPerNode, s.GPUsPerNode, s.Config)
	case s.TasksPerNode < s.GPUsPerNode && spec.Map == nil:
		warn("tasks_per_node = %d drives %d of the %d GPUs per node: %d would sit idle; set tasks_per_node = %d (one rank per GPU)", s.TasksPerNode, s.TasksPerNode, s.GPUsPerNode, s.GPUsPerNode-s.TasksPerNode, s.GPUsPerNode)
	}
	return nil
}

// maxLocalRanks bounds topo -np, the ranks planned on one node: far above
// any node's cores, and a plan of two lines a rank stays short (a billion
// ranks ran the machine out of memory).
const maxLocalRanks = 4096

// plotCmd draws loss and accuracy curves of one or more runs' -metrics files.
func plotCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain plot", flag.ContinueOnError)
	metrics := fs.String("metrics", "", "comma-separated -metrics JSON-lines `files` of train, overlaid (required)")
	out := fs.String("out", "out/curves.png", "PNG `file` to write, in a directory that exists")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: hpctrain plot -metrics FILE[,FILE...] [-out FILE.png]

Draws the loss and accuracy curves of one or more training runs, from the
files their -metrics flag wrote, overlaid in one PNG; each run is named by
the shortest end of its path that tells it from the others. A resumed
run's file is drawn once per epoch, from the run that went on.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return err
	}
	if otherRank("plot", stderr) {
		return nil
	}
	if *metrics == "" {
		return cli.Usage(fmt.Errorf("plot needs -metrics FILE[,FILE...]"))
	}
	if err := chart.MetricsPNG(*out, strings.Split(*metrics, ",")); err != nil {
		if errors.Is(err, chart.ErrInput) {
			return cli.Usage(err) // a file that is not there or not metrics, an -out in no directory
		}
		return err
	}
	// On standard error, like every status line: -out /dev/stdout (a
	// pipe to a viewer) must get the PNG and nothing else.
	fmt.Fprintf(stderr, "hpctrain: wrote %s\n", *out)
	return nil
}
