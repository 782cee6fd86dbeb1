package bench

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/train"
)

// ScalingReport is `hpctrain bench scaling`'s result.
type ScalingReport struct {
	Model       string  `json:"model"`
	Input       string  `json:"input"`
	Classes     int     `json:"classes"`
	Batch       int     `json:"batch_per_rank"`
	Threads     int     `json:"threads"`
	Optimizer   string  `json:"optimizer"`
	BucketMB    float64 `json:"bucket_mb"`
	BucketBytes int     `json:"bucket_bytes"`        // -bucket-mb resolved as training resolves it
	Bind        string  `json:"bind"`                // as the compute steps ran: cores (pinned) or none
	BindNote    string  `json:"bind_note,omitempty"` // why -bind cores ran unpinned
	Collective  string  `json:"collective"`          // shm (the node-shared all-reduce) or mpi (MPI_Allreduce)
	Host        string  `json:"host"`

	// The measurement job: its ranks and nodes (mpirun), the compute
	// profile of its slowest rank (all ranks measured at once, sharing
	// the node as in training), every rank's median step.
	JobRanks     int         `json:"job_ranks"`
	JobNodes     int         `json:"job_nodes"`
	Compute      Profile     `json:"compute"`
	ComputeMS    float64     `json:"compute_step_ms"`
	RankStepMS   []float64   `json:"rank_step_ms"`
	GradBytes    int         `json:"grad_bytes"`
	Layers       []LayerTime `json:"layers"`
	ComputeScale float64     `json:"compute_scale"`

	// The all-reduce sweep of the job (none in a job of one), its fit
	// time = a + b*bytes, and the link it gives. With -collective shm and
	// ranks sharing a node, Intra is the node's whole sum (t = alpha +
	// n/bandwidth), not a hop; SweepShared says the sweep ran on node
	// memory.
	SweepShared bool         `json:"sweep_node_shared,omitempty"`
	Sweep       []SweepPoint `json:"sweep,omitempty"`
	FitAUS      float64      `json:"fit_a_us,omitempty"`
	FitBUSMB    float64      `json:"fit_b_us_per_mb,omitempty"`
	FitOff      float64      `json:"fit_off_max,omitempty"` // the factor by which the sweep's worst point is off the fit (>= 1)
	Intra       *Link        `json:"intra_node,omitempty"`
	Measured    *Link        `json:"inter_node_measured,omitempty"`

	Rows []ScalingRow `json:"rows"`
	// What makes the prediction less sure, as rank 0 warns of it.
	Warnings []string `json:"warnings,omitempty"`
}

// SweepPoint is one size of the all-reduce sweep.
type SweepPoint struct {
	Bytes  int     `json:"bytes"`
	TimeUS float64 `json:"time_us"` // median over rounds of the mean over ranks
}

// ScalingRow is one predicted configuration.
type ScalingRow struct {
	Nodes            int     `json:"nodes"`
	RanksPerNode     int     `json:"ranks_per_node"`
	Ranks            int     `json:"ranks"`
	Link             string  `json:"link"`
	LinkGbps         float64 `json:"link_gbit_s"`
	AlphaUS          float64 `json:"alpha_us"`
	Algorithm        string  `json:"algorithm"`
	StepMS           float64 `json:"step_ms"`
	CommMS           float64 `json:"comm_ms"`
	ExposedMS        float64 `json:"comm_exposed_ms"`
	SamplesPerSecond float64 `json:"samples_per_second"`
	Efficiency       float64 `json:"efficiency"`
}

// Scaling is `hpctrain bench scaling`: it measures this node's compute step
// (the training step itself, train.Step, with the engine's gradient
// buckets and when backward hands each over) and, under mpirun with two or
// more ranks, the all-reduce's latency and bandwidth; then predicts the
// samples/s and efficiency of nodes x ranks-per-node ranks for each link
// (scaling_model.go). connect opens the job's communicator (a job of one
// without a launcher); the caller closes it.
func Scaling(args []string, connect func() (mpi.Comm, error), out io.Writer) (err error) {
	fs := newFlags("scaling")
	name := fs.String("model", "cnn", "network: a built-in model ("+strings.Join(model.Names(), ", ")+") or a description FILE.toml")
	input := fs.String("input", "28x28x1", "shape of one input sample, `HxWxC`")
	classes := fs.Int("classes", 10, "number of classes")
	batch := fs.Int("batch", 64, "batch per rank (as hpctrain train -batch)")
	threads := fs.Int("threads", 0, "compute threads per rank (default: as hpctrain train's, the cores in the allowed mask / the ranks per node of the prediction)")
	steps := fs.Int("steps", 20, "timed compute steps")
	opt := fs.String("optimizer", "sgd", "update in each step: "+fmt.Sprint(optim.Names())+" or none")
	bucketMB := fs.Float64("bucket-mb", -1, "gradient buckets as hpctrain train -bucket-mb (0: one all-reduce after backward; -1: auto, 1 MB with 2 or more threads, else 0)")
	bind := fs.String("bind", "cores", "compute threads: cores (pinned, disjoint by local rank when the node has cores enough; else unpinned, and the report says bind none and why) or none")
	coll := fs.String("collective", "auto", "gradient all-reduce as hpctrain train -collective on the CPU: auto or shm (the node's ranks sum in shared memory, MPI between nodes), mpi (MPI_Allreduce)")
	nodesFlag := fs.String("nodes", "1,2,4,8,16,64,256", "predict for these node counts, `LIST`")
	perNode := fs.Int("ranks-per-node", 0, "ranks per node of the prediction (0: as in this job)")
	linkFlag := fs.String("link-gbps", "25,100,400", "inter-node links to predict for, Gbit/s, `LIST` (empty: only the measured one)")
	alphaUS := fs.Float64("alpha-us", 0, "inter-node latency per message for -link-gbps, microseconds (0: the measured one when this job spans nodes, else 10)")
	shmAlpha := fs.Float64("shm-alpha-us", 0, "intra-node latency per message, microseconds (0: measured, in a job of 2 or more ranks on one node)")
	shmGbps := fs.Float64("shm-gbps", 0, "intra-node bandwidth, Gbit/s (0: measured, in a job of 2 or more ranks on one node)")
	scale := fs.Float64("compute-scale", 1, "multiply the measured compute times by `F` (to model other cores, or ranks sharing them)")
	maxMB := fs.Float64("sweep-max-mb", 0, "largest all-reduce of the sweep, MB (0: the gradients'); the sweep is 4 KiB x 4^k up to it")
	withStep := fs.Bool("sweep-step", true, "in the sweep, run a compute step before each all-reduce, as training does (false: calls back to back)")
	js := fs.String("json", "", "write the report as JSON to `FILE` (rank 0)")
	png := fs.String("png", "", "write efficiency and samples/s vs nodes, one line per link, to `FILE` (rank 0)")
	quiet := fs.Bool("q", false, "print only the prediction table")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	err = firstBad(intIn("batch", *batch, 1, train.MaxBatch), intIn("threads", *threads, 0, train.MaxThreads),
		intIn("steps", *steps, 1, 1e6), intIn("classes", *classes, 1, 1<<20), intIn("ranks-per-node", *perNode, 0, 1<<12),
		floatIn("compute-scale", *scale, 1e-6, 1e6), floatIn("alpha-us", *alphaUS, 0, 1e9),
		floatIn("shm-alpha-us", *shmAlpha, 0, 1e9), floatIn("shm-gbps", *shmGbps, 0, 1e6), floatIn("sweep-max-mb", *maxMB, 0, 1<<10),
		func() error {
			if *bucketMB != -1 && !(*bucketMB >= 0 && *bucketMB <= train.MaxBucketMB) {
				return fmt.Errorf("-bucket-mb %v: must be 0 to %d, or -1 (auto)", *bucketMB, train.MaxBucketMB)
			}
			return nil
		})
	if err != nil {
		return cli.Usage(err)
	}
	if *bind != "cores" && *bind != "none" {
		return cli.Usage(fmt.Errorf("-bind %q: cores or none", *bind))
	}
	switch *coll {
	case "auto":
		*coll = "shm"
	case "shm", "mpi":
	default:
		return cli.Usage(fmt.Errorf("-collective %q: auto, shm or mpi", *coll))
	}
	nodes, err := intList(*nodesFlag)
	if err != nil {
		return cli.Usage(fmt.Errorf("-nodes: %w", err))
	}
	links, err := floatList(*linkFlag)
	if err != nil {
		return cli.Usage(fmt.Errorf("-link-gbps: %w", err))
	}
	in, err := model.ParseShape(*input)
	if err != nil {
		return cli.Usage(fmt.Errorf("-input: %w", err))
	}
	if (*shmAlpha > 0) != (*shmGbps > 0) {
		// 0 is "measured": one given and the other 0 was said to be
		// missing when both were given.
		return cli.Usage(fmt.Errorf("give both -shm-alpha-us and -shm-gbps above 0 (0: measured), not -shm-alpha-us %v with -shm-gbps %v", *shmAlpha, *shmGbps))
	}
	c, err := connect()
	if err != nil {
		return err
	}
	// Every flag but rank 0's outputs shapes the collectives (the sweep's
	// sizes and buffer), or whether a rank refuses: the same on every
	// rank, or none runs.
	if err := agreeFlags(c, fs, "json", "png", "q"); err != nil {
		return err
	}
	if err := outputsWritable(c, writable("json", *js), writable("png", *png)); err != nil {
		return err
	}
	// What needs only the flags and the job's layout is checked before
	// minutes of measuring. Every node must hold as many ranks: the
	// layout (nodes = ranks / ranks per node) is read from it.
	locals, err := gatherRanks(c, float64(c.LocalSize()))
	if err != nil {
		return err
	}
	if slices.Min(locals) != slices.Max(locals) {
		return cli.Usage(fmt.Errorf("the job's nodes hold %v to %v ranks: bench scaling needs as many ranks on every node", slices.Min(locals), slices.Max(locals)))
	}
	jobNodes := max(1, c.Size()/max(1, c.LocalSize()))
	if len(links) == 0 && jobNodes == 1 {
		return cli.Usage(fmt.Errorf("no inter-node link: give -link-gbps, or run under mpirun across nodes to measure one"))
	}
	if *coll == "mpi" && jobNodes > 1 && c.LocalSize() > 1 {
		// Its sweep mixes hops within and between nodes, which one
		// latency and bandwidth cannot stand for.
		return cli.Usage(fmt.Errorf("-collective mpi in a job of %d nodes x %d ranks: the sweep mixes intra- and inter-node hops, which the model cannot tell apart; measure the network with one rank per node (mpirun --map-by ppr:1:node), or use -collective shm with -shm-alpha-us and -shm-gbps", jobNodes, c.LocalSize()))
	}
	if *coll == "shm" && jobNodes > 1 && c.LocalSize() > 1 && *shmAlpha <= 0 {
		// The sweep would time the node's sum and the network together
		// (as training's node-shared all-reduce runs), and only the
		// node's sum, given, can be taken away: refused here, not after
		// the compute steps and the sweep.
		return cli.Usage(sharedNeedsSum(jobNodes))
	}
	rpn := *perNode
	if rpn == 0 {
		rpn = max(1, c.LocalSize())
	}
	if rpn > 1 && *shmAlpha <= 0 && !(c.Size() > 1 && jobNodes == 1) {
		// The intra-node figures come from the flags or from a sweep
		// within one node, which this job does not make.
		return cli.Usage(fmt.Errorf("%d ranks per node, but no intra-node figures: run under mpirun with 2 or more ranks on one node to measure them, or give -shm-alpha-us and -shm-gbps", rpn))
	}
	if *threads == 0 {
		if *threads, err = autoThreads(*bind, rpn); err != nil {
			return err
		}
	}
	rank0 := c.Rank() == 0
	if !rank0 {
		out = io.Discard
	}
	info := out // the measurements; -q: only the table
	if *quiet {
		info = io.Discard
	}
	rep := ScalingReport{
		Model: *name, Input: in.String(), Classes: *classes, Batch: *batch, Threads: *threads, Optimizer: *opt,
		BucketMB: *bucketMB, BucketBytes: resolveBucketBytes(*bucketMB, *threads), Bind: *bind, Collective: *coll, Host: c.Host(),
		JobRanks: c.Size(), JobNodes: jobNodes, ComputeScale: *scale,
	}
	// -bind cores pins the node's ranks on disjoint cpus of the mask
	// where they fit, else they run unpinned (as training under
	// --oversubscribe): the report says which ran, not which was asked.
	if rep.Bind == "cores" {
		mask, err := affinity.Allowed()
		if err != nil {
			return err
		}
		if need := c.LocalSize() * rep.Threads; need > mask.Len() {
			rep.Bind = "none"
			rep.BindNote = fmt.Sprintf("-bind cores, but %d rank(s) x %d thread(s) need %d cpus and the mask %s has %d: not bound", c.LocalSize(), rep.Threads, need, mask, mask.Len())
		}
	}

	// Compute: every rank at once, as in training; the slowest rank sets
	// the pace of a synchronous job.
	if err := c.Barrier(); err != nil {
		return err
	}
	prof, layers, step, done, err := measureCompute(rep, c, *steps)
	if err != nil {
		return err
	}
	defer done()
	all, err := gatherRanks(c, prof.StepMS())
	if err != nil {
		return err
	}
	rep.RankStepMS = all
	slow := slices.Max(all)
	rep.Compute = prof.scaled(*scale * slow / prof.StepMS())
	rep.ComputeMS = rep.Compute.StepMS()
	rep.GradBytes = prof.GradBytes()
	rep.Layers = layers
	fmt.Fprintf(info, "# hpctrain bench scaling: %s %s, batch %d per rank, %d thread(s), optimizer %s, bucket_mb %g (%d bytes), bind %s, collective %s; measured on %s, job of %d rank(s) on %d node(s)\n",
		rep.Model, rep.Input, rep.Batch, rep.Threads, rep.Optimizer, rep.BucketMB, rep.BucketBytes, bindText(rep), rep.Collective, rep.Host, rep.JobRanks, rep.JobNodes)
	fmt.Fprintf(info, "# compute step %.2f ms (slowest rank; ranks %s; x%g): forward+loss %.2f, backward %.2f, update %.2f, other %.2f ms\n",
		rep.ComputeMS, fmtList(all, "%.2f"), *scale, rep.Compute.ForwardMS, rep.Compute.BackwardMS, rep.Compute.UpdateMS, rep.Compute.OtherMS)
	fmt.Fprintf(info, "# gradients %d bytes in %d bucket(s), all-reduced in this order, started at (ms after backward's start):", rep.GradBytes, len(rep.Compute.Buckets))
	for _, b := range rep.Compute.Buckets {
		fmt.Fprintf(info, " %d B @ %.2f;", b.Bytes, b.ReadyMS)
	}
	fmt.Fprintln(info)
	if c.LocalSize() > rpn {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the prediction is for %d rank(s) per node, but this job's %d ranks per node measured the compute step at once, "+
			"%d thread(s) each: it is the step of a more crowded node than the prediction's; measure it in a job of %d rank(s) per node",
			rpn, c.LocalSize(), rep.Threads, rpn))
	}

	// The node's sum given by flags: needed before the sweep of a job
	// across nodes, to take it away.
	flagIntra := func() *Link {
		if *shmAlpha <= 0 {
			return nil
		}
		name := "shm"
		if *coll == "shm" {
			name = "shm-sum"
		}
		return &Link{Name: name, AlphaUS: *shmAlpha, Gbps: *shmGbps, Source: "flag"}
	}

	// Communication: the all-reduce sweep of this job.
	if c.Size() > 1 {
		top, limit := 4<<10, max(rep.GradBytes, 64<<10)
		if *maxMB > 0 {
			limit = max(int(*maxMB*(1<<20)), 16<<10)
		}
		for top*4 <= limit {
			top *= 4
		}
		between := func() {}
		if *withStep {
			between = step
		}
		// 4 KiB x 4^k, and the gradients' own size, the one that matters.
		var sizes []int
		for sz := 4 << 10; sz <= top; sz *= 4 {
			sizes = append(sizes, sz)
		}
		if g := rep.GradBytes &^ 3; g > 0 && *maxMB == 0 && !slices.Contains(sizes, g) {
			sizes = append(sizes, g)
			slices.Sort(sizes)
		}
		// The sweep's buffer: node memory, as training's gradients, for
		// the node-shared all-reduce (nil, and MPI_Allreduce on the
		// rank's own memory, where the job's nodes cannot share: one
		// rank each, or sizes that differ).
		var buf []float32
		if *coll == "shm" {
			if buf, err = c.NodeBuffer(slices.Max(sizes) / 4); err != nil {
				return err
			}
			rep.SweepShared = buf != nil
		}
		// On a shared, noisy node a sweep's times may not grow with the
		// size; measured again, twice at most, before giving up. Every
		// rank has the same times (gathered), so the same verdict.
		var a, b float64
		const sweeps = 3
		for try := 1; ; try++ {
			if rep.Sweep, err = sweepAllreduce(c, sizes, buf, between); err != nil {
				return err
			}
			x, t := make([]float64, len(rep.Sweep)), make([]float64, len(rep.Sweep))
			for i, s := range rep.Sweep {
				x[i], t[i] = float64(s.Bytes), s.TimeUS*1e-6
			}
			if a, b, err = fitLine(x, t); err == nil {
				break
			}
			if try == sweeps {
				return fmt.Errorf("the all-reduce sweep, measured %d times: %w: this node is too noisy to fit the all-reduce's cost now; run again later, or give it with -shm-alpha-us and -shm-gbps (one node) or -alpha-us and -link-gbps", sweeps, err)
			}
			fmt.Fprintf(info, "# the all-reduce sweep does not fit (%v): measuring it again\n", err)
		}
		rep.FitAUS, rep.FitBUSMB = a*1e6, b*1e6*(1<<20)
		var warning string
		if rep.FitOff, warning = fitOff(rep.Sweep, a, b); warning != "" {
			rep.Warnings = append(rep.Warnings, warning)
		}
		what := "MPI_Allreduce"
		if rep.SweepShared {
			what = "node-shared all-reduce"
		}
		fmt.Fprintf(info, "# %s over this job's %d ranks (IallreduceSum+Wait, as training):", what, c.Size())
		for _, s := range rep.Sweep {
			fmt.Fprintf(info, " %d B %.1f us;", s.Bytes, s.TimeUS)
		}
		fmt.Fprintf(info, "\n# fit %s -> ", fitText(a, b))
		switch {
		case rep.SweepShared && rep.JobNodes == 1:
			l := sumFromFit(a, b)
			l.Name, l.Source = "shm-sum", "measured"
			rep.Intra = &l
			fmt.Fprintf(info, "the node's sum: %.1f us + n / %.2f Gbit/s (the job is on one node)\n", l.AlphaUS, l.Gbps)
		case rep.SweepShared:
			sum := flagIntra()
			if sum == nil {
				return cli.Usage(sharedNeedsSum(rep.JobNodes))
			}
			l, err := interFromSharedFit(a, b, *sum, rep.JobNodes)
			if err != nil {
				return err
			}
			l.Name, l.Source = "measured", "measured"
			rep.Measured = &l
			fmt.Fprintf(info, "less the node's sum (%.1f us, %.2f Gbit/s), an all-reduce over one rank per node: per message alpha %.1f us, %.2f Gbit/s (inter-node)\n", sum.AlphaUS, sum.Gbps, l.AlphaUS, l.Gbps)
		default:
			l := linkFromFit(a, b, c.Size())
			l.Source = "measured"
			fmt.Fprintf(info, "per message alpha %.1f us, %.2f Gbit/s ", l.AlphaUS, l.Gbps)
			if rep.JobNodes == 1 {
				l.Name = "shm"
				rep.Intra = &l
				fmt.Fprintln(info, "(intra-node: the job is on one node)")
			} else {
				l.Name = "measured"
				rep.Measured = &l
				fmt.Fprintln(info, "(inter-node: the job spans nodes)")
			}
		}
	}
	if l := flagIntra(); l != nil {
		rep.Intra = l
	}
	// The node-shared figures describe the node-shared sum and the hop's
	// MPI_Allreduce: one cannot stand for the other.
	if isSum := rep.Intra != nil && rep.Intra.Name == "shm-sum"; rpn > 1 && isSum != (*coll == "shm") {
		what := "an MPI_Allreduce hop's"
		if isSum {
			what = "the node-shared sum's"
		}
		return cli.Usage(fmt.Errorf("-collective %s, but the intra-node figures are %s: measure them with the same -collective", *coll, what))
	}
	intra := Link{Name: "shm"}
	if rep.Intra != nil {
		intra = *rep.Intra
	}
	var inter []Link
	if rep.Measured != nil {
		inter = append(inter, *rep.Measured)
	}
	alpha := *alphaUS
	if alpha == 0 {
		alpha = 10
		if rep.Measured != nil {
			alpha = rep.Measured.AlphaUS
		}
	}
	for _, g := range links {
		inter = append(inter, Link{Name: strconv.FormatFloat(g, 'g', -1, 64) + "G", AlphaUS: alpha, Gbps: g, Source: "flag"})
	}
	if len(inter) == 0 {
		return cli.Usage(fmt.Errorf("no inter-node link: give -link-gbps, or run under mpirun across nodes to measure one"))
	}
	switch {
	case rpn > 1 && *coll == "shm":
		fmt.Fprintf(info, "# the node's shared sum of n bytes: %.1f us + n / %.2f Gbit/s (%s), then between nodes one all-reduce of n bytes per node\n", intra.AlphaUS, intra.Gbps, intra.Source)
	case rpn > 1:
		fmt.Fprintf(info, "# intra-node: alpha %.1f us, %.2f Gbit/s (%s)\n", intra.AlphaUS, intra.Gbps, intra.Source)
	}
	fmt.Fprintf(info, "# inter-node alpha %.1f us for -link-gbps; efficiency = compute-only step / predicted step\n", alpha)
	for _, l := range inter {
		for _, n := range nodes {
			t := Topo{Nodes: n, PerNode: rpn, Intra: intra, Inter: l, Shared: *coll == "shm"}
			pr := predict(rep.Compute, t)
			rep.Rows = append(rep.Rows, ScalingRow{
				Nodes: n, RanksPerNode: rpn, Ranks: t.Ranks(), Link: l.Name, LinkGbps: l.Gbps, AlphaUS: l.AlphaUS,
				Algorithm: pr.Algorithm, StepMS: pr.StepMS, CommMS: pr.CommMS, ExposedMS: pr.ExposedMS,
				SamplesPerSecond: float64(t.Ranks()*rep.Batch) / (pr.StepMS / 1e3),
				Efficiency:       rep.ComputeMS / pr.StepMS,
			})
		}
	}
	if rank0 {
		printScaling(out, rep.Rows)
		if err := writeJSON(*js, rep); err != nil {
			return err
		}
		if *png != "" {
			if err := scalingPNG(*png, rep); err != nil {
				return err
			}
		}
		for _, w := range rep.Warnings { // under the table, where they are read
			fmt.Fprintf(os.Stderr, "hpctrain: warning: %s\n", w)
		}
	}
	return nil
}

// sharedNeedsSum is the refusal of a job across nodes whose ranks sum
// through shared memory and that is not given the node's sum.
func sharedNeedsSum(nodes int) error {
	return fmt.Errorf("this job spans %d nodes and its ranks sum through shared memory: give the node's sum (-shm-alpha-us, -shm-gbps, as a one-node job of as many ranks measures it) to take it away from the network's figures", nodes)
}

// bindText is the report's bind as the header line says it: what the
// compute steps ran with, and why where it is not what was asked.
func bindText(r ScalingReport) string {
	if r.BindNote != "" {
		return r.Bind + " (" + r.BindNote + ")"
	}
	return r.Bind
}

// resolveBucketBytes is -bucket-mb as hpctrain train resolves it: -1 (auto)
// overlaps only when a rank has a second core, 1 MB buckets; else one
// all-reduce after backward.
func resolveBucketBytes(mb float64, threads int) int {
	if mb < 0 {
		if threads >= 2 {
			return 1 << 20
		}
		return 0
	}
	return int(mb * (1 << 20))
}

// measureCompute times the training step (train.Step, as hpctrain train
// runs it, on random data) with no peers: a communicator of one, whose
// all-reduces cost nothing but are started where training starts them, so
// that each bucket's start is when backward hands it over. It returns the
// medians over steps and the per-layer forward and backward times.
func measureCompute(r ScalingReport, c mpi.Comm, steps int) (prof Profile, layers []LayerTime, step func(), done func(), err error) {
	in, err := model.ParseShape(r.Input)
	if err != nil {
		return Profile{}, nil, nil, nil, cli.Usage(fmt.Errorf("-input %q: %w", r.Input, err))
	}
	if err := checkNet(data.NewBudget(c.LocalSize()), r.Model, in, r.Classes, r.Batch); err != nil {
		return Profile{}, nil, nil, nil, err
	}
	net, err := model.New(r.Model, in, r.Classes, r.Batch, 1)
	if err != nil {
		return Profile{}, nil, nil, nil, err
	}
	var opt optim.Optimizer
	if r.Optimizer != "none" {
		if opt, err = newOptimizer(r.Optimizer, net); err != nil {
			return Profile{}, nil, nil, nil, err
		}
	}
	// Pinned to this rank's share of the mask when the node's ranks fit
	// on disjoint cores, else unpinned (as training under --oversubscribe).
	var w *affinity.Workers
	if r.Bind == "cores" {
		mask, err := affinity.Allowed()
		if err != nil {
			return Profile{}, nil, nil, nil, err
		}
		cpus := mask.CPUs()
		if lo := c.LocalRank() * r.Threads; c.LocalSize()*r.Threads <= len(cpus) {
			if w, err = affinity.NewWorkers(cpus[lo : lo+r.Threads]); err != nil {
				return Profile{}, nil, nil, nil, err
			}
		}
	}
	if w == nil {
		w = affinity.NewUnpinnedWorkers(r.Threads)
	}
	if err = w.Lead(); err != nil { // as train: the caller computes worker 0's share
		w.Close()
		return Profile{}, nil, nil, nil, err
	}
	procs := runtime.GOMAXPROCS(affinity.Procs(r.Threads)) // as train sets it
	done = func() { w.Close(); runtime.GOMAXPROCS(procs) }
	defer func() {
		if err != nil {
			done()
		}
	}()
	net.SetParallel(w)
	if opt != nil {
		opt.SetParallel(w)
	}
	sched, err := optim.NewSchedule(optim.ScheduleConfig{Name: "constant"}, 0.01, steps+3)
	if err != nil {
		return Profile{}, nil, nil, nil, err
	}
	st := train.NewStep(net, opt, sched, mpi.NewSingle(), r.BucketBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, r.Batch*net.In.Size())
	for i := range x {
		x[i] = rng.Float32()
	}
	labels := make([]int32, r.Batch)
	for i := range labels {
		labels[i] = int32(rng.IntN(r.Classes))
	}
	st.Load(x, labels)
	nb := st.Buckets()
	var fwd, bwd, upd, tot []time.Duration
	ready := make([][]time.Duration, nb)
	bytes := make([]int, nb)
	for i := -3; i < steps; i++ {
		t := time.Now()
		if _, err := st.Run(max(i, 0)); err != nil {
			return Profile{}, nil, nil, nil, fmt.Errorf("step on random data: %w", err)
		}
		d := time.Since(t)
		if i < 0 {
			continue
		}
		m := st.Marks
		fwd = append(fwd, m.Forward.Sub(m.Start))
		bwd = append(bwd, m.Backward.Sub(m.Forward))
		upd = append(upd, m.Updated.Sub(m.Reduced))
		tot = append(tot, d)
		for k := 0; k < nb; k++ {
			s, _, b := st.Bucket(k)
			bytes[k] = b
			// A bucket started in Wait (after backward) is ready at
			// backward's end.
			ready[k] = append(ready[k], min(max(s.Sub(m.Forward), 0), m.Backward.Sub(m.Forward)))
		}
	}
	ms := func(d []time.Duration) float64 { return 1e3 * median(d).Seconds() }
	p := Profile{ForwardMS: ms(fwd), BackwardMS: ms(bwd), UpdateMS: ms(upd)}
	p.OtherMS = max(0, ms(tot)-p.ForwardMS-p.BackwardMS-p.UpdateMS)
	for k := 0; k < nb; k++ {
		p.Buckets = append(p.Buckets, BucketTiming{Bytes: bytes[k], ReadyMS: min(ms(ready[k]), p.BackwardMS)})
	}
	// Per layer, as bench step reports it.
	lf, lb := layerTimes(net, r.Batch, labels, 5)
	for i, l := range net.Layers {
		layers = append(layers, LayerTime{Name: l.Name(), ForwardMS: 1e3 * lf[i].Seconds(), BackwardMS: 1e3 * lb[i].Seconds()})
	}
	st.Load(x, labels)
	step = func() {
		if _, err := st.Run(0); err != nil {
			panic("bench: step on random data failed: " + err.Error())
		}
	}
	return p, layers, step, done, nil
}

// gatherRanks returns every rank's v, in rank order.
func gatherRanks(c mpi.Comm, v float64) ([]float64, error) {
	all := make([]float64, c.Size())
	all[c.Rank()] = v
	if err := c.AllreduceSum64(all); err != nil {
		return nil, err
	}
	return all, nil
}

// sweepAllreduce times the gradient all-reduce as training calls it
// (IallreduceSum, then Wait) for each of sizes (bytes, multiples of 4), on
// a prefix of buf (node memory, for the node-shared all-reduce) or, when
// buf is nil, of the rank's own memory: per
// size, 5 rounds of a block of calls, ranks in lock-step, each call after
// between (training's compute step between its all-reduces: the network
// idle, the cores busy); the time is the median over rounds of the mean
// over ranks of the calls' alone.
func sweepAllreduce(c mpi.Comm, sizes []int, buf []float32, between func()) ([]SweepPoint, error) {
	if buf == nil {
		buf = make([]float32, slices.Max(sizes)/4)
	}
	var req mpi.Request
	var spent time.Duration // in the calls, not between them
	call := func(b []float32) error {
		between()
		t := time.Now()
		c.IallreduceSum(b, &req)
		err := req.Wait()
		spent += time.Since(t)
		return err
	}
	var pts []SweepPoint
	for _, size := range sizes {
		b := buf[:size/4]
		clear(b)
		if err := c.Barrier(); err != nil {
			return nil, err
		}
		spent = 0
		for i := 0; i < 2; i++ {
			if err := call(b); err != nil {
				return nil, err
			}
		}
		// Blocks of about 20 ms of calls, agreed on by all ranks.
		probe, err := gatherRanks(c, spent.Seconds()/2)
		if err != nil {
			return nil, err
		}
		iters := int(min(50, max(1, math.Ceil(0.02/slices.Max(probe)))))
		const rounds = 5
		per := make([]float64, rounds)
		for k := range per {
			if err := c.Barrier(); err != nil {
				return nil, err
			}
			spent = 0
			for i := 0; i < iters; i++ {
				if err := call(b); err != nil {
					return nil, err
				}
			}
			all, err := gatherRanks(c, spent.Seconds()/float64(iters))
			if err != nil {
				return nil, err
			}
			var s float64
			for _, v := range all {
				s += v
			}
			per[k] = s / float64(len(all))
		}
		slices.Sort(per)
		pts = append(pts, SweepPoint{Bytes: size, TimeUS: 1e6 * per[rounds/2]})
	}
	return pts, nil
}

// fitText is the fit t = a + b*bytes (seconds) as the report prints it, in
// us and us per MB (2^20 bytes, as -bucket-mb's and -sweep-max-mb's): the
// line said "us/MB x bytes", which read as written put 6.5 MB at 12.46 us
// x 6520360.
func fitText(a, b float64) string {
	return fmt.Sprintf("time = %.1f us + %.2f us/MB x MB (MB = 2^20 bytes)", 1e6*a, 1e6*b*(1<<20))
}

// maxFitOff is how far (a factor) a sweep point may be off the fit before
// bench scaling warns that the prediction rests on a line its own
// measurements do not follow.
const maxFitOff = 2

// fitOff is the factor by which the sweep point furthest from the fit t =
// a + b*bytes (seconds) is off it (measured / fitted or its inverse, >= 1)
// and, where that is more than maxFitOff, a warning naming the point. The
// fit weighs each point by 1/t^2, so a point measured far too slow (ranks
// that share busy cores, other jobs) moves it little: a run on a busy
// 2-core node fitted 1095 us at the gradients' 6.5 MB where it measured
// 16826 us, and predicted from the fit in silence.
func fitOff(pts []SweepPoint, a, b float64) (float64, string) {
	worst, at := 1.0, -1
	for i, p := range pts {
		fit := 1e6 * (a + b*float64(p.Bytes))
		if f := max(p.TimeUS/fit, fit/p.TimeUS); f > worst {
			worst, at = f, i
		}
	}
	if worst <= maxFitOff {
		return worst, ""
	}
	p := pts[at]
	return worst, fmt.Sprintf("the all-reduce sweep is off its fit by %.1fx at %d bytes (measured %.1f us, fitted %.1f us): "+
		"the node was busy (other jobs, or ranks sharing cores), and the prediction rests on the fit; "+
		"run again on a quieter node, or give the figures by flag (-shm-alpha-us and -shm-gbps, -alpha-us)",
		worst, p.Bytes, p.TimeUS, 1e6*(a+b*float64(p.Bytes)))
}

// printScaling prints the prediction table.
func printScaling(out io.Writer, rows []ScalingRow) {
	fmt.Fprintf(out, "%6s %6s %10s %8s %10s %10s %10s %12s %10s\n", "nodes", "ranks", "link", "alg", "step_ms", "comm_ms", "exposed_ms", "samples/s", "efficiency")
	for _, r := range rows {
		fmt.Fprintf(out, "%6d %6d %10s %8s %10.2f %10.2f %10.2f %12.0f %10.3f\n",
			r.Nodes, r.Ranks, linkLabel(r), r.Algorithm, r.StepMS, r.CommMS, r.ExposedMS, r.SamplesPerSecond, r.Efficiency)
	}
}

// linkLabel is a row's link as the table and the chart name it: a link
// given by flag as given, the measured one rounded.
func linkLabel(r ScalingRow) string {
	if r.Link == "measured" {
		return "meas:" + strconv.FormatFloat(r.LinkGbps, 'g', 3, 64) + "G"
	}
	return r.Link
}

// legendLabel is a link as the chart's legend names it: its bandwidth and
// latency with their units ("25 Gbit/s, 5 us"; the table's "25G" left the
// reader to guess bits or bytes, and the latency was on no chart).
func legendLabel(r ScalingRow) string {
	s := strconv.FormatFloat(r.LinkGbps, 'g', 4, 64) + " Gbit/s, " + strconv.FormatFloat(r.AlphaUS, 'g', 4, 64) + " us"
	if r.Link == "measured" {
		return "measured: " + s
	}
	return s
}

// scalingPNG draws efficiency and samples/s against nodes, one line per
// link.
func scalingPNG(path string, rep ScalingReport) error {
	eff, rate := plot.New(), plot.New()
	eff.Title.Text = scalingTitle(rep)
	rate.Title.Text = "samples/s (predicted)"
	eff.Y.Label.Text = "efficiency (compute step / step)"
	rate.Y.Label.Text = "samples/s"
	eff.Y.Min, eff.Y.Max = 0, 1.05
	for _, p := range []*plot.Plot{eff, rate} {
		p.X.Label.Text = "nodes"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		p.Legend.Top = p == rate
		p.Legend.Left = p == rate
	}
	rate.Y.Scale = plot.LogScale{}
	rate.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var order []string
	byLink := map[string][]ScalingRow{}
	for _, r := range rep.Rows {
		l := linkLabel(r)
		if _, ok := byLink[l]; !ok {
			order = append(order, l)
		}
		byLink[l] = append(byLink[l], r)
	}
	for i, l := range order {
		rows := byLink[l] // in node order: -nodes is sorted (intList)
		e, s := make(plotter.XYs, len(rows)), make(plotter.XYs, len(rows))
		for j, r := range rows {
			e[j] = plotter.XY{X: float64(r.Nodes), Y: r.Efficiency}
			s[j] = plotter.XY{X: float64(r.Nodes), Y: r.SamplesPerSecond}
		}
		for _, ps := range []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{eff, e}, {rate, s}} {
			line, pts, err := plotter.NewLinePoints(ps.xy)
			if err != nil {
				return fmt.Errorf("scaling chart: %w", err)
			}
			line.LineStyle.Width = vg.Points(1.5)
			line.LineStyle.Color = plotutil.Color(i)
			pts.GlyphStyle = draw.GlyphStyle{Color: line.LineStyle.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
			ps.p.Add(line, pts)
			ps.p.Legend.Add(legendLabel(rows[0]), line)
		}
	}
	return savePanels(path, eff, rate)
}

// firstRPN is the ranks per node of the rows.
// scalingTitle is the chart's title. With one rank per node there is no
// node-shared sum: the model, as training, uses MPI_Allreduce alone, and
// the title says mpi whatever -collective (it said shm).
func scalingTitle(rep ScalingReport) string {
	rpn, coll := firstRPN(rep.Rows), rep.Collective
	if rpn == 1 {
		coll = "mpi"
	}
	return fmt.Sprintf("%s, batch %d/rank, %d rank(s)/node, %s: efficiency", rep.Model, rep.Batch, rpn, coll)
}

func firstRPN(rows []ScalingRow) int {
	if len(rows) == 0 {
		return 0
	}
	return rows[0].RanksPerNode
}

// Bounds of the prediction's -nodes and -link-gbps: past them the
// arithmetic means nothing (and the rank count could overflow).
const (
	maxNodes         = 1 << 20
	minGbps, maxGbps = 1e-3, 1e6
)

// intList parses "1,2,4": sorted, each once (the chart's lines join the
// points in this order).
func intList(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxNodes {
			return nil, fmt.Errorf("%q: want integers 1 to %d separated by commas", s, maxNodes)
		}
		v = append(v, n)
	}
	slices.Sort(v)
	return slices.Compact(v), nil
}

// floatList parses "25,100,400"; empty is none.
func floatList(s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var v []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x >= minGbps && x <= maxGbps) {
			return nil, fmt.Errorf("%q: want numbers %g to %g separated by commas", s, minGbps, maxGbps)
		}
		v = append(v, x)
	}
	slices.Sort(v)
	return slices.Compact(v), nil
}

// autoThreads is hpctrain train's -threads when left out: the physical
// cores of the allowed mask shared by rpn ranks (at least 1).
func autoThreads(bind string, rpn int) (int, error) {
	policy, err := affinity.ParsePolicy(bind)
	if err != nil {
		return 0, err
	}
	topo, err := affinity.ReadTopology("/")
	if err != nil {
		return 0, err
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return 0, err
	}
	pl, err := topo.PlanOversubscribed(mask, affinity.Request{LocalSize: rpn, Policy: policy, PreferNUMA: -1})
	if err != nil {
		return 0, err
	}
	return pl.Threads, nil
}

// fmtList formats numbers separated by commas.
func fmtList(v []float64, f string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(s, ",")
}
