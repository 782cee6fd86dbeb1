package bench

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"hpctrain/affinity"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/train"
)

// GridCell is one configuration of the affinity grid.
type GridCell struct {
	Instances        int     `json:"instances"`
	Threads          int     `json:"threads_per_instance"`
	Pinned           bool    `json:"pinned"`
	Noisy            bool    `json:"noisy_neighbour"`
	WallSeconds      float64 `json:"wall_seconds"`
	TrainSeconds     float64 `json:"train_seconds"`
	SamplesPerSecond float64 `json:"samples_per_second"`
	TestAccuracy     float64 `json:"test_accuracy"`
}

// Affinity is `hpctrain bench affinity`: the book's tables 9.1/9.2 on this
// machine. For P physical cores in the mask it trains the same model on the
// same samples as (1, P), (2, P/2), ..., (P, 1) instances x threads, each
// pinned (-bind cores) and unpinned (-bind none), launching the launcher
// itself, and reports wall time, samples/s and test accuracy.
func Affinity(args []string, self string, out io.Writer) error {
	fs := newFlags("affinity")
	launcher := fs.String("launcher", "mpirun --oversubscribe --bind-to none", "launcher command; -np N and the program follow it")
	modelName := fs.String("model", "cnn", "network every cell trains: a built-in model ("+strings.Join(model.Names(), ", ")+") or a description FILE.toml")
	limit := fs.Int("limit", 12800, "training samples (the same in every cell)")
	epochs := fs.Int("epochs", 1, "epochs")
	testLimit := fs.Int("test-limit", 2000, "test samples")
	noisy := fs.Bool("noisy", false, "also run every cell with a busy process pinned to the first core (a noisy neighbour)")
	dir := fs.String("out", "out", "directory for affinity.csv, affinity.json, affinity.png")
	extra := fs.String("args", "", "extra flags for every training run")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	// Every cell's training flags are checked here, before any launch, so
	// that a bad one is one line and not a child's failure after minutes.
	if err := intIn("limit", *limit, 1, 1<<30)(); err != nil {
		return cli.Usage(err)
	}
	// The grid's own flags, set per cell: one in -args would run cells
	// other than those the table names (-args "-threads 1" made every
	// 1 x 2 cell a 1 x 1).
	if a, name := cli.OwnFlag(strings.Fields(*extra), gridFlags...); a != "" {
		return cli.Usage(fmt.Errorf("-args %q: -%s is set by the grid for every cell (%s); use bench affinity's own flags", *extra, name, strings.Join(gridFlags, ", ")))
	}
	check := append([]string{"-model", *modelName, "-limit", strconv.Itoa(*limit), "-epochs", strconv.Itoa(*epochs),
		"-test-limit", strconv.Itoa(*testLimit)}, strings.Fields(*extra)...)
	if _, _, err := train.Parse(check, io.Discard); err != nil {
		return cli.Usage(fmt.Errorf("the cells' training flags (-model, -limit, -epochs, -test-limit, -args): %w", err))
	}
	topo, err := affinity.ReadTopology("/")
	if err != nil {
		return err
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return err
	}
	p := topo.PhysicalCores(mask)
	var cells []GridCell
	noiseModes := []bool{false}
	if *noisy {
		noiseModes = append(noiseModes, true)
	}
	for _, noise := range noiseModes {
		for inst := 1; inst <= p; inst++ {
			if p%inst != 0 {
				continue
			}
			for _, pinned := range []bool{true, false} {
				cells = append(cells, GridCell{Instances: inst, Threads: p / inst, Pinned: pinned, Noisy: noise})
			}
		}
	}
	// Every file of the run, the cells' metrics too, is checked before
	// the first cell: one that could not be written stopped the run after
	// the grid, leaving the files written before it.
	files := []string{"affinity.csv", "affinity.json", "affinity.png"}
	for _, c := range cells {
		files = append(files, cellMetrics(c))
	}
	if err := outputDir(*dir, files...); err != nil {
		return err
	}
	fmt.Fprintf(out, "# affinity grid: %d physical cores in mask %s, model %s, %d samples x %d epochs\n", p, mask, *modelName, *limit, *epochs)
	for i := range cells {
		c := &cells[i]
		if err := runCell(c, *launcher, self, *modelName, *limit, *epochs, *testLimit, *extra, mask, *dir); err != nil {
			return err
		}
		fmt.Fprintf(out, "ran %d x %d pinned=%v noisy=%v: %.1f s, %.0f samples/s, %.2f%%\n", c.Instances, c.Threads, c.Pinned, c.Noisy, c.WallSeconds, c.SamplesPerSecond, 100*c.TestAccuracy)
	}
	fmt.Fprintf(out, "\n| instances x threads | bound | noisy neighbour | wall s | train s | samples/s | test accuracy |\n|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		fmt.Fprintf(out, "| %d x %d | %s | %s | %.1f | %.1f | %.0f | %.2f%% |\n", c.Instances, c.Threads, boundName(c.Pinned), yesNo(c.Noisy), c.WallSeconds, c.TrainSeconds, c.SamplesPerSecond, 100*c.TestAccuracy)
	}
	if err := writeGridCSV(filepath.Join(*dir, "affinity.csv"), cells); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(*dir, "affinity.json"), cells); err != nil {
		return err
	}
	png := filepath.Join(*dir, "affinity.png")
	if err := gridChart(png, cells); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s, %s, %s\n", filepath.Join(*dir, "affinity.csv"), filepath.Join(*dir, "affinity.json"), png)
	return nil
}

func boundName(pinned bool) string {
	if pinned {
		return "cores"
	}
	return "none"
}

// gridFlags are the train flags runCell sets for every cell.
var gridFlags = []string{"model", "limit", "epochs", "test-limit", "threads", "bind", "cpu-list", "use-smt", "metrics", "progress"}

// cellMetrics is the name of the -metrics file of cell c's training, in
// -out.
func cellMetrics(c GridCell) string {
	return fmt.Sprintf("affinity-%dx%d-%s-noisy%v.jsonl", c.Instances, c.Threads, boundName(c.Pinned), c.Noisy)
}

func runCell(c *GridCell, launcher, self, modelName string, limit, epochs, testLimit int, extra string, mask affinity.CPUSet, dir string) error {
	metrics := filepath.Join(dir, cellMetrics(*c))
	args := append(strings.Fields(launcher), "-np", strconv.Itoa(c.Instances), self, "train",
		"-model", modelName, "-limit", strconv.Itoa(limit), "-epochs", strconv.Itoa(epochs),
		"-test-limit", strconv.Itoa(testLimit), "-threads", strconv.Itoa(c.Threads),
		"-bind", boundName(c.Pinned), "-metrics", metrics, "-progress", "0")
	args = append(args, strings.Fields(extra)...)
	if c.Noisy {
		stop, err := busyNeighbour(mask.CPUs()[0])
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = os.Environ()
	if os.Getuid() == 0 {
		cmd.Env = append(cmd.Env, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	}
	start := time.Now()
	outb, err := cmd.CombinedOutput()
	c.WallSeconds = time.Since(start).Seconds()
	if err != nil {
		// One line: the cell, and the child's own error line (every
		// rank's is the same kind; mpirun's banners add nothing).
		why := err.Error()
		for _, line := range strings.Split(string(outb), "\n") {
			if strings.HasPrefix(line, "hpctrain: ") {
				why = strings.TrimPrefix(line, "hpctrain: ")
				break
			}
		}
		cellErr := fmt.Errorf("cell %d x %d %s: %s (%s)", c.Instances, c.Threads, boundName(c.Pinned), why, strings.Join(args, " "))
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			return cli.Usage(cellErr) // the child refused its flags or files
		}
		return cellErr
	}
	f, err := os.Open(metrics)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Final            bool    `json:"final"`
			TrainSeconds     float64 `json:"train_seconds"`
			SamplesPerSecond float64 `json:"samples_per_second"`
			TestAccuracy     float64 `json:"test_accuracy"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Final {
			c.TrainSeconds, c.SamplesPerSecond, c.TestAccuracy = r.TrainSeconds, r.SamplesPerSecond, r.TestAccuracy
		}
	}
	return nil
}

// busyNeighbour starts a process that spins on cpu until stop is called.
func busyNeighbour(cpu int) (stop func(), err error) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("pinning the noisy neighbour to cpu %d: %w", cpu, err)
	}
	return func() { cmd.Process.Kill(); cmd.Wait() }, nil
}

func writeGridCSV(path string, cells []GridCell) error {
	return atomicfile.Write(path, func(f io.Writer) error {
		w := csv.NewWriter(f)
		w.Write([]string{"instances", "threads", "bind", "noisy", "wall_s", "train_s", "samples_per_s", "test_accuracy"})
		for _, c := range cells {
			w.Write([]string{strconv.Itoa(c.Instances), strconv.Itoa(c.Threads), boundName(c.Pinned), strconv.FormatBool(c.Noisy),
				fmt.Sprintf("%.2f", c.WallSeconds), fmt.Sprintf("%.2f", c.TrainSeconds), fmt.Sprintf("%.1f", c.SamplesPerSecond), fmt.Sprintf("%.4f", c.TestAccuracy)})
		}
		w.Flush()
		return w.Error()
	})
}

// gridChart draws training time and test accuracy per configuration, bound
// and unbound side by side.
func gridChart(path string, cells []GridCell) error {
	var labels []string
	var tPin, tFree, aPin, aFree plotter.Values
	for _, c := range cells {
		if !c.Pinned {
			continue
		}
		for _, u := range cells {
			if !u.Pinned && u.Instances == c.Instances && u.Noisy == c.Noisy {
				l := fmt.Sprintf("%dx%d", c.Instances, c.Threads)
				if c.Noisy {
					l += " noisy"
				}
				labels = append(labels, l)
				tPin, tFree = append(tPin, c.TrainSeconds), append(tFree, u.TrainSeconds)
				aPin, aFree = append(aPin, 100*c.TestAccuracy), append(aFree, 100*u.TestAccuracy)
			}
		}
	}
	panel := func(title, ylabel string, pin, free plotter.Values, zoom bool) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text, p.X.Label.Text = title, ylabel, "instances x threads"
		w := vg.Points(18)
		b1, err := plotter.NewBarChart(pin, w)
		if err != nil {
			return nil, err
		}
		b2, err := plotter.NewBarChart(free, w)
		if err != nil {
			return nil, err
		}
		b1.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
		b2.Color = color.RGBA{R: 255, G: 127, B: 14, A: 255}
		b1.LineStyle.Width, b2.LineStyle.Width = 0, 0
		b1.Offset, b2.Offset = -w/2, w/2
		p.Add(b1, b2, plotter.NewGrid())
		p.Legend.Add("bound to cores", b1)
		p.Legend.Add("not bound", b2)
		p.Legend.Top, p.Legend.Left = false, true
		p.Legend.YOffs = -vg.Points(4)
		p.NominalX(labels...)
		if zoom { // accuracy differs by points: show the differences
			lo := 100.0
			for _, v := range append(append(plotter.Values{}, pin...), free...) {
				lo = min(lo, v)
			}
			p.Y.Min = max(0, lo-5)
			p.Legend.Top = true
		}
		return p, nil
	}
	pt, err := panel("training time (lower is better)", "seconds", tPin, tFree, false)
	if err != nil {
		return err
	}
	pa, err := panel("test accuracy", "%", aPin, aFree, true)
	if err != nil {
		return err
	}
	return savePanels(path, pt, pa)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
