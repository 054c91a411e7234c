"""Golden values for rig's loss scalers and LARC (tests/golden/loss_scaling_larc.json).

Transcribed from NVIDIA/OpenSeq2Seq (TensorFlow is not needed), in float64:
- open_seq2seq/optimizers/automatic_loss_scaler.py: BackoffScaler and
  LogMaxScaler, their defaults, initial scales and update_op rules. The graph
  reads Backoff's iteration counter before its increment. One deviation, also
  in rig: LogMax ignores a step whose max |gradient| is 0 (log2(0) = -inf would
  turn its moments into NaN for good).
- open_seq2seq/optimizers/optimizers.py, post_process_gradients: the LARC
  trust ratio per variable, clip and scale modes.

Run: /usr/bin/python3 tests/golden/gen_loss_scaling_larc.py

Format: {"generator", "loss_scaling": [{"name", "algorithm", "params",
"overflow": [bool per step], "amax": [float per step; ignored where overflow],
"scale": [the scale after each step's update]}], "larc": [{"name", "params"
(larc_params), "lr", "parameters": [{"name", "shape", "values", "grads",
"expected"}]}]}.
"""
import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def clip(x, low, high):
    return min(max(x, low), high)


class Backoff:
    def __init__(self, params):
        self.scale_min = params.get("scale_min", 1.0)
        self.scale_max = params.get("scale_max", 2.0**24)
        self.step_factor = params.get("step_factor", 2.0)
        self.step_window = params.get("step_window", 2000)
        self.iteration = 0
        self.last_overflow_iteration = -1
        self.scale = self.scale_max

    def update(self, overflow, amax):
        if overflow or math.isinf(amax):
            self.scale = clip(self.scale / self.step_factor, self.scale_min, self.scale_max)
            self.last_overflow_iteration = self.iteration
        elif (self.iteration - self.last_overflow_iteration) % self.step_window == 0:
            self.scale = clip(self.scale * self.step_factor, self.scale_min, self.scale_max)
        self.iteration += 1


class LogMax:
    def __init__(self, params):
        self.scale_min = params.get("scale_min", 1.0)
        self.scale_max = params.get("scale_max", 2.0**24)
        self.log_max = params.get("log_max", 16.0)
        self.beta1 = params.get("beta1", 0.99)
        self.beta2 = params.get("beta2", 0.999)
        self.overflow_std_dev = params.get("overflow_std_dev", 3.09)
        self.iteration = 0
        self.scale = 1.0
        self.x_hat = 0.0
        self.slow_x_hat = 0.0
        self.xsquared_hat = 0.0
        self.b1_correction = 1.0
        self.b2_correction = 1.0

    def update(self, overflow, amax):
        self.iteration += 1
        nonfinite = overflow or not math.isfinite(amax)
        if not nonfinite and amax == 0.0:  # rig's guard, see the module docstring
            return
        x = 2.0**self.log_max if nonfinite else np.log2(amax)
        self.x_hat = self.beta1 * self.x_hat + (1 - self.beta1) * x
        self.b1_correction = self.b1_correction * self.beta1
        mu = self.x_hat / (1 - self.b1_correction)
        self.slow_x_hat = self.beta2 * self.slow_x_hat + (1 - self.beta2) * x
        self.xsquared_hat = self.beta2 * self.xsquared_hat + (1 - self.beta2) * (x * x)
        self.b2_correction = self.b2_correction * self.beta2
        e_xsquared = self.xsquared_hat / (1 - self.b2_correction)
        slow_mu = self.slow_x_hat / (1 - self.b2_correction)
        sigma2 = e_xsquared - slow_mu * slow_mu
        sigma = math.sqrt(max(sigma2, 0.0))
        log_cutoff = sigma * self.overflow_std_dev + mu
        log_difference = 16 - log_cutoff  # a literal 16 in OpenSeq2Seq, not log_max
        self.scale = clip(2.0**log_difference, self.scale_min, self.scale_max)


def scaling_case(name, algorithm, params, overflow, amax):
    scaler = (Backoff if algorithm == "Backoff" else LogMax)(params)
    scales = []
    for o, a in zip(overflow, amax):
        scaler.update(o, math.inf if o else a)
        scales.append(float(scaler.scale))
    return {"name": name, "algorithm": algorithm, "params": params,
            "overflow": [bool(o) for o in overflow], "amax": [float(a) for a in amax],
            "scale": scales}


def loss_scaling_cases():
    rng = np.random.default_rng(4)
    cases = []
    steps = 40
    overflow = [i in (3, 4, 12, 13, 14, 15, 16, 17, 30) for i in range(steps)]
    amax = [float(2.0 ** rng.normal(-6.0, 1.5)) for _ in range(steps)]
    cases.append(scaling_case("backoff_defaults", "Backoff", {}, overflow, amax))
    cases.append(scaling_case(
        "backoff_small_window", "Backoff",
        {"scale_min": 2.0, "scale_max": 1024.0, "step_factor": 3.0, "step_window": 4},
        overflow, amax))
    # Starts at scale_max and backs off below scale_min's clip.
    cases.append(scaling_case(
        "backoff_hits_scale_min", "Backoff",
        {"scale_min": 4.0, "scale_max": 64.0, "step_factor": 2.0, "step_window": 3},
        [i < 8 or i == 20 for i in range(30)], amax[:30]))

    steps = 300
    overflow = [i in (40, 41, 150) for i in range(steps)]
    amax = [float(2.0 ** rng.normal(-8.0, 2.0)) for _ in range(steps)]
    cases.append(scaling_case("logmax_defaults", "LogMax", {}, overflow[:60], amax[:60]))
    no_overflow = [False] * steps
    cases.append(scaling_case("logmax_defaults_no_overflow", "LogMax", {}, no_overflow, amax))
    amax_with_zero = list(amax[:80])
    amax_with_zero[5] = 0.0
    cases.append(scaling_case(
        "logmax_custom", "LogMax",
        {"scale_min": 0.5, "scale_max": 1048576.0, "log_max": 4.0, "beta1": 0.9,
         "beta2": 0.99, "overflow_std_dev": 2.0},
        overflow[:80], amax_with_zero))
    cases.append(scaling_case(
        "logmax_overflow_recovery", "LogMax",
        {"log_max": 3.0, "beta1": 0.5, "beta2": 0.6},
        [i in (10, 11) for i in range(steps)], amax))
    return cases


def larc_case(name, params, lr, parameters):
    eta = params["larc_eta"]
    mode = params.get("larc_mode", "clip")
    min_update = params.get("min_update", 1e-7)
    eps = params.get("epsilon", 1e-7)
    out = []
    for pname, values, grads in parameters:
        v = values.astype(np.float64)
        g = grads.astype(np.float64)
        v_norm = np.linalg.norm(v.reshape(-1))
        g_norm = np.linalg.norm(g.reshape(-1))
        if mode == "clip":
            ratio = min(max(eta * v_norm / (lr * (g_norm + eps)), min_update), 1.0)
        else:
            ratio = max(eta * v_norm / (g_norm + eps), min_update)
        out.append({"name": pname, "shape": list(values.shape),
                    "values": [float(x) for x in values.reshape(-1)],
                    "grads": [float(x) for x in grads.reshape(-1)],
                    "expected": [float(x) for x in (g * ratio).reshape(-1)],
                    "ratio": float(ratio)})
    return {"name": name, "params": params, "lr": lr, "parameters": out}


def larc_cases():
    rng = np.random.default_rng(11)

    def f32(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # weight: large values, small grads (ratio 1 in clip mode); bias: zeros
    # (min_update); scale: small values, large grads (a ratio in between).
    params = [
        ("layer.weight", f32((4, 3), 1.0), f32((4, 3), 0.01)),
        ("layer.bias", np.zeros((4,), np.float32), f32((4,), 0.5)),
        ("norm.scale", f32((5,), 0.05), f32((5,), 2.0)),
    ]
    return [
        larc_case("clip", {"larc_eta": 0.002}, 0.1, params),
        larc_case("clip_min_update", {"larc_eta": 0.001, "larc_mode": "clip",
                                      "min_update": 0.05, "epsilon": 1e-6}, 0.5, params),
        larc_case("scale", {"larc_eta": 0.01, "larc_mode": "scale"}, 0.1, params),
        larc_case("scale_min_update", {"larc_eta": 0.001, "larc_mode": "scale",
                                       "min_update": 0.2}, 0.1, params),
    ]


def main():
    path = os.path.join(HERE, "loss_scaling_larc.json")
    data = {"generator": "tests/golden/gen_loss_scaling_larc.py", "numpy": np.__version__,
            "loss_scaling": loss_scaling_cases(), "larc": larc_cases()}
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(data['loss_scaling'])} loss scaling and {len(data['larc'])} LARC cases "
          f"to {path}")


if __name__ == "__main__":
    main()
