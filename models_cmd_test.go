package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
)

func TestModelsCmd(t *testing.T) {
	var out, errb strings.Builder
	if err := modelsCmd(nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cnn", "1630090", "2122186", "resnet20", "272474", "lenet5", "61706"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("models lacks %q:\n%s", want, out.String())
		}
	}
	// One model: the embedded file, which reads back as the zoo's.
	out.Reset()
	if err := modelsCmd([]string{"resnet20"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	d, err := model.ParseDesc("copy.toml", []byte(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	z, _ := model.LoadDesc("resnet20")
	if d.Hash() != z.Hash() || !strings.HasPrefix(out.String(), "# resnet20: ") {
		t.Errorf("hpctrain models resnet20 printed:\n%s", out.String())
	}
	// A copy, edited, then shown with every key.
	path := filepath.Join(t.TempDir(), "mine.toml")
	if err := os.WriteFile(path, []byte(strings.Replace(out.String(), "out = 16,", "out = 24,", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := modelsCmd([]string{"-canonical", path}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `{kind = "conv", out = 24, kernel = 3, stride = 1, pad = 1, bias = false},`) {
		t.Errorf("canonical copy:\n%s", out.String())
	}
	// -canonical is of one model: without a name it was ignored, and the
	// list printed.
	for _, args := range [][]string{{"resnet"}, {"a", "b"}, {"-nope"}, {"-canonical"}} {
		out.Reset()
		if err := modelsCmd(args, &out, &errb); !errors.As(err, new(cli.UsageError)) || out.Len() > 0 {
			t.Errorf("models %q: %v, want a usage error and no output, printed:\n%s", args, err, out.String())
		}
	}
	if err := modelsCmd([]string{"-h"}, &out, &errb); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("models -h: %v", err)
	}
}

func TestSummaryCmd(t *testing.T) {
	var out, errb strings.Builder
	if err := summaryCmd([]string{"-model", "resnet20", "-input", "32x32x3"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"res9 (residual)", "  res4.proj.conv1 (conv)", "Total params: 272,474", "Non-trainable buffers: 1,568"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := summaryCmd([]string{"-model", "cnn", "-json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var s model.Summary
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil {
		t.Fatal(err)
	}
	if s.Params != 1630090 || s.MACs != 5449216 || len(s.Rows) != 9 || s.Rows[0].Name != "conv1" || s.Rows[0].Output != "28x28x32" {
		t.Errorf("summary -json: %+v", s)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte(`layers = [{kind = "conv", out = 4, kernel = 9}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "resnet"}, `unknown model "resnet"`},
		{[]string{"-input", "28x28"}, `-input: shape "28x28": want HxWxC`},
		{[]string{"-model", bad}, "model " + bad + ": layer 1 (conv): kernel 9 larger than its input 5x5 with pad 0"},
		{[]string{"-classes", "0"}, "-classes 0: must be >= 1"},
	} {
		args := c.args
		if c.args[0] == "-model" && strings.HasSuffix(c.args[1], ".toml") {
			args = append(args, "-input", "5x5x1")
		}
		err := summaryCmd(args, &out, &errb)
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("summary %q: %v, want a usage error with %q", args, err, c.want)
		}
	}
}

// TestSummaryCheckpoint: summary -checkpoint lays out the checkpoint's own
// network, with its input and classes; flags describing another network
// are refused beside it, and a checkpoint given as -model is named as
// binary rather than read as TOML.
func TestSummaryCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "resnet8")
	want := mustRun(t, summaryCmd, "-model", "resnet8", "-json")
	for _, args := range [][]string{{"-checkpoint", ck, "-json"}, {"-checkpoint-dir", dir, "-json"}} {
		if got := mustRun(t, summaryCmd, args...); got != want {
			t.Errorf("summary %q:\n%s\nwant the zoo model's:\n%s", args, got, want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-checkpoint", ck, "-input", "32x32x3"}, "-input: a checkpoint's network has its own"},
		{[]string{"-checkpoint", ck, "-checkpoint-dir", dir}, "-checkpoint-dir " + dir + " both given: give one"},
		{[]string{"-model", ck}, `a binary file, not TOML text (it begins "\x89HPCKPT\n")`},
	} {
		r := runCmd(summaryCmd, c.args...)
		if r.code != 2 || !strings.Contains(r.errs, c.want) {
			t.Errorf("summary %q: exit %d, %q; want exit 2 and %q", c.args, r.code, r.errs, c.want)
		}
	}
}

// The communicator is what synchronised batch norm reduces with.
var _ model.SumReducer = mpi.Comm(nil)
