package model

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"

	"hpctrain/internal/tomlfile"
)

// Desc describes a network as data: a list of layers, some of which
// (residual blocks) hold lists of their own. It is read from TOML
// (ParseDesc, LoadDesc), printed back (TOML), hashed (Hash), compared
// (Diff) and built into a Net (Build). Every backend builds from it.
//
// A description read by ParseDesc is complete: every key has its value,
// defaults filled in, so that two descriptions of the same network are
// equal, print alike and hash alike.
type Desc struct {
	// Name says where the description came from, a zoo name or a file
	// path, for messages. It is not part of the description: TOML, Hash
	// and Diff ignore it.
	Name   string
	Layers []LayerDesc
}

// LayerDesc is one layer of a Desc. Each kind uses some of the fields; its
// TOML keys are the fields' names in lower case, with these defaults:
//
//	kind            keys (default)
//	conv            out, kernel, stride (1), pad (0), bias (true)
//	linear          out, bias (true)
//	relu            -
//	maxpool         kernel (at most 16), stride (kernel)
//	avgpool         kernel, stride (kernel)
//	globalavgpool   -
//	flatten         -
//	batchnorm       momentum (0.1), eps (1e-5; at least 1e-30)
//	dropout         p (0.5)
//	residual        layers, shortcut ("identity"; or "projection": 1x1
//	                convolution without bias + batchnorm; or "conv": 1x1
//	                convolution with bias)
//
// out may be the string "classes" in TOML (OutClasses here): the number of
// classes the network is built for.
type LayerDesc struct {
	Kind     string
	Out      int         // conv: output channels; linear: outputs
	Kernel   int         // conv, maxpool, avgpool: window K (K x K)
	Stride   int         // conv, maxpool, avgpool
	Pad      int         // conv: zero padding on every side
	Bias     bool        // conv, linear
	P        float64     // dropout: the probability of dropping a value
	Momentum float64     // batchnorm: weight of the batch in the running statistics
	Eps      float64     // batchnorm: added to the variance
	Shortcut string      // residual: identity, projection or conv
	Layers   []LayerDesc // residual: the body
}

// OutClasses as LayerDesc.Out stands for the number of classes.
const OutClasses = -1

// maxKey bounds integer keys: far beyond any real network, small enough
// that products of sizes cannot overflow.
const maxKey = 1 << 20

// minEps is the smallest batch norm eps (see parseLayer).
const minEps = 1e-30

// maxDepth bounds the nesting of residual blocks.
const maxDepth = 8

// kindKeys lists each kind's keys, in the order TOML prints them.
var kindKeys = map[string][]string{
	"conv":          {"out", "kernel", "stride", "pad", "bias"},
	"linear":        {"out", "bias"},
	"relu":          nil,
	"maxpool":       {"kernel", "stride"},
	"avgpool":       {"kernel", "stride"},
	"globalavgpool": nil,
	"flatten":       nil,
	"batchnorm":     {"momentum", "eps"},
	"dropout":       {"p"},
	"residual":      {"shortcut", "layers"},
}

// Kinds lists the layer kinds a description may use, sorted.
func Kinds() []string {
	var s []string
	for k := range kindKeys {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ParseDesc reads a description from TOML text: a key layers holding the
// list of layers, each a table with a key kind and that kind's keys (see
// LayerDesc), for example
//
//	layers = [
//	  {kind = "conv", out = 16, kernel = 3, pad = 1, bias = false},
//	  {kind = "batchnorm"},
//	  {kind = "relu"},
//	  {kind = "residual", layers = [
//	    {kind = "conv", out = 16, kernel = 3, pad = 1},
//	  ]},
//	  {kind = "globalavgpool"},
//	  {kind = "linear", out = "classes"},
//	]
//
// ([[layers]] tables work as well). name says where the text came from,
// for messages. An error is one line naming name, the layer (its position,
// "5.2" for the second layer of block 5, and kind) and the key; unknown
// keys and kinds are errors. Shapes are checked by Build.
func ParseDesc(name string, text []byte) (Desc, error) {
	d := Desc{Name: name}
	if err := tomlfile.Check(text); err != nil {
		return d, fmt.Errorf("model %s: %w", name, err)
	}
	var raw map[string]any
	if _, err := toml.Decode(string(text), &raw); err != nil {
		return d, fmt.Errorf("model %s: %s", name, strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
	}
	for _, k := range sortedKeys(raw) {
		if k != "layers" {
			return d, fmt.Errorf("model %s: unknown key %q (a description has one key, layers)", name, k)
		}
	}
	v, ok := raw["layers"]
	if !ok {
		return d, fmt.Errorf("model %s: missing key \"layers\" (the list of layers)", name)
	}
	ls, err := parseLayers(v, "", 0)
	if err != nil {
		return d, fmt.Errorf("model %s: %w", name, err)
	}
	d.Layers = ls
	return d, nil
}

// parseLayers reads a list of layer tables; path is the list's position
// ("" at the top, "5." inside block 5).
func parseLayers(v any, path string, depth int) ([]LayerDesc, error) {
	var items []any
	switch v := v.(type) {
	case []any:
		items = v
	case []map[string]any:
		for _, m := range v {
			items = append(items, m)
		}
	default:
		where := "key \"layers\""
		if path != "" {
			where = fmt.Sprintf("layer %s (residual): key \"layers\"", strings.TrimSuffix(path, "."))
		}
		return nil, fmt.Errorf("%s must be a list of layers, got %s", where, show(v))
	}
	if len(items) == 0 {
		if path == "" {
			return nil, errors.New("key \"layers\" is an empty list")
		}
		return nil, fmt.Errorf("layer %s (residual): key \"layers\" is an empty list", strings.TrimSuffix(path, "."))
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("layer %s (residual): blocks nested deeper than %d", strings.TrimSuffix(path, "."), maxDepth)
	}
	ls := make([]LayerDesc, len(items))
	for i, it := range items {
		pos := path + strconv.Itoa(i+1)
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("layer %s: not a table but %s (write {kind = \"...\", ...})", pos, show(it))
		}
		l, err := parseLayer(m, pos, depth)
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

// keys reads one layer table's keys, checking their types and ranges.
type keys struct {
	m    map[string]any
	pos  string
	kind string
	err  error
}

func (k *keys) fail(key, format string, a ...any) {
	if k.err == nil {
		k.err = fmt.Errorf("layer %s (%s): key %q %s", k.pos, k.kind, key, fmt.Sprintf(format, a...))
	}
}

// int reads an integer key in [lo, maxKey]: def when absent, and required
// if def < lo; classes allows the string "classes" (OutClasses).
func (k *keys) int(key string, def, lo int, classes bool) int {
	v, ok := k.m[key]
	if !ok {
		if def < lo && def != OutClasses {
			k.fail(key, "is missing")
		}
		return def
	}
	want := fmt.Sprintf("must be an integer >= %d", lo)
	if classes {
		want += ` or "classes"`
	}
	if s, ok := v.(string); ok && classes && s == "classes" {
		return OutClasses
	}
	i, ok := v.(int64)
	if !ok || i < int64(lo) {
		k.fail(key, "%s, got %s", want, show(v))
		return def
	}
	if i > maxKey {
		k.fail(key, "must be at most %d, got %d", maxKey, i)
		return def
	}
	return int(i)
}

// float reads a number key in [lo, hi] (or (lo, hi] or [lo, hi) when
// open says so).
func (k *keys) float(key string, def, lo, hi float64, openLo, openHi bool) float64 {
	v, ok := k.m[key]
	if !ok {
		return def
	}
	var f float64
	switch v := v.(type) {
	case float64:
		f = v
	case int64:
		f = float64(v)
	default:
		f = math.NaN()
	}
	in := !math.IsNaN(f) && (f > lo || !openLo && f == lo) && (f < hi || !openHi && f == hi)
	if !in {
		l, r := "[", "]"
		if openLo {
			l = "("
		}
		if openHi {
			r = ")"
		}
		k.fail(key, "must be a number in %s%v, %v%s, got %s", l, lo, hi, r, show(v))
		return def
	}
	return f
}

func (k *keys) bool(key string, def bool) bool {
	v, ok := k.m[key]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		k.fail(key, "must be true or false, got %s", show(v))
		return def
	}
	return b
}

func (k *keys) oneOf(key, def string, choices []string) string {
	v, ok := k.m[key]
	if !ok {
		return def
	}
	s, ok := v.(string)
	if ok {
		for _, c := range choices {
			if s == c {
				return s
			}
		}
	}
	k.fail(key, "must be one of %s, got %s", strings.Join(choices, ", "), show(v))
	return def
}

func parseLayer(m map[string]any, pos string, depth int) (LayerDesc, error) {
	kv, ok := m["kind"]
	if !ok {
		return LayerDesc{}, fmt.Errorf("layer %s: missing key \"kind\" (kinds: %s)", pos, strings.Join(Kinds(), ", "))
	}
	kind, ok := kv.(string)
	if !ok {
		return LayerDesc{}, fmt.Errorf("layer %s: key \"kind\" must be a string, got %s", pos, show(kv))
	}
	allowed, ok := kindKeys[kind]
	if !ok {
		label := kind
		if strings.IndexFunc(kind, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' || r == ')' }) >= 0 || kind == "" {
			label = strconv.Quote(kind)
		}
		return LayerDesc{}, fmt.Errorf("layer %s (%s): unknown kind %s (kinds: %s)", pos, label, strconv.Quote(kind), strings.Join(Kinds(), ", "))
	}
	for _, key := range sortedKeys(m) {
		if key == "kind" || contains(allowed, key) {
			continue
		}
		what := "no keys"
		if len(allowed) > 0 {
			what = "keys " + strings.Join(allowed, ", ")
		}
		return LayerDesc{}, fmt.Errorf("layer %s (%s): unknown key %q (%s has %s)", pos, kind, key, kind, what)
	}
	k := &keys{m: m, pos: pos, kind: kind}
	l := LayerDesc{Kind: kind}
	switch kind {
	case "conv":
		l.Out = k.int("out", 0, 1, true)
		l.Kernel = k.int("kernel", 0, 1, false)
		l.Stride = k.int("stride", 1, 1, false)
		l.Pad = k.int("pad", 0, 0, false)
		l.Bias = k.bool("bias", true)
	case "linear":
		l.Out = k.int("out", 0, 1, true)
		l.Bias = k.bool("bias", true)
	case "maxpool", "avgpool":
		l.Kernel = k.int("kernel", 0, 1, false)
		if kind == "maxpool" && l.Kernel > maxPoolK {
			k.fail("kernel", "must be at most %d for a max-pool (its argmax is one byte), got %d", maxPoolK, l.Kernel)
		}
		l.Stride = k.int("stride", max(l.Kernel, 1), 1, false)
	case "batchnorm":
		l.Momentum = k.float("momentum", 0.1, 0, 1, false, false)
		// eps reaches float32: the scale gamma/sqrt(var+eps) (1e150 for
		// eps 1e-300 and a constant channel, Inf as float32, and 0*Inf
		// NaN) and ONNX's epsilon attribute (0 for 1e-300). From 1e-30
		// the scale is at most 1e15, and float32 holds eps itself.
		l.Eps = k.float("eps", 1e-5, minEps, 1, false, false)
	case "dropout":
		l.P = k.float("p", 0.5, 0, 1, false, true)
		if k.err == nil && dropsAll(l.P) {
			k.fail("p", "must be a number in [0, 1), got %s, which drops every value (the mask compares 32 random bits with p rounded to 32 bits, here 1)", show(l.P))
		}
	case "residual":
		l.Shortcut = k.oneOf("shortcut", "identity", shortcuts)
		if k.err != nil {
			return l, k.err
		}
		v, ok := m["layers"]
		if !ok {
			return l, fmt.Errorf("layer %s (residual): key \"layers\" is missing (the block's body)", pos)
		}
		body, err := parseLayers(v, pos+".", depth+1)
		if err != nil {
			return l, err
		}
		l.Layers = body
	}
	return l, k.err
}

// show formats a TOML value for a message.
func show(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "a list"
	case float64:
		return tomlFloat(v)
	}
	return fmt.Sprint(v)
}

func sortedKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// value is the TOML text of key's value.
func (l LayerDesc) value(key string) string {
	switch key {
	case "out":
		if l.Out == OutClasses {
			return `"classes"`
		}
		return strconv.Itoa(l.Out)
	case "kernel":
		return strconv.Itoa(l.Kernel)
	case "stride":
		return strconv.Itoa(l.Stride)
	case "pad":
		return strconv.Itoa(l.Pad)
	case "bias":
		return strconv.FormatBool(l.Bias)
	case "p":
		return tomlFloat(l.P)
	case "momentum":
		return tomlFloat(l.Momentum)
	case "eps":
		return tomlFloat(l.Eps)
	case "shortcut":
		return quote(l.Shortcut)
	}
	panic("model: no key " + key)
}

// tomlFloat prints f so that TOML reads back the same float64.
func tomlFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// quote is a TOML basic string: control characters escaped as \uXXXX,
// invalid UTF-8 replaced.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TOML prints the description in the form ParseDesc reads, every key
// given (defaults included), one layer per line, residual blocks' bodies
// indented: ParseDesc(d.Name, d.TOML()) gives d back.
func (d Desc) TOML() []byte {
	var b bytes.Buffer
	b.WriteString("layers = [\n")
	writeLayers(&b, d.Layers, "  ")
	b.WriteString("]\n")
	return b.Bytes()
}

func writeLayers(b *bytes.Buffer, ls []LayerDesc, indent string) {
	for _, l := range ls {
		fmt.Fprintf(b, "%s{kind = %s", indent, quote(l.Kind))
		for _, k := range kindKeys[l.Kind] {
			if k != "layers" {
				fmt.Fprintf(b, ", %s = %s", k, l.value(k))
			}
		}
		if l.Kind != "residual" {
			b.WriteString("},\n")
			continue
		}
		b.WriteString(", layers = [\n")
		writeLayers(b, l.Layers, indent+"  ")
		b.WriteString(indent + "]},\n")
	}
}

// Hash identifies the description: the first 16 hex digits of the SHA-256
// of its TOML. Equal descriptions (whatever their Name) hash alike.
func (d Desc) Hash() string {
	s := sha256.Sum256(d.TOML())
	return hex.EncodeToString(s[:8])
}

// Diff describes the first difference between d and e in one line, d's
// value first ("layer 3 (conv): out 32 vs 64", "layer 5: kind relu vs
// batchnorm", "9 layers vs 12"), or returns "" when they are equal.
func (d Desc) Diff(e Desc) string { return diffLayers(d.Layers, e.Layers, "") }

func diffLayers(a, b []LayerDesc, path string) string {
	for i := range min(len(a), len(b)) {
		pos := path + strconv.Itoa(i+1)
		x, y := a[i], b[i]
		if x.Kind != y.Kind {
			return fmt.Sprintf("layer %s: kind %s vs %s", pos, x.Kind, y.Kind)
		}
		for _, k := range kindKeys[x.Kind] {
			if k == "layers" {
				if s := diffLayers(x.Layers, y.Layers, pos+"."); s != "" {
					return s
				}
				continue
			}
			if vx, vy := x.value(k), y.value(k); vx != vy {
				return fmt.Sprintf("layer %s (%s): %s %s vs %s", pos, x.Kind, k, vx, vy)
			}
		}
	}
	if len(a) == len(b) {
		return ""
	}
	if path == "" {
		return fmt.Sprintf("%d layers vs %d", len(a), len(b))
	}
	return fmt.Sprintf("layer %s (residual): %d layers vs %d", strings.TrimSuffix(path, "."), len(a), len(b))
}

//go:embed models/*.toml
var zooFS embed.FS

// Zoo lists the built-in models, sorted: descriptions embedded in the
// binary (model/models/NAME.toml).
func Zoo() []string {
	es, _ := fs.ReadDir(zooFS, "models")
	var s []string
	for _, e := range es {
		s = append(s, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(s)
	return s
}

// Names is Zoo.
func Names() []string { return Zoo() }

// ZooSource returns the TOML file of a built-in model as embedded, with
// its comments: a starting point to copy and edit.
func ZooSource(name string) ([]byte, error) {
	if strings.ContainsAny(name, "/\\.") || name == "" {
		return nil, fmt.Errorf("unknown model %q (zoo: %s)", name, strings.Join(Zoo(), ", "))
	}
	b, err := zooFS.ReadFile(path.Join("models", name+".toml"))
	if err != nil {
		return nil, fmt.Errorf("unknown model %q (zoo: %s)", name, strings.Join(Zoo(), ", "))
	}
	return b, nil
}

// LoadDesc reads a description: a built-in model's (Zoo) or, for a path
// (ending in .toml, or naming a file that exists), a file's.
func LoadDesc(nameOrPath string) (Desc, error) {
	if b, err := ZooSource(nameOrPath); err == nil {
		return ParseDesc(nameOrPath, b)
	}
	_, statErr := os.Stat(nameOrPath)
	if !strings.HasSuffix(nameOrPath, ".toml") && statErr != nil {
		return Desc{}, fmt.Errorf("unknown model %q (zoo: %s; or a .toml file)", nameOrPath, strings.Join(Zoo(), ", "))
	}
	b, err := tomlfile.Read(nameOrPath)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Desc{}, fmt.Errorf("model %s: %w", nameOrPath, err)
	}
	return ParseDesc(nameOrPath, b)
}
