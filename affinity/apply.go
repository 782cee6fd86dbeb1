package affinity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Allowed returns the calling thread's affinity mask (sched_getaffinity),
// which before Apply is the mask the process was started with: what
// mpirun, srun, taskset or a cgroup cpuset allow it.
func Allowed() (CPUSet, error) {
	for n := 1024; n <= MaxCPU; n *= 2 {
		set := unix.NewCPUSet(n)
		err := unix.SchedGetaffinityDynamic(0, set)
		if errors.Is(err, unix.EINVAL) && n < MaxCPU {
			continue // the kernel's mask is wider; try a bigger buffer
		}
		if err != nil {
			return CPUSet{}, fmt.Errorf("sched_getaffinity: %w", err)
		}
		var cpus []int
		for c := range n {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		return CPUSet{cpus}, nil
	}
	panic("affinity: unreachable")
}

func kernelSet(s CPUSet) unix.CPUSetDynamic {
	set := unix.NewCPUSet(max(s.Max()+1, 1024))
	for _, c := range s.cpus {
		set.Set(c)
	}
	return set
}

// setThread sets the affinity of thread tid (0: the calling thread).
func setThread(tid int, s CPUSet) error {
	return unix.SchedSetaffinityDynamic(tid, kernelSet(s))
}

// Procs is the GOMAXPROCS for threads compute threads: one P (the Go
// scheduler's right to run Go code) more. With every P busy, Go's sysmon
// takes the P of any goroutine that has been in a C call (oneDNN,
// OpenBLAS, MPI) for 20 µs, and as long as it finds such calls it wakes
// every 20 µs, preempting a compute thread each time. A spare P stops it:
// 300 resnet8 steps at 2 threads on a 2-core VM made 270-280K context
// switches with GOMAXPROCS 2 and 72-75K with 3, and ran at 1,519-1,753
// against 1,841-1,983 samples/s. The spare P runs what else the rank has
// (the MPI hand-off, signal handling), confined to the rank's cores. The
// other half of keeping sysmon quiet is Workers.Run's periodic yield.
func Procs(threads int) int { return threads + 1 }

// Apply binds the process to p: every thread that exists now, Go's and any
// C library's, gets the mask p.CPUs (each /proc/self/task entry in turn,
// repeated until a pass finds no new thread), and threads created later
// inherit it. It then sets runtime.GOMAXPROCS(Procs(p.Threads)) and, for C
// libraries that read them when they start their own threads,
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, and with per-worker CPUs
// GOMP_CPU_AFFINITY ("4 5 6 7") and KMP_AFFINITY
// ("granularity=fine,explicit,proclist=[4,5,6,7]").
//
// For policy none only the thread counts are set. Call Apply before
// NewWorkers: it resets the mask of every existing thread, pinned workers'
// included.
func Apply(p Plan) error {
	if p.Threads < 1 {
		panic("affinity: Apply of a plan with no threads")
	}
	if p.Policy != None && !p.CPUs.IsEmpty() {
		if err := confineAll(p.CPUs); err != nil {
			return fmt.Errorf("bind process to cpus %s: %w", p.CPUs, err)
		}
	}
	runtime.GOMAXPROCS(Procs(p.Threads))
	env := [][2]string{
		{"OMP_NUM_THREADS", strconv.Itoa(p.Threads)},
		{"OPENBLAS_NUM_THREADS", strconv.Itoa(p.Threads)},
	}
	if len(p.WorkerCPUs) > 0 {
		env = append(env,
			[2]string{"GOMP_CPU_AFFINITY", joinInts(p.WorkerCPUs, " ")},
			[2]string{"KMP_AFFINITY", "granularity=fine,explicit,proclist=[" + joinInts(p.WorkerCPUs, ",") + "]"})
	}
	for _, kv := range env {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			return fmt.Errorf("set %s: %w", kv[0], err)
		}
	}
	return nil
}

// confineAll sets the mask of every thread of the process. A thread that
// a not yet confined thread creates during a pass inherits the old mask,
// so passes repeat until one finds no thread it has not set.
func confineAll(s CPUSet) error {
	set := kernelSet(s)
	done := make(map[int]bool)
	for pass := 0; pass < 100; pass++ {
		tids, err := threadIDs()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			err := unix.SchedSetaffinityDynamic(tid, set)
			if errors.Is(err, unix.ESRCH) {
				continue // the thread exited
			}
			if err != nil {
				return fmt.Errorf("sched_setaffinity thread %d: %w", tid, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
	return errors.New("threads kept appearing while binding them")
}

func threadIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// CurrentCPU returns the CPU the calling thread is running on
// (getcpu(2)); it may have moved by the time the caller looks, unless the
// thread is pinned to one CPU.
func CurrentCPU() int {
	var cpu uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	if e != 0 {
		return -1
	}
	return int(cpu)
}

// ThreadMasks returns the Cpus_allowed_list of every thread of the
// process, keyed by thread id, from /proc/self/task/*/status.
func ThreadMasks() (map[int]CPUSet, error) {
	tids, err := threadIDs()
	if err != nil {
		return nil, err
	}
	out := make(map[int]CPUSet, len(tids))
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				s, err := Parse(v)
				if err != nil {
					return nil, err
				}
				out[tid] = s
			}
		}
	}
	return out, nil
}
