// Package train joins the parts into a data-parallel training run: it holds
// the run's configuration (TOML file and flags), makes the ranks agree on it,
// and runs the loop - shard, forward, loss, backward, all-reduce, step, log,
// evaluate.
//
// It is the only package that knows both the model and the communicator.
//
// # Invariants
//
//   - Every rank takes the same number of steps with equal batches, so every
//     collective is called the same number of times on every rank.
//   - Errors found on one rank during start-up are agreed on by all ranks
//     before anyone enters a collective of the loop: all of them stop, none
//     hangs.
package train
