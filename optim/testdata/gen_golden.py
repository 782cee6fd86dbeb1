#!/usr/bin/python3
"""Generate golden_<optimizer>.json for optim's tests from torch.optim.

Run with Debian's python3 (torch 1.13): /usr/bin/python3 gen_golden.py
Each file holds a list of cases: three steps of torch.optim on the params
[1, -2, 0.5] split into two parameter groups, "w" = [1, -2] with the case's
weight decay and "b" = [0.5] with weight decay 0 (optim's NoDecay), with
gradients and learning rates that change per step. Everything runs in
float64, so the values are the formula's, not float32 rounding.
LARS and LAMB are not in torch.optim; their tests use hand formulas only.
"""
import json
import os

import torch
import torch.optim.nadam as nadam_mod

PARAMS0 = [1.0, -2.0, 0.5]
GRADS = [[0.5, -1.0, 0.25], [-0.3, 0.8, 0.1], [0.2, 0.4, -0.6]]


def _nadam_fixed(params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, *,
                 beta1, beta2, lr, weight_decay, momentum_decay, eps):
    """torch 1.13's _single_tensor_nadam with the upstream fix (PyTorch 2.0):
    1.13 computed mu_product_next = mu_product * mu * mu_next, counting mu
    twice; the documented algorithm (and 2.x) uses mu_product * mu_next."""
    for i, param in enumerate(params):
        grad, exp_avg, exp_avg_sq = grads[i], exp_avgs[i], exp_avg_sqs[i]
        mu_product, step_t = mu_products[i], state_steps[i]
        step_t += 1
        step = step_t.item()
        bias_correction2 = 1 - beta2 ** step
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        mu = beta1 * (1. - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1. - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        mu_product *= mu
        mu_product_next = mu_product * mu_next  # the fixed line
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
        param.addcdiv_(grad, denom, value=-lr * (1. - mu) / (1. - mu_product.item()))
        param.addcdiv_(exp_avg, denom, value=-lr * mu_next / (1. - mu_product_next.item()))


if torch.__version__.split(".")[0] == "1":
    nadam_mod._single_tensor_nadam = _nadam_fixed

# name -> (torch class, cases); a case is (label, optim config keys, lrs).
# The config keys are the toml names optim.Config uses.
CASES = {
    "sgd": (torch.optim.SGD, [
        ("plain", {"weight_decay": 0.1}, [0.1, 0.05, 0.02]),
        ("momentum", {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.1}, [0.1, 0.05, 0.02]),
        ("nesterov", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, [0.1, 0.05, 0.02]),
    ]),
    "adagrad": (torch.optim.Adagrad, [
        ("default", {}, [0.1, 0.05, 0.02]),
        ("decay", {"weight_decay": 0.1, "lr_decay": 0.1, "initial_accumulator_value": 0.1}, [0.1, 0.05, 0.02]),
    ]),
    "adadelta": (torch.optim.Adadelta, [
        ("default", {}, [1.0, 0.5, 0.2]),
        ("decay", {"rho": 0.8, "eps": 1e-4, "weight_decay": 0.1}, [1.0, 0.5, 0.2]),
    ]),
    "rmsprop": (torch.optim.RMSprop, [
        ("default", {}, [0.01, 0.005, 0.002]),
        ("centered", {"centered": True, "momentum": 0.9, "alpha": 0.9, "weight_decay": 0.1}, [0.01, 0.005, 0.002]),
    ]),
    "adam": (torch.optim.Adam, [
        ("default", {"weight_decay": 0.1}, [0.1, 0.05, 0.02]),
        ("amsgrad", {"amsgrad": True, "beta1": 0.8, "beta2": 0.99}, [0.1, 0.05, 0.02]),
    ]),
    "adamw": (torch.optim.AdamW, [
        ("default", {}, [0.1, 0.05, 0.02]),
        ("amsgrad", {"amsgrad": True, "weight_decay": 0.1}, [0.1, 0.05, 0.02]),
    ]),
    "adamax": (torch.optim.Adamax, [
        ("default", {"weight_decay": 0.1}, [0.1, 0.05, 0.02]),
    ]),
    "nadam": (torch.optim.NAdam, [
        ("default", {"weight_decay": 0.1}, [0.1, 0.05, 0.02]),
        ("decay", {"momentum_decay": 0.2, "beta1": 0.8}, [0.1, 0.05, 0.02]),
    ]),
}

# torch's default weight decay per class, for the "w" group when a case
# leaves weight_decay unset (AdamW: 1e-2).
TORCH_WD = {"adamw": 1e-2}


def torch_kwargs(name, cfg):
    kw = {}
    for k, v in cfg.items():
        if k in ("beta1", "beta2"):
            continue
        kw[k] = v
    if "beta1" in cfg or "beta2" in cfg:
        kw["betas"] = (cfg.get("beta1", 0.9), cfg.get("beta2", 0.999))
    kw.setdefault("weight_decay", TORCH_WD.get(name, 0.0))
    return kw


def run(name, cls, cfg, lrs):
    p = torch.tensor(PARAMS0, dtype=torch.float64)
    w = p[:2].clone().requires_grad_()
    b = p[2:].clone().requires_grad_()
    kw = torch_kwargs(name, cfg)
    wd = kw.pop("weight_decay")
    opt = cls([{"params": [w], "weight_decay": wd},
               {"params": [b], "weight_decay": 0.0}], lr=lrs[0], **kw)
    out = []
    for g, lr in zip(GRADS, lrs):
        for grp in opt.param_groups:
            grp["lr"] = lr
        w.grad = torch.tensor(g[:2], dtype=torch.float64)
        b.grad = torch.tensor(g[2:], dtype=torch.float64)
        opt.step()
        out.append(w.detach().tolist() + b.detach().tolist())
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, (cls, cases) in CASES.items():
        doc = []
        for label, cfg, lrs in cases:
            doc.append({
                "optimizer": name, "case": label, "config": cfg,
                "groups": [{"name": "w", "off": 0, "len": 2, "no_decay": False},
                           {"name": "b", "off": 2, "len": 1, "no_decay": True}],
                "params0": PARAMS0, "grads": GRADS, "lrs": lrs,
                "params": run(name, cls, cfg, lrs),
                "torch": torch.__version__,
            })
        path = os.path.join(here, "golden_%s.json" % name)
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
