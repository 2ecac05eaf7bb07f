"""The seed MNIST loop trains through the dynamically loaded library like the CPU plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# The single-device loop of PyTorch/XLA's "Running on a Single XLA Device", on
# MNIST-shaped synthetic data (no download); prints the loss of every step.
SEED_LOOP = """
import json
import torch
import torch.nn as nn
import torch.optim as optim
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.testing.models import MNIST  # the example's CNN

torch.manual_seed(0)
generator = torch.Generator().manual_seed(1)
train_loader = [(torch.randn(32, 1, 28, 28, generator=generator),
                 torch.randint(0, 10, (32,), generator=generator)) for _ in range(6)]
lr, momentum = 0.01, 0.5

device = xm.xla_device()
model = MNIST().train().to(device)
loss_fn = nn.NLLLoss()
optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

losses = []
for data, target in train_loader:
  optimizer.zero_grad()
  data = data.to(device)
  target = target.to(device)
  output = model(data)
  loss = loss_fn(output, target)
  loss.backward()

  optimizer.step()
  xm.mark_step()
  losses.append(loss.item())
print(json.dumps({"device": xr.device_type(), "losses": losses}))
"""


def train(pjrt_device: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "TEMPLATE_"))}
    env["PJRT_DEVICE"] = pjrt_device
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SEED_LOOP)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_seed_mnist_loop_matches_the_cpu_plugin():
    template, cpu = train("TEMPLATE"), train("CPU")
    assert (template["device"], cpu["device"]) == ("TEMPLATE", "CPU")
    assert len(template["losses"]) == 6
    for got, want in zip(template["losses"], cpu["losses"], strict=True):
        assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (template, cpu)
    assert template["losses"][-1] < template["losses"][0]  # it learns
