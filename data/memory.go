package data

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Memory is the memory this process may use, in bytes, and where the
// figure comes from: the smaller of the machine's RAM (MemTotal in
// /proc/meminfo) and the memory limit of its control group and every
// ancestor (cgroup v2 memory.max or v1 memory.limit_in_bytes: SLURM's
// --mem, a container's limit). It is read once; 0 means unknown (no
// /proc), and the checks that use it then pass.
func Memory() (bytes int64, source string) {
	memOnce.Do(func() { memBytes, memSource = readMemory("/") })
	return memBytes, memSource
}

var (
	memOnce   sync.Once
	memBytes  int64
	memSource string
)

// readMemory is Memory for the file system rooted at root (tests).
func readMemory(root string) (int64, string) {
	var bytes int64
	source := ""
	if f, err := os.Open(filepath.Join(root, "proc/meminfo")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 2 && fs[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(fs[1], 10, 64); err == nil && kb > 0 && kb < math.MaxInt64/1024 {
					bytes, source = kb*1024, "MemTotal"
				}
			}
		}
		f.Close()
	}
	if lim, where := cgroupLimit(root); lim > 0 && (bytes == 0 || lim < bytes) {
		bytes, source = lim, "cgroup limit "+where
	}
	return bytes, source
}

// cgroupLimit is the smallest memory limit of this process's control
// group and its ancestors, 0 if none is set or readable.
func cgroupLimit(root string) (int64, string) {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, ""
	}
	var best int64
	where := ""
	consider := func(path string) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(raw))
		v, err := strconv.ParseInt(s, 10, 64)
		// v1 writes "no limit" as a huge page-rounded number.
		if err != nil || v <= 0 || v >= 1<<62 {
			return
		}
		if best == 0 || v < best {
			best, where = v, strings.TrimPrefix(path, filepath.Clean(root))
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var base, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			base, file = filepath.Join(root, "sys/fs/cgroup"), "memory.max"
		case hasController(parts[1], "memory"):
			base, file = filepath.Join(root, "sys/fs/cgroup/memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for dir := filepath.Join(base, parts[2]); strings.HasPrefix(dir, base); dir = filepath.Dir(dir) {
			consider(filepath.Join(dir, file))
			if dir == base {
				break
			}
		}
	}
	return best, where
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// Budget is the memory a rank may give its data: Memory shared by the
// ranks of a node, each of which holds its own copy of the data set and
// its own loaders. Take checks an allocation against it before it is
// made, so that a size that cannot fit is one line naming it, not a Go
// out-of-memory crash. The estimate is a floor: the model, the optimizer
// and the runtime come on top.
type Budget struct {
	limit  int64 // this rank's share; 0: unknown, every Take passes
	ranks  int
	source string
	used   int64
}

// NewBudget returns the budget of one of ranks processes that share this
// machine's memory.
func NewBudget(ranks int) *Budget {
	m, src := Memory()
	return newBudget(m, src, ranks)
}

func newBudget(memory int64, source string, ranks int) *Budget {
	ranks = max(ranks, 1)
	return &Budget{limit: memory / int64(ranks), ranks: ranks, source: source}
}

// Take reserves bytes for what. When the reservation does not fit in the
// rank's share it reserves nothing and returns an error of one line
// naming what, both sizes and hint (what to change).
func (b *Budget) Take(what string, bytes int64, hint string) error {
	if b == nil {
		return nil
	}
	if bytes < 0 {
		bytes = math.MaxInt64
	}
	if b.limit > 0 && (bytes > b.limit || b.used > b.limit-bytes) {
		share := fmt.Sprintf("this machine's %s (%s)", GiB(b.limit*int64(b.ranks)), b.source)
		if b.ranks > 1 {
			share = fmt.Sprintf("%s per rank, %d ranks sharing %s", GiB(b.limit), b.ranks, share)
		}
		held := ""
		if b.used > 0 {
			held = fmt.Sprintf(" on top of %s already taken", GiB(b.used))
		}
		return &MemoryError{fmt.Sprintf("%s needs %s%s: more than %s; %s", what, GiB(bytes), held, share, hint)}
	}
	b.used += bytes
	return nil
}

// MemoryError is an allocation a Budget refused: a configuration that
// asks for more memory than there is.
type MemoryError struct{ msg string }

func (e *MemoryError) Error() string { return e.msg }

// GiB formats a byte count for messages.
func GiB(bytes int64) string {
	switch {
	case bytes == math.MaxInt64:
		return "more than 8 EiB"
	case bytes >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(bytes)/(1<<40))
	case bytes >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(bytes)/(1<<30))
	case bytes >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", bytes)
}

// mulBytes is the product of its non-negative factors, or math.MaxInt64
// when it overflows (or a factor is negative): sizes computed from user
// input saturate instead of wrapping.
func mulBytes(fs ...int) int64 {
	p := int64(1)
	for _, f := range fs {
		if f < 0 {
			return math.MaxInt64
		}
		if f == 0 {
			return 0
		}
		if p > math.MaxInt64/int64(f) {
			return math.MaxInt64
		}
		p *= int64(f)
	}
	return p
}

// addBytes is a+b, saturating at math.MaxInt64.
func addBytes(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
