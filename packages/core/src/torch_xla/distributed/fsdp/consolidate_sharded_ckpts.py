"""Consolidate FSDP shard checkpoints from the command line:

    python -m torch_xla.distributed.fsdp.consolidate_sharded_ckpts \\
        --ckpt_prefix /tmp/mnist-fsdp/final_ckpt --ckpt_suffix "_rank-*-of-*.pth"
"""

from __future__ import annotations

import argparse

from torch_xla.distributed.fsdp.state_dict_utils import consolidate_sharded_model_checkpoints


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt_prefix", required=True,
                        help="path of the rank files up to the suffix")
    parser.add_argument("--ckpt_suffix", default="*.pth",
                        help="glob completing the rank files' names (default '*.pth')")
    parser.add_argument("--save_path", default="",
                        help="where to write (default <ckpt_prefix>_consolidated.pth)")
    args = parser.parse_args(argv)
    _, path = consolidate_sharded_model_checkpoints(args.ckpt_prefix, args.ckpt_suffix,
                                                    args.save_path)
    print(f"Consolidated checkpoint saved to {path}")


if __name__ == "__main__":
    main()
