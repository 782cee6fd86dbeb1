package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testState returns a small State whose values depend on step.
func testState(step int64) *State {
	params := make([]float32, 1000)
	for i := range params {
		params[i] = float32(i)*0.001 + float32(step)
	}
	params[0] = float32(math.NaN())
	params[1] = float32(math.Inf(-1))
	params[2] = float32(math.Copysign(0, -1))
	return &State{
		Model: "cnn-fmnist", Desc: "[[layer]]\nkind = \"conv\"\nchannels = 32\n",
		ConfigHash: "abc", Config: json.RawMessage(`{"batch":64,"lr":0.01,"seed":18446744073709551615,"augment":{"flip":true}}`),
		RunID: "0123456789abcdef", Optimizer: "adamw",
		WorldSize: 4, Epoch: 2, Step: step, EpochLoss: &EpochLoss{Sum: 0.1 * float64(step), Steps: 3},
		Data: "640 training and 64 test samples of 28x28x1, 10 classes",
		Sections: []Section{
			{"params", params},
			{"adamw.m", make([]float32, 1000)},
			{"adamw.v", []float32{1, 2, 3}},
			{"buffers", []float32{0.5, -1, float32(math.Inf(1))}},
			{"empty", []float32{}},
		},
		Version: Version,
	}
}

// sameState compares two States bit for bit (NaN included).
func sameState(t *testing.T, got, want *State) {
	t.Helper()
	g, w := *got, *want
	g.Sections, w.Sections = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("header fields differ:\ngot  %+v\nwant %+v", g, w)
	}
	if len(got.Sections) != len(want.Sections) {
		t.Fatalf("%d sections, want %d", len(got.Sections), len(want.Sections))
	}
	for i, ws := range want.Sections {
		gs := got.Sections[i]
		if gs.Name != ws.Name || len(gs.Data) != len(ws.Data) {
			t.Fatalf("section %d is %s[%d], want %s[%d]", i, gs.Name, len(gs.Data), ws.Name, len(ws.Data))
		}
		for j := range ws.Data {
			if math.Float32bits(gs.Data[j]) != math.Float32bits(ws.Data[j]) {
				t.Fatalf("%s[%d] = %v, want %v", ws.Name, j, gs.Data[j], ws.Data[j])
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := testState(1200)
	path, err := Save(dir, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "ckpt-000000001200.hpck" {
		t.Errorf("saved as %s", path)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, got, want)
	if got.Lookup("adamw.v")[2] != 3 || got.Lookup("nope") != nil {
		t.Error("Lookup")
	}
	// Deterministic bytes.
	b1, _ := os.ReadFile(path)
	path2, err := Save(t.TempDir(), want, 0)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(path2)
	if !bytes.Equal(b1, b2) {
		t.Error("saving the same State twice gave different bytes")
	}
	if !bytes.HasPrefix(b1, []byte(Magic+"\x02\x00\x00\x00")) {
		t.Errorf("file starts %q", b1[:12])
	}
	// The final result of a completed run.
	want.Final = json.RawMessage(`{"epoch":2,"test_accuracy":0.8125,"final":true}`)
	p, err := Save(dir, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = Load(p); err != nil {
		t.Fatal(err)
	}
	sameState(t, got, want)
	// Empty state.
	empty := &State{RunID: "e"}
	p, err = Save(t.TempDir(), empty, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err = Load(p)
	if err != nil || got.Step != 0 || len(got.Sections) != 0 {
		t.Fatalf("empty state: %+v, %v", got, err)
	}
}

func TestTruncated(t *testing.T) {
	path, err := Save(t.TempDir(), testState(7), 0)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(path)
	n := len(full)
	for cut := 0; cut < n; cut += 1 + cut/4 {
		if err := os.WriteFile(path, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if cut == 0 {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFormat) {
				t.Errorf("empty file: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "truncated: ") || !strings.Contains(err.Error(), path) {
			t.Errorf("cut at %d of %d: %v", cut, n, err)
		}
	}
	// Once the header is intact the message gives the exact size.
	os.WriteFile(path, full[:n-100], 0o644)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "truncated: "+strconv.Itoa(n-100)+" of "+strconv.Itoa(n)+" bytes") {
		t.Errorf("cut 100 bytes: %v", err)
	}
}

func TestBitFlips(t *testing.T) {
	path, err := Save(t.TempDir(), testState(9), 0)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(path)
	for off := 0; off < len(full); off += 1 + off/8 {
		for _, bit := range []uint{0, 7} {
			b := bytes.Clone(full)
			b[off] ^= 1 << bit
			os.WriteFile(path, b, 0o644)
			_, err := Load(path)
			switch {
			case err == nil:
				t.Fatalf("flip of bit %d at %d not detected", bit, off)
			case off < 12: // magic, version
				if !errors.Is(err, ErrFormat) {
					t.Errorf("flip at %d: %v", off, err)
				}
			case off < 16: // header length: mismatch or a header that now reads short
				if !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrTruncated) {
					t.Errorf("flip at %d: %v", off, err)
				}
			default:
				if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "checksum mismatch") {
					t.Errorf("flip at %d: %v", off, err)
				}
			}
		}
	}
}

func TestAppendedBytes(t *testing.T) {
	path, _ := Save(t.TempDir(), testState(3), 0)
	full, _ := os.ReadFile(path)
	os.WriteFile(path, append(full, 0, 0, 0, 0), 0o644)
	if _, err := Load(path); !errors.Is(err, ErrChecksum) {
		t.Errorf("appended bytes: %v", err)
	}
}

func TestLatestSkipsCorrupt(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{100, 200, 300} {
		if _, err := Save(dir, testState(step), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Newest is truncated, next is bit-flipped: Latest must fall back to 100.
	p300 := filepath.Join(dir, FileName(300))
	b, _ := os.ReadFile(p300)
	os.WriteFile(p300, b[:len(b)/2], 0o644)
	p200 := filepath.Join(dir, FileName(200))
	b, _ = os.ReadFile(p200)
	b[len(b)/2] ^= 0x10
	os.WriteFile(p200, b, 0o644)
	// A leftover temp file of a later step and an unrelated file are ignored.
	os.WriteFile(filepath.Join(dir, "ckpt-000000000400-123.tmp"), []byte("partial"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644)
	// A valid file under the wrong name is refused.
	b, _ = os.ReadFile(filepath.Join(dir, FileName(100)))
	os.WriteFile(filepath.Join(dir, FileName(250)), b, 0o644)

	var warnings []string
	s, path, err := Latest(dir, func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if s == nil || s.Step != 100 || path != filepath.Join(dir, FileName(100)) {
		t.Fatalf("Latest = %v, %s", s, path)
	}
	sameState(t, s, testState(100))
	want := []string{FileName(300) + ": truncated", FileName(250) + ": not a checkpoint: file name says step 250", FileName(200) + ": checksum mismatch"}
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q", warnings)
	}
	for i, w := range want {
		if !strings.Contains(warnings[i], w) {
			t.Errorf("warning %q lacks %q", warnings[i], w)
		}
	}
}

func TestLatestEmpty(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		s, p, err := Latest(dir, nil)
		if s != nil || p != "" || err != nil {
			t.Errorf("Latest(%s) = %v, %q, %v", dir, s, p, err)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, _, err := Latest(file, nil); err == nil {
		t.Error("Latest on a regular file: want error")
	}
}

func TestKeepPrunes(t *testing.T) {
	dir := t.TempDir()
	// A corrupt old checkpoint must survive pruning.
	os.WriteFile(filepath.Join(dir, FileName(1)), []byte("garbage"), 0o644)
	for step := int64(10); step <= 60; step += 10 {
		if _, err := Save(dir, testState(step), 3); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{FileName(1), FileName(40), FileName(50), FileName(60)}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("after keep=3: %q, want %q", names, want)
	}
	// keep <= 0 keeps everything.
	if _, err := Save(dir, testState(70), 0); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Fatalf("keep=0 removed files: %d left", len(entries))
	}
}

func TestSameStepReplaced(t *testing.T) {
	dir := t.TempDir()
	s := testState(5)
	Save(dir, s, 0)
	s.Epoch = 99
	p, err := Save(dir, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Load(p)
	if got.Epoch != 99 {
		t.Fatal("same-step save did not replace")
	}
}

func TestLeftoverTmpIgnoredAndRemoved(t *testing.T) {
	dir := t.TempDir()
	Save(dir, testState(10), 0)
	// Simulate a crash mid-write of step 20: a partial temp file.
	tmp := filepath.Join(dir, "ckpt-000000000020-99.tmp")
	os.WriteFile(tmp, []byte(Magic+"partial"), 0o644)
	s, _, err := Latest(dir, func(m string) { t.Errorf("unexpected warning %s", m) })
	if err != nil || s.Step != 10 {
		t.Fatalf("Latest = %v, %v", s, err)
	}
	if _, err := Save(dir, testState(20), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover %s not removed: %v", tmp, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Errorf("temp files left: %q", m)
	}
}

func TestUnwritableDir(t *testing.T) {
	// As root, permission bits do not stop writes; a path below a regular
	// file, or in /proc, cannot be created by anyone.
	base := t.TempDir()
	good, err := Save(base, testState(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(good)
	for _, dir := range []string{filepath.Join(good, "sub"), "/proc/hpctrain-ckpt"} {
		_, err := Save(dir, testState(2), 1)
		if err == nil {
			t.Errorf("Save(%s) succeeded", dir)
			continue
		}
		if want := "checkpoint dir " + dir + ": not writable: "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Save(%s): %q, want prefix %q", dir, err, want)
		}
	}
	if os.Getuid() != 0 {
		ro := filepath.Join(base, "ro")
		os.Mkdir(ro, 0o555)
		if _, err := Save(ro, testState(2), 0); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("read-only dir: %v", err)
		}
	}
	after, _ := os.ReadFile(good)
	if !bytes.Equal(before, after) {
		t.Error("failed saves touched an existing checkpoint")
	}
}

// identity is the Identity of testState's run.
func identity() Identity {
	s := testState(0)
	return Identity{Model: s.Model, Desc: s.Desc, Config: s.Config, HashV1: "unused", WorldSize: s.WorldSize}
}

func TestCheck(t *testing.T) {
	s := testState(1)
	if err := s.Check(identity()); err != nil {
		t.Fatal(err)
	}
	run := identity()
	run.Model, run.WorldSize = "mlp", 2
	run.Config = json.RawMessage(`{"batch":128,"lr":0.02,"seed":18446744073709551615,"augment":{"flip":false}}`)
	err := s.Check(run)
	if !errors.Is(err, ErrIncompatible) {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{
		`model "cnn-fmnist", this run trains "mlp"`,
		"its configuration differs: it was written with augment.flip = true, batch = 64, lr = 0.01; this run has augment.flip = false, batch = 128, lr = 0.02 (resume with the same settings",
		"mpirun -np 4", "written by 4 ranks, this run has 2",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "seed") || strings.Contains(err.Error(), "\n") {
		t.Errorf("%q names an equal key or spans lines", err)
	}
}

// TestCheckConfigKeys: keys absent on one side equal zero values on the
// other; a key added with another value, or removed, is named; long lists
// are cut.
func TestCheckConfigKeys(t *testing.T) {
	for _, c := range []struct {
		was, now string
		want     string // "" for no difference
	}{
		{`{"a":1}`, `{"a":1,"new":0,"s":"","b":false,"n":null,"l":[],"o":{}}`, ""},
		{`{"a":1,"gone":0}`, `{"a":1}`, ""},
		{`{"a":1}`, `{"a":1,"beta1":0.9}`, "written with beta1 = (unset); this run has beta1 = 0.9"},
		{`{"mean":[0.5,0.4]}`, `{"mean":[0.5,0.3]}`, "mean = [0.5,0.4]; this run has mean = [0.5,0.3]"},
		{`{"seed":18446744073709551615}`, `{"seed":18446744073709551614}`, "seed = 18446744073709551615; this run has seed = 18446744073709551614"},
		{`{"layers":[{"c":1},{"c":2}]}`, `{"layers":[{"c":1},{"c":3}]}`, "layers.1.c = 2; this run has layers.1.c = 3"},
		{`{"k":"x"}`, `{"k":"y"}`, `k = "x"; this run has k = "y"`},
		{`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1}`, `{}`, "h = 1 and 2 more; this run has"},
	} {
		s := testState(1)
		s.Config = json.RawMessage(c.was)
		run := identity()
		run.Config = json.RawMessage(c.now)
		err := s.Check(run)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s vs %s: %v", c.was, c.now, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s vs %s: %v, want %q", c.was, c.now, err, c.want)
		}
	}
}

// TestCheckDesc: model descriptions compare by TOML key (layout and
// comments do not count), by line when not TOML; a checkpoint without one
// is not refused for it.
func TestCheckDesc(t *testing.T) {
	s := testState(1)
	for _, c := range []struct {
		desc, want string
	}{
		{"# the same model\n[[layer]]\nkind = 'conv'\n  channels = 32\n", ""},
		{"[[layer]]\nkind = \"conv\"\nchannels = 64\n", "its model description differs: it was written with layer.0.channels = 32; this run has layer.0.channels = 64 (resume with the same model"},
		{"[[layer]]\nkind = \"conv\"\nchannels = 32\n[[layer]]\nkind = \"bn\"\n", "layer.1.kind = (unset); this run has layer.1.kind = \"bn\""},
		{"not = toml = at all", `line 1 = "[[layer]]"; this run has line 1 = "not = toml = at all"`},
	} {
		run := identity()
		run.Desc = c.desc
		err := s.Check(run)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.desc, err)
		case c.want != "" && (!errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.desc, err, c.want)
		}
	}
	old := testState(1)
	old.Desc = ""
	run := identity()
	run.Desc = "[[layer]]\nkind = \"dense\"\n"
	if err := old.Check(run); err != nil {
		t.Errorf("checkpoint without a description: %v", err)
	}
}

func TestMisusePanics(t *testing.T) {
	for _, c := range []struct {
		s    *State
		want string
	}{
		{nil, "checkpoint: nil State"},
		{&State{RunID: "r", Step: -1}, "checkpoint: negative Step"},
		{&State{}, "checkpoint: empty RunID"},
		{&State{RunID: "r", Config: json.RawMessage(`[1]`)}, "checkpoint: Config is not a JSON object"},
		{&State{RunID: "r", Final: json.RawMessage(`3`)}, "checkpoint: Final is not a JSON object"},
		{&State{RunID: "r", Sections: []Section{{"a", nil}, {"a", nil}}}, "checkpoint: duplicate Section name"},
		{&State{RunID: "r", Sections: []Section{{"", nil}}}, "checkpoint: Section with empty name"},
	} {
		func() {
			defer func() {
				if r := recover(); r != c.want {
					t.Errorf("recovered %v, want %q", r, c.want)
				}
			}()
			Save(t.TempDir(), c.s, 0)
		}()
	}
}

func TestParseName(t *testing.T) {
	for name, want := range map[string]int64{"ckpt-000000001200.hpck": 1200, "ckpt-1234567890123.hpck": 1234567890123} {
		if got, ok := parseName(name); !ok || got != want {
			t.Errorf("parseName(%q) = %d, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"ckpt-12.hpck", "ckpt-00000000120x.hpck", "ckpt-000000001200.hpck.tmp", "x-000000001200.hpck", "ckpt-000000001200-1.tmp"} {
		if _, ok := parseName(bad); ok {
			t.Errorf("parseName(%q) accepted", bad)
		}
	}
}

func FuzzLoad(f *testing.F) {
	var buf bytes.Buffer
	small := &State{Model: "m", Step: 3, RunID: "r", Config: json.RawMessage(`{"a":{"b":1}}`), Final: json.RawMessage(`{}`), Sections: []Section{{"p", []float32{1, 2}}, {"v", nil}}}
	encode(&buf, small)
	f.Add(buf.Bytes())
	f.Add(encodeV1(testState(2)))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decode(b)
		if err == nil {
			var out bytes.Buffer
			if err := encode(&out, s); err != nil {
				t.Fatal(err)
			}
			if _, err := decode(out.Bytes()); err != nil {
				t.Fatalf("re-encoding a decoded file: %v", err)
			}
		}
	})
}

// TestSaveMode: a checkpoint's mode is 0644 less the umask, as the
// shell's files are, so that a colleague (or a job under another
// account of the group) can evaluate it; os.CreateTemp's 0600 did not
// let them.
func TestSaveMode(t *testing.T) {
	for _, c := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o027, 0o640}, {0o077, 0o600}} {
		old := syscall.Umask(c.umask)
		path, err := Save(t.TempDir(), testState(1), 0)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("umask %03o: mode %v, want %v", c.umask, got, c.want)
		}
	}
}

// TestLinkedCheckpoint: a checkpoint name that is a symbolic link (a file
// of another directory linked in) is a checkpoint of the directory:
// Latest takes it, CheckFresh counts it, and a link to nothing is a file
// that does not load. A link to a directory is not one. Before, links
// were passed over: -resume auto started afresh beside a linked
// checkpoint and then failed at its step, whose name the link held.
func TestLinkedCheckpoint(t *testing.T) {
	other, dir := t.TempDir(), t.TempDir()
	target, err := Save(other, testState(6), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Save(dir, testState(2), 0); err != nil {
		t.Fatal(err)
	}
	os.Symlink(target, filepath.Join(dir, FileName(6)))
	os.Symlink(other, filepath.Join(dir, FileName(9)))
	s, path, err := Latest(dir, nil)
	if err != nil || s == nil || s.Step != 6 || path != filepath.Join(dir, FileName(6)) {
		t.Fatalf("Latest = %q, %v; want the linked step 6", path, err)
	}
	if err := CheckFresh(dir, identity()); err == nil || !strings.Contains(err.Error(), "steps 2-6") {
		t.Errorf("CheckFresh: %v, want steps 2-6 named", err)
	}
	os.Symlink(filepath.Join(other, "gone"), filepath.Join(dir, FileName(8)))
	var warnings []string
	s, _, _ = Latest(dir, func(m string) { warnings = append(warnings, m) })
	if s == nil || s.Step != 6 || len(warnings) != 1 || !strings.Contains(warnings[0], FileName(8)) {
		t.Errorf("Latest with a link to nothing: found %v, warnings %q", s != nil, warnings)
	}
}

// TestLoadNotAFile: a device or a named pipe given as a checkpoint is one
// error saying what it is, at once, and a link to one in a directory is
// passed over. Before, Load read /dev/zero until memory ran out and
// waited for ever on a FIFO's writer.
func TestLoadNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.hpck")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	os.Symlink(fifo, filepath.Join(dir, FileName(3)))
	for _, c := range []struct{ path, want string }{
		{"/dev/zero", "load checkpoint /dev/zero: not a checkpoint: a device, not a file"},
		{fifo, "load checkpoint " + fifo + ": not a checkpoint: a named pipe (FIFO), not a file"},
	} {
		done := make(chan error, 1)
		go func() { _, err := Load(c.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || err.Error() != c.want || !errors.Is(err, ErrFormat) {
				t.Errorf("Load(%s): %v, want %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) did not return within 10 s", c.path)
		}
	}
	done := make(chan error, 1)
	go func() { _, _, err := Latest(dir, nil); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Latest beside a link to a FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Latest beside a link to a FIFO did not return within 10 s")
	}
}

// TestSetAsideRelativeLink: a later checkpoint that is a relative symbolic
// link (../x/ckpt-...) still leads to its file once set aside one
// directory down; renamed as it was, it pointed nowhere.
func TestSetAsideRelativeLink(t *testing.T) {
	root := t.TempDir()
	dir, other := filepath.Join(root, "ck"), filepath.Join(root, "x")
	if _, err := Save(dir, testState(4), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Save(other, testState(10), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "x", FileName(10)), filepath.Join(dir, FileName(10))); err != nil {
		t.Fatal(err)
	}
	aside, moved, err := SetAside(dir, 4, testState(4).RunID)
	if err != nil || len(moved) != 1 {
		t.Fatalf("SetAside: %v, moved %v", err, moved)
	}
	if s, err := Load(filepath.Join(aside, FileName(10))); err != nil || s.Step != 10 {
		t.Errorf("the set-aside link does not lead to step 10: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, FileName(10))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link is still in the directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, FileName(10))); err != nil {
		t.Errorf("the link's target moved or went: %v", err)
	}
}

// budgetReader is a file that fails a read past its first max bytes.
type budgetReader struct {
	*bytes.Reader
	read, max int
}

func (r *budgetReader) Read(p []byte) (int, error) {
	if r.read+len(p) > r.max {
		p = p[:max(r.max-r.read, 0)]
		if len(p) == 0 {
			return 0, errors.New("read past the magic")
		}
	}
	n, err := r.Reader.Read(p)
	r.read += n
	return n, err
}

// TestReadFileMagicFirst: a file that is not a checkpoint is refused on its
// first 8 bytes, not read whole into memory first; a checkpoint is read
// whole.
func TestReadFileMagicFirst(t *testing.T) {
	junk := append([]byte("PK\x03\x04junk"), make([]byte, 1<<20)...)
	_, err := readFile(&budgetReader{Reader: bytes.NewReader(junk), max: 8})
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "bad magic") {
		t.Errorf("a zip file: %v, want the bad magic, from its first 8 bytes", err)
	}
	for _, short := range []string{"", "\x89HP"} {
		if _, err := readFile(bytes.NewReader([]byte(short))); !errors.Is(err, ErrTruncated) {
			t.Errorf("%q: %v, want truncated", short, err)
		}
	}
	var buf bytes.Buffer
	if err := encode(&buf, testState(3)); err != nil {
		t.Fatal(err)
	}
	b, err := readFile(bytes.NewReader(buf.Bytes()))
	if err != nil || !bytes.Equal(b, buf.Bytes()) {
		t.Errorf("a checkpoint: %d of %d bytes, %v", len(b), buf.Len(), err)
	}
}
