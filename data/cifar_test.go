package data

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"hpctrain/internal/cli"
)

// cifarRecords returns n records whose label is (first+i)%10 and whose
// pixel (c, y, x) is (i + 7c + 3y + x) mod 256.
func cifarRecords(first, n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		b.WriteByte(byte((first + i) % 10))
		for c := 0; c < 3; c++ {
			for y := 0; y < 32; y++ {
				for x := 0; x < 32; x++ {
					b.WriteByte(byte(first + i + 7*c + 3*y + x))
				}
			}
		}
	}
	return b.Bytes()
}

func TestCIFAR10(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cifar-10-batches-bin")
	os.Mkdir(dir, 0o755)
	for k := 1; k <= 5; k++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("data_batch_%d.bin", k)), cifarRecords(3*(k-1), 3), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "test_batch.bin"), cifarRecords(100, 2), 0o644)
	tr, err := LoadCIFAR10(root, true) // finds the archive's sub-directory
	if err != nil {
		t.Fatal(err)
	}
	te, err := LoadCIFAR10(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 15 || te.Len() != 2 || tr.Shape() != (Shape{32, 32, 3}) || tr.Classes() != 10 {
		t.Fatalf("train %d, test %d, shape %v", tr.Len(), te.Len(), tr.Shape())
	}
	buf := make([]byte, 3072)
	for i := 0; i < 15; i++ {
		if l := tr.Sample(i, buf); l != int32(i%10) {
			t.Fatalf("sample %d label %d", i, l)
		}
		for _, p := range [][3]int{{0, 0, 0}, {5, 9, 1}, {31, 31, 2}} { // (H, W, C)
			y, x, c := p[0], p[1], p[2]
			if got, want := buf[(y*32+x)*3+c], byte(i+7*c+3*y+x); got != want {
				t.Fatalf("sample %d pixel (%d,%d,%d) = %d, want %d", i, y, x, c, got, want)
			}
		}
	}
	if l := te.Sample(1, buf); l != 1 || buf[0] != 101 {
		t.Errorf("test sample 1: label %d, first pixel %d", l, buf[0])
	}
}

func TestCIFAR10BadInput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "test_batch.bin")
	os.WriteFile(p, cifarRecords(0, 2)[:3073*2-5], 0o644)
	_, err := LoadCIFAR10(dir, false)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "6141 bytes") {
		t.Errorf("truncated file: %v", err)
	}
	bad := cifarRecords(0, 2)
	bad[3073] = 10
	os.WriteFile(p, bad, 0o644)
	if _, err := LoadCIFAR10(dir, false); err == nil || !strings.Contains(err.Error(), "record 1 has label 10") {
		t.Errorf("bad label: %v", err)
	}
	os.WriteFile(p, nil, 0o644)
	if _, err := LoadCIFAR10(dir, false); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("empty file: %v", err)
	}
	if _, err := LoadCIFAR10(dir, true); err == nil || !strings.Contains(err.Error(), "data_batch_1.bin") {
		t.Errorf("missing training files: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "data_batch_1.bin"), cifarRecords(0, 1), 0o644)
	if _, err := LoadCIFAR10(dir, true); err == nil || !strings.Contains(err.Error(), "data_batch_2.bin") {
		t.Errorf("missing second batch: %v", err)
	}
}

// FuzzCIFAR feeds arbitrary bytes to the CIFAR-10 record parser: it
// returns an error or labels, never panics.
func FuzzCIFAR(f *testing.F) {
	f.Add(cifarRecords(0, 1))
	f.Add([]byte{1, 2, 3})
	f.Add(append(cifarRecords(0, 1), 200))
	f.Fuzz(func(t *testing.T, raw []byte) {
		pix := make([]byte, len(raw)/cifarRecord*cifarPixels)
		labels, err := decodeCIFAR("fuzz", raw, pix)
		if err == nil && len(labels)*cifarRecord != len(raw) {
			t.Fatalf("%d labels from %d bytes", len(labels), len(raw))
		}
	})
}

// TestDataFilesRefuseFIFO: a named pipe where a CIFAR-10 batch or an IDX
// file is expected is a usage error naming it, not a read that blocks
// for ever.
func TestDataFilesRefuseFIFO(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"data_batch_1.bin", "train-images-idx3-ubyte"} {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip(err)
		}
		done := make(chan error, 1)
		go func() {
			var err error
			if strings.HasSuffix(name, ".bin") {
				_, err = ReadCIFAR10(p)
			} else {
				_, _, err = ReadIDX(p)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() != p+" is a named pipe (FIFO), not a file" || !errors.As(err, new(cli.UsageError)) {
				t.Errorf("%s: %v, want a usage error naming the FIFO", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: reading a FIFO blocked", name)
			os.WriteFile(p, nil, 0) // unblock the reader
		}
	}
}
