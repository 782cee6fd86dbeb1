// Package checkpoint saves and restores a training run's state in one
// self-checking file, atomically, and keeps a directory of them safe for
// the run that owns it.
//
// A [State] holds what a data-parallel run needs to continue exactly where
// it stopped: the model and optimizer tensors (and any other float32
// state, such as batch-norm running statistics) as named [Section]s, the
// global step and epoch, and what the run was: its identity (RunID), model
// name and description, its settings as a JSON object, and its world size,
// so that [State.Check] can refuse to resume a different run and say which
// settings differ. The checkpoint written when a run completes also holds
// its final result (Final), so that resuming a finished run can report it
// instead of training nothing.
//
// The data sampler's position is not stored: the batches of a step depend
// only on the seed, the epoch and the step, so the step places the sampler
// (version 1 wrote sampler and RNG fields as constants; they are ignored).
//
// # File format (version 2)
//
// All integers little-endian.
//
//	offset        size      field
//	0             8         magic "\x89HPCKPT\n" (high-bit byte and newline catch
//	                        7-bit and text-mode transfers, as in PNG)
//	8             4         format version, uint32 = 2
//	12            4         header length H, uint32
//	16            H         header: UTF-8 JSON, see below
//	16+H          4*ΣLen    the sections' float32 values, IEEE-754 bits, in
//	                        header order, no padding
//	end-4         4         CRC-32C (Castagnoli) of every byte before it
//
// The header is a JSON object:
//
//	{"model": "cnn", "desc": "[[layer]]\n…", "config_hash": "…",
//	 "config": {"batch": 64, "lr": 0.01, …}, "run_id": "9f2c…",
//	 "optimizer": "adamw", "world_size": 4, "epoch": 3, "step": 12000,
//	 "epoch_loss": 431.27, "total_steps": 18750, "final": {"test_accuracy": 0.91, …},
//	 "sections": [{"name": "params", "len": 431080},
//	              {"name": "optim.0", "len": 431080}, …]}
//
// desc, config, run_id, epoch_loss, data, class_names, total_steps and
// final are left out when empty. epoch_loss (the training losses of the epoch's steps so
// far, summed over the ranks, in a checkpoint written within an epoch),
// data (what the run read: "60000 training and 10000 test samples of
// 28x28x1, 10 classes", which a resumed run compares with its own and
// warns if it differs) and class_names (an image folder's class
// directories, output k's name; evaluation and prediction read them
// rather than the folder, which may have changed since) and total_steps
// (the steps the run was to take, which a resumed run with a schedule over
// its length compares with its own) came later within version 2: a build that does not know them ignores them, as every build
// did before. JSON was chosen
// over a fixed binary header because the header is small next to the
// tensors, it can be read with `head -c` and jq when debugging, and fields
// can be added without changing the layout. The version went to 2 with
// run_id, config and final although the layout is unchanged, so that a
// build that knows nothing of run identities and completed runs refuses
// these files ("format version 2, this build reads 1") instead of pruning
// or resuming them wrongly.
//
// Version 1 files (same layout, no desc, config, run_id or final) still
// load: they belong to no run, so Save never replaces or prunes them, and
// Check compares their configuration hash (Identity.HashV1) since they
// record no settings to compare key by key.
//
// # Files in a checkpoint directory
//
// [Save] writes ckpt-<step, 12 digits>.hpck through a temporary
// ckpt-<step>-<random>.tmp in the same directory: write, fsync, close,
// rename, fsync the directory. A crash or a second signal at any point
// leaves either the old set of checkpoints or the old set plus the new one,
// never a half-written .hpck; stray .tmp files are ignored by [Latest] and
// removed by the next Save.
//
// A symbolic link of a checkpoint's name (a file of another directory
// linked in) is a checkpoint of the directory like a file: it is resumed,
// counted and pruned (the link, never its target).
//
// A directory belongs to the runs whose checkpoints it holds. The rules:
//
//   - A run that starts without resuming needs a directory without
//     checkpoint files (ckpt-*.hpck, readable or not): [CheckFresh] refuses
//     any other and says what is there (per run: its model, steps, and the
//     settings that differ from this run's). Even a directory of the same
//     settings is refused, since the fresh run would replace its files;
//     -resume auto continues it.
//   - A resumed run keeps its checkpoint's RunID (a version-1 checkpoint
//     gets a new one), so its files and the ones it continues are one run.
//   - Save replaces a file of the same step only if it is of the same run,
//     and prunes (keep) only the run's own valid files.
//   - A run resumed from step S sets aside the files after S that are its
//     own run's or do not load ([SetAside]: moved, never removed, into
//     set-aside-after-step-S): they are a future the run gave up (a
//     roll-back to an earlier checkpoint, or a newest file that is
//     damaged), and left in place [Latest] would take them for its newest
//     and the pruning would remove the run's new files instead. A file
//     after S of another run, or of a newer format version (a newer build
//     went further), refuses the resumption.
//
// # Invariants
//
//   - A file named *.hpck was complete when it got that name; [Load] still
//     verifies magic, version, sizes and checksum and says which failed.
//   - Save never modifies or removes a checkpoint of another run, or one it
//     cannot read back (corrupt files and other versions are left for a
//     person to inspect; but see the next point), and on any failure
//     leaves every existing checkpoint as it was.
//   - Pruning reads a file whole at most once per process while the file
//     stays as it was: a checkpoint the process wrote (Save knows what it
//     wrote and fsynced, and checks the file's inode, size and header
//     fields without reading it back) or already loaded, or failed to
//     load, is taken to load, or not, as long as stat says the same of it
//     (device, inode, size, mtime, ctime). A file written to, truncated
//     or replaced since, by this process or another, is read again, as is
//     every file of the run a new process finds. Damage that no write made
//     (bit rot beneath the file system) changes no stat field and is not
//     seen by pruning: such a file may be counted among the newest keep,
//     or removed as the oldest. [Latest] loads whole every file it
//     resumes, and skips such a file.
//   - Saving the same State twice gives byte-identical files (no
//     timestamps, no map iteration order).
//
// Non-goals: sharded or parallel writes (rank 0 writes the whole state:
// data parallelism means every rank holds the same tensors), compression,
// and several writers sharing one directory at the same time.
package checkpoint
