package checkpoint

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// The process's record of the checkpoint files known to load, so that
// prune, which must not count or remove a file that does not load, reads
// each file whole at most once instead of keep+1 files at every save
// (hundreds of MB each on a parallel file system, whose page cache does
// not keep them). A file is in the record under its path when Save wrote
// it (the inode it wrote and fsynced, of the size it wrote, whose header
// passes Load's checks) or when prune loaded it or failed to (a damaged
// file of the run is not read again at every save, and stays), with what
// stat said of it then. prune takes the record's word only while stat
// still says the same: a file written to since (its mtime and ctime move; ctime cannot be
// set back), replaced (another inode), truncated or grown is read again.
// Damage that no write made (bit rot beneath the file system) leaves stat
// as it was and is not seen until a Load reads the file ([Latest] at
// resume loads every file it takes).
//
// Entries are forgotten when prune removes their file or finds it gone or
// changed, so the record holds at most the run's kept files and its
// files that do not load for each directory pruned. It is
// guarded by a mutex: Save may run in several goroutines, for different
// directories.
var verified = struct {
	sync.Mutex
	m map[string]verifiedFile
}{m: map[string]verifiedFile{}}

// verifiedFile is a record entry: the file as stat saw it, the run and
// step its header holds, and whether it loads.
type verifiedFile struct {
	id    fileID
	run   string
	step  int64
	loads bool
}

// fileID is what stat says of a file that a change of its bytes changes:
// device and inode (a file put in its place), size, and modification and
// change times in nanoseconds.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// idOf returns the fileID of fi, or ok = false where the system does not
// give one (then nothing is recorded and every file is loaded).
func idOf(fi os.FileInfo) (id fileID, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fileID{}, false
	}
	return fileID{
		dev: uint64(st.Dev), ino: uint64(st.Ino), size: fi.Size(),
		mtime: fi.ModTime().UnixNano(), ctime: st.Ctim.Nano(),
	}, true
}

// statID stats path (links followed: a linked checkpoint is its target's
// bytes) and returns its fileID.
func statID(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	return idOf(fi)
}

// recordKey is the record's key for path.
func recordKey(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// lookup returns the record's entry for path if stat says now what it
// said when the entry was made; a stale entry is dropped.
func lookup(path string, id fileID) (verifiedFile, bool) {
	k := recordKey(path)
	verified.Lock()
	defer verified.Unlock()
	v, ok := verified.m[k]
	if ok && v.id != id {
		delete(verified.m, k)
		ok = false
	}
	return v, ok
}

// remember records that the file at path, as id says, is step of run and
// loads or not.
func remember(path string, id fileID, run string, step int64, loads bool) {
	k := recordKey(path)
	verified.Lock()
	verified.m[k] = verifiedFile{id, run, step, loads}
	verified.Unlock()
}

// forget drops path's entry.
func forget(path string) {
	k := recordKey(path)
	verified.Lock()
	delete(verified.m, k)
	verified.Unlock()
}

// forgetAbsent drops the entries of dir whose paths are not in present
// (files removed or renamed by someone else, set aside).
func forgetAbsent(dir string, present []candidate) {
	d := recordKey(dir)
	keep := make(map[string]bool, len(present))
	for _, c := range present {
		keep[recordKey(c.path)] = true
	}
	verified.Lock()
	defer verified.Unlock()
	for k := range verified.m {
		if filepath.Dir(k) == d && !keep[k] {
			delete(verified.m, k)
		}
	}
}

// rememberSaved records the checkpoint of s that Save has just renamed to
// final from the temporary file whose stat, after its fsync, was tmp: if
// final is that inode, of the size encode writes, and its header passes
// the checks Load makes, it loads (its checksum is of the bytes written,
// which the fsync put on disk) without being read back. Otherwise nothing
// is recorded, and prune loads it as any other file.
func rememberSaved(final string, tmp os.FileInfo, s *State) {
	size, loads := encodedSize(s)
	if !loads || tmp == nil {
		forget(final)
		return
	}
	was, ok1 := idOf(tmp)
	id, ok2 := statID(final)
	if !ok1 || !ok2 || id.dev != was.dev || id.ino != was.ino || id.size != size || was.size != size {
		forget(final)
		return
	}
	remember(final, id, s.RunID, s.Step, true)
}

// ownValid reports whether the file of c is a checkpoint of run that
// loads (and whose header agrees with its name), from the record where
// the file is as recorded, and otherwise by peeking at its header and,
// if it is run's, loading it whole, which is then recorded, whether it
// loads or not. (Other runs' files and files without a header are peeked
// at every time: a few kilobytes.)
func ownValid(c candidate, run string) bool {
	id, idOK := statID(c.path)
	if idOK {
		if v, ok := lookup(c.path, id); ok {
			return v.loads && v.run == run && v.step == c.step
		}
	}
	if h, err := peek(c.path); err != nil || h.RunID != run {
		return false // another run's: never ours to delete
	}
	_, err := pruneLoad(c)
	if idOK {
		// id is from before the load: a file changed while it was read
		// no longer matches, and is read again next time.
		remember(c.path, id, run, c.step, err == nil)
	}
	return err == nil // never delete what we cannot read
}

// pruneLoad is prune's whole-file load, a variable for the tests that
// count reads.
var pruneLoad = loadNamed
