"""Named for imports only: a real data set needs torchvision (run with --fake_data)."""


def __getattr__(name: str):
    raise RuntimeError(f"torchvision.datasets.{name} is not available here: torchvision needs "
                       "a CUDA build of torch; run the upstream file with --fake_data")
