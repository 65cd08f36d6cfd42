"""Building matrix cells in builder containers: the engine (engine), builder images
(images), the typed request a container gets (build_request), one cell's build (cell),
what it is made from (inputs), the pool of a kernel's cells (pool), the `shell` command's
container (shell), and reading back what a container wrote, never following links out of it
(container_output). Which cells run, kernel by kernel, is running/cells.py's."""
