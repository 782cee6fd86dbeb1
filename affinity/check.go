package affinity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Gatherer is the part of a communicator CheckDisjoint and Report need;
// hpctrain/mpi's Comm satisfies it. Allgather places every rank's send
// (all of one length) into recv, rank r's at recv[r*len(send):].
type Gatherer interface {
	Rank() int
	Size() int
	Host() string
	Allgather(send, recv []byte) error
}

// allgatherVar gathers one byte string of any length from every rank: a
// first Allgather of lengths, then one of the strings padded to the
// longest. Every rank makes the same two calls whatever its data.
func allgatherVar(g Gatherer, data []byte) ([][]byte, error) {
	n := g.Size()
	var lenBuf [4]byte
	binary.LittleEndian.PutUint32(lenBuf[:], uint32(len(data)))
	lens := make([]byte, 4*n)
	if err := g.Allgather(lenBuf[:], lens); err != nil {
		return nil, fmt.Errorf("allgather lengths: %w", err)
	}
	longest := 0
	for r := range n {
		longest = max(longest, int(binary.LittleEndian.Uint32(lens[4*r:])))
	}
	send := make([]byte, longest)
	copy(send, data)
	recv := make([]byte, n*longest)
	if err := g.Allgather(send, recv); err != nil {
		return nil, fmt.Errorf("allgather data: %w", err)
	}
	out := make([][]byte, n)
	for r := range out {
		l := int(binary.LittleEndian.Uint32(lens[4*r:]))
		out[r] = recv[r*longest : r*longest+l]
	}
	return out, nil
}

// CheckDisjoint verifies across all ranks that no two ranks on the same
// host are bound to a common CPU. Each rank passes its own CPUs (empty:
// not bound, never in conflict). Every rank gathers every rank's host and
// CPU mask and reaches the same verdict, so either all return nil or all
// return the same error, naming the first conflicting pair in rank order,
// the host and the shared CPUs, and every rank can abort without leaving
// another waiting. It is meaningful for policy cores; under policy numa
// ranks on one node share its CPUs by design.
func CheckDisjoint(g Gatherer, cpus CPUSet) error {
	hosts, sets, err := gatherHostSets(g, cpus)
	if err != nil {
		return fmt.Errorf("check cpu bindings across ranks: %w", err)
	}
	for i := range sets {
		for j := i + 1; j < len(sets); j++ {
			if hosts[i] != hosts[j] {
				continue
			}
			if shared := sets[i].Intersect(sets[j]); !shared.IsEmpty() {
				return overlapError{fmt.Errorf("ranks %d and %d on host %s are both bound to cpus %s (rank %d: %s, rank %d: %s); "+
					"hint: launch ranks so each knows its local rank, give each rank its own -cpu-list, or use -bind none",
					i, j, hosts[i], shared, i, sets[i], j, sets[j])}
			}
		}
	}
	return nil
}

// ReportLine formats one rank's binding as Open MPI's --report-bindings
// does: "[host:rank 0 local 0] cores 0-1 numa 0 threads 2".
func ReportLine(host string, rank int, p Plan) string {
	return fmt.Sprintf("[%s:rank %d local %d] %s", host, rank, p.LocalRank, p)
}

// Report gathers every rank's ReportLine and returns them in rank order,
// on every rank; rank 0 prints them. Like CheckDisjoint it is collective:
// every rank must call it.
func Report(g Gatherer, p Plan) ([]string, error) {
	all, err := allgatherVar(g, []byte(ReportLine(g.Host(), g.Rank(), p)))
	if err != nil {
		return nil, fmt.Errorf("report cpu bindings: %w", err)
	}
	lines := make([]string, len(all))
	for r, b := range all {
		lines[r] = string(b)
	}
	return lines, nil
}

// MaskGroup finds the ranks on this rank's host whose allowed mask equals
// this one's, and returns this rank's index among them (in rank order) and
// their count. A launcher that binds each rank itself (Open MPI binds to a
// core, a socket or a NUMA node unless given --bind-to none) gives a
// node's ranks masks of their own; planned as if each were the node's
// LocalRank of LocalSize, every rank takes only its slice of its mask (4
// ranks bound to 2 sockets took a quarter of their socket each). Planned
// as the index of count within the mask, the ranks sharing a mask use all
// of it. Collective: every rank calls it, whatever its mask.
func MaskGroup(g Gatherer, mask CPUSet) (index, count int, err error) {
	hosts, sets, err := gatherHostSets(g, mask)
	if err != nil {
		return 0, 0, fmt.Errorf("compare cpu masks across ranks: %w", err)
	}
	for r := range sets {
		if hosts[r] != g.Host() || !sets[r].Equal(mask) {
			continue
		}
		if r == g.Rank() {
			index = count
		}
		count++
	}
	return index, count, nil
}

// gatherHostSets gathers every rank's host and cpu set, in rank order
// (collective). Record: host length (2 bytes), host, then the cpu mask.
func gatherHostSets(g Gatherer, cpus CPUSet) ([]string, []CPUSet, error) {
	host := g.Host()
	rec := binary.LittleEndian.AppendUint16(nil, uint16(len(host)))
	rec = append(rec, host...)
	rec = cpus.appendMask(rec, (cpus.Max()+8)/8)
	all, err := allgatherVar(g, rec)
	if err != nil {
		return nil, nil, err
	}
	hosts := make([]string, len(all))
	sets := make([]CPUSet, len(all))
	for r, b := range all {
		if len(b) < 2 || len(b) < 2+int(binary.LittleEndian.Uint16(b)) {
			return nil, nil, fmt.Errorf("rank %d sent a short record", r)
		}
		hl := int(binary.LittleEndian.Uint16(b))
		hosts[r] = string(b[2 : 2+hl])
		sets[r] = fromMask(bytes.Clone(b[2+hl:]))
	}
	return hosts, sets, nil
}

// ErrOverlap is what CheckDisjoint's error is (errors.Is) when two ranks
// on one host are bound to the same cpus: the launch's or the user's
// doing (-cpu-list, taskset), where its other errors are failures of the
// exchange itself.
var ErrOverlap = errors.New("ranks bound to the same cpus")

type overlapError struct{ error }

func (overlapError) Is(target error) bool { return target == ErrOverlap }
