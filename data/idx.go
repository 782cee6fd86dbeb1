package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// IDX is the file format of MNIST and Fashion-MNIST
// (http://yann.lecun.com/exdb/mnist/): a magic number whose third byte is
// the element type (0x08: unsigned byte) and fourth the number of
// dimensions, the dimensions as big-endian uint32, then the elements.

// IDXError describes a malformed IDX file.
type IDXError struct {
	Path string
	Msg  string
}

func (e *IDXError) Error() string { return e.Path + ": " + e.Msg }

// ReadIDX reads an IDX file of unsigned bytes, gzip-compressed or raw, and
// returns its dimensions and elements. It checks the magic number, the
// element type, that the file holds exactly the elements the dimensions
// promise, and, for gzip, every checksum: a damaged file is an error
// naming it, never corrupted pixels. Memory is allocated as data arrives
// (a raw file's size is checked first), so a header that promises more
// than the file holds fails without allocating what it promised.
func ReadIDX(path string) (dims []int, elems []byte, err error) {
	return ReadIDXChecked(path, nil)
}

// ReadIDXChecked is ReadIDX with a check of the dimensions, called once
// the header is read and before any element is: its error, returned as it
// is, refuses a file of the wrong shape without reading (or, for gzip,
// inflating) what its header promises.
func ReadIDXChecked(path string, check func(dims []int) error) (dims []int, elems []byte, err error) {
	if err := regularFile(path); err != nil {
		return nil, nil, err // opening a named pipe would block
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var r io.Reader = br
	gz := false
	if head, _ := br.Peek(2); bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, &IDXError{path, "bad gzip header: " + err.Error()}
		}
		defer zr.Close()
		zr.Multistream(false)
		r, gz = &gzipMembers{zr, br}, true
	}
	// bad describes a read that failed: a stream that ended early is
	// truncated; anything else (a bad deflate block, a checksum that
	// does not match, bytes after the stream) is a damaged file.
	bad := func(err error, truncated string) error {
		var trail errTrailing
		switch {
		case errors.As(err, &trail):
			return &IDXError{path, fmt.Sprintf("%d bytes after the end of its gzip stream that are not gzip (they begin %q): the file is damaged; download it again", trail.n, trail.head)}
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return &IDXError{path, truncated}
		}
		if gz {
			return &IDXError{path, fmt.Sprintf("corrupt gzip data (%v): the file is damaged; download it again", err)}
		}
		return &IDXError{path, err.Error()}
	}
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, nil, bad(err, "too short for an IDX header")
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, nil, &IDXError{path, fmt.Sprintf("bad magic number %#08x (not an IDX file)", binary.BigEndian.Uint32(magic[:]))}
	}
	if magic[2] != 0x08 {
		return nil, nil, &IDXError{path, fmt.Sprintf("element type %#02x, want 0x08 (unsigned byte)", magic[2])}
	}
	nd := int(magic[3])
	if nd < 1 || nd > 4 {
		return nil, nil, &IDXError{path, fmt.Sprintf("%d dimensions, want 1 to 4", nd)}
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, bad(err, "truncated header")
	}
	n := 1
	for i := 0; i < nd; i++ {
		d := int(binary.BigEndian.Uint32(raw[4*i:]))
		if d < 1 || d > 1<<28 || n > (1<<34)/d {
			return nil, nil, &IDXError{path, fmt.Sprintf("dimension %d is %d", i, d)}
		}
		dims = append(dims, d)
		n *= d
	}
	if check != nil {
		if err := check(dims); err != nil {
			return nil, nil, err
		}
	}
	head := int64(4 + 4*nd)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && !gz {
		switch size := st.Size() - head; {
		case size < int64(n):
			return nil, nil, &IDXError{path, fmt.Sprintf("truncated: %d of %d data bytes (dimensions %v)", size, n, dims)}
		case size > int64(n):
			return nil, nil, &IDXError{path, fmt.Sprintf("more data than dimensions %v promise (%d bytes more)", dims, size-int64(n))}
		}
	} else if m, src := Memory(); m > 0 && int64(n) > m {
		return nil, nil, &IDXError{path, fmt.Sprintf("dimensions %v promise %s of data, more than this machine's %s (%s)", dims, GiB(int64(n)), GiB(m), src)}
	}
	elems, err = readN(r, n, !gz)
	if err != nil {
		return nil, nil, bad(err, fmt.Sprintf("truncated: %d of %d data bytes (dimensions %v)", len(elems), n, dims))
	}
	// Read to the end: gzip checks its CRC and length there, and a stream
	// longer than promised is damaged if its checksum fails, and merely
	// too long otherwise.
	extra, err := io.Copy(io.Discard, io.LimitReader(r, maxExtra))
	if err != nil {
		return nil, nil, bad(err, "truncated gzip stream (it ends before its checksum)")
	}
	if extra > 0 {
		more := fmt.Sprintf("%d bytes more", extra)
		if extra == maxExtra {
			more = fmt.Sprintf("at least %s more", GiB(extra))
		}
		return nil, nil, &IDXError{path, fmt.Sprintf("more data than dimensions %v promise (%s)", dims, more)}
	}
	return dims, elems, nil
}

// missing is a data set's file that is not there: its message, and
// errors.Is(err, fs.ErrNotExist), so that callers can tell a setting that
// points nowhere from a damaged file.
type missing string

func (m missing) Error() string        { return string(m) }
func (m missing) Is(target error) bool { return target == fs.ErrNotExist }

var gzipMagic = []byte{0x1f, 0x8b}

// gzipMembers reads a gzip file member by member, as gzip -d does, and
// ends at the end of the file; bytes after a member that do not begin
// another are errTrailing, not a "truncated" header read by the next
// member.
type gzipMembers struct {
	zr *gzip.Reader // Multistream(false)
	br *bufio.Reader
}

func (g *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		switch {
		case err != io.EOF:
			return n, err
		case n > 0:
			return n, nil // the member's end is seen again next call
		}
		// A member ended, its checksum checked: the file ends here, or
		// another member begins.
		head, _ := g.br.Peek(2)
		switch {
		case len(head) == 0:
			return 0, io.EOF
		case !bytes.Equal(head, gzipMagic):
			first, _ := g.br.Peek(min(g.br.Buffered(), 8))
			t := errTrailing{head: string(first)}
			k, _ := io.Copy(io.Discard, g.br)
			t.n = k
			return 0, t
		}
		if err := g.zr.Reset(g.br); err != nil {
			return 0, err
		}
		g.zr.Multistream(false)
	}
}

// errTrailing is n bytes after a gzip file's last member.
type errTrailing struct {
	n    int64
	head string
}

func (e errTrailing) Error() string { return fmt.Sprintf("%d bytes after the gzip stream", e.n) }

// maxExtra bounds how far ReadIDX reads past the promised elements to
// tell a damaged gzip stream from one that is merely too long.
const maxExtra = 64 << 20

// readN reads n bytes from r. Unless exact (the size is known to be
// there), the buffer grows as data arrives, so that a stream shorter than
// n never costs n bytes of memory. On error it returns what it read.
func readN(r io.Reader, n int, exact bool) ([]byte, error) {
	c := n
	if !exact {
		c = min(n, 16<<20)
	}
	buf := make([]byte, c)
	got := 0
	for {
		k, err := io.ReadFull(r, buf[got:])
		got += k
		if err != nil {
			return buf[:got], err
		}
		if got == n {
			return buf, nil
		}
		nb := make([]byte, min(n, 2*len(buf)))
		copy(nb, buf)
		buf = nb
	}
}

// LoadIDX reads an image file (N, H, W) and a label file (N) in IDX format
// into a data set of 10 classes with one channel.
func LoadIDX(images, labels string) (*Images, error) {
	return loadIDX(images, labels, nil)
}

// loadIDX is LoadIDX taking the images' bytes from budget (nil: none)
// as soon as the file's header gives their size, before reading them: a
// header that promises more than the rank's memory (a damaged file, a
// gzip bomb) is refused in one line, not read until memory runs out.
func loadIDX(images, labels string, budget *Budget) (*Images, error) {
	dims, pix, err := ReadIDXChecked(images, func(dims []int) error {
		if len(dims) == 3 && (dims[1] > MaxSide || dims[2] > MaxSide) {
			return &IDXError{images, fmt.Sprintf("images of %dx%d: larger than %dx%d", dims[1], dims[2], MaxSide, MaxSide)}
		}
		n := int64(1)
		for _, d := range dims {
			n *= int64(d) // ReadIDXChecked bounds the product first
		}
		return budget.Take(fmt.Sprintf("%s (dimensions %v)", images, dims), n, "point -data-dir at the right files, or use a machine with more memory")
	})
	if err != nil {
		return nil, err
	}
	if len(dims) != 3 {
		return nil, &IDXError{images, fmt.Sprintf("dimensions %v, want 3 (images, rows, columns)", dims)}
	}
	ldims, lab, err := ReadIDX(labels)
	if err != nil {
		return nil, err
	}
	if len(ldims) != 1 {
		return nil, &IDXError{labels, fmt.Sprintf("dimensions %v, want 1 (labels)", ldims)}
	}
	if ldims[0] != dims[0] {
		return nil, fmt.Errorf("%s has %d images but %s has %d labels", images, dims[0], labels, ldims[0])
	}
	d, err := NewImages(Shape{dims[1], dims[2], 1}, 10, pix, lab)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", labels, err)
	}
	return d, nil
}

// LoadMNIST loads the training or test split of MNIST or Fashion-MNIST from
// dir, which holds the four files under their usual names
// (train-images-idx3-ubyte, t10k-labels-idx1-ubyte, ...), each raw or with
// a .gz suffix (the .gz one where both are).
func LoadMNIST(dir string, train bool) (*Images, error) {
	return loadMNIST(dir, train, nil)
}

// loadMNIST is LoadMNIST taking the images from budget (loadIDX).
func loadMNIST(dir string, train bool, budget *Budget) (*Images, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	// find takes base.gz where it can be read, else base; a link to
	// nothing is named as that link, where neither name can be read.
	find := func(base string) (string, error) {
		var broken error
		for _, name := range []string{base + ".gz", base} {
			p := filepath.Join(dir, name)
			_, err := os.Stat(p)
			if err == nil {
				return p, nil
			}
			if target, lerr := os.Readlink(p); lerr == nil && broken == nil {
				broken = fmt.Errorf("data dir %s: %s is a symbolic link to %s, which cannot be read: %w", dir, name, target, errors.Unwrap(err))
			}
		}
		if broken != nil {
			return "", broken
		}
		return "", missing(fmt.Sprintf("data dir %s: no %s or %s.gz (install the Debian package dataset-fashion-mnist, or point -data-dir at the files)", dir, base, base))
	}
	img, err := find(prefix + "-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	lab, err := find(prefix + "-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	return loadIDX(img, lab, budget)
}
