package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"hpctrain/chart"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
	"hpctrain/optim"
)

// Optim is `hpctrain bench optim`: every optimizer on the course's
// J(x, y) = 100x^2 + y^2 from (1, 1), drawn over J's contours (PNG) and
// written step by step (CSV): the course's momentum figure, for all of them.
func Optim(args []string, out io.Writer) error {
	fs := newFlags("optim")
	steps := fs.Int("steps", 200, "optimizer steps")
	dir := fs.String("out", "out", "directory for optim_trajectories.png and .csv")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	if err := intIn("steps", *steps, 1, 1e5)(); err != nil {
		return cli.Usage(err)
	}
	const csvName, pngName = "optim_trajectories.csv", "optim_trajectories.png"
	if err := outputDir(*dir, csvName, pngName); err != nil {
		return err
	}
	var names []string
	for _, r := range optim.TrajectoryRuns {
		names = append(names, r.Name)
	}
	paths, err := optim.Trajectories(names, *steps)
	if err != nil {
		return err
	}
	csvPath := filepath.Join(*dir, csvName)
	if err := atomicfile.Write(csvPath, func(w io.Writer) error { return optim.WriteTrajectoriesCSV(w, paths) }); err != nil {
		return err
	}
	var runs []chart.Run
	fmt.Fprintf(out, "%-10s %14s\n", "optimizer", fmt.Sprintf("J after %d", *steps))
	for _, p := range paths {
		runs = append(runs, chart.Run{Name: p.Name, X: p.X, Y: p.Y})
		fmt.Fprintf(out, "%-10s %14.3g\n", p.Name, p.J[len(p.J)-1])
	}
	png := filepath.Join(*dir, pngName)
	if err := chart.Trajectories(png, optim.Quadratic, [2]float64{-1.2, 1.2}, [2]float64{-1.2, 1.2}, runs); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s and %s\n", png, csvPath)
	return nil
}
