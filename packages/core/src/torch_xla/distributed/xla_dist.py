"""`python -m torch_xla.distributed.xla_dist`: PyTorch/XLA's XRT pod launcher, retired.

XRT needed this launcher to start a server on every host of a pod. PJRT needs
none: every host runs the training script itself, and the hosts find each other
through the plugin (TPU metadata) or torchrun's variables. Running this module
explains that and exits with status 2, so old launch scripts fail loudly instead of
silently training on one host.
"""

from __future__ import annotations

import shlex
import sys

EXIT_STATUS = 2


def message(argv: list[str]) -> str:
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    script = shlex.join(command) if command else "python3 your_script.py"
    return (
        "torch_xla.distributed.xla_dist started XRT servers on every host of a pod; XRT is "
        "gone and PJRT needs no launcher.\n"
        "Run the same command on every host instead, with PJRT_DEVICE set to your device "
        "type:\n"
        f"  PJRT_DEVICE=<device type> {script}\n"
        "started on all hosts at once by your cluster's tool (each plugin's README shows "
        "the command for its pods), or, on hosts you start yourself, torchrun on each:\n"
        f"  PJRT_DEVICE=<device type> torchrun --nnodes=$HOSTS --node_rank=$RANK "
        f"--master_addr=$FIRST_HOST --master_port=12355 {script}\n"
        "Inside the script, xmp.spawn / torch_xla.launch start one process per local device."
    )


def main(argv: list[str] | None = None) -> int:
    print(message(sys.argv[1:] if argv is None else argv), file=sys.stderr)
    return EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main())
