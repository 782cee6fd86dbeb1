// Package export writes a trained network in the formats other tools
// read: an ONNX model (ONNX), and a safetensors file of its weights under
// PyTorch's names and layouts (Safetensors).
//
// # From channels-last to channels-first
//
// hpctrain computes channels-last, (N, H, W, C), and stores convolution
// weights (O, K, K, C); ONNX and PyTorch are channels-first, (N, C, H, W),
// with weights (O, C, K, K). The exported model is the one a PyTorch user
// would write: its input is NCHW, convolution weights are transposed, and
// a flatten is PyTorch's torch.flatten(x, 1), which orders a map's values
// (C, H, W) where hpctrain's order is (H, W, C). The layer that consumes a
// flattened map (a linear layer, or a batch norm over features) has its
// weights permuted to match, so no transpose is left in the graph. Both
// formats come from one walk over the model description (see graph), so
// they hold the same tensors under the same names: the names of
// model.Net.Groups ("conv1.weight", "res2.bn1.running_var", "fc1.bias"),
// which are the state_dict keys of the equivalent nn.Module.
//
// # What is written
//
//   - ONNX: IR version 7, opset 13 (the default domain only), input
//     "input" (batch, C, H, W) with a symbolic batch dimension, output
//     "logits" (batch, classes): the scores before softmax. The network is
//     in inference form: batch normalisation uses the running statistics,
//     dropout is left out. Weights are initializers named as above.
//   - safetensors: every parameter and buffer as F32 in PyTorch's layout,
//     and each batch norm's num_batches_tracked (I64, the training step),
//     so that nn.Module.load_state_dict(strict=True) takes the file.
//
// Both carry the same metadata (safetensors __metadata__, ONNX
// metadata_props): the model's name and description (TOML as hpctrain
// reads it, and the layers as JSON with the classes resolved), the input
// shape (C, H, W), the classes and their names, the normalisation the
// inputs need (x = (pixel/255 - mean)/std per channel), what evaluation
// does to a sample before it (preprocess, e.g. ["resize=32x32"], from
// the data set's sample_shape), how an image file of another size is
// brought to sample_shape first (sample_resize: bilinear, nearest, or none
// for refused) and the step. A resize, in either, is PyTorch's
// interpolate: bilinear with align_corners=False rounded half up to bytes,
// or mode "nearest-exact" for nearest.
//
// # Invariants
//
//   - Exporting the same network twice gives byte-identical files.
//   - A network whose layers have no channels-first form is refused with
//     an error naming the layer; nothing is written.
//
// Non-goals: reading these formats back into hpctrain, other opsets or
// data types than float32, and normalisation inside the graph (as in
// torchvision, inputs are normalised before the model).
package export
