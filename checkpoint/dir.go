package checkpoint

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// FileName returns the name Save gives the checkpoint of step:
// ckpt-000000012000.hpck. Twelve digits keep names in step order for ls.
func FileName(step int64) string {
	return fmt.Sprintf("ckpt-%012d.hpck", step)
}

// IsFileName reports whether name (a base name) is one FileName gives:
// the files Latest and Save's pruning take for checkpoints.
func IsFileName(name string) bool {
	_, ok := parseName(name)
	return ok
}

// parseName returns the step of a checkpoint file name, or ok = false.
func parseName(name string) (step int64, ok bool) {
	digits, found := strings.CutPrefix(name, "ckpt-")
	if !found {
		return 0, false
	}
	digits, found = strings.CutSuffix(digits, ".hpck")
	if !found || len(digits) < 12 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	step, err := strconv.ParseInt(digits, 10, 64)
	return step, err == nil
}

// Save writes s to dir/FileName(s.Step) atomically (see the package
// documentation), creating dir if needed, and returns the path. It then
// removes leftover .tmp files and, when keep > 0, the oldest valid
// checkpoints of run s.RunID beyond its newest keep; keep <= 0 keeps all.
// Files of other runs, and files that do not load, are never removed.
// Whether a file loads is read at most once per process: Save knows that
// the file it has just written does (the inode it wrote and fsynced, of
// the size it wrote, with a header Load accepts), and remembers which
// files loaded, or failed to, at its earlier prunes, as long as stat says
// of them what it said then (device, inode, size, mtime, ctime); any
// other file of the run is loaded whole (see the package documentation).
//
// A checkpoint of the same step is replaced only if its header names the
// same run; a file of another run, or one whose header does not load, is
// left alone and Save returns an ErrInUse error naming it. On error no
// existing checkpoint has been touched. An unusable dir gives "checkpoint
// dir /x: not writable: permission denied" (or "not a directory",
// "read-only file system", ...). Save is for one writer per directory:
// rank 0, while the other ranks wait.
func Save(dir string, s *State, keep int) (path string, err error) {
	checkState(s)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", notWritable(dir, err)
	}
	removeTemps(dir)
	final := filepath.Join(dir, FileName(s.Step))
	if err := replaceable(final, s.RunID); err != nil {
		return "", err
	}
	tmp, err := createTemp(dir, s.Step)
	if err != nil {
		return "", notWritable(dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// A failure here (a full disk) names the checkpoint, not the
	// temporary file, which the deferred clean-up removes.
	if err := encode(tmp, s); err != nil {
		return "", unsaved(final, "write", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", unsaved(final, "fsync", err)
	}
	written, _ := tmp.Stat() // for rememberSaved; nil if stat fails
	if err := tmp.Close(); err != nil {
		return "", unsaved(final, "close", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("save checkpoint %s: %w", final, err)
	}
	// Make the rename itself durable. From here the new file exists, so a
	// failure is still reported but the temp file is gone.
	if err := syncDir(dir); err != nil {
		return final, fmt.Errorf("save checkpoint %s: fsync dir: %w", final, err)
	}
	if keep > 0 {
		rememberSaved(final, written, s)
		if err := prune(dir, s.RunID, keep); err != nil {
			return final, fmt.Errorf("save checkpoint %s: prune: %w", final, err)
		}
	}
	return final, nil
}

// Writable checks that Save can write in dir, an existing directory: it
// creates a temporary file there as Save does, and removes it. A run calls
// it at its start, so that a directory it cannot write (no permission, a
// read-only mount) stops it before the training rather than at its first
// checkpoint, hours in. The error is Save's: "checkpoint dir /x: not
// writable: permission denied". The probe holds one byte, synced: a full
// disk still takes an empty file, but not a block of data ("not
// writable: no space left on device"). Room for a whole checkpoint is
// Room's to check. A probe left by a crash is a ckpt-*.tmp file, removed
// by the next Save.
func Writable(dir string) error {
	f, err := os.CreateTemp(dir, "ckpt-probe-*.tmp")
	if err != nil {
		return notWritable(dir, err)
	}
	_, err = f.Write([]byte{0})
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	if err != nil {
		return notWritable(dir, err)
	}
	return nil
}

// Room checks that the file system of dir, an existing directory, has
// need bytes free for this user (statfs's available blocks, which leave
// out root's reserve and count quotas where the file system does): a run
// calls it at its start with the size of its checkpoints, so that a disk
// with room for Writable's probe but not for a checkpoint stops it before
// the training. "checkpoint dir ck: 1.2 MB free, and a checkpoint of
// this run takes 3.3 MB: make room, or use another -checkpoint-dir". A
// file system that cannot say passes.
func Room(dir string, need int64) error {
	if free, ok := Free(dir); ok && free < need {
		return fmt.Errorf("checkpoint dir %s: %s free, and a checkpoint of this run takes %s: make room, or use another -checkpoint-dir", dir, Megabytes(free), Megabytes(need))
	}
	return nil
}

// Free returns the bytes free for this user on the file system of dir
// (statfs's available blocks), or ok = false where it cannot say.
func Free(dir string) (free int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// Held counts the checkpoints of run in dir, by their headers (a file
// that does not load is not counted): those that keep counts, and prunes
// first.
func Held(dir, run string) int {
	cs, _ := list(dir)
	n := 0
	for _, c := range cs {
		if h, err := peek(c.path); err == nil && h.RunID == run {
			n++
		}
	}
	return n
}

// Megabytes words n bytes as "3.3 MB" (10^6 bytes, as df -H).
func Megabytes(n int64) string {
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
}

// createTemp creates a new ckpt-<step>-<random>.tmp in dir, with mode
// 0644 less the process's umask, as torch.save's files and the shell's
// are: os.CreateTemp's 0600 would keep the checkpoints from the group
// (eval, export by a colleague; a job run under another account).
func createTemp(dir string, step int64) (*os.File, error) {
	for {
		var b [8]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		name := filepath.Join(dir, fmt.Sprintf("ckpt-%012d-%s.tmp", step, hex.EncodeToString(b[:])))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// unsaved words a failure to write the checkpoint final through its
// temporary file: "save checkpoint ck/ckpt-000000000004.hpck: write: no
// space left on device; the checkpoints before it are as they were". The
// cause keeps its errno for errors.Is.
func unsaved(final, op string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("save checkpoint %s: %s: %w; the checkpoints before it are as they were", final, op, err)
}

// notWritable words a failure to create or write in dir.
func notWritable(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("checkpoint dir %s: not writable: %w", dir, err)
}

// syncDir fsyncs a directory. File systems that cannot (EINVAL) are let be.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeTemps deletes the ckpt-*.tmp files an interrupted Save left behind.
// Failing to is harmless (Latest ignores them), so errors are dropped.
func removeTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "ckpt-*.tmp"))
	for _, t := range tmps {
		os.Remove(t)
	}
}

// candidate is a checkpoint file found in a directory.
type candidate struct {
	path string
	step int64
}

// list returns the *.hpck files of dir, newest step first. A symbolic
// link of such a name is one too (a checkpoint linked in from another
// directory is resumed, and its name is taken), unless it names
// something other than a file (a directory, a named pipe, a device); one
// to nothing is a file that does not load.
func list(dir string) ([]candidate, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var cs []candidate
	for _, e := range entries {
		step, ok := parseName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
				continue
			}
		} else if !e.Type().IsRegular() {
			continue
		}
		cs = append(cs, candidate{path, step})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].step > cs[j].step })
	return cs, nil
}

// replaceable returns nil if path is absent or a checkpoint of run, and
// an ErrInUse error naming the file otherwise.
func replaceable(path, run string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	h, err := peek(path)
	switch {
	case err != nil:
		return fmt.Errorf("checkpoint dir %s %w: %s does not load (%v); not replacing it: move it away, or use another -checkpoint-dir", dir, ErrInUse, name, unwrapPath(err))
	case h.RunID != run:
		return fmt.Errorf("checkpoint dir %s %w: %s is step %d of another run (%s); not replacing it: move it away, or use another -checkpoint-dir", dir, ErrInUse, name, h.Step, runName(h))
	}
	return nil
}

// unwrapPath drops the "read checkpoint header PATH: " prefix where the
// message names the file already.
func unwrapPath(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// runName names the run that wrote s: "run 0123456789abcdef, model cnn".
func runName(s *State) string {
	if s.RunID == "" {
		return fmt.Sprintf("format version %d, model %s", s.Version, s.Model)
	}
	return fmt.Sprintf("run %s, model %s", s.RunID, s.Model)
}

// prune removes the valid checkpoints of run older than its newest keep
// valid ones. Whether a file is run's and loads is taken from the
// process's record of the files it wrote or loaded, where the file is as
// recorded (see verified), and otherwise read: its header, then, if it
// is run's, the whole file, once.
func prune(dir, run string, keep int) error {
	cs, err := list(dir)
	if err != nil {
		return err
	}
	defer forgetAbsent(dir, cs)
	valid := 0
	for _, c := range cs {
		if !ownValid(c, run) {
			continue // another run's, or does not load: never removed
		}
		valid++
		if valid > keep {
			if err := os.Remove(c.path); err != nil {
				return err
			}
			forget(c.path)
		}
	}
	return nil
}

// loadNamed loads c and checks that its header agrees with its name.
func loadNamed(c candidate) (*State, error) {
	s, err := Load(c.path)
	if err != nil {
		return nil, err
	}
	if s.Step != c.step {
		return nil, fmt.Errorf("load checkpoint %s: %w: file name says step %d, header says %d", c.path, ErrFormat, c.step, s.Step)
	}
	return s, nil
}

// Latest returns the valid checkpoint with the highest step in dir and its
// path. Files that fail to load are skipped, each reported through warn
// (which may be nil) with its path and reason. A missing dir, or one
// without a valid checkpoint, gives (nil, "", nil); an unreadable dir is an
// error.
func Latest(dir string, warn func(msg string)) (*State, string, error) {
	cs, err := list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("find latest checkpoint: %w", err)
	}
	for _, c := range cs {
		s, err := loadNamed(c)
		if err == nil {
			return s, c.path, nil
		}
		if warn != nil {
			warn("skipping unusable checkpoint: " + err.Error())
		}
	}
	return nil, "", nil
}

// CheckFresh is the rule for a run that starts without resuming: it
// returns nil when dir does not exist or holds no checkpoint file
// (ckpt-*.hpck), and otherwise an ErrInUse error saying what is there,
// per run, compared with run: "checkpoint dir ck in use: it holds 3
// checkpoints of another configuration (run 1f0e..., model cnn, steps
// 100-300; differs in batch, lr); ...". A fresh run would replace files of
// its own steps, so a directory of the same settings is refused too; the
// message points to -resume auto and to another directory. Only the
// files' headers are read.
func CheckFresh(dir string, run Identity) error {
	cs, err := list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint dir %s: %w", dir, err)
	}
	if len(cs) == 0 {
		return nil
	}
	type group struct {
		s      *State // the newest of the run
		n      int
		lo, hi int64
	}
	var groups []*group
	byRun := map[string]*group{}
	var bad []string
	for _, c := range cs { // newest first
		s, err := peek(c.path)
		if err != nil {
			bad = append(bad, filepath.Base(c.path))
			continue
		}
		key := s.RunID
		if key == "" {
			key = fmt.Sprintf("v%d %s %s %d", s.Version, s.ConfigHash, s.Model, s.WorldSize)
		}
		g := byRun[key]
		if g == nil {
			g = &group{s: s, hi: s.Step}
			byRun[key] = g
			groups = append(groups, g)
		}
		g.n++
		g.lo = s.Step
	}
	var parts []string
	for _, g := range groups {
		steps := fmt.Sprintf("step %d", g.hi)
		if g.n > 1 {
			steps = fmt.Sprintf("steps %d-%d", g.lo, g.hi)
		}
		what := "this configuration"
		detail := fmt.Sprintf("%s, %s", runName(g.s), steps)
		if m := g.s.compare(run); !m.none() {
			what = "another configuration"
			detail += "; differs in " + m.short(g.s, run)
		}
		parts = append(parts, fmt.Sprintf("%s of %s (%s)", plural(g.n, "checkpoint"), what, detail))
	}
	if len(bad) > 0 {
		names := bad
		if len(names) > 3 {
			names = append(names[:3:3], "...")
		}
		verb := "do"
		if len(bad) == 1 {
			verb = "does"
		}
		parts = append(parts, fmt.Sprintf("%s that %s not load (%s)", plural(len(bad), "file"), verb, strings.Join(names, ", ")))
	}
	return fmt.Errorf("checkpoint dir %s %w: it holds %s; a run without -resume needs a directory without checkpoints: continue with -resume auto (same settings), or use another -checkpoint-dir", dir, ErrInUse, strings.Join(parts, ", "))
}

// plural writes "1 checkpoint", "3 checkpoints".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// newerVersion returns the format version of the checkpoint file at path
// and true if its magic is right and its version is newer than this build
// reads.
func newerVersion(path string) (uint32, bool) {
	f, err := openRegular(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var pre [12]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil || string(pre[:8]) != Magic {
		return 0, false
	}
	v := binary.LittleEndian.Uint32(pre[8:])
	return v, v > Version
}

// moveInto renames the file at from to to, one directory down. A symbolic
// link with a relative target (../other/ckpt-...) would point nowhere from
// there: it is made again at to, relative to its new place, and removed.
func moveInto(from, to string) error {
	target, err := os.Readlink(from)
	if err != nil || filepath.IsAbs(target) {
		return os.Rename(from, to) // not a link, or one that moves as it is
	}
	rel, err := filepath.Rel(filepath.Dir(to), filepath.Join(filepath.Dir(from), target))
	if err != nil {
		return err
	}
	if err := os.Symlink(rel, to); err != nil {
		return err
	}
	return os.Remove(from)
}

// SetAside makes dir ready for a run that resumes from step of run (its
// RunID): the checkpoint files of later steps there are of a future the
// run has given up (it resumed from an earlier checkpoint: a roll-back)
// or do not load. Left in place they would be taken for the run's newest
// by Latest (-resume auto, eval), and prune would delete the files the run
// writes instead of them. SetAside moves them, never removes them, into a
// new subdirectory dir/set-aside-after-step-N (or -2, -3, ... if that is
// taken) and returns its path and the names moved; "" and nil when there
// were none. A later file of another run is left alone: SetAside moves
// nothing and returns an ErrInUse error naming it, since this run's saves
// would collide with that run's files or be passed over for them; so is a
// later file of a newer format version, which a newer build wrote and
// this one cannot tell from its own.
func SetAside(dir string, step int64, run string) (string, []string, error) {
	cs, err := list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint dir %s: %w", dir, err)
	}
	var later []candidate
	for _, c := range cs {
		if c.step <= step {
			break // newest first
		}
		if h, err := peek(c.path); err == nil && h.RunID != run {
			return "", nil, fmt.Errorf("checkpoint dir %s %w: %s is step %d of another run (%s), past step %d this run resumes from: it would be resumed for this run's newest, or its name taken; move it away, or use another -checkpoint-dir", dir, ErrInUse, filepath.Base(c.path), h.Step, runName(h), step)
		}
		// A file of a newer format is not damaged: a newer build wrote
		// it (a job requeued under an older module), and going on from
		// an earlier step would throw away its training.
		if v, ok := newerVersion(c.path); ok {
			return "", nil, fmt.Errorf("checkpoint dir %s %w: %s is of format version %d, written by a newer hpctrain (this build reads 1 to %d), past step %d this run resumes from: resume with that build, or move it away to go on from step %d", dir, ErrInUse, filepath.Base(c.path), v, Version, step, step)
		}
		later = append(later, c)
	}
	if len(later) == 0 {
		return "", nil, nil
	}
	base := filepath.Join(dir, fmt.Sprintf("set-aside-after-step-%d", step))
	aside := base
	for i := 2; ; i++ {
		err := os.Mkdir(aside, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", nil, notWritable(dir, err)
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	var moved []string
	for _, c := range later {
		name := filepath.Base(c.path)
		if err := moveInto(c.path, filepath.Join(aside, name)); err != nil {
			return aside, moved, fmt.Errorf("checkpoint dir %s: setting %s aside: %w", dir, name, err)
		}
		moved = append(moved, name)
	}
	if err := syncDir(aside); err != nil {
		return aside, moved, fmt.Errorf("checkpoint dir %s: fsync %s: %w", dir, aside, err)
	}
	if err := syncDir(dir); err != nil {
		return aside, moved, fmt.Errorf("checkpoint dir %s: fsync: %w", dir, err)
	}
	return aside, moved, nil
}
