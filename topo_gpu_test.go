package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTopoGPU: `hpctrain topo -gpu` prints the matrix, or on a node
// without GPUs one line saying why, and bad -gpus is a usage error.
func TestTopoGPU(t *testing.T) {
	r := hpctrain(t, 0, 20*time.Second, "topo", "-gpu")
	noGPU := strings.HasPrefix(r.out, "no GPU found (NVML: ")
	if r.code != 0 || !noGPU && !strings.Contains(r.out, "CPU Affinity") {
		t.Errorf("topo -gpu: %d\n%s", r.code, r.out)
	}
	if noGPU && (!strings.HasSuffix(r.out, "; sysfs: none)\n") || strings.Count(r.out, "\n") != 1) {
		t.Errorf("topo -gpu without a GPU: want one line ending \"; sysfs: none)\", got %q", r.out)
	}
	r = hpctrain(t, 0, 20*time.Second, "topo", "-gpu", "-json")
	var top struct {
		Devices []json.RawMessage `json:"devices"`
		Source  string            `json:"source"`
	}
	if err := json.Unmarshal([]byte(r.out), &top); r.code != 0 || err != nil || top.Devices == nil {
		t.Errorf("topo -gpu -json: %d %v\n%s", r.code, err, r.out)
	}
	r = hpctrain(t, 0, 20*time.Second, "topo", "-gpu", "-np", "2", "-gpus", "1,1")
	if r.code != 2 || !strings.Contains(r.out, "GPU 1 is given to local ranks 0 and 1") || strings.Count(r.out, "\n") != 1 {
		t.Errorf("topo -gpus 1,1: %d\n%s", r.code, r.out)
	}
}

// TestGPUPlacement: -gpus mistakes stop training with one clear line; a
// -gpus map on a node without GPUs says none was found.
func TestGPUPlacement(t *testing.T) {
	r := hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-limit", "640", "-gpus", "0,1,1")
	if r.code != 2 || !strings.Contains(r.out, `config: gpus = "0,1,1": GPU 1 is given to local ranks 1 and 2`) || strings.Contains(r.out, "goroutine ") {
		t.Errorf("-gpus with a duplicate: %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-limit", "640", "-gpus", "0,x")
	if r.code != 2 || !strings.Contains(r.out, `"x" is not a GPU number`) {
		t.Errorf("-gpus 0,x: %d\n%s", r.code, r.out)
	}
	// Skipped only where topo shows a GPU's matrix (TestTopoGPU's two
	// answers); anything else (a panic, an error) is a failure, not a GPU.
	if probe := hpctrain(t, 0, 20*time.Second, "topo", "-gpu"); !strings.HasPrefix(probe.out, "no GPU found") {
		if probe.code == 0 && strings.Contains(probe.out, "CPU Affinity") {
			t.Skip("this machine has a GPU; the no-GPU cases below do not apply")
		}
		t.Fatalf("topo -gpu: exit %d, neither \"no GPU found\" nor a GPU's matrix:\n%s", probe.code, probe.out)
	}
	r = hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-limit", "640", "-epochs", "1", "-progress", "0", "-gpus", "0")
	// A request this node cannot meet is bad input, as a bad flag: exit 2.
	if r.code != 2 || !strings.Contains(r.out, "gpus = 0: no GPU found (NVML: ") || strings.Contains(r.out, "goroutine ") {
		t.Errorf("-gpus 0 without a GPU: %d\n%s", r.code, r.out)
	}
	// topo's GPU plan refuses it alike (it printed "no GPU found", exit 0).
	r = hpctrain(t, 0, 20*time.Second, "topo", "-gpu", "-gpus", "0")
	if r.code != 2 || !strings.Contains(r.out, "hpctrain: gpus = 0: no GPU found (NVML: ") {
		t.Errorf("topo -gpu -gpus 0 without a GPU: %d\n%s", r.code, r.out)
	}
	// Without a GPU, CUDA_VISIBLE_DEVICES and -gpu-share change nothing.
	r = hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-limit", "640", "-epochs", "1", "-progress", "0", "-gpu-share", "-report-bindings")
	if r.code != 0 || strings.Contains(r.out, "gpu") {
		t.Errorf("CPU path with -gpu-share: %d\n%s", r.code, r.out)
	}
}
