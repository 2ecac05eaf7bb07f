"""Inference with torch's transformer modules in eval mode, where torch takes its fused
fast path: batches/s of an `nn.TransformerEncoder` (4 layers, d_model 256, 8 heads,
feed-forward 1024, batch 8 x 128 tokens) on the xla device, each batch ending in a
sync, beside eager PyTorch on the CPU; with and without a key padding mask (with one,
the encoder runs its layers on a nested tensor).

    python bench/transformer_eval.py [--windows 5] [--batches 10]

Prints the median of the windows' rates and the ops the engine ran on the CPU
(`met.executed_fallback_ops()`; the padding mask's left-alignment check is a host read,
counted as `aten::_local_scalar_dense`).
"""

from __future__ import annotations

import argparse

import torch
from common import median_rate
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    device = torch_xla.device()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 4).eval()
    x = torch.randn(8, 128, 256)
    lengths = torch.randint(64, 129, (8,))
    padding = torch.arange(128)[None, :] >= lengths[:, None]
    xla_encoder = nn.TransformerEncoder(layer, 4).eval()
    xla_encoder.load_state_dict(encoder.state_dict())
    xla_encoder.to(device)
    for masked in (False, True):
        for where, model, inputs, sync in (
                ("eager CPU", encoder, (x, padding), lambda: None),
                ("xla", xla_encoder, (x.to(device), padding.to(device)), xm.mark_step)):
            kwargs = {"src_key_padding_mask": inputs[1]} if masked else {}

            def batch(model=model, inputs=inputs, kwargs=kwargs, sync=sync):
                with torch.no_grad():
                    out = model(inputs[0], **kwargs)
                sync()
                return out

            for _ in range(3):
                batch()
            met.clear_all()
            rate = median_rate(batch, xm.wait_device_ops, args.windows, args.batches)
            print(f"{'padding mask' if masked else 'no mask':13s} {where:10s} "
                  f"{rate:7.1f} batches/s   ran on the CPU: "
                  f"{sorted(set(met.executed_fallback_ops())) or 'nothing'}")


if __name__ == "__main__":
    main()
