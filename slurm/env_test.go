package slurm

import (
	"reflect"
	"strings"
	"testing"
)

// mapEnv turns a map into a getenv func.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestReadEnvOutsideSLURM(t *testing.T) {
	env, in, err := ReadEnv(mapEnv(nil))
	if err != nil || in {
		t.Fatalf("ReadEnv(empty) = in %v, err %v", in, err)
	}
	if env.ProcID != -1 || env.LocalID != -1 || env.NodeID != -1 {
		t.Fatalf("unset ids should be -1: %+v", env)
	}
}

func TestReadEnvStep(t *testing.T) {
	env, in, err := ReadEnv(mapEnv(map[string]string{
		"SLURM_JOB_ID":        "42",
		"SLURM_JOB_NAME":      "hpctrain",
		"SLURM_STEP_ID":       "0",
		"SLURM_PROCID":        "5",
		"SLURM_LOCALID":       "1",
		"SLURM_NTASKS":        "8",
		"SLURM_NNODES":        "2",
		"SLURM_NODEID":        "1",
		"SLURM_CPUS_PER_TASK": "4",
		"SLURM_GPUS_ON_NODE":  "2",
		"SLURM_RESTART_COUNT": "3",
		"SLURM_JOB_NODELIST":  "gpu[07-08]",
	}))
	if err != nil || !in {
		t.Fatalf("in %v, err %v", in, err)
	}
	want := Env{JobID: "42", JobName: "hpctrain", ProcID: 5, LocalID: 1, NTasks: 8, NNodes: 2, NodeID: 1,
		CPUsPerTask: 4, GPUsOnNode: 2, RestartCount: 3, StepID: "0", NodeList: []string{"gpu07", "gpu08"}}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("got  %+v\nwant %+v", env, want)
	}
}

func TestReadEnvFallbackNames(t *testing.T) {
	env, _, err := ReadEnv(mapEnv(map[string]string{
		"SLURM_JOBID": "7", "SLURM_NPROCS": "3", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODELIST": "vm",
	}))
	if err != nil || env.JobID != "7" || env.NTasks != 3 || env.NNodes != 1 || len(env.NodeList) != 1 {
		t.Fatalf("got %+v, %v", env, err)
	}
}

func TestReadEnvMalformed(t *testing.T) {
	for name, val := range map[string]string{
		"SLURM_PROCID":        "x",
		"SLURM_NTASKS":        "-1",
		"SLURM_CPUS_PER_TASK": "2.5",
		"SLURM_GPUS_ON_NODE":  "gpu:2",
		"SLURM_JOB_NODELIST":  "n[1-",
	} {
		_, _, err := ReadEnv(mapEnv(map[string]string{"SLURM_JOB_ID": "1", name: val}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v should name the variable", name, val, err)
		}
	}
}
