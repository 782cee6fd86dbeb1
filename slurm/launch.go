package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// LaunchInfo is a process's place in the job: its rank among all processes
// and among those on its host, and where those numbers came from.
type LaunchInfo struct {
	Rank, Size int // global rank in [0, Size)
	// LocalRank in [0, LocalSize) among the ranks on this host; -1 and 0 when
	// no source knew them and the job spans several nodes.
	LocalRank, LocalSize int
	Source               string // source of Rank/Size: "mpi", "ompi", "pmi", "slurm" or "default"
	LocalSource          string // source of LocalRank/LocalSize, same names plus "single-host"
	Decision             string // one line for `hpctrain -v` saying what was trusted and what was ignored
}

// Resolve decides a process's rank, size, local rank and local size from,
// in decreasing order of trust:
//
//  1. MPI itself: mpiRank and mpiSize from MPI_Comm_rank/size, when the
//     caller has them (pass mpiSize <= 0 when it does not).
//  2. Open MPI's launcher: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}.
//  3. PMI: PMI_RANK or PMIX_RANK with PMI_SIZE, and MPICH Hydra's
//     MPI_LOCALRANKID/MPI_LOCALNRANKS. (PMIx exports no size variable, so
//     PMIX_RANK alone is not enough.)
//  4. SLURM: SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS,
//     SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE
//     at SLURM_NODEID, trusted only inside an srun step (SLURM_STEP_ID
//     set). The batch shell also has SLURM_PROCID=0, and every rank that
//     mpirun starts inherits it, so outside a step those values describe the
//     batch shell, not the rank.
//
// Rank and size come from the first source that has both; a later source
// that disagrees with them is ignored and named in Decision. The local rank
// and size come from the first source that has both and agrees. With no
// source at all the process is rank 0 of 1. When no source gives the local
// numbers, they are assumed equal to the global ones if the job is on one
// host (SLURM_NNODES unset or 1), and unknown (-1, 0) otherwise.
//
// A variable that is set but not a non-negative integer, or a rank outside
// its size, is an error naming the variables. getenv is os.Getenv in main.
func Resolve(mpiRank, mpiSize int, getenv func(string) string) (LaunchInfo, error) {
	if getenv == nil {
		panic("slurm: Resolve with nil getenv")
	}
	if mpiSize > 0 && (mpiRank < 0 || mpiRank >= mpiSize) {
		panic("slurm: Resolve with MPI rank outside [0, size)")
	}
	var cands []candidate
	if mpiSize > 0 {
		cands = append(cands, candidate{name: "mpi", what: "MPI_Comm_rank/size", rank: mpiRank, size: mpiSize, localRank: -1})
	}
	for _, read := range []func(func(string) string) (candidate, error){readOMPI, readPMI, readSLURM} {
		c, err := read(getenv)
		if err != nil {
			return LaunchInfo{}, fmt.Errorf("resolve launch: %w", err)
		}
		cands = append(cands, c)
	}

	info := LaunchInfo{Rank: 0, Size: 1, LocalRank: -1, Source: "default"}
	var notes []string
	chosen := -1
	for i, c := range cands {
		if c.size <= 0 {
			if c.note != "" {
				notes = append(notes, c.note)
			}
			continue
		}
		if chosen < 0 {
			chosen = i
			info.Rank, info.Size, info.Source = c.rank, c.size, c.name
			continue
		}
		if c.rank != info.Rank || c.size != info.Size {
			notes = append(notes, fmt.Sprintf("ignored %s (rank %d of %d) disagreeing with %s", c.what, c.rank, c.size, cands[chosen].what))
			cands[i].size = -1 // not a source of local numbers either
		}
	}
	for _, c := range cands {
		if c.size >= 0 && c.localSize > 0 {
			info.LocalRank, info.LocalSize, info.LocalSource = c.localRank, c.localSize, c.name
			if c.localWhat != "" {
				notes = append(notes, "local rank from "+c.localWhat)
			}
			break
		}
	}
	if info.LocalSize == 0 {
		nn, err := intVar(getenv, "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
		if err != nil {
			return LaunchInfo{}, fmt.Errorf("resolve launch: %w", err)
		}
		if nn <= 1 {
			info.LocalRank, info.LocalSize, info.LocalSource = info.Rank, info.Size, "single-host"
			notes = append(notes, "local rank = global rank (no launcher gave one; assuming one host)")
		} else {
			notes = append(notes, fmt.Sprintf("local rank unknown (no launcher gave one and SLURM_NNODES=%d)", nn))
		}
	}
	var src string
	if chosen >= 0 {
		src = cands[chosen].what
	} else {
		src = "default (no MPI, launcher or SLURM step information)"
	}
	info.Decision = fmt.Sprintf("rank %d of %d (local %d of %d) from %s", info.Rank, info.Size, info.LocalRank, info.LocalSize, src)
	if len(notes) > 0 {
		info.Decision += "; " + strings.Join(notes, "; ")
	}
	return info, nil
}

// candidate is one source's view. size <= 0: the source has no rank/size;
// localSize == 0: no local numbers.
type candidate struct {
	name, what           string
	rank, size           int
	localRank, localSize int
	localWhat            string
	note                 string // said in Decision when the source is unusable
}

func readOMPI(getenv func(string) string) (candidate, error) {
	c := candidate{name: "ompi", what: "OMPI_COMM_WORLD_RANK/SIZE", localWhat: "OMPI_COMM_WORLD_LOCAL_RANK/SIZE"}
	// fill first, then c: in "return c, c.fill(...)" the order in which c
	// and the call are evaluated is unspecified (Go spec, Order of
	// evaluation), so c could be returned unfilled.
	err := c.fill(getenv, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	return c, err
}

func readPMI(getenv func(string) string) (candidate, error) {
	rankVar := "PMI_RANK"
	if getenv(rankVar) == "" && getenv("PMIX_RANK") != "" {
		rankVar = "PMIX_RANK"
	}
	c := candidate{name: "pmi", what: rankVar + "/PMI_SIZE", localWhat: "MPI_LOCALRANKID/MPI_LOCALNRANKS"}
	err := c.fill(getenv, rankVar, "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	if err == nil && c.size == 0 && rankVar == "PMIX_RANK" {
		c.note = "ignored PMIX_RANK (PMIx exports no size)"
	}
	return c, err
}

func readSLURM(getenv func(string) string) (candidate, error) {
	c := candidate{name: "slurm", what: "SLURM_PROCID/NTASKS (srun step)", localRank: -1}
	if first(getenv, "SLURM_STEP_ID", "SLURM_STEPID") == "" {
		if getenv("SLURM_PROCID") != "" {
			c.note = "ignored SLURM_PROCID (no SLURM_STEP_ID: batch-shell value, inherited by every rank mpirun starts)"
		}
		return c, nil
	}
	rank, err := intVar(getenv, "SLURM_PROCID")
	if err != nil {
		return c, err
	}
	size, err := intVar(getenv, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
	if err != nil {
		return c, err
	}
	if getenv("SLURM_PROCID") == "" || size == 0 {
		return c, nil
	}
	if rank >= size {
		return c, fmt.Errorf("SLURM_PROCID=%d not below the step's task count %d", rank, size)
	}
	c.rank, c.size = rank, size
	if getenv("SLURM_LOCALID") == "" {
		return c, nil
	}
	lr, err := intVar(getenv, "SLURM_LOCALID")
	if err != nil {
		return c, err
	}
	tpn := first(getenv, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
	if tpn == "" {
		return c, nil
	}
	node, err := intVar(getenv, "SLURM_NODEID")
	if err != nil {
		return c, err
	}
	counts, err := ParseTasksPerNode(tpn)
	if err != nil {
		return c, fmt.Errorf("read SLURM_TASKS_PER_NODE: %w", err)
	}
	if node >= len(counts) {
		return c, fmt.Errorf("SLURM_NODEID=%d but SLURM_TASKS_PER_NODE=%q lists %d nodes", node, tpn, len(counts))
	}
	if lr >= counts[node] {
		return c, fmt.Errorf("SLURM_LOCALID=%d not below the node's task count %d", lr, counts[node])
	}
	c.localRank, c.localSize, c.localWhat = lr, counts[node], "SLURM_LOCALID/TASKS_PER_NODE"
	return c, nil
}

// fill reads the four variables of a launcher into c. A source with only
// some of rank/size (or of local rank/size) set counts as not having them.
func (c *candidate) fill(getenv func(string) string, rankV, sizeV, lrankV, lsizeV string) error {
	c.localRank = -1
	vals := make([]int, 4)
	set := make([]bool, 4)
	for i, name := range []string{rankV, sizeV, lrankV, lsizeV} {
		s := getenv(name)
		if s == "" {
			continue
		}
		n, err := atoiVar(name, s)
		if err != nil {
			return err
		}
		vals[i], set[i] = n, true
	}
	if set[0] && set[1] && vals[1] > 0 {
		if vals[0] >= vals[1] {
			return fmt.Errorf("%s=%d not below %s=%d", rankV, vals[0], sizeV, vals[1])
		}
		c.rank, c.size = vals[0], vals[1]
	}
	if set[2] && set[3] && vals[3] > 0 {
		if vals[2] >= vals[3] {
			return fmt.Errorf("%s=%d not below %s=%d", lrankV, vals[2], lsizeV, vals[3])
		}
		c.localRank, c.localSize = vals[2], vals[3]
	}
	return nil
}

// intVar parses the first set variable of names; 0 when none is set.
func intVar(getenv func(string) string, names ...string) (int, error) {
	for _, name := range names {
		if s := getenv(name); s != "" {
			return atoiVar(name, s)
		}
	}
	return 0, nil
}

// ParseTasksPerNode expands SLURM's compressed per-node task counts, as in
// SLURM_TASKS_PER_NODE="2(x3),1", into one count per node: [2 2 2 1].
func ParseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		count, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("bad element %q in %q: want N or N(xM)", part, s)
			}
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 0 || r < 1 || r > MaxHosts || len(out)+r > MaxHosts {
			return nil, fmt.Errorf("bad element %q in %q: want N or N(xM)", part, s)
		}
		for ; r > 0; r-- {
			out = append(out, n)
		}
	}
	return out, nil
}
