package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSpec(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadJobSpecDefaults(t *testing.T) {
	s, err := LoadJobSpec(writeSpec(t, `config = "c.toml"`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Requeue || s.SignalGrace != 120 || s.Binary != "./hpctrain" || s.Nodes != 1 || s.CPUsPerTask != 1 {
		t.Fatalf("defaults not applied: %+v", s)
	}
	s, err = LoadJobSpec(writeSpec(t, "config = \"c.toml\"\nrequeue = false\n"))
	if err != nil || s.Requeue {
		t.Fatalf("requeue = false not honoured: %+v, %v", s, err)
	}
}

func TestLoadJobSpecErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"config = \"c\"\nnodes = \n", "line 2"},
		{"config = \"c\"\nnode = 2\ncpus = 1\n", "unknown key(s) cpus, node"},
		{"config = \"c\"\nnodes = 0\n", "nodes: 0 out of range [1, 100000]"},
		{"config = \"c\"\ntasks_per_node = -1\n", "tasks_per_node: -1 out of range"},
		{"config = \"c\"\ngpus_per_node = 100\n", "gpus_per_node: 100 out of range [0, 64]"},
		{"config = \"c\"\nsignal_grace = 70000\n", "signal_grace"},
		// SLURM would send the warning signal at the job's start.
		{"config = \"c\"\ntime = \"00:02:00\"\n", `signal_grace: 120 s is more than half the time limit 00:02:00 (120 s)`},
		{"config = \"c\"\ntime = \"3\"\nsignal_grace = 100\n", `signal_grace: 100 s is more than half the time limit 3 (180 s)`},
		{"config = \"c\"\ntime = \"1:60:00\"\n", `time: "1:60:00"`},
		{"config = \"c\"\nname = \"a b\"\n", `name: "a b"`},
		{"config = \"c\"\noutput = \"x\\ny\"\n", "output"},
		{"config = \"c\"\nextra_args = [\"a\\nb\"]\n", "extra_args"},
		{"", "config: must not be empty"},
		// mpirun would take the last -np (one rank in an allocation of
		// many) or binding without a word.
		{"config = \"c\"\nmpirun = [\"-np\", \"1\"]\n", `mpirun: "-np" is the script's own`},
		{"config = \"c\"\nmpirun = [\"-x\", \"A\", \"--bind-to\", \"core\"]\n", `mpirun: "--bind-to" is the script's own`},
		{"config = \"c\"\nmpirun = [\"-map-by=node\"]\n", `mpirun: "-map-by=node" is the script's own`},
		{"config = \"c\"\nmpirun = [\"--hostfile\", \"h\"]\n", `mpirun: "--hostfile" is the script's own`},
		{"config = \"c\"\nnodes = \"2\"\n", "nodes"},
		// Further sbatch options: long form only, none that the script
		// writes from a key (abbreviated too, as sbatch takes them) or
		// that would undo its requeue.
		{"config = \"c\"\nsbatch = [\"--time=10\"]\n", `sbatch: "--time=10": the script writes --time from the job's time: set time instead`},
		{"config = \"c\"\nsbatch = [\"--ntasks-per=4\"]\n", `the script writes --ntasks-per-node from the job's tasks_per_node`},
		{"config = \"c\"\nsbatch = [\"--n=4\"]\n", `--n begins --no-requeue, --nodes, --ntasks, --ntasks-per-node`},
		{"config = \"c\"\nsbatch = [\"--gres=gpu:a100:2\"]\n", `set gpus_per_node instead`},
		{"config = \"c\"\nsbatch = [\"--array=0-9\"]\n", `--array is refused`},
		{"config = \"c\"\nsbatch = [\"--open-mode=truncate\"]\n", `--open-mode is refused`},
		{"config = \"c\"\nsbatch = [\"-q high\"]\n", `"-q high": want one long option`},
		{"config = \"c\"\nsbatch = [\"--comment=a b\"]\n", `"--comment=a b": want one long option`},
		{"config = \"c\"\nsbatch = [\"--qos=x\\n#SBATCH --time=1\"]\n", `want one long option`},
		{"config = \"c\"\nsbatch = \"--qos=high\"\n", "sbatch"},
		// Several faults: every one named, on one line.
		{"config = \"c\"\nnodes = -1\ntasks_per_node = 0\ntime = \"x\"\n",
			`nodes: -1 out of range [1, 100000]; tasks_per_node: 0 out of range [1, 4096]; time: "x"`},
	} {
		_, err := LoadJobSpec(writeSpec(t, c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line containing %q", c.text, err, c.want)
		}
	}
	if _, err := LoadJobSpec(filepath.Join(t.TempDir(), "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestTimeSeconds(t *testing.T) {
	for in, want := range map[string]int{"30": 1800, "30:15": 1815, "02:00:00": 7200, "1-12": 129600, "2-0:30": 174600, "1-0:0:5": 86405} {
		if got, err := timeSeconds(in); err != nil || got != want {
			t.Errorf("timeSeconds(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestValidateTimeUnlimited: SLURM's spellings of no limit are refused for
// what they are, not as a malformed time.
func TestValidateTimeUnlimited(t *testing.T) {
	for _, in := range []string{"UNLIMITED", "infinite", "-1", "0", "0:00:00"} {
		err := ValidateTime(in)
		if err == nil || !strings.Contains(err.Error(), "no time limit") && !strings.Contains(err.Error(), "zero time limit, which sbatch takes for no limit") {
			t.Errorf("ValidateTime(%q) = %v, want it to say there would be no time limit", in, err)
		}
	}
}

func TestValidateTime(t *testing.T) {
	for _, ok := range []string{"30", "90", "30:00", "02:00:00", "100:00:00", "1-12:00:00", "2-0", "1-23:59", "0-0:1"} {
		if err := ValidateTime(ok); err != nil {
			t.Errorf("ValidateTime(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "0", "00:00:00", "1:60", "1:00:60", "1-24:00:00", "a", "1:2:3:4", "-1", "1-", "UNLIMITED", " 30", "1.5"} {
		if err := ValidateTime(bad); err == nil {
			t.Errorf("ValidateTime(%q): want error", bad)
		}
	}
}

// TestSbatchOptionsAccepted: the options users add to a job (QoS,
// constraints, memory, mail, dependencies) pass, including abbreviations
// and names that only begin like the script's own.
func TestSbatchOptionsAccepted(t *testing.T) {
	for _, o := range []string{"--qos=high", "--exclusive", "--mem=0", "--constraint=[ib&skylake]|epyc*2",
		"--mail-type=END,FAIL", "--mail-user=first.last@example.org", "--dependency=afterok:123", "--time-min=30",
		"--gres=nvme:1", "--nodelist=node[01-04]", "--ntasks-per-core=1", "--gpu-bind=closest", "--reservation=maint_2"} {
		if err := checkSbatchOption(o); err != nil {
			t.Errorf("checkSbatchOption(%q): %v", o, err)
		}
	}
}
