"""The CUDA path of the hf backend, on a GPU machine with torch and transformers (no vLLM, no
network): run by ``benchmarks/gpu_check.sh``, which prints this script's one table.

1. A 3-step training run of grpo, ada-pos and ada-balance on the built-in tiny model with
   ``backend = "hf"``, ``device = "cuda"`` (policy update and generation on the GPU); the rows
   give the mean step time split and say whether every step's metrics are finite.
2. Generation and update throughput of a randomly initialised Qwen2 of about 0.5B parameters
   (Qwen2.5-0.5B's shape, built from a config: nothing is downloaded): sampled tokens/s of the
   hf backend's batched ``generate``, and trained tokens/s of one ``update_policy`` call
   (forward, backward and AdamW, fp32 weights as in training).

    python benchmarks/gpu_check.py [--model DIR] [--steps 3] [--gen-batch 256] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Qwen2.5-0.5B's shape (about 494M parameters with tied embeddings).
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 max_position_embeddings=4096, tie_word_embeddings=True)


def tiny_runs(model_dir: str, steps: int, device: str) -> list[tuple[str, str, str]]:
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    rows = []
    for algorithm in ("grpo", "ada-pos", "ada-balance"):
        config = TrainConfig(algorithm=algorithm, model=model_dir, backend="hf", device=device,
                             batch_size=32, total_steps=steps, lr=2e-4, save_every=0,
                             eval_every=0, seed=0).validate()
        prompts, _ = resolve_prompts(config)
        rec = ListRecorder()
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            train(config, prompts, make_backend(config, prompts), rec, out_dir=out)
        wall = time.perf_counter() - t0
        ms = [s.metrics for s in rec.steps]
        finite = all(math.isfinite(v) for m in ms for v in m.values())
        mean = {k: sum(m[k] for m in ms) / len(ms) for k in ("time_generation", "time_update",
                                                           "time_step", "samples",
                                                           "real_reward")}
        rows.append((f"tiny {algorithm}, {len(ms)} steps on {device}",
                     f"{mean['time_step']:.3f} s/step (generation {mean['time_generation']:.3f}"
                     f", update {mean['time_update']:.3f}); {mean['samples']:.0f} samples/step",
                     f"{'ok' if finite and len(ms) == steps else 'FAIL'}; reward "
                     f"{mean['real_reward']:.2f}; {wall:.1f} s wall"))
    return rows


def qwen_05b(gen_batch: int, new_tokens: int, prompt_len: int, update_batch: int,
             micro: int, device: str, layers: int) -> list[tuple[str, str, str]]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.config import TrainConfig
    from trainer.update import UpdateBatch, make_optimizer, update_policy

    torch.manual_seed(0)
    cfg = Qwen2Config(**{**QWEN2_05B, "num_hidden_layers": layers}, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg).to(device, dtype=torch.float32)
    cuda = device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def peak() -> str:
        return f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else "cpu"

    params = sum(p.numel() for p in model.parameters())
    model.generation_config.eos_token_id = None  # random weights: no early stop, fixed length
    prompts = torch.randint(3, cfg.vocab_size, (gen_batch, prompt_len), device=device)
    rows = []

    def timed(fn):  # one warm-up, then one timed call
        fn()
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        return out, time.perf_counter() - t0

    with torch.no_grad():
        gen = lambda: model.generate(  # noqa: E731
            input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
            temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens,
            min_new_tokens=new_tokens, pad_token_id=0)
        out, sec = timed(gen)
    made = (out.shape[1] - prompt_len) * gen_batch
    rows.append((f"Qwen2 {params / 1e6:.0f}M random, hf generate fp32",
                 f"{made / sec:,.0f} tokens/s ({gen_batch} x {new_tokens} new tokens in "
                 f"{sec:.2f} s)", peak()))

    config = TrainConfig(lr=1e-6, batch_size=update_batch, ppo_mini_batch_size=0, ppo_epochs=1,
                         entropy_coef=0.0)
    opt, sched = make_optimizer(model, config)
    resp = out[:update_batch, prompt_len:].tolist()
    batch = UpdateBatch([p.tolist() for p in prompts[:update_batch]], resp,
                        [1.0 if i % 2 else -1.0 for i in range(update_batch)],
                        list(range(update_batch)), [None] * update_batch)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    metrics, sec = timed(lambda: update_policy(model, opt, sched, batch, config, pad_token_id=0,
                                               micro_batch_size=micro))
    trained = sum(len(r) for r in resp)
    rows.append((f"Qwen2 {params / 1e6:.0f}M random, update_policy fp32 + AdamW",
                 f"{trained / sec:,.0f} tokens/s ({update_batch} responses x {new_tokens} "
                 f"tokens, micro-batch {micro}, {sec:.2f} s)",
                 f"grad norm {metrics['grad_norm']:.3g}; {peak()}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--update-batch", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to smoke-test this script "
                    "with small sizes")
    ap.add_argument("--layers", type=int, default=QWEN2_05B["num_hidden_layers"],
                    help="layers of the 0.5B-shaped model (fewer: a smaller smoke test)")
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: CUDA is not available here")
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    rows = [("device", name, f"torch {torch.__version__}, CUDA {torch.version.cuda}")]
    rows += tiny_runs(args.model, args.steps, args.device)
    rows += qwen_05b(args.gen_batch, args.new_tokens, args.prompt_len, args.update_batch,
                     args.micro_batch, args.device, args.layers)
    print("| check | result | notes |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
