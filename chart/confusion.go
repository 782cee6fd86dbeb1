package chart

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ConfusionSize is the width and height in pixels of a confusion matrix
// figure (at DPI).
const ConfusionSize = 900

// maxCellLabels is the largest number of classes whose cells are labelled
// with their counts: beyond it the digits would not fit.
const maxCellLabels = 20

// Confusion draws a confusion matrix as a PNG heat map of ConfusionSize
// pixels square to w: row i is the true class i, column j the predicted
// class j, true class 0 at the top (as scikit-learn's
// ConfusionMatrixDisplay). Each cell's colour is its share of its row (the
// recall of class i on the diagonal), white for 0 to dark blue for 1, so
// that classes of different sizes compare; up to 20 classes, each cell
// shows its count. names label the axes (nil: the class numbers).
func Confusion(w io.Writer, title string, names []string, counts [][]int64) error {
	k := len(counts)
	if k == 0 {
		return fmt.Errorf("chart: empty confusion matrix")
	}
	for _, row := range counts {
		if len(row) != k {
			return fmt.Errorf("chart: confusion matrix is not square (%d rows, a row of %d)", k, len(row))
		}
	}
	if names != nil && len(names) != k {
		return fmt.Errorf("chart: %d class names for %d classes", len(names), k)
	}
	share := make([][]float64, k)
	for i, row := range counts {
		var n int64
		for _, v := range row {
			n += v
		}
		share[i] = make([]float64, k)
		for j, v := range row {
			share[i][j] = math.NaN()
			if n > 0 {
				share[i][j] = float64(v) / float64(n)
			}
		}
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "predicted class"
	p.Y.Label.Text = "true class"
	hm := plotter.NewHeatMap(confusionGrid(share), blues(256))
	hm.Min, hm.Max = 0, 1
	hm.NaN = color.RGBA{230, 230, 230, 255}
	p.Add(hm)
	if k <= maxCellLabels {
		var xys plotter.XYs
		var labels []string
		var styles []text.Style
		size := vg.Points(math.Max(7, math.Min(12, 120/float64(k))))
		for i := range counts {
			for j, v := range counts[i] {
				xys = append(xys, plotter.XY{X: float64(j), Y: float64(i)})
				labels = append(labels, fmt.Sprint(v))
				st := text.Style{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YCenter}
				st.Font.Size = size
				if share[i][j] > 0.5 {
					st.Color = color.White
				}
				styles = append(styles, st)
			}
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.TextStyle = styles
		p.Add(l)
	}
	var ticks []plot.Tick
	for i := 0; i < k; i++ {
		label := fmt.Sprint(i)
		if names != nil {
			label = names[i]
		}
		if k > 40 && i%(k/20) != 0 {
			label = ""
		}
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: label})
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(ticks), plot.ConstantTicks(ticks)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.X.Min, p.X.Max = -0.5, float64(k)-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(k)-0.5
	p.Y.Scale = plot.InvertedScale{Normalizer: plot.LinearScale{}}

	px := func(n int) vg.Length { return vg.Length(n) * vg.Inch / DPI }
	c := vgimg.NewWith(vgimg.UseWH(px(ConfusionSize), px(ConfusionSize)), vgimg.UseDPI(DPI))
	p.Draw(draw.New(c))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// confusionGrid is a k x k grid of cells centred on the integers.
type confusionGrid [][]float64

func (g confusionGrid) Dims() (c, r int)   { return len(g), len(g) }
func (g confusionGrid) Z(c, r int) float64 { return g[r][c] }
func (g confusionGrid) X(c int) float64    { return float64(c) }
func (g confusionGrid) Y(r int) float64    { return float64(r) }

// blues is a sequential palette of n colours from near-white to dark blue
// (ColorBrewer's Blues end points, interpolated linearly).
type blues int

func (n blues) Colors() []color.Color {
	lo, hi := [3]float64{247, 251, 255}, [3]float64{8, 48, 107}
	cs := make([]color.Color, n)
	for i := range cs {
		t := float64(i) / float64(n-1)
		var v [3]uint8
		for j := range v {
			v[j] = uint8(math.Round(lo[j] + t*(hi[j]-lo[j])))
		}
		cs[i] = color.RGBA{v[0], v[1], v[2], 255}
	}
	return cs
}
