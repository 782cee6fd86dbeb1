package slurm

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.sbatch golden files")

// TestRenderGolden renders testdata/NAME.toml and compares with
// testdata/NAME.sbatch; run `go test ./slurm -run Golden -update` after a
// deliberate change and review the diff.
func TestRenderGolden(t *testing.T) {
	for _, name := range []string{"cpu", "gpu"} {
		t.Run(name, func(t *testing.T) {
			spec, err := LoadJobSpec(filepath.Join("testdata", name+".toml"))
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := Render(&buf, spec); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".sbatch")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("%s differs from rendering (rerun with -update and review):\n%s", golden, lineDiff(string(want), got))
			}
			// The script must at least be valid bash, and give shellcheck
			// (where it is installed) nothing to say, info included.
			if bash, err := exec.LookPath("bash"); err == nil {
				cmd := exec.Command(bash, "-n")
				cmd.Stdin = bytes.NewReader(buf.Bytes())
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("bash -n: %v\n%s", err, out)
				}
			}
			if sc, err := exec.LookPath("shellcheck"); err == nil {
				cmd := exec.Command(sc, "-S", "info", "-")
				cmd.Stdin = bytes.NewReader(buf.Bytes())
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("shellcheck: %v\n%s", err, out)
				}
			} else {
				t.Log("shellcheck not installed: not run")
			}
		})
	}
}

// lineDiff shows the first differing line of two texts.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl
		}
	}
	return "(no line differs)"
}

func TestRenderContents(t *testing.T) {
	s := DefaultJobSpec()
	s.Config = "c.toml"
	var buf bytes.Buffer
	if err := Render(&buf, s); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"#SBATCH --signal=B:USR1@120\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
		"--bind-to none \\\n", "./hpctrain train -config c.toml -checkpoint-dir checkpoints -resume auto &\n",
		`if [ "$rc" -eq 85 ]; then`, `scontrol requeue "${SLURM_JOB_ID}"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	for _, absent := range []string{"--partition", "--account", "--gpus-per-node", "--oversubscribe", "module load"} {
		if strings.Contains(out, absent) {
			t.Errorf("script has %q though the spec does not ask for it", absent)
		}
	}
	// The job's own sbatch options: #SBATCH lines in order after the
	// script's, before the first command (sbatch reads no further).
	s.Sbatch = []string{"--qos=high", "--exclusive"}
	buf.Reset()
	if err := Render(&buf, s); err != nil {
		t.Fatal(err)
	}
	out = buf.String()
	q, x, first := strings.Index(out, "#SBATCH --qos=high\n"), strings.Index(out, "#SBATCH --exclusive\n"), strings.Index(out, "\nset -")
	if q < strings.Index(out, "#SBATCH --open-mode") || x < q || first < x {
		t.Errorf("sbatch options not as #SBATCH lines in order before the first command:\n%s", out)
	}
	s.Sbatch = nil
	s.Requeue = false
	buf.Reset()
	if err := Render(&buf, s); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Contains(out, "scontrol requeue") || !strings.Contains(out, "--no-requeue") {
		t.Errorf("requeue = false still requeues:\n%s", out)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path.toml": "plain/path.toml",
		"":                "''",
		"a b":             "'a b'",
		"it's":            `'it'\''s'`,
		"$(rm -rf /)":     "'$(rm -rf /)'",
		"^openib":         "'^openib'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
