package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
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

// agreeConfig checks that every rank runs with rank 0's configuration, key
// by key: every key but those that only shape a rank's own output, since
// a key a checkpoint does not record (the collective, the checkpoint
// directory, -resume) also decides which collectives a rank calls, and a
// difference there left the ranks waiting on each other. It gathers a
// digest of each key from every rank, so that all ranks name the same
// ranks and keys and stop together.
func agreeConfig(c mpi.Comm, cfg *Config) error {
	var names []string
	var sums []byte
	for _, k := range cfg.keys() {
		if perRankKeys[k.name] {
			continue
		}
		// The value as JSON: a pointer key (an optimizer's beta1) is
		// hashed by what it points to (null when unset), not its address.
		b, err := json.Marshal(k.value.Interface())
		if err != nil {
			b = []byte(fmt.Sprintf("%#v", k.value.Interface()))
		}
		h := sha256.Sum256(b)
		names, sums = append(names, k.name), append(sums, h[:keyDigest]...)
	}
	all := make([]byte, len(sums)*c.Size())
	if err := c.Allgather(sums, all); err != nil {
		return fmt.Errorf("comparing configurations: %w", err)
	}
	ref := all[:len(sums)]
	var bad []string
	for r := 1; r < c.Size(); r++ {
		got := all[r*len(sums) : (r+1)*len(sums)]
		var keys []string
		for i, name := range names {
			if !bytes.Equal(got[i*keyDigest:(i+1)*keyDigest], ref[i*keyDigest:(i+1)*keyDigest]) {
				keys = append(keys, name)
			}
		}
		if len(keys) > 0 {
			bad = append(bad, fmt.Sprintf("rank %d has another %s", r, strings.Join(keys, ", ")))
		}
	}
	if len(bad) > 0 {
		return cli.Usage(fmt.Errorf("configuration differs from rank 0's: %s; start every rank with the same flags and config file", strings.Join(bad, "; ")))
	}
	return nil
}

// keyDigest is the bytes of a key's digest agreeConfig compares.
const keyDigest = 8

// perRankKeys may differ between the ranks of a job: they shape what a
// rank writes or prints of its own, and no collective depends on them.
var perRankKeys = map[string]bool{"metrics": true, "loss_log": true, "verbose": true, "collective_timeout": true, "step_timeout": true}

// agreeText checks that every rank's text about what (at most textWidth
// bytes are compared) is rank 0's; a difference is a usage error (exit 2:
// the ranks were started with different settings or files) naming the
// ranks that differ and what they have.
func agreeText(c mpi.Comm, what, text, hint string) error {
	b := make([]byte, textWidth)
	copy(b, text)
	all := make([]byte, textWidth*c.Size())
	if err := c.Allgather(b, all); err != nil {
		return fmt.Errorf("comparing %s: %w", what, err)
	}
	ref := all[:textWidth]
	var bad []string
	for r := 1; r < c.Size(); r++ {
		if got := all[r*textWidth : (r+1)*textWidth]; !bytes.Equal(got, ref) {
			bad = append(bad, fmt.Sprintf("rank %d has %s", r, bytes.TrimRight(got, "\x00")))
		}
	}
	if len(bad) > 0 {
		return cli.Usage(fmt.Errorf("%s differs from rank 0's (%s): %s; %s", what, bytes.TrimRight(ref, "\x00"), strings.Join(bad, "; "), hint))
	}
	return nil
}

// AgreeText checks that every rank's text about what is rank 0's; where
// some differ, every rank returns the same usage error naming those ranks,
// what they have, and hint (what to do). Collective.
func AgreeText(c mpi.Comm, what, text, hint string) error { return agreeText(c, what, text, hint) }

// textWidth is the bytes of a text agreeText compares.
const textWidth = 128

// agreeHash is agreeText for a hash h of what (16 hex digits).
func agreeHash(c mpi.Comm, what, hash, hint string) error {
	return agreeText(c, what, "hash "+hash, hint)
}
