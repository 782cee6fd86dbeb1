package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"hpctrain/checkpoint"
	"hpctrain/export"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
)

const exportUsage = `Usage: hpctrain export -checkpoint FILE -format onnx|safetensors -o PATH

Writes a trained network for other tools:

  onnx          an ONNX model (opset 13): input "input" (batch, C, H, W),
                float32, normalised as in training; output "logits"
                (batch, classes). Batch norm in inference form, no dropout.
  safetensors   the parameters and buffers under PyTorch's names and
                layouts (conv1.weight (O, C, K, K), fc1.bias,
                bn1.running_mean, ...), for load_state_dict of the
                equivalent nn.Module; the model description, classes and
                normalisation in the metadata.

-format defaults to the extension of -o (.onnx, .safetensors), and where
both are given they must agree. The file is written whole or not at all.
-o - writes to standard output (give -format), and the closing line then
goes to standard error.

Flags:
`

// exportCmd is `hpctrain export`.
func exportCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain export", flag.ContinueOnError)
	var ck ckptFlags
	ck.bindFile(fs)
	format := fs.String("format", "", "onnx or safetensors (default: from the extension of -o)")
	out := fs.String("o", "", "output `PATH` (-: standard output)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), exportUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return err
	}
	if otherRank("export", stderr) {
		return nil
	}
	if *out == "" {
		return cli.Usage(fmt.Errorf("-o PATH is missing (see hpctrain export -h)"))
	}
	byExt := ""
	switch strings.ToLower(filepath.Ext(*out)) {
	case ".onnx":
		byExt = "onnx"
	case ".safetensors":
		byExt = "safetensors"
	}
	f := *format
	switch {
	case f == "" && byExt != "":
		f = byExt
	case f == "" && *out == "-":
		return cli.Usage(errors.New("-o - (standard output) has no extension to go by: give -format onnx or -format safetensors"))
	case f == "":
		return cli.Usage(fmt.Errorf("-format is missing and -o %s has neither .onnx nor .safetensors as extension", *out))
	case f != "onnx" && f != "safetensors":
		return cli.Usage(fmt.Errorf("-format %q: want onnx or safetensors", f))
	case byExt != "" && f != byExt:
		// A file named for the other format, which a tool that goes by
		// the name would misread.
		return cli.Usage(fmt.Errorf("-format %s but -o %s is named for %s: name it .%s, or leave -format out", f, *out, byExt, f))
	}
	write := export.ONNX
	if f == "safetensors" {
		write = export.Safetensors
	}
	toStdout := *out == "-"
	var stop exportStop
	defer stop.catch()()
	if !toStdout {
		if isCheckpoint(*out) {
			return cli.Usage(fmt.Errorf("-o %s is a checkpoint: export would write over it (name the new file)", *out))
		}
		if checkpoint.IsFileName(filepath.Base(*out)) {
			return cli.Usage(fmt.Errorf("-o %s: a checkpoint's name (ckpt-STEP.hpck): a run resuming from that directory would take the export for a damaged checkpoint and set it aside (name the new file otherwise)", *out))
		}
		if err := stop.guard(func() error { return atomicfile.Check(*out) }); err != nil {
			return cli.Usage(fmt.Errorf("-o %s: %w", *out, err)) // a misspelt directory: bad input
		}
		if isStdout(*out, stdout) {
			stdout = stderr // the closing line: it went into the file, after the network
		}
	}
	ck.batch = 1 // the network is only read
	t, err := ck.load("hpctrain export", stderr)
	if err != nil {
		return err
	}
	mean, std, _ := t.Config.DataConfig.Normalisation(t.Net.In.C)
	info := export.Info{Model: t.State.Model, Step: t.State.Step, Dataset: t.Config.Dataset, ClassNames: t.ClassNames, Mean: mean, Std: std,
		SampleShape: []int{t.DataShape.C, t.DataShape.H, t.DataShape.W}}
	dc := t.Config.DataConfig
	if dc.Dataset == "folder" {
		info.SampleResize = dc.FolderResize // as predict reads image files
	}
	if opts, err := dc.LoaderOptions(t.DataShape, 0); err == nil {
		for _, tr := range opts.EvalTransforms {
			info.Preprocess = append(info.Preprocess, tr.String())
		}
	}
	if toStdout {
		bw := bufio.NewWriter(stdout)
		if err := write(bw, t.Net, info); err != nil {
			return fmt.Errorf("export %s: %w", t.Path, err)
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("export %s: standard output: %w", t.Path, err)
		}
		stdout, *out = stderr, "standard output" // the closing line
	} else if err := stop.guard(func() error {
		return atomicfile.Write(*out, func(w io.Writer) error { return write(stop.writer(w), t.Net, info) })
	}); err != nil {
		return fmt.Errorf("export %s: %w", t.Path, err)
	}
	in := t.Net.In
	fmt.Fprintf(stdout, "hpctrain: wrote %s (%s; model %s, step %d, %d parameters; input batch x %d x %d x %d, %d classes)\n",
		*out, f, t.State.Model, t.State.Step, len(t.Net.Params), in.C, in.H, in.W, t.Net.Classes)
	return nil
}

// isStdout reports whether path (links followed) is the file that
// stdout writes to: standard output by another name, such as /dev/stdout.
func isStdout(path string, stdout io.Writer) bool {
	f, ok := stdout.(*os.File)
	if !ok {
		return false
	}
	a, err := os.Stat(path)
	if err != nil {
		return false
	}
	b, err := f.Stat()
	return err == nil && os.SameFile(a, b)
}

// isCheckpoint reports whether path (links followed) is a regular file
// that starts as a checkpoint does. export -o replaced such a file, the
// one being exported included, with the export: the training's state was
// gone.
func isCheckpoint(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false // a device or pipe is not read: it could block
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [len(checkpoint.Magic)]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == checkpoint.Magic
}

// exportStop ends export on a signal that would end the process (Ctrl-C,
// a closed terminal, kill, a scheduler's stop) as the signal would, but
// never while a file of its own lies beside -o: atomicfile.Check's probe
// and atomicfile.Write's temporary file (.NAME.*.tmp), both of which the
// signal's default left there. Within guarded, a signal is noted, the
// file's next write fails (so that atomicfile removes it), and the
// process ends by the signal when atomicfile returns; the file is then
// whole or not there.
type exportStop struct {
	mu      sync.Mutex
	guarded bool
	sig     atomic.Int32 // the signal noted, 0 for none
}

// catch starts catching the signals; the returned stop ends it.
func (e *exportStop) catch() (stop func()) {
	return onStop(func(s os.Signal) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.guarded {
			die(s)
		}
		e.sig.CompareAndSwap(0, int32(s.(syscall.Signal)))
	}, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
}

// guard runs f, which makes and removes files beside -o, with a signal
// put off until it returns.
func (e *exportStop) guard(f func() error) error {
	e.mu.Lock()
	e.guarded = true
	e.mu.Unlock()
	err := f()
	e.mu.Lock()
	e.guarded = false
	e.mu.Unlock()
	if s := e.sig.Load(); s != 0 {
		die(syscall.Signal(s))
	}
	return err
}

// writer is w until a signal is noted.
func (e *exportStop) writer(w io.Writer) io.Writer { return stopWriter{w, &e.sig} }

type stopWriter struct {
	w   io.Writer
	sig *atomic.Int32
}

func (s stopWriter) Write(p []byte) (int, error) {
	if n := s.sig.Load(); n != 0 {
		return 0, fmt.Errorf("stopped by %v", syscall.Signal(n))
	}
	return s.w.Write(p)
}
