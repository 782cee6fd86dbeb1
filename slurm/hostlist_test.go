package slurm

import (
	"reflect"
	"strings"
	"testing"
)

// hostlistCases are shared with the cluster test, which checks the valid
// ones against `scontrol show hostnames`.
var hostlistCases = []struct {
	in   string
	want []string
}{
	{"", nil},
	{"vm", []string{"vm"}},
	{"a,b", []string{"a", "b"}},
	{" a , b ", []string{"a", "b"}},
	{"a,,b", []string{"a", "b"}},
	{"a,a", []string{"a", "a"}},
	{"node[01-04,07],gpu-a[1-2]", []string{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"}},
	{"n[8-10]", []string{"n8", "n9", "n10"}},
	{"n[08-10]", []string{"n08", "n09", "n10"}},
	{"n[8-010]", []string{"n8", "n9", "n10"}},
	{"n[007]", []string{"n007"}},
	{"rack[1-2]-n[1-2]", []string{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
	{"n[1-2]-[3-4]", []string{"n1-3", "n1-4", "n2-3", "n2-4"}},
	{"x[1,3],y", []string{"x1", "x3", "y"}},
	{"[1-2]", []string{"1", "2"}},
}

func TestExpandHostlist(t *testing.T) {
	for _, c := range hostlistCases {
		got, err := ExpandHostlist(c.in)
		if err != nil {
			t.Errorf("ExpandHostlist(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ExpandHostlist(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestExpandHostlistSuffix(t *testing.T) {
	// scontrol 22.05 refuses a suffix after the last bracket; we accept it.
	got, err := ExpandHostlist("n[1-2]x")
	if err != nil || !reflect.DeepEqual(got, []string{"n1x", "n2x"}) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"n[1-2", `unbalanced '[' in "n[1-2"`},
		{"n1]", `unbalanced ']' in "n1]"`},
		{"n[1[2]]", `nested '['`},
		{"n[5-3]", `reversed range "5-3"`},
		{"n[a-b]", `bad range "a-b"`},
		{"n[1-]", `bad range "1-"`},
		{"n[-3]", `bad range "-3"`},
		{"n[]", `empty range in []`},
		{"n[1,,2]", `empty range in [1,,2]`},
		{"n[0-3:2]", `bad range "0-3:2"`},
		{"ok,n[1-x]", `hostlist "ok,n[1-x]"`},
		{"n[0-99999999]", "more than"},
		{"a[0-999]b[0-999]c[0-999]", "more than"},
		{"n[99999999999]", `bad range`},
	} {
		got, err := ExpandHostlist(c.in)
		if err == nil {
			t.Errorf("ExpandHostlist(%q) = %q, want error", c.in, got)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ExpandHostlist(%q) error %q, want it to contain %q", c.in, err, c.want)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, c := range hostlistCases {
		f.Add(c.in)
	}
	for _, s := range []string{"n[1-2", "n1]", "[[", "]]", "n[5-3]", "a[0-9]b[0-9]", "n[1,2-3,,]", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) > MaxHosts {
			t.Fatalf("%d hosts > MaxHosts", len(hosts))
		}
		for _, h := range hosts {
			if h == "" && !strings.Contains(s, "[") {
				t.Fatalf("empty host from %q", s)
			}
			if strings.ContainsAny(h, "[],") {
				t.Fatalf("host %q from %q still holds hostlist syntax", h, s)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			// Without brackets it is a plain comma split.
			var want []string
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					want = append(want, p)
				}
			}
			if !reflect.DeepEqual(hosts, want) {
				t.Fatalf("ExpandHostlist(%q) = %q, want %q", s, hosts, want)
			}
		}
	})
}

func TestParseTasksPerNode(t *testing.T) {
	got, err := ParseTasksPerNode("2(x3),1")
	if err != nil || !reflect.DeepEqual(got, []int{2, 2, 2, 1}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "2(3)", "2(x0)", "2(x", "-1"} {
		if _, err := ParseTasksPerNode(bad); err == nil {
			t.Errorf("ParseTasksPerNode(%q): want error", bad)
		}
	}
}
