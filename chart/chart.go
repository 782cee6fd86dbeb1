package chart

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"hpctrain/internal/atomicfile"
)

// Figure sizes in pixels at DPI.
const (
	DPI              = 96
	TrajectoryWidth  = 900
	TrajectoryHeight = 800
	CurvesWidth      = 1400
	CurvesHeight     = 560
)

// Run is one optimizer's trajectory: the points it visited, in order.
type Run struct {
	Name string
	X, Y []float64
}

// colors are matplotlib's tab10, distinguishable from each other and from
// the grey contours; runs past the tenth reuse them dashed.
var colors = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {80, 80, 80, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

// style gives run i its colour, and dashes from the eleventh run on.
func style(i int) draw.LineStyle {
	c := colors[i%len(colors)]
	// Slightly translucent, so coinciding paths blend; RGBA is premultiplied.
	c.A = 220
	c.R, c.G, c.B = uint8(int(c.R)*220/255), uint8(int(c.G)*220/255), uint8(int(c.B)*220/255)
	s := draw.LineStyle{Color: c, Width: vg.Points(1.6)}
	if i >= len(colors) {
		s.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return s
}

// grid samples f on a regular grid for the contour plotter.
type grid struct {
	xs, ys []float64
	z      [][]float64 // z[r][c]
}

func (g grid) Dims() (c, r int)   { return len(g.xs), len(g.ys) }
func (g grid) Z(c, r int) float64 { return g.z[r][c] }
func (g grid) X(c int) float64    { return g.xs[c] }
func (g grid) Y(r int) float64    { return g.ys[r] }

func sample(f func(x, y float64) float64, xr, yr [2]float64, n int) grid {
	g := grid{xs: make([]float64, n), ys: make([]float64, n), z: make([][]float64, n)}
	for i := range n {
		g.xs[i] = xr[0] + (xr[1]-xr[0])*float64(i)/float64(n-1)
		g.ys[i] = yr[0] + (yr[1]-yr[0])*float64(i)/float64(n-1)
	}
	for r := range n {
		g.z[r] = make([]float64, n)
		for c := range n {
			g.z[r][c] = f(g.xs[c], g.ys[r])
		}
	}
	return g
}

// greys is the contour palette: light to mid grey, so the trajectories on
// top stay the strongest marks.
type greys int

func (n greys) Colors() []color.Color {
	cs := make([]color.Color, n)
	for i := range cs {
		v := uint8(150 + 70*i/max(1, int(n)-1)) // darker near the minimum
		cs[i] = color.Gray{Y: v}
	}
	return cs
}

// contourLevels are 1-2-5 steps per decade between the grid's smallest
// positive value and its largest: objectives like 100x^2 + y^2 span
// decades, and linear levels would crowd at the rim.
func contourLevels(g grid) []float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range g.z {
		for _, v := range row {
			if v > 0 {
				lo = min(lo, v)
			}
			hi = max(hi, v)
		}
	}
	var ls []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v > lo && v < hi {
				ls = append(ls, v)
			}
		}
	}
	if len(ls) > 12 { // keep the upper decades: the low ones are tiny rings
		ls = ls[len(ls)-12:]
	}
	return ls
}

// markSteps are the steps Trajectories marks on every path, so paths that
// coincide still show how far each run got after k steps.
var markSteps = []int{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// glyphs tell the runs' markers apart where colours are close.
var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{},
}

// Trajectories draws a contour plot of f over xr x yr and every run's path
// on it as a coloured line with a legend, and writes it as a PNG of
// TrajectoryWidth x TrajectoryHeight pixels to path. Run.X[k], Run.Y[k] is
// the point after k steps; markers (one shape per run) sit at steps
// 0, 1, 2, 5, 10, 20, 50, 100, 200, ... Paths leaving the window are
// clipped, so a smaller window zooms in on the approach to the minimum.
func Trajectories(path string, f func(x, y float64) float64, xr, yr [2]float64, runs []Run) error {
	if !(xr[0] < xr[1]) || !(yr[0] < yr[1]) {
		return fmt.Errorf("chart %s: empty window x %v, y %v", path, xr, yr)
	}
	p := plot.New()
	p.Title.Text = "Optimizer trajectories (markers after 0, 1, 2, 5, 10, 20, 50, 100, ... steps)"
	p.X.Label.Text = "x"
	p.Y.Label.Text = "y"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = xr[0], xr[1], yr[0], yr[1]
	g := sample(f, xr, yr, 161)
	levels := contourLevels(g)
	if len(levels) > 0 {
		p.Add(plotter.NewContour(g, levels, greys(len(levels))))
	}
	var marks []plot.Plotter
	for i, r := range runs {
		if len(r.X) != len(r.Y) {
			return fmt.Errorf("chart %s: run %q has %d x and %d y values", path, r.Name, len(r.X), len(r.Y))
		}
		if len(r.X) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(r.X))
		for j := range r.X {
			xy[j].X, xy[j].Y = r.X[j], r.Y[j]
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("chart %s: run %q: %w", path, r.Name, err)
		}
		l.LineStyle = style(i)
		var at plotter.XYs
		for _, k := range markSteps {
			if k < len(xy) {
				at = append(at, xy[k])
			}
		}
		m, err := plotter.NewScatter(at)
		if err != nil {
			return fmt.Errorf("chart %s: run %q: %w", path, r.Name, err)
		}
		m.GlyphStyle = draw.GlyphStyle{Color: l.LineStyle.Color, Radius: vg.Points(3.5), Shape: glyphs[i%len(glyphs)]}
		p.Add(l)
		marks = append(marks, m)
		p.Legend.Add(r.Name, l, m)
	}
	// Markers go on top of every line: the adaptive methods' paths from
	// (1, 1) coincide along the diagonal, and only the markers tell them apart.
	p.Add(marks...)
	p.Legend.Top = false // bottom right: paths from (1, 1) rarely go there
	p.Legend.Left = false
	p.Legend.ThumbnailWidth = vg.Points(28)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	return save(path, TrajectoryWidth, TrajectoryHeight, [][]*plot.Plot{{p}})
}

// Series is one run's training curves, indexed alike: Loss[i] and
// Accuracy[i] at Epoch[i]. A nil Accuracy skips the run in that panel.
type Series struct {
	Name     string
	Epoch    []float64
	Loss     []float64
	Accuracy []float64
}

// Curves draws training curves as one PNG of CurvesWidth x CurvesHeight
// pixels with two panels side by side: training loss vs epoch on the left,
// test accuracy vs epoch on the right, every series overlaid in both with
// the same colour. One file keeps a run's loss and accuracy together when
// reports embed it; the panels share nothing but the epoch axis.
func Curves(path string, title string, series []Series) error {
	loss, acc, err := curves(path, title, series)
	if err != nil {
		return err
	}
	return save(path, CurvesWidth, CurvesHeight, [][]*plot.Plot{{loss, acc}})
}

// curves builds Curves' two panels.
func curves(path string, title string, series []Series) (loss, acc *plot.Plot, err error) {
	loss, acc = plot.New(), plot.New()
	loss.Title.Text = title + ": training loss"
	acc.Title.Text = title + ": test accuracy"
	for _, p := range []*plot.Plot{loss, acc} {
		p.X.Label.Text = "epoch"
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(10)
		p.Y.Tick.Marker = niceTicks{}
	}
	loss.Y.Label.Text = "train loss"
	acc.Y.Label.Text = "test accuracy"
	for i, s := range series {
		for _, panel := range []struct {
			p *plot.Plot
			y []float64
		}{{loss, s.Loss}, {acc, s.Accuracy}} {
			if panel.y == nil {
				continue
			}
			if len(panel.y) != len(s.Epoch) {
				return nil, nil, fmt.Errorf("chart %s: series %q has %d epochs and %d values", path, s.Name, len(s.Epoch), len(panel.y))
			}
			xy := make(plotter.XYs, len(s.Epoch))
			for j := range s.Epoch {
				xy[j].X, xy[j].Y = s.Epoch[j], panel.y[j]
			}
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, nil, fmt.Errorf("chart %s: series %q: %w", path, s.Name, err)
			}
			l.LineStyle = style(i)
			pts.GlyphStyle = draw.GlyphStyle{Color: l.LineStyle.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
			panel.p.Add(l, pts)
			panel.p.Legend.Add(s.Name, l)
		}
	}
	acc.Legend.Top = false // accuracy rises: keep the legend out of its way
	return loss, acc, nil
}

// save draws the plots in a grid on a w x h pixel canvas and writes a PNG.
func save(path string, w, h int, plots [][]*plot.Plot) error {
	px := func(n int) vg.Length { return vg.Length(n) * vg.Inch / DPI }
	c := vgimg.NewWith(vgimg.UseWH(px(w), px(h)), vgimg.UseDPI(DPI))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j, p := range plots[i] {
			p.Draw(canvases[i][j])
		}
	}
	err := atomicfile.Write(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}
