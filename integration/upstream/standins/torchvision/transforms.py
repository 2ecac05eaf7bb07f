"""Named for imports only: real transforms need torchvision (run with --fake_data)."""


def __getattr__(name: str):
    raise RuntimeError(f"torchvision.transforms.{name} is not available here: torchvision "
                       "needs a CUDA build of torch; run the upstream file with --fake_data")
