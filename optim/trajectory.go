package optim

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// Quadratic is the course's ill-conditioned bowl J(x, y) = 100x^2 + y^2:
// curvature 200 along x and 2 along y, so plain gradient descent with an lr
// near 2/200 oscillates across the x valley while crawling along y.
func Quadratic(x, y float64) float64 { return 100*x*x + y*y }

// QuadraticStart is where the course's figure starts every optimizer.
var QuadraticStart = [2]float64{1, 1}

// TrajectoryRun names one optimizer setting used on Quadratic, with the
// learning rate and hyperparameters chosen for the course figure.
type TrajectoryRun struct {
	Name   string // run name; Config.Name is the optimizer
	Config Config // Config.LR is the constant learning rate used
}

// TrajectoryRuns are the settings Trajectories uses, in figure order.
// Each is the optimizer's usual setting where one exists (Adam-family
// betas, RMSprop alpha, momentum 0.9), with the lr picked so that 500 steps
// from (1, 1) bring J from 101 below 1e-3:
//
//	sgd       lr 0.009 (just under the stability limit 2/200)
//	momentum  sgd, lr 0.001, momentum 0.9
//	nesterov  sgd, lr 0.002, momentum 0.9, nesterov
//	adagrad   lr 0.5
//	adadelta  lr 1, rho 0.99, eps 1e-6 (with PyTorch's rho 0.9 it stalls
//	          near J = 0.01-0.06: its step RMS[dx]/RMS[g] grows as g shrinks)
//	rmsprop   lr 0.01, alpha 0.99
//	adam      lr 0.1, betas 0.9/0.999
//	adamw     lr 0.1, weight_decay 1e-2
//	adamax    lr 0.1
//	nadam     lr 0.1
//	lars      lr 20, momentum 0.9, trust_coefficient 1e-3 (one group)
//	lamb      lr 0.05, betas 0.9/0.999 (one group)
//
// The convergence tests assert the same thresholds with these settings.
var TrajectoryRuns = []TrajectoryRun{
	{"sgd", Config{Name: "sgd", LR: 0.009}},
	{"momentum", Config{Name: "sgd", LR: 0.001, Momentum: 0.9}},
	{"nesterov", Config{Name: "sgd", LR: 0.002, Momentum: 0.9, Nesterov: true}},
	{"adagrad", Config{Name: "adagrad", LR: 0.5}},
	{"adadelta", Config{Name: "adadelta", LR: 1, Rho: new(0.99)}},
	{"rmsprop", Config{Name: "rmsprop", LR: 0.01}},
	{"adam", Config{Name: "adam", LR: 0.1}},
	{"adamw", Config{Name: "adamw", LR: 0.1}},
	{"adamax", Config{Name: "adamax", LR: 0.1}},
	{"nadam", Config{Name: "nadam", LR: 0.1}},
	{"lars", Config{Name: "lars", LR: 20, Momentum: 0.9}},
	{"lamb", Config{Name: "lamb", LR: 0.05}},
}

// Path is one optimizer's trajectory on Quadratic: X[i], Y[i] after i steps
// (index 0 is the start) and J[i] there.
type Path struct {
	Name    string
	X, Y, J []float64
}

// Trajectories runs each named TrajectoryRun (all when names is empty) for
// steps steps on Quadratic from QuadraticStart, with a constant lr, and
// returns the paths. The optimizers work in float32 as in training.
func Trajectories(names []string, steps int) ([]Path, error) {
	if steps < 0 {
		return nil, fmt.Errorf("trajectories: steps %d: must be >= 0", steps)
	}
	runs := TrajectoryRuns
	if len(names) > 0 {
		runs = nil
		for _, n := range names {
			r, ok := trajectoryRun(n)
			if !ok {
				var known []string
				for _, r := range TrajectoryRuns {
					known = append(known, r.Name)
				}
				return nil, fmt.Errorf("trajectories: unknown run %q (known: %v)", n, known)
			}
			runs = append(runs, r)
		}
	}
	var paths []Path
	for _, r := range runs {
		o, err := New(r.Config, nil, 2)
		if err != nil {
			return nil, fmt.Errorf("trajectories: %s: %w", r.Name, err)
		}
		lr := r.Config.WithDefaults().LR
		p := []float32{float32(QuadraticStart[0]), float32(QuadraticStart[1])}
		g := make([]float32, 2)
		path := Path{Name: r.Name}
		for i := 0; ; i++ {
			x, y := float64(p[0]), float64(p[1])
			path.X = append(path.X, x)
			path.Y = append(path.Y, y)
			path.J = append(path.J, Quadratic(x, y))
			if i == steps {
				break
			}
			g[0], g[1] = float32(200*x), float32(2*y)
			o.Step(p, g, lr)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func trajectoryRun(name string) (TrajectoryRun, bool) {
	for _, r := range TrajectoryRuns {
		if r.Name == name {
			return r, true
		}
	}
	return TrajectoryRun{}, false
}

// WriteTrajectoriesCSV writes paths as CSV with the header
// optimizer,step,x,y,J, one row per point.
func WriteTrajectoriesCSV(w io.Writer, paths []Path) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"optimizer", "step", "x", "y", "J"}); err != nil {
		return fmt.Errorf("write trajectories csv: %w", err)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, p := range paths {
		for i := range p.X {
			if err := cw.Write([]string{p.Name, strconv.Itoa(i), f(p.X[i]), f(p.Y[i]), f(p.J[i])}); err != nil {
				return fmt.Errorf("write trajectories csv: %w", err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write trajectories csv: %w", err)
	}
	return nil
}
