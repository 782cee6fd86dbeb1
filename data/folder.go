package data

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // register decoders for image.Decode
	_ "image/jpeg"
	_ "image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"

	"hpctrain/internal/cli"
)

// FolderOptions controls LoadImageFolder.
type FolderOptions struct {
	// Lazy keeps only the file list in memory and decodes an image each
	// time its sample is read (no cache: the operating system's page cache
	// keeps the files, and decoding is paid every epoch). Use it when the
	// decoded set, N*H*W*C bytes, does not fit in memory. Otherwise every
	// image is decoded once, at load, in parallel.
	Lazy bool
	// NoResize makes an image whose size is not shape.H x shape.W an error
	// (or a bad image, with SkipBad) instead of resizing it.
	NoResize bool
	// Interp is the resampling rule for resizing (default Bilinear).
	Interp Interp
	// SkipBad skips unreadable or corrupt images, and images of the wrong
	// size under NoResize, calling Warn for each; otherwise the first one
	// is an error naming its path.
	SkipBad bool
	// Warn receives one line per skipped image; nil discards them. In lazy
	// mode it also receives decode failures found while sampling, possibly
	// from several goroutines at once (calls are serialised).
	Warn func(msg string)
	// Budget, when not nil, must hold the decoded images of an eager
	// folder (N*H*W*C bytes), or loading stops before decoding with an
	// error suggesting Lazy.
	Budget *Budget
	// Progress, when not nil, is called as the load goes on: after each
	// class directory is listed and each image is read (decoded, or its
	// header checked when Lazy), possibly from several goroutines at once.
	// A watchdog can tell a slow load from a stuck one by it.
	Progress func()
}

// MaxImagePixels is the largest image, in pixels, a Folder decodes
// (8192x8192: 256 MiB as RGBA, per decoding goroutine). A larger one is a
// bad image, found from its header before it is decoded, so that a
// corrupt or hostile header cannot make the decoder allocate gigabytes.
const MaxImagePixels = 1 << 26

// Folder is a data set of image files laid out one sub-directory per class,
// root/<class>/<image>, as torchvision's ImageFolder. Classes are the
// sub-directories sorted by name; label k is the k-th. Files ending .png,
// .jpg, .jpeg or .gif (any case) directly inside a class directory are
// images; names beginning with a dot are ignored, and other files and
// sub-directories are not read (Ignored counts them, for a warning).
//
// Images are converted to shape.C channels (1: ITU-R BT.601 luma as
// image/color.GrayModel; 3: RGB; alpha is composited over black) and
// resized to shape.H x shape.W. Sample is safe for concurrent use.
type Folder struct {
	root    string
	shape   Shape
	opts    FolderOptions
	names   []string // class names, sorted
	paths   []string // (N) image files
	labels  []int32  // (N)
	pix     []byte   // (N, H, W, C) when eager; nil when lazy
	skipped int
	loose   int // entries of root, not dot names, that are not directories
	// Entries of class directories, not dot names, that are not images:
	// counts by kind (an extension, "sub-directory"), and the first path.
	passed      map[string]int
	passedFirst string

	mu       sync.Mutex // guards lazyErr and Warn calls
	lazyErr  error
	lazyBads int
}

// ImageError is a bad image file: unreadable, corrupt, or of the wrong
// size with resizing off. Errors from LoadImageFolder and Folder.Err about
// one file wrap one (errors.As), so that a caller can offer to skip.
type ImageError struct {
	Path string
	Err  error
}

func (e *ImageError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *ImageError) Unwrap() error { return e.Err }

// badImage wraps err about path, dropping an *fs.PathError's repetition of
// the path.
func badImage(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return &ImageError{Path: path, Err: err}
}

// modeOf is the mode of dir's entry e, through a symbolic link (a link
// that leads nowhere: its own mode, which is neither a directory nor a
// regular file).
func modeOf(dir string, e fs.DirEntry) fs.FileMode {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.Type()
	}
	fi, err := os.Stat(filepath.Join(dir, e.Name()))
	if err != nil {
		return e.Type()
	}
	return fi.Mode()
}

// LoadImageFolder lists root's class directories and their images and,
// unless opts.Lazy, decodes them all. An empty class directory, or one
// whose images were all skipped, is an error naming it.
func LoadImageFolder(root string, shape Shape, opts FolderOptions) (*Folder, error) {
	if shape.H < 1 || shape.W < 1 || (shape.C != 1 && shape.C != 3) {
		return nil, fmt.Errorf("image folder %s: shape %v, want H, W >= 1 and C 1 or 3", root, shape)
	}
	if fi, err := os.Stat(root); err == nil && !fi.IsDir() {
		// A path of the wrong kind, as a misspelt one: the settings' fault.
		kind := "a file"
		if !fi.Mode().IsRegular() {
			kind = cli.NotRegular(fi.Mode())
		}
		return nil, cli.Usage(fmt.Errorf("image folder %s is %s, not a directory (want root/<class>/<image>)", root, kind))
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("image folder: %w", err)
	}
	f := &Folder{root: root, shape: shape, opts: opts}
	var classPaths [][]string
	for _, e := range ents {
		// Class directories and images may be symbolic links (as
		// torchvision's ImageFolder follows them): what counts is what
		// they point to.
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if modeOf(root, e)&fs.ModeDir == 0 {
			f.loose++
			continue
		}
		dir := filepath.Join(root, e.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("image folder: %w", err)
		}
		f.progress()
		var ps []string
		for _, fe := range files {
			if strings.HasPrefix(fe.Name(), ".") {
				continue
			}
			m := modeOf(dir, fe)
			if m.IsDir() || !isImageName(fe.Name()) {
				f.pass(filepath.Join(dir, fe.Name()), m.IsDir())
				continue
			}
			switch {
			case !m.IsRegular():
				// A FIFO would block the decoder for ever.
				return nil, fmt.Errorf("image folder: %s is %s, not an image file", filepath.Join(dir, fe.Name()), cli.NotRegular(m))
			}
			ps = append(ps, filepath.Join(dir, fe.Name()))
		}
		f.names = append(f.names, e.Name())
		classPaths = append(classPaths, ps)
	}
	if len(f.names) == 0 {
		return nil, fmt.Errorf("image folder %s: no class sub-directories (want root/<class>/<image>)%s", root, f.ignored())
	}
	// ReadDir sorts by name, so classes and files are in a fixed order.
	for k, ps := range classPaths {
		if len(ps) == 0 {
			return nil, fmt.Errorf("image folder: class directory %s has no .png, .jpg, .jpeg or .gif files", filepath.Join(root, f.names[k]))
		}
		for _, p := range ps {
			f.paths = append(f.paths, p)
			f.labels = append(f.labels, int32(k))
		}
	}
	if opts.Lazy {
		err = f.check()
	} else {
		err = f.decodeAll()
	}
	if err != nil {
		return nil, err
	}
	// Classes left empty by skipping.
	var count = make([]int, len(f.names))
	for _, l := range f.labels {
		count[l]++
	}
	for k, n := range count {
		if n == 0 {
			return nil, fmt.Errorf("image folder: class directory %s has no readable images (%d skipped in all)", filepath.Join(root, f.names[k]), f.skipped)
		}
	}
	return f, nil
}

// pass notes an entry of a class directory that is not read: a
// sub-directory (torchvision's ImageFolder would look inside) or a file of
// another kind.
func (f *Folder) pass(path string, dir bool) {
	kind := "/" // a sub-directory
	if !dir {
		kind = strings.ToLower(filepath.Ext(path)) // "" for none
	}
	if f.passed == nil {
		f.passed, f.passedFirst = map[string]int{}, path
	}
	f.passed[kind]++
}

// Ignored says which entries of the class directories were not read, for
// a warning at start-up: "" if none. Dot names are left out of it, as they
// are out of the data set.
func (f *Folder) Ignored() string {
	if len(f.passed) == 0 {
		return ""
	}
	kinds := make([]string, 0, len(f.passed))
	n := 0
	for k, c := range f.passed {
		n += c
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { // most first, then by name
		if a, b := f.passed[kinds[i]], f.passed[kinds[j]]; a != b {
			return a > b
		}
		return kinds[i] < kinds[j]
	})
	for i, k := range kinds {
		c := f.passed[k]
		switch {
		case k == "/":
			kinds[i] = plural(c, "sub-directory", "sub-directories")
		case k == "":
			kinds[i] = plural(c, "file without extension", "files without extension")
		default:
			kinds[i] = plural(c, k+" file", k+" files")
		}
	}
	return fmt.Sprintf("image folder %s: %s of the class directories not read (only .png, .jpg, .jpeg and .gif files directly inside are): %s; the first is %s",
		f.root, plural(n, "entry", "entries"), strings.Join(kinds, ", "), f.passedFirst)
}

// plural is "1 one" or "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ignored says how many entries of the root were ignored for not being
// directories, for a message about its classes ("" if none).
func (f *Folder) ignored() string {
	if f.loose == 0 {
		return ""
	}
	if f.loose == 1 {
		return "; 1 entry that is not a directory ignored"
	}
	return fmt.Sprintf("; %d entries that are not directories ignored", f.loose)
}

func isImageName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png", ".jpg", ".jpeg", ".gif":
		return true
	}
	return false
}

// check reads every image's header (lazy mode): format and size.
func (f *Folder) check() error {
	bad := make([]error, len(f.paths))
	f.parallel(func(i int) {
		bad[i] = f.checkOne(f.paths[i])
	})
	return f.dropBad(bad, nil)
}

func (f *Folder) checkOne(path string) error {
	r, err := openImage(path)
	if err != nil {
		return badImage(path, err)
	}
	defer r.Close()
	cfg, _, err := image.DecodeConfig(r)
	if err != nil {
		return badImage(path, err)
	}
	return f.checkSize(path, cfg.Width, cfg.Height)
}

func (f *Folder) checkSize(path string, w, h int) error {
	if w < 1 || h < 1 {
		return badImage(path, fmt.Errorf("empty image (%dx%d)", w, h))
	}
	if w > MaxImagePixels/h {
		return badImage(path, fmt.Errorf("image is %dx%d (WxH), more than %d pixels", w, h, MaxImagePixels))
	}
	if f.opts.NoResize && (w != f.shape.W || h != f.shape.H) {
		return badImage(path, fmt.Errorf("image is %dx%d (WxH), want %dx%d: resizing is off", w, h, f.shape.W, f.shape.H))
	}
	return nil
}

// decodeAll decodes every image into f.pix (eager mode).
func (f *Folder) decodeAll() error {
	size := f.shape.Size()
	what := fmt.Sprintf("decoding image folder %s (%d images of %dx%dx%d)", f.root, len(f.paths), f.shape.H, f.shape.W, f.shape.C)
	if err := f.opts.Budget.Take(what, mulBytes(len(f.paths), size), "use -lazy to decode images as they are sampled, or a smaller -image-shape"); err != nil {
		return err
	}
	pix := make([]byte, len(f.paths)*size)
	bad := make([]error, len(f.paths))
	f.parallel(func(i int) {
		bad[i] = f.decode(f.paths[i], pix[i*size:(i+1)*size])
	})
	return f.dropBad(bad, pix)
}

// dropBad reports or skips the images with errors, compacting the lists
// (and pix when not nil) in order.
func (f *Folder) dropBad(bad []error, pix []byte) error {
	size := f.shape.Size()
	j := 0
	for i, err := range bad {
		if err != nil {
			if !f.opts.SkipBad {
				return fmt.Errorf("image folder: %w", err)
			}
			f.skipped++
			if f.opts.Warn != nil {
				f.opts.Warn("skipping bad image: " + err.Error())
			}
			continue
		}
		f.paths[j], f.labels[j] = f.paths[i], f.labels[i]
		if pix != nil && j != i {
			copy(pix[j*size:(j+1)*size], pix[i*size:(i+1)*size])
		}
		j++
	}
	f.paths, f.labels = f.paths[:j], f.labels[:j]
	if pix != nil {
		f.pix = pix[:j*size]
	}
	return nil
}

// parallel runs fn(i) for every image on GOMAXPROCS goroutines, telling
// opts.Progress after each.
func (f *Folder) parallel(fn func(i int)) {
	n := len(f.paths)
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				fn(i)
				f.progress()
			}
		}()
	}
	wg.Wait()
}

// progress tells opts.Progress, if set, that the load went on.
func (f *Folder) progress() {
	if f.opts.Progress != nil {
		f.opts.Progress()
	}
}

// openImage opens the image file at path for reading, refusing what is
// not a regular file. The listing refused those by their mode, but a file
// replaced after it (during a run, in lazy mode) is opened again each
// epoch: a named pipe would block the open, and so the loader's worker,
// the rank and its peers, for ever. O_NONBLOCK makes the open of a pipe
// return at once (it changes nothing for a regular file's reads), and the
// mode of what was opened decides.
func openImage(path string) (*os.File, error) {
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s, not an image file", cli.NotRegular(fi.Mode()))
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// decode reads the image at path into dst (H, W, C).
func (f *Folder) decode(path string, dst []byte) (err error) {
	defer func() {
		// The standard decoders return errors for corrupt input; this
		// guards the contract that bad files never crash a run.
		if r := recover(); r != nil {
			err = badImage(path, fmt.Errorf("decoder panicked: %v", r))
		}
	}()
	r, err := openImage(path)
	if err != nil {
		return badImage(path, err)
	}
	defer r.Close()
	// The header first: its size decides whether decoding is safe.
	cfg, _, err := image.DecodeConfig(bufio.NewReader(r))
	if err != nil {
		return badImage(path, err)
	}
	if err := f.checkSize(path, cfg.Width, cfg.Height); err != nil {
		return err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return badImage(path, err)
	}
	img, _, err := image.Decode(bufio.NewReader(r))
	if err != nil {
		return badImage(path, err)
	}
	b := img.Bounds()
	if err := f.checkSize(path, b.Dx(), b.Dy()); err != nil {
		return err
	}
	native := Shape{b.Dy(), b.Dx(), f.shape.C}
	if native.H == f.shape.H && native.W == f.shape.W {
		toBytes(dst, img, f.shape.C)
		return nil
	}
	tmp := make([]byte, native.Size())
	toBytes(tmp, img, f.shape.C)
	resize(dst, tmp, native, f.shape, f.opts.Interp)
	return nil
}

// toBytes writes img as (H, W, c) bytes, c 1 (grey) or 3 (RGB).
func toBytes(dst []byte, img image.Image, c int) {
	b := img.Bounds()
	k := 0
	if g, ok := img.(*image.Gray); ok && c == 1 {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			k += copy(dst[k:], g.Pix[g.PixOffset(b.Min.X, y):g.PixOffset(b.Max.X, y)])
		}
		return
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			var r, g, bl uint8
			switch m := img.(type) {
			case *image.YCbCr: // JPEG colour
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				r, g, bl = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
			case *image.Gray:
				v := m.Pix[m.PixOffset(x, y)]
				r, g, bl = v, v, v
			case *image.RGBA:
				i := m.PixOffset(x, y)
				r, g, bl = m.Pix[i], m.Pix[i+1], m.Pix[i+2]
			case *image.NRGBA: // PNG with alpha: composite over black
				i := m.PixOffset(x, y)
				a := uint32(m.Pix[i+3])
				r = uint8((uint32(m.Pix[i])*a + 127) / 255)
				g = uint8((uint32(m.Pix[i+1])*a + 127) / 255)
				bl = uint8((uint32(m.Pix[i+2])*a + 127) / 255)
			default: // premultiplied: composited over black
				r32, g32, b32, _ := img.At(x, y).RGBA()
				r, g, bl = uint8(r32>>8), uint8(g32>>8), uint8(b32>>8)
			}
			if c == 1 {
				// color.GrayModel's weights, on 8-bit values.
				dst[k] = uint8((19595*uint32(r) + 38470*uint32(g) + 7471*uint32(bl) + 1<<15) >> 16)
				k++
			} else {
				dst[k], dst[k+1], dst[k+2] = r, g, bl
				k += 3
			}
		}
	}
}

func (f *Folder) Len() int     { return len(f.labels) }
func (f *Folder) Shape() Shape { return f.shape }
func (f *Folder) Classes() int { return len(f.names) }

// Label is sample i's label (no decoding).
func (f *Folder) Label(i int) int32 { return f.labels[i] }

// ClassNames returns the class directory names; label k is ClassNames()[k].
func (f *Folder) ClassNames() []string { return f.names }

// Path returns the file of sample i.
func (f *Folder) Path(i int) string { return f.paths[i] }

// Skipped is the number of bad images skipped at load.
func (f *Folder) Skipped() int { return f.skipped }

// Sample copies sample i into dst and returns its label. In lazy mode an
// image that fails to decode now (it passed the header check at load)
// reads as zeros; the failure is counted, passed to Warn, and the first
// one is returned by Err.
func (f *Folder) Sample(i int, dst []byte) int32 {
	y, _ := f.SampleChecked(i, dst)
	return y
}

// SampleChecked is Sample, also returning the failure of a lazy decode
// (nil otherwise), so that a loader can mark the batch it went into.
func (f *Folder) SampleChecked(i int, dst []byte) (int32, error) {
	size := f.shape.Size()
	if f.pix != nil {
		copy(dst[:size], f.pix[i*size:(i+1)*size])
		return f.labels[i], nil
	}
	err := f.decode(f.paths[i], dst[:size])
	if err != nil {
		clear(dst[:size])
		f.mu.Lock()
		f.lazyBads++
		if f.lazyErr == nil {
			f.lazyErr = err
		}
		if f.opts.Warn != nil {
			f.opts.Warn("bad image read as zeros: " + err.Error())
		}
		f.mu.Unlock()
	}
	return f.labels[i], err
}

// Err returns the first decode failure met by Sample in lazy mode, with
// the number of failures so far, or nil.
func (f *Folder) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lazyErr == nil {
		return nil
	}
	return fmt.Errorf("%w (%d bad images read as zeros)", f.lazyErr, f.lazyBads)
}
