package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeTablesCurrent renders the README's generated tables from the
// JSON in docs/figures/ into a copy of README.md (`make readme-tables
// README=copy`, the target a person runs) and requires the copy to equal
// the README: a table edited by hand, or a figure's JSON replaced without
// regenerating the tables, fails here. It also checks that the CPU
// issue's targets table is among them and has rows.
func TestReadmeTablesCurrent(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(cp, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-s", "-C", root, "readme-tables", "README="+cp).CombinedOutput(); err != nil {
		t.Fatalf("make readme-tables: %v\n%s", err, out)
	}
	got, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		a, b := strings.Split(string(orig), "\n"), strings.Split(string(got), "\n")
		for i := 0; i < min(len(a), len(b)); i++ {
			if a[i] != b[i] {
				t.Fatalf("README.md line %d is not what make readme-tables renders from docs/figures/:\n  README:   %.200s\n  rendered: %.200s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("README.md has %d lines, make readme-tables renders %d", len(a), len(b))
	}
	start := strings.Index(string(got), "<!-- table:cpu_targets -->")
	end := strings.Index(string(got), "<!-- /table:cpu_targets -->")
	if start < 0 || end < start || strings.Count(string(got[start:end]), "\n| ") < 3 {
		t.Fatal("README.md: the cpu_targets table is missing or has no rows")
	}
}
