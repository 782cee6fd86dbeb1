package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"

	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
	"hpctrain/train"
)

const predictUsage = `Usage: hpctrain predict -checkpoint FILE [flags] INPUT...

Runs a trained network on new inputs and prints one JSON line per input
with the -top classes and their probabilities (softmax of the scores):

  {"input":"shoe.png","top":[{"class":7,"name":"Sneaker","probability":0.93},...]}

An INPUT is an image file (PNG, JPEG or GIF), converted to the training
data's channels and size and normalised exactly as the training run's
samples (its data set, image_shape, resizing, evaluation transforms, mean
and std, all read from the checkpoint), or an IDX file of images (raw or
gzip, as MNIST's), one line per image with its "index" (and its "label"
when the matching labels file is beside it). Class names are given when
the data set has them (Fashion-MNIST's, CIFAR-10's, an image folder's
directories). Every input is read and checked before any line is printed
(only the images' headers when they would take more than 256 MiB decoded).
An INPUT of - is standard input: one image or IDX file piped in
(curl -s URL | hpctrain predict -checkpoint-dir ck -), named "-" in the
output. A file name that is not UTF-8 has each byte outside a character
written as \udcXX (Python's surrogateescape: os.fsencode gives it back).

-device cuda runs the network on a GPU, chosen and opened as train chooses
and opens it (the first of those CUDA_VISIBLE_DEVICES leaves, or -gpus');
-device auto uses one where placement finds one or a CUDA driver sees a
device, else the CPU, warning where the rest of CUDA does not load. The
scores are computed in fp32 on the device: the same classes and
probabilities as on the CPU, to fp32 rounding. The inputs are read and
transformed on the CPU either way.

Flags:
`

// prediction is one output line.
type prediction struct {
	Input  fileName    `json:"input"`
	Index  *int        `json:"index,omitempty"` // the image's index in an IDX file
	Label  *int        `json:"label,omitempty"` // its label, when the labels file is there
	Top    []classProb `json:"top"`
	Logits []float32   `json:"logits,omitempty"`
}

// fileName is a file's name in an output line. One that is not UTF-8 (a
// Latin-1 name, é as the byte 0xe9) has each byte outside a character
// written as the lone surrogate \udcXX, as Python's surrogateescape
// decodes such a name: json.loads then os.fsencode give its bytes back.
// encoding/json wrote U+FFFD for every such byte, so that caf\xe9.png and
// caf\xe8.png printed alike and neither could be found again.
type fileName string

func (s fileName) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	b := []byte{'"'}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(string(s[i:]))
		if r == utf8.RuneError && n == 1 {
			b = fmt.Appendf(b, `\udc%02x`, s[i])
		} else {
			q, _ := json.Marshal(string(s[i : i+n])) // escaped as encoding/json does
			b = append(b, q[1:len(q)-1]...)
		}
		i += n
	}
	return append(b, '"'), nil
}

type classProb struct {
	Class       int     `json:"class"`
	Name        string  `json:"name,omitempty"`
	Probability float64 `json:"probability"`
}

// predictCmd is `hpctrain predict`.
func predictCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain predict", flag.ContinueOnError)
	var ck ckptFlags
	ck.bind(fs)
	top := fs.Int("top", 5, "classes per input, most probable first (more than the network has: all of them)")
	logits := fs.Bool("logits", false, "add each input's scores before softmax (\"logits\")")
	var devc train.DeviceChoice
	devc.Flags(fs, "the network")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), predictUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, true); err != nil {
		return err
	}
	if otherRank("predict", stderr) {
		return nil
	}
	if fs.NArg() == 0 {
		return cli.Usage(errors.New("no inputs: name image or IDX files after the flags (see hpctrain predict -h)"))
	}
	if *top < 1 {
		return cli.Usage(fmt.Errorf("-top %d: must be >= 1", *top))
	}
	if err := devc.Validate(); err != nil {
		return err
	}
	if i := slices.Index(fs.Args(), "-"); i >= 0 && slices.Contains(fs.Args()[i+1:], "-") {
		return cli.Usage(errors.New("input -: standard input is named more than once"))
	}
	ins := make([]input, fs.NArg())
	for i, p := range fs.Args() {
		ins[i] = input{path: p, name: p}
		if p == "-" {
			path, cleanup, err := readStdin(os.Stdin)
			defer cleanup()
			if err != nil {
				return err
			}
			ins[i].path = path
			continue
		}
		// An input is read twice (its kind, then its contents): a pipe
		// could not be, and one without a writer would block. Standard
		// input is copied to a file first.
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			what := "no such file"
			switch {
			case err == nil:
				what = cli.NotRegular(st.Mode()) + ", not a file"
			case !errors.Is(err, iofs.ErrNotExist):
				what = "cannot be read"
			case strings.HasPrefix(p, "-"):
				what = "no such file (flags go before the inputs)"
			}
			return cli.Usage(fmt.Errorf("input %s: %s", p, what))
		}
	}
	t, err := ck.load("hpctrain predict", stderr)
	if err != nil {
		return err
	}
	// The images' directories of links are removed however predict
	// ends: a Ctrl-C, kill or scheduler's stop while the inputs are read
	// (stopped), and a reader that goes away (predict *.png | head -1:
	// standard output's EPIPE below) both left them in $TMPDIR.
	var tmp tempDirs
	defer tmp.removeAll()
	stop := onStop(func(s os.Signal) {
		if s != syscall.SIGPIPE { // the writer's EPIPE: outputError
			tmp.removeAll()
			die(s)
		}
	}, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()

	units, err := openInputs(t, ins, &tmp)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	opts, err := t.Config.DataConfig.LoaderOptions(t.DataShape, t.Config.Seed)
	if err != nil {
		return err
	}
	opts.Transforms, opts.Batch = opts.EvalTransforms, t.Batch
	opts.Workers, opts.Prefetch = min(4, runtime.NumCPU()), 0
	// The compute threads, placed once every input was found good (an
	// input's error is then the one line on stderr): one process, planned
	// alone in the mask it was given (under mpirun, the one rank 0 was
	// bound to, or all of the node with --bind-to none).
	w, err := ck.compute(t, mpi.NewSingle(), stderr, stderr)
	if err != nil {
		return err
	}
	defer w.Close()
	// The network on the device asked for; the compute threads stay
	// placed as for the CPU (this goroutine, their leader, drives the
	// device).
	say := func(m string) { fmt.Fprintln(stderr, m) }
	net, err := t.OnDevice(mpi.NewSingle(), devc, "predicting", say, say)
	if err != nil {
		return err
	}
	defer net.Close() // before the workers: their thread holds the device's context
	if devc.Device != "cpu" {
		say("hpctrain: device: " + net.Ranks)
	}
	// The loader goroutines get Ps of their own beside the compute
	// threads' (placement set GOMAXPROCS for these alone), as in train.
	runtime.GOMAXPROCS(data.Procs(w.Workers(), opts.Workers))
	k := net.Host().Classes
	for _, u := range units {
		ld, err := data.NewLoader(u.ds, nil, opts)
		if err != nil {
			return fmt.Errorf("predict: %w", err)
		}
		ld.StartRange(0, u.ds.Len())
		for {
			b, ok := ld.Next()
			if !ok {
				break
			}
			if err := u.err(); err != nil {
				ld.Close()
				return err
			}
			copy(net.Input(), b.X)
			z := net.Forward(b.N)
			if err := net.Err(); err != nil { // a failed kernel leaves stale scores behind
				ld.Close()
				return fmt.Errorf("predict: %w", err)
			}
			for i := 0; i < b.N; i++ {
				j := b.Step*t.Batch + i
				p := prediction{Input: fileName(u.input(j)), Top: topK(z[i*k:(i+1)*k], *top, t.ClassNames)}
				if u.idx {
					p.Index = &j
					if u.labels != nil {
						l := int(u.labels[j])
						p.Label = &l
					}
				}
				if *logits {
					p.Logits = append([]float32(nil), z[i*k:(i+1)*k]...)
				}
				line, err := json.Marshal(p)
				if err != nil { // a NaN or infinite score
					ld.Close()
					return fmt.Errorf("predict: input %s: the network's scores are not finite numbers (%v)", p.Input, err)
				}
				if _, err := out.Write(append(line, '\n')); err != nil {
					ld.Close()
					return outputError(err, &tmp)
				}
			}
			ld.Release(b)
		}
		ld.Close()
	}
	if err := out.Flush(); err != nil {
		return outputError(err, &tmp)
	}
	return nil
}

// outputError is the error of a failed write to standard output. A
// reader that went away (EPIPE, SIGPIPE being caught) ends the process
// quietly with SIGPIPE, as Go's own handling of the signal would have
// ended it, once the inputs' directories are removed.
func outputError(err error, tmp *tempDirs) error {
	if errors.Is(err, syscall.EPIPE) {
		tmp.removeAll()
		die(syscall.SIGPIPE)
	}
	return fmt.Errorf("predict: standard output: %w", err)
}

// onStop calls stopped, on a goroutine of its own, with each of sigs
// that arrives until the returned stop is called; a signal the process
// was started with ignored (nohup's SIGHUP, a background job's SIGINT)
// stays ignored. predict and export (writeFile) use it to remove what
// they made before a signal ends them part-way. A caught SIGPIPE no longer ends the
// process: the write to the pipe fails with EPIPE instead.
func onStop(stopped func(os.Signal), sigs ...syscall.Signal) (stop func()) {
	ch := make(chan os.Signal, 1)
	for _, s := range sigs {
		if !signal.Ignored(s) {
			signal.Notify(ch, s)
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				stopped(s)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// die ends the process as signal s would have had it not been caught:
// killed by it, so that a shell sees 128 + its number and a script
// stops on SIGINT. Go takes no action on a SIGPIPE sent to it, so that
// one ends with its status, 141.
func die(s os.Signal) {
	sig := s.(syscall.Signal)
	signal.Reset(sig)
	if sig != syscall.SIGPIPE {
		syscall.Kill(syscall.Getpid(), sig)
		time.Sleep(time.Second) // the signal ends the process meanwhile
	}
	os.Exit(128 + int(sig))
}

// topK is the k most probable classes of scores z, most probable first
// (the lower class first on ties).
func topK(z []float32, k int, names []string) []classProb {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, float64(v))
	}
	var s float64
	ps := make([]classProb, len(z))
	for j, v := range z {
		e := math.Exp(float64(v) - m)
		ps[j] = classProb{Class: j, Probability: e}
		s += e
	}
	for j := range ps {
		ps[j].Probability /= s
		if names != nil {
			ps[j].Name = names[j]
		}
	}
	sort.SliceStable(ps, func(a, b int) bool { return ps[a].Probability > ps[b].Probability })
	return ps[:min(k, len(ps))]
}

// unit is a run of inputs read as one data set: consecutive image files
// (a lazily decoded image folder), or one IDX file.
type unit struct {
	ds     data.Dataset
	idx    bool
	path   string   // the IDX file
	paths  []string // the image files, in order
	labels []byte   // the IDX file's labels, if found
	folder *data.Folder
}

func (u *unit) input(i int) string {
	if u.idx {
		return u.path
	}
	return u.paths[i]
}

// err is the first image that failed to decode after its header was
// read, as one line naming the input.
func (u *unit) err() error {
	if u.folder == nil {
		return nil
	}
	return u.imageError(u.folder.Err())
}

// imageError rewrites an error about one of the folder's links to name
// the input it stands for.
func (u *unit) imageError(err error) error {
	var ie *data.ImageError
	if err == nil || !errors.As(err, &ie) {
		return err
	}
	base := filepath.Base(ie.Path)
	i, perr := strconv.Atoi(strings.TrimSuffix(base, filepath.Ext(base)))
	if perr != nil || i < 0 || i >= len(u.paths) {
		return err
	}
	return fmt.Errorf("input %s: not a readable image: %v", u.paths[i], ie.Err)
}

// input is one INPUT: the file read, and the name the output and the
// messages give it (the argument; "-" for standard input, read from a
// copy).
type input struct{ path, name string }

// maxStdin bounds what predict copies from standard input.
const maxStdin = 1 << 30

// readStdin copies r, standard input, to a file of its own and returns a
// path to it and a cleanup that closes it. The file is removed as soon as
// it is made and read through this process's descriptor
// (/proc/self/fd/N), so that nothing is left behind however predict ends
// (a reader such as head closing the pipe ends it with SIGPIPE). A
// terminal is refused rather than waited on, as are an empty input and
// one past maxStdin.
func readStdin(r *os.File) (string, func(), error) {
	nop := func() {}
	if isTerminal(r) {
		return "", nop, cli.Usage(errors.New("input -: standard input is a terminal: pipe an image or IDX file into it (hpctrain predict -checkpoint-dir ck - < shoe.png)"))
	}
	f, err := os.CreateTemp("", "hpctrain-stdin-*")
	if err != nil {
		return "", nop, tempError("input -: a file to copy standard input to", err)
	}
	os.Remove(f.Name())
	cleanup := func() { f.Close() }
	n, err := io.Copy(f, io.LimitReader(r, maxStdin+1))
	switch {
	case err != nil:
		return "", cleanup, fmt.Errorf("input -: reading standard input: %w", err)
	case n == 0:
		return "", cleanup, cli.Usage(errors.New("input -: standard input is empty"))
	case n > maxStdin:
		return "", cleanup, cli.Usage(fmt.Errorf("input -: standard input holds more than %d MiB: name the file instead", maxStdin>>20))
	}
	return fmt.Sprintf("/proc/self/fd/%d", f.Fd()), cleanup, nil
}

// isTerminal reports whether f is a terminal (the ioctl that reads its
// settings succeeds).
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// openInputs sorts the inputs into units and checks each: an IDX file is
// read whole and its shape checked, an image's header is read (format and
// size). What is made for them is noted in tmp.
func openInputs(t *train.Trained, ins []input, tmp *tempDirs) ([]*unit, error) {
	var units []*unit
	dc := t.Config.DataConfig
	// Decoded at once, so that a damaged image stops the command before
	// any line is printed, unless the decoded inputs would take more than
	// 256 MiB: then decoded as they are predicted (their headers are
	// still read first).
	fo := data.FolderOptions{Lazy: len(ins)*t.DataShape.Size() > 256<<20}
	if dc.Dataset == "folder" {
		fo.NoResize = dc.FolderResize == "none"
		if dc.FolderResize == "nearest" {
			fo.Interp = data.Nearest
		}
	}
	var images []input
	flush := func() error {
		if len(images) == 0 {
			return nil
		}
		u, err := imageUnit(images, t.DataShape, fo, tmp)
		if err != nil {
			return err
		}
		units = append(units, u)
		images = nil
		return nil
	}
	for _, in := range ins {
		if !isIDX(in.path) {
			images = append(images, in)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		u, err := idxUnit(in, t.DataShape, t.Net.Classes)
		if err != nil {
			return nil, err
		}
		units = append(units, u)
	}
	return units, flush()
}

// isIDX reports whether the file at p starts as an IDX file (raw, of any
// of the format's element types, so that one of floats is refused as IDX
// rather than as an unknown image format) or as gzip.
func isIDX(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [3]byte
	n, _ := io.ReadFull(f, b[:])
	if n >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		return true
	}
	switch b[2] {
	case 0x08, 0x09, 0x0b, 0x0c, 0x0d, 0x0e: // u8, i8, i16, i32, f32, f64
		return n == 3 && b[0] == 0 && b[1] == 0
	}
	return false
}

// imageUnit reads images as an image folder of links, so that they go
// through the very code the training run's folders go through (channels,
// resizing, alpha), checking every header now (and, unless fo.Lazy,
// decoding every image). The directory of links is noted in tmp, and
// removed at once when the images are decoded: nothing reads it again.
func imageUnit(ins []input, shape data.Shape, fo data.FolderOptions, tmp *tempDirs) (*unit, error) {
	dir, err := tmp.make()
	if err == errRemoved {
		return nil, fmt.Errorf("predict: %w", err)
	} else if err != nil {
		return nil, tempError("a directory for the image inputs", err)
	}
	if !fo.Lazy {
		defer tmp.remove(dir)
	}
	class := filepath.Join(dir, "inputs")
	if err := tmp.do(func() error { return os.Mkdir(class, 0o700) }); err != nil {
		return nil, fmt.Errorf("predict: %w", err)
	}
	paths := make([]string, len(ins))
	for i, in := range ins {
		paths[i] = in.name
		abs, err := filepath.Abs(in.path)
		if err != nil {
			return nil, fmt.Errorf("predict: input %s: %w", in.name, err)
		}
		ext := strings.ToLower(filepath.Ext(in.path))
		switch ext {
		case ".png", ".jpg", ".jpeg", ".gif":
		default:
			ext = ".png" // the decoder goes by the content, not the name
		}
		link := filepath.Join(class, fmt.Sprintf("%09d%s", i, ext))
		if err := tmp.do(func() error { return os.Symlink(abs, link) }); err != nil {
			return nil, fmt.Errorf("predict: %w", err)
		}
	}
	u := &unit{paths: paths}
	f, err := data.LoadImageFolder(dir, shape, fo)
	if err != nil {
		return nil, u.imageError(err)
	}
	if f.Len() != len(paths) {
		return nil, fmt.Errorf("predict: %d of %d images listed", f.Len(), len(paths))
	}
	u.ds, u.folder = f, f
	return u, nil
}

// tempError is the error of making what predict needs in the temporary
// directory, naming it and the variable that sets it: a job's TMPDIR that
// is gone was "predict: stat /scratch/job1: no such file or directory".
func tempError(what string, err error) error {
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s cannot be made in %s (the temporary directory, $TMPDIR): %w", what, os.TempDir(), err)
}

// tempDirs are the directories predict makes, removed by removeAll from
// the command or from a signal's goroutine (onStop). What is made in them
// is made through do, so that a removal never meets a directory still
// being filled (it failed: directory not empty).
type tempDirs struct {
	mu      sync.Mutex
	dirs    []string
	removed bool // by removeAll: nothing more is made
}

var errRemoved = errors.New("stopped")

// make makes a directory of its own in $TMPDIR.
func (d *tempDirs) make() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removed {
		return "", errRemoved
	}
	dir, err := os.MkdirTemp("", "hpctrain-predict-*")
	if err == nil {
		d.dirs = append(d.dirs, dir)
	}
	return dir, err
}

// do runs mk, which makes something in one of the directories, unless
// they have been removed.
func (d *tempDirs) do(mk func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removed {
		return errRemoved
	}
	return mk()
}

// remove removes dir now.
func (d *tempDirs) remove(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	os.RemoveAll(dir)
	d.dirs = slices.DeleteFunc(d.dirs, func(s string) bool { return s == dir })
}

func (d *tempDirs) removeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dir := range d.dirs {
		os.RemoveAll(dir)
	}
	d.dirs, d.removed = nil, true
}

// idxUnit reads an IDX file of images (N, H, W) or (N, H, W, C) of the
// training data's shape, and the labels beside it if there are any
// (x-images-idx3-ubyte[.gz] and x-labels-idx1-ubyte[.gz]).
func idxUnit(in input, shape data.Shape, classes int) (*unit, error) {
	p := in.name
	// The shape is checked from the header, before the pixels are read.
	var shapeErr error
	dims, pix, err := data.ReadIDXChecked(in.path, func(d []int) error {
		if len(d) == 3 {
			d = []int{d[0], d[1], d[2], 1}
		}
		if len(d) != 4 {
			shapeErr = fmt.Errorf("input %s: an IDX file of %d dimensions %v, want images (N, H, W) or (N, H, W, C)", p, len(d), d)
		} else if got := (data.Shape{H: d[1], W: d[2], C: d[3]}); got != shape {
			shapeErr = fmt.Errorf("input %s: images of %dx%dx%d, but the network was trained on %dx%dx%d samples", p, got.H, got.W, got.C, shape.H, shape.W, shape.C)
		}
		return shapeErr
	})
	switch {
	case err != nil && err == shapeErr:
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("input %s: %w", p, unwrapIDX(err))
	}
	if len(dims) == 3 {
		dims = append(dims, 1)
	}
	labels := make([]uint8, dims[0])
	u := &unit{idx: true, path: p}
	// A labels file beside the images must be theirs: one label of the
	// network's classes per image (it was ignored when it was not, and a
	// label past the classes was printed as it was).
	if lp := labelsBeside(in.path); lp != "" {
		ld, l, err := data.ReadIDX(lp)
		switch {
		case err != nil:
			return nil, fmt.Errorf("labels %s: %w", lp, unwrapIDX(err))
		case len(ld) != 1 || ld[0] != dims[0]:
			return nil, fmt.Errorf("labels %s: dimensions %v, want one label for each of the %d images of %s", lp, ld, dims[0], p)
		}
		for i, v := range l {
			if int(v) >= classes {
				return nil, fmt.Errorf("labels %s: label %d of image %d, but the network has %d classes", lp, v, i, classes)
			}
		}
		u.labels = l
	}
	ds, err := data.NewImages(shape, classes, pix, labels)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", p, err)
	}
	u.ds = ds
	return u, nil
}

// unwrapIDX drops the path an *data.IDXError repeats.
func unwrapIDX(err error) error {
	var ie *data.IDXError
	if errors.As(err, &ie) {
		return errors.New(ie.Msg)
	}
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// labelsBeside is the labels file that goes with an MNIST-style images
// file, if it exists: compressed as the images are, or else the other
// way (a .gz beside a raw file, as data sets are often unpacked in part).
func labelsBeside(p string) string {
	base := filepath.Base(p)
	if !strings.Contains(base, "images-idx3-ubyte") {
		return ""
	}
	lp := filepath.Join(filepath.Dir(p), strings.Replace(base, "images-idx3-ubyte", "labels-idx1-ubyte", 1))
	other := lp + ".gz"
	if strings.HasSuffix(lp, ".gz") {
		other = strings.TrimSuffix(lp, ".gz")
	}
	for _, l := range []string{lp, other} {
		if _, err := os.Stat(l); err == nil {
			return l
		}
	}
	return ""
}
