"""The live lab's MLP, byte by byte: what PyTorch AMP should allocate for it on the device.

A prediction to set next to the measured peak (see :func:`lab_mlp_memory`);
the lesson's general model of training memory is :mod:`lensa.models.memory`. All
sizes are in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LabArm = Literal["fp32", "fp16", "bf16"]
LAB_ARMS: tuple[LabArm, ...] = ("fp32", "fp16", "bf16")

# Bytes per parameter PyTorch AMP keeps for the whole run: autocast casts per operation and leaves the
# parameters in FP32, so there is no separate master copy and the gradients (.grad) are FP32 too.
LAB_WEIGHT_BYTES = 4
LAB_GRAD_BYTES = 4
LAB_ADAM_BYTES = 8  # torch.optim.Adam's exp_avg and exp_avg_sq, FP32
# torch.optim.Adam's default on CUDA (foreach) builds sqrt(exp_avg_sq) for every parameter at once.
LAB_ADAM_TEMP_BYTES = 4
LAB_SAMPLE_BYTES_PER_COLUMN = 4  # inputs and labels are FP32

# How far torch.cuda.max_memory_allocated may lie from ``peak`` before scripts/gpu_check.py calls the prediction
# wrong: PEAK_TOLERANCE of it either way, and PEAK_SLACK_BYTES more above, for what the phase model leaves out:
# cuBLAS's and cuBLASLt's workspaces (PyTorch's default is up to 32 MiB each on Hopper, allocated through the
# caching allocator and kept, so inside max_memory_allocated) and the allocator's rounding of every block up to
# a multiple of 512 B. Not yet confirmed on a GPU; the lab's caption states the same bound in words.
PEAK_TOLERANCE = 0.05
PEAK_SLACK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class LabMemory:
    """Predicted memory of one arm of the live lab (:func:`lensa.live.compare`), in bytes.

    Model states: ``weights``, ``gradients`` and ``optimizer`` (Adam) for
    ``params`` parameters. Saved for backward, term by term, exactly the
    tensors :attr:`lensa.live.ArmResult.saved_for_backward_bytes` counts:
    ``layer_inputs`` (each Linear layer's input: the batch, then every ReLU
    output, which the ReLU and the next Linear share), ``weight_copies`` (the
    16-bit weights autocast made and matmuls kept), ``loss_inputs`` (FP32
    logits and targets) and ``scaler`` (the FP16 arm's loss scale). ``data``:
    the samples resident on the device; ``in_data`` is the part of the saved
    tensors that are views into those samples (counted by the measurement,
    but not extra memory). ``peak`` is the phase model of
    :func:`lab_mlp_memory`, the prediction for ``torch.cuda.max_memory_allocated``.
    """

    arm: str
    params: int
    weights: int
    gradients: int
    optimizer: int
    layer_inputs: int
    weight_copies: int
    loss_inputs: int
    scaler: int
    data: int
    in_data: int
    peak: int

    @property
    def model_states(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def saved_for_backward(self) -> int:
        """What lensa.live measures as ``saved_for_backward_bytes``."""
        return self.layer_inputs + self.weight_copies + self.loss_inputs + self.scaler

    @property
    def total(self) -> int:
        """The lesson's sum: model states + saved tensors + data, each counted once.

        An upper bound of sorts for the states and activations (the gradients do
        not exist yet while all activations do), but it leaves out temporaries;
        ``peak`` is the better guess for the measured peak.
        """
        return self.model_states + self.saved_for_backward - self.in_data + self.data


def _whole(name: str, value: int, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number >= {low} (got {value!r})")


def lab_mlp_memory(
    width: int,
    depth: int,
    features: int,
    batch_size: int,
    arm: LabArm = "bf16",
    resident_samples: int | None = None,
) -> LabMemory:
    """Predict the live lab's memory for one arm, byte by byte.

    The model is lensa.live's MLP: ``features`` -> ``depth`` x (Linear
    ``width`` + ReLU) -> Linear 1, BCEWithLogitsLoss, Adam; c = 4 bytes for
    "fp32", 2 under autocast ("fp16", "bf16"). With B = ``batch_size``, F =
    ``features``, W = ``width``, L = ``depth``, autograd saves:

    - the first Linear's input, B F c (under autocast its 16-bit copy; in FP32
      the batch itself, a view into the data); no weight: the batch needs no
      gradient, so the first layer's weight is not kept;
    - each ReLU output, B W c, L of them; the next Linear saves the same tensor;
    - under autocast the 16-bit weight of every later Linear, 2 W^2 (L - 1) + 2 W
      (autocast casts every weight and bias per step; the first weight and the
      biases are dropped when the autocast block ends, as no matmul kept them);
    - for the loss, the logits in FP32 and the FP32 targets, 4 B each;
    - FP16 only: GradScaler's 4-byte scale, kept by the ``loss * scale`` product.

    Checked on the CPU against :func:`lensa.live.compare`'s measurement: equal
    to the byte (tests/test_memory_calculators.py).

    ``peak`` predicts ``torch.cuda.max_memory_allocated`` from the second step
    on, on top of ``resident_samples`` x (F + 1) x 4 bytes of data (default:
    one batch; lensa.live keeps its whole training pool and the evaluation set
    on the device, ``cfg.train_batches("cuda") * batch_size + eval_size``
    samples); :func:`_peak_bytes` says how, and what it leaves out.
    """
    for name, value in (("width", width), ("depth", depth), ("features", features), ("batch_size", batch_size)):
        _whole(name, value)
    if arm not in LAB_ARMS:
        raise ValueError(f"arm must be one of {LAB_ARMS}")
    if resident_samples is None:
        resident_samples = batch_size
    _whole("resident_samples", resident_samples, 0)
    b, w = batch_size, width
    autocast = arm != "fp32"
    c = 2 if autocast else 4  # bytes of the compute dtype
    dims = [(features, w)] + [(w, w)] * (depth - 1) + [(w, 1)]  # (in, out) of each Linear
    params = sum(i * o + o for i, o in dims)

    # Saved for backward, per Linear: its input and (autocast, not the first layer) its 16-bit weight.
    inputs = [b * i * c for i, _ in dims]
    copies = [2 * i * o if autocast and k > 0 else 0 for k, (i, o) in enumerate(dims)]
    first_input_in_data = 0 if autocast else inputs[0]  # in FP32 the first input is the batch itself
    loss_inputs = 2 * b * 4  # FP32 logits and targets
    scaler = 4 if arm == "fp16" else 0
    in_data = first_input_in_data + b * 4  # the batch (FP32 arm) and the targets are views into the data
    data = resident_samples * (features + 1) * LAB_SAMPLE_BYTES_PER_COLUMN

    extra = [inputs[k] + copies[k] for k in range(len(dims))]
    extra[0] -= first_input_in_data
    resident = params * (LAB_WEIGHT_BYTES + LAB_ADAM_BYTES) + data
    peak = _peak_bytes(dims, inputs, extra, b, c, autocast, resident, scaler)

    return LabMemory(
        arm=arm,
        params=params,
        weights=params * LAB_WEIGHT_BYTES,
        gradients=params * LAB_GRAD_BYTES,
        optimizer=params * LAB_ADAM_BYTES,
        layer_inputs=sum(inputs),
        weight_copies=sum(copies),
        loss_inputs=loss_inputs,
        scaler=scaler,
        data=data,
        in_data=in_data,
        peak=peak,
    )


def _peak_bytes(
    dims: list[tuple[int, int]],
    inputs: list[int],
    extra: list[int],
    b: int,
    c: int,
    autocast: bool,
    resident: int,
    scaler: int,
) -> int:
    """The largest of three moments of a training step, in bytes.

    ``dims`` are the (in, out) of each Linear, ``inputs`` the bytes of each
    Linear's saved input, ``extra`` what each Linear saves beyond the data
    (input and 16-bit weight), ``b`` the batch, ``c`` the bytes of the compute
    dtype, ``resident`` what lives all step: the FP32 weights, Adam's m and v
    (12 B a parameter) and the data on the device; ``scaler`` GradScaler's
    scale, kept by the ``loss * scale`` product until backward.

    1. end of forward: every saved tensor plus autocast's cached 16-bit copies
       of the first weight and the biases;
    2. backward, layer by layer from the top: the FP32 gradients made so far,
       the saved tensors not yet released, the incoming and outgoing
       activation gradients and the layer's weight gradient (under autocast
       in 16 bits and then in FP32);
    3. the optimizer step: FP32 gradients plus foreach Adam's temporary
       sqrt(v), 8 B a parameter.

    It leaves out the CUDA caching allocator's rounding of every block to a
    multiple of 512 B (it matters for the many small tensors: biases,
    scalars), cuBLAS's workspace, the loss and scale scalars, and any other
    temporary a kernel may allocate; the CUDA context is not in
    ``max_memory_allocated`` at all. Unchecked here (no GPU on the build
    machine), so read it as an estimate.
    """
    params = sum(i * o + o for i, o in dims)
    biases = sum(o for _, o in dims)
    cache_only = 2 * (dims[0][0] * dims[0][1] + biases) if autocast else 0
    end_of_forward = resident + sum(extra) + b * 4 + scaler + cache_only  # + the FP32 logits
    backward = _backward_moments(dims, inputs, extra, b, c, autocast, resident)
    step = resident + params * (LAB_GRAD_BYTES + LAB_ADAM_TEMP_BYTES)
    return max(end_of_forward, *backward, step)


def _backward_moments(
    dims: list[tuple[int, int]], inputs: list[int], extra: list[int], b: int, c: int, autocast: bool, resident: int
) -> list[int]:
    """The bytes held at each moment of backward, walking down from the top layer (see :func:`_peak_bytes`)."""
    moments = []
    grads = 0  # FP32 gradients accumulated so far
    for k in range(len(dims) - 1, -1, -1):
        i, o = dims[k]
        below = sum(extra[:k])  # saved tensors of the layers under this one
        # This layer's input outlives its matmul's backward: ReLU k-1 saved the same tensor. The first
        # layer's input has no ReLU under it, so it goes with the matmul.
        mine = inputs[k] if k else 0
        g_out = b * o * c
        g_in = b * i * c if k else 0  # the batch needs no gradient
        g_w16 = (i * o + o) * c
        moments.append(resident + grads + below + extra[k] + g_out + g_in + g_w16)
        if autocast:  # the 16-bit weight gradient is cast to the FP32 .grad while the 16-bit one still lives
            moments.append(resident + grads + below + mine + g_in + g_w16 + 4 * (i * o + o))
        grads += 4 * (i * o + o)
        if k:  # ReLU backward: its saved output, the incoming gradient and the outgoing one
            moments.append(resident + grads + below + mine + 2 * g_in)
    return moments


def peak_bounds(predicted_peak: int) -> tuple[float, float]:
    """The (lowest, highest) measured peak, in bytes, that agrees with ``predicted_peak`` (see PEAK_TOLERANCE)."""
    return predicted_peak * (1 - PEAK_TOLERANCE), predicted_peak * (1 + PEAK_TOLERANCE) + PEAK_SLACK_BYTES
