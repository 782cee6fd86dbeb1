package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/peak"
)

// bench peak measures both arithmetics on one core and on all of the
// mask, and bf16 only where the CPU has bf16 dot products; its rates are
// consistent (all cores at most their number times one core's, with room
// for noise).
func TestPeak(t *testing.T) {
	if peak.Flops(false, 1) == 0 {
		t.Skip("no AVX2 or AVX-512 here (or no cgo): no peak loop to measure")
	}
	// The rates are measured again when the cores look inconsistent: a
	// busy machine (other test packages run beside this one) can slow
	// the one-core loop and not the other.
	var out bytes.Buffer
	one := map[string]float64{}
	var bad []string
	for attempt := 0; attempt < 3 && (attempt == 0 || len(bad) > 0); attempt++ {
		out.Reset()
		bad = nil
		js := filepath.Join(t.TempDir(), "peak.json")
		if err := Peak([]string{"-json", js}, &out); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rows []PeakRow
		if err := json.Unmarshal(b, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.GFLOPS <= 0 || math.Abs(r.PerCore*float64(r.Threads)-r.GFLOPS) > 1e-9*r.GFLOPS {
				t.Errorf("row %+v", r)
			}
			if r.Threads == 1 {
				one[r.Arithmetic] = r.GFLOPS
			} else if r.GFLOPS > 1.5*float64(r.Threads)*one[r.Arithmetic] {
				bad = append(bad, fmt.Sprintf("%s: %v GFLOP/s on %d cores, %v on one", r.Arithmetic, r.GFLOPS, r.Threads, one[r.Arithmetic]))
			}
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	if one["fp32"] == 0 {
		t.Errorf("no fp32 row on one core: %s", out.String())
	}
	if ok, _ := dnnl.HasBF16(); ok != (one["bf16"] > 0) && peak.Flops(true, 1) > 0 {
		t.Errorf("bf16 row %v where HasBF16 says %v", one["bf16"], ok)
	}
	if !strings.HasPrefix(out.String(), "arithmetic ") {
		t.Errorf("output %q", out.String())
	}
	for _, n := range []string{"-1", "100000"} {
		var o bytes.Buffer
		if err := Peak([]string{"-threads", n}, &o); err == nil || o.Len() != 0 {
			t.Errorf("-threads %s: error %v, output %q (want an error before any measurement)", n, err, o.String())
		}
	}
}
