"""Linear algebra matches eager torch on the CPU.

XLA compiles these decompositions to calls of the vendor's solver libraries (LAPACK on the
CPU, cuSOLVER on NVIDIA GPUs, ...), which a plugin's library must have registered as custom
calls before the first program runs: a plugin that registers the PJRT library alone gets
"No FFI handler registered for ..." here, and only here.
"""

import pytest
import torch


def spd(n: int) -> torch.Tensor:
    """A well-conditioned symmetric positive definite float32 matrix."""
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    return a @ a.T + n * torch.eye(n)


OPS = {
    "det": lambda a: torch.linalg.det(a),
    "inv": lambda a: torch.linalg.inv(a),
    "solve": lambda a: torch.linalg.solve(a, torch.arange(8.0).reshape(8, 1)),
    "cholesky": lambda a: torch.linalg.cholesky(a),
    "eigvalsh": lambda a: torch.linalg.eigvalsh(a),
    "svdvals": lambda a: torch.linalg.svdvals(a),
    "qr_reconstructs": lambda a: torch.matmul(*torch.linalg.qr(a)),
    "lu_solve": lambda a: torch.linalg.lu_solve(*torch.linalg.lu_factor(a),
                                                torch.ones(8, 2)),
}


def on_device(op, a: torch.Tensor, device) -> torch.Tensor:
    """`op(a)` computed on the device, back on the host. A failure is re-raised without
    its traceback, whose frames would keep the failed graph's tensors alive: every later
    sync (the next tests') would then compile that graph again and fail the same way."""
    try:
        # Host tensors built inside `op` (right-hand sides) follow `a` to the device.
        with torch.device(device):
            return op(a.to(device)).cpu()
    except Exception as error:  # noqa: BLE001 - re-raised with its type and message
        failure = f"{type(error).__name__}: {error}"
    raise AssertionError(f"failed on the device: {failure}")


@pytest.mark.parametrize("name", sorted(OPS))
def test_linalg_matches_eager(device, name):
    op = OPS[name]
    a = spd(8)
    torch.testing.assert_close(on_device(op, a, device), op(a), rtol=1e-4, atol=1e-4)
