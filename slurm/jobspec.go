package slurm

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"hpctrain/internal/cli"
	"hpctrain/internal/tomlfile"
)

// JobSpec describes one sbatch job running hpctrain. The toml tags are the
// keys of a job file read by [LoadJobSpec]; start from [DefaultJobSpec] when
// building one in Go, because some defaults (Requeue) are not zero values.
type JobSpec struct {
	Name         string `toml:"name"`           // --job-name; default "hpctrain"
	Partition    string `toml:"partition"`      // --partition; omitted when empty
	Account      string `toml:"account"`        // --account; omitted when empty
	Nodes        int    `toml:"nodes"`          // --nodes, >= 1
	TasksPerNode int    `toml:"tasks_per_node"` // --ntasks-per-node (MPI ranks per node), >= 1
	CPUsPerTask  int    `toml:"cpus_per_task"`  // --cpus-per-task: CPUs reserved per rank (its threads: hpctrain plans them), >= 1
	GPUsPerNode  int    `toml:"gpus_per_node"`  // --gpus-per-node; 0 = CPU job, line omitted
	// Time is the wall-clock limit in a SLURM form: "M", "M:S", "H:M:S",
	// "D-H", "D-H:M" or "D-H:M:S", e.g. "30", "02:00:00", "1-12:00:00".
	Time string `toml:"time"`
	// Output and Error are sbatch --output/--error paths, relative to the
	// submit directory; SLURM does not create their directory, so it must exist.
	Output string `toml:"output"` // default "%x-%j.out" (%x job name, %j job id)
	Error  string `toml:"error"`  // --error path; default "%x-%j.err"
	// SignalGrace is how many seconds before the time limit SLURM sends
	// SIGUSR1 to the batch shell (--signal=B:USR1@SignalGrace); it must
	// cover finishing a step and writing a checkpoint. Default 120.
	SignalGrace int  `toml:"signal_grace"`
	Requeue     bool `toml:"requeue"` // --requeue and requeue on ExitRequeue; default true
	// Binary is the hpctrain executable as the batch shell sees it.
	Binary        string   `toml:"binary"`         // default "./hpctrain"
	Config        string   `toml:"config"`         // training TOML, passed as -config; required
	CheckpointDir string   `toml:"checkpoint_dir"` // -checkpoint-dir; default "checkpoints"
	ExtraArgs     []string `toml:"extra_args"`     // appended to `hpctrain train ...`
	Mpirun        []string `toml:"mpirun"`         // extra mpirun options, before the binary; not the script's own (-np, --map-by, --bind-to, hosts)
	// Oversubscribe adds --oversubscribe to mpirun: needed when ranks x
	// threads exceed the cores SLURM gives (small test machines).
	Oversubscribe bool     `toml:"oversubscribe"`
	Modules       []string `toml:"modules"` // each becomes `module load <m>`
	// Sbatch holds further sbatch options in their long form, each written
	// as its own "#SBATCH OPT" line after the script's: "--qos=high",
	// "--constraint=ib", "--exclusive", "--mem=0", "--mail-type=END,FAIL".
	// Options the script sets from other keys are refused, naming the key
	// (see [sbatchOwn]); sbatch takes the last of an option given twice.
	Sbatch []string `toml:"sbatch"`
}

// DefaultJobSpec returns the defaults that [LoadJobSpec] starts from: one
// node, one task, one CPU, one hour, requeue on, 120 s grace.
func DefaultJobSpec() JobSpec {
	return JobSpec{
		Name:          "hpctrain",
		Nodes:         1,
		TasksPerNode:  1,
		CPUsPerTask:   1,
		Time:          "01:00:00",
		Output:        "%x-%j.out",
		Error:         "%x-%j.err",
		SignalGrace:   120,
		Requeue:       true,
		Binary:        "./hpctrain",
		CheckpointDir: "checkpoints",
	}
}

// LoadJobSpec reads a job TOML file on top of [DefaultJobSpec] (see
// [ReadJobSpec]) and validates it.
func LoadJobSpec(path string) (JobSpec, error) {
	s, _, err := ReadJobSpec(path)
	if err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("load job spec %s: %w", path, err)
	}
	return s, nil
}

// ReadJobSpec reads a job TOML file on top of [DefaultJobSpec] without
// validating its values, for a caller that applies its own settings (the
// command line's) over the file's before validating, and returns the keys
// the file sets. A syntax error names the line; a key JobSpec does not
// have is an error naming it (a typo must not silently fall back to a
// default).
func ReadJobSpec(path string) (JobSpec, []string, error) {
	s := DefaultJobSpec()
	b, err := tomlfile.Read(path)
	if err != nil {
		return s, nil, fmt.Errorf("load job spec %s: %w", path, err)
	}
	md, err := toml.Decode(string(b), &s)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return s, nil, fmt.Errorf("load job spec %s: line %d: %s", path, perr.Position.Line, perr.Message)
		}
		return s, nil, fmt.Errorf("load job spec %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return s, nil, fmt.Errorf("load job spec %s: unknown key(s) %s", path, strings.Join(keys, ", "))
	}
	var keys []string
	for _, k := range md.Keys() {
		keys = append(keys, k.String())
	}
	return s, keys, nil
}

// Validate checks every field, filling nothing in. Errors name the TOML key
// and the accepted values.
func (s JobSpec) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	rangeCheck := func(key string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(key, "%d out of range [%d, %d]", v, lo, hi)
		}
	}
	rangeCheck("nodes", s.Nodes, 1, 100000)
	rangeCheck("tasks_per_node", s.TasksPerNode, 1, 4096)
	rangeCheck("cpus_per_task", s.CPUsPerTask, 1, 4096)
	rangeCheck("gpus_per_node", s.GPUsPerNode, 0, 64)
	rangeCheck("signal_grace", s.SignalGrace, 1, 65535) // SLURM's limit for --signal's @time
	if secs, err := timeSeconds(s.Time); err != nil {
		bad("time", "%v", err)
	} else if 2*s.SignalGrace > secs {
		// A policy: with a grace of the whole limit or more SLURM signals
		// as soon as the job starts, and with more than half of it every
		// run spends less time training than the warning allows for; each
		// would checkpoint and requeue having done little.
		bad("signal_grace", "%d s is more than half the time limit %s (%d s): each run would be told to stop soon after it starts; raise time or lower signal_grace", s.SignalGrace, s.Time, secs)
	}
	// #SBATCH values: sbatch splits them on white space and does its own
	// quoting, so refuse anything a shell or sbatch would read differently.
	for _, f := range []struct {
		key, val string
		must     bool
	}{
		{"name", s.Name, true}, {"partition", s.Partition, false}, {"account", s.Account, false},
		{"output", s.Output, true}, {"error", s.Error, true},
	} {
		switch {
		case f.val == "" && f.must:
			bad(f.key, "must not be empty")
		case !sbatchValue.MatchString(f.val) && f.val != "":
			bad(f.key, "%q: only letters, digits and %s allowed", f.val, sbatchPunct)
		}
	}
	// Command-line values are single-quoted in the script; only a newline
	// or NUL could still break it.
	line := map[string][]string{
		"binary": {s.Binary}, "config": {s.Config}, "checkpoint_dir": {s.CheckpointDir},
		"extra_args": s.ExtraArgs, "mpirun": s.Mpirun, "modules": s.Modules,
	}
	for _, key := range []string{"binary", "config", "checkpoint_dir", "extra_args", "mpirun", "modules"} {
		for _, v := range line[key] {
			if strings.ContainsAny(v, "\n\r\x00") {
				bad(key, "%q contains a newline or NUL", v)
			}
		}
	}
	hint := map[string]string{"config": ` (the training TOML: config = "train.toml" in the job file, or -config train.toml)`}
	for _, key := range []string{"binary", "config", "checkpoint_dir"} {
		if line[key][0] == "" {
			bad(key, "must not be empty%s", hint[key])
		}
	}
	if a, _ := cli.OwnFlag(s.Mpirun, mpirunOwn...); a != "" {
		bad("mpirun", "%q is the script's own: it runs mpirun -np $SLURM_NTASKS --map-by ppr:$SLURM_NTASKS_PER_NODE:node:PE=$SLURM_CPUS_PER_TASK --bind-to none on the allocation, and hpctrain pins its own threads; set nodes, tasks_per_node or cpus_per_task instead", a)
	}
	for _, m := range s.Modules {
		if !sbatchValue.MatchString(m) {
			bad("modules", "%q: only letters, digits and %s allowed", m, sbatchPunct)
		}
	}
	for _, o := range s.Sbatch {
		if err := checkSbatchOption(o); err != nil {
			bad("sbatch", "%v", err)
		}
	}
	if len(errs) > 0 {
		// One line, every fault named: "nodes: ...; time: ...".
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("invalid job spec: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// mpirunOwn are the mpirun options the script sets from the allocation.
// Open MPI takes the last of a repeated option without a word, so
// mpirun = ["-np", "1"] would run one rank in an allocation of many (a world
// size the checkpoints then hold), and --bind-to core would bind the ranks
// that hpctrain pins itself; the host options would leave the allocation.
var mpirunOwn = []string{"np", "n", "c", "N", "npernode", "pernode", "npersocket", "map-by", "bind-to",
	"cpus-per-proc", "cpus-per-rank", "host", "H", "hostfile", "machinefile", "default-hostfile"}

// sbatchOwn are the sbatch options the script writes, each with the job
// keys it writes it from, and sbatchRefused those that would undo how the
// script works, each with why. sbatch reads option names as getopt_long
// does, taking an unambiguous abbreviation, so a name that begins one of
// these is refused too.
var (
	sbatchOwn = map[string]string{
		"job-name": "name", "partition": "partition", "account": "account",
		"nodes": "nodes", "ntasks": "nodes and tasks_per_node", "ntasks-per-node": "tasks_per_node",
		"cpus-per-task": "cpus_per_task",
		"gpus":          "gpus_per_node", "gpus-per-node": "gpus_per_node",
		"time": "time", "output": "output", "error": "error", "signal": "signal_grace",
		"requeue": "requeue", "no-requeue": "requeue",
	}
	sbatchRefused = map[string]string{
		"open-mode":    "the script appends to its logs, so that a requeued run keeps the log of the runs before it",
		"array":        "every task of an array would train the same configuration into the same checkpoint_dir; render a script per experiment",
		"wrap":         "the rendered script is the job",
		"cpus-per-gpu": "sbatch refuses it beside --cpus-per-task, which the script writes from the job's cpus_per_task",
	}
)

// sbatchOption is the form an sbatch key's entry must have: a long option,
// with its value after '=', in characters that need no quoting in an
// #SBATCH line (constraints use & | [ ] * and !).
var sbatchOption = regexp.MustCompile(`^--[a-z][a-z0-9-]*(=[A-Za-z0-9._\-/%+:@=,&|\[\]*!()]+)?$`)

// checkSbatchOption checks one entry of the sbatch key.
func checkSbatchOption(o string) error {
	if !sbatchOption.MatchString(o) {
		return fmt.Errorf("%q: want one long option, --name or --name=value (e.g. --qos=high), without spaces or quotes", o)
	}
	name, val, _ := strings.Cut(o[2:], "=")
	var match []string
	for _, m := range []map[string]string{sbatchOwn, sbatchRefused} {
		for full := range m {
			if strings.HasPrefix(full, name) {
				match = append(match, full)
			}
		}
	}
	sort.Strings(match)
	full := name
	switch {
	case slices.Contains(match, name):
	case len(match) == 1:
		full = match[0]
	case len(match) > 1:
		return fmt.Errorf("%q: --%s begins --%s, options the script writes or refuses; give an option's whole name", o, name, strings.Join(match, ", --"))
	}
	if key, ok := sbatchOwn[full]; ok {
		return fmt.Errorf("%q: the script writes --%s from the job's %s: set %s instead", o, full, key, key)
	}
	if why, ok := sbatchRefused[full]; ok {
		return fmt.Errorf("%q: --%s is refused: %s", o, full, why)
	}
	if name == "gres" && strings.Contains(val, "gpu") {
		return fmt.Errorf("%q: the script writes GPUs as --gpus-per-node from the job's gpus_per_node: set gpus_per_node instead", o)
	}
	return nil
}

var sbatchValue = regexp.MustCompile(`^[A-Za-z0-9._\-/%+:@=,]+$`)

const sbatchPunct = ". _ - / % + : @ = ,"

// ValidateTime checks a SLURM time limit: "M", "M:S", "H:M:S", "D-H",
// "D-H:M" or "D-H:M:S" with minutes and seconds below 60 and hours below 24
// when a day count is given. "UNLIMITED" and "INFINITE" are refused: a
// job that can be pre-empted needs a limit to get its warning signal.
func ValidateTime(t string) error {
	_, err := timeSeconds(t)
	return err
}

// timeSeconds is the time limit t in seconds, checked as ValidateTime
// says.
func timeSeconds(t string) (int, error) {
	if t == "" {
		return 0, fmt.Errorf("empty; want M, H:M:S or D-H:M:S")
	}
	want := fmt.Errorf("%q: want M, M:S, H:M:S, D-H, D-H:M or D-H:M:S", t)
	switch strings.ToUpper(t) {
	case "UNLIMITED", "INFINITE", "-1":
		return 0, fmt.Errorf("%q: no time limit, so SLURM has no time before which to send the warning signal (--signal=B:USR1@signal_grace); give a limit, e.g. 1-00:00:00", t)
	}
	num := func(s string, max int) (int, bool) {
		if s == "" || len(s) > 9 {
			return 0, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
		}
		n, _ := strconv.Atoi(s)
		return n, max < 0 || n <= max
	}
	days, rest, hasDays := strings.Cut(t, "-")
	if !hasDays {
		rest = t
	}
	parts := strings.Split(rest, ":")
	var limits []int // maxima of each part, -1 = unbounded
	if hasDays {
		if _, ok := num(days, -1); !ok {
			return 0, want
		}
		limits = [][]int{nil, {23}, {23, 59}, {23, 59, 59}}[min(len(parts), 3)]
	} else {
		limits = [][]int{nil, {-1}, {-1, 59}, {-1, 59, 59}}[min(len(parts), 3)]
	}
	if len(parts) > 3 {
		return 0, want
	}
	// What each part counts, as sbatch reads them: M, M:S, H:M:S without
	// days; D-H, D-H:M, D-H:M:S with.
	units := [][]int{nil, {60}, {60, 1}, {3600, 60, 1}}[len(parts)]
	if hasDays {
		units = [][]int{nil, {3600}, {3600, 60}, {3600, 60, 1}}[len(parts)]
	}
	total := 0
	for i, p := range parts {
		n, ok := num(p, limits[i])
		if !ok {
			return 0, want
		}
		total += n * units[i]
	}
	if hasDays {
		d, _ := num(days, -1)
		total += 86400 * d
	}
	if total == 0 {
		return 0, fmt.Errorf("%q: a zero time limit, which sbatch takes for no limit, so SLURM has no time before which to send the warning signal; give a limit, e.g. 1-00:00:00", t)
	}
	return total, nil
}
