package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"hpctrain/internal/cli"
	"hpctrain/model"
)

// modelsCmd is `hpctrain models [NAME|FILE.toml]`: the built-in models with
// their sizes, or one model's description to copy and edit.
func modelsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain models", flag.ContinueOnError)
	canonical := fs.Bool("canonical", false, "print the description with every key, defaults included (what -model hashes), not the file")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: hpctrain models [NAME|FILE.toml]
       hpctrain models -canonical NAME|FILE.toml

Without an argument, lists the built-in models (train -model NAME) with
their parameters for 28x28x1 and 32x32x3 input and 10 classes. With one,
prints that model's TOML description: copy it, edit it, and train it with
-model FILE.toml (see model.ParseDesc for the keys).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, true); err != nil {
		return err
	}
	if otherRank("models", stderr) {
		return nil
	}
	switch fs.NArg() {
	case 0:
		if *canonical {
			return cli.Usage(errors.New("-canonical without a model: it prints one model's description with every key (hpctrain models -canonical NAME|FILE.toml)"))
		}
		return listModels(stdout)
	case 1:
	default:
		// The flag package stops at the first argument that is not a
		// flag: models resnet8 -canonical left -canonical a second model.
		for _, a := range fs.Args()[1:] {
			if n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && fs.Lookup(n) != nil {
				return cli.Usage(fmt.Errorf("%s after the model %s: flags go before it (hpctrain models %s %s)", a, fs.Arg(0), a, fs.Arg(0)))
			}
		}
		return cli.Usage(fmt.Errorf("one model at a time, got %d: %s (see hpctrain models -h)", fs.NArg(), strings.Join(fs.Args(), " ")))
	}
	name := fs.Arg(0)
	if src, err := model.ZooSource(name); err == nil && !*canonical {
		_, err := stdout.Write(src)
		return err
	}
	d, err := model.LoadDesc(name)
	if err != nil {
		return cli.Usage(err)
	}
	fmt.Fprintf(stdout, "# %s, every key given (hash %s)\n", d.Name, d.Hash())
	_, err = stdout.Write(d.TOML())
	return err
}

// listModels prints the zoo: name, parameters for both inputs, and the
// first line of the file's comment.
func listModels(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tparams 28x28x1\tparams 32x32x3\t")
	var about []string
	for _, name := range model.Zoo() {
		d, err := model.LoadDesc(name)
		if err != nil {
			return err
		}
		row := name + "\t"
		for _, in := range []model.Shape{{H: 28, W: 28, C: 1}, {H: 32, W: 32, C: 3}} {
			s, err := model.Summarize(d, in, 10)
			if err != nil {
				return err
			}
			row += fmt.Sprintf("%d\t", s.Params)
		}
		fmt.Fprintln(tw, row)
		src, _ := model.ZooSource(name)
		about = append(about, name+": "+firstComment(src, name))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, a := range about {
		fmt.Fprintln(out, a)
	}
	fmt.Fprintln(out, "\nhpctrain models NAME prints one; hpctrain summary -model NAME shows its layers.")
	return nil
}

// firstComment is the first line of a zoo file, "# NAME: what it is",
// without "# NAME: ".
func firstComment(src []byte, name string) string {
	line, _, _ := bytes.Cut(src, []byte("\n"))
	return strings.TrimPrefix(string(line), "# "+name+": ")
}

// summaryCmd is `hpctrain summary -model X [-input HxWxC]`, or
// `hpctrain summary -checkpoint FILE`: the network layer by layer, with
// output shapes, parameters and multiply-adds.
func summaryCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain summary", flag.ContinueOnError)
	name := fs.String("model", "cnn", "built-in model ("+strings.Join(model.Zoo(), ", ")+") or description file FILE.toml")
	input := fs.String("input", "28x28x1", "shape of one input sample, `HxWxC`")
	classes := fs.Int("classes", 10, "number of classes (outputs)")
	var ck ckptFlags
	fs.StringVar(&ck.file, "checkpoint", "", "summarise the network of checkpoint `FILE` (.hpck) instead, with its input and classes")
	fs.StringVar(&ck.dir, "checkpoint-dir", "", "summarise the network of the newest valid checkpoint in `DIR`")
	js := fs.Bool("json", false, "print JSON instead of the table")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: hpctrain summary [-model NAME|FILE.toml] [-input HxWxC] [-classes K] [-json]
       hpctrain summary -checkpoint FILE | -checkpoint-dir DIR

Lays out a network layer by layer without training it: each layer's output
shape, parameters and multiply-adds per sample, and the totals; of a
checkpoint, its own network with the input and classes it trained on.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return err
	}
	if otherRank("summary", stderr) {
		return nil
	}
	var s model.Summary
	var err error
	if ck.file != "" || ck.dir != "" {
		s, err = summarizeCheckpoint(fs, &ck, stderr)
	} else {
		s, err = summarizeModel(*name, *input, *classes)
	}
	if err != nil {
		return err
	}
	if *js {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return s.Write(stdout)
}

// summarizeModel lays out a zoo model or description file for the input
// and classes given.
func summarizeModel(name, input string, classes int) (model.Summary, error) {
	in, err := model.ParseShape(input)
	if err != nil {
		return model.Summary{}, cli.Usage(fmt.Errorf("-input: %w", err))
	}
	if classes < 1 {
		return model.Summary{}, cli.Usage(fmt.Errorf("-classes %d: must be >= 1", classes))
	}
	d, err := model.LoadDesc(name)
	if err != nil {
		return model.Summary{}, cli.Usage(err)
	}
	s, err := model.Summarize(d, in, classes)
	if err != nil {
		return model.Summary{}, cli.Usage(err)
	}
	return s, nil
}

// summarizeCheckpoint lays out a checkpoint's network, with the input and
// classes its run trained on; -model, -input and -classes, which describe
// another network, are refused beside it.
func summarizeCheckpoint(fs *flag.FlagSet, ck *ckptFlags, stderr io.Writer) (model.Summary, error) {
	var clash []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "model" || f.Name == "input" || f.Name == "classes" {
			clash = append(clash, "-"+f.Name)
		}
	})
	if len(clash) > 0 {
		return model.Summary{}, cli.Usage(fmt.Errorf("%s: a checkpoint's network has its own model, input and classes; give one or the other", strings.Join(clash, ", ")))
	}
	ck.batch = 1
	t, err := ck.load("hpctrain summary", stderr)
	if err != nil {
		return model.Summary{}, err
	}
	s, err := model.Summarize(t.Desc, t.Net.In, t.Net.Classes)
	if err != nil {
		return model.Summary{}, fmt.Errorf("checkpoint %s: %w", t.Path, err)
	}
	return s, nil
}
