package affinity

import (
	"testing"
)

func TestParseString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"\n", ""},
		{"0", "0"},
		{"0-3,8,10-11\n", "0-3,8,10-11"},
		{"3,2,1,0", "0-3"},
		{"0-2,1-4, 7", "0-4,7"},
		{"5-5", "5"},
		{"0,2,4", "0,2,4"},
		{"8191", "8191"},
	} {
		s, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if s.String() != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, s, tc.want)
		}
		back, err := Parse(s.String())
		if err != nil || !back.Equal(s) {
			t.Errorf("round trip of %q: %v %v", s, back, err)
		}
	}
	for _, bad := range []string{"a", "1-", "-1", "3-1", "1,,2", "0-8192", "1:2", "+1", "1-2-3"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) gave no error", bad)
		}
	}
}

func TestCPUSetOps(t *testing.T) {
	a, b := NewCPUSet(3, 1, 2, 2), NewCPUSet(2, 3, 4)
	if a.String() != "1-3" || a.Len() != 3 || !a.Contains(2) || a.Contains(4) || a.Max() != 3 {
		t.Errorf("NewCPUSet: %s", a)
	}
	if s := a.Intersect(b).String(); s != "2-3" {
		t.Errorf("Intersect %s", s)
	}
	if s := a.Minus(b).String(); s != "1" {
		t.Errorf("Minus %s", s)
	}
	if s := a.Union(b).String(); s != "1-4" {
		t.Errorf("Union %s", s)
	}
	if a.IsSubset(b) || !NewCPUSet(2).IsSubset(a) || !(CPUSet{}).IsSubset(a) {
		t.Error("IsSubset")
	}
	mask := NewCPUSet(0, 7, 8, 63).appendMask(nil, 8)
	if got := fromMask(mask); got.String() != "0,7-8,63" {
		t.Errorf("mask round trip %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewCPUSet(-1) did not panic")
		}
	}()
	NewCPUSet(-1)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,8,10-11", "", "1-", "0-8191", "3-1,5", " 1 , 2 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(c.String())
		if err != nil || !back.Equal(c) {
			t.Fatalf("%q parsed to %s, which reparses to %s, %v", s, c, back, err)
		}
		cpus := c.CPUs()
		for i := 1; i < len(cpus); i++ {
			if cpus[i] <= cpus[i-1] {
				t.Fatalf("%q: not sorted and unique: %v", s, cpus)
			}
		}
	})
}
