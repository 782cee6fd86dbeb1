package checkpoint

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// countLoads counts prune's whole-file loads per file name for the rest of
// the test.
func countLoads(t *testing.T) map[string]int {
	t.Helper()
	var mu sync.Mutex
	n := map[string]int{}
	orig := pruneLoad
	pruneLoad = func(c candidate) (*State, error) {
		mu.Lock()
		n[filepath.Base(c.path)]++
		mu.Unlock()
		return orig(c)
	}
	t.Cleanup(func() { pruneLoad = orig })
	return n
}

// forgetAll empties the process's record, as a new process starts.
func forgetAll() {
	verified.Lock()
	clear(verified.m)
	verified.Unlock()
}

// recorded returns the base names of the record's entries for dir.
func recorded(dir string) []string {
	d := recordKey(dir)
	verified.Lock()
	defer verified.Unlock()
	var names []string
	for k := range verified.m {
		if filepath.Dir(k) == d {
			names = append(names, filepath.Base(k))
		}
	}
	sort.Strings(names)
	return names
}

// dirNames lists dir's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestPruneReadsOnce: a series of saves with keep loads no file it wrote
// itself, and each file it did not write (of an earlier process) once,
// a damaged one included, not keep+1 files at every save; another run's
// files and files that do not load stay, and the record keeps only the
// kept files and the damaged one.
func TestPruneReadsOnce(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{1, 2} { // an earlier process's
		if _, err := Save(dir, testState(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	Save(dir, otherRun(5), 0)
	os.WriteFile(filepath.Join(dir, FileName(4)), []byte("garbage"), 0o644)
	p3, _ := Save(dir, testState(3), 0) // damaged: its header reads, its checksum fails
	b, _ := os.ReadFile(p3)
	b[len(b)-10] ^= 1
	os.WriteFile(p3, b, 0o644)
	forgetAll() // a new process
	loads := countLoads(t)
	for step := int64(10); step <= 80; step += 10 {
		if _, err := Save(dir, testState(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{FileName(1): 1, FileName(2): 1, FileName(3): 1}
	if !reflect.DeepEqual(loads, want) {
		t.Errorf("whole-file loads by name %v, want %v (none of the files Save wrote, the earlier process's once)", loads, want)
	}
	if got, want := dirNames(t, dir), []string{FileName(3), FileName(4), FileName(5), FileName(70), FileName(80)}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %q, want %q", got, want)
	}
	if got, want := recorded(dir), []string{FileName(3), FileName(70), FileName(80)}; !reflect.DeepEqual(got, want) {
		t.Errorf("record holds %q, want the kept files and the damaged one %q", got, want)
	}
}

// TestPruneRereadsChanged: a file the record holds as loading is read again
// once it has changed on disk: one damaged in place, the same size, with
// its mtime set back (its ctime moves), does not load and is not removed;
// one replaced by a valid file of the run is counted; one replaced by
// another run's file of the same name is not the run's.
func TestPruneRereadsChanged(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{10, 20, 30} {
		if _, err := Save(dir, testState(step), 5); err != nil {
			t.Fatal(err)
		}
	}
	// 10: damaged in place, same size and mtime.
	p10 := filepath.Join(dir, FileName(10))
	fi, _ := os.Stat(p10)
	b, _ := os.ReadFile(p10)
	b[len(b)/2] ^= 0x10
	time.Sleep(10 * time.Millisecond) // a ctime other than the save's on coarse clocks
	if err := os.WriteFile(p10, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p10, fi.ModTime(), fi.ModTime())
	if fi2, _ := os.Stat(p10); fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("setup: size or mtime differ")
	}
	// 20: replaced (another inode) by an equal file of the run.
	other := t.TempDir()
	src, _ := Save(other, testState(20), 0)
	b, _ = os.ReadFile(src)
	os.WriteFile(filepath.Join(dir, "swap"), b, 0o644)
	os.Rename(filepath.Join(dir, "swap"), filepath.Join(dir, FileName(20)))
	// 30: replaced by another run's file of that step (a second job).
	src, _ = Save(other, otherRun(30), 0)
	b, _ = os.ReadFile(src)
	os.WriteFile(filepath.Join(dir, "swap"), b, 0o644)
	os.Rename(filepath.Join(dir, "swap"), filepath.Join(dir, FileName(30)))

	loads := countLoads(t)
	if _, err := Save(dir, testState(40), 1); err != nil {
		t.Fatal(err)
	}
	// 40 is the newest valid: 20 goes; 30 is another run's, 10 does not load.
	if got, want := dirNames(t, dir), []string{FileName(10), FileName(30), FileName(40)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}
	if want := map[string]int{FileName(10): 1, FileName(20): 1}; !reflect.DeepEqual(loads, want) {
		t.Errorf("whole-file loads by name %v, want %v", loads, want)
	}
	if h, err := peek(filepath.Join(dir, FileName(30))); err != nil || h.RunID != otherRun(30).RunID {
		t.Errorf("another run's file: %v, %v", h, err)
	}
}

// TestPruneOtherRunRecorded: runs saving in one directory in one process
// (both in the record) prune only their own files.
func TestPruneOtherRunRecorded(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{10, 20} {
		if _, err := Save(dir, testState(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []int64{30, 40} {
		if _, err := Save(dir, otherRun(step), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Save(dir, testState(50), 2); err != nil {
		t.Fatal(err)
	}
	if got, want := dirNames(t, dir), []string{FileName(20), FileName(40), FileName(50)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}
}

// TestPruneSavedUnloadable: a file Save writes that Load refuses (a
// negative epoch_loss sum, which Save does not check) is not taken for
// valid without reading: it is not counted, and the older valid file is
// kept.
func TestPruneSavedUnloadable(t *testing.T) {
	dir := t.TempDir()
	if _, err := Save(dir, testState(10), 1); err != nil {
		t.Fatal(err)
	}
	bad := testState(20)
	bad.EpochLoss = &EpochLoss{Sum: -1, Steps: 1}
	p, err := Save(dir, bad, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Fatal("setup: a negative epoch_loss loads")
	}
	if got, want := dirNames(t, dir), []string{FileName(10), FileName(20)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}
}

// TestPruneConcurrent: saves in several directories at once (the record
// is shared) each keep their own newest files, loading none. Run with -race.
func TestPruneConcurrent(t *testing.T) {
	loads := countLoads(t)
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	errs := make([]error, len(dirs))
	for i := range dirs {
		dirs[i] = t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for step := int64(1); step <= 6; step++ {
				if _, err := Save(dirs[i], testState(step), 2); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, dir := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got, want := dirNames(t, dir), []string{FileName(5), FileName(6)}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: left %q, want %q", dir, got, want)
		}
	}
	if len(loads) != 0 {
		t.Errorf("whole-file loads %v, want none", loads)
	}
}

// procIO returns a field of /proc/self/io (rchar: bytes passed to read
// calls, page cache or not), or -1.
func procIO(field string) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkSaveKeep3 saves a checkpoint of CKPT_MB (default 256) MB with
// keep 3, after three saves to fill the directory, and reports the
// median time of a save and the bytes read per save (rchar):
//
//	go test -run XXX -bench SaveKeep3 -benchtime 8x ./checkpoint
func BenchmarkSaveKeep3(b *testing.B) {
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("CKPT_MB")); err == nil {
		mb = v
	}
	n := mb << 20 / 4 / 3
	s := testState(0)
	s.Sections = []Section{{"params", make([]float32, n)}, {"adamw.m", make([]float32, n)}, {"adamw.v", make([]float32, n)}}
	for _, sec := range s.Sections {
		for i := range sec.Data {
			sec.Data[i] = float32(i)
		}
	}
	dir := b.TempDir()
	save := func(step int64) {
		s.Step = step
		if _, err := Save(dir, s, 3); err != nil {
			b.Fatal(err)
		}
	}
	for step := int64(1); step <= 3; step++ {
		save(step)
	}
	times := make([]time.Duration, 0, b.N)
	r0 := procIO("rchar")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		save(int64(4 + i))
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Milliseconds()), "median-ms/save")
	if r0 >= 0 {
		b.ReportMetric(float64(procIO("rchar")-r0)/float64(b.N)/1e6, "rchar-MB/save")
	}
	var buf bytes.Buffer
	for _, d := range times {
		fmt.Fprintf(&buf, " %d", d.Milliseconds())
	}
	b.Logf("%d MB checkpoint, save times (ms, sorted):%s", mb, buf.String())
}
