package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"hpctrain/checkpoint"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
)

// This file is the other end of a run: a network restored from one of its
// checkpoints, in evaluation mode, with the settings the run recorded, and
// its evaluation on a data set as the run itself evaluates (evaluate's
// loader, shards and sums), with a confusion matrix. hpctrain eval,
// predict and export start here.

// Trained is a network restored from a checkpoint for evaluation and
// inference.
type Trained struct {
	Path  string            // the checkpoint file
	State *checkpoint.State // as read (its sections are not copied)
	// Config is the run's settings as the checkpoint recorded them;
	// what it does not record (version-1 files record nothing) has its
	// default.
	Config Config
	// Net is the network in evaluation mode (batch norm's running
	// statistics, no dropout), built for batches of up to Batch samples.
	Net   *model.Net
	Batch int
	// DataShape is a sample as the data set gives it; Net.In is that after
	// the evaluation transforms (resize, centre crop).
	DataShape data.Shape
	// ClassNames names the outputs (Fashion-MNIST's, CIFAR-10's, an image
	// folder's directories); nil when unknown. An image folder's are the
	// checkpoint's record of them (namesRecorded) where it has one; a
	// checkpoint of an older build has them from the folder as it is now.
	ClassNames    []string
	namesRecorded bool
	// Desc is the network's description, and DescFrom says where it came
	// from: "checkpoint" (recorded in it) or the zoo name or file it was
	// read from.
	Desc     model.Desc
	DescFrom string
}

// Identity is one line that tells this trained network from another, for
// ranks to compare (eval under mpirun, where each rank reads its own
// copy): the model, the step, and a checksum of the parameters and the
// batch-norm statistics.
func (t *Trained) Identity() string {
	h := fnv.New64a()
	for _, v := range [][]float32{t.Net.Params, t.Net.Buffers} {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)))
	}
	return fmt.Sprintf("model %s, step %d, parameters %016x", t.State.Model, t.State.Step, h.Sum64())
}

// LoadOptions are LoadTrained's choices.
type LoadOptions struct {
	// Model, when not empty, is the model (zoo name or description file)
	// the checkpoint must be of; another is a usage error.
	Model string
	// Batch is the largest batch the network takes (0: the run's batch).
	Batch int
	// Warn receives lines worth a user's attention (nil: dropped).
	Warn func(string)
}

// LoadTrained reads the checkpoint at path and rebuilds its network. A
// missing file, or one of another model than opts.Model, is a usage
// error; a corrupt file, or one of a format version this build does not
// read, is an error wrapping checkpoint.ErrFormat, ErrTruncated or
// ErrChecksum. Every error is one line naming the file.
func LoadTrained(path string, opts LoadOptions) (*Trained, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, cli.Usage(fmt.Errorf("checkpoint %s: a directory (use -checkpoint-dir for its newest checkpoint)", path))
	}
	st, err := checkpoint.Load(path)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, cli.Usage(fmt.Errorf("checkpoint %s: no such file (name a .hpck file, or use -checkpoint-dir)", path))
		case errors.Is(err, checkpoint.ErrFormat):
			// The wrong file named (a description, a device, a newer
			// build's format): the user's input, as a missing file is. A
			// damaged checkpoint (truncated, a bad checksum) stays exit 1.
			return nil, cli.Usage(err)
		}
		return nil, err
	}
	return restore(path, st, opts)
}

// LatestTrained is LoadTrained of the newest valid checkpoint in dir;
// unusable files are skipped with a warning, as -resume auto does.
func LatestTrained(dir string, opts LoadOptions) (*Trained, error) {
	switch st, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, cli.Usage(fmt.Errorf("checkpoint dir %s: no such directory", dir))
	case err != nil:
		return nil, cli.Usage(fmt.Errorf("checkpoint dir %s: %w", dir, errors.Unwrap(err)))
	case !st.IsDir():
		return nil, cli.Usage(fmt.Errorf("checkpoint dir %s: not a directory", dir))
	}
	warn := opts.Warn
	if warn == nil {
		warn = func(string) {}
	}
	st, path, err := checkpoint.Latest(dir, warn)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, cli.Usage(fmt.Errorf("checkpoint dir %s: no valid checkpoint (ckpt-*.hpck) in it", dir))
	}
	return restore(path, st, opts)
}

// restore builds st's network and loads its tensors.
func restore(path string, st *checkpoint.State, opts LoadOptions) (*Trained, error) {
	warn := opts.Warn
	if warn == nil {
		warn = func(string) {}
	}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("checkpoint %s: %s", path, fmt.Sprintf(format, a...))
	}
	t := &Trained{Path: path, State: st, Config: Defaults()}
	if st.Config != nil {
		if err := json.Unmarshal(st.Config, &t.Config); err != nil {
			return nil, fail("its settings record does not read: %v", err)
		}
	} else {
		warn(fmt.Sprintf("checkpoint %s records no settings (format version %d): assuming the defaults (data set %s in %s)", path, st.Version, t.Config.Dataset, t.Config.DataDir))
	}
	if t.Config.Model == "" || st.Model != "" {
		t.Config.Model = st.Model
	}
	// The data settings are used below as they are recorded: a record
	// that training would have refused (a damaged or hand-made file) is
	// refused here too, before anything indexes by it.
	if err := t.Config.DataConfig.ValidateRecord(); err != nil {
		return nil, fail("its recorded settings do not hold: %v", err)
	}
	if err := t.Config.DataConfig.CheckDataDir(); err != nil {
		// Written before training refused this (a run of mnist that read
		// Fashion-MNIST's files): the network is sound, its data was not.
		warn(fmt.Sprintf("checkpoint %s: %v; the run trained on what it found there", path, strings.TrimPrefix(err.Error(), "config: ")))
	}

	// The description: recorded in the checkpoint, else the model's own.
	var desc model.Desc
	var err error
	if st.Desc != "" {
		desc, err = model.ParseDesc(st.Model, []byte(st.Desc))
		if err != nil {
			return nil, fail("its model description does not read: %v", err)
		}
		t.DescFrom = "checkpoint"
	} else {
		desc, err = model.LoadDesc(st.Model)
		if err != nil {
			return nil, fail("it records no model description, and its model's cannot be read: %v", err)
		}
		t.DescFrom = st.Model
	}
	t.Desc = desc
	if opts.Model != "" {
		if err := sameModel(st, desc, opts.Model); err != nil {
			return nil, cli.Usage(fmt.Errorf("checkpoint %s: %w", path, err))
		}
	}

	// The input: a data set sample through the evaluation transforms.
	dc := t.Config.DataConfig
	t.DataShape, err = sampleShape(dc)
	if err != nil {
		return nil, fail("%v", err)
	}
	lo, err := dc.LoaderOptions(t.DataShape, t.Config.Seed)
	if err != nil {
		return nil, fail("%v", err)
	}
	pipe, err := data.NewPipeline(t.DataShape, lo.EvalTransforms)
	if err != nil {
		return nil, fail("%v", err)
	}
	in := model.Shape(pipe.Out())

	params := st.Lookup("params")
	if params == nil {
		return nil, fail("no parameters (section \"params\")")
	}
	// The classes: the checkpoint's record of a folder's, else the data
	// set's. A folder read now (a checkpoint of an older build) may have
	// gained or lost directories since the run: where its count does not
	// fit the parameters, the parameters tell the count, and no names.
	classes, names := len(st.ClassNames), st.ClassNames
	t.namesRecorded = names != nil
	if !t.namesRecorded {
		classes, names = classesOf(dc)
		if dc.Dataset == "folder" {
			if k := classesFromParams(desc, in, len(params)); k > 0 && k != classes {
				classes, names = k, nil
			}
		}
	}
	if classes == 0 {
		classes = classesFromParams(desc, in, len(params))
	}
	t.ClassNames = names
	t.Batch = opts.Batch
	if t.Batch <= 0 {
		t.Batch = max(t.Config.Batch, 1)
	}
	if opts.Batch > 0 {
		// A -batch the network cannot be built for, or this machine
		// cannot hold, is the user's to lower: exit 2, naming it (a
		// -batch of 16777216 was "input 28x28x1 too large for batch",
		// exit 1, or an out-of-memory death).
		what := fmt.Sprintf("-batch %d: model %s", t.Batch, st.Model)
		s, err := model.Summarize(desc, in, max(classes, 1))
		if err != nil {
			return nil, cli.Usage(fmt.Errorf("%s: %w", what, err))
		}
		if err := data.NewBudget(1).Take(what+" with batches of that many samples", NetBytes(s, t.Batch, 1), NetHint(s, t.Batch)); err != nil {
			return nil, cli.Usage(err)
		}
	}
	t.Net, err = model.Build(desc, in, max(classes, 1), t.Batch, t.Config.Seed)
	if err != nil {
		if opts.Batch > 0 {
			return nil, cli.Usage(fmt.Errorf("-batch %d: %w", t.Batch, err))
		}
		return nil, fail("%v", err)
	}
	if len(params) != len(t.Net.Params) {
		return nil, fail("%d parameters, but model %s on %v input with %d classes has %d: the checkpoint is of another network or input shape (%s)",
			len(params), st.Model, in, classes, len(t.Net.Params), describeData(dc))
	}
	if i := nonFinite(params); i >= 0 {
		return nil, fail("parameter %d of %d is %v: the network cannot compute (training stops before it writes such a checkpoint)", i, len(params), params[i])
	}
	copy(t.Net.Params, params)
	bufs := st.Lookup("buffers")
	switch {
	case len(t.Net.Buffers) > 0 && bufs == nil:
		return nil, fail("it holds no batch-norm running statistics (section \"buffers\"), which model %s needs in evaluation: it was written by a build that did not save them", st.Model)
	case len(bufs) != len(t.Net.Buffers):
		return nil, fail("%d buffer values (running statistics), the model has %d", len(bufs), len(t.Net.Buffers))
	}
	if i := nonFinite(bufs); i >= 0 {
		return nil, fail("buffer value %d of %d (running statistics) is %v: the network cannot compute", i, len(bufs), bufs[i])
	}
	copy(t.Net.Buffers, bufs)
	t.Net.SetTraining(false)
	if names != nil && len(names) != t.Net.Classes {
		t.ClassNames = nil
	}
	return t, nil
}

// sameModel checks that the checkpoint (of description desc) is of the
// model named by want: a zoo name or a description file.
func sameModel(st *checkpoint.State, desc model.Desc, want string) error {
	wd, err := model.LoadDesc(want)
	if err != nil {
		return fmt.Errorf("-model %s: %w", want, err)
	}
	if st.Desc == "" && st.Model != want {
		return fmt.Errorf("it is of model %s, not %s (-model); drop -model or name a checkpoint of %s", st.Model, want, want)
	}
	if d := wd.Diff(desc); d != "" {
		if st.Model == want {
			// The same file, edited since the run.
			return fmt.Errorf("%s (-model) has changed since the checkpoint was written: %s; drop -model, or restore the description the run used", want, d)
		}
		return fmt.Errorf("it is of model %s, not %s (-model): %s; drop -model or name a checkpoint of %s", st.Model, want, d, want)
	}
	return nil
}

// sampleShape is the shape of a sample of the configured data set before
// any transform: image_shape for folders and synthetic sets (or their
// defaults), CIFAR-10's, and 28x28x1 for IDX files (MNIST's and
// Fashion-MNIST's), as data.Config.Open gives them.
func sampleShape(dc data.Config) (data.Shape, error) {
	switch {
	case dc.ImageShape != "":
		s, err := data.ParseShape(dc.ImageShape)
		if err != nil {
			return data.Shape{}, fmt.Errorf("image_shape = %q: %w", dc.ImageShape, err)
		}
		return s, nil
	case dc.Dataset == "folder":
		return data.Shape{H: 32, W: 32, C: 3}, nil
	case dc.Dataset == "cifar10":
		return data.CIFAR10Shape, nil
	}
	return data.Shape{H: 28, W: 28, C: 1}, nil
}

// Class names of the built-in data sets, in label order.
var classNames = map[string][]string{
	"fashion-mnist": {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"},
	"mnist":         {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"},
	"cifar10":       {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"},
}

// classesOf is the number of classes of the configured data set and
// their names: 10 for the built-in sets (synthetic ones are unnamed), an
// image folder's class directories (as data.LoadImageFolder lists them)
// when data_dir can be read, else 0 and nil.
func classesOf(dc data.Config) (int, []string) {
	if names, ok := classNames[dc.Dataset]; ok {
		return len(names), names
	}
	if dc.Dataset != "folder" {
		return 10, nil
	}
	es, err := os.ReadDir(dc.DataDir)
	if err != nil {
		return 0, nil
	}
	var names []string
	for _, e := range es {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return len(names), names
}

// classesFromParams finds the number of classes for which d on input in
// has n parameters: they grow linearly with the classes (the last layer's
// outputs), so two builds tell the slope. 0 if none fits.
func classesFromParams(d model.Desc, in model.Shape, n int) int {
	count := func(k int) int {
		net, err := model.Build(d, in, k, 1, 1)
		if err != nil {
			return -1
		}
		return len(net.Params)
	}
	p1, p2 := count(1), count(2)
	if p1 < 0 || p2 <= p1 || n < p1 || (n-p1)%(p2-p1) != 0 {
		return 0
	}
	return (n-p1)/(p2-p1) + 1
}

func describeData(dc data.Config) string {
	s := "data set " + dc.Dataset
	if dc.ImageShape != "" {
		s += ", image_shape " + dc.ImageShape
	}
	if dc.Augment != "" {
		s += ", augment " + string(dc.Augment)
	}
	return s
}

// EvalSet is a data set opened for evaluation: its test part and the
// loader that reads it as the run's evaluation does.
type EvalSet struct {
	Test       data.Dataset
	Loader     *data.Loader
	ClassNames []string // the folder's class directories; nil for other sets
	Desc       string   // one line for people: what is evaluated
	sets       *data.Sets
}

// Close stops the loader.
func (e *EvalSet) Close() { e.Loader.Close() }

// Err is the first image a lazy folder failed to decode, or nil.
func (e *EvalSet) Err() error { return e.sets.Err() }

// OpenEval opens the test part of the data set dc (the run's, or another
// with the same sample shape and classes) and its evaluation loader: the
// run's normalisation and evaluation transforms, batches of t.Batch, the
// first testLimit samples (0: all). ranks is the number of processes on
// this node, for the memory budget. A data set that does not fit the
// network is a usage error naming both.
func (t *Trained) OpenEval(dc data.Config, testLimit, ranks int, warn func(string)) (*EvalSet, error) {
	return t.openEval(dc, testLimit, ranks, warn, nil)
}

// openEval is OpenEval, calling progress (if not nil) as the load goes on
// (data.OpenOptions.Progress).
func (t *Trained) openEval(dc data.Config, testLimit, ranks int, warn func(string), progress func()) (*EvalSet, error) {
	od := dc // what is opened
	if err := dc.Validate(); err != nil {
		// The run's normalisation has a value for each of the network's
		// channels: where it does not fit this data set, the reason is the
		// data set's shape, said below once it is read.
		od.Mean, od.Std = nil, nil
		if len(dc.Mean) != t.Net.In.C || od.Validate() != nil {
			return nil, cli.Usage(err)
		}
	}
	sets, err := openTest(od, data.OpenOptions{Limit: t.Config.Limit, TestLimit: testLimit, Budget: data.NewBudget(ranks), Warn: warn, Progress: progress})
	if err != nil {
		if errors.As(err, new(*data.MemoryError)) || errors.Is(err, fs.ErrNotExist) {
			err = cli.Usage(err)
		}
		return nil, err
	}
	for _, n := range sets.Notes {
		if warn != nil {
			warn(n)
		}
	}
	test := sets.Test
	if test.Classes() != t.Net.Classes {
		return nil, cli.Usage(fmt.Errorf("data set %s (%s) has %d classes, the network %d", dc.Dataset, dc.DataDir, test.Classes(), t.Net.Classes))
	}
	otherShape := func(s data.Shape) error {
		return cli.Usage(fmt.Errorf("data set %s gives %dx%dx%d samples, the network takes %v", dc.Dataset, s.H, s.W, s.C, t.Net.In))
	}
	if s := test.Shape(); s.C != t.Net.In.C {
		// No evaluation transform changes the channels; said before the
		// run's normalisation, one value a channel, is found not to fit.
		return nil, otherShape(s)
	}
	opts, err := dc.LoaderOptions(test.Shape(), t.Config.Seed)
	if err != nil {
		return nil, cli.Usage(err)
	}
	opts.Transforms, opts.Batch = opts.EvalTransforms, t.Batch
	ld, err := data.NewLoader(test, nil, opts)
	if err != nil {
		return nil, fmt.Errorf("test data: %w", err)
	}
	if model.Shape(ld.Shape()) != t.Net.In {
		ld.Close()
		return nil, otherShape(ld.Shape())
	}
	e := &EvalSet{Test: test, Loader: ld, ClassNames: sets.ClassNames, sets: sets}
	if t.namesRecorded && e.ClassNames != nil && !slices.Equal(e.ClassNames, t.ClassNames) {
		// The same count under other names: output k would be scored
		// against another class's images.
		ld.Close()
		return nil, cli.Usage(fmt.Errorf("data set %s (%s) has the classes %s, the network was trained on %s: output k is class k of the training run's folder; evaluate on class directories of the same names",
			dc.Dataset, dc.DataDir, namesText(e.ClassNames), namesText(t.ClassNames)))
	}
	where := dc.DataDir
	if dc.TestDir != "" {
		where = dc.TestDir
	}
	_, _, norm := dc.Normalisation(test.Shape().C)
	e.Desc = fmt.Sprintf("%s (%s): %d test samples, normalise %s", dc.Dataset, where, test.Len(), norm)
	return e, nil
}

// openTest opens the test part of dc as dc.Open does, without reading
// the training files where the test set does not need them: the test
// split of MNIST, Fashion-MNIST and CIFAR-10 is a file of its own (a
// folder's held-out part, or a synthetic set, comes from Open).
func openTest(dc data.Config, opts data.OpenOptions) (*data.Sets, error) {
	var test data.Dataset
	var err error
	switch dc.Dataset {
	case "fashion-mnist", "mnist":
		test, err = data.LoadMNIST(dc.DataDir, false)
	case "cifar10":
		test, err = data.LoadCIFAR10(dc.DataDir, false)
	default:
		return dc.Open(opts)
	}
	if err != nil {
		return nil, err
	}
	if opts.Progress != nil {
		opts.Progress() // the test set's files read
	}
	return &data.Sets{Train: test, Test: data.Limit(test, opts.TestLimit)}, nil
}

// Evaluation is a network's evaluation on a data set.
type Evaluation struct {
	Samples  int
	Loss     float64 // mean softmax cross-entropy
	Accuracy float64 // Correct / Samples
	Correct  int
	// Confusion[i][j] counts the samples of class i predicted as class j
	// (the highest score, the first one on ties, as Net.Loss counts).
	Confusion [][]int64
}

// ClassAccuracy is the accuracy on each class's samples (NaN for a class
// with none).
func (e Evaluation) ClassAccuracy() []float64 {
	acc := make([]float64, len(e.Confusion))
	for i, row := range e.Confusion {
		var n int64
		for _, v := range row {
			n += v
		}
		acc[i] = math.NaN()
		if n > 0 {
			acc[i] = float64(row[i]) / float64(n)
		}
	}
	return acc
}

// Evaluate evaluates net on the n samples ld reads, as the training run's
// evaluation does: each rank takes its contiguous shard (data.Shard), in
// batches, and the sums (loss times samples, correct, samples, and the
// confusion counts) are reduced over the ranks. A device error during the
// passes (net.Err: a failed kernel leaves stale scores behind) fails the
// evaluation on every rank, rather than giving a wrong accuracy.
// Collective.
func Evaluate(c mpi.Comm, net model.Replica, ld *data.Loader, n int) (Evaluation, error) {
	return evaluateEach(c, net, ld, n, nil)
}

// evaluateEach is Evaluate, calling each (if not nil) as every batch
// begins: the training run's watchdog times the batches by it.
func evaluateEach(c mpi.Comm, net model.Replica, ld *data.Loader, n int, each func()) (Evaluation, error) {
	k := net.Host().Classes
	lo, hi := data.Shard(n, c.Rank(), c.Size())
	ld.StartRange(lo, hi)
	sums := make([]float64, 4+k*k) // loss*n, correct, n, ranks failed, confusion
	conf := sums[4:]
	for {
		if each != nil {
			each()
		}
		b, ok := ld.Next()
		if !ok {
			break
		}
		copy(net.Input(), b.X)
		logits := net.Forward(b.N)
		for i := 0; i < b.N; i++ {
			conf[int(b.Y[i])*k+argmax(logits[i*k:(i+1)*k])]++
		}
		l, correct := net.Loss(b.Y)
		sums[0] += l * float64(b.N)
		sums[1] += float64(correct)
		sums[2] += float64(b.N)
		ld.Release(b)
	}
	nerr := net.Err()
	if nerr != nil {
		sums[3] = 1
	}
	if err := c.AllreduceSum64(sums); err != nil {
		return Evaluation{}, fmt.Errorf("reducing test results: %w", err)
	}
	switch {
	case nerr != nil:
		return Evaluation{}, fmt.Errorf("evaluation: %w", nerr)
	case sums[3] > 0:
		return Evaluation{}, fmt.Errorf("evaluation failed on %d other rank(s) (see their message); stopping", int(sums[3]))
	case math.IsNaN(sums[0]) || math.IsInf(sums[0], 0):
		// No figure to report (nor to write as JSON): the scores overflow.
		return Evaluation{}, fmt.Errorf("evaluation: the test loss is %v: the network's scores overflow on the test set", sums[0])
	}
	if sums[2] == 0 {
		return Evaluation{}, errors.New("empty test set")
	}
	e := Evaluation{Samples: int(sums[2]), Loss: sums[0] / sums[2], Accuracy: sums[1] / sums[2], Correct: int(sums[1]), Confusion: make([][]int64, k)}
	for i := range e.Confusion {
		e.Confusion[i] = make([]int64, k)
		for j := range e.Confusion[i] {
			e.Confusion[i][j] = int64(conf[i*k+j])
		}
	}
	return e, nil
}

// argmax is the index of the first highest score, as model's Loss finds it.
func argmax(z []float32) int {
	b := 0
	for j, v := range z {
		if v > z[b] {
			b = j
		}
	}
	return b
}

// nonFinite is the index of the first NaN or infinity in v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}
