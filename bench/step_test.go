package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hpctrain/model"
)

// bench step times the network built for -input and -classes, keeps its
// first line's format, and reports the shape in its JSON.
func TestStepInputClasses(t *testing.T) {
	if testing.Short() {
		t.Skip("times SGEMM 2048^3")
	}
	js := filepath.Join(t.TempDir(), "step.json")
	var out bytes.Buffer
	err := Step([]string{"-model", "resnet8", "-input", "12x12x3", "-classes", "7", "-batch", "4", "-steps", "2", "-json", js}, &out)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	k := model.DefaultKernels().String()
	if !strings.HasPrefix(first, "resnet8 batch 4, 1 thread(s), "+k+" kernels, optimizer sgd: ") || !strings.Contains(first, " samples/s, ") || !strings.Contains(first, " ms/step, ") {
		t.Errorf("first line %q", first)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep StepReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Input != "12x12x3" || rep.Classes != 7 || rep.Batch != 4 || rep.StepMillis <= 0 || rep.Kernels != k {
		t.Errorf("report %+v", rep)
	}
	if got, want := rep.SamplesPerSecond, 4/(rep.StepMillis/1e3); got < want*0.999 || got > want*1.001 {
		t.Errorf("samples/s %v, want batch / median step = %v", got, want)
	}
	// The cores' peak in the kernels' arithmetic, where there is a loop
	// for it: no step outruns it.
	if rep.PeakGFLOPS > 0 && !(rep.FractionOfPeak > 0 && rep.FractionOfPeak < 1.5 && strings.Contains(first, "% of the 1 core(s)' ")) {
		t.Errorf("peak %v GFLOP/s, fraction %v, line %q", rep.PeakGFLOPS, rep.FractionOfPeak, first)
	}
	if rep.Layers[len(rep.Layers)-1].Name != "fc1" {
		t.Errorf("last layer %q", rep.Layers[len(rep.Layers)-1].Name)
	}
}

func TestStepBadInput(t *testing.T) {
	for _, args := range [][]string{{"-input", "28x28"}, {"-input", "0x28x1"}, {"-classes", "0"}} {
		if err := Step(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
