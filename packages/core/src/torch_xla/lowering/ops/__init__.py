"""One module per op group; each registers its lowerings with `registry.register`."""
