package train

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// FaultEnv names the environment variable that injects a fault into one
// rank, so that the failure paths (NaN stop, divergence check) are tested
// end to end under the real mpirun. Its value is a comma-separated list of
// kind@rank:step, for example "nan@1:5" (rank 1's loss is NaN at step 5) or
// "perturb@2:3" (rank 2 changes one parameter after step 3). Unset, it
// costs one nil check per step.
const FaultEnv = "HPCTRAIN_FAULT"

// fault is one injected failure.
type fault struct {
	kind       string // "nan" or "perturb"
	rank, step int
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
		si, err2 := strconv.Atoi(s)
		if !ok || !ok2 || err1 != nil || err2 != nil || (kind != "nan" && kind != "perturb") {
			return nil, fmt.Errorf("%s: %q is not kind@rank:step with kind nan or perturb", FaultEnv, f)
		}
		if ri == rank {
			fs = append(fs, fault{kind, ri, si})
		}
	}
	return fs, nil
}

func faultsFromEnv(rank int) (faults, error) {
	return parseFaults(os.Getenv(FaultEnv), rank)
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

// perturb changes one parameter after step where a fault says so: a replica
// drifting silently, as a bit flip or a non-deterministic kernel would.
func (fs faults) perturb(step int, params []float32) {
	for _, f := range fs {
		if f.kind == "perturb" && f.step == step && len(params) > 0 {
			params[0] += 1e-3
		}
	}
}
