package train

import (
	"errors"
	"fmt"
	"io"
	"os"

	"hpctrain/affinity"
	"hpctrain/gpu"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// placement is where a rank's compute runs: its plan, its workers and its
// GPU.
type placement struct {
	plan    affinity.Plan
	workers *affinity.Workers
	// gpu is the GPU this rank drives, in CUDA's numbering (after
	// CUDA_VISIBLE_DEVICES); -1 on a node without one, or with -gpus
	// none. Opening it is the compute backend's job.
	gpu int
}

// gpuChoice is the node's GPUs and which one each local rank drives.
type gpuChoice struct {
	top    *gpu.Topology // nil: no GPU used
	assign gpu.Assignment
}

// place chooses this rank's GPU if the node has any (chooseGPU), plans
// this rank's cores from the node's topology and the mask the launcher
// gave the process (near its GPU), applies the plan, checks that no two
// ranks of a node share a core, and starts the compute workers. It is
// collective: every rank gets the same verdict, so a bad -cpu-list or
// CUDA_VISIBLE_DEVICES on one rank stops all of them.
//
// More local ranks than CPUs in the mask (mpirun --oversubscribe) cannot be
// bound disjointly: the rank then runs unbound (policy none) and rank 0
// says so.
func place(cfg Config, c mpi.Comm, log func(string, ...any)) (*placement, error) {
	// A request this node cannot meet (cpus outside the mask, more local
	// ranks than GPUs) is bad input, as a bad flag is: exit 2.
	g, err := chooseGPUSaid(cfg, c, log)
	if err != nil {
		return nil, err
	}
	// The launcher may have bound each rank itself (Open MPI does unless
	// given --bind-to none): a rank is planned among the ranks sharing its
	// mask. Every rank compares, whatever its configuration.
	mask, merr := affinity.Allowed()
	plan, err := planInMask(cfg, c, g, mask, merr)
	if err != nil {
		return nil, err
	}
	p := &placement{gpu: -1}
	if g.assign.GPUs != nil {
		p.gpu = g.assign.GPUs[c.LocalRank()]
		plan.Device = g.top.Label(p.gpu)
	}
	if plan.Warning != "" {
		log("hpctrain: warning: %s", plan.Warning)
	}
	w, err := bind(c, plan)
	if err != nil {
		return nil, err
	}
	p.plan, p.workers = plan, w
	return p, nil
}

// planInMask plans this rank's cores inside mask, the allowed mask the
// launcher gave it (merr: the error reading it), among the ranks of its
// node sharing that mask (affinity.MaskGroup). Collective: every rank
// gets the same verdict.
func planInMask(cfg Config, c mpi.Comm, g gpuChoice, mask affinity.CPUSet, merr error) (affinity.Plan, error) {
	group, groupSize, err := affinity.MaskGroup(c, mask)
	if err = agree(c, "comparing cpu masks", errors.Join(merr, err)); err != nil {
		return affinity.Plan{}, err
	}
	plan, err := planRank(cfg, c, g, mask, group, groupSize)
	if err = agree(c, "planning cpu binding", cli.Usage(err)); err != nil {
		return affinity.Plan{}, err
	}
	return plan, nil
}

// bind applies plan to the process, checks that no two ranks of a node
// share a core, and starts the compute workers, the calling goroutine
// leading them (affinity.Workers.Lead). Collective.
func bind(c mpi.Comm, plan affinity.Plan) (*affinity.Workers, error) {
	var err error
	if plan.Policy != affinity.None {
		err = affinity.Apply(plan)
	}
	if err = agree(c, "binding to cores", err); err != nil {
		return nil, err
	}
	if plan.Policy == affinity.Cores {
		if err := affinity.CheckDisjoint(c, plan.CPUs); err != nil {
			if errors.Is(err, affinity.ErrOverlap) {
				err = cli.Usage(err) // -cpu-list, taskset: bad input, exit 2
			}
			return nil, err
		}
	}
	var w *affinity.Workers
	if plan.WorkerCPUs != nil {
		w, err = affinity.NewWorkers(plan.WorkerCPUs)
	} else {
		w = affinity.NewUnpinnedWorkers(plan.Threads)
	}
	if err == nil {
		// The training goroutine computes worker 0's share itself: no
		// hand-off per parallel loop with one thread, one fewer with more.
		if err = w.Lead(); err != nil {
			w.Close()
		}
	}
	if err = agree(c, "starting compute workers", err); err != nil {
		return nil, err
	}
	return w, nil
}

// PlaceCPU places the compute threads of a command that runs a trained
// network on the CPU (hpctrain eval, predict) as a training run places its
// own with the default placement (-bind cores, no -cpu-list, no -use-smt)
// and no GPU: threads compute threads on this rank (0: the physical cores
// in the allowed mask / the ranks sharing it on this node; on a hybrid CPU
// its performance cores, where there is one per rank), planned inside the
// mask the launcher gave the process among the node's ranks sharing it,
// the process confined to the plan's cores and worker i pinned to the
// i-th (more ranks than cpus: unbound, as train runs them). The calling
// goroutine leads the workers (affinity.Workers.Lead): it must be the one
// that computes and closes them.
//
// It is collective over c: every rank gets the same verdict, so a rank
// whose cores cannot be had stops them all. The plan's Warning, if any,
// is for the caller to print (on one rank). A single process plans with
// mpi.NewSingle.
func PlaceCPU(c mpi.Comm, threads int) (*affinity.Workers, affinity.Plan, error) {
	var err error
	if threads < 0 || threads > MaxThreads {
		err = cli.Usage(fmt.Errorf("-threads %d: must be 0 to %d", threads, MaxThreads))
	}
	if err = agree(c, "checking -threads", err); err != nil {
		return nil, affinity.Plan{}, err
	}
	mask, merr := affinity.Allowed()
	plan, err := planCPU(c, threads, mask, merr)
	if err != nil {
		return nil, affinity.Plan{}, err
	}
	w, err := bind(c, plan)
	if err != nil {
		return nil, affinity.Plan{}, err
	}
	return w, plan, nil
}

// planCPU is PlaceCPU's plan for mask (collective).
func planCPU(c mpi.Comm, threads int, mask affinity.CPUSet, merr error) (affinity.Plan, error) {
	cfg := Defaults() // -bind cores, no -cpu-list, no -use-smt
	cfg.Threads = threads
	return planInMask(cfg, c, gpuChoice{}, mask, merr)
}

// discoverGPUs finds this node's GPUs (a variable, for tests to give a
// node of GPUs where there is none).
var discoverGPUs = func() *gpu.Topology { return gpu.Discover("/") }

// chooseGPU finds the node's GPUs (none is not an error: the CPU path runs
// as on a node without them), applies CUDA_VISIBLE_DEVICES and assigns
// every local rank its GPU. Every local rank computes the same assignment.
func chooseGPU(cfg Config, c mpi.Comm) (gpuChoice, error) {
	spec, err := gpu.ParseSpec(cfg.GPUs, cfg.GPUShare)
	if err != nil {
		return gpuChoice{}, fmt.Errorf("config: gpus = %q: %w", cfg.GPUs, err)
	}
	if spec.Off || cfg.Device == "cpu" {
		// -device cpu on a GPU node: the GPUs are not this run's, so
		// neither their count nor CUDA_VISIBLE_DEVICES can refuse it.
		return gpuChoice{}, nil
	}
	top, err := discoverGPUs().Visible(os.LookupEnv("CUDA_VISIBLE_DEVICES"))
	if err != nil {
		return gpuChoice{}, err
	}
	a, err := top.Assign(c.LocalSize(), spec)
	if err != nil || a.GPUs == nil {
		return gpuChoice{}, err
	}
	return gpuChoice{top: top, assign: a}, nil
}

// chooseGPUSaid is chooseGPU agreed on by every rank (a request the node
// cannot meet is a usage error), with the choice said on log: the
// topology's note, the reason, and a warning if any. Collective.
func chooseGPUSaid(cfg Config, c mpi.Comm, log func(string, ...any)) (gpuChoice, error) {
	g, err := chooseGPU(cfg, c)
	if err = agree(c, "choosing a GPU", cli.Usage(err)); err != nil {
		return gpuChoice{}, err
	}
	if g.top != nil {
		if g.top.Note != "" {
			log("hpctrain: gpu: %s", g.top.Note)
		}
		log("hpctrain: gpu: %s", g.assign.Reason)
		if g.assign.Warning != "" {
			log("hpctrain: warning: %s", g.assign.Warning)
		}
	}
	return g, nil
}

// sysRoot is where planRank reads the node's topology (a variable, for
// tests to plan on the sysfs fixtures of package affinity).
var sysRoot = "/"

// planRank plans this rank's cores inside mask; with GPUs, each local
// rank's cores are taken near its GPU (affinity.Request.Near). Where the
// launcher bound the node's ranks to masks of their own (fewer than the
// node's ranks share this one), the rank is planned as group of groupSize
// within its mask, so that the ranks sharing it use all of it; with GPUs
// the node's numbering stays, as the GPUs are assigned by it.
func planRank(cfg Config, c mpi.Comm, g gpuChoice, mask affinity.CPUSet, group, groupSize int) (affinity.Plan, error) {
	policy, err := affinity.ParsePolicy(cfg.Bind)
	if err != nil {
		return affinity.Plan{}, err
	}
	topo, err := affinity.ReadTopology(sysRoot)
	if err != nil {
		return affinity.Plan{}, err
	}
	req := affinity.Request{LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Threads: cfg.Threads,
		Policy: policy, UseSMT: cfg.UseSMT, PreferNUMA: -1}
	if g.top != nil {
		req.Near = g.top.Near(g.assign, topo)
	} else if groupSize > 0 && groupSize < c.LocalSize() {
		req.LocalRank, req.LocalSize = group, groupSize
	}
	if cfg.CPUList != "" {
		if req.CPUList, err = affinity.Parse(cfg.CPUList); err != nil {
			return affinity.Plan{}, fmt.Errorf("cpu_list: %w", err)
		}
	}
	p, err := topo.PlanOversubscribed(mask, req)
	p.LocalRank, p.LocalSize = c.LocalRank(), c.LocalSize() // the node's numbering, as reports show it
	return p, err
}

func (p *placement) close() { p.workers.Close() }

// report prints every rank's binding on rank 0, in rank order, like Open
// MPI's --report-bindings, with its GPU (collective).
func (p *placement) report(c mpi.Comm, out io.Writer) error {
	lines, err := affinity.Report(c, p.plan)
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		for _, l := range lines {
			fmt.Fprintln(out, l)
		}
	}
	return nil
}
