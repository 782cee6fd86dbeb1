package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// encodeV1 writes s as format version 1 wrote it: the same layout, a
// header with the sampler and RNG fields and without desc, config, run_id
// and final.
func encodeV1(s *State) []byte {
	type sec struct {
		Name string `json:"name"`
		Len  int64  `json:"len"`
	}
	h := struct {
		Model        string   `json:"model"`
		ConfigHash   string   `json:"config_hash"`
		Optimizer    string   `json:"optimizer"`
		WorldSize    int      `json:"world_size"`
		Epoch        int      `json:"epoch"`
		Step         int64    `json:"step"`
		SamplerEpoch int      `json:"sampler_epoch"`
		SamplerIndex int      `json:"sampler_index"`
		RNG          []uint64 `json:"rng"`
		Sections     []sec    `json:"sections"`
	}{s.Model, s.ConfigHash, s.Optimizer, s.WorldSize, s.Epoch, s.Step, s.Epoch, 0, []uint64{1}, nil}
	for _, x := range s.Sections {
		h.Sections = append(h.Sections, sec{x.Name, int64(len(x.Data))})
	}
	js, _ := json.Marshal(h)
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	for _, x := range s.Sections {
		for _, v := range x.Data {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// v1State is testState(step) as a version-1 file holds it.
func v1State(step int64) *State {
	s := testState(step)
	s.Desc, s.Config, s.RunID, s.EpochLoss, s.Data, s.Version = "", nil, "", nil, "", 1
	return s
}

// writeV1 puts a version-1 checkpoint of step into dir.
func writeV1(t *testing.T, dir string, step int64) string {
	t.Helper()
	p := filepath.Join(dir, FileName(step))
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(p, encodeV1(v1State(step)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadVersion1: files of format version 1 load (their sampler and RNG
// fields are ignored) and are checked by configuration hash; newer
// versions are refused with a message naming the version.
func TestLoadVersion1(t *testing.T) {
	dir := t.TempDir()
	p := writeV1(t, dir, 40)
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, got, v1State(40))
	if s, path, err := Latest(dir, nil); err != nil || path != p || s.Version != 1 {
		t.Fatalf("Latest: %v %s %v", s, path, err)
	}
	run := identity()
	run.HashV1 = "abc"
	if err := got.Check(run); err != nil {
		t.Errorf("same hash: %v", err)
	}
	run.HashV1 = "def"
	err = got.Check(run)
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "configuration hash is abc, this run's is def") || !strings.Contains(err.Error(), "format-version-1 checkpoint does not record which") {
		t.Errorf("other hash: %v", err)
	}

	b, _ := os.ReadFile(p)
	binary.LittleEndian.PutUint32(b[8:], 3)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	os.WriteFile(p, b, 0o644)
	if _, err := Load(p); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "format version 3, this build reads 1 to 2") {
		t.Errorf("version 3: %v", err)
	}
	if _, err := peek(p); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "format version 3") {
		t.Errorf("peek version 3: %v", err)
	}
}

// TestPeek: the header alone gives the run and step; damage to the
// header is reported as Load would.
func TestPeek(t *testing.T) {
	want := testState(12)
	p, err := Save(t.TempDir(), want, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := peek(p)
	if err != nil {
		t.Fatal(err)
	}
	g, w := *h, *want
	w.Sections = nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("peek:\ngot  %+v\nwant %+v", g, w)
	}
	full, _ := os.ReadFile(p)
	for _, c := range []struct {
		b    []byte
		want error
	}{
		{full[:5], ErrTruncated},
		{full[:30], ErrTruncated},
		{[]byte("PK\x03\x04 zip file, not a checkpoint"), ErrFormat},
		{append([]byte(Magic+"\x02\x00\x00\x00\x05\x00\x00\x00"), "{bad}"...), ErrFormat},
		{append([]byte(Magic+"\x02\x00\x00\x00\xff\xff\xff\xff"), "{}"...), ErrFormat},
	} {
		os.WriteFile(p, c.b, 0o644)
		if _, err := peek(p); !errors.Is(err, c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("peek of %q: %v, want %v", c.b, err, c.want)
		}
	}
}

// otherRun is testState(step) of another run with another learning rate.
func otherRun(step int64) *State {
	s := testState(step)
	s.RunID = "fedcba9876543210"
	s.Config = json.RawMessage(`{"batch":64,"lr":0.05,"seed":18446744073709551615,"augment":{"flip":true}}`)
	return s
}

// snapshot reads every file of dir (not its subdirectories).
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

// TestPruneOnlyOwnRun: a run's Save with keep removes only its own older
// checkpoints; another run's files, version-1 files and unreadable files
// stay byte for byte, even when they are older.
func TestPruneOnlyOwnRun(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{100, 200, 300} {
		if _, err := Save(dir, otherRun(step), 0); err != nil {
			t.Fatal(err)
		}
	}
	writeV1(t, dir, 50)
	os.WriteFile(filepath.Join(dir, FileName(60)), []byte("garbage"), 0o644)
	before := snapshot(t, dir)
	// This run starts below the other run's steps (the case: its
	// new files were the oldest and were pruned at once) and passes them.
	for _, step := range []int64{10, 20, 30, 250, 400} {
		if _, err := Save(dir, testState(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	after := snapshot(t, dir)
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s of another run changed or removed", name)
		}
	}
	var ours []string
	for name := range after {
		if _, ok := before[name]; !ok {
			ours = append(ours, name)
		}
	}
	if want := []string{FileName(250), FileName(400)}; !sameSet(ours, want) {
		t.Errorf("this run's files %q, want %q", ours, want)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// TestSaveKeepsOtherRunsStep: Save does not replace a same-step file of
// another run, of format version 1, or one that does not load; it says
// which file and what to do, and the file keeps its bytes. Its own run's
// file of the same step is replaced.
func TestSaveKeepsOtherRunsStep(t *testing.T) {
	dir := t.TempDir()
	Save(dir, otherRun(100), 0)
	writeV1(t, dir, 200)
	os.WriteFile(filepath.Join(dir, FileName(300)), []byte(Magic+"\x02\x00"), 0o644)
	before := snapshot(t, dir)
	for step, want := range map[int64]string{
		100: "ckpt-000000000100.hpck is step 100 of another run (run fedcba9876543210, model cnn-fmnist); not replacing it: move it away, or use another -checkpoint-dir",
		200: "ckpt-000000000200.hpck is step 200 of another run (format version 1, model cnn-fmnist)",
		300: "ckpt-000000000300.hpck does not load (truncated: 10 of at least 20 bytes); not replacing it",
	} {
		_, err := Save(dir, testState(step), 1)
		if !errors.Is(err, ErrInUse) || !strings.HasPrefix(err.Error(), "checkpoint dir "+dir+" in use: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("step %d: %v, want %q", step, err, want)
		}
	}
	if after := snapshot(t, dir); !reflect.DeepEqual(after, before) {
		t.Errorf("refused saves changed the directory: %d files before, %d after", len(before), len(after))
	}
	// Its own same-step file is replaced (a periodic and the final
	// checkpoint of one step).
	s := testState(400)
	Save(dir, s, 0)
	s.Epoch = 99
	p, err := Save(dir, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(p); got.Epoch != 99 {
		t.Error("same-run same-step save did not replace")
	}
}

// TestCheckFresh: a run that does not resume is refused a directory that
// holds checkpoint files, whoever wrote them, with what is there; an
// absent or empty directory, or one with other files only, is fine.
func TestCheckFresh(t *testing.T) {
	run := identity()
	run.HashV1 = "abc"
	empty := t.TempDir()
	os.WriteFile(filepath.Join(empty, "notes.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(empty, "ckpt-000000000010-1.tmp"), nil, 0o644)
	for _, dir := range []string{empty, filepath.Join(empty, "missing")} {
		if err := CheckFresh(dir, run); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}

	dir := t.TempDir()
	for _, step := range []int64{100, 200, 300} {
		Save(dir, otherRun(step), 0)
	}
	err := CheckFresh(dir, run)
	want := "checkpoint dir " + dir + " in use: it holds 3 checkpoints of another configuration (run fedcba9876543210, model cnn-fmnist, steps 100-300; differs in lr); a run without -resume needs a directory without checkpoints: continue with -resume auto (same settings), or use another -checkpoint-dir"
	if !errors.Is(err, ErrInUse) || err.Error() != want {
		t.Errorf("another run:\n got %v\nwant %s", err, want)
	}

	// Several runs, a version-1 file and an unreadable one.
	Save(dir, testState(20), 0)
	writeV1(t, dir, 5)
	os.WriteFile(filepath.Join(dir, FileName(7)), []byte("junk"), 0o644)
	w4 := testState(1)
	w4.RunID, w4.WorldSize = "1111111111111111", 2
	Save(dir, w4, 0)
	err = CheckFresh(dir, run)
	for _, want := range []string{
		"3 checkpoints of another configuration (run fedcba9876543210, model cnn-fmnist, steps 100-300; differs in lr)",
		"1 checkpoint of this configuration (run 0123456789abcdef, model cnn-fmnist, step 20)",
		"1 checkpoint of this configuration (format version 1, model cnn-fmnist, step 5)",
		"1 checkpoint of another configuration (run 1111111111111111, model cnn-fmnist, step 1; differs in world size 2, now 4)",
		"1 file that does not load (ckpt-000000000007.hpck)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	// Same settings: still refused (its files would be replaced).
	same := t.TempDir()
	Save(same, testState(8), 0)
	if err := CheckFresh(same, run); err == nil || !strings.Contains(err.Error(), "1 checkpoint of this configuration") || !strings.Contains(err.Error(), "-resume auto") {
		t.Errorf("same settings: %v", err)
	}
}

// Another model is said once, with the run's: not again among the settings.
func TestMismatchShort(t *testing.T) {
	s := &State{Model: "cnn", WorldSize: 2, Config: []byte(`{"model":"cnn","lr":0.1}`)}
	run := Identity{Model: "mlp", WorldSize: 1, Config: []byte(`{"model":"mlp","lr":0.2}`)}
	if got, want := s.compare(run).short(s, run), "model cnn, now mlp; lr; world size 2, now 1"; got != want {
		t.Errorf("short: %q, want %q", got, want)
	}
}

// TestSetAside: a run resuming from step 200 of its own run has its later
// files (300, 400) and a later file that does not load (350) moved into
// set-aside-after-step-200, byte for byte, and nothing else; a second
// roll-back to the same step gets a directory of its own. A later file of
// another run refuses it with ErrInUse and nothing moves.
func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{100, 200, 300, 400} {
		if _, err := Save(dir, testState(step), 0); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, FileName(350)), []byte("garbage"), 0o644)
	Save(dir, otherRun(150), 0) // older: left alone
	before := snapshot(t, dir)
	run := testState(0).RunID
	aside, moved, err := SetAside(dir, 200, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "set-aside-after-step-200"); aside != want {
		t.Errorf("set aside in %s, want %s", aside, want)
	}
	later := []string{FileName(300), FileName(350), FileName(400)}
	if !sameSet(moved, later) {
		t.Errorf("moved %q, want %q", moved, later)
	}
	after, there := snapshot(t, dir), snapshot(t, aside)
	for name, b := range before {
		where := after
		if slices.Contains(later, name) {
			where = there
		}
		if !bytes.Equal(where[name], b) {
			t.Errorf("%s changed, lost or not moved", name)
		}
	}
	if s, _, _ := Latest(dir, nil); s == nil || s.Step != 200 {
		t.Errorf("Latest after setting aside: %v, want step 200", s)
	}
	// Nothing later: nothing to do, no directory.
	if aside, moved, err := SetAside(dir, 200, run); aside != "" || moved != nil || err != nil {
		t.Errorf("nothing later: %q %q %v", aside, moved, err)
	}
	Save(dir, testState(300), 0)
	if aside, _, err := SetAside(dir, 200, run); err != nil || aside != filepath.Join(dir, "set-aside-after-step-200-2") {
		t.Errorf("a second roll-back: %q, %v", aside, err)
	}
	// A later file of another run: refused, nothing moved.
	Save(dir, otherRun(500), 0)
	Save(dir, testState(400), 0)
	before = snapshot(t, dir)
	_, _, err = SetAside(dir, 200, run)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "ckpt-000000000500.hpck is step 500 of another run") {
		t.Errorf("another run's later file: %v", err)
	}
	if after := snapshot(t, dir); !reflect.DeepEqual(after, before) {
		t.Error("a refused SetAside changed the directory")
	}
}

// TestSetAsideNewerVersion: a later file of a newer format version (a
// newer build went on past the step an older one resumes from) refuses
// the roll-back with ErrInUse naming it and its version, and nothing
// moves. Before, it was set aside as damaged and its training thrown away.
func TestSetAsideNewerVersion(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{100, 200} {
		if _, err := Save(dir, testState(step), 0); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, FileName(200))
	b, _ := os.ReadFile(p)
	b[8] = Version + 1
	os.WriteFile(p, b, 0o644)
	before := snapshot(t, dir)
	_, _, err := SetAside(dir, 100, testState(0).RunID)
	want := fmt.Sprintf("ckpt-000000000200.hpck is of format version %d, written by a newer hpctrain", Version+1)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Errorf("SetAside: %v, want ErrInUse saying %q", err, want)
	}
	if after := snapshot(t, dir); !reflect.DeepEqual(after, before) {
		t.Error("a refused SetAside changed the directory")
	}
}
