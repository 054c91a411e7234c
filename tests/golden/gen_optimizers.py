"""Golden values for the adam, LazyAdam and novograd optimizer plugins.

Three parameters (shapes [5], [3, 4], [2]) start from seeded values and see
100 steps of seeded gradients, stored in the case "data" (inputs p0..p2, the
gradients g0..g2 with a leading step axis, and lr: a per-step learning rate
for the "varying lr" cases). Every other case holds the parameters after 1, 10
and 100 steps (outputs p<i>@<steps>) for the optimizer and hyperparameters in
its params; params.lr is a number (constant) or "data" (lr[step]).

Adam / AdamW: torch.optim.Adam and torch.optim.AdamW themselves.
NovoGrad: a transcription of OpenSeq2Seq's NovoGrad (NovoGrad2 at commit
2302caec6fc16c6d81c2434c5b45da9019dfd19c of open_seq2seq/optimizers/novograd.py,
apply_gradients, plus tf.train.MomentumOptimizer's update), in float32 like TF.

Run: /usr/bin/python3 tests/golden/gen_optimizers.py
"""
import torch

from golden_util import case, write

STEPS = 100
SHAPES = [(5,), (3, 4), (2,)]
CHECKPOINTS = (1, 10, 100)


def make_data():
    gen = torch.Generator().manual_seed(20240607)
    params = [torch.randn(s, generator=gen) for s in SHAPES]
    # Gradients of varying scale per parameter, so the per-layer norms differ.
    grads = [torch.randn((STEPS,) + s, generator=gen) * scale
             for s, scale in zip(SHAPES, (1.0, 0.1, 3.0))]
    lr = 0.01 * (1.0 + torch.rand(STEPS, generator=gen))  # in [0.01, 0.02)
    return params, grads, lr


def lr_at(lr_spec, lr, step):
    return float(lr[step]) if lr_spec == "data" else float(lr_spec)


def run_torch(opt_class, kwargs, lr_spec, params0, grads, lr):
    params = [p.clone().requires_grad_(True) for p in params0]
    opt = opt_class(params, lr=lr_at(lr_spec, lr, 0), **kwargs)
    out = {}
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lr_at(lr_spec, lr, step)
        for p, g in zip(params, grads):
            p.grad = g[step].clone()
        opt.step()
        if step + 1 in CHECKPOINTS:
            for i, p in enumerate(params):
                out[f"p{i}@{step + 1}"] = p.detach().clone()
    return out


def run_novograd(beta1, beta2, epsilon, weight_decay, grad_averaging, lr_spec,
                 params0, grads, lr):
    f32 = torch.float32
    params = [p.clone() for p in params0]
    grads_ema = [torch.zeros((), dtype=f32) for _ in params]  # initializer Zeros
    accum = [torch.zeros_like(p) for p in params]  # MomentumOptimizer's slot
    out = {}
    for step in range(STEPS):
        lr_t = lr_at(lr_spec, lr, step)
        for i, (var, g_all) in enumerate(zip(params, grads)):
            grad = g_all[step].clone()
            # g_2 = tf.reduce_sum(tf.square(x=tf.cast(grad, tf.float32)))
            g_2 = torch.sum(torch.square(grad.double())).to(f32)
            # tf.cond(tf.equal(ema, 0.), lambda: g_2,
            #         lambda: ema * beta2 + g_2 * (1. - beta2))
            if grads_ema[i] == 0.0:
                grads_ema[i] = g_2
            else:
                grads_ema[i] = (grads_ema[i] * torch.tensor(beta2, dtype=f32)
                                + g_2 * torch.tensor(1.0 - beta2, dtype=f32))
            # grad *= 1.0 / tf.sqrt(ema + epsilon)
            grad = grad * (1.0 / torch.sqrt(grads_ema[i] + torch.tensor(epsilon, dtype=f32)))
            if weight_decay > 0.0:  # grad += wd * var
                grad = grad + torch.tensor(weight_decay, dtype=f32) * var
            if grad_averaging:  # grad *= (1. - beta1)
                grad = grad * torch.tensor(1.0 - beta1, dtype=f32)
            # MomentumOptimizer (ApplyMomentum): accum = accum * momentum + grad;
            # var -= lr * accum
            accum[i] = accum[i] * torch.tensor(beta1, dtype=f32) + grad
            params[i] = var - torch.tensor(lr_t, dtype=f32) * accum[i]
        if step + 1 in CHECKPOINTS:
            for i, p in enumerate(params):
                out[f"p{i}@{step + 1}"] = p.clone()
    return out


def main():
    params0, grads, lr = make_data()
    inputs = {f"p{i}": p for i, p in enumerate(params0)}
    inputs.update({f"g{i}": g for i, g in enumerate(grads)})
    inputs["lr"] = lr
    cases = [case("data", inputs, {})]

    adam_cases = [
        # name, plugin params, torch class, torch kwargs, lr
        ("adam_default", {}, torch.optim.Adam, {}, 0.01),
        ("adam_varying_lr", {}, torch.optim.Adam, {}, "data"),
        ("adam_l2", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "weight_decay": 0.1},
         torch.optim.Adam, {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}, 0.01),
        ("adamw", {"weight_decay": 0.1, "decoupled_weight_decay": True},
         torch.optim.AdamW, {"weight_decay": 0.1}, "data"),
        ("adam_amsgrad_l2", {"weight_decay": 0.05, "amsgrad": True},
         torch.optim.Adam, {"weight_decay": 0.05, "amsgrad": True}, 0.01),
    ]
    for name, plugin_params, cls, kwargs, lr_spec in adam_cases:
        out = run_torch(cls, kwargs, lr_spec, params0, grads, lr)
        cases.append(case(name, {}, out, params={"optimizer": "adam", "optimizer_params":
                                                 plugin_params, "lr": lr_spec}))

    novograd_cases = [
        ("novograd_default", {}, 0.01),
        ("novograd_varying_lr", {}, "data"),
        ("novograd_wd_averaging",
         {"beta1": 0.9, "beta2": 0.95, "epsilon": 1e-6, "weight_decay": 0.01,
          "grad_averaging": True}, 0.05),
    ]
    defaults = {"beta1": 0.95, "beta2": 0.98, "epsilon": 1e-8, "weight_decay": 0.0,
                "grad_averaging": False}
    for name, plugin_params, lr_spec in novograd_cases:
        hp = dict(defaults, **plugin_params)
        out = run_novograd(hp["beta1"], hp["beta2"], hp["epsilon"], hp["weight_decay"],
                           hp["grad_averaging"], lr_spec, params0, grads, lr)
        cases.append(case(name, {}, out, params={"optimizer": "novograd", "optimizer_params":
                                                 plugin_params, "lr": lr_spec}))
    write("optimizers", cases)


if __name__ == "__main__":
    main()
