// Package optim updates a network's flat parameter buffer from its flat
// gradient buffer: the optimizers taught in the course (SGD with momentum and
// Nesterov, and the adaptive family) and learning-rate schedules.
//
// Every optimizer works on the whole flat buffers at once, with Groups
// describing the tensors inside them for methods that treat tensors
// differently (no weight decay on biases, layer-wise trust ratios).
//
// Non-goals: computing gradients, communication, knowing any layer type.
package optim
