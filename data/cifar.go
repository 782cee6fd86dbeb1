package data

import (
	"fmt"
	"os"
	"path/filepath"

	"hpctrain/internal/cli"
)

// CIFAR-10 binary version (https://www.cs.toronto.edu/~kriz/cifar.html):
// each batch file is a sequence of 3073-byte records, one label byte in
// [0, 10) then 3072 pixel bytes: the 1024 red values of the 32x32 image in
// row-major order, then green, then blue (C, H, W). The files carry no
// header or magic.

const (
	cifarSide   = 32
	cifarPixels = 3 * cifarSide * cifarSide
	cifarRecord = 1 + cifarPixels
)

// CIFAR10Shape is the shape of a CIFAR-10 sample.
var CIFAR10Shape = Shape{cifarSide, cifarSide, 3}

// LoadCIFAR10 loads the training (data_batch_1.bin to data_batch_5.bin) or
// test (test_batch.bin) split of CIFAR-10 from dir, or from its
// sub-directory cifar-10-batches-bin as the archive unpacks. Pixels are
// converted to (H, W, C).
func LoadCIFAR10(dir string, train bool) (*Images, error) {
	return loadCIFAR10(dir, train, nil)
}

// loadCIFAR10 is LoadCIFAR10 taking the files' pixels from budget (nil:
// none) by their sizes, before reading them.
func loadCIFAR10(dir string, train bool, budget *Budget) (*Images, error) {
	names := []string{"test_batch.bin"}
	if train {
		names = []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}
	}
	if _, err := os.Stat(filepath.Join(dir, names[0])); err != nil {
		sub := filepath.Join(dir, "cifar-10-batches-bin")
		if _, err2 := os.Stat(filepath.Join(sub, names[0])); err2 != nil {
			return nil, missing(fmt.Sprintf("data dir %s: no %s (download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and unpack it there)", dir, names[0]))
		}
		dir = sub
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = filepath.Join(dir, n)
	}
	var total, largest int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			total, largest = total+fi.Size(), max(largest, fi.Size())
		}
	}
	// The pixels stay; each file's raw bytes are held while it converts.
	if err := budget.Take(fmt.Sprintf("CIFAR-10 in %s (%d bytes of batches)", dir, total), total+largest, "point -data-dir at the right files, or use a machine with more memory"); err != nil {
		return nil, err
	}
	return ReadCIFAR10(paths...)
}

// ReadCIFAR10 reads CIFAR-10 binary batch files, in order, into one data
// set. A file whose size is not a multiple of 3073 bytes, or a label of 10
// or more, is an error naming the path.
func ReadCIFAR10(paths ...string) (*Images, error) {
	var pix, labels []byte
	for _, p := range paths {
		if err := regularFile(p); err != nil {
			return nil, err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read CIFAR-10 batch: %w", err)
		}
		n := len(raw) / cifarRecord
		off := len(pix)
		pix = append(pix, make([]byte, n*cifarPixels)...)
		lab, err := decodeCIFAR(p, raw, pix[off:])
		if err != nil {
			return nil, err
		}
		labels = append(labels, lab...)
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("CIFAR-10 %v: no images", paths)
	}
	return NewImages(CIFAR10Shape, 10, pix, labels)
}

// regularFile refuses a data file that is not a regular file (a named
// pipe would block the read for ever, a device never end) as a usage
// error naming it; a file that cannot be stat'ed is left to the read.
func regularFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	return cli.Usage(fmt.Errorf("%s is %s, not a file", path, cli.NotRegular(fi.Mode())))
}

// decodeCIFAR checks raw, the contents of path, and converts its records
// into pix (N, H, W, C), returning the labels.
func decodeCIFAR(path string, raw, pix []byte) ([]byte, error) {
	if len(raw)%cifarRecord != 0 || len(raw) == 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of %d-byte CIFAR-10 records (1 label + 3x32x32 pixels); truncated or not a CIFAR-10 binary batch", path, len(raw), cifarRecord)
	}
	n := len(raw) / cifarRecord
	if len(pix) < n*cifarPixels {
		panic("data: CIFAR pixel buffer too short")
	}
	labels := make([]byte, n)
	const plane = cifarSide * cifarSide
	for i := 0; i < n; i++ {
		rec := raw[i*cifarRecord : (i+1)*cifarRecord]
		if rec[0] >= 10 {
			return nil, fmt.Errorf("%s: record %d has label %d, want 0 to 9 (not a CIFAR-10 batch? CIFAR-100 records have 2 label bytes)", path, i, rec[0])
		}
		labels[i] = rec[0]
		src, dst := rec[1:], pix[i*cifarPixels:(i+1)*cifarPixels]
		for j := 0; j < plane; j++ { // (C, H, W) -> (H, W, C)
			dst[3*j], dst[3*j+1], dst[3*j+2] = src[j], src[plane+j], src[2*plane+j]
		}
	}
	return labels, nil
}
