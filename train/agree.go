package train

import (
	"bytes"
	"fmt"
	"strings"

	"hpctrain/mpi"
)

// agree makes every rank learn whether any rank failed a start-up stage.
// Each rank passes its own error (nil if it succeeded); all ranks return an
// error if any failed: the rank's own, or one naming the ranks that failed.
// Without it, a rank that fails to read its data would leave the others
// waiting forever in the first all-reduce.
func agree(c mpi.Comm, stage string, err error) error {
	flag := []byte{0}
	if err != nil {
		flag[0] = 1
	}
	all := make([]byte, c.Size())
	if gerr := c.Allgather(flag, all); gerr != nil {
		return fmt.Errorf("%s: agreeing on start-up: %w", stage, gerr)
	}
	if err != nil {
		return err
	}
	var failed []string
	for r, f := range all {
		if f != 0 {
			failed = append(failed, fmt.Sprint(r))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s failed on rank %s (see its message); stopping", stage, strings.Join(failed, ", "))
	}
	return nil
}

// agreeConfig checks that every rank runs with rank 0's configuration. It
// gathers every rank's configuration hash so that all ranks name the same
// culprits and stop together.
func agreeConfig(c mpi.Comm, cfg *Config) error {
	return agreeHash(c, "configuration", cfg.Hash(), "start every rank with the same flags and config file")
}

// agreeHash checks that every rank holds rank 0's hash h of what (16 hex
// digits), naming the ranks that differ.
func agreeHash(c mpi.Comm, what, hash, hint string) error {
	h := []byte(hash)
	all := make([]byte, len(h)*c.Size())
	if err := c.Allgather(h, all); err != nil {
		return fmt.Errorf("comparing %ss: %w", what, err)
	}
	ref := all[:len(h)]
	var bad []string
	for r := 1; r < c.Size(); r++ {
		if got := all[r*len(h) : (r+1)*len(h)]; !bytes.Equal(got, ref) {
			bad = append(bad, fmt.Sprintf("rank %d has %s", r, got))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s differs from rank 0's (hash %s): %s; %s", what, ref, strings.Join(bad, ", "), hint)
	}
	return nil
}
