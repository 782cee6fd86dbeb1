package train

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hpctrain/gpu"
	"hpctrain/mpi"
)

// TestChooseGPUDeviceCPU: a run told -device cpu on a GPU node is not
// refused for the node's GPUs: neither 8 local ranks on 4 GPUs nor a
// CUDA_VISIBLE_DEVICES of SLURM's ("NoDevFiles") stops it, where before
// placement still assigned the GPUs it would not use. With -device auto
// the same node still gets its GPUs assigned (and 8 ranks refused).
func TestChooseGPUDeviceCPU(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "gpu", "testdata", "pcie4.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct{ GPUs json.RawMessage }
	if err := json.Unmarshal(b, &fixture); err != nil {
		t.Fatal(err)
	}
	top, err := gpu.Decode(bytes.NewReader(fixture.GPUs))
	if err != nil || len(top.Devices) != 4 {
		t.Fatalf("pcie4 fixture: %v", err)
	}
	defer func(d func() *gpu.Topology) { discoverGPUs = d }(discoverGPUs)
	discoverGPUs = func() *gpu.Topology { return top }

	eight := mpi.NewFake(8, 0)[0]
	four := mpi.NewFake(4, 0)[0]
	with := func(device string) Config {
		c := Defaults()
		c.Device = device
		return c
	}
	if g, err := chooseGPU(with("cpu"), eight); err != nil || g.top != nil {
		t.Errorf("-device cpu, 8 local ranks on 4 GPUs: %v (GPUs assigned: %v)", err, g.top != nil)
	}
	if _, err := chooseGPU(with("auto"), eight); err == nil || !strings.Contains(err.Error(), "gpu") {
		t.Errorf("-device auto, 8 local ranks on 4 GPUs: %v, want a refusal", err)
	}
	if g, err := chooseGPU(with("auto"), four); err != nil || len(g.assign.GPUs) != 4 {
		t.Errorf("-device auto, 4 local ranks on 4 GPUs: %v, %v", err, g.assign.GPUs)
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles")
	for _, d := range []string{"cpu", "auto"} {
		if g, err := chooseGPU(with(d), four); err != nil || g.top != nil {
			t.Errorf("-device %s, CUDA_VISIBLE_DEVICES=NoDevFiles: %v (GPUs assigned: %v)", d, err, g.top != nil)
		}
	}
}
