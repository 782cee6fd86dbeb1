package checkpoint

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"
	"syscall"
)

// Magic opens every checkpoint file; Version is the format written.
// Load also reads version 1 (see the package documentation).
const (
	Magic   = "\x89HPCKPT\n"
	Version = 2
)

// Errors that Load, Check, CheckFresh and Save wrap, for errors.Is.
var (
	ErrFormat       = errors.New("not a checkpoint")        // bad magic, unknown version, bad header
	ErrTruncated    = errors.New("truncated")               // fewer bytes than the header promises
	ErrChecksum     = errors.New("checksum mismatch")       // CRC-32C differs: bit rot or a partial overwrite
	ErrIncompatible = errors.New("incompatible checkpoint") // State.Check refused it
	ErrInUse        = errors.New("in use")                  // the directory holds files Save must not touch
)

// State is one checkpoint: everything needed to resume a run, and what the
// run was, so that [State.Check] can refuse to resume a different one.
type State struct {
	Model string // model name, e.g. "cnn"
	// Desc is the model's description (TOML text), compared on resume;
	// empty when none was recorded.
	Desc string
	// Config is the training settings a resumed run must share, a JSON
	// object compared key by key on resume (nested objects are keys with
	// dots). Nil in version-1 files, which record only ConfigHash.
	Config json.RawMessage
	// ConfigHash is a digest of the configuration. Version 2 records it for
	// people and tools; only version-1 files are checked by it.
	ConfigHash string
	// RunID names the run that wrote the file: a fresh run draws one
	// (NewRunID), a resumed run keeps its checkpoint's. Save replaces and
	// prunes only files of s.RunID. Empty in version-1 files.
	RunID     string
	Optimizer string // optimizer name; its buffers are Sections
	WorldSize int    // MPI ranks that wrote it
	Epoch     int    // epoch in progress
	Step      int64  // global optimizer steps taken
	// EpochLoss is the training losses of the epoch's steps so far, in a
	// checkpoint written within an epoch: a resumed run reports the mean
	// over the whole epoch. Nil where files of older builds, and
	// checkpoints at an epoch's end, have none.
	EpochLoss *EpochLoss
	// Data says what the run read ("60000 training and 10000 test
	// samples of 28x28x1, 10 classes"), for a resumed run to compare with
	// its own: the settings name the data's place, not what is there.
	// Empty where files of older builds have none.
	Data string
	// ClassNames names the network's outputs where the data set named its
	// classes by directories (an image folder): output k is ClassNames[k].
	// A folder's directories may be renamed, added to or linked after the
	// run, so the network's own record is what evaluation and prediction
	// read. Nil for other data sets and in files of older builds.
	ClassNames []string
	// TotalSteps is the number of steps the run that wrote the file was
	// to take (its -epochs and -steps, which a resumption may change):
	// a schedule over the run's length (cosine) gives another learning
	// rate at the same step when it changes. 0 where files of older
	// builds have none.
	TotalSteps int64
	// Final is the run's final result (a JSON object, opaque here) in the
	// checkpoint written when the run completed; nil in every other one.
	Final    json.RawMessage
	Sections []Section // parameters, then each optimizer buffer, ...
	// Version is the format version Load read the State from; Save ignores
	// it and writes Version.
	Version int
}

// EpochLoss is a sum of training losses: Sum of every rank's losses of
// Steps steps (steps a loss scaler skipped are not counted). Unreported
// marks a checkpoint at an epoch's last step written by a run that then
// stopped, before it evaluated and reported the epoch.
type EpochLoss struct {
	Sum        float64 `json:"sum"`
	Steps      int     `json:"steps"`
	Unreported bool    `json:"unreported,omitempty"`
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

// NewRunID returns a fresh run identity: 16 random hex digits.
func NewRunID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// header is the JSON header. Version-1 headers also held sampler_epoch,
// sampler_index and rng, written as constants and never read; they are
// ignored, and version 1 lacks desc, config, run_id and final.
type header struct {
	Model      string          `json:"model"`
	Desc       string          `json:"desc,omitempty"`
	ConfigHash string          `json:"config_hash"`
	Config     json.RawMessage `json:"config,omitempty"`
	RunID      string          `json:"run_id,omitempty"`
	Optimizer  string          `json:"optimizer"`
	WorldSize  int             `json:"world_size"`
	Epoch      int             `json:"epoch"`
	Step       int64           `json:"step"`
	EpochLoss  *EpochLoss      `json:"epoch_loss,omitempty"`
	Data       string          `json:"data,omitempty"`
	ClassNames []string        `json:"class_names,omitempty"`
	TotalSteps int64           `json:"total_steps,omitempty"`
	Final      json.RawMessage `json:"final,omitempty"`
	Sections   []sectionHeader `json:"sections"`
}

// check refuses what Save would refuse, so a loaded State can be saved.
func (h *header) check() error {
	if h.Step < 0 {
		return fmt.Errorf("negative step %d", h.Step)
	}
	if h.TotalSteps < 0 {
		return fmt.Errorf("negative total_steps %d", h.TotalSteps)
	}
	if l := h.EpochLoss; l != nil && (!(l.Sum >= 0) || l.Steps < 0) {
		return fmt.Errorf("epoch_loss %+v: a sum of losses over a count of steps, neither negative", *l)
	}
	if !objectOrEmpty(h.Config) || !objectOrEmpty(h.Final) {
		return errors.New("config or final is not a JSON object")
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

// state returns the State h describes, without its sections.
func (h *header) state(version int) *State {
	return &State{
		Model: h.Model, Desc: h.Desc, ConfigHash: h.ConfigHash, Config: nullIsNil(h.Config),
		RunID: h.RunID, Optimizer: h.Optimizer, WorldSize: h.WorldSize,
		Epoch: h.Epoch, Step: h.Step, EpochLoss: h.EpochLoss, Data: h.Data, ClassNames: h.ClassNames, TotalSteps: h.TotalSteps, Final: nullIsNil(h.Final), Version: version,
	}
}

// nullIsNil reads a JSON null as absent.
func nullIsNil(m json.RawMessage) json.RawMessage {
	if strings.TrimSpace(string(m)) == "null" {
		return nil
	}
	return m
}

// objectOrEmpty reports whether m is absent or a JSON object.
func objectOrEmpty(m json.RawMessage) bool {
	m = nullIsNil(m)
	if len(m) == 0 {
		return true
	}
	var o map[string]json.RawMessage
	return json.Unmarshal(m, &o) == nil && o != nil
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
	if s.TotalSteps < 0 {
		panic("checkpoint: negative TotalSteps")
	}
	if s.RunID == "" {
		panic("checkpoint: empty RunID")
	}
	if !objectOrEmpty(s.Config) {
		panic("checkpoint: Config is not a JSON object")
	}
	if !objectOrEmpty(s.Final) {
		panic("checkpoint: Final is not a JSON object")
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

// headerJSON returns the header encode writes for s.
func headerJSON(s *State) ([]byte, error) {
	h := header{
		Model: s.Model, Desc: s.Desc, ConfigHash: s.ConfigHash, Config: s.Config,
		RunID: s.RunID, Optimizer: s.Optimizer, WorldSize: s.WorldSize,
		Epoch: s.Epoch, Step: s.Step, EpochLoss: s.EpochLoss, Data: s.Data, ClassNames: s.ClassNames, TotalSteps: s.TotalSteps, Final: s.Final,
		Sections: make([]sectionHeader, len(s.Sections)),
	}
	for i, sec := range s.Sections {
		h.Sections[i] = sectionHeader{sec.Name, int64(len(sec.Data))}
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	return js, nil
}

// encodedSize returns the length of the file encode writes for s, and
// whether that file passes peek and Load (given its bytes on disk are
// the ones written): the checks of the header that Save does not make
// itself (a negative epoch_loss sum is written, and refused by Load; a
// header past maxHeaderLen is refused by peek). Only the header is
// encoded, in memory.
func encodedSize(s *State) (size int64, loads bool) {
	js, err := headerJSON(s)
	if err != nil {
		return 0, false
	}
	size = 16 + int64(len(js)) + 4
	for _, sec := range s.Sections {
		size += 4 * int64(len(sec.Data))
	}
	var h header
	loads = len(js) <= maxHeaderLen && json.Unmarshal(js, &h) == nil && h.check() == nil
	return size, loads
}

// encode writes s in the file format to w.
func encode(w io.Writer, s *State) error {
	js, err := headerJSON(s)
	if err != nil {
		return err
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
	f, err := openRegular(path)
	if errors.Is(err, ErrFormat) {
		return nil, fmt.Errorf("load checkpoint %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	defer f.Close()
	b, err := readFile(f)
	if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrTruncated) {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	var s *State
	if err == nil {
		s, err = decode(b)
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", path, err)
	}
	return s, nil
}

// readFile reads a whole checkpoint file, its magic first: a large file of
// something else (a misnamed archive) is refused, with decode's error,
// without being read into memory.
func readFile(f io.ReadSeeker) ([]byte, error) {
	var head [8]byte
	k, err := io.ReadFull(f, head[:])
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF || err == nil && string(head[:]) != Magic:
		_, err := decode(head[:k])
		return nil, err
	case err != nil:
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
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
	version := binary.LittleEndian.Uint32(b[8:])
	if version < 1 || version > Version {
		return nil, fmt.Errorf("%w: format version %d, this build reads 1 to %d (written by a newer hpctrain?)", ErrFormat, version, Version)
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
	s := h.state(int(version))
	s.Sections = make([]Section, len(h.Sections))
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

// openRegular opens path (links followed) for reading if it is a
// regular file. Anything else is an ErrFormat error saying what it is: a
// device would be read for ever (/dev/zero, until memory runs out), a
// named pipe would block the open until a writer came.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		what := "not a regular file"
		switch t := fi.Mode().Type(); {
		case t&fs.ModeDir != 0:
			return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
		case t&fs.ModeNamedPipe != 0:
			what = "a named pipe (FIFO), not a file"
		case t&fs.ModeDevice != 0:
			what = "a device, not a file"
		case t&fs.ModeSocket != 0:
			what = "a socket, not a file"
		}
		return nil, fmt.Errorf("%w: %s", ErrFormat, what)
	}
	return os.Open(path)
}

// maxHeaderLen bounds the header peek reads (64 MiB), against a length
// field that bit rot made huge.
const maxHeaderLen = 1 << 26

// peek reads the header of the checkpoint at path, without its tensors
// and without verifying the checksum: enough to tell whose file it is and
// which step it holds, at the cost of a few kilobytes per file.
func peek(path string) (*State, error) {
	fail := func(err error) (*State, error) {
		return nil, fmt.Errorf("read checkpoint header %s: %w", path, err)
	}
	f, err := openRegular(path)
	if errors.Is(err, ErrFormat) {
		return fail(err)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint header: %w", err)
	}
	defer f.Close()
	var pre [16]byte
	n, err := io.ReadFull(f, pre[:])
	switch {
	case n >= 8 && string(pre[:8]) != Magic || n < 8 && string(pre[:n]) != Magic[:n]:
		return fail(fmt.Errorf("%w: bad magic %q, want %q", ErrFormat, pre[:min(n, 8)], Magic))
	case err != nil:
		return fail(fmt.Errorf("%w: %d of at least 20 bytes", ErrTruncated, n))
	}
	version := binary.LittleEndian.Uint32(pre[8:])
	if version < 1 || version > Version {
		return fail(fmt.Errorf("%w: format version %d, this build reads 1 to %d (written by a newer hpctrain?)", ErrFormat, version, Version))
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > maxHeaderLen {
		return fail(fmt.Errorf("%w: header length %d", ErrFormat, hlen))
	}
	js := make([]byte, hlen)
	if n, err := io.ReadFull(f, js); err != nil {
		return fail(fmt.Errorf("%w: %d of at least %d bytes", ErrTruncated, 16+n, 16+int(hlen)+4))
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return fail(fmt.Errorf("%w: header: %v", ErrFormat, err))
	}
	if err := h.check(); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrFormat, err))
	}
	return h.state(int(version)), nil
}
