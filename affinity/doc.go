// Package affinity binds each MPI rank's compute threads to its own
// physical cores, chosen by local rank from the machine's topology and the
// process's allowed CPU mask.
//
// The steps, in the order hpctrain runs them:
//
//	t, _ := affinity.ReadTopology("/")        // sysfs, no hwloc
//	mask, _ := affinity.Allowed()             // what mpirun/srun/cgroup allow
//	p, _ := t.Plan(mask, affinity.Request{...})
//	affinity.CheckDisjoint(comm, p.CPUs)      // collective: same verdict on all ranks
//	affinity.Apply(p)                         // confine the process, GOMAXPROCS, OMP env
//	w, _ := affinity.NewWorkers(p.WorkerCPUs) // one pinned thread per core
//	w.Lead()                                  // the caller becomes worker 0
//	layer.Forward(w, ...)                     // w satisfies model.Parallel
//
// # Pinned versus confined
//
// Only the Workers' threads are pinned, each to exactly one CPU: worker i
// runs on p.WorkerCPUs[i] and nowhere else. After Lead, worker 0 is the
// thread of the goroutine that calls Run (the training loop's), pinned
// until Close, so a rank with one compute thread hands nothing off: a
// hand-off cost 2.5-58 µs on a 2-core VM (BenchmarkWorkersRun), a led
// Run with trivial work 0.06 µs on one worker and 0.2 µs on two
// (BenchmarkWorkersRunLed). Every other thread of the
// process (the main goroutine's, Go's sysmon, GC workers and idle Ms,
// threads of C libraries such as MPI progress threads or OpenMP teams) is
// only confined: Apply gives each the whole rank mask p.CPUs, and threads
// created later inherit it, so they may run on any of the rank's CPUs but
// never on another rank's. OpenMP and OpenBLAS teams started after Apply
// are told their thread count and per-thread CPUs through OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS, GOMP_CPU_AFFINITY and KMP_AFFINITY.
//
// Sharing the rank's cores with those threads has one cost to watch: Go's
// sysmon. It wakes every 20 µs while it finds Ps to take from long C calls,
// each time preempting a compute thread. Two things keep it asleep: a
// spare P (Procs), and Run letting the goroutine that leads be rescheduled
// every few milliseconds (a Gosched), so that Go never takes it for a
// goroutine hogging its P for 10 ms and starts taking its P away.
//
// # Hybrid CPUs
//
// On a CPU with cores of more than one class (Intel P-cores and E-cores
// since Alder Lake, Arm big.LITTLE: Topology.Kinds, see ReadTopology) a
// synchronous data-parallel step waits for its slowest rank, and a rank's
// workers split every parallel loop into equal chunks, so one rank on
// E-cores, or one E-core among a rank's P-cores, paces the whole job
// (E-cores have fewer, narrower FMA units and lower clocks: roughly half a
// P-core on dense float work, not measured here), and nothing in the step
// times says why. Plan therefore:
//
//   - gives each rank (policy cores) cores of one class, fastest first:
//     local ranks 0, 1, ... fill the P-cores in the mask rank by rank, the
//     next ranks the E-cores, then any slower class; a rank mixes classes
//     only when its threads fit in no class's remaining cores (1 rank of
//     12 threads on 8 P-cores and 8 E-cores gets 8 P and 4 E).
//   - defaults Threads (every policy, and -cpu-list) to the fastest
//     class's cores in the mask divided by the local ranks where that is
//     at least 1, not to all cores: 8, not 16, for one rank on an
//     i9-12900, whose E-cores would add threads no faster than the slowest
//     of them.
//   - warns, the same text on every rank, when ranks got different classes
//     or a mix: which local ranks got which, that the job runs at the
//     slowest class's pace, and the -threads that keeps every rank on the
//     fastest class (or, where not even one thread each fits, how many
//     ranks do); -cpu-list remains for placing ranks by hand.
//   - plans a mask or -cpu-list of one class (E-cores only) as on a
//     machine of that class, without a warning: its ranks keep pace.
//
// This has run on sysfs fixtures only (testdata/hybrid8p8e, an
// i9-12900-like layout, and testdata/biglittle4l4b), never on a hybrid CPU.
//
// # Invariants
//
//   - A CPUSet is sorted and free of duplicates; its text form is the
//     kernel's cpulist syntax ("0-3,8").
//   - Plan never returns a CPU outside the mask it is given, and the plans
//     of the ranks of one node are pairwise disjoint under policy cores,
//     provided every local rank passes the same Request but for LocalRank.
//     When the request does not fit, Plan shrinks it (Plan.Warning says
//     how) rather than overlap ranks, and fails only with more ranks than
//     logical CPUs.
//   - Under policy cores a worker gets one logical CPU per physical core,
//     the lowest-numbered sibling in the mask; SMT siblings are used only
//     with Request.UseSMT or as the documented last-resort fallback.
//   - On a hybrid CPU, under policy cores without Request.Near, a rank's
//     workers are on cores of one class unless its threads fit in no
//     class's remaining cores.
//   - Workers.Run allocates nothing and returns only when every chunk is
//     done. A worker's thread never returns to the Go runtime's pool: it
//     exits with the worker, so no other goroutine inherits its one-CPU
//     mask; the leading thread gets its mask back at Close.
//   - CheckDisjoint and Report are collective and give every rank the same
//     result.
//
// Misuse (a negative CPU number, Run on closed Workers, Apply of an empty
// plan) panics with a message starting "affinity: "; system, configuration
// and cross-rank failures are returned as errors saying what was being
// done.
//
// Non-goals: memory binding (mbind/numactl --membind; first touch by a
// pinned worker places its pages locally anyway), GPU topology (package
// gpu finds each rank's GPU and passes the CPUs nearest it as
// Request.Near; Plan.Device carries its name into the report), cache-level
// grouping (L3/CCX), chunks sized by core speed on hybrid CPUs (Plan keeps
// a rank on one class instead) and hot-plugged CPUs after start. Linux
// only.
package affinity
