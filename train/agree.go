package train

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// Agree makes every rank learn whether any rank failed a stage (start-up,
// loading a checkpoint, opening data): each rank passes its own error (nil
// if it succeeded); all ranks return an error if any failed: the rank's
// own, or one naming the ranks that failed, a usage error (exit 2) when any
// failed rank's was. Without it, a rank that fails to read its data would
// leave the others waiting forever in the next collective. Collective.
func Agree(c mpi.Comm, stage string, err error) error {
	code := []byte{0}
	if err != nil {
		code[0] = 1
		if errors.As(err, new(cli.UsageError)) {
			code[0] = 2
		}
	}
	all := make([]byte, c.Size())
	if gerr := c.Allgather(code, all); gerr != nil {
		return fmt.Errorf("%s: agreeing: %w", stage, gerr)
	}
	if err != nil {
		return err
	}
	var failed []string
	usage := false
	for r, f := range all {
		if f != 0 {
			failed = append(failed, fmt.Sprint(r))
			usage = usage || f == 2
		}
	}
	if len(failed) == 0 {
		return nil
	}
	err = fmt.Errorf("%s failed on rank %s (see its message); stopping", stage, strings.Join(failed, ", "))
	if usage {
		err = cli.Usage(err)
	}
	return err
}

// agree is Agree, as the run calls it.
func agree(c mpi.Comm, stage string, err error) error { return Agree(c, stage, err) }

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
