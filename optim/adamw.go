package optim

// AdamW is Adam with decoupled weight decay (Loshchilov and Hutter 2019,
// "Decoupled Weight Decay Regularization", arXiv:1711.05101), in PyTorch's
// formulation (torch.optim.AdamW,
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html): the
// parameter shrinks before the Adam step instead of the decay entering the
// gradient and its moments:
//
//	theta *= 1 - lr*wd                       (not for NoDecay groups)
//	m, v, (vmax) and the step as in Adam with g = grad
//
// Defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 1e-2 (a zero
// WeightDecay selects 1e-2; AdamW without decay is Adam). State as Adam's.
type AdamW struct {
	*Adam
}

func newAdamW(c Config, b base) (Optimizer, error) {
	a, err := newAdam(c, b)
	if err != nil {
		return nil, err
	}
	a.(*Adam).decoupled = true
	return AdamW{a.(*Adam)}, nil
}

func (o AdamW) Name() string { return "adamw" }
