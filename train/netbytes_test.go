package train

import (
	"strings"
	"testing"

	"hpctrain/model"
)

// TestNetHint: a network too large for its parameters is told to shrink
// the model, not -batch (which no value of makes it fit); one too large
// for its batch's activations to lower -batch.
func TestNetHint(t *testing.T) {
	for _, c := range []struct{ desc, want string }{
		{`layers = [{kind = "flatten"}, {kind = "linear", out = 30000}, {kind = "linear", out = 30000}, {kind = "linear", out = 30000}, {kind = "linear", out = "classes"}]`, "a smaller model"},
		{`layers = [{kind = "conv", out = 64, kernel = 3, pad = 1}, {kind = "globalavgpool"}, {kind = "linear", out = "classes"}]`, "lower -batch"},
	} {
		d, err := model.ParseDesc("m.toml", []byte(c.desc))
		if err != nil {
			t.Fatal(err)
		}
		s, err := model.Summarize(d, model.Shape{H: 28, W: 28, C: 1}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if h := NetHint(s, 1); !strings.Contains(h, c.want) {
			t.Errorf("%s: hint %q, want %q", c.desc, h, c.want)
		}
	}
}
