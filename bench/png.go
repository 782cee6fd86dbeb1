package bench

import (
	"io"

	"hpctrain/internal/atomicfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// savePanels writes plots side by side into one PNG.
func savePanels(path string, ps ...*plot.Plot) error {
	const w, h = 6 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w*vg.Length(len(ps)), h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(ps), PadX: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{ps}, tiles, dc)
	for i, p := range ps {
		p.Draw(canvases[0][i])
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}
