"""Peak memory per role against the vocabulary size: the vocabulary-chunked forward (now) and the unchunked
[positions, vocabulary] computation it replaced (written out here, as the removed code ran it).

Each measurement runs in a fresh Python process (`measure`), so no allocator state or earlier peak leaks
between them: the process builds a random Qwen2-shaped model (hidden 256, 2 layers, tied embeddings, the
given vocabulary; a second copy as the frozen reference where the role needs one) and a batch of `rows`
rows of 64 prompt + `response` response tokens, resets the kernel's peak-RSS mark (`/proc/self/clear_refs`,
falling back to `getrusage`'s lifetime maximum where that is not allowed), runs the role once and reports
the peak resident set. torch's CPU allocations go through malloc, so RSS sees them all (tracemalloc would
not); glibc is told to map every block of 1 MiB or more on its own, so freed tensors leave the resident set.

Roles (what one worker does with the batch):
- `train`: the actor's forward + backward of log-probs and entropy (the train step, without the optimiser);
- `train_kl`: the same with the exact KL(ref || pi) in the loss (kl_penalty full_forward), with grad;
- `reference`: the reference's log-probs of the response tokens, no grad;
- `exact_kl`: the experience step's exact KL of the actor against the reference, no grad.

`params` is what the process holds for the models themselves: every model's parameters, plus the actor's
gradients for the train roles; `peak - params` is the rest (the Python / torch runtime, activations,
logits). Run it through `memory_table.py` or `test_bench_memory.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROLES = ("train", "train_kl", "reference", "exact_kl")
PATHS = ("chunked", "unchunked")
PROMPT = 64
HIDDEN, LAYERS, INTERMEDIATE = 256, 2, 704


@dataclass(frozen=True)
class Measurement:
    """One role on one batch in a fresh process (MiB)."""

    role: str
    path: str
    vocab: int
    rows: int
    response: int
    peak_mib: float  # peak resident set while the role ran
    before_mib: float  # resident set just before it ran
    params_mib: float  # the models' parameters (+ the actor's gradients for the train roles)
    grads_mib: float  # the actor's gradients, allocated while the role ran (train roles; else 0)
    seconds: float
    hwm_reset: bool  # True: peak of the role alone; False: the process's lifetime peak (getrusage)

    @property
    def rest_mib(self) -> float:
        """Peak minus the parameter memory: the runtime, activations and logits."""
        return self.peak_mib - self.params_mib

    @property
    def activations_mib(self) -> float:
        """What the role added at its peak on top of what was resident, less the gradients it allocated."""
        return self.peak_mib - self.before_mib - self.grads_mib


def measure(
    role: str, path: str, vocab: int, rows: int, response: int = 256, threads: int = 2
) -> Measurement:
    """Run one measurement in a fresh Python process; raises with its stderr when it fails."""
    if role not in ROLES or path not in PATHS:
        raise ValueError(f"Expected role in {ROLES} and path in {PATHS}, got {role!r} and {path!r}.")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20), "OMP_NUM_THREADS": str(threads)}
    args = json.dumps({"role": role, "path": path, "vocab": vocab, "rows": rows, "response": response})
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), args], capture_output=True, text=True, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory measurement {args} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return Measurement(**json.loads(out.stdout.strip().splitlines()[-1]))


# ----------------------------------------------------------------------------- inside the fresh process
def status_mib(key: str) -> float:
    """VmRSS / VmHWM (peak RSS) of this process from /proc/self/status (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}; this benchmark needs Linux")


def reset_peak(required: bool = False) -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM, Linux >= 4.0) to the current RSS, so the next peak is its own;
    False where it cannot be (`required`: raise instead)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        if required:
            raise
        return False


def _peak_mib(reset: bool) -> float:
    import resource

    return status_mib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _model(vocab: int, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
    )
    return Qwen2ForCausalLM(config).float()


def _batch(vocab: int, rows: int, response: int):
    import torch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, PROMPT + response), generator=gen)
    mask = torch.ones_like(ids)
    needed = torch.zeros_like(ids, dtype=torch.bool)
    needed[:, PROMPT:] = True
    adv = torch.randn(ids.shape, generator=gen)
    return {"input_ids": ids, "attention_mask": mask, "response_mask": needed, "adv": adv}


def _unchunked_logits(model, b):
    """[N, V] float32 logits at the response positions, as the removed `forward._padded` built them: the
    model's own logits from the first response column on (`logits_to_keep`), read at each position."""
    from roll_strategies.compute.logprobs import position_ids_from_mask

    ids, mask, needed = b["input_ids"], b["attention_mask"], b["response_mask"]
    rows, cols = needed.nonzero(as_tuple=True)
    keep = ids.shape[1] - (int(cols.min()) - 1)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), logits_to_keep=keep
    ).logits
    return out[rows, cols - 1 - (ids.shape[1] - keep)].float(), ids[rows, cols]


def _unchunked(role: str, model, ref, b) -> None:
    """The removed code path of `role`: whole [N, V] logits and log-softmaxes."""
    import torch
    from roll_algos import entropy_from_logits

    if role in ("reference", "exact_kl"):
        with torch.no_grad():
            logits, targets = _unchunked_logits(model, b)
            logp = torch.log_softmax(logits, -1)
            if role == "reference":
                logp.gather(-1, targets[:, None])
                return
            del logits
            # the old experience step: both [N, V] log-softmaxes on the driver, then token_kl's exact sum
            q_logits, _ = _unchunked_logits(ref, b)
            logq = torch.log_softmax(q_logits, -1)
            del q_logits
            p, q = torch.log_softmax(logp, -1), torch.log_softmax(logq, -1)  # full_kl_from_logits
            (q.exp() * (q - p)).sum(-1)
            logq.gather(-1, targets[:, None])  # log_probs_at
        return
    ref_full = None
    if role == "train_kl":  # shipped to the train worker as the micro-batch's [N, V] input
        with torch.no_grad():
            ref_full = torch.log_softmax(_unchunked_logits(ref, b)[0], -1)
    logits, targets = _unchunked_logits(model, b)
    logp = torch.log_softmax(logits, -1)
    m = b["response_mask"]
    adv = b["adv"][m]
    loss = -(logp.gather(-1, targets[:, None])[:, 0] * adv).mean() - 0.01 * entropy_from_logits(logits).mean()
    full_kl = None
    if ref_full is not None:  # the old strategy built both directions; the micro-batch kept both alive
        full_kl = (logp.exp() * (logp - ref_full)).sum(-1)
        loss = loss + (ref_full.exp() * (ref_full - logp)).sum(-1).mean()
    loss.backward()
    del full_kl


def _chunked(role: str, model, ref, b) -> None:
    """The role as the strategies now run it (`roll_strategies.compute.forward` / `logprobs`)."""
    from roll_strategies.compute.forward import lm_outputs, reference_kl
    from roll_strategies.compute.recompute import batched_log_probs

    rows = b["input_ids"].shape[0]
    if role == "reference":
        batched_log_probs(model, b, rows, device="cpu")
        return
    if role == "exact_kl":
        reference_kl(model, ref, b, rows, device="cpu")
        return
    m = b["response_mask"]
    out = lm_outputs(
        model,
        b["input_ids"],
        b["attention_mask"],
        m,
        with_entropy=True,
        reference=ref if role == "train_kl" else None,
    )
    loss = -(out.log_probs * b["adv"])[m].mean() - 0.01 * out.entropy[m].mean()
    if out.full_kl_forward is not None:
        loss = loss + out.full_kl_forward[m].mean()
    loss.backward()


def _child(args: dict) -> dict:
    import gc

    import roll_strategies.compute.forward  # noqa: F401  (imported before the baseline is read)
    import torch
    from roll_algos import entropy_from_logits  # noqa: F401

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    role, path = args["role"], args["path"]
    model = _model(args["vocab"], seed=0)
    ref = _model(args["vocab"], seed=1).requires_grad_(False) if role in ("train_kl", "exact_kl") else None
    if role in ("reference", "exact_kl"):
        model.requires_grad_(False)
    b = _batch(args["vocab"], args["rows"], args["response"])
    models = [model] if ref is None else [model, ref]
    params = sum(p.numel() * p.element_size() for m in models for p in m.parameters())
    grads = 0
    if role in ("train", "train_kl"):  # the actor's gradients (the reference has none)
        grads = sum(p.numel() * p.element_size() for p in model.parameters())
    gc.collect()
    before = status_mib("VmRSS")
    reset = reset_peak()
    t = time.perf_counter()
    (_chunked if path == "chunked" else _unchunked)(role, model, ref, b)
    seconds = time.perf_counter() - t
    return {
        **args,
        "peak_mib": _peak_mib(reset),
        "before_mib": before,
        "params_mib": (params + grads) / 2**20,
        "grads_mib": grads / 2**20,
        "seconds": seconds,
        "hwm_reset": reset,
    }


def measurements_as_dicts(results: list[Measurement]) -> list[dict]:
    """Plain dicts (with `rest_mib`), for JSON."""
    return [{**asdict(r), "rest_mib": r.rest_mib, "activations_mib": r.activations_mib} for r in results]


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
