package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// ExitRequeue is the exit status by which the trainer tells the batch script
// "I wrote a checkpoint because I was asked to stop (SIGUSR1/SIGTERM); requeue
// me". The script rendered by [Render] answers it with
// `scontrol requeue $SLURM_JOB_ID` and exits 0. 85 is outside the codes used
// by the shell (126, 127, 128+n), by Go (2 for a panic) and by mpirun for its
// own failures.
const ExitRequeue = 85

// Env is what SLURM tells a process about its job through the environment.
// Integer fields that SLURM did not set are 0, except ProcID, LocalID and
// NodeID, which are -1 when unset (0 is a valid id).
type Env struct {
	JobID        string   // SLURM_JOB_ID
	JobName      string   // SLURM_JOB_NAME
	ProcID       int      // SLURM_PROCID: global task id within a step; -1 outside a step
	LocalID      int      // SLURM_LOCALID: task id on this node; -1 outside a step
	NTasks       int      // SLURM_NTASKS (or SLURM_NPROCS)
	NNodes       int      // SLURM_NNODES (or SLURM_JOB_NUM_NODES)
	NodeID       int      // SLURM_NODEID: this node's index in NodeList; -1 if unset
	CPUsPerTask  int      // SLURM_CPUS_PER_TASK; 0 if not requested
	GPUsOnNode   int      // SLURM_GPUS_ON_NODE; 0 if none
	RestartCount int      // SLURM_RESTART_COUNT: times the job was requeued; 0 on the first run
	StepID       string   // SLURM_STEP_ID (or SLURM_STEPID); "" in the batch shell and under salloc
	NodeList     []string // SLURM_JOB_NODELIST (or SLURM_NODELIST), expanded
}

// ReadEnv reads the SLURM_* variables through getenv (pass os.Getenv).
// inJob reports whether the process is inside a SLURM allocation
// (SLURM_JOB_ID or SLURM_JOBID is set). Outside one it returns a zero Env
// with the -1 ids and no error. A variable that is set but malformed is an
// error naming it.
func ReadEnv(getenv func(string) string) (env Env, inJob bool, err error) {
	if getenv == nil {
		panic("slurm: ReadEnv with nil getenv")
	}
	env = Env{ProcID: -1, LocalID: -1, NodeID: -1}
	env.JobID = first(getenv, "SLURM_JOB_ID", "SLURM_JOBID")
	if env.JobID == "" {
		return env, false, nil
	}
	env.JobName = getenv("SLURM_JOB_NAME")
	env.StepID = first(getenv, "SLURM_STEP_ID", "SLURM_STEPID")
	ints := []struct {
		dst   *int
		names []string
	}{
		{&env.ProcID, []string{"SLURM_PROCID"}},
		{&env.LocalID, []string{"SLURM_LOCALID"}},
		{&env.NTasks, []string{"SLURM_NTASKS", "SLURM_NPROCS"}},
		{&env.NNodes, []string{"SLURM_NNODES", "SLURM_JOB_NUM_NODES"}},
		{&env.NodeID, []string{"SLURM_NODEID"}},
		{&env.CPUsPerTask, []string{"SLURM_CPUS_PER_TASK"}},
		{&env.GPUsOnNode, []string{"SLURM_GPUS_ON_NODE"}},
		{&env.RestartCount, []string{"SLURM_RESTART_COUNT"}},
	}
	for _, v := range ints {
		for _, name := range v.names {
			s := getenv(name)
			if s == "" {
				continue
			}
			n, err := atoiVar(name, s)
			if err != nil {
				return env, true, err
			}
			*v.dst = n
			break
		}
	}
	if s := first(getenv, "SLURM_JOB_NODELIST", "SLURM_NODELIST"); s != "" {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return env, true, fmt.Errorf("read SLURM_JOB_NODELIST: %w", err)
		}
		env.NodeList = hosts
	}
	return env, true, nil
}

// first returns the value of the first of names that is set and non-empty.
func first(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// atoiVar parses a non-negative decimal integer held in variable name.
func atoiVar(name, s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("read %s=%q: want a non-negative integer", name, s)
	}
	return n, nil
}
