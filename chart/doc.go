// Package chart draws the project's PNG figures with gonum.org/v1/plot:
// optimizer trajectories over a contour plot of the objective (the course's
// momentum figure) and training curves from the training loop's JSON-lines
// metrics files.
//
// Every figure is a PNG of a fixed pixel size (the exported Width and
// Height constants, at DPI), so tests and reports can rely on it.
//
// Non-goals: interactive output, other formats, running optimizers (see
// optim.Trajectories) or training.
package chart
