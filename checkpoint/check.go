package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Identity is what a run must share with a checkpoint to resume from it.
type Identity struct {
	Model string // model name
	Desc  string // model description (TOML); compared when both record one
	// Config is the run's settings less those a resumption may change, a
	// JSON object (see State.Config).
	Config json.RawMessage
	// HashV1 is the configuration hash as version-1 files recorded it:
	// they hold no Config, so Check compares this instead.
	HashV1    string
	WorldSize int // MPI ranks
}

// Check returns an ErrIncompatible error when s was not written by a run
// like run: another model or model description, other settings, or another
// world size. Settings are compared key by key and the error names each
// key that differs with both values ("it was written with lr = 0.01; this
// run has lr = 0.02"). Resuming needs the same -np because the global batch
// size and each rank's shard of the sampler's permutation depend on it.
// A checkpoint without a model description (written before descriptions
// were recorded) is not refused for it: the caller still compares the
// tensors' sizes. All differences are reported at once.
func (s *State) Check(run Identity) error {
	m := s.compare(run)
	var msgs []string
	if m.model {
		msgs = append(msgs, fmt.Sprintf("it is for model %q, this run trains %q", s.Model, run.Model))
	}
	if len(m.desc) > 0 {
		msgs = append(msgs, "its model description differs: "+m.desc.sentence()+" (resume with the same model, or start a fresh run in another -checkpoint-dir)")
	}
	if len(m.config) > 0 {
		msgs = append(msgs, "its configuration differs: "+m.config.sentence()+" (resume with the same settings, or start a fresh run in another -checkpoint-dir)")
	}
	if m.hash {
		msgs = append(msgs, fmt.Sprintf("its configuration hash is %s, this run's is %s: the training settings changed, and a format-version-%d checkpoint does not record which (resume with the settings it was written with, or start a fresh run in another -checkpoint-dir)", s.ConfigHash, run.HashV1, s.Version))
	}
	if m.world {
		msgs = append(msgs, fmt.Sprintf("it was written by %d ranks, this run has %d: resume with mpirun -np %d (the global batch and the sampler's shards depend on it)", s.WorldSize, run.WorldSize, s.WorldSize))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w at step %d: %s", ErrIncompatible, s.Step, strings.Join(msgs, "; "))
}

// mismatch is how a checkpoint differs from a run.
type mismatch struct {
	model, hash, world bool
	desc, config       changes
}

func (m mismatch) none() bool {
	return !m.model && !m.hash && !m.world && len(m.desc) == 0 && len(m.config) == 0
}

// short names what differs in a few words, the run's value after the
// checkpoint's where it is one word: "lr, batch; world size 2, now 4".
func (m mismatch) short(s *State, run Identity) string {
	var parts []string
	if m.model {
		parts = append(parts, fmt.Sprintf("model %s, now %s", s.Model, run.Model))
	}
	if len(m.desc) > 0 {
		parts = append(parts, "model description ("+m.desc.keys()+")")
	}
	config := m.config
	if m.model {
		// The model's name is a setting too: said once.
		config = slices.DeleteFunc(slices.Clone(config), func(c change) bool { return c.key == "model" })
	}
	if len(config) > 0 {
		parts = append(parts, config.keys())
	}
	if m.hash {
		parts = append(parts, "configuration hash")
	}
	if m.world {
		parts = append(parts, fmt.Sprintf("world size %d, now %d", s.WorldSize, run.WorldSize))
	}
	return strings.Join(parts, "; ")
}

// compare finds how s differs from run.
func (s *State) compare(run Identity) mismatch {
	m := mismatch{model: s.Model != run.Model, world: s.WorldSize != run.WorldSize}
	if s.Desc != "" && run.Desc != "" && s.Desc != run.Desc {
		m.desc = diffTOML(s.Desc, run.Desc)
	}
	if s.Config == nil {
		m.hash = s.ConfigHash != run.HashV1
	} else {
		m.config = diffJSON(s.Config, run.Config)
	}
	return m
}

// change is one key whose value differs; was or now is "" when the key is
// absent on that side.
type change struct{ key, was, now string }

type changes []change

// maxNamed bounds the keys a message lists.
const maxNamed = 8

// sentence words the changes as "written with lr = 0.01, batch = 64; this
// run has lr = 0.02, batch = 128".
func (cs changes) sentence() string {
	side := func(val func(change) string) string {
		var b strings.Builder
		for i, c := range cs {
			if i == maxNamed {
				fmt.Fprintf(&b, " and %d more", len(cs)-maxNamed)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			v := val(c)
			if v == "" {
				v = "(unset)"
			}
			b.WriteString(c.key + " = " + v)
		}
		return b.String()
	}
	return "it was written with " + side(func(c change) string { return c.was }) +
		"; this run has " + side(func(c change) string { return c.now })
}

// keys lists the keys: "lr, batch".
func (cs changes) keys() string {
	var ks []string
	for i, c := range cs {
		if i == maxNamed {
			ks = append(ks, fmt.Sprintf("and %d more", len(cs)-maxNamed))
			break
		}
		ks = append(ks, c.key)
	}
	return strings.Join(ks, ", ")
}

// diffJSON compares two JSON objects key by key, nested objects (and
// arrays of objects) as dotted keys ("augment.flip", "layers.2.channels"),
// other values as their compact JSON text. A key absent on one side equals
// a zero value (0, "", false, null, [], {}) on the other, so that a setting
// added by a later build, at its zero default, does not block a resume.
// Something that is not an object compares as a whole under the key "".
func diffJSON(was, now json.RawMessage) changes {
	a, b := leaves(was), leaves(now)
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var cs changes
	for _, k := range keys {
		va, vb := a[k], b[k]
		if va == vb || va == "" && isZero(vb) || vb == "" && isZero(va) {
			continue
		}
		cs = append(cs, change{k, va, vb})
	}
	return cs
}

// leaves flattens a JSON object into dotted keys and compact JSON values.
func leaves(m json.RawMessage) map[string]string {
	out := map[string]string{}
	if len(m) == 0 {
		return out
	}
	d := json.NewDecoder(bytes.NewReader(m))
	d.UseNumber() // numbers keep their text: a seed of 2^63 stays exact
	var v any
	if err := d.Decode(&v); err != nil {
		out[""] = string(m)
		return out
	}
	if _, ok := v.(map[string]any); !ok {
		out[""] = string(m)
		return out
	}
	flatten("", v, out)
	return out
}

func flatten(prefix string, v any, out map[string]string) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			flatten(join(k), e, out)
		}
		return
	case []any:
		for _, e := range v {
			if _, ok := e.(map[string]any); ok {
				for i, e := range v {
					flatten(join(strconv.Itoa(i)), e, out)
				}
				return
			}
		}
	}
	b, _ := json.Marshal(v)
	out[prefix] = string(b)
}

// isZero reports whether a compact JSON value is a zero value.
func isZero(v string) bool {
	switch v {
	case `""`, "false", "null", "[]", "{}":
		return true
	}
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && f == 0
}

// diffTOML compares two model descriptions by key (so comments and layout
// do not count); text that does not parse as TOML is compared by line.
func diffTOML(was, now string) changes {
	var a, b map[string]any
	_, errA := toml.Decode(was, &a)
	_, errB := toml.Decode(now, &b)
	if errA == nil && errB == nil {
		ja, errA := json.Marshal(a)
		jb, errB := json.Marshal(b)
		if errA == nil && errB == nil {
			return diffJSON(ja, jb)
		}
	}
	la, lb := strings.Split(was, "\n"), strings.Split(now, "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = strconv.Quote(la[i])
		}
		if i < len(lb) {
			y = strconv.Quote(lb[i])
		}
		if x != y {
			return changes{{fmt.Sprintf("line %d", i+1), x, y}}
		}
	}
	return nil
}
