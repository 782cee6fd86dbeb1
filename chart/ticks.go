package chart

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// minLabels is the fewest labelled ticks niceTicks puts on an axis.
const minLabels = 4

// niceTicks labels an axis at the multiples of a "nice" step, 1, 2 or 5
// times a power of ten, the largest step that gives at least minLabels
// labels, with unlabelled ticks between them. Every label is written with
// the digits its step needs, the same for all, so adjacent labels always
// differ and each is its tick's value. (plot.DefaultTicks chose steps such
// as 0.0025 and printed fewer digits than they need: a loss from 2.098 to
// 2.121 was labelled 2.1, 2.1, 2.1, and one from 0.31 to 0.36 got three
// labels.)
type niceTicks struct{}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo < hi) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
	}
	// From the largest step that could give minLabels labels down, the
	// first that does: at most 11 labels (a step of 2 where one of 5 gave
	// only 3).
	for e := int(math.Floor(math.Log10(hi - lo))); ; e-- {
		for _, m := range []float64{5, 2, 1} {
			if first, last := span(lo, hi, m, e); last-first+1 >= minLabels {
				return append(labelled(lo, hi, m, e), minor(lo, hi, m, e)...)
			}
		}
		if e < -330 { // no float64 range is that narrow
			return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
		}
	}
}

// at is i*m*10^e, as exactly as float64 holds it (dividing by an exact
// power of ten, not multiplying by an inexact one).
func at(i, m float64, e int) float64 {
	if e < 0 {
		return i * m / math.Pow10(-e)
	}
	return i * m * math.Pow10(e)
}

// span is the first and last multiple i of the step m*10^e with i*step in
// [lo, hi], allowing for the rounding of lo/step and hi/step.
func span(lo, hi, m float64, e int) (first, last float64) {
	step := at(1, m, e)
	const slack = 1e-9
	return math.Ceil(lo/step - slack), math.Floor(hi/step + slack)
}

// labelled are the ticks at multiples of m*10^e in [lo, hi], labelled.
func labelled(lo, hi, m float64, e int) []plot.Tick {
	fc, prec := byte('f'), max(0, -e)
	// Far from 1 the fixed-point labels grow long: 1.25e+06, 2.0e-07.
	if big := max(math.Abs(lo), math.Abs(hi)); big >= 1e6 || prec > 5 {
		fc, prec = 'e', max(0, int(math.Floor(math.Log10(big)))-e)
	}
	first, last := span(lo, hi, m, e)
	var ticks []plot.Tick
	for i := first; i <= last; i++ {
		v := at(i, m, e)
		if v == 0 {
			v = 0 // not -0, "-0.00"
		}
		label := strconv.FormatFloat(v, fc, prec, 64)
		v = min(max(v, lo), hi) // within the axis, which drops ticks outside
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// minor are the unlabelled ticks between the labelled ones: fifths of a
// step of 1 or 5, halves of a step of 2.
func minor(lo, hi, m float64, e int) []plot.Tick {
	mm, ee, per := 2.0, e-1, 5.0 // 1: 0.2 = 2*10^-1
	switch m {
	case 2:
		mm, ee, per = 1, e, 2
	case 5:
		mm, ee, per = 1, e, 5
	}
	first, last := span(lo, hi, mm, ee)
	var ticks []plot.Tick
	for i := first; i <= last; i++ {
		if math.Mod(i, per) != 0 {
			ticks = append(ticks, plot.Tick{Value: at(i, mm, ee)})
		}
	}
	return ticks
}
