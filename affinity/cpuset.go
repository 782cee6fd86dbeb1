package affinity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers a CPUSet holds: [0, MaxCPU). It is Linux's
// largest NR_CPUS (CONFIG_NR_CPUS_RANGE_END), and it keeps Parse from
// allocating without limit on input such as "0-999999999".
const MaxCPU = 8192

// CPUSet is a set of logical CPU numbers, kept sorted and without
// duplicates. The zero value is the empty set. A CPUSet is a value: methods
// never modify their receiver or arguments, and sets share no memory that
// either side may change.
//
// Its text form is the Linux cpulist syntax ("0-3,8,10-11"), the form of
// /sys/devices/system/cpu/online, taskset -c and Cpus_allowed_list; JSON
// encodes it as that string.
type CPUSet struct {
	cpus []int // ascending, unique, each in [0, MaxCPU)
}

// NewCPUSet returns the set of the given CPUs in any order, duplicates
// allowed. A CPU outside [0, MaxCPU) is misuse and panics.
func NewCPUSet(cpus ...int) CPUSet {
	s := slices.Clone(cpus)
	for _, c := range s {
		if c < 0 || c >= MaxCPU {
			panic("affinity: cpu number out of range")
		}
	}
	slices.Sort(s)
	return CPUSet{slices.Compact(s)}
}

// Parse reads a cpulist such as "0-3,8,10-11". Surrounding white space
// (sysfs files end in a newline) is ignored and the empty string is the
// empty set. Ranges may overlap or come in any order. Stride forms
// ("0-15:2") are not accepted.
func Parse(s string) (CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return CPUSet{}, nil
	}
	var cpus []int
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
		a, err := parseCPU(lo)
		if err != nil {
			return CPUSet{}, fmt.Errorf("parse cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return CPUSet{}, fmt.Errorf("parse cpu list %q: %w", s, err)
			}
			if b < a {
				return CPUSet{}, fmt.Errorf("parse cpu list %q: range %d-%d runs backwards", s, a, b)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return CPUSet{slices.Compact(cpus)}, nil
}

func parseCPU(s string) (int, error) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("bad cpu number %q", s)
	}
	c, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad cpu number %q", s)
	}
	if c >= MaxCPU {
		return 0, fmt.Errorf("cpu %d is not below the limit %d", c, MaxCPU)
	}
	return c, nil
}

// String returns the set in cpulist syntax, runs of two or more
// consecutive CPUs written as ranges: "0-3,8,10-11". The empty set is "".
func (s CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s.cpus); {
		j := i
		for j+1 < len(s.cpus) && s.cpus[j+1] == s.cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s.cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s.cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// MarshalText implements encoding.TextMarshaler with the cpulist syntax.
func (s CPUSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (s *CPUSet) UnmarshalText(b []byte) error {
	t, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = t
	return nil
}

// CPUs returns the CPUs in ascending order, in a new slice.
func (s CPUSet) CPUs() []int { return slices.Clone(s.cpus) }

// Len returns the number of CPUs in s.
func (s CPUSet) Len() int { return len(s.cpus) }

// IsEmpty reports whether s holds no CPU.
func (s CPUSet) IsEmpty() bool { return len(s.cpus) == 0 }

// Contains reports whether cpu is in s.
func (s CPUSet) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(s.cpus, cpu)
	return ok
}

// Equal reports whether s and t hold the same CPUs.
func (s CPUSet) Equal(t CPUSet) bool { return slices.Equal(s.cpus, t.cpus) }

// Intersect returns the CPUs in both s and t.
func (s CPUSet) Intersect(t CPUSet) CPUSet {
	var out []int
	for _, c := range s.cpus {
		if t.Contains(c) {
			out = append(out, c)
		}
	}
	return CPUSet{out}
}

// Minus returns the CPUs in s that are not in t.
func (s CPUSet) Minus(t CPUSet) CPUSet {
	var out []int
	for _, c := range s.cpus {
		if !t.Contains(c) {
			out = append(out, c)
		}
	}
	return CPUSet{out}
}

// Union returns the CPUs in s or t.
func (s CPUSet) Union(t CPUSet) CPUSet {
	out := append(slices.Clone(s.cpus), t.cpus...)
	slices.Sort(out)
	return CPUSet{slices.Compact(out)}
}

// IsSubset reports whether every CPU of s is in t.
func (s CPUSet) IsSubset(t CPUSet) bool {
	for _, c := range s.cpus {
		if !t.Contains(c) {
			return false
		}
	}
	return true
}

// Max returns the largest CPU in s, or -1 for the empty set.
func (s CPUSet) Max() int {
	if len(s.cpus) == 0 {
		return -1
	}
	return s.cpus[len(s.cpus)-1]
}

// appendMask appends s as a little-endian bit mask of nbytes bytes (bit c%8
// of byte c/8 is CPU c), the layout of the kernel's cpu_set_t.
func (s CPUSet) appendMask(dst []byte, nbytes int) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, nbytes)...)
	for _, c := range s.cpus {
		if c/8 >= nbytes {
			panic("affinity: cpu mask buffer too short")
		}
		dst[start+c/8] |= 1 << (c % 8)
	}
	return dst
}

// fromMask is the inverse of appendMask.
func fromMask(mask []byte) CPUSet {
	var out []int
	for i, b := range mask {
		for bit := 0; bit < 8; bit++ {
			if b&(1<<bit) != 0 && i*8+bit < MaxCPU {
				out = append(out, i*8+bit)
			}
		}
	}
	return CPUSet{out}
}
