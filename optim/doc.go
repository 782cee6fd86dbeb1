// Package optim updates a network's flat parameter buffer from its flat
// gradient buffer: the optimizers taught in the course (SGD with momentum and
// Nesterov, and the adaptive family), the large-batch layer-wise methods
// (LARS, LAMB) and learning-rate schedules.
//
// Every optimizer works on the whole flat buffers at once, with Groups
// describing the tensors inside them for methods that treat tensors
// differently (no weight decay on biases and batch norm, layer-wise trust ratios).
//
// New(c, groups, n) builds the optimizer c.Name (Names lists them); each
// type's doc comment gives its update formula and source. Zero or nil
// Config fields select PyTorch's defaults (see Config and WithDefaults).
// Step(params, grads, lr) takes the current learning rate, which the
// training loop gets from a Schedule (NewSchedule, ScaleLR).
//
// # Invariants
//   - Step allocates its state on the first call and nothing afterwards
//     (tests pin this with testing.AllocsPerRun for every optimizer, serial
//     and with a Parallel).
//   - State() is nil before the first Step; afterwards State()[0] is the
//     step counter and the rest the per-parameter buffers, live. Restore
//     loads a checkpoint, before or after the first Step.
//   - Weight decay never touches NoDecay groups.
//   - Arithmetic is float64 per element, storage float32. Every
//     optimizer's element loop (but LARS's norms) is a native kernel of
//     internal/kernels, the same bits as its Go twin there.
//   - With SetBF16Copy (BF16Copier), a Step also leaves every parameter's
//     new value rounded to bfloat16 in the caller's buffer, and changes
//     nothing else: the parameters and state have the bits they have
//     without it.
//
// The tests compare three steps of every optimizer with a float64
// re-statement of its formula (ref_test.go) and with torch.optim's values
// in testdata/golden_*.json (written by testdata/gen_golden.py; torch is
// not needed to run the tests).
//
// LossScaler is fp16's dynamic loss scale (PyTorch's GradScaler): the
// trainer scales the loss by it, skips the update of a step whose reduced
// gradients are not finite, and lets it halve on overflow and double after
// a run of clean steps.
//
// Non-goals: computing gradients, communication, knowing any layer type,
// gradient clipping.
package optim
