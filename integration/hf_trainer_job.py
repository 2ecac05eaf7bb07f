"""A transformers `Trainer` job for test_hf_trainer.py: a small GPT-2 (built from its
config: no download) trained on random tokens, run as PyTorch/XLA users run it.

    python hf_trainer_job.py OUT_JSON BATCH single     # one process (USE_TORCH_XLA=0: CPU)
    python hf_trainer_job.py OUT_JSON BATCH spawn      # xmp.spawn, one process per device

transformers and accelerate pick the xla device themselves when torch_xla imports
(`is_torch_xla_available`), as they do for PyTorch/XLA. Process 0 writes the logged
losses and gradient norms and the trained weights' file to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def train(index: int, out: str, batch: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=200, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout: no RNG
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)  # its head shares the embedding's weight
    rows = torch.randint(0, 200, (64, 32), generator=torch.Generator().manual_seed(0))

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(rows)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": rows[i], "labels": rows[i]}

    folder = os.path.join(os.path.dirname(out), "trainer")
    args = TrainingArguments(
        output_dir=folder, per_device_train_batch_size=batch, num_train_epochs=2,
        logging_steps=2, save_strategy="no", report_to=[], learning_rate=1e-3,
        use_cpu=os.environ.get("USE_TORCH_XLA") == "0")
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    trainer.save_model(folder)  # on the xla device through xm._maybe_convert_to_cpu
    if args.process_index == 0:
        with open(out, "w") as f:
            json.dump({
                "device": str(args.device), "processes": args.world_size,
                "tied": trainer.model.lm_head.weight is trainer.model.transformer.wte.weight,
                "log": [(h["loss"], h["grad_norm"]) for h in trainer.state.log_history
                        if "loss" in h],
                "weights": os.path.join(folder, "model.safetensors"),
            }, f)


def _spawned(index: int, out: str, batch: int) -> None:
    train(index, out, batch)


if __name__ == "__main__":
    out, batch, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if how == "spawn":
        import torch_xla.distributed.xla_multiprocessing as xmp

        xmp.spawn(_spawned, args=(out, batch))
    else:
        train(0, out, batch)
