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

// TestRenderKeepaliveAsLauncher runs a rendered script and the launcher
// scripts/mpirun.sh, each with a fake mpirun that prints the OOB keepalive
// variables it was given, and checks that the script gives mpirun what the
// launcher does: the values are chosen there and copied here. Cases: nothing
// set by the user, one in the environment, one in ~/.openmpi/mca-params.conf
// (seen through the real ompi_info; skipped without one).
func TestRenderKeepaliveAsLauncher(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	s := DefaultJobSpec()
	s.Config = "c.toml"
	var buf bytes.Buffer
	if err := Render(&buf, s); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "train.sbatch")
	fakes := filepath.Join(dir, "bin")
	if err := os.WriteFile(script, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(fakes, 0o755)
	fake := "#!/bin/sh\nenv | grep '^OMPI_MCA_oob_tcp_keepalive_' | sort | sed 's/^/fake mpirun: /'\n"
	if err := os.WriteFile(filepath.Join(fakes, "mpirun"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	launcher, err := filepath.Abs(filepath.Join("..", "scripts", "mpirun.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// seen runs name under env and returns the fake mpirun's lines.
	seen := func(env []string, name string, args ...string) string {
		cmd := exec.Command(name, args...)
		for _, kv := range os.Environ() { // the caller's keepalive, if any, would be the user's
			if !strings.HasPrefix(kv, "OMPI_MCA_oob_tcp_keepalive_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "PATH="+fakes+":"+os.Getenv("PATH"), "SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=n1",
			"SLURM_NTASKS=2", "SLURM_NTASKS_PER_NODE=2", "SLURM_CPUS_PER_TASK=1")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "fake mpirun: ") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	for _, c := range []struct {
		name, env, conf string
	}{
		{"none", "", ""},
		{"env", "OMPI_MCA_oob_tcp_keepalive_time=60", ""},
		{"params file", "", "oob_tcp_keepalive_probes = 3\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath("ompi_info"); c.conf != "" && err != nil {
				t.Skip("no ompi_info on PATH")
			}
			home := t.TempDir()
			if c.conf != "" {
				os.Mkdir(filepath.Join(home, ".openmpi"), 0o755)
				if err := os.WriteFile(filepath.Join(home, ".openmpi", "mca-params.conf"), []byte(c.conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := []string{"HOME=" + home}
			if c.env != "" {
				env = append(env, c.env)
			}
			want := seen(env, launcher, "-np", "2", "true")
			got := seen(env, bash, script)
			if got != want || (c.name == "none" && strings.Count(want, "\n") != 2) {
				t.Errorf("the rendered script gives mpirun\n%s\nscripts/mpirun.sh gives it\n%s", got, want)
			}
		})
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
