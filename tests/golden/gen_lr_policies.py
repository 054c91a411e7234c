"""Golden learning rates for rig's lr_policy plugins (tests/golden/lr_policies.json).

The OpenSeq2Seq policies are transcribed from
open_seq2seq/optimizers/lr_policies.py (NVIDIA/OpenSeq2Seq; TensorFlow is not
needed) together with the TensorFlow 1.x schedules they call, in float64.
OpenSeq2Seq's Model fills `decay_steps` with the last step when it is absent;
rig does the same with LrPolicyContext.max_steps, so the cases say max_steps.
one_cycle uses torch's real torch.optim.lr_scheduler.OneCycleLR.

Run: /usr/bin/python3 tests/golden/gen_lr_policies.py

Format: {"generator", "torch", "cases": [{"name", "policy", "params" (the
plugin's params as given in an experiment file), "max_steps",
"steps_per_epoch" (the LrPolicyContext), "lr": [lr at step 0, 1, ...]}]}.
"""
import json
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


# --- TensorFlow 1.x schedules used by OpenSeq2Seq ---------------------------

def tf_piecewise_constant(x, boundaries, values):
    # tf.train.piecewise_constant: values[0] for x <= boundaries[0],
    # values[i] for boundaries[i-1] < x <= boundaries[i], values[-1] after.
    for b, v in zip(boundaries, values):
        if x <= b:
            return v
    return values[-1]


def tf_exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase):
    p = global_step / decay_steps
    if staircase:
        p = math.floor(p)
    return learning_rate * decay_rate ** p


def tf_polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate, power):
    # cycle=False
    global_step = min(global_step, decay_steps)
    return (learning_rate - end_learning_rate) * (1 - global_step / decay_steps) ** power \
        + end_learning_rate


def tf_cosine_decay(learning_rate, global_step, decay_steps, alpha):
    global_step = min(global_step, decay_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * global_step / decay_steps))
    return learning_rate * ((1 - alpha) * cosine + alpha)


# --- open_seq2seq/optimizers/lr_policies.py ---------------------------------

def piecewise_constant(global_step, learning_rate, boundaries, decay_rates, steps_per_epoch=None):
    # lr_policies.py piecewise_constant:
    #   if steps_per_epoch is not None: boundaries = [steps_per_epoch * epoch ...]
    #   decay_rates = [1.0] + decay_rates; vals = [learning_rate * decay ...]
    if steps_per_epoch is not None:
        boundaries = [steps_per_epoch * epoch for epoch in boundaries]
    decay_rates = [1.0] + decay_rates
    vals = [learning_rate * decay for decay in decay_rates]
    return tf_piecewise_constant(global_step, boundaries, vals)


def exp_decay(global_step, learning_rate, decay_steps, decay_rate, use_staircase_decay,
              begin_decay_at=0, min_lr=0.0):
    # lr_policies.py exp_decay: tf.cond(global_step < begin_decay_at, lr,
    #   exponential_decay(lr, global_step - begin_decay_at, ...)); tf.maximum(min_lr, new_lr)
    if global_step < begin_decay_at:
        new_lr = learning_rate
    else:
        new_lr = tf_exponential_decay(learning_rate, global_step - begin_decay_at, decay_steps,
                                      decay_rate, use_staircase_decay)
    return max(min_lr, new_lr)


def poly_decay(global_step, learning_rate, decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0,
               warmup_steps=0):
    # lr_policies.py poly_decay: begin_decay_at = max(warmup_steps, begin_decay_at);
    #   warmup lr * global_step / warmup_steps; then polynomial_decay from begin_decay_at
    begin_decay_at = max(warmup_steps, begin_decay_at)
    if warmup_steps > 0 and global_step < warmup_steps:
        learning_rate = learning_rate * global_step / warmup_steps
    if global_step < begin_decay_at:
        return learning_rate
    return tf_polynomial_decay(learning_rate, global_step - begin_decay_at, decay_steps, min_lr,
                               power)


def cosine_decay(global_step, learning_rate, decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0,
                 warmup_steps=0):
    # lr_policies.py cosine_decay: as poly_decay, with
    #   tf.train.cosine_decay(learning_rate, global_step - begin_decay_at, decay_steps, alpha=min_lr)
    begin_decay_at = max(warmup_steps, begin_decay_at)
    if warmup_steps > 0 and global_step < warmup_steps:
        learning_rate = learning_rate * global_step / warmup_steps
    if global_step < begin_decay_at:
        return learning_rate
    return tf_cosine_decay(learning_rate, global_step - begin_decay_at, decay_steps, min_lr)


def transformer_policy(global_step, learning_rate, d_model, warmup_steps, max_lr=None,
                       coefficient=1.0):
    # lr_policies.py transformer_policy:
    #   decay = coefficient * d_model ** -0.5 * tf.minimum(
    #       (step_num + 1) * ws ** -1.5, (step_num + 1) ** -0.5)
    #   new_lr = decay * learning_rate; tf.minimum(max_lr, new_lr) if max_lr is not None
    step_num = float(global_step)
    ws = float(warmup_steps)
    decay = coefficient * d_model ** -0.5 * min((step_num + 1) * ws ** -1.5,
                                                (step_num + 1) ** -0.5)
    new_lr = decay * learning_rate
    if max_lr is not None:
        return min(max_lr, new_lr)
    return new_lr


def inv_poly_decay(global_step, learning_rate, decay_steps, min_lr, power=1.0, begin_decay_at=0,
                   warmup_steps=0):
    # lr_policies.py inv_poly_decay: min_lr = max(min_lr, 1e-8); min_lr = min(min_lr, lr)
    #   scale = (math.pow(learning_rate / min_lr, 1. / power) - 1.) / decay_steps
    #   lr = learning_rate / tf.pow(1. + scale * global_step, power)
    min_lr = max(min_lr, 1e-8)
    min_lr = min(min_lr, learning_rate)
    scale = (math.pow(learning_rate / min_lr, 1.0 / power) - 1.0) / decay_steps
    return learning_rate / math.pow(1.0 + scale * global_step, power)


POLICIES = {
    "piecewise_constant": piecewise_constant,
    "exp_decay": exp_decay,
    "poly_decay": poly_decay,
    "cosine_decay": cosine_decay,
    "transformer_policy": transformer_policy,
    "inv_poly_decay": inv_poly_decay,
}


def o2s_case(name, policy, params, n, max_steps=0, steps_per_epoch=0):
    """OpenSeq2Seq's Model's auto-fill, then the policy at steps 0..n-1."""
    call = dict(params)
    fn = POLICIES[policy]
    argnames = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    if "decay_steps" in argnames and "decay_steps" not in call:
        call["decay_steps"] = max_steps
    if policy == "piecewise_constant" and "steps_per_epoch" in call:
        if call["steps_per_epoch"] == 0:  # rig: 0 means boundaries in steps
            del call["steps_per_epoch"]
    elif "steps_per_epoch" in argnames and steps_per_epoch > 0:
        call["steps_per_epoch"] = steps_per_epoch
    lr = [float(fn(step, **call)) for step in range(n)]
    return {"name": name, "policy": policy, "params": params, "max_steps": max_steps,
            "steps_per_epoch": steps_per_epoch, "lr": lr}


def one_cycle_case(name, params, max_steps):
    total = params.get("total_steps", max_steps)
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    kw = {k: v for k, v in params.items() if k != "total_steps"}
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, total_steps=total, **kw)
    lr = []
    for _ in range(total):
        lr.append(float(sched.get_last_lr()[0]))
        opt.step()
        sched.step()
    return {"name": name, "policy": "one_cycle", "params": params, "max_steps": max_steps,
            "steps_per_epoch": 0, "lr": lr}


def main():
    cases = [
        o2s_case("pc_steps", "piecewise_constant",
                 {"learning_rate": 0.1, "boundaries": [5, 10, 15],
                  "decay_rates": [0.5, 0.1, 0.01]}, 20),
        o2s_case("pc_steps_explicit_zero", "piecewise_constant",
                 {"learning_rate": 0.1, "boundaries": [5, 10, 15],
                  "decay_rates": [0.5, 0.1, 0.01], "steps_per_epoch": 0}, 20,
                 steps_per_epoch=7),
        o2s_case("pc_epochs_from_run", "piecewise_constant",
                 {"learning_rate": 0.3, "boundaries": [2, 4], "decay_rates": [0.1, 0.01]}, 15,
                 steps_per_epoch=3),
        o2s_case("pc_epochs_param", "piecewise_constant",
                 {"learning_rate": 1.0, "boundaries": [1, 3], "decay_rates": [0.25, 0.5],
                  "steps_per_epoch": 4}, 16),
        o2s_case("exp_smooth", "exp_decay",
                 {"learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5,
                  "use_staircase_decay": False}, 30),
        o2s_case("exp_staircase_begin_min", "exp_decay",
                 {"learning_rate": 0.1, "decay_steps": 4, "decay_rate": 0.7,
                  "use_staircase_decay": True, "begin_decay_at": 5, "min_lr": 0.02}, 30),
        o2s_case("exp_auto_decay_steps", "exp_decay",
                 {"learning_rate": 0.05, "decay_rate": 0.1, "use_staircase_decay": False}, 25,
                 max_steps=20),
        o2s_case("poly_power2", "poly_decay",
                 {"learning_rate": 0.1, "decay_steps": 20, "power": 2.0, "min_lr": 0.001}, 30),
        o2s_case("poly_warmup_auto", "poly_decay",
                 {"learning_rate": 0.2, "warmup_steps": 5}, 30, max_steps=25),
        o2s_case("poly_warmup_begin", "poly_decay",
                 {"learning_rate": 0.2, "warmup_steps": 3, "begin_decay_at": 8, "power": 0.5,
                  "decay_steps": 12, "min_lr": 0.01}, 25),
        o2s_case("cos_plain", "cosine_decay",
                 {"learning_rate": 0.1, "decay_steps": 20}, 25),
        o2s_case("cos_warmup_alpha_auto", "cosine_decay",
                 {"learning_rate": 0.4, "warmup_steps": 5, "begin_decay_at": 7, "min_lr": 0.1},
                 40, max_steps=30),
        o2s_case("tr_plain", "transformer_policy",
                 {"learning_rate": 2.0, "d_model": 512, "warmup_steps": 10}, 40),
        o2s_case("tr_cap_coef", "transformer_policy",
                 {"learning_rate": 1.0, "d_model": 64, "warmup_steps": 8, "max_lr": 0.02,
                  "coefficient": 1.5}, 40),
        o2s_case("ipd_power1", "inv_poly_decay",
                 {"learning_rate": 0.1, "min_lr": 0.001, "decay_steps": 20}, 30),
        o2s_case("ipd_power2_auto", "inv_poly_decay",
                 {"learning_rate": 0.1, "min_lr": 0.01, "power": 2.0}, 30, max_steps=15),
        o2s_case("ipd_min_lr_clamped_low", "inv_poly_decay",
                 {"learning_rate": 0.1, "min_lr": 0.0, "decay_steps": 10}, 15),
        o2s_case("ipd_min_lr_clamped_high", "inv_poly_decay",
                 {"learning_rate": 0.1, "min_lr": 0.5, "decay_steps": 10}, 15),
        one_cycle_case("oc_default", {"max_lr": 0.1}, 50),
        one_cycle_case("oc_linear", {"max_lr": 0.5, "anneal_strategy": "linear",
                                     "pct_start": 0.25, "div_factor": 10.0,
                                     "final_div_factor": 100.0}, 40),
        one_cycle_case("oc_three_phase", {"max_lr": 0.1, "three_phase": True}, 60),
        one_cycle_case("oc_three_phase_linear_total", {"max_lr": 0.3, "three_phase": True,
                                                       "anneal_strategy": "linear",
                                                       "pct_start": 0.4, "total_steps": 37}, 0),
    ]
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    path = os.path.join(HERE, "lr_policies.json")
    with open(path, "w") as f:
        json.dump({"generator": "tests/golden/gen_lr_policies.py", "torch": torch.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
