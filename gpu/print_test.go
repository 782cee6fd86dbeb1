package gpu

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"hpctrain/affinity"
)

// TestMatrixGolden prints every fixture as `hpctrain topo -gpu -np N`
// does: the matrix in nvidia-smi topo -m notation, the devices, and the
// placement of N local ranks.
func TestMatrixGolden(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		np      int
	}{
		{"dgx1v", 2},
		{"pcie4", 4},
		{"l40s8-cvd67", 2},
	} {
		top, _, cpu := load(t, tc.fixture)
		var b bytes.Buffer
		if err := top.Write(&b); err != nil {
			t.Fatal(err)
		}
		b.WriteString("\n")
		if err := top.WritePlans(&b, cpu, affinity.CPUSet{}, tc.np, affinity.Request{PreferNUMA: -1}, Spec{}); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.fixture, b.String())
	}
}

// TestJSONRoundTrip: Topology's JSON (topo -gpu -json, the fixtures) reads
// back equal, and Decode refuses a broken matrix.
func TestJSONRoundTrip(t *testing.T) {
	top, _, _ := load(t, "l40s8-cvd67")
	js, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	js2, _ := json.Marshal(back)
	if !bytes.Equal(js, js2) || !strings.Contains(string(js), `"links":[["X","PIX"],["PIX","X"]]`) {
		t.Errorf("round trip:\n%s\n%s", js, js2)
	}
	for _, bad := range []string{
		`{"devices":[{"index":0,"bus_id":"0000:01:00.0","numa_node":0,"cpus":"","mig":"n/a"}],"links":[["NV1"]]}`,
		`{"devices":[{},{}],"links":[["X","PIX"],["SYS","X"]]}`,
		`{"devices":[{},{}],"links":[["X","NV0"],["NV0","X"]]}`,
		`{"devices":[{}],"links":[]}`,
		`{"devices":[{"numa_node":-2}],"links":[["X"]]}`,
		`{"devices":[{"mig":"maybe"}],"links":[["X"]]}`,
	} {
		if _, err := Decode(strings.NewReader(bad)); err == nil {
			t.Errorf("Decode accepted %s", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Decode error on two lines: %q", err)
		}
	}
	for _, s := range []string{"X", "NV1", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A"} {
		if l, err := ParseLink(s); err != nil || l.String() != s {
			t.Errorf("ParseLink(%q) = %v, %v", s, l, err)
		}
	}
}
