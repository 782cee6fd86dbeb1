package checkpoint

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"strings"
)

// Magic opens every checkpoint file; Version is the format written.
const (
	Magic   = "\x89HPCKPT\n"
	Version = 1
)

// Errors that Load wraps, for errors.Is.
var (
	ErrFormat       = errors.New("not a checkpoint")        // bad magic, unknown version, bad header
	ErrTruncated    = errors.New("truncated")               // fewer bytes than the header promises
	ErrChecksum     = errors.New("checksum mismatch")       // CRC-32C differs: bit rot or a partial overwrite
	ErrIncompatible = errors.New("incompatible checkpoint") // State.Check refused it
)

// State is one checkpoint: everything needed to resume a run.
type State struct {
	Model      string // model name, e.g. "cnn-fmnist"
	ConfigHash string // hash of the training config that produced it
	Optimizer  string // optimizer name; its buffers are Sections
	WorldSize  int    // MPI ranks that wrote it
	Epoch      int    // epoch in progress
	Step       int64  // global optimizer steps taken
	// SamplerEpoch and SamplerIndex place the data sampler: the next sample
	// to draw is number SamplerIndex of the shuffle of epoch SamplerEpoch.
	SamplerEpoch, SamplerIndex int
	RNG                        []uint64  // RNG state words, opaque here
	Sections                   []Section // parameters, then each optimizer buffer
}

// Section is one named flat tensor (parameters, gradients' moments, ...).
type Section struct {
	Name string
	Data []float32
}

// Lookup returns the data of the section named name, or nil.
func (s *State) Lookup(name string) []float32 {
	for i := range s.Sections {
		if s.Sections[i].Name == name {
			return s.Sections[i].Data
		}
	}
	return nil
}

// Check returns an ErrIncompatible error when s was not written by a run
// like the one asking: another model, another config (hash), or another
// world size. Resuming needs the same -np because the global batch size and
// each rank's shard of the sampler's permutation depend on it; resuming on a
// different world size would silently change the training. All differences
// are reported at once.
func (s *State) Check(model, configHash string, worldSize int) error {
	var errs []error
	if s.Model != model {
		errs = append(errs, fmt.Errorf("it is for model %q, this run trains %q", s.Model, model))
	}
	if s.ConfigHash != configHash {
		errs = append(errs, fmt.Errorf("its config hash is %s, this run's is %s: the training config changed (restore it, or use a new -checkpoint-dir)", s.ConfigHash, configHash))
	}
	if s.WorldSize != worldSize {
		errs = append(errs, fmt.Errorf("it was written by %d ranks, this run has %d: resume with mpirun -np %d (the global batch and the sampler's shards depend on it)", s.WorldSize, worldSize, s.WorldSize))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%w at step %d: %s", ErrIncompatible, s.Step, strings.Join(msgs, "; "))
}

// header is the JSON header of format version 1.
type header struct {
	Model        string          `json:"model"`
	ConfigHash   string          `json:"config_hash"`
	Optimizer    string          `json:"optimizer"`
	WorldSize    int             `json:"world_size"`
	Epoch        int             `json:"epoch"`
	Step         int64           `json:"step"`
	SamplerEpoch int             `json:"sampler_epoch"`
	SamplerIndex int             `json:"sampler_index"`
	RNG          []uint64        `json:"rng"`
	Sections     []sectionHeader `json:"sections"`
}

// check refuses what Save would refuse, so a loaded State can be saved.
func (h *header) check() error {
	if h.Step < 0 {
		return fmt.Errorf("negative step %d", h.Step)
	}
	seen := make(map[string]bool, len(h.Sections))
	for _, sec := range h.Sections {
		if sec.Name == "" || seen[sec.Name] {
			return fmt.Errorf("empty or duplicate section name %q", sec.Name)
		}
		seen[sec.Name] = true
	}
	return nil
}

type sectionHeader struct {
	Name string `json:"name"`
	Len  int64  `json:"len"`
}

// maxSectionLen bounds one section (16 GiB of float32), so that sizes
// computed from a header cannot overflow int64.
const maxSectionLen = 1 << 32

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkState panics on a State no caller should build.
func checkState(s *State) {
	if s == nil {
		panic("checkpoint: nil State")
	}
	if s.Step < 0 {
		panic("checkpoint: negative Step")
	}
	seen := make(map[string]bool, len(s.Sections))
	for _, sec := range s.Sections {
		if sec.Name == "" {
			panic("checkpoint: Section with empty name")
		}
		if seen[sec.Name] {
			panic("checkpoint: duplicate Section name")
		}
		if int64(len(sec.Data)) > maxSectionLen {
			panic("checkpoint: Section longer than 1<<32 values")
		}
		seen[sec.Name] = true
	}
}

// encode writes s in the file format to w.
func encode(w io.Writer, s *State) error {
	h := header{
		Model: s.Model, ConfigHash: s.ConfigHash, Optimizer: s.Optimizer,
		WorldSize: s.WorldSize, Epoch: s.Epoch, Step: s.Step,
		SamplerEpoch: s.SamplerEpoch, SamplerIndex: s.SamplerIndex,
		RNG: s.RNG, Sections: make([]sectionHeader, len(s.Sections)),
	}
	if h.RNG == nil {
		h.RNG = []uint64{}
	}
	for i, sec := range s.Sections {
		h.Sections[i] = sectionHeader{sec.Name, int64(len(sec.Data))}
	}
	js, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode header: %w", err)
	}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<16)
	var pre [16]byte
	copy(pre[:8], Magic)
	binary.LittleEndian.PutUint32(pre[8:], Version)
	binary.LittleEndian.PutUint32(pre[12:], uint32(len(js)))
	bw.Write(pre[:])
	bw.Write(js)
	var buf [4]byte
	for _, sec := range s.Sections {
		for _, v := range sec.Data {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:])
		}
	}
	if err := bw.Flush(); err != nil { // bufio keeps the first error
		return err
	}
	binary.LittleEndian.PutUint32(buf[:], crc.Sum32())
	_, err = w.Write(buf[:])
	return err
}

// Load reads and verifies the checkpoint at path. The error says which
// check failed and wraps ErrFormat, ErrTruncated or ErrChecksum:
// "load checkpoint ckpt/ckpt-000000001200.hpck: truncated: 1234 of 5678 bytes".
func Load(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	s, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", path, err)
	}
	return s, nil
}

// decode parses and verifies a whole file held in b.
func decode(b []byte) (*State, error) {
	n := int64(len(b))
	if n < 8 || string(b[:8]) != Magic {
		if n < 8 && string(b) == Magic[:n] {
			return nil, fmt.Errorf("%w: %d of at least 20 bytes", ErrTruncated, n)
		}
		return nil, fmt.Errorf("%w: bad magic %q, want %q", ErrFormat, b[:min(n, 8)], Magic)
	}
	if n < 16 {
		return nil, fmt.Errorf("%w: %d of at least 20 bytes", ErrTruncated, n)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != Version {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrFormat, v, Version)
	}
	hlen := int64(binary.LittleEndian.Uint32(b[12:]))
	// The size the header promises, if the header can be read; -1 if not.
	want := int64(-1)
	var h header
	hdrErr := fmt.Errorf("%w: %d of at least %d bytes", ErrTruncated, n, 16+hlen+4)
	if 16+hlen <= n {
		hdrErr = json.Unmarshal(b[16:16+hlen], &h)
		if hdrErr == nil {
			want = 16 + hlen + 4
			for _, sec := range h.Sections {
				if sec.Len < 0 || sec.Len > maxSectionLen {
					hdrErr = fmt.Errorf("section %q length %d out of range", sec.Name, sec.Len)
					want = -1
					break
				}
				want += 4 * sec.Len
			}
		} else {
			hdrErr = fmt.Errorf("%w: header: %v", ErrFormat, hdrErr)
		}
	}
	// The checksum covers everything, so test it before trusting any length:
	// a flipped bit in a length then reads as corruption, not truncation.
	if n >= 20 && crc32.Checksum(b[:n-4], castagnoli) == binary.LittleEndian.Uint32(b[n-4:]) {
		if hdrErr != nil {
			return nil, fmt.Errorf("%w: checksum good but %v", ErrFormat, hdrErr)
		}
		if want != n {
			return nil, fmt.Errorf("%w: checksum good but header describes %d bytes, file has %d", ErrFormat, want, n)
		}
		if err := h.check(); err != nil {
			return nil, fmt.Errorf("%w: checksum good but %v", ErrFormat, err)
		}
	} else {
		switch {
		case want > n:
			return nil, fmt.Errorf("%w: %d of %d bytes", ErrTruncated, n, want)
		case want < 0 && errors.Is(hdrErr, ErrTruncated):
			return nil, hdrErr
		case want >= 0 && want < n:
			return nil, fmt.Errorf("%w: %d bytes, header describes %d (appended to?)", ErrChecksum, n, want)
		default:
			return nil, fmt.Errorf("%w (CRC-32C of %d bytes)", ErrChecksum, n)
		}
	}
	s := &State{
		Model: h.Model, ConfigHash: h.ConfigHash, Optimizer: h.Optimizer,
		WorldSize: h.WorldSize, Epoch: h.Epoch, Step: h.Step,
		SamplerEpoch: h.SamplerEpoch, SamplerIndex: h.SamplerIndex,
		RNG: h.RNG, Sections: make([]Section, len(h.Sections)),
	}
	off := 16 + hlen
	for i, sec := range h.Sections {
		data := make([]float32, sec.Len)
		for j := range data {
			data[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
			off += 4
		}
		s.Sections[i] = Section{Name: sec.Name, Data: data}
	}
	return s, nil
}
