// Package checkpoint saves and restores a training run's state in one
// self-checking file, atomically, and finds the newest good one to resume.
//
// A [State] holds what a data-parallel run needs to continue exactly where
// it stopped: the model and optimizer tensors as named float32 [Section]s,
// the global step and epoch, the data sampler's position, the RNG state, and
// what the run was (model name, config hash, world size) so that [State.Check]
// can refuse to resume a different run.
//
// # File format (version 1)
//
// All integers little-endian.
//
//	offset        size      field
//	0             8         magic "\x89HPCKPT\n" (high-bit byte and newline catch
//	                        7-bit and text-mode transfers, as in PNG)
//	8             4         format version, uint32 = 1
//	12            4         header length H, uint32
//	16            H         header: UTF-8 JSON, see below
//	16+H          4*ΣLen    the sections' float32 values, IEEE-754 bits, in
//	                        header order, no padding
//	end-4         4         CRC-32C (Castagnoli) of every byte before it
//
// The header is a JSON object:
//
//	{"model": "cnn-fmnist", "config_hash": "sha256:…", "optimizer": "adamw",
//	 "world_size": 4, "epoch": 3, "step": 12000,
//	 "sampler_epoch": 3, "sampler_index": 1536, "rng": [1, 2],
//	 "sections": [{"name": "params", "len": 431080},
//	              {"name": "adamw.m", "len": 431080}, …]}
//
// JSON was chosen over a fixed binary header because the header is small
// next to the tensors, it can be read with `head -c` and jq when debugging,
// and new fields can be added without a version bump (readers ignore
// unknown fields; a change to the binary layout bumps the version). RNG words
// are JSON integers; Go decodes them into uint64 exactly, but a reader that
// parses JSON numbers as doubles would not.
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
// # Invariants
//
//   - A file named *.hpck was complete when it got that name; [Load] still
//     verifies magic, version, sizes and checksum and says which failed.
//   - Save never modifies or removes a checkpoint it cannot read back
//     (corrupt files and other versions are left for a person to inspect),
//     and on any failure leaves every existing checkpoint as it was.
//   - Saving the same State twice gives byte-identical files (no
//     timestamps, no map iteration order).
//
// Non-goals: sharded or parallel writes (rank 0 writes the whole state:
// data parallelism means every rank holds the same tensors), compression,
// and several writers sharing one directory.
package checkpoint
