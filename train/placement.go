package train

import (
	"fmt"
	"io"

	"hpctrain/affinity"
	"hpctrain/mpi"
)

// placement is where a rank's compute runs: its plan and its workers.
type placement struct {
	plan    affinity.Plan
	workers *affinity.Workers
}

// place plans this rank's cores from the node's topology and the mask the
// launcher gave the process, applies the plan, checks that no two ranks of
// a node share a core, and starts the compute workers. It is collective:
// every rank gets the same verdict, so a bad -cpu-list on one rank stops
// all of them.
//
// More local ranks than CPUs in the mask (mpirun --oversubscribe) cannot be
// bound disjointly: the rank then runs unbound (policy none) and rank 0
// says so.
func place(cfg Config, c mpi.Comm, log func(string, ...any)) (*placement, error) {
	plan, err := planRank(cfg, c)
	if err = agree(c, "planning cpu binding", err); err != nil {
		return nil, err
	}
	if plan.Warning != "" {
		log("hpctrain: warning: %s", plan.Warning)
	}
	if plan.Policy != affinity.None {
		err = affinity.Apply(plan)
	}
	if err = agree(c, "binding to cores", err); err != nil {
		return nil, err
	}
	if plan.Policy == affinity.Cores {
		if err := affinity.CheckDisjoint(c, plan.CPUs); err != nil {
			return nil, err
		}
	}
	var w *affinity.Workers
	if plan.WorkerCPUs != nil {
		w, err = affinity.NewWorkers(plan.WorkerCPUs)
	} else {
		w = affinity.NewUnpinnedWorkers(plan.Threads)
	}
	if err = agree(c, "starting compute workers", err); err != nil {
		return nil, err
	}
	return &placement{plan: plan, workers: w}, nil
}

func planRank(cfg Config, c mpi.Comm) (affinity.Plan, error) {
	policy, err := affinity.ParsePolicy(cfg.Bind)
	if err != nil {
		return affinity.Plan{}, err
	}
	topo, err := affinity.ReadTopology("/")
	if err != nil {
		return affinity.Plan{}, err
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return affinity.Plan{}, err
	}
	req := affinity.Request{LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Threads: cfg.Threads,
		Policy: policy, UseSMT: cfg.UseSMT, PreferNUMA: -1}
	if cfg.CPUList != "" {
		if req.CPUList, err = affinity.Parse(cfg.CPUList); err != nil {
			return affinity.Plan{}, fmt.Errorf("cpu_list: %w", err)
		}
	}
	if policy != affinity.None && req.CPUList.IsEmpty() && c.LocalSize() > mask.Len() {
		plan, err := topo.Plan(mask, affinity.Request{LocalRank: req.LocalRank, LocalSize: req.LocalSize, Threads: max(cfg.Threads, 1), Policy: affinity.None})
		plan.Warning = fmt.Sprintf("%d ranks on this node but %d cpus in the allowed mask %s: oversubscribed, so ranks are not bound (bind none); use fewer ranks for pinned runs", c.LocalSize(), mask.Len(), mask)
		return plan, err
	}
	return topo.Plan(mask, req)
}

func (p *placement) close() { p.workers.Close() }

// report prints every rank's binding on rank 0, in rank order, like Open
// MPI's --report-bindings (collective).
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
