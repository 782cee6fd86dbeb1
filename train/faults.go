package train

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FaultEnv names the environment variable that injects a fault into one
// rank, so that the failure paths (NaN stop, divergence check, watchdog)
// are tested end to end under the real mpirun. Its value is a
// comma-separated list of kind@rank:where:
//
//	nan@1:5            rank 1's loss is NaN at step 5
//	perturb@2:3        rank 2 changes one parameter after step 3
//	overflow@1:4       rank 1's gradients of step 4 are not finite (an fp16
//	                   overflow on one rank: all skip the step together)
//	fail@1:3           rank 1's step 3 fails after the all-reduce, on that
//	                   rank alone (as a device's failed allocation would)
//	hang@1:3           rank 1's step 3 never finishes its forward pass (a
//	                   stuck kernel: the process, its watchdog included,
//	                   runs on)
//	hang@1:evaluation  rank 1's first batch of evaluation never finishes
//	hang@1:loading     rank 1's load of the data hangs after its first file
//	usr1@0:20          rank 0 is asked to stop after step 20, as SIGUSR1
//	                   would ask it (checkpoint, exit for requeue)
//	stop@1:evaluation  rank 1 stops itself (SIGSTOP) when it enters a phase:
//	                   init (before MPI_Init), startup, broadcast, resume,
//	                   signals, checksum, checkpoint, evaluation, training
//	                   (each step's start)
//
// Unset, it costs one nil check per step.
const FaultEnv = "HPCTRAIN_FAULT"

// stopPhases maps the names stop@ takes to the run's phases.
var stopPhases = map[string]*string{
	"startup": &phaseStartup, "broadcast": &phaseBroadcast, "resume": &phaseResume,
	"signals": &phaseSignals, "checksum": &phaseChecksum, "checkpoint": &phaseCheckpoint,
	"evaluation": &phaseEvaluation, "training": &phaseTraining,
}

// hangPhases maps the phases hang@ takes besides a step to the run's.
var hangPhases = map[string]*string{"evaluation": &phaseEvaluation, "loading": &phaseLoading}

// fault is one injected failure.
type fault struct {
	kind  string // "nan", "perturb", "overflow", "fail", "hang", "usr1" or "stop"
	rank  int
	step  int     // nan, perturb, overflow, fail, hang, usr1
	phase *string // stop (nil for "init"); hang in evaluation or loading
}

// faults are the failures injected into this rank.
type faults []fault

// parseFaults reads FaultEnv's value for this rank.
func parseFaults(spec string, rank int) (faults, error) {
	var fs faults
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		kind, where, ok := strings.Cut(f, "@")
		r, s, ok2 := strings.Cut(where, ":")
		ri, err1 := strconv.Atoi(r)
		ft := fault{kind: kind, rank: ri}
		var err2 error
		switch kind {
		case "hang":
			if p := hangPhases[s]; p != nil {
				ft.phase = p
			} else {
				ft.step, err2 = strconv.Atoi(s)
			}
		case "nan", "perturb", "overflow", "fail", "usr1":
			ft.step, err2 = strconv.Atoi(s)
		case "stop":
			if ft.phase = stopPhases[s]; ft.phase == nil && s != "init" {
				err2 = fmt.Errorf("unknown phase")
			}
		default:
			ok = false
		}
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: %q is not nan@rank:step, perturb@rank:step, overflow@rank:step, fail@rank:step, hang@rank:step, hang@rank:evaluation, hang@rank:loading, usr1@rank:step or stop@rank:phase (phases: init, %s)", FaultEnv, f, strings.Join(phaseNames(), ", "))
		}
		if ri == rank {
			fs = append(fs, ft)
		}
	}
	return fs, nil
}

func phaseNames() []string {
	var ns []string
	for n := range stopPhases {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

func faultsFromEnv(rank int) (faults, error) {
	return parseFaults(os.Getenv(FaultEnv), rank)
}

// StopBeforeInit stops this process (SIGSTOP) if FaultEnv says
// stop@RANK:init for the rank the launcher gave it: a rank that never
// reaches MPI_Init, for the start-up timeout's test.
func StopBeforeInit() {
	r, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_RANK"))
	if err != nil {
		return
	}
	fs, _ := faultsFromEnv(r)
	for _, f := range fs {
		if f.kind == "stop" && f.phase == nil {
			stopSelf()
		}
	}
}

// enter stops this rank where a fault says so: it then hangs its peers in
// the phase's next collective, as a stopped or swapped-out process would.
func (fs faults) enter(phase *string) {
	for _, f := range fs {
		if f.kind == "stop" && f.phase == phase {
			stopSelf()
		}
	}
}

// loss returns the loss this rank reports at step (1-based): NaN where a
// fault says so.
func (fs faults) loss(step int, loss float64) float64 {
	for _, f := range fs {
		if f.kind == "nan" && f.step == step {
			return math.NaN()
		}
	}
	return loss
}

// overflow reports whether a fault makes this rank's gradients of step
// (1-based) non-finite.
func (fs faults) overflow(step int) bool {
	for _, f := range fs {
		if f.kind == "overflow" && f.step == step {
			return true
		}
	}
	return false
}

// fail returns the error a fault gives this rank's step (1-based), or nil.
func (fs faults) fail(step int) error {
	for _, f := range fs {
		if f.kind == "fail" && f.step == step {
			return fmt.Errorf("%s: step %d fails on rank %d alone", FaultEnv, step, f.rank)
		}
	}
	return nil
}

// hang blocks this rank's step (1-based) for good where a fault says so.
func (fs faults) hang(step int) {
	for _, f := range fs {
		if f.kind == "hang" && f.phase == nil && f.step == step {
			forever()
		}
	}
}

// hangIn blocks this rank for good in phase where a fault says so.
func (fs faults) hangIn(phase *string) {
	for _, f := range fs {
		if f.kind == "hang" && f.phase == phase {
			forever()
		}
	}
}

// forever blocks the calling goroutine, the process running on.
func forever() {
	for {
		time.Sleep(time.Hour)
	}
}

// signal asks this rank to stop after step (1-based) where a fault says
// so, as the SIGUSR1 handler does.
func (fs faults) signal(step int) {
	for _, f := range fs {
		if f.kind == "usr1" && f.step == step {
			stopSignalled.Store(true)
		}
	}
}

// perturbs reports whether perturb changes a parameter after step.
func (fs faults) perturbs(step int) bool {
	for _, f := range fs {
		if f.kind == "perturb" && f.step == step {
			return true
		}
	}
	return false
}

// perturb changes one parameter after step where a fault says so: a replica
// drifting silently, as a bit flip or a non-deterministic kernel would.
func (fs faults) perturb(step int, params []float32) {
	for _, f := range fs {
		if f.kind == "perturb" && f.step == step && len(params) > 0 {
			params[0] += 1e-3
		}
	}
}

// stopSelf sends this process SIGSTOP and waits for it to land: the kernel
// stops the threads a moment later, and without the wait the MPI thread
// could still run the phase's collective.
func stopSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond)
}
