"""What bench_gpu.py and profile_gpu.py share: the sizes, the training step and the decoding call they measure, and
the device's clock (a synchronisation before each reading)."""

import gc
import time

import torch

from hf_simple_attn.recipes.sizes import SIZES

import common


# The Transformer-base of "Attention is all you need" with a 32k vocabulary; `tiny` and others for smoke runs.
GPU_SIZES = {"transformer-base": dict(d_model=512, layers=6, heads=8, ffn_dim=2048, vocab_size=32000), **SIZES}


def describe(error: Exception) -> str:
    """An error as recorded in the JSON (compilers' messages can run to pages)."""
    return f"{type(error).__name__}: {error}"[:1000]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    """Free the device memory of the models no longer used (dynamo's compiled code holds on to its models)."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Trainer:
    """One model on the device, its fused AdamW, and a training step under bf16 autocast."""

    def __init__(self, model, args, device: torch.device):
        # What the device held before this model (earlier models not yet freed): not part of its peak.
        self.held_before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.model = model.to(device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.args, self.device = args, device
        self.train_batch = self.make_batch(args.batch_size)

    def make_batch(self, sentences: int) -> dict:
        generator = torch.Generator().manual_seed(sentences)
        vocab_size = self.model.config.vocab_size
        ids = torch.randint(2, vocab_size - 1, (sentences, self.args.source_length), generator=generator)
        labels = torch.randint(2, vocab_size - 1, (sentences, self.args.target_length), generator=generator)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return {key: value.to(self.device) for key, value in batch.items()}

    def step(self, batch: dict, compiled=None) -> None:
        """One optimizer step, with the `compiled` model when given (it shares the eager model's parameters)."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = (self.model if compiled is None else compiled)(**batch).loss
        loss.backward()
        self.optimizer.step()

    def stepper(self, compiled=None):
        """A function that takes one step on the training batch and waits for the device, as a clock sees it."""

        def run():
            self.step(self.train_batch, compiled)
            synchronize(self.device)

        return run

    def peak_bytes(self, sentences: int) -> int | None:
        """Peak memory of one step of `sentences` sentences: this model's parameters, AdamW state, gradients and
        activations (not what the device held before the model); None when the device ran out of memory."""
        self.optimizer.zero_grad(set_to_none=True)
        batch = self.make_batch(sentences)
        if self.device.type != "cuda":
            state = [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
            held = common.tensor_bytes([*self.model.parameters(), *self.model.buffers(), *state, *batch.values()])
            return held + common.peak_tensor_bytes(lambda: self.step(batch))
        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            self.step(batch)
            synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.held_before
        except torch.OutOfMemoryError:
            pass
        # Out of memory: free what the failed step left, which its traceback held until the except clause ended.
        self.optimizer.zero_grad(set_to_none=True)
        free_memory(self.device)
        return None


def timed(function, device: torch.device) -> float:
    """Wall seconds of `function()`, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def decoder(model, batches: list[torch.Tensor], num_beams: int, args, device: torch.device, options: dict):
    """A function that decodes each batch of `batches` with `generate` (`options` added), waits for the device and
    returns the output ids."""
    lengths = common.exact_length(args.new_tokens)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            outputs = [
                model.generate(
                    input_ids=batch,
                    attention_mask=torch.ones_like(batch),
                    num_beams=num_beams,
                    do_sample=False,
                    **lengths,
                    **options,
                )
                for batch in batches
            ]
        synchronize(device)
        return torch.cat(outputs)

    return run


def device_description(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": device.type, "name": common.cpu_model()}
    properties = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "name": properties.name,
        "memory_bytes": properties.total_memory,
        "capability": f"{properties.major}.{properties.minor}",
        "cuda": torch.version.cuda,
    }
