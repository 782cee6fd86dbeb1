package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds the length of an expanded host list, so that a typo such
// as "n[0-999999999]" is an error rather than an out-of-memory crash.
const MaxHosts = 1 << 20

// ExpandHostlist expands a SLURM host list such as "node[01-04,07],gpu-a[1-2]"
// into host names, in order, duplicates kept:
//
//   - Comma-separated terms; commas inside brackets separate ranges.
//   - A bracket holds comma-separated numbers and lo-hi ranges; a number is
//     padded with zeros to the width of lo as written ("[08-10]" gives 08 09
//     10, "[8-10]" gives 8 9 10), as SLURM does.
//   - A term may hold several bracket groups; they expand like an odometer,
//     the last fastest: "rack[1-2]-n[1-2]" gives rack1-n1 rack1-n2 rack2-n1
//     rack2-n2.
//   - Blank terms ("a,,b") and spaces around terms are ignored; "" gives nil.
//
// It is stricter than scontrol: an unbalanced or nested bracket, an empty
// bracket or range, a reversed range ("[5-3]"), a non-numeric range and a
// list longer than [MaxHosts] are errors quoting the offending text.
func ExpandHostlist(s string) ([]string, error) {
	var hosts []string
	for _, term := range splitTop(s) {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		var err error
		hosts, err = expandTerm(hosts, term)
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
	}
	return hosts, nil
}

// splitTop splits s at commas outside brackets. Bracket errors are left to
// expandTerm, which sees the term.
func splitTop(s string) []string {
	var terms []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				terms = append(terms, s[start:i])
				start = i + 1
			}
		}
	}
	return append(terms, s[start:])
}

// expandTerm appends the expansion of one term (no top-level commas) to dst.
func expandTerm(dst []string, term string) ([]string, error) {
	// Split into literal parts and bracket groups: lits[0] g[0] lits[1] g[1] ... lits[n].
	var lits []string
	var groups [][]string
	rest := term
	for {
		open := strings.IndexAny(rest, "[]")
		if open < 0 {
			lits = append(lits, rest)
			break
		}
		if rest[open] == ']' {
			return dst, fmt.Errorf("unbalanced ']' in %q", term)
		}
		closing := strings.IndexAny(rest[open+1:], "[]")
		if closing < 0 {
			return dst, fmt.Errorf("unbalanced '[' in %q", term)
		}
		closing += open + 1
		if rest[closing] == '[' {
			return dst, fmt.Errorf("nested '[' in %q", term)
		}
		g, err := expandRanges(rest[open+1 : closing])
		if err != nil {
			return dst, fmt.Errorf("%w in %q", err, term)
		}
		lits = append(lits, rest[:open])
		groups = append(groups, g)
		rest = rest[closing+1:]
	}
	total := 1
	for _, g := range groups {
		total *= len(g)
		if total+len(dst) > MaxHosts {
			return dst, fmt.Errorf("%q expands to more than %d hosts", term, MaxHosts)
		}
	}
	if total+len(dst) > MaxHosts {
		return dst, fmt.Errorf("%q expands to more than %d hosts", term, MaxHosts)
	}
	idx := make([]int, len(groups)) // odometer, last digit fastest
	var b strings.Builder
	for n := 0; n < total; n++ {
		b.Reset()
		for i, g := range groups {
			b.WriteString(lits[i])
			b.WriteString(g[idx[i]])
		}
		b.WriteString(lits[len(groups)])
		dst = append(dst, b.String())
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(groups[i]) {
				break
			}
			idx[i] = 0
		}
	}
	return dst, nil
}

// expandRanges expands the inside of a bracket: "01-04,07".
func expandRanges(body string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(body, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			return nil, fmt.Errorf("empty range in [%s]", body)
		}
		loS, hiS, isRange := strings.Cut(r, "-")
		if !isRange {
			hiS = loS
		}
		lo, err := parseIndex(loS)
		if err != nil {
			return nil, fmt.Errorf("bad range %q", r)
		}
		hi, err := parseIndex(hiS)
		if err != nil {
			return nil, fmt.Errorf("bad range %q", r)
		}
		if hi < lo {
			return nil, fmt.Errorf("reversed range %q", r)
		}
		if hi-lo >= MaxHosts || len(out)+int(hi-lo) >= MaxHosts {
			return nil, fmt.Errorf("range %q has more than %d hosts", r, MaxHosts)
		}
		width := len(loS)
		for i := lo; i <= hi; i++ {
			s := strconv.FormatUint(i, 10)
			if pad := width - len(s); pad > 0 {
				s = strings.Repeat("0", pad) + s
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// parseIndex parses the digits of one end of a range.
func parseIndex(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a number")
		}
	}
	return strconv.ParseUint(s, 10, 32)
}
